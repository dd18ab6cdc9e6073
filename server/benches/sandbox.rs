//! The code sandbox: `cargo bench -p seed-agents-server --bench sandbox`.
//!
//! Drives the server's sandbox (docs/sandbox.md) in this process, as the `execute` callable does,
//! on a real bubblewrap. Reported:
//!
//! - **start to first output**: from calling `run` with `echo hi` (shell) to its first progress
//!   report (the output as it arrives), p50 / p99 / max, one execution at a time (`SANDBOX_RUNS`,
//!   default 200);
//! - **whole execution**: from calling `run` to its outcome, same runs;
//! - **executions per second at the concurrency limit**: `SANDBOX_CONCURRENCY` (default 2, the
//!   server's default) executions at once, each from its own account, `SANDBOX_RUNS` in all;
//! - **CPU per execution**: this process's user plus system time (the server's share: setup,
//!   output, the control groups) and its waited-for children's (the wrapper shell, bubblewrap and
//!   the program), divided by the executions.
//!
//! Without `--bench` (as `cargo test --benches` runs it) it does a small smoke run.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use seed_agents_server::testing::sandbox::{ExecRequest, Runtime, Sandbox, Settings};

fn main() {
    let smoke = !std::env::args().any(|arg| arg == "--bench");
    let env = |name: &str, default: usize| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let runs = env("SANDBOX_RUNS", if smoke { 10 } else { 200 });
    let concurrency = env("SANDBOX_CONCURRENCY", 2);
    if smoke {
        println!("smoke run (no --bench): figures are not meaningful; use `cargo bench --bench sandbox`");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(run(runs, concurrency));
}

async fn run(runs: usize, concurrency: usize) {
    let sandbox = Arc::new(Sandbox::new(Settings { enabled: true, concurrency, per_account: 1 }));
    let availability = sandbox.availability();
    assert!(availability.available, "the sandbox does not run here: {availability:?}");
    println!("limits in force: {:?}", availability.limits);
    let workspace = tempfile::tempdir().unwrap();

    // One at a time: start to first output, and the whole execution.
    let (mut first, mut whole) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    let cpu = Cpu::now();
    for _ in 0..runs {
        let (sender, mut receiver) = tokio::sync::mpsc::channel(4);
        let request = request("bench", "echo hi", workspace.path(), Some(sender));
        let started = Instant::now();
        let sandbox = sandbox.clone();
        let running = tokio::spawn(async move { sandbox.run(request).await });
        let report = receiver.recv().await.expect("a progress report");
        first.push(started.elapsed());
        assert_eq!(report.output_tail, "hi\n");
        let outcome = running.await.unwrap().unwrap();
        whole.push(started.elapsed());
        assert_eq!(outcome.exit_code, Some(0));
    }
    let (own, children) = cpu.per(runs);
    println!("start to first output (echo hi), {runs} runs: {}", percentiles(&mut first));
    println!("whole execution: {}", percentiles(&mut whole));
    println!("CPU per execution: server {own:.1} ms, sandbox processes {children:.1} ms");

    // At the concurrency limit: executions per second.
    let cpu = Cpu::now();
    let started = Instant::now();
    let tasks: Vec<_> = (0..runs)
        .map(|index| {
            let sandbox = sandbox.clone();
            let request = request(&format!("account-{}", index % concurrency), "echo hi", workspace.path(), None);
            tokio::spawn(async move { sandbox.run(request).await.unwrap() })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap().exit_code, Some(0));
    }
    let elapsed = started.elapsed();
    let (own, children) = cpu.per(runs);
    println!(
        "{runs} executions, {concurrency} at once: {:.1} executions/s; CPU per execution: server {own:.1} ms, \
         sandbox processes {children:.1} ms",
        runs as f64 / elapsed.as_secs_f64()
    );
}

fn request(
    account: &str,
    code: &str,
    workspace: &std::path::Path,
    progress: Option<tokio::sync::mpsc::Sender<seed_agents_server::testing::sandbox::Progress>>,
) -> ExecRequest {
    ExecRequest {
        account_id: account.to_owned(),
        runtime: Runtime::Shell,
        code: code.to_owned(),
        workspace: workspace.to_path_buf(),
        timeout: Duration::from_secs(30),
        progress,
    }
}

fn percentiles(samples: &mut [Duration]) -> String {
    samples.sort();
    let at = |fraction: f64| samples[((samples.len() as f64 * fraction) as usize).min(samples.len() - 1)];
    let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
    format!("p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms", ms(at(0.5)), ms(at(0.99)), ms(samples[samples.len() - 1]))
}

/// This process's CPU time and its waited-for children's, in clock ticks.
struct Cpu {
    own: u64,
    children: u64,
}

impl Cpu {
    fn now() -> Self {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let fields: Vec<u64> =
            stat.rsplit(") ").next().unwrap().split(' ').skip(11).take(4).map(|field| field.parse().unwrap()).collect();
        Self { own: fields[0] + fields[1], children: fields[2] + fields[3] }
    }

    /// Milliseconds of CPU per execution since `self`: this process's and its children's.
    fn per(&self, runs: usize) -> (f64, f64) {
        let now = Self::now();
        let ticks = seed_agents_test_support::bench::CLOCK_TICKS_PER_SECOND as f64;
        let ms = |ticks_used: u64| ticks_used as f64 * 1000.0 / ticks / runs as f64;
        (ms(now.own - self.own), ms(now.children - self.children))
    }
}
