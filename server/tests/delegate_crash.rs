//! Delegation survives crashes, against the real binary: parents delegate two children each and
//! park; the server is SIGKILLed at random moments (20 by default) while parents spawn, park,
//! wait, get their results and resume, and is restarted on the same data directory each time.
//! At the end every run ended, every parent succeeded with exactly one result per delegate call
//! (each child's result delivered exactly once, before the parent's final answer), and no run
//! spent a retry on a park, a resume or a boot sweep.
//!
//! `cargo test -p seed-agents-server --test tests delegate_crash -- --nocapture` prints the figures;
//! `CRASH_KILLS=n` changes the number of kills.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use seed_agents_protocol::generated::{
    CreateAgent, CreateSession, GetSession, ListRuns, RunStatus, SessionEvent, SessionEventPayload, SetModelProvider,
};
use seed_agents_sdk::Client;
use serde_json::{Value, json};

use crate::support::crash::{self, Lcg};
use crate::support::fixtures::{custom_provider_config, definition, say};
use crate::support::process::{Launch, ServerProcess, free_port};
use crate::support::provider::{Fallback, Provider, Script};
use crate::support::wait;

const SEED: [u8; 32] = [9; 32];
const CHILD_PROMPT: &str = "You are a child worker.";
const PARENTS_PER_ROUND: usize = 2;

fn client(url: &str) -> Client {
    crash::client(url, &SEED)
}

static CALLS: AtomicUsize = AtomicUsize::new(0);

/// Children answer slowly (so kills land while parents are parked); a parent with results
/// answers; any other parent request delegates two children at once.
fn rule(body: &Value) -> Script {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let system = messages.first().and_then(|message| message["content"].as_str()).unwrap_or_default();
    if system.starts_with(CHILD_PROMPT) {
        return Script::text("A child's result, in many small pieces.").split().delay(Duration::from_millis(4));
    }
    let delivered = messages.iter().any(|message| {
        message["role"] == "tool" && message["content"].as_str().is_some_and(|text| text.contains("\"status\":\""))
    });
    if delivered {
        return Script::text("Parent finished.").split().delay(Duration::from_millis(2));
    }
    let first = CALLS.fetch_add(2, Ordering::SeqCst);
    let call = |index: usize| json!({"brief": format!("Part {index}"), "prompt": CHILD_PROMPT}).to_string();
    Script::tool_call(&format!("d{first}"), "delegate", &call(first)).and_tool_call(
        &format!("d{}", first + 1),
        "delegate",
        &call(first + 1),
    )
}

async fn log(client: &Client, session_id: &str) -> Vec<SessionEvent> {
    let get = GetSession { session_id: session_id.into(), after_seq: None, before_seq: None, limit: None };
    client.get_session(get).await.unwrap().events
}

/// Every run of the parents' trees (their roots by session, then each whole tree by its root).
async fn runs_of(client: &Client, parents: &[String]) -> Vec<seed_agents_protocol::generated::RunInfo> {
    let mut runs = Vec::new();
    for session in parents {
        let roots = ListRuns {
            agent_id: None,
            limit: Some(200),
            root_run_id: None,
            session_id: Some(session.clone().into()),
            status: None,
        };
        for root in client.list_runs(roots).await.unwrap().runs {
            let tree =
                ListRuns { agent_id: None, limit: None, root_run_id: Some(root.id), session_id: None, status: None };
            runs.extend(client.list_runs(tree).await.unwrap().runs);
        }
    }
    runs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_parents_resume_once_with_every_child_result_delivered_once_across_sigkills() {
    let kills = crash::kills(20);
    let provider = Provider::start().await;
    provider.set_fallback(Fallback::Rule(rule));
    let mut random = Lcg(0xde1e_9a7e);
    let dir = tempfile::tempdir().unwrap();
    let launch = Launch::new(crate::SERVER_BIN, &dir.path().join("data"), &dir.path().join("server.log"))
        .port(free_port())
        .arg("--session-title-generation")
        .arg("false");
    let mut server = ServerProcess::start(&launch).await;
    let owner = client(&server.url);
    let custom = custom_provider_config(provider.openai_base());
    owner.set_model_provider(SetModelProvider { name: "main".into(), provider: custom }).await.unwrap();
    let agent = owner
        .create_agent(CreateAgent { client_request_id: None, definition: definition("lead") })
        .await
        .unwrap()
        .agent_id;
    let mut parents: Vec<String> = Vec::new();
    let mut seen: HashMap<String, Vec<SessionEvent>> = HashMap::new();
    let started = Instant::now();
    // Parents parked, parents executing (first passes and resumes), children executing: summed
    // over the moments just before each kill.
    let mut states = [0usize; 3];
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
            let (client, message) = (client(&server.url), say(&session, format!("task {kill}.{index}")));
            tokio::spawn(async move { client.message_session(message).await });
        }
        // The kill lands at a random moment of the delegations: the scenario, not a wait.
        tokio::time::sleep(Duration::from_millis(30 + random.next(400))).await;
        // What the kill is about to interrupt (read just before it).
        for run in runs_of(&client(&server.url), &parents).await {
            match (run.status, run.parent_tool_call_id.is_some()) {
                (RunStatus::Waiting, _) => states[0] += 1,
                (RunStatus::Queued | RunStatus::Claimed | RunStatus::Running, false) => states[1] += 1,
                (RunStatus::Queued | RunStatus::Claimed | RunStatus::Running, true) => states[2] += 1,
                _ => {}
            }
        }
        server.kill();
        server = ServerProcess::start(&launch).await;
        let owner = client(&server.url);
        for session in &parents {
            let events = log(&owner, session).await;
            let seqs: Vec<i64> = events.iter().map(|event| event.seq).collect();
            assert_eq!(seqs, (1..=events.len() as i64).collect::<Vec<_>>(), "gap-free seqs after kill {kill}");
            let before = seen.entry(session.clone()).or_default();
            assert_eq!(&events[..before.len()], &before[..], "an event changed or vanished after kill {kill}");
            *before = events;
        }
    }

    // Let the last restart finish what the last kill interrupted.
    let owner = client(&server.url);
    let (owner_ref, parents_ref) = (&owner, &parents);
    let runs = wait::until_ok_within(Duration::from_secs(120), "every run has ended", || async move {
        let runs = runs_of(owner_ref, parents_ref).await;
        let settled =
            runs.iter().all(|run| matches!(run.status, RunStatus::Succeeded | RunStatus::Failed | RunStatus::Canceled));
        if settled && runs.len() >= parents_ref.len() {
            Ok(runs)
        } else {
            Err(format!("runs left unfinished: {:?}", runs.iter().map(|r| r.status).collect::<Vec<_>>()))
        }
    })
    .await;
    let children: Vec<_> = runs.iter().filter(|run| run.parent_tool_call_id.is_some()).collect();
    assert!(runs.iter().all(|run| run.status == RunStatus::Succeeded), "every run succeeded");

    let mut delivered = 0;
    let mut repeated_answers = 0;
    let mut interrupted_spawns = 0;
    for session in &parents {
        let events = log(&owner, session).await;
        let mut calls = Vec::new();
        let mut results: HashMap<String, usize> = HashMap::new();
        let mut child_runs: HashSet<String> = HashSet::new();
        let mut last_result = 0;
        for (position, event) in events.iter().enumerate() {
            match &event.event {
                SessionEventPayload::ToolCallEvent(call) if call.name == "delegate" => calls.push(call.id.clone()),
                SessionEventPayload::ToolResultEvent(result) if result.name == "delegate" => {
                    *results.entry(result.tool_call_id.to_string()).or_default() += 1;
                    last_result = position;
                    match &result.output {
                        Some(output) => {
                            let output = serde_json::to_value(output).unwrap();
                            assert_eq!(output["status"], "succeeded", "{output}");
                            let run = output["runId"].as_str().unwrap().to_owned();
                            assert!(child_runs.insert(run), "a child's result delivered twice in {session}");
                            delivered += 1;
                        }
                        None => interrupted_spawns += 1,
                    }
                }
                _ => {}
            }
        }
        assert!(!calls.is_empty(), "parent {session} delegated");
        for call in &calls {
            assert_eq!(
                results.get(call.as_str()),
                Some(&1),
                "call {call} of {session} answered exactly once: {results:?}"
            );
        }
        let answers: Vec<usize> = events
            .iter()
            .enumerate()
            .filter(|(_, event)| {
                matches!(&event.event, SessionEventPayload::MessageEvent(message) if message.content == "Parent finished.")
            })
            .map(|(position, _)| position)
            .collect();
        assert!(!answers.is_empty(), "parent {session} resumed and answered");
        assert!(answers[0] > last_result, "parent {session} answered only after every result");
        repeated_answers += answers.len() - 1;
        // Every child of this parent answered its call.
        let root = runs.iter().find(|run| run.session_id.as_deref() == Some(session) && run.parent_run_id.is_none());
        let root = root.unwrap();
        for child in children.iter().filter(|child| child.parent_run_id.as_deref() == Some(&root.id)) {
            assert!(child_runs.contains(child.id.as_str()), "child {} of {session} was delivered", child.id);
        }
    }
    assert_eq!(delivered, children.len(), "one delivery per child");

    // Parks, resumes and boot sweeps are not retries.
    server.terminate().await;
    let db = rusqlite::Connection::open(dir.path().join("data").join(crash::DATABASE_FILE)).unwrap();
    let over: i64 = db.query_row("SELECT COUNT(*) FROM runs WHERE attempt > 1", [], |row| row.get(0)).unwrap();
    assert_eq!(over, 0, "no run spent a retry");
    println!(
        "{kills} kills in {:.1} s: {} parents, {} children delivered once each; {interrupted_spawns} spawns cut by a \
         kill answered as interrupted; {repeated_answers} final answers repeated by a kill between the answer and \
         the run's end; at the kills: {} parents parked, {} parents executing, {} children executing",
        started.elapsed().as_secs_f64(),
        parents.len(),
        children.len(),
        states[0],
        states[1],
        states[2]
    );
    assert!(states[0] > 0 && states[1] > 0, "kills landed on parked and executing parents: {states:?}");
}
