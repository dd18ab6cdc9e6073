//! WebSocket fan-out: `cargo bench -p seed-agents-server --bench fanout`.
//!
//! The real server binary runs as a child process. One agent is public-read; `FANOUT_SOCKETS`
//! sockets (default `1000,5000`, one run per count, each with a fresh server) are opened, each
//! signed by its own account and subscribed to the same session, as many viewers of one public
//! conversation would be. Then:
//!
//! - **memory per idle subscribed socket**: the server's resident memory (`VmRSS`) after every
//!   socket subscribed and went quiet, minus before the first one opened, divided by the count;
//! - **fan-out latency**: `FANOUT_ROUNDS` times (default 40), one durable append is made
//!   (`InvokeSessionTool` `read ~/self`, which commits two events with `synchronous=FULL`); for every
//!   socket, the time from sending that request to the socket receiving the `append` of its
//!   first event. p50, p99 and max over all sockets × rounds, and the time the HTTP write itself
//!   took (its answer comes after the commit), as the floor any delivery stands on.
//!
//! The load generator shares the machine's cores with the server, reading every socket itself,
//! so the figures include its own scheduling; the write's time is printed beside them. Run
//! without `--bench` (by `cargo test --benches`) it does a small smoke run.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    CreateAgent, CreateSession, InvokeSessionTool, InvokeSessionToolVerb, SetAgentPublicRead, SetModelProvider,
    Subscribe,
};
use seed_agents_protocol::{AgentAction, Value};
use seed_agents_sdk::{Client, Ed25519Signer};
use seed_agents_test_support::bench::{CLOCK_TICKS_PER_SECOND, Memory, Server, cpu_ticks, server_command};
use seed_agents_test_support::fixtures::{definition, provider_config};
use tokio::sync::{Barrier, mpsc};
use tokio_tungstenite::tungstenite::Message;

/// The server binary Cargo built for the benches.
const SERVER_BIN: &str = env!("CARGO_BIN_EXE_seed-agents-server");

fn main() {
    let smoke = !std::env::args().any(|arg| arg == "--bench");
    let counts: Vec<usize> = std::env::var("FANOUT_SOCKETS")
        .unwrap_or_else(|_| if smoke { "20".into() } else { "1000,5000".into() })
        .split(',')
        .filter_map(|count| count.trim().parse().ok())
        .collect();
    let rounds =
        std::env::var("FANOUT_ROUNDS").ok().and_then(|value| value.parse().ok()).unwrap_or(if smoke { 3 } else { 40 });
    if smoke {
        println!("smoke run (no --bench): figures are not meaningful; use `cargo bench --bench fanout`");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    for count in counts {
        runtime.block_on(run(count, rounds));
    }
}

async fn run(count: usize, rounds: usize) {
    let data = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (mut command, addr) = server_command(SERVER_BIN, data.path());
    command.args(["--ws-max-sockets", "20000", "--max-connections", "20000"]);
    // `FANOUT_WRAP="valgrind --tool=massif"` runs the server under a profiler.
    if let Ok(wrap) = std::env::var("FANOUT_WRAP") {
        let mut words = wrap.split_whitespace();
        let program = words.next().unwrap_or("env").to_owned();
        let mut wrapped = std::process::Command::new(program);
        wrapped.args(words).arg(command.get_program()).args(command.get_args());
        wrapped.env("RUST_LOG", "warn");
        command = wrapped;
    }
    let mut server = Server::spawn("seed-agents-server", (command, addr));
    server.wait_ready();
    let url = format!("http://{addr}");
    let owner = Client::new(&url, Ed25519Signer::from_seed(&[1; 32])).unwrap();
    owner.set_model_provider(SetModelProvider { name: "main".into(), provider: provider_config() }).await.unwrap();
    let agent_id = owner
        .create_agent(CreateAgent { client_request_id: None, definition: definition("fanout") })
        .await
        .unwrap()
        .agent_id;
    owner.set_agent_public_read(SetAgentPublicRead { agent_id: agent_id.clone(), public_read: true }).await.unwrap();
    let session_id = owner
        .create_session(CreateSession {
            agent_id,
            client_request_id: None,
            model_override: None,
            thoroughness: None,
            title: None,
        })
        .await
        .unwrap()
        .session_id;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = Memory::of(server.pid());

    // Open and subscribe every socket, 200 at a time.
    let (arrivals, mut arrived) = mpsc::unbounded_channel::<(usize, Instant)>();
    let ready = Arc::new(Barrier::new(count + 1));
    let opened = Instant::now();
    let socket_url = format!("ws://{addr}/agents/ws");
    let mut readers = Vec::with_capacity(count);
    for batch in (0..count).collect::<Vec<_>>().chunks(200) {
        let mut connecting = Vec::new();
        for &index in batch {
            let (socket_url, key) = (socket_url.clone(), format!("sessions/{session_id}"));
            let (arrivals, ready) = (arrivals.clone(), ready.clone());
            connecting.push(tokio::spawn(async move { reader(index, &socket_url, key, arrivals, ready).await }));
        }
        for task in connecting {
            readers.push(task.await.unwrap());
        }
    }
    ready.wait().await;
    let open_time = opened.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = Memory::of(server.pid());
    let per_socket_kib = (idle.rss - before.rss) * 1024.0 / count as f64;

    // Rounds of one durable append each.
    let writer = Client::new(&url, Ed25519Signer::from_seed(&[1; 32])).unwrap();
    let mut latencies = Vec::with_capacity(count * rounds);
    let mut writes = Vec::with_capacity(rounds);
    let (server_cpu, own_cpu) = (cpu_ticks(server.pid()), cpu_ticks(std::process::id()));
    for round in 0..rounds {
        // A `read` of the agent itself: two durable events, one commit, no memory file written.
        let input =
            [("address".to_owned(), Ipld::String("~/self".into())), ("round".to_owned(), Ipld::Integer(round as i128))];
        let write = InvokeSessionTool {
            input: Value(Ipld::Map(input.into_iter().collect())),
            session_id: session_id.clone(),
            verb: InvokeSessionToolVerb::Read,
        };
        let sent = Instant::now();
        writer.invoke_session_tool(write).await.unwrap();
        writes.push(sent.elapsed());
        let mut seen = 0;
        while seen < count {
            let (_, at) = tokio::time::timeout(Duration::from_secs(30), arrived.recv()).await.unwrap().unwrap();
            latencies.push(at.saturating_duration_since(sent));
            seen += 1;
        }
        // Let the second event's frames drain before the next round.
        tokio::time::sleep(Duration::from_millis(100)).await;
        while arrived.try_recv().is_ok() {}
    }
    let after = Memory::of(server.pid());
    let per_round = |ticks: u64| ticks as f64 * 1000.0 / CLOCK_TICKS_PER_SECOND as f64 / rounds as f64;
    let (server_cpu, own_cpu) =
        (per_round(cpu_ticks(server.pid()) - server_cpu), per_round(cpu_ticks(std::process::id()) - own_cpu));
    for reader in readers {
        reader.task.abort();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let closed = Memory::of(server.pid());
    println!("  after every socket closed: server RSS {:.1} MiB", closed.rss);
    latencies.sort();
    writes.sort();
    let at = |sorted: &[Duration], q: f64| sorted[((sorted.len() - 1) as f64 * q) as usize].as_secs_f64() * 1000.0;
    println!(
        "{count} sockets: opened and subscribed in {:.1} s; server RSS {:.1} -> {:.1} MiB idle ({:.2} KiB per socket), {:.1} MiB after {rounds} rounds",
        open_time.as_secs_f64(),
        before.rss,
        idle.rss,
        per_socket_kib,
        after.rss
    );
    println!(
        "  fan-out latency over {} deliveries: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; the write itself: p50 {:.1} ms, p99 {:.1} ms",
        latencies.len(),
        at(&latencies, 0.5),
        at(&latencies, 0.99),
        at(&latencies, 1.0),
        at(&writes, 0.5),
        at(&writes, 0.99)
    );
    println!("  CPU per round (one append to every socket): server {server_cpu:.1} ms, load generator {own_cpu:.1} ms");
    if std::env::var("FANOUT_WRAP").is_ok() {
        // A profiler writes its report when the server exits on its own.
        let _ = std::process::Command::new("kill").arg("-TERM").arg(server.pid().to_string()).status();
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    drop(server);
}

/// One socket: subscribes with its own account, reports ready once the replay is in, then
/// reports the arrival of every `append` whose event is a `tool_call` (the first of a write).
async fn reader(
    index: usize,
    url: &str,
    key: String,
    arrivals: mpsc::UnboundedSender<(usize, Instant)>,
    ready: Arc<Barrier>,
) -> Reading {
    let (mut socket, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&(index as u64 + 1000).to_le_bytes());
    let client = Client::new("http://127.0.0.1:1", Ed25519Signer::from_seed(&seed)).unwrap();
    let subscribe = AgentAction::Subscribe(Subscribe { after_seq: None, key });
    socket.send(Message::Binary(client.sign(&subscribe).await.unwrap().into())).await.unwrap();
    // `connected`, `subscribed`, then the session's `change`.
    for _ in 0..3 {
        let frame = socket.next().await.unwrap().unwrap();
        assert!(!frame.to_text().unwrap_or_default().contains("\"error\""), "{frame}");
    }
    let task = tokio::spawn(async move {
        ready.wait().await;
        while let Some(Ok(message)) = socket.next().await {
            if let Message::Text(text) = message
                && text.starts_with("{\"_\":\"append\"")
                && text.contains("\"tool_call\"")
            {
                let _ = arrivals.send((index, Instant::now()));
            }
        }
    });
    Reading { task }
}

/// A subscribed socket's reading task.
struct Reading {
    task: tokio::task::JoinHandle<()>,
}
