//! The operator's commands of the real binary (server/README.md "Operations"): `backup` while
//! writes run against the live server, `verify`, `restore` into a new directory, then the
//! restored server serving every acknowledged write; `rotate-secret-key` killed with SIGKILL at
//! each of its pause points (`SEED_AGENTS_TEST_PAUSE_AT`, honoured by debug builds), after which
//! every secret still opens; and `doctor` finding what it should.
//!
//! `cargo test -p seed-agents-server --test tests ops:: -- --nocapture` prints the backup's
//! figures (`OPS_SESSIONS` sessions created before it, default 200; `OPS_MEMORY_MIB` memory files
//! of 1 MiB, default none).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seed_agents_protocol::Bytes;
use seed_agents_protocol::generated::{
    CreateAgent, CreateAgentTrigger, CreateSession, GetSession, ReadAgentMemoryFile, SetModelProvider, SetSecret,
    WriteAgentMemoryFile, WriteAgentMemoryFileContent,
};

use crate::support::crash;
use crate::support::fixtures::{custom_provider_config, definition, provider_config, webhook_trigger};
use crate::support::provider::{Fallback, Provider};
use crate::support::webhook;

const SEED: [u8; 32] = [11; 32];
const WRITERS: u32 = 3;

/// Runs the binary with `args` over `data_dir` (no key in the environment unless `key` is given).
async fn run(data_dir: &Path, args: &[&str], key: Option<&str>) -> Output {
    let mut command = Command::new(crate::SERVER_BIN);
    command
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .env_remove("SEED_AGENTS_SECRET_KEY")
        .env_remove("SEED_AGENTS_DATA_DIR")
        .env("RUST_LOG", "warn");
    if let Some(key) = key {
        command.env("SEED_AGENTS_SECRET_KEY", key);
    }
    tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap()
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// `run`, which must succeed; its output.
async fn ok(data_dir: &Path, args: &[&str]) -> String {
    let output = run(data_dir, args, None).await;
    assert!(output.status.success(), "{args:?} failed: {}", text(&output));
    text(&output)
}

fn memory_text(n: usize) -> String {
    format!("note {n}\n").repeat(2000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_under_load_restores_every_acknowledged_write() {
    let (data, logs, backups) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let server = crash::start(crate::SERVER_BIN, data.path(), logs.path(), "live").await;
    let client = crash::client(&server.url, &SEED);
    client.call(SetModelProvider { name: "main".into(), provider: provider_config() }).await.unwrap();
    let agent_id =
        client.call(CreateAgent { client_request_id: None, definition: definition("Kept") }).await.unwrap().agent_id;
    for n in 0..5 {
        let content = WriteAgentMemoryFileContent::String(memory_text(n));
        let path = format!("notes/{n}.md");
        client.call(WriteAgentMemoryFile { agent_id: agent_id.clone(), content, path }).await.unwrap();
    }
    let mib: usize = std::env::var("OPS_MEMORY_MIB").ok().and_then(|n| n.parse().ok()).unwrap_or(0);
    for n in 0..mib {
        let content = WriteAgentMemoryFileContent::Bytes(Bytes(vec![n as u8; 1 << 20]));
        let path = format!("bulk/{n}.bin");
        client.call(WriteAgentMemoryFile { agent_id: agent_id.clone(), content, path }).await.unwrap();
    }
    client
        .call(SetSecret { name: "openai-key".into(), value: Bytes(b"sk-kept".to_vec()), metadata: None })
        .await
        .unwrap();
    let create = {
        let agent_id = agent_id.clone();
        move |title: String| CreateSession {
            agent_id: agent_id.clone(),
            client_request_id: None,
            model_override: None,
            thoroughness: None,
            title: Some(title),
        }
    };
    let before: usize = std::env::var("OPS_SESSIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(200);
    for n in 0..before {
        client.call(create(format!("before-{n}"))).await.unwrap();
    }

    // Writers create sessions against the live server for the whole backup.
    let stop = Arc::new(AtomicBool::new(false));
    let acks: Arc<Mutex<Vec<(String, String, Instant)>>> = Arc::default();
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let (client, stop, acks, create) = (client.clone(), stop.clone(), acks.clone(), create.clone());
            tokio::spawn(async move {
                let mut n = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let title = format!("w{writer}-{n}");
                    let session = client.call(create(title.clone())).await.unwrap();
                    acks.lock().unwrap().push((session.session_id.to_string(), title, Instant::now()));
                    n += 1;
                }
            })
        })
        .collect();
    while acks.lock().unwrap().len() < 20 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let backup = backups.path().join("b1");
    let started = Instant::now();
    let said = ok(data.path(), &["backup", "--to", backup.to_str().unwrap()]).await;
    let took = started.elapsed();
    let during = acks.lock().unwrap().iter().filter(|(_, _, at)| *at >= started).count();
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await.unwrap();
    }
    server.terminate().await;
    let acked: Vec<(String, String, Instant)> = acks.lock().unwrap().clone();
    let acked_before: Vec<_> = acked.iter().filter(|(_, _, at)| *at < started).collect();
    let bytes: u64 = walk_bytes(&backup);
    println!(
        "backup of {} sessions (+{} acknowledged during it, {} in all): {bytes} bytes, {:.3} s; it said: {}",
        before + acked_before.len(),
        during,
        acked.len(),
        took.as_secs_f64(),
        said.trim()
    );
    assert!(said.contains("the backup holds secret.key"), "{said}");
    use std::os::unix::fs::PermissionsExt;
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&backup), 0o700);
    assert_eq!(mode(&backup.join("secret.key")), 0o600);

    let said = ok(data.path(), &["verify", "--from", backup.to_str().unwrap()]).await;
    assert!(said.contains("all 1 stored secrets open"), "{said}");

    // Restore into a new directory, start a server there: every acknowledged write is in it.
    let restored = backups.path().join("restored");
    ok(&restored, &["restore", "--from", backup.to_str().unwrap()]).await;
    let server = crash::start(crate::SERVER_BIN, &restored, logs.path(), "restored").await;
    let client = crash::client(&server.url, &SEED);
    for (session_id, title, _) in &acked_before {
        let found = client
            .call(GetSession { after_seq: None, before_seq: None, limit: None, session_id: session_id.clone().into() })
            .await
            .unwrap_or_else(|error| panic!("session {session_id} acknowledged before the backup is missing: {error}"));
        assert_eq!(found.session.title.as_deref(), Some(title.as_str()));
    }
    for n in 0..5 {
        let file = client
            .call(ReadAgentMemoryFile { agent_id: agent_id.clone(), path: format!("notes/{n}.md") })
            .await
            .unwrap();
        assert_eq!(file.file.content.as_deref(), Some(memory_text(n).as_str()));
    }
    // The restored agent writes into the restored directory, not the original one.
    let path = "after-restore.md".to_owned();
    let content = WriteAgentMemoryFileContent::String("new".into());
    client.call(WriteAgentMemoryFile { agent_id: agent_id.clone(), content, path }).await.unwrap();
    assert!(restored.join("agents").join(agent_id.to_string()).join("memory/after-restore.md").is_file());
    assert!(!data.path().join("agents").join(agent_id.to_string()).join("memory/after-restore.md").exists());
    server.terminate().await;
    let said = ok(&restored, &["doctor"]).await;
    assert!(said.contains("all 1 stored secrets open with the key"), "{said}");

    // A non-empty target is refused; a changed byte fails verification and restore.
    let refused = run(&restored, &["restore", "--from", backup.to_str().unwrap()], None).await;
    assert!(!refused.status.success() && text(&refused).contains("is not empty"), "{}", text(&refused));
    let note = backup.join("agents").join(agent_id.to_string()).join("memory/notes/0.md");
    let mut bytes = std::fs::read(&note).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&note, bytes).unwrap();
    let failed = run(data.path(), &["verify", "--from", backup.to_str().unwrap()], None).await;
    assert!(!failed.status.success(), "{}", text(&failed));
    assert!(text(&failed).contains("notes/0.md does not match its SHA-256"), "{}", text(&failed));
    let elsewhere = backups.path().join("elsewhere");
    let failed = run(&elsewhere, &["restore", "--from", backup.to_str().unwrap()], None).await;
    assert!(!failed.status.success() && !elsewhere.join("seed-agents.sqlite").exists(), "{}", text(&failed));
}

fn walk_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() { walk_bytes(&entry.path()) } else { meta.len() };
    }
    total
}

/// Starts `rotate-secret-key` paused at `point`, waits until it says so, and SIGKILLs it.
async fn rotate_killed_at(data_dir: &Path, point: &'static str) {
    let mut child = Command::new(crate::SERVER_BIN)
        .arg("--data-dir")
        .arg(data_dir)
        .arg("rotate-secret-key")
        .env_remove("SEED_AGENTS_SECRET_KEY")
        .env("SEED_AGENTS_TEST_PAUSE_AT", point)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let said = tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stderr).lines() {
            let line = line.unwrap();
            let paused = line == format!("paused at {point}");
            lines.push(line);
            if paused {
                return Ok(());
            }
        }
        Err(lines.join("\n"))
    })
    .await
    .unwrap();
    if let Err(lines) = said {
        panic!("rotate-secret-key never paused at {point}: {lines}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Sends one webhook call; its status.
async fn deliver(url: &str, trigger_id: &str, secret: &str, id: &str) -> u16 {
    let body = "{}";
    let mut request = seed_agents_sdk::default_http_client()
        .unwrap()
        .post(format!("{url}/api/triggers/{trigger_id}/webhook"))
        .body(body);
    for (name, value) in webhook::signed(secret, id, webhook::now_seconds(), body) {
        request = request.header(name, value);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_killed_anywhere_leaves_every_secret_readable() {
    let (data, logs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let provider = Provider::start().await;
    provider.set_fallback(Fallback::Text("handled".into()));
    let server = crash::start(crate::SERVER_BIN, data.path(), logs.path(), "setup").await;
    let client = crash::client(&server.url, &SEED);
    client
        .call(SetModelProvider { name: "main".into(), provider: custom_provider_config(provider.openai_base()) })
        .await
        .unwrap();
    for n in 0..3 {
        let value = Bytes(format!("secret value {n}").into_bytes());
        client.call(SetSecret { name: format!("secret-{n}"), value, metadata: None }).await.unwrap();
    }
    let agent_id =
        client.call(CreateAgent { client_request_id: None, definition: definition("Hooked") }).await.unwrap().agent_id;
    let trigger = webhook_trigger("Hook", "Called.");
    let created = client.call(CreateAgentTrigger { agent_id, client_request_id: None, trigger }).await.unwrap();
    let (trigger_id, secret) = (created.trigger.id.to_string(), created.webhook_secret.unwrap());
    assert_eq!(deliver(&server.url, &trigger_id, &secret, "setup").await, 202);

    // Refused beside a running server, and with the key in the environment.
    let refused = run(data.path(), &["rotate-secret-key"], None).await;
    assert!(!refused.status.success() && text(&refused).contains("a server is running"), "{}", text(&refused));
    server.terminate().await;
    let refused = run(data.path(), &["rotate-secret-key"], Some(&"ab".repeat(32))).await;
    assert!(!refused.status.success() && text(&refused).contains("SEED_AGENTS_SECRET_KEY"), "{}", text(&refused));
    let said = ok(data.path(), &["doctor"]).await;
    assert!(said.contains("all 4 stored secrets open with the key"), "{said}");

    let key = || std::fs::read(data.path().join("secret.key")).unwrap();
    let points = ["next-written", "resealed", "committed", "next-written", "resealed", "committed"];
    for (round, point) in points.into_iter().enumerate() {
        let before = key();
        rotate_killed_at(data.path(), point).await;
        assert_eq!(key(), before, "secret.key changed before the rename ({point})");
        // Half the rounds recover by starting the server, half by running the command again.
        let by_server = round % 2 == 0;
        if by_server {
            let server = crash::start(crate::SERVER_BIN, data.path(), logs.path(), &format!("round-{round}")).await;
            let call = format!("round-{round}");
            assert_eq!(deliver(&server.url, &trigger_id, &secret, &call).await, 202, "{point}, by the server");
            server.terminate().await;
            assert_eq!(key() != before, point == "committed", "{point}: the rotation finished only once committed");
        } else {
            let said = ok(data.path(), &["rotate-secret-key"]).await;
            let earlier = if point == "committed" { "had committed" } else { "had not committed" };
            assert!(said.contains(earlier), "{point}: {said}");
            assert_ne!(key(), before);
        }
        assert!(!data.path().join("secret.key.next").exists());
        let said = ok(data.path(), &["doctor"]).await;
        assert!(said.contains("all 4 stored secrets open with the key"), "{point}: {said}");
    }
    let server = crash::start(crate::SERVER_BIN, data.path(), logs.path(), "after").await;
    assert_eq!(deliver(&server.url, &trigger_id, &secret, "after").await, 202);
    assert_eq!(
        deliver(&server.url, &trigger_id, "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "bad").await,
        401
    );
    server.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_says_what_to_fix() {
    let (data, logs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let server = crash::start(crate::SERVER_BIN, data.path(), logs.path(), "setup").await;
    let client = crash::client(&server.url, &SEED);
    client.call(SetModelProvider { name: "main".into(), provider: provider_config() }).await.unwrap();
    let agent_id =
        client.call(CreateAgent { client_request_id: None, definition: definition("Checked") }).await.unwrap().agent_id;
    let content = WriteAgentMemoryFileContent::String("x".into());
    client.call(WriteAgentMemoryFile { agent_id: agent_id.clone(), content, path: "a.md".into() }).await.unwrap();
    // Beside a running server: the live checks, and a note instead of the file checks.
    let said = ok(data.path(), &["doctor"]).await;
    assert!(said.contains("a server is running") && said.contains("integrity_check: ok"), "{said}");
    server.terminate().await;
    let said = ok(data.path(), &["doctor"]).await;
    assert!(said.contains("no temp files") && said.contains("has its row"), "{said}");

    use std::os::unix::fs::PermissionsExt;
    let key = data.path().join("secret.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let memory = data.path().join("agents").join(agent_id.to_string()).join("memory");
    std::fs::write(memory.join(".seed-memory-abc123.tmp"), b"half").unwrap();
    std::fs::create_dir_all(data.path().join("uploads")).unwrap();
    std::fs::write(data.path().join("uploads/nobody.part"), b"staged").unwrap();
    std::fs::create_dir_all(data.path().join("agents/gone")).unwrap();
    let failed = run(data.path(), &["doctor"], None).await;
    let said = text(&failed);
    assert_eq!(failed.status.code(), Some(1), "{said}");
    assert!(said.contains("chmod 600"), "{said}");
    assert!(said.contains("1 temp files left by interrupted writes"), "{said}");
    assert!(said.contains("uploads/nobody.part") && said.contains("agents/gone"), "{said}");
    assert!(said.contains("3 problems found"), "{said}");
}
