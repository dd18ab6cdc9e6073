//! Chunked upload benchmark: `cargo bench -p seed-agents-server --bench upload`.
//!
//! Starts the real server binary as a child process (its memory is its own) with a data
//! directory under Cargo's target tmp directory (a real disk, unless `UPLOAD_DATA_DIR` says
//! otherwise), uploads `UPLOAD_MIB` MiB (default 1024) into an agent's memory in 8 MiB chunks
//! over loopback, one signed `AppendFileUploadChunk` after another, and commits. It prints the
//! throughput next to `dd if=/dev/zero bs=8M conv=fsync` writing the same size into the same
//! directory, and the server's resident memory before the upload (`VmRSS`) and its peak since
//! start (`VmHWM`). The targets: at least 70% of `dd`, RSS growth under 64 MiB.
//!
//! Every chunk is fsynced and recorded in SQLite before it is answered, while `dd` syncs once at
//! the end, so the comparison is deliberately unfavourable to the server. Run without `--bench`
//! (by `cargo test --benches`) it uploads 16 MiB as a smoke test.

#![allow(clippy::unwrap_used)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../tests/common/fixtures.rs"]
mod fixtures;

use fixtures::{definition, provider_config};
use seed_agents_protocol::Bytes;
use seed_agents_protocol::generated::{
    AppendFileUploadChunk, BeginFileUpload, CommitFileUpload, CreateAgent, FileUploadTarget, MemoryUploadTarget,
    SetModelProvider,
};
use seed_agents_sdk::{Client, Ed25519Signer};

const CHUNK: usize = 8 * 1024 * 1024;

fn main() {
    let measured = std::env::args().any(|arg| arg == "--bench");
    let mib: usize = match std::env::var("UPLOAD_MIB") {
        Ok(value) => value.parse().unwrap(),
        Err(_) if measured => 1024,
        Err(_) => 16,
    };
    let parent = std::env::var("UPLOAD_DATA_DIR").unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").to_owned());
    std::fs::create_dir_all(&parent).unwrap();
    let dir = tempfile::tempdir_in(&parent).unwrap();
    let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut server = ServerProcess::spawn(dir.path(), addr);
    server.wait_ready();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let cpu_before = cpu_seconds(server.child.id());
    let (seconds, before) = runtime.block_on(upload(&server, addr, mib));
    let server_cpu = cpu_seconds(server.child.id()) - cpu_before;
    let after = memory(server.child.id());
    let server_mbps = mib as f64 * 1.048576 / seconds;
    let dd_seconds = dd(dir.path(), mib);
    let dd_mbps = mib as f64 * 1.048576 / dd_seconds;
    println!("upload of {mib} MiB in {} MiB chunks, data dir {}", CHUNK >> 20, dir.path().display());
    println!("  server: {seconds:.2} s, {server_mbps:.0} MB/s");
    println!("  dd:     {dd_seconds:.2} s, {dd_mbps:.0} MB/s (conv=fsync)");
    println!("  ratio:  {:.0}% of dd", 100.0 * server_mbps / dd_mbps);
    println!("  server CPU: {server_cpu:.2} s ({:.0}% of the wall time)", 100.0 * server_cpu / seconds);
    println!(
        "  server memory: VmRSS {:.1} MiB before the upload, VmHWM {:.1} MiB peak; growth {:.1} MiB",
        before.0,
        after.1,
        after.1 - before.0
    );
}

async fn upload(server: &ServerProcess, addr: SocketAddr, mib: usize) -> (f64, (f64, f64)) {
    let client = Client::builder(&format!("http://{addr}"), Ed25519Signer::generate().unwrap()).build().unwrap();
    client.call(SetModelProvider { name: "main".into(), provider: provider_config() }).await.unwrap();
    let agent_id = client
        .call(CreateAgent { client_request_id: None, definition: definition("Upload bench") })
        .await
        .unwrap()
        .agent_id;
    let size = mib * 1024 * 1024;
    let target = FileUploadTarget::MemoryUploadTarget(MemoryUploadTarget { agent_id, path: "bench/blob.bin".into() });
    let before = memory(server.child.id());
    let started = Instant::now();
    let upload_id = client.call(BeginFileUpload { size: size as i64, target }).await.unwrap().upload_id;
    let chunk: Vec<u8> = (0..CHUNK).map(|n| (n % 251) as u8).collect();
    let mut offset = 0;
    while offset < size {
        let len = CHUNK.min(size - offset);
        let action = AppendFileUploadChunk {
            content: Bytes(chunk[..len].to_vec()),
            offset: offset as i64,
            upload_id: upload_id.clone(),
        };
        offset = client.call(action).await.unwrap().received as usize;
    }
    let entry = client.call(CommitFileUpload { upload_id }).await.unwrap().entry.unwrap();
    assert_eq!(entry.size as usize, size);
    (started.elapsed().as_secs_f64(), before)
}

/// `dd` writing the same size into the same directory, fsynced; wall seconds.
fn dd(dir: &Path, mib: usize) -> f64 {
    let target = dir.join("dd.bin");
    let started = Instant::now();
    let status = Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", target.display()))
        .arg("bs=8M")
        .arg(format!("count={}", mib.div_ceil(8)))
        .arg("conv=fsync")
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let seconds = started.elapsed().as_secs_f64();
    std::fs::remove_file(target).unwrap();
    seconds
}

/// User plus system CPU seconds a process has used (`/proc/<pid>/stat`, in `USER_HZ` = 100).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |index: usize| fields.get(index).and_then(|value| value.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// (`VmRSS`, `VmHWM`) of a process, in MiB.
fn memory(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

struct ServerProcess {
    addr: SocketAddr,
    child: Child,
}

impl ServerProcess {
    fn spawn(data_dir: &Path, addr: SocketAddr) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_seed-agents-server"))
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--listen")
            .arg(addr.to_string())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        Self { addr, child }
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect_timeout(&self.addr, Duration::from_millis(100)).is_err() {
            assert!(Instant::now() < deadline, "the server did not start listening on {}", self.addr);
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the server exited: {status}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
