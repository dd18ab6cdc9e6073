//! Uploads against an app opened directly: expiry with a manual clock, and the property that
//! random begin/append/abort/commit sequences (with crashes and restarts between them) never
//! corrupt a committed file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::db::params;
use proptest::prelude::*;
use seed_agents_protocol::generated::{
    AbortFileUpload, AppendFileUploadChunk, BeginFileUpload, CommitFileUpload, FileUploadTarget, MemoryUploadTarget,
    SessionAttachmentUploadTarget,
};
use seed_agents_protocol::{Bytes, Ed25519Signer, Signer, UploadId};
use sha2::{Digest, Sha256};

use super::sweep::sweep;
use super::*;
use crate::clock::Clock;
use crate::config::Config;
use crate::error::ErrorKind;

struct Fixture {
    dir: PathBuf,
    clock: Clock,
    caller: Caller,
    app: Option<App>,
}

impl Fixture {
    fn new(dir: &Path) -> Self {
        let signer = Ed25519Signer::generate().unwrap();
        let principal = signer.principal();
        let caller = Caller {
            account_id: principal.to_string(),
            signer: principal,
            signer_id: principal.to_string(),
            protocol: seed_agents_protocol::version::AGENTS_PROTOCOL_VERSION,
        };
        let mut fixture = Self { dir: dir.to_owned(), clock: Clock::manual(1_000_000), caller, app: None };
        fixture.open();
        fixture
    }

    fn open(&mut self) {
        let mut config = Config::new(&self.dir, "127.0.0.1:0".parse().unwrap());
        // The random sequences skip ahead on purpose; each such append would wait the grace.
        config.upload_arrival_grace = std::time::Duration::ZERO;
        self.app = Some(App::open(config, self.clock.clone()).unwrap());
    }

    fn restart(&mut self) {
        if let Some(app) = self.app.take() {
            app.db.close();
        }
        self.open();
    }

    fn app(&self) -> &App {
        self.app.as_ref().unwrap()
    }

    fn state_dir(&self) -> PathBuf {
        self.dir.join("agents").join("agent")
    }

    async fn seed_rows(&self) {
        let (account, state_dir) = (self.caller.account_id.clone(), self.state_dir());
        std::fs::create_dir_all(&state_dir).unwrap();
        self.app()
            .db
            .write(move |conn| {
                conn.execute(
                    "INSERT INTO agents (id, account_id, definition_cbor, state_dir, status, created_at, updated_at)
                     VALUES ('agent', ?1, x'', ?2, 'idle', 0, 0)",
                    params![account, state_dir.to_string_lossy()],
                )?;
                conn.execute(
                    "INSERT INTO sessions (id, account_id, agent_id, title_source, status, created_at, updated_at)
                     VALUES ('session', ?1, 'agent', 'system', 'idle', 0, 0)",
                    params![account],
                )?;
                Ok(())
            })
            .await
            .unwrap();
    }
}

fn memory(path: &str) -> FileUploadTarget {
    FileUploadTarget::MemoryUploadTarget(MemoryUploadTarget {
        extra: Default::default(),
        agent_id: "agent".into(),
        path: path.into(),
    })
}

fn attachment() -> FileUploadTarget {
    FileUploadTarget::SessionAttachmentUploadTarget(SessionAttachmentUploadTarget {
        extra: Default::default(),
        mime_type: None,
        name: "upload.bin".into(),
        session_id: "session".into(),
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
fn idle_uploads_expire_and_are_swept() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let fixture = Fixture::new(dir.path());
        fixture.seed_rows().await;
        let (app, caller) = (fixture.app(), &fixture.caller);
        let begun = begin_file_upload(app, caller, BeginFileUpload { size: 4, target: memory("a.txt") }).await.unwrap();
        let id = begun.upload_id;
        let part = staging::part_path(&app.config, &id);
        assert!(part.exists());
        fixture.clock.advance(TTL_MS - 1);
        assert_eq!(sweep(app).await.unwrap(), 0, "not idle long enough yet");
        let append = |offset| AppendFileUploadChunk { content: Bytes(b"ab".to_vec()), offset, upload_id: id.clone() };
        append_file_upload_chunk(app, caller, append(0)).await.unwrap();
        fixture.clock.advance(TTL_MS - 1);
        assert_eq!(sweep(app).await.unwrap(), 0, "an append resets the idle time");
        fixture.clock.advance(2);
        let error = append_file_upload_chunk(app, caller, append(2)).await.unwrap_err();
        assert_eq!(
            (error.kind(), error.message()),
            (ErrorKind::NotFound, "Upload not found"),
            "expired before the sweep"
        );
        assert_eq!(sweep(app).await.unwrap(), 1);
        assert!(!part.exists());
        let error = abort_file_upload(app, caller, AbortFileUpload { upload_id: id.clone() }).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::NotFound);
    });
}

#[derive(Debug, Clone)]
enum Op {
    /// Begin an upload to memory path `p<n>` (n < 2) or, for n = 2, a session attachment.
    Begin {
        target: u8,
        size: u16,
        seed: u8,
    },
    /// Append `len` bytes to the n-th open upload, at the right offset unless `skew` is non-zero.
    Append {
        upload: u8,
        len: u16,
        skew: i8,
    },
    Commit {
        upload: u8,
    },
    Abort {
        upload: u8,
    },
    /// A crash after a chunk reached the staging file but before it was recorded.
    Tear {
        upload: u8,
        junk: u8,
    },
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..3, 1u16..64, any::<u8>()).prop_map(|(target, size, seed)| Op::Begin { target, size, seed }),
        6 => (any::<u8>(), 1u16..40, prop_oneof![4 => Just(0i8), 1 => any::<i8>()])
            .prop_map(|(upload, len, skew)| Op::Append { upload, len, skew }),
        2 => any::<u8>().prop_map(|upload| Op::Commit { upload }),
        1 => any::<u8>().prop_map(|upload| Op::Abort { upload }),
        1 => (any::<u8>(), 1u8..16).prop_map(|(upload, junk)| Op::Tear { upload, junk }),
        1 => Just(Op::Restart),
    ]
}

/// The byte at `index` of an upload made with `seed`.
fn byte(seed: u8, index: usize) -> u8 {
    (index as u8).wrapping_mul(31).wrapping_add(seed).rotate_left(3)
}

fn content(seed: u8, range: std::ops::Range<usize>) -> Vec<u8> {
    range.map(|index| byte(seed, index)).collect()
}

struct Open {
    id: UploadId,
    target: u8,
    size: usize,
    received: usize,
    seed: u8,
}

async fn run(fixture: &mut Fixture, ops: Vec<Op>) {
    let mut open: Vec<Open> = Vec::new();
    let mut committed: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for op in ops {
        let (app, caller) = (fixture.app.as_ref().unwrap(), &fixture.caller);
        let pick = |n: u8, open: &Vec<Open>| (!open.is_empty()).then(|| n as usize % open.len());
        match op {
            Op::Begin { target, size, seed } => {
                let wire_target = if target < 2 { memory(&format!("dir/p{target}.bin")) } else { attachment() };
                let outcome =
                    begin_file_upload(app, caller, BeginFileUpload { size: size.into(), target: wire_target }).await;
                if open.len() >= MAX_ACTIVE_PER_ACCOUNT as usize {
                    assert_eq!(outcome.unwrap_err().kind(), ErrorKind::TooMany);
                } else {
                    let id = outcome.unwrap().upload_id;
                    open.push(Open { id, target, size: size.into(), received: 0, seed });
                }
            }
            Op::Append { upload, len, skew } => {
                let Some(index) = pick(upload, &open) else { continue };
                let upload = &mut open[index];
                let offset = upload.received as i64 + i64::from(skew);
                let len = len as usize;
                let chunk = content(upload.seed, upload.received..upload.received + len);
                let action = AppendFileUploadChunk { content: Bytes(chunk), offset, upload_id: upload.id.clone() };
                let outcome = append_file_upload_chunk(app, caller, action).await;
                if skew != 0 {
                    assert_eq!(outcome.unwrap_err().kind(), ErrorKind::Conflict);
                } else if upload.received + len > upload.size {
                    assert_eq!(outcome.unwrap_err().message(), "Upload exceeds its declared size");
                } else {
                    upload.received += len;
                    assert_eq!(outcome.unwrap().received as usize, upload.received);
                }
            }
            Op::Commit { upload } => {
                let Some(index) = pick(upload, &open) else { continue };
                let action = CommitFileUpload { upload_id: open[index].id.clone() };
                let outcome = commit_file_upload(app, caller, action).await;
                if open[index].received != open[index].size {
                    assert_eq!(outcome.unwrap_err().kind(), ErrorKind::Invalid);
                    continue;
                }
                let done = open.remove(index);
                let bytes = content(done.seed, 0..done.size);
                let response = outcome.unwrap();
                if done.target < 2 {
                    let path = format!("dir/p{}.bin", done.target);
                    assert_eq!(response.entry.unwrap().size as usize, done.size);
                    committed.insert(path, bytes);
                } else {
                    let attachment = response.attachment.unwrap();
                    assert_eq!(attachment.id, format!("{:x}", Sha256::digest(&bytes)));
                    committed.insert(format!("attachment:{}", attachment.id), bytes);
                }
            }
            Op::Abort { upload } => {
                let Some(index) = pick(upload, &open) else { continue };
                let done = open.remove(index);
                abort_file_upload(app, caller, AbortFileUpload { upload_id: done.id.clone() }).await.unwrap();
                let error = commit_file_upload(app, caller, CommitFileUpload { upload_id: done.id }).await.unwrap_err();
                assert_eq!(error.kind(), ErrorKind::NotFound);
            }
            Op::Tear { upload, junk } => {
                let Some(index) = pick(upload, &open) else { continue };
                use std::io::Write as _;
                let part = staging::part_path(&app.config, &open[index].id);
                let mut file = std::fs::OpenOptions::new().append(true).open(part).unwrap();
                file.write_all(&vec![0xEE; junk as usize]).unwrap();
            }
            Op::Restart => fixture.restart(),
        }
        check_committed(fixture, &committed);
    }
}

fn check_committed(fixture: &Fixture, committed: &BTreeMap<String, Vec<u8>>) {
    for (key, expected) in committed {
        let actual = match key.strip_prefix("attachment:") {
            Some(id) => std::fs::read(fixture.dir.join("session-attachments/session").join(format!("{id}.bin"))),
            None => std::fs::read(fixture.state_dir().join("memory").join(key)),
        };
        assert_eq!(&actual.unwrap(), expected, "{key}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_never_corrupt_a_committed_file(ops in proptest::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        runtime().block_on(async {
            let mut fixture = Fixture::new(dir.path());
            fixture.seed_rows().await;
            run(&mut fixture, ops).await;
            if let Some(app) = fixture.app.take() {
                app.db.close();
            }
        });
    }
}
