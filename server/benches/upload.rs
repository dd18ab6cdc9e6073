//! Chunked upload benchmark: `cargo bench -p seed-agents-server --bench upload`.
//!
//! Starts the real server binary as a child process (its memory is its own) with a data
//! directory under Cargo's target tmp directory (a real disk, unless `UPLOAD_DATA_DIR` says
//! otherwise) and uploads `UPLOAD_MIB` MiB (default 1024) into an agent's memory in 8 MiB chunks
//! over loopback, twice:
//!
//! - `sdk`: `Client::upload`, the way an app uploads (two chunks in flight; the next chunk is
//!   signed and sent while the server writes and fsyncs the previous one);
//! - `serial`: one signed `AppendFileUploadChunk` after another, each awaited (the baseline the
//!   pipeline is measured against).
//!
//! It prints each throughput next to `dd if=/dev/zero bs=8M conv=fsync` writing the same size
//! into the same directory (three runs before and three after, since this disk's speed drifts
//! and a run is sometimes absorbed by a host cache; the ratio uses their median), the server's
//! and the client's CPU time, and its resident memory before the first upload (`VmRSS`)
//! and its peak (`VmHWM`) after the `sdk` upload. The targets: at least 70% of `dd`, RSS
//! growth under 64 MiB.
//!
//! Every chunk is fsynced and recorded in SQLite before it is answered, while `dd` syncs once at
//! the end, so the comparison is deliberately unfavourable to the server. Run without `--bench`
//! (by `cargo test --benches`) it uploads 24 MiB each way as a smoke test and checks the bytes.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::task::{Context, Poll};
use std::time::Instant;

use seed_agents_protocol::Bytes;
use seed_agents_protocol::generated::{
    AppendFileUploadChunk, BeginFileUpload, CommitFileUpload, CreateAgent, FileUploadTarget, MemoryUploadTarget,
    SetModelProvider,
};
use seed_agents_sdk::{Client, Ed25519Signer};
use seed_agents_test_support::bench::{CLOCK_TICKS_PER_SECOND, Memory, Server, cpu_ticks, server_command};
use seed_agents_test_support::fixtures::{definition, provider_config};

/// The server binary Cargo built for the benches.
const SERVER_BIN: &str = env!("CARGO_BIN_EXE_seed-agents-server");

const CHUNK: usize = 8 * 1024 * 1024;

fn main() {
    let measured = std::env::args().any(|arg| arg == "--bench");
    let mib: usize = match std::env::var("UPLOAD_MIB") {
        Ok(value) => value.parse().unwrap(),
        Err(_) if measured => 1024,
        Err(_) => 24,
    };
    let parent = std::env::var("UPLOAD_DATA_DIR").unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").to_owned());
    std::fs::create_dir_all(&parent).unwrap();
    let dir = tempfile::tempdir_in(&parent).unwrap();
    let mut server = Server::spawn("seed-agents-server", server_command(SERVER_BIN, dir.path()));
    server.wait_ready();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let (client, agent_id) = runtime.block_on(setup(server.addr));
    let pid = server.pid();
    let size = mib * 1024 * 1024;
    let mut dd_runs: Vec<f64> = (0..3).map(|_| dd(dir.path(), mib)).collect();

    let me = std::process::id();
    let before = Memory::of(pid);
    let (cpu, client_cpu) = (cpu_seconds_of(pid), cpu_seconds_of(me));
    let started = Instant::now();
    runtime.block_on(upload_sdk(&client, &agent_id, "bench/sdk.bin", size));
    let sdk = (started.elapsed().as_secs_f64(), cpu_seconds_of(pid) - cpu, cpu_seconds_of(me) - client_cpu);
    let peak = Memory::of(pid).peak;

    let (cpu, client_cpu) = (cpu_seconds_of(pid), cpu_seconds_of(me));
    let started = Instant::now();
    runtime.block_on(upload_serial(&client, &agent_id, "bench/serial.bin", size));
    let serial = (started.elapsed().as_secs_f64(), cpu_seconds_of(pid) - cpu, cpu_seconds_of(me) - client_cpu);

    dd_runs.extend((0..3).map(|_| dd(dir.path(), mib)));
    if !measured {
        let memory_dir = state_dir(dir.path()).join("memory/bench");
        for name in ["sdk.bin", "serial.bin"] {
            let bytes = std::fs::read(memory_dir.join(name)).unwrap();
            assert_eq!(bytes.len(), size, "{name}");
            assert!(bytes.iter().enumerate().all(|(n, byte)| *byte == pattern(n as u64)), "{name} differs");
        }
    }
    let rate = |seconds: f64| mib as f64 * 1.048576 / seconds;
    let mut dd_rates: Vec<f64> = dd_runs.iter().map(|seconds| rate(*seconds)).collect();
    dd_rates.sort_by(f64::total_cmp);
    // The median: this disk sometimes absorbs a whole run in a host cache (several GB/s).
    let dd_mbps = (dd_rates[2] + dd_rates[3]) / 2.0;
    println!("upload of {mib} MiB in {} MiB chunks, data dir {}", CHUNK >> 20, dir.path().display());
    let listed: Vec<String> = dd_rates.iter().map(|mbps| format!("{mbps:.0}")).collect();
    println!("  dd:     {} MB/s (3 runs before, 3 after, conv=fsync); median {dd_mbps:.0} MB/s", listed.join(" "));
    for (name, (seconds, cpu, client_cpu)) in [("sdk", sdk), ("serial", serial)] {
        println!(
            "  {name:<7} {seconds:.2} s, {:.0} MB/s = {:.0}% of the median dd, {:.0}% of the slowest; CPU: server {cpu:.2} s, client {client_cpu:.2} s ({:.0}% of the wall time)",
            rate(seconds),
            100.0 * rate(seconds) / dd_mbps,
            100.0 * rate(seconds) / dd_rates[0],
            100.0 * (cpu + client_cpu) / seconds
        );
    }
    println!("  sdk/serial: {:.2}x", serial.0 / sdk.0);
    println!(
        "  server memory: VmRSS {:.1} MiB before the uploads, VmHWM {peak:.1} MiB after the sdk upload; growth {:.1} MiB",
        before.rss,
        peak - before.rss
    );
}

async fn setup(addr: SocketAddr) -> (Client, seed_agents_protocol::AgentId) {
    let client = Client::builder(&format!("http://{addr}"), Ed25519Signer::generate().unwrap()).build().unwrap();
    client.call(SetModelProvider { name: "main".into(), provider: provider_config() }).await.unwrap();
    let agent_id = client
        .call(CreateAgent { client_request_id: None, definition: definition("Upload bench") })
        .await
        .unwrap()
        .agent_id;
    (client, agent_id)
}

fn target(agent_id: &str, path: &str) -> FileUploadTarget {
    FileUploadTarget::MemoryUploadTarget(MemoryUploadTarget {
        extra: Default::default(),
        agent_id: agent_id.into(),
        path: path.into(),
    })
}

/// The byte at offset `n` of every uploaded file.
fn pattern(n: u64) -> u8 {
    (n % 251) as u8
}

/// Fills `buf` with the [`pattern`] bytes from offset `start` on, copying from one period-long
/// table (as fast as reading a cached file, so the source does not slow the upload down).
fn fill_pattern(start: u64, buf: &mut [u8]) {
    static TABLE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| (0..251 * 4096).map(pattern).collect());
    let mut done = 0;
    while done < buf.len() {
        let from = ((start + done as u64) % 251) as usize;
        let len = (table.len() - from).min(buf.len() - done);
        buf[done..done + len].copy_from_slice(&table[from..from + len]);
        done += len;
    }
}

/// An endless source of [`pattern`] bytes.
struct Pattern(u64);

impl tokio::io::AsyncRead for Pattern {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let start = self.0;
        let unfilled = buf.initialize_unfilled();
        fill_pattern(start, unfilled);
        let len = unfilled.len();
        buf.advance(len);
        self.0 += len as u64;
        Poll::Ready(Ok(()))
    }
}

async fn upload_sdk(client: &Client, agent_id: &str, path: &str, size: usize) {
    let mut last = 0;
    let done = client
        .upload(target(agent_id, path), size as u64, Pattern(0), |progress| {
            assert!(progress.received > last, "progress moves forward");
            last = progress.received;
        })
        .await
        .unwrap();
    assert_eq!(last as usize, size);
    assert_eq!(done.entry.unwrap().size as usize, size);
}

async fn upload_serial(client: &Client, agent_id: &str, path: &str, size: usize) {
    let target = target(agent_id, path);
    let upload_id = client.call(BeginFileUpload { size: size as i64, target }).await.unwrap().upload_id;
    let mut offset = 0;
    while offset < size {
        let len = CHUNK.min(size - offset);
        let mut content = vec![0; len];
        fill_pattern(offset as u64, &mut content);
        let content = Bytes(content);
        let action = AppendFileUploadChunk { content, offset: offset as i64, upload_id: upload_id.clone() };
        offset = client.call(action).await.unwrap().received as usize;
    }
    let entry = client.call(CommitFileUpload { upload_id }).await.unwrap().entry.unwrap();
    assert_eq!(entry.size as usize, size);
}

/// The one agent's state directory (the smoke run reads the uploaded files back).
fn state_dir(data_dir: &Path) -> std::path::PathBuf {
    let agents = data_dir.join("agents");
    let entry = std::fs::read_dir(&agents).unwrap().next().unwrap().unwrap();
    entry.path()
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

/// User plus system CPU seconds a process has used.
fn cpu_seconds_of(pid: u32) -> f64 {
    cpu_ticks(pid) as f64 / CLOCK_TICKS_PER_SECOND as f64
}
