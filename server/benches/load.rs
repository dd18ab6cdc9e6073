//! Load benchmark of the signed action endpoint: `cargo bench -p seed-agents-server --bench load`.
//!
//! # What it measures
//!
//! Sixteen workers (by default), one account each, post freshly signed envelopes over loopback
//! HTTP/1.1 for a fixed time per phase, each waiting for its answer before sending the next:
//!
//! 1. the **verify-only baseline** with a `ListAgents` envelope;
//! 2. `ListAgents` (one agent per account), `GetSession` (one session per account, no events)
//!    and `CreateSession` (no `clientRequestId`, so every request makes a new session and
//!    commits with `synchronous=FULL`) against the real server;
//! 3. the baseline again, to show how much the machine drifted during the run.
//!
//! Every envelope is signed just before it is sent, with a new `ts` (the server's replay guard
//! refuses byte-identical envelopes). Any answer other than 200 fails the run. For each phase
//! it prints requests per second, the latency of the HTTP exchange (p50, p99, max; signing is
//! excluded and reported apart as the mean client signing time), the ratio to the baseline's
//! requests per second, the CPU the answering process and the load generator each spent per
//! request, and the answering process's resident memory (`VmRSS` after the phase, `VmHWM` the
//! peak since it started). The load average is printed before and after: other work on the
//! machine moves every figure, and the two baseline rows show by how much.
//!
//! # Why a verify-only baseline
//!
//! Every action pays for HTTP, CBOR decoding and an Ed25519 `verify_strict`, and the load
//! generator (signing, HTTP client) shares the machine's cores with the server. Absolute figures
//! therefore say as much about the machine as about the server. The baseline is an axum server
//! that does only what no action can skip — read the body, [`SignedEnvelope::decode`],
//! [`SignedEnvelope::verify_with`] (the protocol crate's path the server uses: `sig` zeroed,
//! `verify_strict`, the same key cache) and answer a fixed small CBOR body — so the ratio of a
//! phase to it is the share of the ceiling the server keeps after its own work (replay guard,
//! authorization, dispatch, SQLite, encoding).
//!
//! # Processes
//!
//! The real server runs as a child process (the `seed-agents-server` binary Cargo built for this
//! bench, `RUST_LOG=warn`, a temporary `--data-dir`), so its RSS and CPU are its own and not the
//! load generator's. The baseline is a second child: this bench binary re-executed with
//! [`BASELINE_ENV`] set, on a multi-thread Tokio runtime like the server's, so both servers are
//! measured the same way (own process, own runtime, same client); its memory is shown on its
//! rows as a floor. The data directory is made under Cargo's target tmp directory (a real disk,
//! where `fsync` costs what it costs) unless `LOAD_DATA_DIR` says otherwise.
//!
//! # Settings (environment)
//!
//! `LOAD_SECONDS` (measured time per phase, default 5), `LOAD_WARMUP_SECONDS` (default 1),
//! `LOAD_CONCURRENCY` (workers and accounts, default 16), `LOAD_DATA_DIR` (parent of the data
//! directory), `LOAD_ACTIONS` (a comma-separated subset of `ListAgents,GetSession,CreateSession`
//! to run between the two baselines, e.g. to attach a profiler to one). Run without `--bench`
//! (by `cargo test --benches`) it does a short smoke run instead.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use seed_agents_protocol::envelope::{KeyCache, SignedEnvelope, TIMESTAMP_WINDOW_MS};
use seed_agents_protocol::generated::{
    CreateAgent, CreateSession, GetSession, ListAgents, ListAgentsResponse, SetModelProvider,
};
use seed_agents_protocol::{Action, AgentAction, AgentResponse, Ed25519Signer, Response, wire};
use seed_agents_sdk::Client;
use seed_agents_server::Clock;
use seed_agents_test_support::bench::{
    CLOCK_TICKS_PER_SECOND, Memory, Server, cpu_ticks, free_addr, load_average, server_command,
};
use seed_agents_test_support::fixtures::{definition, provider_config};

/// The server binary Cargo built for the benches.
const SERVER_BIN: &str = env!("CARGO_BIN_EXE_seed-agents-server");

/// Set (to the address to listen on) when this binary runs as the verify-only baseline.
const BASELINE_ENV: &str = "SEED_AGENTS_LOAD_BASELINE_LISTEN";

fn main() {
    if let Ok(listen) = std::env::var(BASELINE_ENV) {
        serve_baseline(&listen);
        return;
    }
    let settings = Settings::load();
    settings.print();
    // Declared first so it is removed last, after both children are gone.
    let data = tempfile::tempdir_in(&settings.data_parent).unwrap();
    println!("data dir  : {} ({})", data.path().display(), filesystem_of(data.path()));
    let mut server = Server::spawn("seed-agents-server", server_command(SERVER_BIN, data.path()));
    let mut baseline = Server::spawn("verify-only baseline", baseline_command());
    server.wait_ready();
    baseline.wait_ready();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let rows = runtime.block_on(run_phases(&settings, &server, &baseline));
    print_table(&rows);
    println!("load avg at end: {}", load_average());
}

/// How long and how hard to push.
#[derive(Debug)]
struct Settings {
    measure: Duration,
    warmup: Duration,
    concurrency: usize,
    data_parent: PathBuf,
    /// The server phases to run (all when `None`).
    actions: Option<Vec<String>>,
    smoke: bool,
}

impl Settings {
    fn load() -> Self {
        // `cargo bench` passes `--bench`; `cargo test --benches` does not: then only smoke-test.
        let smoke = !std::env::args().any(|arg| arg == "--bench");
        let (measure, warmup) = if smoke { (0.3, 0.1) } else { (5.0, 1.0) };
        let seconds = |name: &str, default: f64| {
            Duration::from_secs_f64(std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default))
        };
        Self {
            measure: seconds("LOAD_SECONDS", measure),
            warmup: seconds("LOAD_WARMUP_SECONDS", warmup),
            concurrency: std::env::var("LOAD_CONCURRENCY").ok().and_then(|value| value.parse().ok()).unwrap_or(16),
            data_parent: std::env::var_os("LOAD_DATA_DIR")
                .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from),
            actions: std::env::var("LOAD_ACTIONS")
                .ok()
                .map(|list| list.split(',').map(|name| name.trim().to_owned()).collect()),
            smoke,
        }
    }

    fn print(&self) {
        if self.smoke {
            println!("smoke run (no --bench): figures are not meaningful; use `cargo bench --bench load`");
        }
        let cores = std::thread::available_parallelism().map_or(0, |cores| cores.get());
        println!("load avg at start: {}", load_average());
        println!(
            "cores {cores}; {} workers (one account each), one HTTP client; {:.1} s warm-up + {:.1} s measured per phase",
            self.concurrency,
            self.warmup.as_secs_f64(),
            self.measure.as_secs_f64()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The verify-only baseline (this binary, re-executed).

/// What the baseline keeps between requests.
struct Baseline {
    clock: Clock,
    keys: KeyCache,
    answer: Bytes,
}

/// Serves `POST /api/message` with decode + verify only, until killed.
fn serve_baseline(listen: &str) {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(listen).await.unwrap();
        let answer =
            wire::to_vec(&ListAgentsResponse { extra: Default::default(), agents: Vec::new() }.into_response())
                .unwrap();
        let state = Arc::new(Baseline { clock: Clock::system(), keys: KeyCache::new(), answer: answer.into() });
        let router = axum::Router::new().route("/api/message", axum::routing::post(verify_only)).with_state(state);
        axum::serve(listener, router).await.unwrap();
    });
}

async fn verify_only(State(baseline): State<Arc<Baseline>>, body: Bytes) -> axum::response::Response {
    let verified = SignedEnvelope::decode(&body).ok().and_then(|envelope| {
        envelope.verify_with(baseline.clock.now_ms(), TIMESTAMP_WINDOW_MS, Some(&baseline.keys)).ok()
    });
    match verified {
        Some(_) => {
            (StatusCode::OK, [(header::CONTENT_TYPE, "application/cbor")], baseline.answer.clone()).into_response()
        }
        None => StatusCode::UNAUTHORIZED.into_response(),
    }
}

// ---------------------------------------------------------------------------------------------
// Child processes.

fn baseline_command() -> (Command, SocketAddr) {
    let addr = free_addr();
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.env(BASELINE_ENV, addr.to_string());
    (command, addr)
}

// ---------------------------------------------------------------------------------------------
// Accounts and what they act on.

/// One worker's account: its client (for signing), its agent and a session of that agent.
#[derive(Clone)]
struct Account {
    client: Client,
    agent_id: seed_agents_protocol::AgentId,
    session_id: seed_agents_protocol::SessionId,
}

async fn create_accounts(http: &reqwest::Client, server: &Server, count: usize) -> Vec<Account> {
    let mut accounts = Vec::with_capacity(count);
    for _ in 0..count {
        let signer = Ed25519Signer::generate().unwrap();
        let client =
            Client::builder(&format!("http://{}", server.addr), signer).http_client(http.clone()).build().unwrap();
        client.call(SetModelProvider { name: "main".into(), provider: provider_config() }).await.unwrap();
        let agent_id = client
            .call(CreateAgent { client_request_id: None, definition: definition("Load bench") })
            .await
            .unwrap()
            .agent_id;
        let session_id = client.call(create_session(&agent_id)).await.unwrap().session_id;
        accounts.push(Account { client, agent_id, session_id });
    }
    accounts
}

fn create_session(agent_id: &str) -> CreateSession {
    CreateSession {
        agent_id: agent_id.into(),
        client_request_id: None,
        model_override: None,
        thoroughness: None,
        title: None,
    }
}

fn list_agents_action(_: &Account) -> AgentAction {
    ListAgents {}.into_action()
}

fn get_session_action(account: &Account) -> AgentAction {
    GetSession { after_seq: None, before_seq: None, limit: None, session_id: account.session_id.clone() }.into_action()
}

fn create_session_action(account: &Account) -> AgentAction {
    create_session(&account.agent_id).into_action()
}

// ---------------------------------------------------------------------------------------------
// Phases.

/// One load phase: which server, which action.
struct Phase<'a> {
    name: &'static str,
    server: &'a Server,
    action: fn(&Account) -> AgentAction,
}

/// One line of the result table.
struct Row {
    phase: &'static str,
    answered_by: &'static str,
    requests: usize,
    per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    sign_us: f64,
    /// CPU of the answering process per request.
    server_cpu_us: f64,
    /// CPU of this process (the load generator) per request.
    client_cpu_us: f64,
    memory: Memory,
}

async fn run_phases(settings: &Settings, server: &Server, baseline: &Server) -> Vec<Row> {
    let http = seed_agents_sdk::default_http_client().unwrap();
    let accounts = create_accounts(&http, server, settings.concurrency).await;
    println!("server after setup: {}", Memory::of(server.pid()));
    println!("baseline at idle  : {}", Memory::of(baseline.pid()));
    let phases = [
        Phase { name: "verify-only baseline", server: baseline, action: list_agents_action },
        Phase { name: "ListAgents", server, action: list_agents_action },
        Phase { name: "GetSession", server, action: get_session_action },
        Phase { name: "CreateSession", server, action: create_session_action },
        Phase { name: "baseline (again)", server: baseline, action: list_agents_action },
    ];
    let wanted = |phase: &Phase<'_>| {
        phase.server.name != server.name
            || settings.actions.as_ref().is_none_or(|actions| actions.iter().any(|name| name == phase.name))
    };
    let mut rows = Vec::with_capacity(phases.len());
    for phase in phases.iter().filter(|phase| wanted(phase)) {
        rows.push(run_phase(phase, &accounts, &http, settings).await);
    }
    rows
}

async fn run_phase(phase: &Phase<'_>, accounts: &[Account], http: &reqwest::Client, settings: &Settings) -> Row {
    drive(phase, accounts, http, settings.warmup).await.check(phase.name);
    let pid = phase.server.pid();
    let (server_before, client_before) = (cpu_ticks(pid), cpu_ticks(std::process::id()));
    let started = Instant::now();
    let mut stats = drive(phase, accounts, http, settings.measure).await;
    let elapsed = started.elapsed().as_secs_f64();
    let (server_cpu, client_cpu) = (cpu_ticks(pid) - server_before, cpu_ticks(std::process::id()) - client_before);
    stats.check(phase.name);
    let requests = stats.latencies_us.len();
    stats.latencies_us.sort_unstable();
    let per_request = |ticks: u64| (ticks * 1_000_000 / CLOCK_TICKS_PER_SECOND) as f64 / requests as f64;
    let percentile = |q: f64| f64::from(stats.latencies_us[((requests - 1) as f64 * q).round() as usize]) / 1000.0;
    Row {
        phase: phase.name,
        answered_by: phase.server.name,
        requests,
        per_second: requests as f64 / elapsed,
        p50_ms: percentile(0.50),
        p99_ms: percentile(0.99),
        max_ms: percentile(1.0),
        sign_us: stats.sign.as_secs_f64() * 1e6 / requests as f64,
        server_cpu_us: per_request(server_cpu),
        client_cpu_us: per_request(client_cpu),
        memory: Memory::of(pid),
    }
}

/// What the workers of one phase saw.
#[derive(Default)]
struct Stats {
    latencies_us: Vec<u32>,
    sign: Duration,
    errors: usize,
    first_error: Option<String>,
}

impl Stats {
    fn merge(&mut self, other: Stats) {
        self.latencies_us.extend(other.latencies_us);
        self.sign += other.sign;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    /// Fails the run on any error, or when nothing was answered at all.
    fn check(&self, phase: &str) {
        assert!(
            self.errors == 0,
            "{phase}: {} of {} requests failed; first: {}",
            self.errors,
            self.latencies_us.len(),
            self.first_error.as_deref().unwrap_or("?")
        );
        assert!(!self.latencies_us.is_empty(), "{phase}: no request completed");
    }
}

/// Runs one worker per account against the phase's server for `duration`.
async fn drive(phase: &Phase<'_>, accounts: &[Account], http: &reqwest::Client, duration: Duration) -> Stats {
    let deadline = Instant::now() + duration;
    let url = Arc::<str>::from(phase.server.url());
    let workers: Vec<_> = accounts
        .iter()
        .map(|account| {
            let action = (phase.action)(account);
            tokio::spawn(worker(http.clone(), url.clone(), account.client.clone(), action, deadline))
        })
        .collect();
    let mut stats = Stats::default();
    for worker in workers {
        stats.merge(worker.await.unwrap());
    }
    stats
}

/// Signs `action` afresh (new `ts`) and posts it, one request at a time, until `deadline`.
async fn worker(http: reqwest::Client, url: Arc<str>, client: Client, action: AgentAction, deadline: Instant) -> Stats {
    let mut stats = Stats::default();
    while Instant::now() < deadline {
        let start = Instant::now();
        let body = client.sign(&action).await.unwrap();
        let sent = Instant::now();
        let outcome = post(&http, &url, body).await;
        let answered = Instant::now();
        stats.sign += sent - start;
        stats.latencies_us.push(u32::try_from((answered - sent).as_micros()).unwrap_or(u32::MAX));
        if let Err(error) = outcome {
            stats.errors += 1;
            stats.first_error.get_or_insert(error);
        }
    }
    stats
}

/// Posts envelope bytes; anything but a 200 is an error, described.
async fn post(http: &reqwest::Client, url: &str, body: Vec<u8>) -> Result<(), String> {
    let response = http
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/cbor")
        .body(body)
        .send()
        .await
        .map_err(|error| format!("transport: {error}"))?;
    let status = response.status();
    let bytes = response.bytes().await.map_err(|error| format!("reading the answer: {error}"))?;
    if status == reqwest::StatusCode::OK {
        return Ok(());
    }
    match wire::from_slice::<AgentResponse>(&bytes) {
        Ok(AgentResponse::Error(error)) => Err(format!("HTTP {status}: {}", error.message)),
        _ => Err(format!("HTTP {status} ({} bytes)", bytes.len())),
    }
}

// ---------------------------------------------------------------------------------------------
// Reading the machine and the processes.

/// The type of the filesystem holding `path` (the longest mount point that prefixes it).
fn filesystem_of(path: &Path) -> String {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_owned());
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_, point, kind) = (fields.next()?, fields.next()?, fields.next()?);
            path.starts_with(point).then(|| (point.len(), kind.to_owned()))
        })
        .max()
        .map_or_else(|| "unknown filesystem".to_owned(), |(_, kind)| kind)
}

/// The result table's columns: heading and width (the first is left-aligned, the rest right).
const COLUMNS: [(&str, usize); 13] = [
    ("phase", 22),
    ("requests", 8),
    ("req/s", 7),
    ("vs base", 7),
    ("p50 ms", 6),
    ("p99 ms", 6),
    ("max ms", 6),
    ("sign µs", 7),
    ("srv CPU µs", 10),
    ("cli CPU µs", 10),
    ("RSS MiB", 7),
    ("HWM MiB", 7),
    ("answered by", 0),
];

fn print_table(rows: &[Row]) {
    let ceiling = rows.first().map_or(f64::NAN, |row| row.per_second);
    println!();
    print_line(COLUMNS.iter().map(|(heading, _)| (*heading).to_owned()));
    for row in rows {
        print_line([
            row.phase.to_owned(),
            row.requests.to_string(),
            format!("{:.0}", row.per_second),
            format!("{:.2}", row.per_second / ceiling),
            format!("{:.2}", row.p50_ms),
            format!("{:.2}", row.p99_ms),
            format!("{:.2}", row.max_ms),
            format!("{:.1}", row.sign_us),
            format!("{:.1}", row.server_cpu_us),
            format!("{:.1}", row.client_cpu_us),
            format!("{:.1}", row.memory.rss),
            format!("{:.1}", row.memory.peak),
            row.answered_by.to_owned(),
        ]);
    }
    println!();
    println!("latency: the HTTP exchange only (the client's signing is 'sign µs', apart); vs base: req/s over");
    println!("the first baseline; srv CPU, RSS, HWM: the answering process; cli CPU: this load generator.");
}

fn print_line(cells: impl IntoIterator<Item = String>) {
    let mut line = String::new();
    for (index, (cell, (_, width))) in cells.into_iter().zip(COLUMNS).enumerate() {
        let cell = if index == 0 { format!("{cell:<width$}") } else { format!("  {cell:>width$}") };
        line.push_str(&cell);
    }
    println!("{line}");
}
