//! Workflow runs: `cargo bench -p seed-agents-server --bench workflows`.
//!
//! The real server binary runs as a child process; a scripted provider in this process answers
//! each parent turn with one `delegate {script}` call (and a closing reply once the result is in).
//! The script journals `WORKFLOW_EFFECTS` effects (default 1,000) one after another, alternating
//! `ctx.now()` and `ctx.log(…)`, then parks on `ctx.waitForEvent`; the bench signals it, and it
//! replays its whole journal to finish. `WORKFLOW_RUNS` runs (default 5) go one after another.
//! Reported, per run and as the median, from the server's own timestamps:
//!
//! - **journaled effects per second**: the effects over the time from the first entry's
//!   `createdAt` to the `wait` entry's (each entry is a committed write before the script
//!   continues);
//! - **resume replay time**: from the delivery (the `event` entry's `createdAt`) to the run's
//!   `finishedAt`: the claim, a fresh realm, the script run again from the top with every
//!   effect answered from the journal;
//! - **server CPU per journaled effect**: the server process's user plus system time over the
//!   run, divided by the entries written;
//! - **server memory** after the runs.
//!
//! Without `--bench` (as `cargo test --benches` runs it) it does a small smoke run.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use seed_agents_protocol::generated::{
    CreateAgent, CreateSession, GetRunJournal, ListRuns, RunInfoKind, RunStatus, SetModelProvider, SignalRun,
};
use seed_agents_sdk::{Client, Ed25519Signer};
use seed_agents_test_support::bench::{
    CLOCK_TICKS_PER_SECOND, Memory, Server, cpu_ticks, load_average, server_command,
};
use seed_agents_test_support::fixtures::{custom_provider_config, definition, say};
use seed_agents_test_support::provider::{Fallback, Provider, Script};

/// The server binary Cargo built for the benches.
const SERVER_BIN: &str = env!("CARGO_BIN_EXE_seed-agents-server");

const SEED: [u8; 32] = [5; 32];

fn main() {
    let smoke = !std::env::args().any(|arg| arg == "--bench");
    let env = |name: &str, default: usize| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let effects = env("WORKFLOW_EFFECTS", if smoke { 50 } else { 1_000 });
    let runs = env("WORKFLOW_RUNS", if smoke { 1 } else { 5 });
    if smoke {
        println!("smoke run (no --bench): figures are not meaningful; use `cargo bench --bench workflows`");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(run(effects, runs));
}

/// The parent's answer: the script call first, a closing reply once the result is in.
fn rule(body: &serde_json::Value) -> Script {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    if messages.last().is_some_and(|message| message["role"] == "tool") {
        return Script::text("Done.");
    }
    // The user's message says how many: `effects N` (the replay may add context around it).
    let effects: usize = messages
        .iter()
        .rev()
        .filter(|message| message["role"] == "user")
        .find_map(|message| {
            let content = message["content"].as_str()?;
            let after = &content[content.find("effects ")? + "effects ".len()..];
            after.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
        })
        .expect("the user's message names the number of effects");
    let script = format!(
        "export default async function (input, ctx) {{\n  for (let i = 0; i < {effects}; i++) {{\n    \
         if (i % 2 === 0) {{ await ctx.now(); }} else {{ await ctx.log('info', 'step ' + i); }}\n  }}\n  \
         const got = await ctx.waitForEvent({{signal: 'go'}});\n  return got.payload;\n}}"
    );
    Script::tool_call("d1", "delegate", &serde_json::json!({"script": script}).to_string())
}

async fn run(effects: usize, runs: usize) {
    let provider = Provider::start().await;
    provider.set_fallback(Fallback::Rule(rule));
    let dir = tempfile::tempdir().unwrap();
    let (mut command, addr) = server_command(SERVER_BIN, dir.path());
    command.arg("--session-title-generation").arg("false");
    let mut server = Server::spawn("workflows", (command, addr));
    server.wait_ready();
    let client = Client::builder(&format!("http://{addr}"), Ed25519Signer::from_seed(&SEED)).build().unwrap();
    let provider_config = custom_provider_config(provider.openai_base());
    client.set_model_provider(SetModelProvider { name: "main".into(), provider: provider_config }).await.unwrap();
    let agent = CreateAgent { client_request_id: None, definition: definition("bench") };
    let agent_id = client.create_agent(agent).await.unwrap().agent_id;
    println!("effects per run {effects}, runs {runs}; load average before: {}", load_average());

    let mut rates = Vec::new();
    let mut replays = Vec::new();
    for index in 0..runs {
        let create = CreateSession {
            agent_id: agent_id.clone(),
            client_request_id: None,
            model_override: None,
            thoroughness: None,
            title: None,
        };
        let session = client.create_session(create).await.unwrap().session_id;
        let cpu_before = cpu_ticks(server.pid());
        client.message_session(say(&session, format!("effects {effects}"))).await.unwrap();
        let workflow = wait_for(&client, &session, RunStatus::Waiting).await;
        let journal = |after| GetRunJournal { run_id: workflow.clone().into(), after_seq: Some(after) };
        let entries = client.get_run_journal(journal(0)).await.unwrap().entries;
        let (first, parked) = (entries.first().unwrap().created_at, entries.last().unwrap().created_at);
        let written = entries.len();
        let signal = SignalRun { run_id: workflow.clone().into(), signal: "go".into(), payload: None };
        assert!(client.signal_run(signal).await.unwrap().delivered);
        let finished = wait_for(&client, &session, RunStatus::Succeeded).await;
        assert_eq!(finished, workflow);
        let run = client.get_run(seed_agents_protocol::generated::GetRun { run_id: workflow.clone().into() }).await;
        let finished_at = run.unwrap().run.finished_at.unwrap();
        let delivered = client.get_run_journal(journal(written as i64)).await.unwrap().entries[0].created_at;
        let cpu = cpu_ticks(server.pid()) - cpu_before;
        let rate = effects as f64 / ((parked - first).max(1) as f64 / 1000.0);
        let replay = finished_at - delivered;
        let cpu_per_entry = cpu as f64 / CLOCK_TICKS_PER_SECOND as f64 * 1e6 / (written + 1) as f64;
        println!(
            "run {index}: {rate:.0} journaled effects/s, resume replay of {written} entries {replay} ms, \
             server CPU {cpu_per_entry:.0} µs per journaled effect (whole run)"
        );
        rates.push(rate);
        replays.push(replay);
    }
    rates.sort_by(f64::total_cmp);
    replays.sort_unstable();
    println!(
        "median: {:.0} journaled effects/s, resume replay {} ms; server memory {}; load average after: {}",
        rates[rates.len() / 2],
        replays[replays.len() / 2],
        Memory::of(server.pid()),
        load_average()
    );
}

/// The session's workflow run once it has `status` (polled every 5 ms).
async fn wait_for(client: &Client, session: &seed_agents_protocol::SessionId, status: RunStatus) -> String {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let roots = ListRuns {
            agent_id: None,
            limit: None,
            root_run_id: None,
            session_id: Some(session.clone()),
            status: None,
        };
        if let Some(root) = client.list_runs(roots).await.unwrap().runs.first() {
            let tree = ListRuns {
                agent_id: None,
                limit: None,
                root_run_id: Some(root.id.clone()),
                session_id: None,
                status: None,
            };
            let runs = client.list_runs(tree).await.unwrap().runs;
            if let Some(run) = runs.iter().find(|run| run.kind == RunInfoKind::Workflow && run.status == status) {
                return run.id.to_string();
            }
        }
        assert!(Instant::now() < deadline, "the workflow never became {status}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
