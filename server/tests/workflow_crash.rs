//! Workflow runs survive crashes, against the real binary (docs/workflows.md §2): parents
//! delegate a script that searches three times in parallel (`web_search`, at a fake SearXNG that
//! records each request and when it arrived), waits for a signal, delegates an agent child and
//! sleeps; the test signals parked scripts as it goes, and the server is SIGKILLed at random
//! moments (12 by default) and restarted on the same data directory each time.
//!
//! At the end every run succeeded, and for each workflow:
//! - no search ran again after its result was journaled (a request at the fake after the
//!   `result` entry's time would be a completed effect done twice), and a search that did run
//!   twice had a kill between its two requests (an effect cut off before its result was durable
//!   runs again, by design);
//! - exactly one signal was taken (one `event` entry, `delivered: true` at most once);
//! - exactly one agent child was started, whose answer is in the script's output;
//! - the parent's `delegate` call got exactly one result, the script's output.
//!
//! `cargo test -p seed-agents-server --test tests workflow_crash -- --nocapture` prints the
//! figures; `CRASH_KILLS=n` changes the number of kills.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use seed_agents_protocol::generated::{
    CreateAgent, CreateSession, GetRunJournal, GetSession, ListRuns, RunInfo, RunInfoKind, RunStatus,
    SessionEventPayload, SetModelProvider, SignalRun,
};
use seed_agents_sdk::Client;
use serde_json::{Value, json};

use crate::support::crash::{self, Lcg};
use crate::support::fixtures::{custom_provider_config, definition, say};
use crate::support::process::{Launch, ServerProcess, free_port};
use crate::support::provider::{Fallback, Provider, Script};
use crate::support::searxng::FakeSearxng;

const SEED: [u8; 32] = [11; 32];
const CHILD_PROMPT: &str = "You are a summariser.";
const PARENTS_PER_ROUND: usize = 2;

const SCRIPT: &str = r#"
export default async function (input, ctx) {
  const found = await ctx.parallel([0, 1, 2].map((i) => () => ctx.call("web_search", {query: input.tag + "/" + i})));
  const answer = await ctx.waitForEvent({signal: "go"}, {label: "Go ahead for " + input.tag});
  const child = await ctx.delegate({brief: "Summarise " + input.tag, prompt: "You are a summariser."});
  await ctx.sleep(20);
  return {tag: input.tag, searches: found.length, payload: answer.payload, child: child.text};
}
"#;

fn client(url: &str) -> Client {
    crash::client(url, &SEED)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Children answer their brief; a parent with its result answers; any other parent request
/// delegates the script, tagged with the parent's task.
fn rule(body: &Value) -> Script {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let system = messages.first().and_then(|message| message["content"].as_str()).unwrap_or_default();
    let last = messages.last().cloned().unwrap_or_default();
    if system.starts_with(CHILD_PROMPT) {
        // The brief is the child's first message (a resumed child's last one is a notice).
        let brief = messages.iter().find(|message| message["role"] == "user");
        let brief = brief.and_then(|message| message["content"].as_str()).unwrap_or_default();
        return Script::text(&format!("Summary of {}", brief.trim_start_matches("Summarise ")))
            .delay(Duration::from_millis(3));
    }
    if last["role"] == "tool" {
        return Script::text("Parent finished.");
    }
    let task = messages
        .iter()
        .rev()
        .filter(|message| message["role"] == "user")
        .find_map(|message| {
            let content = message["content"].as_str()?;
            let at = content.find("task ")?;
            Some(content[at..].split_whitespace().take(2).collect::<Vec<_>>().join(" "))
        })
        .unwrap_or_default();
    let arguments = json!({"script": SCRIPT, "input": {"tag": task}, "title": task});
    Script::tool_call("d1", "delegate", &arguments.to_string())
}

/// Every run of the parents' trees.
async fn runs_of(client: &Client, parents: &[String]) -> Vec<RunInfo> {
    let mut runs = Vec::new();
    for session in parents {
        let roots = ListRuns {
            agent_id: None,
            limit: None,
            root_run_id: None,
            session_id: Some(session.clone().into()),
            status: None,
        };
        let Ok(answer) = client.list_runs(roots).await else { continue };
        for root in answer.runs {
            let tree =
                ListRuns { agent_id: None, limit: None, root_run_id: Some(root.id), session_id: None, status: None };
            if let Ok(tree) = client.list_runs(tree).await {
                runs.extend(tree.runs);
            }
        }
    }
    runs
}

/// Signals every workflow parked on its wait; the runs that answered `delivered: true`.
async fn signal_parked(client: &Client, parents: &[String], round: usize) -> Vec<String> {
    let mut delivered = Vec::new();
    for run in runs_of(client, parents).await {
        if run.kind != RunInfoKind::Workflow || run.status != RunStatus::Waiting {
            continue;
        }
        let payload = seed_agents_protocol::Value(seed_agents_protocol::wire::json_to_ipld(&json!({"round": round})));
        let signal = SignalRun { run_id: run.id.clone(), signal: "go".into(), payload: Some(payload) };
        if client.signal_run(signal).await.is_ok_and(|answer| answer.delivered) {
            delivered.push(run.id.to_string());
        }
    }
    delivered
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflows_finish_with_every_effect_and_signal_taken_once_across_sigkills() {
    let kills = crash::kills(12);
    let provider = Provider::start().await;
    provider.set_fallback(Fallback::Rule(rule));
    let searxng = FakeSearxng::start().await;
    let mut random = Lcg(0x5c21_97f0);
    let dir = tempfile::tempdir().unwrap();
    let launch = Launch::new(crate::SERVER_BIN, &dir.path().join("data"), &dir.path().join("server.log"))
        .port(free_port())
        .arg("--session-title-generation")
        .arg("false")
        .arg("--searxng-url")
        .arg(searxng.url.clone());
    let mut server = ServerProcess::start(&launch).await;
    let owner = client(&server.url);
    let custom = custom_provider_config(provider.openai_base());
    owner.set_model_provider(SetModelProvider { name: "main".into(), provider: custom }).await.unwrap();
    let agent = CreateAgent { client_request_id: None, definition: definition("lead") };
    let agent = owner.create_agent(agent).await.unwrap().agent_id;
    let mut parents: Vec<String> = Vec::new();
    let mut delivered: HashMap<String, usize> = HashMap::new();
    let mut kill_times: Vec<i64> = Vec::new();
    let started = Instant::now();
    // Workflows executing and parked, summed over the moments just before each kill.
    let mut states = [0usize; 2];
    for kill in 0..kills {
        let owner = client(&server.url);
        for index in 0..PARENTS_PER_ROUND {
            let create = CreateSession {
                agent_id: agent.clone(),
                client_request_id: None,
                model_override: None,
                thoroughness: None,
                title: None,
            };
            let session = owner.create_session(create).await.unwrap().session_id;
            parents.push(session.to_string());
            let (client, message) = (client(&server.url), say(&session, format!("task {kill}.{index} go")));
            tokio::spawn(async move { client.message_session(message).await });
        }
        // Signals race the kill too: some are taken just before it; every other round sends none,
        // so some kills find workflows parked.
        tokio::time::sleep(Duration::from_millis(20 + random.next(200))).await;
        if random.next(2) == 0 {
            for run in signal_parked(&owner, &parents, kill).await {
                *delivered.entry(run).or_default() += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(random.next(200))).await;
        for run in runs_of(&owner, &parents).await.iter().filter(|run| run.kind == RunInfoKind::Workflow) {
            match run.status {
                RunStatus::Claimed | RunStatus::Running => states[0] += 1,
                RunStatus::Waiting => states[1] += 1,
                _ => {}
            }
        }
        server.kill();
        kill_times.push(now_ms());
        server = ServerProcess::start(&launch).await;
    }

    // Let the last restart finish what the last kill interrupted, signalling what parks.
    let owner = client(&server.url);
    let runs = {
        let (owner, parents, delivered) = (&owner, &parents, &mut delivered);
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            for run in signal_parked(owner, parents, kills).await {
                *delivered.entry(run).or_default() += 1;
            }
            let runs = runs_of(owner, parents).await;
            let workflows = runs.iter().filter(|run| run.kind == RunInfoKind::Workflow).count();
            // A message the kill cut off before it was acknowledged may be lost with its session's
            // first run: only parents with a turn are counted.
            let turns = runs.iter().filter(|run| run.parent_run_id.is_none()).count();
            let ended = runs
                .iter()
                .all(|run| matches!(run.status, RunStatus::Succeeded | RunStatus::Failed | RunStatus::Canceled));
            if ended && workflows == turns {
                break runs;
            }
            assert!(
                Instant::now() < deadline,
                "runs left unfinished: {:?}",
                runs.iter().map(|r| (r.kind, r.status)).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let failed: Vec<_> =
        runs.iter().filter(|run| run.status != RunStatus::Succeeded).map(|run| (&run.id, &run.error)).collect();
    assert!(failed.is_empty(), "every run succeeded: {failed:?}");

    let queries = searxng.queries_at();
    let mut repeated = 0;
    let workflows: Vec<&RunInfo> = runs.iter().filter(|run| run.kind == RunInfoKind::Workflow).collect();
    for workflow in &workflows {
        let journal = GetRunJournal { run_id: workflow.id.clone(), after_seq: None };
        let entries: Vec<Value> = owner
            .get_run_journal(journal)
            .await
            .unwrap()
            .entries
            .iter()
            .map(|entry| {
                let mut body = serde_json::to_value(&entry.entry).unwrap();
                body["createdAt"] = json!(entry.created_at);
                body
            })
            .collect();
        // Searches: never after their result; repeated only across a kill.
        let results: HashMap<u64, i64> = entries
            .iter()
            .filter(|entry| entry["kind"] == "result")
            .map(|entry| (entry["callSeq"].as_u64().unwrap(), entry["createdAt"].as_i64().unwrap()))
            .collect();
        let searches: Vec<(&str, u64)> = entries
            .iter()
            .filter(|entry| entry["kind"] == "call" && entry["tool"] == "web_search")
            .map(|entry| (entry["input"]["query"].as_str().unwrap(), entry["callSeq"].as_u64().unwrap()))
            .collect();
        assert_eq!(searches.len(), 3, "three searches journaled once each in {}", workflow.id);
        for (query, call_seq) in searches {
            let arrivals: Vec<i64> = queries.iter().filter(|(q, _)| q == query).map(|(_, at)| *at).collect();
            assert!(!arrivals.is_empty(), "{query} was searched");
            let result_at = results[&call_seq];
            assert!(
                arrivals.iter().all(|at| *at <= result_at),
                "{query} ran again after its result: {arrivals:?} vs {result_at}"
            );
            for pair in arrivals.windows(2) {
                assert!(
                    kill_times.iter().any(|kill| pair[0] <= *kill && *kill <= pair[1]),
                    "{query} ran twice with no kill in between: {pair:?}"
                );
                repeated += 1;
            }
        }
        // One signal taken, one child started.
        let events = entries.iter().filter(|entry| entry["kind"] == "event").count();
        assert_eq!(events, 1, "one signal taken by {}", workflow.id);
        assert!(delivered.get(workflow.id.as_str()).copied().unwrap_or(0) <= 1, "delivered twice to {}", workflow.id);
        let agent_children =
            runs.iter().filter(|run| run.parent_run_id.as_deref() == Some(workflow.id.as_str())).count();
        assert_eq!(agent_children, 1, "one agent child of {}", workflow.id);
    }

    // Each parent's call answered once, with the script's output.
    let turned: Vec<&str> =
        runs.iter().filter(|run| run.parent_run_id.is_none()).filter_map(|run| run.session_id.as_deref()).collect();
    assert!(turned.len() + kills >= parents.len(), "at most one message per kill lost");
    for session in turned {
        let get = GetSession { session_id: session.into(), after_seq: None, before_seq: None, limit: None };
        let events = owner.get_session(get).await.unwrap().events;
        let outputs: Vec<Value> = events
            .iter()
            .filter_map(|event| match &event.event {
                SessionEventPayload::ToolResultEvent(result) if result.name == "delegate" => {
                    result.output.as_ref().map(|output| serde_json::to_value(output).unwrap())
                }
                _ => None,
            })
            .collect();
        assert_eq!(outputs.len(), 1, "one result for {session}: {outputs:?}");
        let output = &outputs[0]["output"];
        let tag = output["tag"].as_str().unwrap();
        assert_eq!(output["searches"], 3, "{output}");
        assert_eq!(output["child"], format!("Summary of {tag}"), "{output}");
        assert!(output["payload"]["round"].is_u64(), "{output}");
    }
    server.terminate().await;
    println!(
        "{kills} kills in {:.1} s: {} workflows finished, each search journaled once ({repeated} re-run after a kill \
         cut it off before its result), one signal and one child each; at the kills: {} workflows executing, {} parked",
        started.elapsed().as_secs_f64(),
        workflows.len(),
        states[0],
        states[1]
    );
    assert!(states[0] > 0 && states[1] > 0, "kills landed on executing and parked workflows: {states:?}");
}
