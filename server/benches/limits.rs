//! Per-account rate limits under a flood: `cargo bench -p seed-agents-server --bench limits`.
//!
//! One account (the *victim*) sends a `SetSecret` write every 10 ms (each awaited; a slow answer
//! delays the next) for `LIMITS_SECONDS` (default 5) while another account (the *flooder*) keeps
//! `LIMITS_FLOOD` (default 32) writes of its own in flight, each answered request followed at once
//! by the next. Three phases, each on a fresh server binary (a child process, `RUST_LOG=warn`):
//!
//! 1. `quiet`: the victim alone, default limits (the baseline);
//! 2. `polite, limited`: `--rate-writes-per-second 200 --rate-writes-burst 400`, the flooder an
//!    SDK client that waits out each 429's `Retry-After` (as `Client::call` does by default);
//! 3. `hostile, limited`: the same limits, the flooder sending its next write at once after a
//!    429 (each refused before it reaches the database, but each still verified);
//! 4. `flood, unlimited`: `--rate-writes-per-second 0`, every flood write committed.
//!
//! For each it prints the victim's writes per second and latency (p50, p99, max), and the flood's
//! requests per second and the share refused. Every victim write must succeed: at 100 writes a
//! second at most, the victim stays inside its own bucket. Run without `--bench` (by
//! `cargo test --benches`) it makes a short smoke run of each phase.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use seed_agents_protocol::Bytes;
use seed_agents_protocol::generated::SetSecret;
use seed_agents_sdk::{Client, Ed25519Signer, ErrorCode};
use seed_agents_test_support::bench::{Server, load_average, server_command};

/// The server binary Cargo built for the benches.
const SERVER_BIN: &str = env!("CARGO_BIN_EXE_seed-agents-server");

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

fn write(index: u64) -> SetSecret {
    SetSecret { metadata: None, name: format!("s{}", index % 64), value: Bytes(b"value".to_vec()) }
}

fn client(server: &Server, retries: usize) -> Client {
    Client::builder(&format!("http://{}", server.addr), Ed25519Signer::generate().unwrap())
        .max_retries(retries)
        .build()
        .unwrap()
}

struct Row {
    name: &'static str,
    victim_latency: Vec<Duration>,
    seconds: f64,
    flood_sent: u64,
    flood_refused: u64,
}

/// One phase: a fresh server with `args`; `flood` writes in flight from one account whose client
/// retries a 429 after `Retry-After` up to `retries` times (0: it ignores it and sends the next).
async fn phase(name: &'static str, args: &[&str], flood: usize, retries: usize, seconds: f64) -> Row {
    let dir = tempfile::tempdir().unwrap();
    let (mut command, addr) = server_command(SERVER_BIN, dir.path());
    command.args(args);
    let mut server = Server::spawn(name, (command, addr));
    server.wait_ready();
    let victim = client(&server, 0);
    // Warm the connection and the account.
    victim.call(write(0)).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    // One account, many writes in flight (the SDK client is cheap to clone).
    let flooding = client(&server, retries);
    let flooders: Vec<_> = (0..flood)
        .map(|_| {
            let flooder = flooding.clone();
            let (stop, sent, refused) = (stop.clone(), sent.clone(), refused.clone());
            tokio::spawn(async move {
                let mut index = 0;
                while !stop.load(Ordering::Relaxed) {
                    index += 1;
                    sent.fetch_add(1, Ordering::Relaxed);
                    match flooder.call(write(index)).await {
                        Ok(_) => {}
                        Err(error) if error.code() == Some(ErrorCode::RateLimited) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(error) => panic!("flood write failed: {error}"),
                    }
                }
            })
        })
        .collect();
    if flood > 0 {
        // Let the flood spend its burst and reach its steady state first.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (sent_before, refused_before) = (sent.load(Ordering::Relaxed), refused.load(Ordering::Relaxed));
    let started = Instant::now();
    let mut victim_latency = Vec::new();
    let mut index = 0;
    let mut every = tokio::time::interval(Duration::from_millis(10));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while started.elapsed().as_secs_f64() < seconds {
        every.tick().await;
        index += 1;
        let sent_at = Instant::now();
        victim.call(write(index)).await.unwrap();
        victim_latency.push(sent_at.elapsed());
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (flood_sent, flood_refused) =
        (sent.load(Ordering::Relaxed) - sent_before, refused.load(Ordering::Relaxed) - refused_before);
    stop.store(true, Ordering::Relaxed);
    for flooder in flooders {
        flooder.await.unwrap();
    }
    drop(server);
    Row { name, victim_latency, seconds: elapsed, flood_sent, flood_refused }
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn print(row: &mut Row) {
    row.victim_latency.sort();
    let at = |quantile: f64| {
        let index = ((row.victim_latency.len() as f64 - 1.0) * quantile).round() as usize;
        millis(row.victim_latency[index])
    };
    let max = millis(*row.victim_latency.last().unwrap());
    let refused = if row.flood_sent == 0 { 0.0 } else { 100.0 * row.flood_refused as f64 / row.flood_sent as f64 };
    println!(
        "{:<18} victim {:>7.0} writes/s  p50 {:>6.2} ms  p99 {:>6.2} ms  max {:>7.2} ms | flood {:>7.0} req/s, {:>5.1}% refused",
        row.name,
        row.victim_latency.len() as f64 / row.seconds,
        at(0.5),
        at(0.99),
        max,
        row.flood_sent as f64 / row.seconds,
        refused
    );
}

#[tokio::main]
async fn main() {
    let smoke = !std::env::args().any(|arg| arg == "--bench");
    let seconds = if smoke { 0.5 } else { env_or("LIMITS_SECONDS", 5.0) };
    let flood = if smoke { 4 } else { env_or("LIMITS_FLOOD", 32) };
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    println!("limits bench: {seconds} s per phase, {flood} flood writes in flight, cores {cores}");
    println!("load average before: {}", load_average());
    let limited = ["--rate-writes-per-second", "200", "--rate-writes-burst", "400"];
    let unlimited = ["--rate-writes-per-second", "0"];
    let mut rows = vec![
        phase("quiet", &[], 0, 0, seconds).await,
        phase("polite, limited", &limited, flood, 3, seconds).await,
        phase("hostile, limited", &limited, flood, 0, seconds).await,
        phase("flood, unlimited", &unlimited, flood, 0, seconds).await,
    ];
    for row in &mut rows {
        print(row);
    }
    println!("load average after: {}", load_average());
}
