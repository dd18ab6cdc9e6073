//! The edge under hostile traffic: `cargo bench -p seed-agents-server --bench edge`.
//!
//! Each scenario starts the real server binary as a child process (fresh, so its peak resident
//! memory `VmHWM` belongs to the scenario) and attacks it over loopback with raw TCP, the way a
//! client that never signs anything would:
//!
//! 1. **one huge body**: a single unauthenticated `application/cbor` body of `EDGE_HUGE_MB` MB
//!    (default 600), sent as fast as the server reads it. Two shapes: zeros (not CBOR at all), and
//!    a crafted envelope whose first bytes name `WriteAgentMemoryFile` (the action allowed the
//!    largest body) with a byte string of that size and a zero signature. Reported: the answer,
//!    the bytes the server read before answering, and the server's peak RSS growth.
//! 2. **many large bodies**: `EDGE_PARALLEL` (default 64) concurrent crafted bodies of 16 MiB
//!    each, naming `AppendFileUploadChunk`, `WriteAgentMemoryFile` and `UploadSessionAttachment`
//!    in turn. Reported: the answers by status and the peak RSS growth.
//! 3. **slow header**: one header line per second, forever; reported is how long until the
//!    server closes the connection (capped at `EDGE_SLOW_CAP` seconds, default 90).
//! 4. **slow body**: full headers declaring 64 KiB, then one body byte per second; same report.
//!
//! Memory is read from `/proc/<pid>/status` (`VmHWM` is the peak since the process started; its
//! growth over the idle server's `VmRSS` is what the scenario cost). Run without `--bench` (by
//! `cargo test --benches`) it does a small smoke run.

#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use seed_agents_test_support::bench::{Memory, Server, server_command};

/// The server binary Cargo built for the benches.
const SERVER_BIN: &str = env!("CARGO_BIN_EXE_seed-agents-server");

fn main() {
    let smoke = !std::env::args().any(|arg| arg == "--bench");
    let env = |name: &str, default: u64| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let huge_mb = env("EDGE_HUGE_MB", if smoke { 20 } else { 600 });
    let parallel = env("EDGE_PARALLEL", if smoke { 4 } else { 64 }) as usize;
    let slow_cap = Duration::from_secs(env("EDGE_SLOW_CAP", if smoke { 3 } else { 90 }));
    let extra: Vec<String> = std::env::var("EDGE_SERVER_ARGS")
        .map(|args| args.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    if smoke {
        println!("smoke run (no --bench): figures are not meaningful; use `cargo bench --bench edge`");
    }
    println!("server args: {extra:?}");

    for (shape, chunked) in [
        (Shape::Zeros, false),
        (Shape::Crafted("WriteAgentMemoryFile"), false),
        (Shape::Crafted("WriteAgentMemoryFile"), true),
    ] {
        let run = Scenario::start(&extra);
        let outcome = send_body(run.server.addr, shape, huge_mb * 1_000_000, chunked);
        let framing = if chunked { "chunked" } else { "Content-Length" };
        run.report(&format!("1 body of {huge_mb} MB, {shape}, {framing}"), &outcome.to_string());
    }

    let run = Scenario::start(&extra);
    let actions = ["AppendFileUploadChunk", "WriteAgentMemoryFile", "UploadSessionAttachment"];
    let threads: Vec<_> = (0..parallel)
        .map(|index| {
            let addr = run.server.addr;
            let action = actions[index % actions.len()];
            std::thread::spawn(move || send_body(addr, Shape::Crafted(action), 16 << 20, false))
        })
        .collect();
    let mut statuses = std::collections::BTreeMap::<String, usize>::new();
    for thread in threads {
        *statuses.entry(thread.join().unwrap().status).or_default() += 1;
    }
    run.report(&format!("{parallel} bodies of 16 MiB at once"), &format!("{statuses:?}"));

    let run = Scenario::start(&extra);
    let cut = slow_header(run.server.addr, slow_cap);
    run.report("slow header (1 line/s)", &cut);
    let run = Scenario::start(&extra);
    let cut = slow_body(run.server.addr, slow_cap);
    run.report("slow body (1 byte/s)", &cut);
}

/// A fresh server and its idle memory.
struct Scenario {
    server: Server,
    _data: tempfile::TempDir,
    idle: Memory,
}

impl Scenario {
    fn start(extra: &[String]) -> Self {
        let data = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let (mut command, addr) = server_command(SERVER_BIN, data.path());
        command.args(extra);
        let mut server = Server::spawn("seed-agents-server", (command, addr));
        server.wait_ready();
        std::thread::sleep(Duration::from_millis(200));
        let idle = Memory::of(server.pid());
        Self { server, _data: data, idle }
    }

    fn report(&self, name: &str, outcome: &str) {
        let after = Memory::of(self.server.pid());
        println!(
            "{name:<44} {outcome}\n{:<44} idle RSS {:.1} MiB, peak {:.1} MiB: peak growth {:.1} MiB",
            "",
            self.idle.rss,
            after.peak,
            after.peak - self.idle.rss
        );
    }
}

#[derive(Debug, Clone, Copy)]
enum Shape {
    Zeros,
    Crafted(&'static str),
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shape::Zeros => write!(f, "zeros"),
            Shape::Crafted(action) => write!(f, "crafted {action}"),
        }
    }
}

struct Outcome {
    status: String,
    sent: u64,
    elapsed: Duration,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "answer {} after {:.1} MB sent, {:.2} s",
            self.status,
            self.sent as f64 / 1e6,
            self.elapsed.as_secs_f64()
        )
    }
}

/// The CBOR head of a text string or byte string.
fn head(major: u8, length: u64) -> Vec<u8> {
    let major = major << 5;
    match length {
        0..=23 => vec![major | length as u8],
        24..=0xff => vec![major | 24, length as u8],
        0x100..=0xffff => [vec![major | 25], (length as u16).to_be_bytes().to_vec()].concat(),
        0x1_0000..=0xffff_ffff => [vec![major | 26], (length as u32).to_be_bytes().to_vec()].concat(),
        _ => [vec![major | 27], length.to_be_bytes().to_vec()].concat(),
    }
}

fn text(value: &str) -> Vec<u8> {
    [head(3, value.len() as u64), value.as_bytes().to_vec()].concat()
}

/// The envelope around a byte string of `size` bytes, split where the bytes go: a canonical map
/// `{sig, type, action: {_, ts, agentId, content|..., }, signer, account}` with a zero signature.
fn crafted(action: &str, size: u64) -> (Vec<u8>, Vec<u8>) {
    let principal = [[0xed, 0x01].as_slice(), &[7u8; 32]].concat();
    let mut prefix = vec![0xa5];
    prefix.extend(text("sig"));
    prefix.extend(head(2, 64));
    prefix.extend([0u8; 64]);
    prefix.extend(text("type"));
    prefix.extend(text("AgentsAction"));
    prefix.extend(text("action"));
    prefix.push(0xa4);
    prefix.extend(text("_"));
    prefix.extend(text(action));
    prefix.extend(text("ts"));
    prefix.extend([0x1b, 0, 0, 1, 0x90, 0, 0, 0, 0]);
    prefix.extend(text("agentId"));
    prefix.extend(text("00000000-0000-4000-8000-000000000000"));
    prefix.extend(text("content"));
    prefix.extend(head(2, size));
    let mut suffix = text("signer");
    suffix.extend(head(2, 34));
    suffix.extend(&principal);
    suffix.extend(text("account"));
    suffix.extend(head(2, 34));
    suffix.extend(&principal);
    (prefix, suffix)
}

/// Posts one body of about `size` bytes as fast as the server takes it (with a `Content-Length`,
/// or `chunked` without one); stops sending when the server answers or closes.
fn send_body(addr: SocketAddr, shape: Shape, size: u64, chunked: bool) -> Outcome {
    let (prefix, suffix) = match shape {
        Shape::Zeros => (Vec::new(), Vec::new()),
        Shape::Crafted(action) => crafted(action, size),
    };
    let total = prefix.len() as u64 + size + suffix.len() as u64;
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr).unwrap();
    let framing = if chunked { "Transfer-Encoding: chunked".to_owned() } else { format!("Content-Length: {total}") };
    let headers =
        format!("POST /api/message HTTP/1.1\r\nHost: x\r\nContent-Type: application/cbor\r\n{framing}\r\n\r\n");
    let mut sent = 0u64;
    let mut write = |stream: &mut TcpStream, bytes: &[u8]| -> bool {
        // The headers go first and as they are; every later write is one chunk when chunked.
        let framed = if chunked && !bytes.is_empty() && sent > 0 {
            [format!("{:x}\r\n", bytes.len()).as_bytes(), bytes, b"\r\n"].concat()
        } else {
            bytes.to_vec()
        };
        match stream.write_all(&framed) {
            Ok(()) => {
                sent += bytes.len() as u64;
                true
            }
            Err(_) => false,
        }
    };
    let reader = stream.try_clone().unwrap();
    let answer = std::thread::spawn(move || read_status(reader));
    let mut open = write(&mut stream, headers.as_bytes()) && write(&mut stream, &prefix);
    let chunk = vec![0u8; 64 * 1024];
    let mut left = size;
    while open && left > 0 && !answer.is_finished() {
        let n = left.min(chunk.len() as u64) as usize;
        open = write(&mut stream, &chunk[..n]);
        left -= n as u64;
    }
    if open && !answer.is_finished() {
        write(&mut stream, &suffix);
        if chunked {
            let _ = stream.write_all(b"0\r\n\r\n");
        }
    }
    let status = answer.join().unwrap();
    Outcome { status, sent: sent.saturating_sub(headers.len() as u64), elapsed: started.elapsed() }
}

/// The status line's code, or what happened instead.
fn read_status(mut stream: TcpStream) -> String {
    stream.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut buffer = [0u8; 256];
    let mut got = Vec::new();
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                got.extend_from_slice(&buffer[..n]);
                if got.windows(2).any(|w| w == b"\r\n") {
                    break;
                }
            }
            Err(error) => return format!("error ({})", error.kind()),
        }
    }
    let line = String::from_utf8_lossy(&got);
    line.split_whitespace().nth(1).map_or_else(|| "closed without an answer".to_owned(), str::to_owned)
}

/// Sends a header line per second until the server closes the connection (or `cap` passes).
fn slow_header(addr: SocketAddr, cap: Duration) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    let started = Instant::now();
    let _ = stream.write_all(b"POST /api/message HTTP/1.1\r\n");
    let mut line = 0;
    wait_for_close(&mut stream, started, cap, |stream| {
        line += 1;
        stream.write_all(format!("X-Slow-{line}: a\r\n").as_bytes())
    })
}

/// Sends complete headers, then one body byte per second.
fn slow_body(addr: SocketAddr, cap: Duration) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    let started = Instant::now();
    let _ = stream.write_all(
        b"POST /api/message HTTP/1.1\r\nHost: x\r\nContent-Type: application/cbor\r\nContent-Length: 65536\r\n\r\n\xa5",
    );
    wait_for_close(&mut stream, started, cap, |stream| stream.write_all(&[0]))
}

/// Calls `step` once a second until the server closes (a read gives EOF or an error, or a write
/// fails) or `cap` passes; says which and when.
fn wait_for_close(
    stream: &mut TcpStream,
    started: Instant,
    cap: Duration,
    mut step: impl FnMut(&mut TcpStream) -> std::io::Result<()>,
) -> String {
    stream.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut buffer = [0u8; 512];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return format!("closed by the server after {:.1} s", started.elapsed().as_secs_f64()),
            Ok(n) => {
                let answer = String::from_utf8_lossy(&buffer[..n]);
                let status = answer.split_whitespace().nth(1).unwrap_or("?").to_owned();
                return format!("answered {status} after {:.1} s", started.elapsed().as_secs_f64());
            }
            Err(error) if matches!(error.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return format!("reset by the server after {:.1} s", started.elapsed().as_secs_f64()),
        }
        if started.elapsed() >= cap {
            return format!("still open after {:.0} s (cap)", cap.as_secs_f64());
        }
        if step(stream).is_err() {
            return format!("write refused after {:.1} s", started.elapsed().as_secs_f64());
        }
    }
}
