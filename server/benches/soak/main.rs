//! Soak: `cargo bench -p seed-agents-server --bench soak`.
//!
//! The real server binary runs as a child process (`RUST_LOG=warn`, a temporary `--data-dir`
//! under Cargo's target tmp directory unless `SOAK_DATA_DIR` says otherwise) and is driven for a
//! fixed time with a mixed load: `SOAK_CONCURRENCY` workers (default 16), each with two fresh
//! accounts — the owner of one agent (with a provider, a session and a memory file) and a writer
//! collaborator on it, whose WebSocket subscription follows the worker's session — sending one
//! request at a time, each action drawn by weight (see `soak/mix.rs`):
//!
//! - reads: `ListAgents`, `GetAgent`, `GetSession` (from a little before the subscription's last
//!   `seq`), `ListSessions`, `ReadAgentMemoryFile` (its size checked against what was written);
//! - creates: `CreateSession`, and keyed ones sent twice (the second must answer the same session);
//! - memory writes: `WriteAgentMemoryFile` of 1-64 KiB into eight rotating files, and deletes;
//! - uploads: 1-4 MiB through the SDK's chunked upload (begin, chunks, commit) into memory, then
//!   deleted;
//! - user verbs: `InvokeSessionTool` `write` (64 B-4 KiB of text into memory) and `read` (`~/self`
//!   or a memory file), two durable session events each; a verb answering 200 with its `error`
//!   counts as a failure.
//!
//! Every request other than the setup's is chosen as owner or collaborator at random, except the
//! memory writes, deletes and uploads (the owner's, so the sizes are known). `MessageSession` and
//! the other actions this server answers 501 are not in the mix.
//!
//! Reported: per action the count, answers per second, failures by kind (HTTP status, transport,
//! timeout, a 200 with a wrong answer) and p50/p99/max latency of the successful ones (a fixed-size
//! log-linear histogram, within 1.6 %); what the subscriptions delivered; and the server's
//! resident memory sampled every second (`VmRSS` and its anonymous part `RssAnon` from
//! `/proc/<pid>/status`): the mean over the first minute against the mean over the last minute
//! (runs under two minutes: the first and last fifth of the run, and it says so), their ratio and
//! a `PASS`/`FAIL` line for "within 10 %". Nothing here asserts on the figures.
//!
//! The server's replay guard remembers every write envelope without `clientRequestId` until its
//! `ts` leaves the 5-minute timestamp window, so under steady writes its memory climbs for five
//! minutes before it can level off; the bench prints its estimate of what the guard holds. A run
//! meant to show flat memory lasts two windows or more (`SOAK_SECONDS=600`).
//!
//! # Settings (environment)
//!
//! `SOAK_SECONDS` (default 20; a real soak: 600 or more), `SOAK_CONCURRENCY` (default 16),
//! `SOAK_REPORT_EVERY` (seconds between progress lines, default 10), `SOAK_SEED` (the draw of
//! actions, default 1), `SOAK_DATA_DIR` (parent of the data directory). Run without `--bench` (by
//! `cargo test --benches`) it does a 3-second smoke run with 4 workers.

mod live;
mod mix;
mod op;
mod report;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mix::Worker;
use op::Op;
use report::{Shared, Tally};
use seed_agents_protocol::envelope::TIMESTAMP_WINDOW_MS;
use seed_agents_protocol::generated::GetSession;
use seed_agents_test_support::bench::{Memory, Server, load_average, server_command};

/// The server binary Cargo built for the benches.
const SERVER_BIN: &str = env!("CARGO_BIN_EXE_seed-agents-server");

fn main() {
    let settings = Settings::load();
    settings.print();
    // Declared first so it is removed last, after the server is gone.
    let data = tempfile::tempdir_in(&settings.data_parent).expect("a temporary data directory");
    println!("soak data dir: {}", data.path().display());
    let mut server = Server::spawn("seed-agents-server", server_command(SERVER_BIN, data.path()));
    server.wait_ready();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a Tokio runtime");
    runtime.block_on(run(&settings, &server, data.path()));
    println!("soak load avg at end: {}", load_average());
}

/// How long and how hard to push.
struct Settings {
    duration: Duration,
    concurrency: usize,
    report_every: u64,
    seed: u64,
    data_parent: PathBuf,
    smoke: bool,
}

impl Settings {
    fn load() -> Self {
        // `cargo bench` passes `--bench`; `cargo test --benches` does not: then only smoke-test.
        let smoke = !std::env::args().any(|arg| arg == "--bench");
        let number = |name: &str, default: u64| -> u64 {
            std::env::var(name).ok().and_then(|value| value.trim().parse().ok()).unwrap_or(default)
        };
        Settings {
            duration: Duration::from_secs(number("SOAK_SECONDS", if smoke { 3 } else { 20 }).max(1)),
            concurrency: number("SOAK_CONCURRENCY", if smoke { 4 } else { 16 }).max(1) as usize,
            report_every: number("SOAK_REPORT_EVERY", if smoke { 1 } else { 10 }).max(1),
            seed: number("SOAK_SEED", 1),
            data_parent: std::env::var_os("SOAK_DATA_DIR")
                .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from),
            smoke,
        }
    }

    fn print(&self) {
        if self.smoke {
            println!("smoke run (no --bench): figures are not meaningful; use `cargo bench --bench soak`");
        }
        let cores = std::thread::available_parallelism().map_or(0, |cores| cores.get());
        println!(
            "soak settings: {} s, {} workers ({} accounts: an owner and a writer each; {} WebSocket subscriptions), seed {}, cores {cores}",
            self.duration.as_secs(),
            self.concurrency,
            2 * self.concurrency,
            self.concurrency,
            self.seed
        );
        println!("soak load avg at start: {}", load_average());
    }
}

/// One reading of the server's memory, due `second` seconds into the run (taken `t` seconds in).
struct Sample {
    second: u64,
    t: f64,
    rss: f64,
    anon: f64,
}

async fn run(settings: &Settings, server: &Server, data: &Path) {
    let http = seed_agents_sdk::default_http_client().expect("an HTTP client");
    let shared = Arc::new(Shared::default());
    let before_setup = Memory::of(server.pid());
    let mut workers = Vec::with_capacity(settings.concurrency);
    for index in 0..settings.concurrency {
        workers.push(Worker::setup(index, settings.seed, &http, server.addr, shared.clone()).await);
    }
    // Let the subscriptions connect and replay before the clock starts.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = Memory::of(server.pid());
    println!(
        "soak server memory: VmRSS {:.1} MiB at start, {:.1} MiB after setup (RssAnon {:.1} MiB); load generator VmRSS {:.1} MiB",
        before_setup.rss,
        idle.rss,
        idle.anon,
        Memory::of(std::process::id()).rss
    );

    let started = Instant::now();
    let deadline = started + settings.duration;
    let sampler = {
        let (pid, shared, duration, every) = (server.pid(), shared.clone(), settings.duration, settings.report_every);
        std::thread::spawn(move || sample(pid, &shared, started, duration, every))
    };
    let running: Vec<_> = workers.into_iter().map(|worker| tokio::spawn(worker.run(deadline))).collect();
    let mut workers = Vec::with_capacity(running.len());
    for worker in running {
        workers.push(worker.await.expect("a soak worker panicked"));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let samples = sampler.join().expect("the memory sampler panicked");
    let after = Memory::of(server.pid());

    let mut tally = Tally::new();
    for worker in &workers {
        tally.merge(&worker.recorder.tally);
    }
    print_actions(&tally, elapsed, shared.requests.load(Ordering::Relaxed));
    print_subscriptions(&workers).await;
    for worker in &workers {
        worker.follower.abort();
    }
    println!(
        "soak server at end: VmRSS {:.1} MiB (RssAnon {:.1} MiB), VmHWM {:.1} MiB; data dir {:.1} MiB on disk; load generator VmRSS {:.1} MiB",
        after.rss,
        after.anon,
        after.peak,
        directory_size(data) as f64 / (1 << 20) as f64,
        Memory::of(std::process::id()).rss
    );
    print_memory(&samples, settings.duration.as_secs());
}

/// Reads the server's memory once a second from `started` until `duration` has passed (one
/// sample per second, so the list grows by 32 bytes a second of the run), printing a progress
/// line every `every` seconds.
fn sample(pid: u32, shared: &Shared, started: Instant, duration: Duration, every: u64) -> Vec<Sample> {
    let mut samples = Vec::with_capacity(duration.as_secs() as usize + 1);
    let (mut last_requests, mut last_errors) = (0, 0);
    for second in 0..=duration.as_secs() {
        let due = started + Duration::from_secs(second);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let memory = Memory::of(pid);
        samples.push(Sample { second, t: started.elapsed().as_secs_f64(), rss: memory.rss, anon: memory.anon });
        if second > 0 && second % every == 0 {
            let (requests, errors) = (shared.requests.load(Ordering::Relaxed), shared.errors.load(Ordering::Relaxed));
            println!(
                "soak progress t={second}s VmRSS {:.1} MiB RssAnon {:.1} MiB req/s {:.0} errors {} (load generator VmRSS {:.1} MiB)",
                memory.rss,
                memory.anon,
                (requests - last_requests) as f64 / every as f64,
                errors - last_errors,
                Memory::of(std::process::id()).rss
            );
            (last_requests, last_errors) = (requests, errors);
        }
    }
    samples
}

fn print_actions(tally: &Tally, elapsed: f64, requests: u64) {
    println!();
    println!(
        "soak {:<26} {:>8} {:>8} {:>7} {:>9} {:>9} {:>9}",
        "action", "count", "ok/s", "errors", "p50 ms", "p99 ms", "max ms"
    );
    let (mut total, mut errors) = (0, 0);
    for op in Op::ALL {
        let row = &tally.ops[op.index()];
        let (ok, failed) = (row.ok.count(), row.errors());
        (total, errors) = (total + ok + failed, errors + failed);
        println!(
            "soak {:<26} {:>8} {:>8.1} {:>7} {:>9.2} {:>9.2} {:>9.2}",
            op.name(),
            ok + failed,
            ok as f64 / elapsed,
            failed,
            row.ok.quantile_ms(0.5),
            row.ok.quantile_ms(0.99),
            row.ok.max_ms()
        );
    }
    println!(
        "soak total: {total} actions ({:.1}/s), {requests} HTTP requests ({:.1}/s), {errors} errors, over {elapsed:.1} s",
        total as f64 / elapsed,
        requests as f64 / elapsed
    );
    println!("soak latency: successful answers only, the whole action (an upload: begin, chunks and commit)");
    // Entries live until `ts` + the window, so the guard holds the last window's guarded writes.
    let guarded: u64 = Op::ALL.iter().map(|op| tally.ops[op.index()].ok.count() * op.guarded_envelopes()).sum();
    let window = TIMESTAMP_WINDOW_MS as f64 / 1000.0;
    let (remembered, plateau) = (guarded as f64 * (window / elapsed).min(1.0), guarded as f64 * window / elapsed);
    let mib = |entries: f64| entries * 25.0 / (1 << 20) as f64;
    println!(
        "soak note: the server's replay guard keeps each write envelope without clientRequestId for the {:.0}-minute timestamp window (about 25 B each, by its doc): ~{remembered:.0} now (~{:.1} MiB); at this rate ~{plateau:.0} (~{:.1} MiB) once a whole window has passed",
        window / 60.0,
        mib(remembered),
        mib(plateau)
    );
    if errors == 0 {
        println!("soak errors: none");
    }
    for op in Op::ALL {
        for (kind, (count, first)) in &tally.ops[op.index()].failures {
            let first: String = first.chars().take(300).collect();
            println!("soak error: {} {kind} x{count}; first: {first}", op.name());
        }
    }
}

/// What the subscriptions delivered, and whether each had caught up with its session at the end
/// (a `GetSession` after the last `seq` it delivered must find nothing).
async fn print_subscriptions(workers: &[Worker]) {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (mut appends, mut out_of_order, mut disconnects, mut errors, mut behind) = (0, 0, 0, 0, 0);
    let mut first_problem = None;
    for worker in workers {
        let live = &worker.live;
        appends += live.appends.load(Ordering::Relaxed);
        out_of_order += live.out_of_order.load(Ordering::Relaxed);
        disconnects += live.disconnects.load(Ordering::Relaxed);
        errors += live.errors.load(Ordering::Relaxed);
        let problem = live.first_problem.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
        first_problem = first_problem.or(problem);
        let read = GetSession {
            after_seq: Some(live.last_seq()),
            before_seq: None,
            limit: Some(1),
            session_id: worker.session_id.clone(),
        };
        match worker.client.get_session(read).await {
            Ok(answer) if answer.events.is_empty() => {}
            Ok(_) => behind += 1,
            Err(error) => {
                behind += 1;
                first_problem.get_or_insert(format!("GetSession at the end: {error}"));
            }
        }
    }
    println!(
        "soak subscriptions: {} sockets, {appends} appends delivered, {out_of_order} out of order, {disconnects} disconnects, {errors} errors, {behind} behind their session at the end{}",
        workers.len(),
        first_problem.map_or_else(String::new, |problem| format!("; first problem: {problem}"))
    );
}

/// The first and last windows of the run and how their mean memory compares. The sample at
/// second 0 (taken as the workers started) is in neither window.
fn print_memory(samples: &[Sample], seconds: u64) {
    let (window, first_name, last_name) = if seconds >= 120 {
        (60, "first minute".to_owned(), "last minute".to_owned())
    } else {
        let window = (seconds / 5).max(1);
        (window, format!("first 20% ({window} s; run under 2 minutes)"), format!("last 20% ({window} s)"))
    };
    let mean = |pick: &dyn Fn(&Sample) -> bool, value: fn(&Sample) -> f64| {
        let values: Vec<f64> = samples.iter().filter(|sample| pick(sample)).map(value).collect();
        values.iter().sum::<f64>() / values.len() as f64
    };
    let first = |sample: &Sample| (1..=window).contains(&sample.second);
    let last = |sample: &Sample| sample.second > seconds - window;
    let (first_rss, last_rss) = (mean(&first, |s| s.rss), mean(&last, |s| s.rss));
    let (first_anon, last_anon) = (mean(&first, |s| s.anon), mean(&last, |s| s.anon));
    let (low, high) = samples
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), sample| (low.min(sample.rss), high.max(sample.rss)));
    println!(
        "soak RSS samples: {} (one a second), VmRSS min {low:.1} MiB, max {high:.1} MiB, slope {:+.2} MiB/min (least squares)",
        samples.len(),
        slope(samples) * 60.0
    );
    let ratio = last_rss / first_rss;
    println!(
        "soak RSS {first_name} mean {first_rss:.1} MiB, {last_name} mean {last_rss:.1} MiB, ratio {ratio:.3} ({:+.1}%)",
        (ratio - 1.0) * 100.0
    );
    println!(
        "soak RssAnon {first_name} mean {first_anon:.1} MiB, {last_name} mean {last_anon:.1} MiB, ratio {:.3}",
        last_anon / first_anon
    );
    let verdict = if (ratio - 1.0).abs() <= 0.10 { "PASS" } else { "FAIL" };
    println!("soak RSS within 10%: {verdict} (ratio {ratio:.3}, {last_name} over {first_name})");
}

/// The least-squares slope of VmRSS over time, in MiB per second.
fn slope(samples: &[Sample]) -> f64 {
    let count = samples.len() as f64;
    let (mean_t, mean_rss) = samples.iter().fold((0.0, 0.0), |(t, rss), sample| (t + sample.t, rss + sample.rss));
    let (mean_t, mean_rss) = (mean_t / count, mean_rss / count);
    let (covariance, variance) = samples.iter().fold((0.0, 0.0), |(covariance, variance), sample| {
        let dt = sample.t - mean_t;
        (covariance + dt * (sample.rss - mean_rss), variance + dt * dt)
    });
    covariance / variance
}

/// Bytes in the files under `path`.
fn directory_size(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => directory_size(&entry.path()),
            Ok(_) => entry.metadata().map_or(0, |metadata| metadata.len()),
            Err(_) => 0,
        })
        .sum()
}
