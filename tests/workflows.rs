//! Workflow runs end to end (docs/workflows.md): an agent's `delegate {script}` starts a script
//! child; its effects act as the agent and are journaled (`GetRunJournal`, `runs/<root>`
//! appends); it waits for a signal and `SignalRun` delivers the payload; long sleeps park on the
//! server's clock; its result answers the parent's call; bad scripts are refused before they
//! run. A real server, the SDK, and the scripted model provider on loopback.

use std::time::Duration;

use seed_agents_protocol::generated::{
    CreateAgent, GetRun, GetRunJournal, ListRuns, RunInfo, RunInfoKind, RunStatus, RunWaitInfoReason, SessionEvent,
    SessionEventPayload, SetModelProvider, SignalRun,
};
use seed_agents_server::Clock;
use serde_json::{Value as Json, json};

use crate::support::provider::{Provider, Script};
use crate::support::transcript::read_log;
use crate::support::wait;
use crate::support::{TestServer, User, custom_provider_config, definition, say};

async fn setup(
    provider: &Provider,
    clock: Clock,
) -> (TestServer, User, seed_agents_protocol::AgentId, seed_agents_protocol::SessionId) {
    let server = TestServer::start_with_clock(tempfile::tempdir().unwrap(), clock.clone(), |config| {
        config.session_title_generation = false;
        config.provider_timeout = Duration::from_secs(5);
    })
    .await;
    let user = server.user_on(&clock);
    user.call(SetModelProvider { name: "main".into(), provider: custom_provider_config(provider.openai_base()) })
        .await
        .unwrap();
    let agent_id =
        user.call(CreateAgent { client_request_id: None, definition: definition("Lead") }).await.unwrap().agent_id;
    let session_id = user.create_session(&agent_id, None).await;
    (server, user, agent_id, session_id)
}

/// The parent's turn: a `delegate {script, input}` call, then (once resumed) a closing reply.
fn delegate_script(provider: &Provider, script: &str, input: Json) {
    let arguments = json!({"script": script, "input": input, "title": "Notes"}).to_string();
    provider.push(Script::tool_call("d1", "delegate", &arguments));
    provider.push(Script::text("The workflow is done."));
}

async fn runs_of(user: &User, session_id: &str) -> Vec<RunInfo> {
    let list =
        ListRuns { agent_id: None, limit: None, root_run_id: None, session_id: Some(session_id.into()), status: None };
    let roots = user.call(list).await.unwrap().runs;
    let root = roots.last().expect("a run").id.clone();
    let tree = ListRuns { agent_id: None, limit: Some(200), root_run_id: Some(root), session_id: None, status: None };
    user.call(tree).await.unwrap().runs
}

/// The tree's workflow run once it has `status`.
async fn workflow_with(user: &User, session_id: &str, status: RunStatus) -> RunInfo {
    wait::until_ok(&format!("the workflow becomes {status}"), || async move {
        let runs = runs_of(user, session_id).await;
        match runs.iter().find(|run| run.kind == RunInfoKind::Workflow) {
            Some(run) if run.status == status => Ok(run.clone()),
            _ => Err(runs),
        }
    })
    .await
}

/// The output of the parent's `delegate` result, once it is in the log.
async fn delegate_result(user: &User, session_id: &str) -> Json {
    wait::until_ok("the delegate call has its result", || async move {
        let log: Vec<SessionEvent> = read_log(user, session_id).await;
        log.iter()
            .find_map(|event| match &event.event {
                SessionEventPayload::ToolResultEvent(result) if result.tool_call_id == "d1" => {
                    Some(serde_json::to_value(result.output.as_ref().unwrap()).unwrap())
                }
                _ => None,
            })
            .ok_or(log.len())
    })
    .await
}

async fn journal(user: &User, run_id: &str, after: Option<i64>) -> Vec<Json> {
    let action = GetRunJournal { run_id: run_id.into(), after_seq: after };
    let entries = user.call(action).await.unwrap().entries;
    entries
        .iter()
        .map(|entry| json!({"seq": entry.seq, "entry": serde_json::to_value(&entry.entry).unwrap()}))
        .collect()
}

#[tokio::test]
async fn a_script_child_writes_and_reads_memory_as_its_agent_and_answers_the_delegate_call() {
    let provider = Provider::start().await;
    let (_server, user, _agent, session_id) = setup(&provider, Clock::system()).await;
    let script = r#"
export default async function (input, ctx) {
  await ctx.log("info", "starting", {word: input.word});
  await ctx.call("write", {address: "~/memory/notes/a.md", content: "alpha " + input.word});
  const file = await ctx.call("read", {address: "~/memory/notes/a.md"});
  const both = await ctx.parallel([
    () => ctx.call("read", {address: "~/memory/notes/a.md"}),
    () => ctx.now(),
  ]);
  let missing = "none";
  try { await ctx.call("no_such_tool", {}); } catch (error) { missing = error.code; }
  return {text: file.content, again: both[0].content === file.content, clock: typeof both[1], missing};
}
"#;
    delegate_script(&provider, script, json!({"word": "otter"}));
    let answer = user.call(say(&session_id, "take notes")).await.unwrap();
    assert_eq!(answer.assistant_event_id, "", "the turn parked on its script child");

    let run = workflow_with(&user, &session_id, RunStatus::Succeeded).await;
    assert_eq!((run.depth, run.parent_tool_call_id.as_deref(), run.session_id.as_ref()), (1, Some("d1"), None));
    assert!(run.source_text.as_deref().is_some_and(|source| source.contains("ctx.call(\"write\"")), "pinned source");
    let result = delegate_result(&user, &session_id).await;
    assert_eq!(result["status"], "succeeded", "{result}");
    assert_eq!(
        result["output"],
        json!({"text": "alpha otter", "again": true, "clock": "number", "missing": "not-found"}),
        "{result}"
    );

    // The journal, in order: each effect before its result.
    let entries = journal(&user, &run.id, None).await;
    let kinds: Vec<String> = entries
        .iter()
        .map(|entry| {
            let body = &entry["entry"];
            match body["kind"].as_str().unwrap() {
                "call" => format!("call {}", body["tool"].as_str().unwrap_or("agent")),
                other => other.to_owned(),
            }
        })
        .collect();
    assert_eq!(kinds[..5], ["log", "call write", "result", "call read", "result"], "{kinds:?}");
    assert!(
        kinds.contains(&"now".to_owned()) && kinds.iter().filter(|kind| *kind == "result").count() == 4,
        "{kinds:?}"
    );
    let seqs: Vec<i64> = entries.iter().map(|entry| entry["seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>());
    // Paging by afterSeq.
    let tail = journal(&user, &run.id, Some(3)).await;
    assert_eq!(tail, entries[3..]);
    assert!(journal(&user, &run.id, Some(seqs.len() as i64)).await.is_empty());

    // The memory file exists for the agent, and the parent answered after the child.
    wait::until_true("the parent answers", || provider.request_count() >= 2).await;
}

#[tokio::test]
async fn a_waiting_script_parks_shows_how_to_answer_it_and_takes_the_signals_payload() {
    let provider = Provider::start().await;
    let (_server, user, _agent, session_id) = setup(&provider, Clock::system()).await;
    let script = r#"
export default async function (input, ctx) {
  const answer = await ctx.waitForEvent({signal: "approve"}, {label: "Approval of the plan"});
  return {approved: answer.payload.ok, by: answer.signal, source: answer.source};
}
"#;
    delegate_script(&provider, script, json!(null));
    user.call(say(&session_id, "wait for approval")).await.unwrap();
    let run = workflow_with(&user, &session_id, RunStatus::Waiting).await;
    let wait = run.wait.clone().expect("a wait");
    assert_eq!(
        (wait.reason, wait.answer_with.as_deref(), wait.label.as_deref()),
        (RunWaitInfoReason::Event, Some("approve"), Some("Approval of the plan"))
    );

    let signal = |name: &str, payload: Json| SignalRun {
        run_id: run.id.clone(),
        signal: name.into(),
        payload: Some(seed_agents_protocol::Value(seed_agents_protocol::wire::json_to_ipld(&payload))),
    };
    assert!(!user.call(signal("reject", json!({"ok": false}))).await.unwrap().delivered, "not what it waits for");
    assert!(user.call(signal("approve", json!({"ok": true}))).await.unwrap().delivered);
    assert!(!user.call(signal("approve", json!({"ok": false}))).await.unwrap().delivered, "a wait takes one signal");

    workflow_with(&user, &session_id, RunStatus::Succeeded).await;
    let result = delegate_result(&user, &session_id).await;
    assert_eq!(result["output"], json!({"approved": true, "by": "approve", "source": "signal"}), "{result}");
    let entries = journal(&user, &run.id, None).await;
    let kinds: Vec<&str> = entries.iter().map(|entry| entry["entry"]["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["wait", "event"]);
    assert_eq!(entries[0]["entry"]["callSeq"], entries[1]["entry"]["callSeq"], "the delivery settles its wait");
}

#[tokio::test]
async fn a_long_sleep_parks_on_the_servers_clock_and_wakes_when_it_comes() {
    let provider = Provider::start().await;
    let clock = Clock::manual(1_700_000_000_000);
    let (_server, user, _agent, session_id) = setup(&provider, clock.clone()).await;
    let script = r#"
export default async function (input, ctx) {
  const before = await ctx.now();
  await ctx.sleep(ctx.hours(2));
  const after = await ctx.now();
  return {slept: after - before >= 7200000};
}
"#;
    delegate_script(&provider, script, json!(null));
    user.call(say(&session_id, "sleep on it")).await.unwrap();
    let run = workflow_with(&user, &session_id, RunStatus::Waiting).await;
    let wait = run.wait.clone().expect("a wait");
    assert_eq!((wait.reason, wait.wake_at), (RunWaitInfoReason::Timer, Some(1_700_000_000_000 + 7_200_000)));
    clock.advance(7_200_000);
    workflow_with(&user, &session_id, RunStatus::Succeeded).await;
    let result = delegate_result(&user, &session_id).await;
    assert_eq!(result["output"], json!({"slept": true}), "{result}");
}

#[tokio::test]
async fn scripts_with_ambient_authority_are_refused_and_a_throwing_script_fails_its_run() {
    let provider = Provider::start().await;
    let (_server, user, _agent, session_id) = setup(&provider, Clock::system()).await;
    let bad = "export default async function (input, ctx) { return Date.now() + Math.random(); }";
    provider.push(Script::tool_call("d0", "delegate", &json!({"script": bad}).to_string()));
    let throwing = "export default async function (input, ctx) {\n  throw new Error('no luck');\n}";
    provider.push(Script::tool_call("d1", "delegate", &json!({"script": throwing}).to_string()));
    provider.push(Script::text("Both failed."));
    user.call(say(&session_id, "try scripts")).await.unwrap();

    let run = workflow_with(&user, &session_id, RunStatus::Failed).await;
    let error = serde_json::to_value(run.error.as_ref().unwrap()).unwrap();
    assert_eq!(error["code"], "workflow-error", "{error}");
    assert!(error["message"].as_str().unwrap().contains("no luck"), "{error}");
    let result = delegate_result(&user, &session_id).await;
    assert_eq!(result["status"], "failed", "{result}");

    let log = read_log(&user, &session_id).await;
    let refused = log
        .iter()
        .find_map(|event| match &event.event {
            SessionEventPayload::ToolResultEvent(result) if result.tool_call_id == "d0" => result.error.clone(),
            _ => None,
        })
        .expect("the lint refused the first script");
    assert!(refused.starts_with("Workflow source rejected:"), "{refused}");
    assert!(refused.contains("Date") && refused.contains("Math.random"), "{refused}");
    let runs = runs_of(&user, &session_id).await;
    assert_eq!(runs.iter().filter(|run| run.kind == RunInfoKind::Workflow).count(), 1, "the refused one never ran");
    let got = user.call(GetRun { run_id: run.id.clone() }).await.unwrap();
    assert_eq!(got.run.status, RunStatus::Failed);
}

const FAN_OUT: &str = r#"
export default async function (input, ctx) {
  const briefs = ["Count A", "Count B", "Count C"];
  const results = await ctx.parallel(briefs.map((brief) => () => ctx.delegate({brief, title: brief})));
  return results.map((result) => result.text);
}
"#;

/// The parent delegates [`FAN_OUT`] once, answers when its result is in; children echo their
/// brief.
fn fan_out_rule(body: &Json) -> Script {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or_default();
    if last["role"] == "tool" {
        return Script::text("All counted.");
    }
    let asked = last["content"].as_str().unwrap_or_default();
    if asked.starts_with("Count") {
        return Script::text(&format!("{asked}: done"));
    }
    Script::tool_call("d1", "delegate", &json!({"script": FAN_OUT}).to_string())
}

#[tokio::test]
async fn a_script_fans_out_to_agent_children_and_collects_their_answers() {
    use crate::support::provider::Fallback;
    let provider = Provider::start().await;
    provider.set_fallback(Fallback::Rule(fan_out_rule));
    let (_server, user, _agent, session_id) = setup(&provider, Clock::system()).await;
    user.call(say(&session_id, "count everything")).await.unwrap();
    let run = workflow_with(&user, &session_id, RunStatus::Succeeded).await;
    let result = delegate_result(&user, &session_id).await;
    assert_eq!(result["output"], json!(["Count A: done", "Count B: done", "Count C: done"]), "{result}");

    // Three agent children under the workflow, each in a session of its own under the parent's.
    let runs = runs_of(&user, &session_id).await;
    let children: Vec<&RunInfo> =
        runs.iter().filter(|child| child.parent_run_id.as_deref() == Some(run.id.as_str())).collect();
    assert_eq!(children.len(), 3, "{runs:?}");
    assert!(
        children.iter().all(|child| child.kind == RunInfoKind::Agent && child.depth == 2 && child.session_id.is_some())
    );
    let entries = journal(&user, &run.id, None).await;
    let spawned: Vec<&Json> = entries.iter().filter(|entry| entry["entry"]["op"] == "agent").collect();
    assert_eq!(spawned.len(), 3);
    assert!(spawned.iter().all(|entry| entry["entry"]["childRunId"].as_str().is_some()), "{spawned:?}");
    wait::until_true("the parent answers", || provider.request_count() >= 5).await;
}

#[tokio::test]
async fn a_runaway_script_fails_its_run_while_the_server_answers_and_cancel_stops_a_busy_one() {
    let provider = Provider::start().await;
    let server = TestServer::start_with(tempfile::tempdir().unwrap(), |config| {
        config.session_title_generation = false;
        config.workflow_compute_slice = Duration::from_millis(300);
    })
    .await;
    let user = server.user();
    user.call(SetModelProvider { name: "main".into(), provider: custom_provider_config(provider.openai_base()) })
        .await
        .unwrap();
    let agent_id =
        user.call(CreateAgent { client_request_id: None, definition: definition("Lead") }).await.unwrap().agent_id;

    // A loop with no effect: the compute slice ends it.
    let spin = "export default async function (input, ctx) {\n  let n = 0;\n  while (true) { n++; }\n}";
    let looping = user.create_session(&agent_id, None).await;
    delegate_script(&provider, spin, json!(null));
    user.call(say(&looping, "spin")).await.unwrap();
    let run = workflow_with(&user, &looping, RunStatus::Failed).await;
    let error = serde_json::to_value(run.error.as_ref().unwrap()).unwrap();
    assert_eq!(error["code"], "fuel-exhausted", "{error}");
    assert_eq!(delegate_result(&user, &looping).await["status"], "failed");

    // A script that computes between effects, each slice short: cancel interrupts it.
    let busy = "export default async function (input, ctx) {\n  for (;;) {\n    let n = 0;\n    \
                while (n < 100000) { n++; }\n    await ctx.now();\n  }\n}";
    let canceled = user.create_session(&agent_id, None).await;
    delegate_script(&provider, busy, json!(null));
    user.call(say(&canceled, "keep busy")).await.unwrap();
    let run = workflow_with(&user, &canceled, RunStatus::Running).await;
    let answered = user.call(seed_agents_protocol::generated::ListRuns {
        agent_id: Some(agent_id.clone()),
        limit: None,
        root_run_id: None,
        session_id: None,
        status: None,
    });
    assert!(answered.await.is_ok(), "the server answers while a script computes");
    let cancel = seed_agents_protocol::generated::CancelRun { run_id: run.id.clone() };
    assert!(user.call(cancel).await.unwrap().canceled);
    workflow_with(&user, &canceled, RunStatus::Canceled).await;
    assert_eq!(delegate_result(&user, &canceled).await["status"], "canceled");
}

const ONE_CHILD: &str = r#"
export default async function (input, ctx) {
  const result = await ctx.delegate({brief: "Count once"});
  return result.text;
}
"#;

/// Parents delegate [`ONE_CHILD`]; its child answers slowly.
fn one_child_rule(body: &Json) -> Script {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or_default();
    if last["role"] == "tool" {
        return Script::text("Counted.");
    }
    if last["content"].as_str().unwrap_or_default().starts_with("Count once") {
        return Script::text("Once.").delay(Duration::from_millis(400));
    }
    Script::tool_call("d1", "delegate", &json!({"script": ONE_CHILD}).to_string())
}

#[tokio::test]
async fn scripts_awaiting_children_park_and_free_their_execution_slots() {
    use crate::support::provider::Fallback;
    let provider = Provider::start().await;
    provider.set_fallback(Fallback::Rule(one_child_rule));
    // Two runs may execute at once: three scripts holding a slot each while their children wait
    // for one would never finish.
    let server = TestServer::start_with(tempfile::tempdir().unwrap(), |config| {
        config.session_title_generation = false;
        config.run_limits.max_in_flight = 2;
    })
    .await;
    let user = server.user();
    user.call(SetModelProvider { name: "main".into(), provider: custom_provider_config(provider.openai_base()) })
        .await
        .unwrap();
    let agent_id =
        user.call(CreateAgent { client_request_id: None, definition: definition("Lead") }).await.unwrap().agent_id;
    let mut sessions = Vec::new();
    for _ in 0..3 {
        let session = user.create_session(&agent_id, None).await;
        user.call(say(&session, "count")).await.unwrap();
        sessions.push(session);
    }
    for session in &sessions {
        workflow_with(&user, session, RunStatus::Succeeded).await;
        assert_eq!(delegate_result(&user, session).await["output"], "Once.");
    }
}

const FIFTY: &str = r#"
export default async function (input, ctx) {
  const indexes = Array.from({length: 50}, (_, i) => i);
  const results = await ctx.parallel(indexes.map((i) => () => ctx.delegate({brief: "Count " + i})));
  return results.map((result) => result.text);
}
"#;

/// The parent delegates [`FIFTY`]; each child echoes its brief.
fn fifty_rule(body: &Json) -> Script {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or_default();
    if last["role"] == "tool" {
        return Script::text("All fifty counted.");
    }
    let brief = messages.iter().find(|message| message["role"] == "user");
    let brief = brief.and_then(|message| message["content"].as_str()).unwrap_or_default();
    if brief.starts_with("Count ") {
        return Script::text(&format!("{brief}: done"));
    }
    Script::tool_call("d1", "delegate", &json!({"script": FIFTY}).to_string())
}

#[tokio::test]
async fn a_script_fans_out_to_fifty_children_and_its_journal_pages_in_order() {
    use crate::support::provider::Fallback;
    let provider = Provider::start().await;
    provider.set_fallback(Fallback::Rule(fifty_rule));
    let (_server, user, _agent, session_id) = setup(&provider, Clock::system()).await;
    user.call(say(&session_id, "count to fifty")).await.unwrap();
    let run = workflow_with(&user, &session_id, RunStatus::Succeeded).await;
    let result = delegate_result(&user, &session_id).await;
    let expected: Vec<String> = (0..50).map(|index| format!("Count {index}: done")).collect();
    assert_eq!(result["output"], json!(expected), "in call order, whatever order they finished in");
    let runs = runs_of(&user, &session_id).await;
    assert_eq!(runs.iter().filter(|child| child.parent_run_id.as_deref() == Some(run.id.as_str())).count(), 50);

    // The journal reads back whole and in order, page by page.
    let whole = journal(&user, &run.id, None).await;
    let spawned = whole.iter().filter(|entry| entry["entry"]["op"] == "agent").count();
    let results = whole.iter().filter(|entry| entry["entry"]["kind"] == "result").count();
    assert_eq!((spawned, results), (50, 50));
    let mut paged = Vec::new();
    let mut after = 0;
    while paged.len() < whole.len() {
        let page: Vec<Json> = journal(&user, &run.id, Some(after)).await.into_iter().take(17).collect();
        after = page.last().unwrap()["seq"].as_i64().unwrap();
        paged.extend(page);
    }
    assert_eq!(paged, whole);
}
