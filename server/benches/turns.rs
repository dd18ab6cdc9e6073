//! Agent turns: `cargo bench -p seed-agents-server --bench turns`.
//!
//! The real server binary runs as a child process; a scripted provider in this process answers
//! every model request at once with a four-chunk streamed reply. `TURNS_WIRE` chooses its wire
//! format: `chat` (the default: a `custom` provider speaking chat completions), `responses` (an
//! `openai` provider pointed at the scripted one with `--provider-url openai=…`, and an agent on
//! gpt-5 with a reasoning level, so every step goes to the Responses API) or `google` (a `google`
//! provider on gemini-2.5-flash, the server started with `--provider-url google=…`, the reply
//! streamed as Gemini chunks) or `subscription` (an `openai` subscription provider signed in
//! against the fake OAuth issuer, its turns on the scripted Codex backend, so each turn also
//! opens the OAuth secret). `TURNS_SESSIONS` workers (default 16) each send
//! `MessageSession` one after another on their own session (a fresh session every 25 turns, so
//! conversations stay the size of real ones) until `TURNS` turns (default 20,000; the issue's
//! figure is 100,000) are done. Reported:
//!
//! - **turns per second** over the whole run;
//! - **server CPU per turn**: the server process's user plus system time over the run, divided
//!   by the turns;
//! - **turn latency**: from sending `MessageSession` to its answer (the assistant message is
//!   durable by then), p50 / p99 / max;
//! - **server-added streaming latency**: for each turn, from the provider writing the first byte
//!   of its answer to the worker's WebSocket subscription receiving the turn's first `textDelta`
//!   (both clocks are this process's), p50 / p99;
//! - **server memory**: resident memory after setup and at every tenth of the run.
//!
//! The load generator, the provider and the server share the machine's cores; absolute figures
//! move with the machine's load. Without `--bench` (as `cargo test --benches` runs it) it does a
//! small smoke run.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use seed_agents_protocol::generated::{
    CreateAgent, CreateSession, ModelProviderConfig, ModelProviderConfigAuthMode, ReasoningLevel, SetModelProvider,
    SetSecret, StartProviderOAuth, SubmitProviderOAuthCode,
};
use seed_agents_sdk::subscription::Event as Live;
use seed_agents_sdk::{Client, Ed25519Signer};
use seed_agents_test_support::bench::{
    CLOCK_TICKS_PER_SECOND, Memory, Server, cpu_ticks, load_average, server_command,
};
use seed_agents_test_support::fixtures::{custom_provider_config, definition, provider_config, say};
use seed_agents_test_support::provider::{Fallback, Provider};

/// The server binary Cargo built for the benches.
const SERVER_BIN: &str = env!("CARGO_BIN_EXE_seed-agents-server");

const SEED: [u8; 32] = [3; 32];
const TURNS_PER_SESSION: usize = 25;

fn main() {
    let smoke = !std::env::args().any(|arg| arg == "--bench");
    let env = |name: &str, default: usize| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let turns = env("TURNS", if smoke { 200 } else { 20_000 });
    let workers = env("TURNS_SESSIONS", 16);
    let wire = match std::env::var("TURNS_WIRE").as_deref() {
        Ok("google") => Wire::Google,
        Ok("responses") => Wire::Responses,
        Ok("subscription") => Wire::Subscription,
        Ok("chat") | Err(_) => Wire::Chat,
        Ok(other) => panic!("TURNS_WIRE is chat, responses, google or subscription, not {other}"),
    };
    if smoke {
        println!("smoke run (no --bench): figures are not meaningful; use `cargo bench --bench turns`");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(run(turns, workers, wire));
}

/// The wire format the scripted provider answers in (`TURNS_WIRE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wire {
    /// OpenAI-compatible chat completions, through a `custom` provider.
    Chat,
    /// OpenAI's Responses API, through an `openai` provider and a reasoning level.
    Responses,
    /// Gemini's `streamGenerateContent`, through a `google` provider.
    Google,
    /// The Responses API on the Codex backend, through a signed-in subscription provider.
    Subscription,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1000.0
}

/// The tag (`turn w-k`) at the end of a request's last user message (chat completions `messages`,
/// Responses `input` or Gemini `contents`).
fn tag_of(body: &serde_json::Value) -> Option<String> {
    let content = match body["messages"].as_array().or_else(|| body["input"].as_array()) {
        Some(messages) => {
            let last = messages.iter().rev().find(|message| message["role"] == "user")?;
            match &last["content"] {
                serde_json::Value::Array(parts) => parts.last()?["text"].as_str()?,
                content => content.as_str()?,
            }
        }
        None => {
            let contents = body["contents"].as_array()?;
            let last = contents.iter().rev().find(|content| content["role"] == "user")?;
            last["parts"].as_array()?.iter().rev().find_map(|part| part["text"].as_str())?
        }
    };
    content.rfind("turn ").map(|at| content[at..].to_owned())
}

/// A current-thread runtime on its own OS thread, for the measuring subscriptions.
struct Watcher {
    handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("watcher".into())
            .spawn(move || {
                let _ = runtime.block_on(stopped);
            })
            .unwrap();
        Self { handle, stop: Some(stop), thread: Some(thread) }
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn new_session(client: &Client, agent_id: &str) -> seed_agents_protocol::SessionId {
    let create = CreateSession {
        agent_id: agent_id.into(),
        client_request_id: None,
        model_override: None,
        thoroughness: None,
        title: None,
    };
    client.create_session(create).await.unwrap().session_id
}

async fn run(turns: usize, workers: usize, wire: Wire) {
    let provider = Arc::new(Provider::start().await);
    provider.set_fallback(Fallback::Pieces("Hi!!".into()));
    let dir = tempfile::tempdir().unwrap();
    let (mut command, addr) = server_command(SERVER_BIN, dir.path());
    command.arg("--session-title-generation").arg("false");
    if wire == Wire::Responses {
        command.arg("--provider-url").arg(format!("openai={}", provider.openai_base()));
    }
    if wire == Wire::Google {
        command.arg("--provider-url").arg(format!("google={}", provider.google_base()));
    }
    let issuer = seed_agents_test_support::oauth::Issuer::start().await;
    if wire == Wire::Subscription {
        command.arg("--subscription-auth").arg("--oauth-issuer-url").arg(issuer.url());
        command.arg("--provider-url").arg(format!("openai-subscription={}", provider.codex_base()));
    }
    let mut server = Server::spawn("turns", (command, addr));
    server.wait_ready();
    let client = Client::builder(&format!("http://{addr}"), Ed25519Signer::from_seed(&SEED)).build().unwrap();
    let mut definition = definition("bench");
    let provider_config = match wire {
        Wire::Chat => custom_provider_config(provider.openai_base()),
        Wire::Responses => {
            let key = seed_agents_protocol::Bytes(b"sk-bench".to_vec());
            client.set_secret(SetSecret { name: "openai-key".into(), value: key, metadata: None }).await.unwrap();
            definition.model = "gpt-5".into();
            definition.reasoning_level = Some(ReasoningLevel::Low);
            provider_config()
        }
        Wire::Google => {
            let key = SetSecret {
                name: "gemini".into(),
                value: seed_agents_protocol::Bytes(b"bench-key".to_vec()),
                metadata: None,
            };
            client.set_secret(key).await.unwrap();
            definition.model = "gemini-2.5-flash".into();
            ModelProviderConfig {
                extra: Default::default(),
                auth_mode: None,
                base_url: None,
                model_defaults: None,
                secret_refs: Some([("apiKey".to_owned(), "gemini".to_owned())].into()),
                type_: "google".into(),
            }
        }
        Wire::Subscription => {
            let started = client.start_provider_oauth(StartProviderOAuth::new("openai")).await.unwrap();
            let redirect = issuer.authorize(&started.auth_url);
            client.submit_provider_oauth_code(SubmitProviderOAuthCode::new(redirect, started.login_id)).await.unwrap();
            definition.model = "gpt-5.1-codex".into();
            ModelProviderConfig {
                extra: Default::default(),
                auth_mode: Some(ModelProviderConfigAuthMode::Subscription),
                base_url: None,
                model_defaults: None,
                secret_refs: Some([("oauth".to_owned(), "openai-subscription-oauth".to_owned())].into()),
                type_: "openai".into(),
            }
        }
    };
    client.set_model_provider(SetModelProvider { name: "main".into(), provider: provider_config }).await.unwrap();
    let agent_id = client.create_agent(CreateAgent { client_request_id: None, definition }).await.unwrap().agent_id;
    println!("wire {wire:?}; load average before: {}", load_average());

    // The provider's first-byte instants, by turn tag, drained as the run goes.
    let first_bytes: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let drain = {
        let (provider, first_bytes) = (provider.clone(), first_bytes.clone());
        move || {
            let mut first_bytes = first_bytes.lock().unwrap();
            for request in provider.take_requests() {
                if let (Some(tag), Some(at)) = (tag_of(&request.body), request.first_byte()) {
                    first_bytes.insert(tag, at);
                }
            }
        }
    };
    let drainer = {
        let drain = drain.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                drain();
            }
        })
    };

    // The subscriptions that stamp the first text deltas run on a thread of their own, so a stamp
    // never waits behind this process's load generating (HTTP calls, the provider's parsing) on the
    // same executor; the server and this process still share the machine's cores.
    let watcher = Watcher::start();

    let idle = Memory::of(server.pid()).rss;
    let cpu_before = cpu_ticks(server.pid());
    let done = Arc::new(AtomicUsize::new(0));
    let samples: Arc<Mutex<Vec<(usize, f64)>>> = Arc::new(Mutex::new(vec![(0, idle)]));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..workers {
        let (client, agent_id, done, samples) = (client.clone(), agent_id.clone(), done.clone(), samples.clone());
        let pid = server.pid();
        let watcher = watcher.handle().clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut partials: Vec<(String, Instant)> = Vec::new();
            let mut turn = 0;
            'sessions: loop {
                let session_id = new_session(&client, &agent_id).await;
                // A reader task stamps each first text delta as it arrives.
                let (sender, mut firsts) = tokio::sync::mpsc::unbounded_channel::<Instant>();
                let (subscribed, ready) = tokio::sync::oneshot::channel::<()>();
                let subscriber = client.subscribe(format!("sessions/{session_id}"));
                let reader = watcher.spawn(async move {
                    let mut live = subscriber.start();
                    assert!(matches!(live.next().await, Some(Ok(Live::Subscribed { .. }))));
                    let _ = subscribed.send(());
                    let mut streaming = None::<String>;
                    while let Some(Ok(event)) = live.next().await {
                        if let Live::Partial { partial_id, patch, .. } = event
                            && patch.text_delta.is_some()
                            && streaming.as_deref() != Some(&partial_id)
                        {
                            streaming = Some(partial_id);
                            let _ = sender.send(Instant::now());
                        }
                    }
                });
                ready.await.unwrap();
                for _ in 0..TURNS_PER_SESSION {
                    let index = done.fetch_add(1, Ordering::Relaxed);
                    if index >= turns {
                        reader.abort();
                        break 'sessions;
                    }
                    if (index + 1) % (turns / 10).max(1) == 0 {
                        samples.lock().unwrap().push((index + 1, Memory::of(pid).rss));
                    }
                    let tag = format!("turn {worker}-{turn}");
                    turn += 1;
                    let sent = Instant::now();
                    let answer = client.message_session(say(&session_id, tag.clone())).await.unwrap();
                    latencies.push(sent.elapsed());
                    assert!(!answer.assistant_event_id.is_empty(), "answered inline");
                    if let Ok(Some(at)) = tokio::time::timeout(Duration::from_secs(5), firsts.recv()).await {
                        partials.push((tag, at));
                    }
                }
                reader.abort();
            }
            (latencies, partials)
        }));
    }
    let mut latencies = Vec::new();
    let mut partials = Vec::new();
    for task in tasks {
        let (mut worker_latencies, mut worker_partials) = task.await.unwrap();
        latencies.append(&mut worker_latencies);
        partials.append(&mut worker_partials);
    }
    let elapsed = started.elapsed();
    let cpu = cpu_ticks(server.pid()).saturating_sub(cpu_before);
    tokio::time::sleep(Duration::from_millis(300)).await;
    drainer.abort();
    drain();
    let last = Memory::of(server.pid()).rss;
    latencies.sort();
    let first_bytes = first_bytes.lock().unwrap();
    let mut added: Vec<Duration> = partials
        .iter()
        .filter_map(|(tag, at)| first_bytes.get(tag).map(|first| at.saturating_duration_since(*first)))
        .collect();
    added.sort();
    println!(
        "{} turns, {workers} sessions at once: {:.0} turns/s; turn p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        latencies.len(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        percentile(&latencies, 1.0),
    );
    println!(
        "server CPU {:.2} s over the run: {:.3} ms per turn",
        cpu as f64 / CLOCK_TICKS_PER_SECOND as f64,
        cpu as f64 * 1000.0 / CLOCK_TICKS_PER_SECOND as f64 / latencies.len().max(1) as f64,
    );
    println!(
        "provider first byte -> first textDelta at the client ({} turns matched): p50 {:.2} ms, p90 {:.2} ms, \
         p99 {:.2} ms, p99.9 {:.2} ms",
        added.len(),
        percentile(&added, 0.5),
        percentile(&added, 0.9),
        percentile(&added, 0.99),
        percentile(&added, 0.999),
    );
    let samples = samples.lock().unwrap();
    let line: Vec<String> = samples.iter().map(|(turn, rss)| format!("{turn}:{rss:.1}")).collect();
    println!("server RSS MiB by turns done: {} (end {last:.1})", line.join(" "));
    if let (Some(first), Some(&(_, peak))) =
        (samples.iter().find(|(turn, _)| *turn > 0), samples.iter().max_by(|a, b| a.1.total_cmp(&b.1)))
    {
        println!("RSS after the first tenth {:.1} MiB, at the end {last:.1} MiB, peak {peak:.1} MiB", first.1);
    }
    drop(server);
}
