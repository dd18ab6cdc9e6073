//! Session attachments and chunked uploads through the SDK: happy paths, every limit and message,
//! deletion with the session or agent, and an upload resumed across a server restart.

use seed_agents_protocol::generated::{
    AbortFileUpload, AppendFileUploadChunk, BeginFileUpload, BeginFileUploadResponse, CommitFileUpload, DeleteAgent,
    DeleteSession, FileUploadTarget, MemoryUploadTarget, ReadSessionAttachment, SessionAttachmentUploadTarget,
    SetAgentPublicChat, SetAgentPublicRead, UploadSessionAttachment,
};
use seed_agents_protocol::{Bytes, Ed25519Signer};
use sha2::{Digest, Sha256};
use std::time::Duration;

use crate::support::{TestServer, User, api_error};

const MIB: usize = 1024 * 1024;

async fn agent_and_session(user: &User) -> (seed_agents_protocol::AgentId, seed_agents_protocol::SessionId) {
    let agent_id = user.create_agent("Uploader").await;
    let session_id = user.create_session(&agent_id, None).await;
    (agent_id, session_id)
}

fn upload(session_id: &str, name: &str, mime_type: Option<&str>, content: &[u8]) -> UploadSessionAttachment {
    UploadSessionAttachment {
        content: Bytes(content.to_vec()),
        mime_type: mime_type.map(str::to_owned),
        name: name.into(),
        session_id: session_id.into(),
    }
}

fn read(session_id: &str, attachment_id: &str) -> ReadSessionAttachment {
    ReadSessionAttachment { attachment_id: attachment_id.into(), session_id: session_id.into() }
}

fn memory(agent_id: &str, path: &str) -> FileUploadTarget {
    FileUploadTarget::MemoryUploadTarget(MemoryUploadTarget {
        extra: Default::default(),
        agent_id: agent_id.into(),
        path: path.into(),
    })
}

fn attachment_target(session_id: &str, name: &str) -> FileUploadTarget {
    FileUploadTarget::SessionAttachmentUploadTarget(SessionAttachmentUploadTarget {
        extra: Default::default(),
        mime_type: None,
        name: name.into(),
        session_id: session_id.into(),
    })
}

fn chunk(upload_id: &str, offset: usize, content: &[u8]) -> AppendFileUploadChunk {
    AppendFileUploadChunk { content: Bytes(content.to_vec()), offset: offset as i64, upload_id: upload_id.into() }
}

async fn begin(user: &User, target: FileUploadTarget, size: usize) -> BeginFileUploadResponse {
    user.call(BeginFileUpload { size: size as i64, target }).await.unwrap()
}

fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

#[tokio::test]
async fn attachments_are_stored_by_hash_read_back_and_limited() {
    // Inline bodies up to 128 MiB, so the attachment's own 100 MiB limit is what refuses below
    // (with the default 32 MiB the edge refuses such a body before it is read).
    let server = TestServer::start_with(tempfile::tempdir().unwrap(), |config| {
        config.max_body_bytes = 128 << 20;
        config.body_budget_bytes = 256 << 20;
    })
    .await;
    let user = server.user();
    let (agent_id, session_id) = agent_and_session(&user).await;

    let stored = user.call(upload(&session_id, " ../../photos/cat.PNG ", None, b"meow")).await.unwrap().attachment;
    assert_eq!(stored.id, sha256_hex(b"meow"));
    assert_eq!((stored.name.as_str(), stored.mime_type.as_deref(), stored.size), ("cat.PNG", Some("image/png"), 4));
    assert_eq!(stored.session_id, session_id);
    let dir = server.dir.path().join("session-attachments").join(session_id.as_str());
    assert!(dir.join(format!("{}.bin", stored.id)).is_file());
    assert!(dir.join(format!("{}.json", stored.id)).is_file());

    let again = user.call(upload(&session_id, "other.txt", Some("text/plain"), b"meow")).await.unwrap().attachment;
    assert_eq!(again, stored, "identical bytes answer the existing record, original name and type kept");
    let named = user.call(upload(&session_id, "\u{1}", Some("  "), b"x")).await.unwrap().attachment;
    assert_eq!((named.name.as_str(), named.mime_type), ("file", None));
    let typed = user.call(upload(&session_id, "a", Some(" text/x-own "), b"y")).await.unwrap().attachment;
    assert_eq!(typed.mime_type.as_deref(), Some("text/x-own"));

    let back = user.call(read(&session_id, &stored.id)).await.unwrap();
    assert_eq!((back.attachment, back.data.0), (stored.clone(), b"meow".to_vec()));
    let (status, message) = api_error(user.call(read(&session_id, "../../secret.key")).await);
    assert_eq!((status, message.as_str()), (400, "Invalid attachment id: ../../secret.key"));
    let missing = "a".repeat(64);
    let (status, message) = api_error(user.call(read(&session_id, &missing)).await);
    assert_eq!((status, message), (404, format!("Attachment not found: {missing}")));

    let (status, message) = api_error(user.call(upload(&session_id, "e", None, b"")).await);
    assert_eq!((status, message.as_str()), (400, "Attachment content must be non-empty bytes"));
    let (status, message) = api_error(user.call(upload(&session_id, "big", None, &vec![7; 100 * MIB + 1])).await);
    assert_eq!((status, message.as_str()), (413, "Attachment exceeds the 100 MiB limit"));

    // Invisible sessions look missing; public chat lets a stranger attach and read.
    let stranger = server.user();
    let (status, message) = api_error(stranger.call(upload(&session_id, "x", None, b"z")).await);
    assert_eq!((status, message.as_str()), (404, "Session not found"));
    let (status, _) = api_error(stranger.call(read(&session_id, &stored.id)).await);
    assert_eq!(status, 404);
    user.call(SetAgentPublicRead { agent_id: agent_id.clone(), public_read: true }).await.unwrap();
    assert!(stranger.call(read(&session_id, &stored.id)).await.is_ok(), "a reader reads");
    let (status, message) = api_error(stranger.call(upload(&session_id, "x", None, b"z")).await);
    assert_eq!((status, message.as_str()), (403, "Write access is required"));
    user.call(SetAgentPublicChat { agent_id: agent_id.clone(), public_chat: true }).await.unwrap();
    assert!(stranger.call(upload(&session_id, "x", None, b"from a chatter")).await.is_ok());

    // 200 per session.
    let existing = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "json"))
        .count();
    for n in existing..200 {
        user.call(upload(&session_id, "n", None, format!("file {n}").as_bytes())).await.unwrap();
    }
    let (status, message) = api_error(user.call(upload(&session_id, "n", None, b"one more")).await);
    assert_eq!((status, message.as_str()), (413, "Session already has 200 attachments"));
    server.stop().await;
}

#[tokio::test]
async fn attachments_are_deleted_with_their_session_and_agent() {
    let server = TestServer::start().await;
    let user = server.user();
    let (agent_id, session_id) = agent_and_session(&user).await;
    let root = server.dir.path().join("session-attachments");
    user.call(upload(&session_id, "a.txt", None, b"first")).await.unwrap();
    assert!(root.join(session_id.as_str()).is_dir());
    user.call(DeleteSession { session_id: session_id.clone() }).await.unwrap();
    assert!(!root.join(session_id.as_str()).exists());

    let second = user.create_session(&agent_id, None).await;
    // Attached through a chunked upload this time.
    let begun = begin(&user, attachment_target(&second, "b.md"), 6).await;
    user.call(chunk(&begun.upload_id, 0, b"second")).await.unwrap();
    let attachment = user.call(CommitFileUpload { upload_id: begun.upload_id }).await.unwrap().attachment.unwrap();
    assert_eq!((attachment.name.as_str(), attachment.mime_type.as_deref()), ("b.md", Some("text/markdown")));
    assert!(root.join(second.as_str()).join(format!("{}.bin", attachment.id)).is_file());
    user.call(DeleteAgent { agent_id }).await.unwrap();
    assert!(!root.join(second.as_str()).exists());
    server.stop().await;
}

#[tokio::test]
async fn chunked_uploads_into_memory_check_every_step() {
    let server = TestServer::start().await;
    let user = server.user();
    let (agent_id, session_id) = agent_and_session(&user).await;
    let content: Vec<u8> = (0..20u8).collect();
    let begun = begin(&user, memory(&agent_id, "docs/./data.json"), content.len()).await;
    assert_eq!(begun.max_chunk_bytes, 8 * MIB as i64);
    let id = begun.upload_id.clone();

    let (status, message) = api_error(user.call(chunk(&id, 0, b"")).await);
    assert_eq!((status, message.as_str()), (400, "Chunk content must be non-empty bytes"));
    let (status, message) = api_error(user.call(chunk(&id, 0, &vec![0; 8 * MIB + 1])).await);
    assert_eq!((status, message.as_str()), (413, "Chunk is too large"));
    let received = user.call(chunk(&id, 0, &content[..8])).await.unwrap();
    assert_eq!((received.received, received.upload_id.as_str()), (8, id.as_str()));
    let conflict = user.call(chunk(&id, 4, &content[4..8])).await.unwrap_err();
    // The machine-readable part: the code and the bytes the server holds (the SDK resumes from it).
    assert_eq!(conflict.code(), Some(seed_agents_sdk::ErrorCode::UploadOffsetMismatch));
    assert!(matches!(conflict, seed_agents_sdk::Error::Api { received: Some(8), .. }), "{conflict:?}");
    let (status, message) = api_error(Err::<(), _>(conflict));
    assert_eq!((status, message.as_str()), (409, "Chunk offset 4 does not match 8 bytes received"));
    let (status, message) = api_error(user.call(chunk(&id, 8, &[1; 13])).await);
    assert_eq!((status, message.as_str()), (400, "Upload exceeds its declared size"));
    let (status, message) = api_error(user.call(CommitFileUpload { upload_id: id.clone() }).await);
    assert_eq!((status, message.as_str()), (400, "Upload has 8 of 20 bytes; cannot commit"));
    let other = server.user();
    let (status, message) = api_error(other.call(chunk(&id, 8, &content[8..])).await);
    assert_eq!((status, message.as_str()), (404, "Upload not found"), "another account's upload");

    assert_eq!(user.call(chunk(&id, 8, &content[8..])).await.unwrap().received, 20);
    let entry = user.call(CommitFileUpload { upload_id: id.clone() }).await.unwrap().entry.unwrap();
    assert_eq!(
        (entry.path.as_str(), entry.size, entry.mime_type.as_deref()),
        ("docs/data.json", 20, Some("application/json"))
    );
    let state_dir = server.dir.path().join("agents").join(agent_id.as_str());
    assert_eq!(std::fs::read(state_dir.join("memory/docs/data.json")).unwrap(), content);
    assert!(!server.dir.path().join("uploads").join(format!("{id}.part")).exists());
    let (status, message) = api_error(user.call(CommitFileUpload { upload_id: id.clone() }).await);
    assert_eq!((status, message.as_str()), (404, "Upload not found"), "committed uploads are gone");

    // Abort discards.
    let aborted = begin(&user, memory(&agent_id, "x.bin"), 3).await.upload_id;
    user.call(chunk(&aborted, 0, b"ab")).await.unwrap();
    let response = user.call(AbortFileUpload { upload_id: aborted.clone() }).await.unwrap();
    assert_eq!(response.upload_id, aborted);
    let (status, _) = api_error(user.call(chunk(&aborted, 2, b"c")).await);
    assert_eq!(status, 404);
    assert!(!state_dir.join("memory/x.bin").exists());
    for bogus in ["nope", "../../seed-agents.sqlite", "00000000-0000-0000-0000-000000000000"] {
        let (status, message) = api_error(user.call(AbortFileUpload { upload_id: bogus.into() }).await);
        assert_eq!((status, message.as_str()), (404, "Upload not found"), "{bogus}");
    }
    let (status, message) = api_error(user.call(AbortFileUpload { upload_id: "".into() }).await);
    assert_eq!((status, message.as_str()), (400, "Upload id is required"));

    // Begin refuses what could not be committed.
    let refuse = |target, size| user.call(BeginFileUpload { size, target });
    for (target, size, status, message) in [
        (memory(&agent_id, "a"), 0, 400, "Upload size must be a positive integer"),
        (memory(&agent_id, "a"), -5, 400, "Upload size must be a positive integer"),
        (memory(&agent_id, "a"), (2i64 << 30) + 1, 413, "Upload exceeds the maximum file size"),
        (memory(&agent_id, "../x"), 1, 400, "Memory path cannot contain \"..\""),
        (memory(&agent_id, "a/../../b"), 1, 400, "Memory path cannot contain \"..\""),
        (memory(&agent_id, "/etc/passwd"), 1, 400, "Memory path must be relative"),
        (memory(&agent_id, "docs"), 1, 400, "Memory path is a directory, not a file: docs"),
        (memory("missing-agent", "a"), 1, 404, "Agent not found"),
        (attachment_target(&session_id, "  "), 1, 400, "Attachment name is required"),
        (attachment_target(&session_id, "a"), 100 * MIB as i64 + 1, 413, "Upload exceeds the maximum attachment size"),
        (attachment_target("missing-session", "a"), 1, 404, "Session not found"),
    ] {
        let (got_status, got_message) = api_error(refuse(target, size).await);
        assert_eq!((got_status, got_message.as_str()), (status, message));
    }
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(server.dir.path(), state_dir.join("memory/escape")).unwrap();
        let (status, message) = api_error(refuse(memory(&agent_id, "escape/seed-agents.sqlite"), 1).await);
        assert_eq!((status, message.as_str()), (400, "Memory path is not writable: escape/seed-agents.sqlite"));
        // A symlink planted after begin is refused at commit, and nothing is written through it.
        let begun = begin(&user, memory(&agent_id, "later/f.txt"), 2).await.upload_id;
        user.call(chunk(&begun, 0, b"hi")).await.unwrap();
        std::os::unix::fs::symlink(server.dir.path(), state_dir.join("memory/later")).unwrap();
        let (status, message) = api_error(user.call(CommitFileUpload { upload_id: begun }).await);
        assert_eq!((status, message.as_str()), (400, "Memory path is not writable: later/f.txt"));
        assert!(!server.dir.path().join("f.txt").exists());
    }

    // A reader may not upload into memory; eight open uploads per account.
    user.call(SetAgentPublicRead { agent_id: agent_id.clone(), public_read: true }).await.unwrap();
    let (status, message) = api_error(other.call(BeginFileUpload { size: 1, target: memory(&agent_id, "r") }).await);
    assert_eq!((status, message.as_str()), (403, "Write access is required"));
    for n in 0..8 {
        begin(&user, memory(&agent_id, &format!("many/{n}")), 1).await;
    }
    let (status, message) = api_error(refuse(memory(&agent_id, "many/9"), 1).await);
    assert_eq!((status, message.as_str()), (429, "Too many uploads in progress"));
    server.stop().await;
}

#[tokio::test]
async fn an_upload_survives_a_restart_and_resumes_at_the_received_offset() {
    let server = TestServer::start().await;
    let user = server.user();
    let (agent_id, _) = agent_and_session(&user).await;
    let content: Vec<u8> = (0..3 * MIB).map(|n| (n % 251) as u8).collect();
    let id = begin(&user, memory(&agent_id, "big/blob.bin"), content.len()).await.upload_id;
    user.call(chunk(&id, 0, &content[..MIB])).await.unwrap();
    let seed = user.signer.seed();
    let dir = server.stop().await;

    // A chunk that reached the staging file but was never recorded (a crash mid-append).
    let part = dir.path().join("uploads").join(format!("{id}.part"));
    let mut staged = std::fs::read(&part).unwrap();
    staged.extend_from_slice(&[0xEE; 1000]);
    std::fs::write(&part, staged).unwrap();

    let server = TestServer::start_in(dir).await;
    let user = User::new(&server.url, Ed25519Signer::from_seed(&seed), None);
    let (status, message) = api_error(user.call(chunk(&id, 0, &content[..MIB])).await);
    assert_eq!((status, message), (409, format!("Chunk offset 0 does not match {MIB} bytes received")));
    user.call(chunk(&id, MIB, &content[MIB..2 * MIB])).await.unwrap();
    assert_eq!(user.call(chunk(&id, 2 * MIB, &content[2 * MIB..])).await.unwrap().received, 3 * MIB as i64);
    let entry = user.call(CommitFileUpload { upload_id: id }).await.unwrap().entry.unwrap();
    assert_eq!(entry.size, 3 * MIB as i64);
    let written =
        std::fs::read(server.dir.path().join("agents").join(agent_id.as_str()).join("memory/big/blob.bin")).unwrap();
    assert!(written == content, "the committed file is exactly the uploaded bytes");
    server.stop().await;
}

#[tokio::test]
async fn a_chunk_ahead_of_its_predecessor_waits_for_it() {
    // The first chunk is sent once the second waits for it; a long grace keeps it waiting.
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(dir, |config| config.upload_arrival_grace = Duration::from_secs(60)).await;
    let user = server.user();
    let agent_id = user.create_agent("Pipelined").await;
    let content: Vec<u8> = (0..3 * MIB).map(|n| (n % 253) as u8).collect();
    let id = begin(&user, memory(&agent_id, "pipelined.bin"), content.len()).await.upload_id;

    // The second chunk arrives first: it waits (it would be a 409 without the wait).
    let second = {
        let client = user.client.clone();
        let action = chunk(&id, MIB, &content[MIB..2 * MIB]);
        tokio::spawn(async move { client.call(action).await })
    };
    // Once it holds the upload's one waiting place (the server says so through its chunk order):
    let app = server.server.as_ref().unwrap().app().clone();
    app.upload_order.waiting(&id).await;
    // A third chunk while the second holds the upload's one waiting place is refused at once
    // (were the second not waiting, this one would wait its 30 s instead).
    let third =
        tokio::time::timeout(std::time::Duration::from_secs(10), user.call(chunk(&id, 2 * MIB, &content[2 * MIB..])))
            .await
            .expect("the third chunk is answered without waiting");
    assert_eq!(api_error(third), (409, format!("Chunk offset {} does not match 0 bytes received", 2 * MIB)));

    assert_eq!(user.call(chunk(&id, 0, &content[..MIB])).await.unwrap().received, MIB as i64);
    assert_eq!(second.await.unwrap().unwrap().received, 2 * MIB as i64, "the waiting chunk went in after the first");
    assert_eq!(user.call(chunk(&id, 2 * MIB, &content[2 * MIB..])).await.unwrap().received, 3 * MIB as i64);
    user.call(CommitFileUpload { upload_id: id }).await.unwrap();
    let written =
        std::fs::read(server.dir.path().join("agents").join(agent_id.as_str()).join("memory/pipelined.bin")).unwrap();
    assert!(written == content, "the committed file is exactly the uploaded bytes");
    server.stop().await;
}

#[tokio::test]
async fn the_sdk_uploads_in_pipelined_chunks_with_progress() {
    let server = TestServer::start().await;
    let user = server.user();
    let (agent_id, session_id) = agent_and_session(&user).await;
    let content: Vec<u8> = (0..20 * MIB + 12_345).map(|n| (n * 7 % 256) as u8).collect();

    let mut seen = Vec::new();
    let done = user
        .client
        .upload(memory(&agent_id, "sdk/big.bin"), content.len() as u64, &content[..], |progress| seen.push(progress))
        .await
        .unwrap();
    assert_eq!(done.entry.unwrap().size, content.len() as i64);
    let received: Vec<u64> = seen.iter().map(|progress| progress.received).collect();
    assert_eq!(received, [8 * MIB as u64, 16 * MIB as u64, content.len() as u64], "one report per acknowledged chunk");
    assert!(seen.iter().all(|progress| progress.size == content.len() as u64));
    let written =
        std::fs::read(server.dir.path().join("agents").join(agent_id.as_str()).join("memory/sdk/big.bin")).unwrap();
    assert!(written == content, "the committed file is exactly the uploaded bytes");

    // From a file on disk, into a session attachment.
    let file = server.dir.path().join("to-attach.bin");
    std::fs::write(&file, &content[..9 * MIB]).unwrap();
    let done = user.client.upload_file(attachment_target(&session_id, "notes.bin"), &file, |_| {}).await.unwrap();
    assert_eq!(done.attachment.unwrap().id, sha256_hex(&content[..9 * MIB]));
    server.stop().await;
}

#[tokio::test]
async fn an_sdk_upload_that_stops_can_be_resumed() {
    let server = TestServer::start().await;
    let user = server.user();
    let agent_id = user.create_agent("Resumer").await;
    let content: Vec<u8> = (0..10 * MIB).map(|n| (n % 241) as u8).collect();

    // The source ends early: the upload stops after the first chunk, saying where.
    let error = user
        .client
        .upload(memory(&agent_id, "resumed.bin"), content.len() as u64, &content[..9 * MIB], |_| {})
        .await
        .unwrap_err();
    let seed_agents_sdk::Error::Upload { upload_id, received, source, .. } = error else {
        panic!("expected Error::Upload, got {error:?}");
    };
    assert_eq!(received, 8 * MIB as u64);
    assert!(matches!(*source, seed_agents_sdk::Error::Source(_)), "{source:?}");

    // Resuming from an offset the server has passed skips what it has (it says so in a 409).
    let mut first = None;
    let done = user
        .client
        .resume_upload(upload_id, content.len() as u64, 0, &content[..], |progress| {
            first.get_or_insert(progress.received);
        })
        .await
        .unwrap();
    // Both first chunks were in flight: the first is refused (the server has it), the second
    // lands; either way the report starts at or past the server's offset.
    assert!(first >= Some(8 * MIB as u64), "{first:?}");
    assert_eq!(done.entry.unwrap().size, content.len() as i64);
    let written =
        std::fs::read(server.dir.path().join("agents").join(agent_id.as_str()).join("memory/resumed.bin")).unwrap();
    assert!(written == content, "the committed file is exactly the uploaded bytes");

    // Failures before anything was sent are plain API errors.
    let (status, message) = api_error(user.client.upload(memory("no-such-agent", "x.bin"), 1, &b"x"[..], |_| {}).await);
    assert_eq!((status, message.as_str()), (404, "Agent not found"));
    server.stop().await;
}

#[tokio::test]
async fn temp_files_an_interrupted_write_left_are_removed_at_the_next_start() {
    let server = TestServer::start().await;
    let user = server.user();
    let (agent_id, session_id) = agent_and_session(&user).await;
    let id = begin(&user, memory(&agent_id, "notes/kept.md"), 4).await.upload_id;
    user.call(chunk(&id, 0, b"kept")).await.unwrap();
    user.call(CommitFileUpload { upload_id: id }).await.unwrap();
    user.call(upload(&session_id, "photo.png", None, b"png")).await.unwrap();
    let dir = server.stop().await;

    // What writes that were between their temp file and its rename leave (the random middle is
    // six letters or digits), and names that only look alike, which stay.
    let memory = dir.path().join("agents").join(agent_id.as_str()).join("memory");
    let attachments = dir.path().join("session-attachments").join(session_id.as_str());
    let left = [
        dir.path().join(".secret.key.tmp-Ab12Cd"),
        memory.join(".seed-memory-q1W2e3.tmp"),
        memory.join("notes/.seed-memory-zzzzzz.tmp"),
        attachments.join(".a1b2c3.bin.tmp"),
        attachments.join(".d4e5f6.json.tmp"),
    ];
    let alike = [
        memory.join(".seed-memory-notes.tmp"),
        memory.join("notes/.a1b2c3.bin.tmp"),
        attachments.join(".seed-memory-q1W2e3.tmp"),
    ];
    for path in left.iter().chain(&alike) {
        std::fs::write(path, vec![7u8; 1000]).unwrap();
    }

    let server = TestServer::start_in(dir).await;
    for path in &left {
        assert!(!path.exists(), "{} was left", path.display());
    }
    for path in &alike {
        assert!(path.exists(), "{} was removed", path.display());
    }
    // The real files are untouched and still read.
    assert_eq!(std::fs::read(memory.join("notes/kept.md")).unwrap(), b"kept");
    assert!(std::fs::read_dir(&attachments).unwrap().flatten().any(|entry| {
        entry.file_name().to_string_lossy().ends_with(".bin") && std::fs::read(entry.path()).unwrap() == b"png"
    }));
    assert!(server.dir.path().join("secret.key").exists());
    server.stop().await;
}
