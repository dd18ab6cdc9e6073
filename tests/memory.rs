//! The agent memory filesystem through the SDK: every action's happy and failure paths, the path
//! rules (traversal, absolute paths, planted symlinks), text and binary reads, events, and
//! downloads from a loopback HTTP server (private networks allowed) or refused (the default).

use std::net::SocketAddr;
use std::path::PathBuf;

use seed_agents_protocol::Bytes;
use seed_agents_protocol::generated::{
    AgentMemoryEntryType, AgentMemoryFileEncoding, DeleteAgentMemoryFile, DownloadAgentMemoryFile, GetAgent,
    ListAgentMemory, ListAgentMemoryDir, ReadAgentMemoryFile, SetAgentPublicRead, WriteAgentMemoryFile,
    WriteAgentMemoryFileContent,
};
use seed_agents_server::testing::bus::{ChangeReason, Event};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{TestServer, User, api_error};

fn write(agent_id: &str, path: &str, content: impl Into<Content>) -> WriteAgentMemoryFile {
    WriteAgentMemoryFile { agent_id: agent_id.into(), path: path.into(), content: content.into().0 }
}

struct Content(WriteAgentMemoryFileContent);

impl From<&str> for Content {
    fn from(text: &str) -> Self {
        Content(WriteAgentMemoryFileContent::String(text.into()))
    }
}

impl From<Vec<u8>> for Content {
    fn from(bytes: Vec<u8>) -> Self {
        Content(WriteAgentMemoryFileContent::Bytes(Bytes(bytes)))
    }
}

fn read(agent_id: &str, path: &str) -> ReadAgentMemoryFile {
    ReadAgentMemoryFile { agent_id: agent_id.into(), path: path.into() }
}

fn delete(agent_id: &str, path: &str) -> DeleteAgentMemoryFile {
    DeleteAgentMemoryFile { agent_id: agent_id.into(), path: path.into() }
}

fn list_dir(agent_id: &str, path: Option<&str>) -> ListAgentMemoryDir {
    ListAgentMemoryDir { agent_id: agent_id.into(), path: path.map(str::to_owned) }
}

fn fetch(agent_id: &str, url: &str, path: Option<&str>) -> DownloadAgentMemoryFile {
    DownloadAgentMemoryFile { agent_id: agent_id.into(), url: url.into(), path: path.map(str::to_owned) }
}

async fn memory_root(user: &User, agent_id: &str) -> PathBuf {
    let agent = user.call(GetAgent { agent_id: agent_id.into() }).await.unwrap().agent;
    PathBuf::from(agent.state_dir).join("memory")
}

async fn paths(user: &User, agent_id: &str) -> Vec<String> {
    let listed = user.call(ListAgentMemory { agent_id: agent_id.into() }).await.unwrap();
    listed.entries.into_iter().map(|entry| entry.path).collect()
}

#[tokio::test]
async fn files_are_written_read_listed_and_deleted() {
    let server = TestServer::start().await;
    let owner = server.user();
    let agent = owner.create_agent("Memo").await;
    let app = server.server.as_ref().unwrap().app().clone();
    let mut events = app.bus.subscribe();

    assert!(owner.call(ListAgentMemory { agent_id: agent.clone() }).await.unwrap().entries.is_empty());
    let written = owner.call(write(&agent, "notes/ideas.md", "# Ideas\n")).await.unwrap();
    assert_eq!(written.entry.path, "notes/ideas.md");
    assert_eq!((written.entry.size, written.entry.type_), (8, AgentMemoryEntryType::File));
    assert_eq!(written.entry.mime_type.as_deref(), Some("text/markdown"));
    let event = events.recv().await.unwrap();
    assert_eq!(
        *event,
        Event::AccountChange {
            account_id: owner.id.to_string(),
            reason: ChangeReason::AgentMemoryChanged,
            agent_id: Some(agent.to_string()),
            session_id: None,
        }
    );

    // Separators and dot segments normalise; overwrite replaces the whole file.
    owner.call(write(&agent, ".\\notes\\.\\ideas.md", "v2")).await.unwrap();
    let file = owner.call(read(&agent, "notes//ideas.md")).await.unwrap().file;
    assert_eq!((file.encoding, file.content.as_deref(), file.size), (AgentMemoryFileEncoding::Utf8, Some("v2"), 2));
    assert!(file.data.is_none());

    // Bytes that are clean UTF-8 read back as text; a NUL byte or invalid UTF-8 as bytes.
    owner.call(write(&agent, "deep/a/b/c/text.bin", b"plain".to_vec())).await.unwrap();
    let text = owner.call(read(&agent, "deep/a/b/c/text.bin")).await.unwrap().file;
    assert_eq!((text.encoding, text.content.as_deref()), (AgentMemoryFileEncoding::Utf8, Some("plain")));
    for (name, bytes) in [("nul.png", vec![b'a', 0, b'b']), ("invalid.png", vec![0xff, 0xfe, 0x41])] {
        owner.call(write(&agent, name, bytes.clone())).await.unwrap();
        let file = owner.call(read(&agent, name)).await.unwrap().file;
        assert_eq!(file.encoding, AgentMemoryFileEncoding::Binary, "{name}");
        assert_eq!(file.data, Some(Bytes(bytes)));
        assert_eq!((file.content, file.mime_type.as_deref()), (None, Some("image/png")));
    }

    let listed = owner.call(ListAgentMemory { agent_id: agent.clone() }).await.unwrap();
    let names: Vec<_> = listed.entries.iter().map(|entry| entry.path.as_str()).collect();
    assert_eq!(
        names,
        [
            "deep",
            "deep/a",
            "deep/a/b",
            "deep/a/b/c",
            "deep/a/b/c/text.bin",
            "invalid.png",
            "notes",
            "notes/ideas.md",
            "nul.png"
        ]
    );
    assert_eq!(listed.total_bytes, 5 + 3 + 2 + 3);
    assert!(
        listed.entries.iter().filter(|entry| entry.type_ == AgentMemoryEntryType::Dir).all(|entry| entry.size == 0)
    );

    let top = owner.call(list_dir(&agent, None)).await.unwrap();
    let names: Vec<_> = top.entries.iter().map(|entry| (entry.path.as_str(), entry.entry_count)).collect();
    assert_eq!(names, [("deep", Some(1)), ("invalid.png", None), ("notes", Some(1)), ("nul.png", None)]);
    assert_eq!((top.path.as_str(), top.total_bytes), ("", 6));
    assert_eq!(owner.call(list_dir(&agent, Some("/"))).await.unwrap().entries.len(), 4);
    let notes = owner.call(list_dir(&agent, Some("notes/"))).await.unwrap();
    assert_eq!((notes.path.as_str(), notes.total_bytes, notes.entries.len()), ("notes", 2, 1));

    // Deleting a directory is recursive; deleting nothing says so and publishes nothing.
    let removed = owner.call(delete(&agent, "deep")).await.unwrap();
    assert_eq!((removed.path.as_str(), removed.deleted), ("deep", true));
    let again = owner.call(delete(&agent, "./deep/")).await.unwrap();
    assert_eq!((again.path.as_str(), again.deleted), ("deep", false));
    assert_eq!(paths(&owner, &agent).await, ["invalid.png", "notes", "notes/ideas.md", "nul.png"]);
    let mut reasons = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let Event::AccountChange { reason, .. } = &*event {
            reasons.push(*reason);
        }
    }
    assert_eq!(reasons, vec![ChangeReason::AgentMemoryChanged; 5], "four writes and one delete");

    // No temp files are left beside written files.
    let root = memory_root(&owner, &agent).await;
    let on_disk: Vec<_> =
        std::fs::read_dir(root.join("notes")).unwrap().map(|entry| entry.unwrap().file_name()).collect();
    assert_eq!(on_disk, ["ideas.md"]);
    server.stop().await;
}

#[tokio::test]
async fn failures_answer_upstreams_messages() {
    let server = TestServer::start().await;
    let owner = server.user();
    let stranger = server.user();
    let agent = owner.create_agent("Memo").await;
    owner.call(write(&agent, "dir/file.txt", "x")).await.unwrap();

    let cases: Vec<(_, (u16, String))> = vec![
        ("read missing", api_error(owner.call(read(&agent, "nope.txt")).await)),
        ("read dir", api_error(owner.call(read(&agent, "dir")).await)),
        ("write dir", api_error(owner.call(write(&agent, "dir", "x")).await)),
        ("write under a file", api_error(owner.call(write(&agent, "dir/file.txt/x", "x")).await)),
        ("list file", api_error(owner.call(list_dir(&agent, Some("dir/file.txt"))).await)),
        ("list missing", api_error(owner.call(list_dir(&agent, Some("gone"))).await)),
        ("unknown agent", api_error(owner.call(read("no-such-agent", "x")).await)),
        ("stranger", api_error(stranger.call(ListAgentMemory { agent_id: agent.clone() }).await)),
    ];
    let expected = [
        (404, "Memory file not found: nope.txt"),
        (400, "Memory path is a directory, not a file: dir"),
        (400, "Memory path is a directory, not a file: dir"),
        (400, "Memory path is not writable: dir/file.txt/x"),
        (400, "Memory path is a file, not a directory: dir/file.txt. Use memory_read for files."),
        (404, "Memory directory not found: gone"),
        (404, "Agent not found"),
        (404, "Agent not found"),
    ];
    for ((name, got), (status, message)) in cases.into_iter().zip(expected) {
        assert_eq!((got.0, got.1.as_str()), (status, message), "{name}");
    }

    // A public reader reads but does not write, delete or download.
    owner.call(SetAgentPublicRead { agent_id: agent.clone(), public_read: true }).await.unwrap();
    assert_eq!(stranger.call(read(&agent, "dir/file.txt")).await.unwrap().file.content.as_deref(), Some("x"));
    assert_eq!(stranger.call(list_dir(&agent, Some("dir"))).await.unwrap().entries.len(), 1);
    for result in [
        api_error(stranger.call(write(&agent, "dir/file.txt", "y")).await),
        api_error(stranger.call(delete(&agent, "dir")).await),
        api_error(stranger.call(fetch(&agent, "https://example.com/a", None)).await),
    ] {
        assert_eq!((result.0, result.1.as_str()), (403, "Write access is required"));
    }
    assert_eq!(owner.call(read(&agent, "dir/file.txt")).await.unwrap().file.content.as_deref(), Some("x"));
    server.stop().await;
}

#[tokio::test]
async fn paths_cannot_escape_the_memory_directory() {
    let server = TestServer::start().await;
    let owner = server.user();
    let agent = owner.create_agent("Memo").await;
    let root = memory_root(&owner, &agent).await;
    let outside = root.parent().unwrap().parent().unwrap().join("outside.txt");
    std::fs::write(&outside, "keep").unwrap();

    let refusals = [
        ("../x", "Memory path cannot contain \"..\""),
        ("a/../../b", "Memory path cannot contain \"..\""),
        ("..\\..\\outside.txt", "Memory path cannot contain \"..\""),
        ("/etc/passwd", "Memory path must be relative"),
        ("\\etc\\passwd", "Memory path must be relative"),
        ("", "Memory path is required"),
        ("./", "Memory path is required"),
        ("a\0b", "Memory path contains an invalid character"),
    ];
    for (raw, message) in refusals {
        for result in [
            api_error(owner.call(read(&agent, raw)).await),
            api_error(owner.call(write(&agent, raw, "x")).await),
            api_error(owner.call(delete(&agent, raw)).await),
        ] {
            assert_eq!((result.0, result.1.as_str()), (400, message), "{raw:?}");
        }
    }
    for raw in ["../x", "/etc", "a/../../b"] {
        let (status, _) = api_error(owner.call(list_dir(&agent, Some(raw))).await);
        assert_eq!(status, 400, "{raw}");
    }

    // 16 levels and 512 bytes are the limits.
    let deep = vec!["d"; 16].join("/");
    owner.call(write(&agent, &deep, "ok")).await.unwrap();
    let (status, message) = api_error(owner.call(write(&agent, &format!("{deep}/x"), "no")).await);
    assert_eq!((status, message.as_str()), (400, "Memory path is nested too deeply"));
    let longest = ["n".repeat(200), "n".repeat(200), "n".repeat(110)].join("/");
    assert_eq!(longest.len(), 512);
    owner.call(write(&agent, &longest, "ok")).await.unwrap();
    let (status, message) = api_error(owner.call(write(&agent, &format!("{longest}n"), "no")).await);
    assert_eq!((status, message.as_str()), (400, "Memory path is too long"));
    // One name longer than the filesystem allows is refused the same way, not a 500.
    let (status, message) = api_error(owner.call(write(&agent, &"n".repeat(300), "no")).await);
    assert_eq!((status, message.as_str()), (400, "Memory path is too long"));
    let (status, _) = api_error(owner.call(read(&agent, &"n".repeat(300))).await);
    assert_eq!(status, 404);
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");
    server.stop().await;
}

#[cfg(unix)]
#[tokio::test]
async fn planted_symlinks_are_never_followed() {
    let server = TestServer::start().await;
    let owner = server.user();
    let agent = owner.create_agent("Memo").await;
    owner.call(write(&agent, "real.txt", "real")).await.unwrap();
    let root = memory_root(&owner, &agent).await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("link")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.join("secret-link.txt")).unwrap();

    for path in ["link/secret.txt", "secret-link.txt"] {
        let (status, message) = api_error(owner.call(read(&agent, path)).await);
        assert_eq!((status, message), (404, format!("Memory file not found: {path}")));
    }
    for path in ["link/new.txt", "link/sub/new.txt", "secret-link.txt", "link"] {
        let (status, message) = api_error(owner.call(write(&agent, path, "pwned")).await);
        assert_eq!((status, message), (400, format!("Memory path is not writable: {path}")), "{path}");
    }
    let (status, message) = api_error(owner.call(list_dir(&agent, Some("link"))).await);
    assert_eq!((status, message.as_str()), (404, "Memory directory not found: link"));
    assert_eq!(paths(&owner, &agent).await, ["real.txt"], "symlinks are not listed");
    assert_eq!(owner.call(list_dir(&agent, None)).await.unwrap().entries.len(), 1);
    let (status, message) = api_error(owner.call(delete(&agent, "link/secret.txt")).await);
    assert_eq!((status, message.as_str()), (400, "Memory path is not writable: link/secret.txt"));

    // Deleting the link removes the link, not what it points at.
    assert!(owner.call(delete(&agent, "link")).await.unwrap().deleted);
    assert!(owner.call(delete(&agent, "secret-link.txt")).await.unwrap().deleted);
    assert_eq!(std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(), "secret");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1, "nothing was written outside");

    // A memory root that is itself a symlink is refused too.
    std::fs::remove_dir_all(&root).unwrap();
    std::os::unix::fs::symlink(outside.path(), &root).unwrap();
    assert!(owner.call(ListAgentMemory { agent_id: agent.clone() }).await.unwrap().entries.is_empty());
    let (status, _) = api_error(owner.call(read(&agent, "secret.txt")).await);
    assert_eq!(status, 404);
    let (status, _) = api_error(owner.call(write(&agent, "x.txt", "x")).await);
    assert_eq!(status, 400);
    assert!(!outside.path().join("x.txt").exists());
    server.stop().await;
}

/// A tiny HTTP/1.1 origin on loopback: one request per connection.
async fn origin() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                while !request.windows(4).any(|window| window == b"\r\n\r\n") {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(read) => request.extend_from_slice(&buffer[..read]),
                    }
                }
                let line = String::from_utf8_lossy(&request).lines().next().unwrap_or_default().to_owned();
                let path = line.split(' ').nth(1).unwrap_or("/").to_owned();
                serve(&mut socket, &path).await;
            });
        }
    });
    addr
}

async fn serve(socket: &mut tokio::net::TcpStream, path: &str) {
    let head = |status: &str, extra: &str| format!("HTTP/1.1 {status}\r\nConnection: close\r\n{extra}\r\n");
    match path {
        "/files/photo" => {
            let body = [0x89u8, b'P', b'N', b'G', 0, 1, 2];
            let head = head("200 OK", &format!("Content-Type: image/png\r\nContent-Length: {}\r\n", body.len()));
            socket.write_all(head.as_bytes()).await.unwrap();
            socket.write_all(&body).await.unwrap();
        }
        "/files/big" => {
            // 4 MiB in 64 KiB chunks of chunked transfer encoding.
            let head = head("200 OK", "Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n");
            socket.write_all(head.as_bytes()).await.unwrap();
            let chunk = vec![7u8; 64 * 1024];
            for _ in 0..64 {
                socket.write_all(format!("{:x}\r\n", chunk.len()).as_bytes()).await.unwrap();
                socket.write_all(&chunk).await.unwrap();
                socket.write_all(b"\r\n").await.unwrap();
            }
            socket.write_all(b"0\r\n\r\n").await.unwrap();
        }
        "/moved" => {
            let head = head("302 Found", "Location: /files/notes.txt\r\nContent-Length: 0\r\n");
            socket.write_all(head.as_bytes()).await.unwrap();
        }
        "/files/notes.txt" => {
            let head = head("200 OK", "Content-Type: text/plain; charset=utf-8\r\nContent-Length: 5\r\n");
            socket.write_all(head.as_bytes()).await.unwrap();
            socket.write_all(b"hello").await.unwrap();
        }
        _ => {
            let head = head("404 Not Found", "Content-Length: 0\r\n");
            socket.write_all(head.as_bytes()).await.unwrap();
        }
    }
    let _ = socket.shutdown().await;
}

#[tokio::test]
async fn downloads_stream_into_memory_when_private_networks_are_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(dir, |config| config.allow_private_network = true).await;
    let owner = server.user();
    let agent = owner.create_agent("Memo").await;
    let app = server.server.as_ref().unwrap().app().clone();
    let mut events = app.bus.subscribe();
    let origin = origin().await;

    // No path: named from the URL under downloads/, extension from the content type.
    let photo = owner.call(fetch(&agent, &format!("http://{origin}/files/photo"), None)).await.unwrap();
    assert_eq!(photo.entry.path, "downloads/photo.png");
    assert_eq!((photo.entry.size, photo.entry.mime_type.as_deref()), (7, Some("image/png")));
    assert_eq!(photo.content_type.as_deref(), Some("image/png"));
    assert_eq!(photo.final_url, format!("http://{origin}/files/photo"));
    let file = owner.call(read(&agent, "downloads/photo.png")).await.unwrap().file;
    assert_eq!(file.encoding, AgentMemoryFileEncoding::Binary);
    assert!(matches!(
        &*events.recv().await.unwrap(),
        Event::AccountChange { reason: ChangeReason::AgentMemoryChanged, .. }
    ));

    // Redirects are followed; an explicit path keeps its extension.
    let notes = owner.call(fetch(&agent, &format!("http://{origin}/moved"), Some("inbox/n.md"))).await.unwrap();
    assert_eq!(
        (notes.entry.path.as_str(), notes.final_url),
        ("inbox/n.md", format!("http://{origin}/files/notes.txt"))
    );
    assert_eq!(owner.call(read(&agent, "inbox/n.md")).await.unwrap().file.content.as_deref(), Some("hello"));
    let named = owner.call(fetch(&agent, &format!("http://{origin}/files/notes.txt"), Some("inbox/plain"))).await;
    assert_eq!(named.unwrap().entry.path, "inbox/plain.txt");

    // A large body arrives whole.
    let big = owner.call(fetch(&agent, &format!("http://{origin}/files/big"), Some("big.bin"))).await.unwrap();
    assert_eq!(big.entry.size, 4 * 1024 * 1024);
    let on_disk = std::fs::read(memory_root(&owner, &agent).await.join("big.bin")).unwrap();
    assert!(on_disk.len() == 4 * 1024 * 1024 && on_disk.iter().all(|byte| *byte == 7));

    // Failures.
    let missing = format!("http://{origin}/missing");
    let (status, message) = api_error(owner.call(fetch(&agent, &missing, None)).await);
    assert_eq!((status, message), (502, format!("Could not download {missing}: HTTP 404")));
    let (status, message) =
        api_error(owner.call(fetch(&agent, &format!("http://{origin}/files/photo"), Some("../x"))).await);
    assert_eq!((status, message.as_str()), (400, "Memory path cannot contain \"..\""));
    for (url, expected) in [
        ("", "Download URL is required"),
        ("not a url", "Invalid download URL: not a url"),
        ("ftp://example.com/file", "Download URL must use http or https"),
        ("file:///etc/passwd", "Download URL must use http or https"),
    ] {
        let (status, message) = api_error(owner.call(fetch(&agent, url, None)).await);
        assert_eq!((status, message.as_str()), (400, expected), "{url:?}");
    }
    let listed = paths(&owner, &agent).await;
    assert_eq!(listed, ["big.bin", "downloads", "downloads/photo.png", "inbox", "inbox/n.md", "inbox/plain.txt"]);
    server.stop().await;
}

#[tokio::test]
async fn downloads_refuse_private_destinations_by_default() {
    let server = TestServer::start().await;
    let owner = server.user();
    let agent = owner.create_agent("Memo").await;
    // A listening origin the guard must never reach.
    let origin = origin().await;
    for (url, host) in [
        (format!("http://{origin}/files/photo"), "127.0.0.1".to_owned()),
        (format!("http://localhost:{}/files/photo", origin.port()), "localhost".to_owned()),
        ("http://10.0.0.1/x".to_owned(), "10.0.0.1".to_owned()),
        ("http://169.254.169.254/latest/meta-data/".to_owned(), "169.254.169.254".to_owned()),
        ("http://[::ffff:127.0.0.1]/x".to_owned(), "::ffff:127.0.0.1".to_owned()),
        ("http://2130706433/x".to_owned(), "127.0.0.1".to_owned()),
    ] {
        let (status, message) = api_error(owner.call(fetch(&agent, &url, None)).await);
        let expected = format!("Download URL is not allowed: {host} is a private or local network address");
        assert_eq!((status, message), (400, expected), "{url}");
    }
    assert!(paths(&owner, &agent).await.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn a_download_past_the_storage_quota_stops_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(dir, |config| {
        config.allow_private_network = true;
        config.storage_quota_bytes = 1024 * 1024;
    })
    .await;
    let owner = server.user();
    let agent = owner.create_agent("Quota").await;
    let origin = origin().await;
    // 4 MiB, chunked (no length up front): refused once it passes the 1 MiB the quota leaves.
    let refused = owner.call(fetch(&agent, &format!("http://{origin}/files/big"), Some("big.bin"))).await.unwrap_err();
    assert_eq!(
        (refused.status(), refused.code()),
        (Some(413), Some(seed_agents_sdk::ErrorCode::QuotaExceeded)),
        "{refused:?}"
    );
    assert!(owner.call(ListAgentMemory { agent_id: agent.clone() }).await.unwrap().entries.is_empty());
    // What fits still downloads.
    let notes = owner.call(fetch(&agent, &format!("http://{origin}/files/notes.txt"), Some("n.txt"))).await.unwrap();
    assert_eq!(notes.entry.size, 5);
    server.stop().await;
}
