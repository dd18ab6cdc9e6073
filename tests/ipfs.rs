//! `UploadAgentMemoryFileToIpfs` against the fake Hypermedia server, which recomputes every CID
//! from its block: small and multi-chunk files, batching, the returned root and URL, access,
//! missing paths and symlinks, and publish failures.

use std::path::PathBuf;

use seed_agents_protocol::generated::{
    GetAgent, SetAgentPublicRead, UploadAgentMemoryFileToIpfs, UploadAgentMemoryFileToIpfsResponse,
};
use seed_agents_server::testing::hm::unixfs;

use crate::support::hm::{FakeHm, Published};
use crate::support::{TestServer, User, api_error};

async fn start(hm_url: &str) -> TestServer {
    let url = hm_url.to_owned();
    TestServer::start_with(tempfile::tempdir().unwrap(), move |config| config.hm_server_url = url).await
}

fn upload(agent_id: &str, path: &str) -> UploadAgentMemoryFileToIpfs {
    UploadAgentMemoryFileToIpfs { agent_id: agent_id.into(), path: path.into() }
}

/// Writes straight into the agent's memory directory (large files need no request).
async fn plant(user: &User, agent_id: &str, path: &str, data: &[u8]) -> PathBuf {
    let agent = user.call(GetAgent { agent_id: agent_id.into() }).await.unwrap().agent;
    let root = PathBuf::from(agent.state_dir).join("memory");
    let file = root.join(path);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, data).unwrap();
    root
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// The raw leaves the fake accepted, concatenated in order.
fn leaves(blobs: &[Published]) -> Vec<u8> {
    blobs.iter().filter(|blob| blob.codec == 0x55).flat_map(|blob| blob.data.clone()).collect()
}

fn check(response: &UploadAgentMemoryFileToIpfsResponse, blobs: &[Published], data: &[u8]) {
    let expected = unixfs::file(data);
    assert_eq!(response.cid, expected.root);
    assert_eq!(response.url, format!("ipfs://{}", response.cid));
    assert_eq!(response.size, data.len() as i64);
    assert_eq!(blobs.last().map(|blob| blob.cid.as_str()), Some(response.cid.as_str()), "root published last");
    let seen: Vec<&str> = blobs.iter().map(|blob| blob.cid.as_str()).collect();
    let built: Vec<&str> = expected.blocks.iter().filter_map(|block| block.cid.as_deref()).collect();
    assert_eq!(seen, built);
    assert_eq!(leaves(blobs), data);
}

#[tokio::test]
async fn small_and_multi_chunk_files_publish_their_unixfs_blocks() {
    let hm = FakeHm::start().await;
    let server = start(&hm.url).await;
    let owner = server.user();
    let agent = owner.create_agent("Publisher").await;

    plant(&owner, &agent, "notes/hello.txt", b"hello world").await;
    let small = owner.call(upload(&agent, "./notes\\hello.txt")).await.unwrap();
    assert_eq!(small.cid, "bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5e");
    assert_eq!((small.agent_id.as_str(), small.path.as_str()), (agent.as_str(), "notes/hello.txt"));
    assert_eq!(small.mime_type.as_deref(), Some("text/plain"));
    check(&small, &hm.blobs(), b"hello world");
    assert_eq!(hm.requests(), 1);

    // 600 KiB: three leaves and one dag-pb root, in one request.
    let data = pattern(600 * 1024);
    plant(&owner, &agent, "big.bin", &data).await;
    let big = owner.call(upload(&agent, "big.bin")).await.unwrap();
    let blobs = hm.blobs()[1..].to_vec();
    assert_eq!(blobs.iter().map(|blob| blob.codec).collect::<Vec<_>>(), [0x55, 0x55, 0x55, 0x70]);
    assert!(big.cid.starts_with("bafybei"), "{}", big.cid);
    check(&big, &blobs, &data);
    assert_eq!(hm.requests(), 2);

    // An empty file is its empty raw leaf.
    plant(&owner, &agent, "empty.md", b"").await;
    let empty = owner.call(upload(&agent, "empty.md")).await.unwrap();
    assert_eq!(empty.cid, "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku");
    assert_eq!((empty.size, empty.mime_type.as_deref()), (0, Some("text/markdown")));
    server.stop().await;
}

#[tokio::test]
async fn large_files_go_out_in_bounded_batches() {
    let hm = FakeHm::start().await;
    let server = start(&hm.url).await;
    let owner = server.user();
    let agent = owner.create_agent("Publisher").await;
    // 20 leaves: more than one 4 MiB request's worth.
    let data = pattern(5 * 1024 * 1024);
    plant(&owner, &agent, "large.bin", &data).await;
    let response = owner.call(upload(&agent, "large.bin")).await.unwrap();
    check(&response, &hm.blobs(), &data);
    assert_eq!(hm.requests(), 2);
    server.stop().await;
}

#[tokio::test]
async fn access_missing_paths_and_symlinks_are_refused() {
    let hm = FakeHm::start().await;
    let server = start(&hm.url).await;
    let owner = server.user();
    let stranger = server.user();
    let agent = owner.create_agent("Publisher").await;
    let root = plant(&owner, &agent, "dir/file.txt", b"x").await;

    owner.call(SetAgentPublicRead { agent_id: agent.clone(), public_read: true }).await.unwrap();
    let denied = api_error(stranger.call(upload(&agent, "dir/file.txt")).await);
    assert_eq!((denied.0, denied.1.as_str()), (403, "Write access is required"));

    let cases = [
        ("nope.txt", 404, "Memory file not found: nope.txt"),
        ("dir", 400, "Memory path is a directory, not a file: dir"),
        ("../x", 400, "Memory path cannot contain \"..\""),
    ];
    for (path, status, message) in cases {
        let (got_status, got) = api_error(owner.call(upload(&agent, path)).await);
        assert_eq!((got_status, got.as_str()), (status, message), "{path}");
    }
    #[cfg(unix)]
    {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.join("secret-link.txt")).unwrap();
        for path in ["link/secret.txt", "secret-link.txt"] {
            let (status, message) = api_error(owner.call(upload(&agent, path)).await);
            assert_eq!((status, message), (404, format!("Memory file not found: {path}")));
        }
    }
    assert_eq!(hm.requests(), 0);
    server.stop().await;
}

#[tokio::test]
async fn publish_failures_are_502() {
    let hm = FakeHm::start().await;
    let server = start(&hm.url).await;
    let owner = server.user();
    let agent = owner.create_agent("Publisher").await;
    plant(&owner, &agent, "a.txt", b"payload").await;
    hm.fail_with(Some((500, "node is reindexing")));
    let (status, message) = api_error(owner.call(upload(&agent, "a.txt")).await);
    assert_eq!(status, 502);
    assert!(message.contains("HTTP 500 from PublishBlobs"), "{message}");
    assert!(message.contains("node is reindexing"), "{message}");

    hm.fail_with(None);
    let response = owner.call(upload(&agent, "a.txt")).await.unwrap();
    check(&response, &hm.blobs(), b"payload");

    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let gone = start(&format!("http://{closed}")).await;
    let user = gone.user();
    let agent = user.create_agent("Publisher").await;
    plant(&user, &agent, "a.txt", b"payload").await;
    assert_eq!(api_error(user.call(upload(&agent, "a.txt")).await).0, 502);
    gone.stop().await;
    server.stop().await;
}
