//! Orchestration end to end: `delegate` children on the background queue, the parent parked on
//! them and resumed with their results as data, plan steps settled by the runtime, typed results,
//! cancellation, and a parked parent that still converses. A real server, the SDK, and the
//! scripted model provider (`support::provider`) on loopback.

use std::time::Duration;

use futures_util::StreamExt as _;
use seed_agents_protocol::generated::{
    CancelRun, CreateAgent, GetSession, ListRuns, MessageEventRole, RunInfo, RunPlanStepResolvedBy, RunPlanStepStatus,
    RunStatus, SessionActor, SessionEvent, SessionEventPayload, SetModelProvider,
};
use seed_agents_sdk::subscription::Event as Live;
use serde_json::{Value as Json, json};

use crate::support::provider::{Provider, Script};
use crate::support::transcript::{read_log, transcript};
use crate::support::wait;
use crate::support::{TestServer, User, custom_provider_config, definition, say};

async fn setup(
    provider: &Provider,
) -> (TestServer, User, seed_agents_protocol::AgentId, seed_agents_protocol::SessionId) {
    let server = TestServer::start_with(tempfile::tempdir().unwrap(), |config| {
        config.session_title_generation = false;
        config.provider_timeout = Duration::from_secs(5);
    })
    .await;
    let user = server.user();
    user.call(SetModelProvider { name: "main".into(), provider: custom_provider_config(provider.openai_base()) })
        .await
        .unwrap();
    let agent_id =
        user.call(CreateAgent { client_request_id: None, definition: definition("Lead") }).await.unwrap().agent_id;
    let session_id = user.create_session(&agent_id, None).await;
    (server, user, agent_id, session_id)
}

/// The output of the `tool_result` answering `call_id`, as JSON.
fn result_of(events: &[SessionEvent], call_id: &str) -> Json {
    let found: Vec<Json> = events
        .iter()
        .filter_map(|event| match &event.event {
            SessionEventPayload::ToolResultEvent(result) if result.tool_call_id == call_id => {
                Some(serde_json::to_value(result.output.as_ref().unwrap()).unwrap())
            }
            _ => None,
        })
        .collect();
    assert_eq!(found.len(), 1, "exactly one result for {call_id}");
    found.into_iter().next().unwrap()
}

async fn tree(user: &User, root: &str) -> Vec<RunInfo> {
    let list = ListRuns { agent_id: None, limit: None, root_run_id: Some(root.into()), session_id: None, status: None };
    user.call(list).await.unwrap().runs
}

async fn session_runs(user: &User, session_id: &str) -> Vec<RunInfo> {
    let list =
        ListRuns { agent_id: None, limit: None, root_run_id: None, session_id: Some(session_id.into()), status: None };
    user.call(list).await.unwrap().runs
}

/// Waits until run `run_id` (in the tree of `root`) has `status`.
async fn wait_for(user: &User, root: &str, run_id: &str, status: RunStatus) -> Vec<RunInfo> {
    wait::until_ok(&format!("run {run_id} becomes {status}"), || async move {
        let runs = tree(user, root).await;
        if runs.iter().any(|run| run.id == run_id && run.status == status) { Ok(runs) } else { Err(runs) }
    })
    .await
}

async fn wait_requests(provider: &Provider, count: usize) {
    wait::until_true(&format!("{count} provider requests"), || provider.request_count() >= count).await;
}

fn last_message(request: &Json) -> String {
    request["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap_or_default().to_owned()
}

fn plan(steps: &[(&str, &str, &str)]) -> String {
    let steps: Vec<Json> =
        steps.iter().map(|(id, label, status)| json!({"id": id, "label": label, "status": status})).collect();
    json!({ "steps": steps }).to_string()
}

#[tokio::test]
async fn a_parent_plans_two_steps_delegates_the_first_parks_and_finishes_the_second() {
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider).await;
    provider.push(Script::tool_call(
        "p1",
        "plan",
        &plan(&[("1", "Find the facts", "running"), ("2", "Write it up", "pending")]),
    ));
    let brief = "Find three facts about otters.\nList them.";
    provider.push(Script::tool_call(
        "d1",
        "delegate",
        &json!({"brief": brief, "prompt": "You are a careful researcher."}).to_string(),
    ));
    provider.push(Script::text("Otters hold hands; they use tools; they have dense fur."));
    provider.push(Script::tool_call(
        "p2",
        "plan",
        &plan(&[("1", "Find the facts", "done"), ("2", "Write it up", "done")]),
    ));
    provider.push(Script::text("Here is the write-up about otters."));

    let answer = user.call(say(&session_id, "write about otters")).await.unwrap();
    assert_eq!(answer.assistant_event_id, "", "the turn parked on its child");
    let root = session_runs(&user, &session_id).await[0].id.clone();
    let runs = wait_for(&user, &root, &root, RunStatus::Succeeded).await;

    // The run tree: the parent and its child, linked to the delegate call.
    assert_eq!(runs.len(), 2, "{runs:?}");
    let child = &runs[1];
    assert_eq!(
        (child.parent_run_id.as_deref(), child.parent_tool_call_id.as_deref(), child.depth),
        (Some(root.as_str()), Some("d1"), 1)
    );
    assert_eq!(child.status, RunStatus::Succeeded);
    assert_eq!(child.title, "Find three facts about otters.");
    assert_eq!((child.plan_step_id.as_deref(), child.step_label.as_deref()), (Some("1"), Some("Find the facts")));
    let child_session = child.session_id.clone().unwrap();

    // The parent's log: the call, then the child's result as data, then the second step done here.
    let events = read_log(&user, &session_id).await;
    assert_eq!(
        transcript(&events),
        [
            "user: write about otters",
            "call delegate",
            "result delegate",
            "assistant: Here is the write-up about otters."
        ]
    );
    let delivered = result_of(&events, "d1");
    assert_eq!(delivered["status"], "succeeded");
    assert_eq!(delivered["runId"], child.id.as_str());
    assert_eq!(delivered["sessionId"], child_session.as_str());
    assert_eq!(delivered["output"], json!({"text": "Otters hold hands; they use tools; they have dense fur."}));
    for event in &events {
        assert!(!format!("{event:?}").contains("<plan_state>"), "<plan_state> is never stored: {event:?}");
    }

    // The child's session: linked to the parent's, its brief verbatim as the first message.
    let child_events = read_log(&user, &child_session).await;
    let SessionEventPayload::MessageEvent(first) = &child_events[0].event else { panic!() };
    assert_eq!((first.role, first.content.as_str()), (MessageEventRole::User, brief));
    let read = user
        .call(GetSession { session_id: child_session.clone(), after_seq: None, before_seq: None, limit: None })
        .await
        .unwrap();
    let got = read.session;
    assert_eq!(got.parent_session_id.as_deref(), Some(session_id.as_str()));
    assert_eq!(got.title.as_deref(), Some("Find three facts about otters."));
    // What the child session shows as its system prompt is what its runs are told: the
    // parent's prompt for it, not the agent's.
    assert!(
        read.system_prompt_markdown.starts_with("You are a careful researcher.\n\n"),
        "{}",
        read.system_prompt_markdown
    );

    // What the model was asked.
    let requests = provider.requests();
    assert_eq!(requests.len(), 5);
    assert!(!last_message(&requests[0].body).contains("<plan_state>"), "no plan yet in the first request");
    let tools: Vec<&str> =
        requests[0].body["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(tools, ["read", "write", "call", "delegate", "plan", "status", "continue_session"]);
    // The child ran with the parent's prompt for it, on its brief, with delegate (depth 1 < 3).
    let child_request = &requests[2].body;
    let system = child_request["messages"][0]["content"].as_str().unwrap();
    assert!(system.starts_with("You are a careful researcher."), "{system}");
    assert_eq!(child_request["messages"][1]["content"], brief);
    // The resumed parent sees the settled step and the child's result beside its call.
    let resumed = &requests[3].body;
    assert_eq!(
        last_message(resumed),
        "<plan_state>\n1 · Find the facts · done\n2 · Write it up · pending\n\nThis is your plan for the current \
         task. Keep the statuses true with the plan tool as you go; before you finish, mark every step done, failed \
         or skipped.\n</plan_state>"
    );
    let tool_message = resumed["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool_message["tool_call_id"], "d1");
    assert!(tool_message["content"].as_str().unwrap().contains("\"status\":\"succeeded\""), "{tool_message}");

    // The step the child did is marked as settled by the runtime, and keeps the mark.
    let session = user
        .call(GetSession { session_id: session_id.clone(), after_seq: None, before_seq: None, limit: None })
        .await
        .unwrap()
        .session;
    let steps = session.plan.unwrap().steps;
    assert_eq!(
        (steps[0].status, steps[0].resolved_by),
        (RunPlanStepStatus::Done, Some(RunPlanStepResolvedBy::Runtime))
    );
    assert_eq!((steps[1].status, steps[1].resolved_by), (RunPlanStepStatus::Done, None));

    // Parking and resuming is not a retry: the parent and its child each executed once.
    let app = crate::support::runs::app(&server).clone();
    let attempts: Vec<(String, i64)> = app
        .db
        .read(|conn| {
            Ok(conn
                .prepare("SELECT id, attempt FROM runs ORDER BY created_at")?
                .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<seed_agents_server::testing::db::Result<_>>()?)
        })
        .await
        .unwrap();
    assert_eq!(attempts, [(root.to_string(), 1), (child.id.to_string(), 1)]);
    server.stop().await;
}

#[tokio::test]
async fn a_parked_parent_still_converses_and_a_canceled_child_answers_as_data() {
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider).await;
    provider.push(Script::tool_call("d1", "delegate", r#"{"brief":"Survey the whole archive."}"#));
    provider.push(Script::hang());
    assert_eq!(user.call(say(&session_id, "survey the archive")).await.unwrap().assistant_event_id, "");
    wait_requests(&provider, 2).await;
    let root = session_runs(&user, &session_id).await[0].id.clone();
    let runs = tree(&user, &root).await;
    assert_eq!(runs[0].status, RunStatus::Waiting);
    assert_eq!(runs[0].wait.as_ref().unwrap().pending_children, Some(1));
    let child = runs[1].id.clone();

    // While the parent is parked, a new message is answered at once; the pending call replays
    // with a "still running" result.
    provider.push(Script::text("It is still running."));
    let answer = user.call(say(&session_id, "how is it going?")).await.unwrap();
    assert!(!answer.assistant_event_id.is_empty(), "answered at once, not queued");
    let interim = &provider.requests()[2].body;
    let pending = interim["messages"].as_array().unwrap().iter().find(|m| m["tool_call_id"] == "d1").unwrap();
    assert!(pending["content"].as_str().unwrap().contains("Still running in the background"), "{pending}");
    assert_eq!(tree(&user, &root).await[0].status, RunStatus::Waiting, "the parent is still parked");

    // The tree is followed live under its root's key, even when subscribed by the child's id.
    let mut live = user.client.subscribe(format!("runs/{child}")).start();
    let mut replayed = Vec::new();
    while replayed.len() < 2 {
        match live.next().await.unwrap().unwrap() {
            Live::Change { key, value } => {
                assert_eq!(key, format!("runs/{root}"));
                replayed.push(serde_json::to_value(value).unwrap()["id"].as_str().unwrap().to_owned());
            }
            Live::Subscribed { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(replayed, [root.clone(), child.clone()]);

    // Canceling the child answers the parent's call with data, and the parent resumes.
    provider.push(Script::text("The survey was canceled; I will do a smaller one myself."));
    assert!(user.call(CancelRun { run_id: child.clone() }).await.unwrap().canceled);
    let mut seen = Vec::new();
    while seen.last().map(|(id, status): &(String, String)| (id == &root, status.as_str())) != Some((true, "succeeded"))
    {
        let next = tokio::time::timeout(Duration::from_secs(10), live.next()).await.unwrap().unwrap().unwrap();
        if let Live::Change { value, .. } = next {
            let value = serde_json::to_value(value).unwrap();
            seen.push((value["id"].as_str().unwrap().to_owned(), value["status"].as_str().unwrap().to_owned()));
        }
    }
    let position = |id: &str, status: &str| seen.iter().position(|(i, s)| i == id && s == status).unwrap();
    assert!(position(&child, "canceled") < position(&root, "queued"), "{seen:?}");
    assert!(position(&root, "queued") < position(&root, "running"), "{seen:?}");
    wait_for(&user, &root, &root, RunStatus::Succeeded).await;
    let events = read_log(&user, &session_id).await;
    assert_eq!(
        transcript(&events),
        [
            "user: survey the archive",
            "call delegate",
            "user: how is it going?",
            "assistant: It is still running.",
            "result delegate",
            "assistant: The survey was canceled; I will do a smaller one myself.",
        ]
    );
    let delivered = result_of(&events, "d1");
    assert_eq!(delivered["status"], "canceled");
    assert_eq!(delivered["runId"], child.as_str());
    assert!(delivered.get("error").is_none() && delivered.get("output").is_none(), "{delivered}");
    let resumed = &provider.requests()[3].body;
    assert_eq!(last_message(resumed), seed_agents_server::testing::runtime::replay::BACKGROUND_WORK_UPDATE);
    server.stop().await;
}

fn typed_schema() -> Json {
    json!({"type": "object", "properties": {"count": {"type": "integer", "minimum": 0}}, "required": ["count"]})
}

#[tokio::test]
async fn typed_children_deliver_valid_results_fix_invalid_ones_and_fail_at_the_attempt_limit() {
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider).await;
    let delegate = |id: &str, brief: &str| {
        Script::tool_call(id, "delegate", &json!({"brief": brief, "output": typed_schema()}).to_string())
    };
    let deliver = |id: &str, payload: Json| Script::tool_call(id, "return_result", &payload.to_string());
    provider.push(delegate("d1", "Count the apples."));
    provider.push(deliver("r1", json!({"count": 3})).with_text("Three apples."));
    provider.push(delegate("d2", "Count the pears."));
    provider.push(deliver("r2", json!({"count": "two"})));
    provider.push(deliver("r3", json!({"count": 2})));
    provider.push(delegate("d3", "Count the plums."));
    for index in 0..3 {
        provider.push(deliver(&format!("r{}", 4 + index), json!({"total": index})));
    }
    provider.push(Script::text("Apples 3, pears 2, plums unknown."));
    assert_eq!(user.call(say(&session_id, "count the fruit")).await.unwrap().assistant_event_id, "");
    let root = session_runs(&user, &session_id).await[0].id.clone();
    let runs = wait_for(&user, &root, &root, RunStatus::Succeeded).await;
    assert_eq!(provider.request_count(), 10, "no request after a delivered or finally rejected result");

    let events = read_log(&user, &session_id).await;
    assert_eq!(result_of(&events, "d1")["output"], json!({"count": 3}));
    assert_eq!(result_of(&events, "d2")["output"], json!({"count": 2}));
    let failed = result_of(&events, "d3");
    assert_eq!(failed["status"], "failed");
    assert_eq!(
        failed["error"],
        json!({"code": "output-schema", "message": "Sub-session could not produce a schema-valid result"})
    );
    assert_eq!(transcript(&events).last().unwrap(), "assistant: Apples 3, pears 2, plums unknown.");

    // The children saw return_result with the schema as its parameters, after the verbs.
    let child_request = &provider.requests()[1].body;
    let tools = child_request["tools"].as_array().unwrap();
    let last = tools.last().unwrap();
    assert_eq!(
        (last["function"]["name"].as_str(), &last["function"]["parameters"]),
        (Some("return_result"), &typed_schema())
    );
    // The second child fixed its result after the schema error.
    let pears = runs.iter().find(|run| run.title == "Count the pears.").unwrap();
    let pears_log = transcript(&read_log(&user, pears.session_id.as_ref().unwrap()).await);
    assert_eq!(pears_log.len(), 5, "{pears_log:?}");
    assert!(pears_log[2].starts_with("error return_result: Result does not match the required schema: $.count: "));
    assert!(pears_log[2].ends_with(". Fix and call return_result again."), "{pears_log:?}");
    assert_eq!(pears_log[4], "result return_result");
    // The third gave up after three refusals.
    let plums = runs.iter().find(|run| run.title == "Count the plums.").unwrap();
    assert_eq!(plums.status, RunStatus::Failed);
    let plums_log = transcript(&read_log(&user, plums.session_id.as_ref().unwrap()).await);
    assert!(
        plums_log[6].starts_with("error return_result: Result rejected (attempt limit reached): $: "),
        "{plums_log:?}"
    );
    assert_eq!(plums_log.last().unwrap(), "error: Sub-session could not produce a schema-valid result");
    server.stop().await;
}

#[tokio::test]
async fn canceling_a_parent_cancels_its_child_and_a_late_result_is_noted_in_the_child() {
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider).await;
    provider.push(Script::tool_call(
        "d1",
        "delegate",
        &json!({"brief": "Count the stars.", "output": typed_schema()}).to_string(),
    ));
    provider.push(Script::hang());
    assert_eq!(user.call(say(&session_id, "count the stars")).await.unwrap().assistant_event_id, "");
    wait_requests(&provider, 2).await;
    let root = session_runs(&user, &session_id).await[0].id.clone();
    let child = tree(&user, &root).await[1].clone();
    assert!(user.call(CancelRun { run_id: root.clone() }).await.unwrap().canceled);
    let runs = wait_for(&user, &root, &child.id, RunStatus::Canceled).await;
    assert_eq!(runs[0].status, RunStatus::Canceled, "the tree went with its root");
    let events = read_log(&user, &session_id).await;
    assert_eq!(result_of(&events, "d1")["status"], "canceled");

    // Later, someone asks the child again: it inherits its contract and delivers, too late.
    let child_session = child.session_id.clone().unwrap();
    provider.push(Script::tool_call("r1", "return_result", r#"{"count":7}"#));
    user.call(say(&child_session, "please finish")).await.unwrap();
    let offered = &provider.requests()[2].body["tools"];
    assert!(offered.as_array().unwrap().iter().any(|tool| tool["function"]["name"] == "return_result"));
    let child_log = read_log(&user, &child_session).await;
    let SessionEventPayload::MessageEvent(notice) = &child_log.last().unwrap().event else { panic!() };
    assert_eq!(
        (notice.actor, notice.content.as_str()),
        (Some(SessionActor::System), seed_agents_server::testing::runs::children::LATE_RESULT)
    );
    assert_eq!(result_of(&read_log(&user, &session_id).await, "d1")["status"], "canceled", "nothing delivered twice");
    server.stop().await;
}

#[tokio::test]
async fn detached_children_start_their_own_session_and_answer_nobody() {
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider).await;
    provider.set_fallback(crate::support::provider::Fallback::Text("Done.".into()));
    provider.push(
        Script::tool_call("bad", "delegate", r#"{"await":false,"brief":"x","tools":["search"]}"#).and_tool_call(
            "ok",
            "delegate",
            r#"{"await":false,"brief":"Tidy the notes folder."}"#,
        ),
    );
    let answer = user.call(say(&session_id, "tidy up in the background")).await.unwrap();
    assert!(!answer.assistant_event_id.is_empty(), "a detached child does not park the turn");
    let events = read_log(&user, &session_id).await;
    let refused = transcript(&events).into_iter().find(|line| line.starts_with("error delegate")).unwrap();
    assert_eq!(
        refused,
        "error delegate: delegate {await: false} does not support `tools` — a detached child runs as this agent and \
         returns nothing. Await the child, or drop tools."
    );
    let started = result_of(&events, "ok");
    assert_eq!(started["status"], "detached");
    assert_eq!(started["title"], "Tidy the notes folder.");
    assert_eq!(
        started["summary"],
        "Started detached child \"Tidy the notes folder.\"; it is now running in the background."
    );
    let child_session = started["sessionId"].as_str().unwrap().to_owned();
    let root = session_runs(&user, &session_id).await[0].id.clone();
    let child = tree(&user, &root).await.into_iter().find(|run| run.id != root).unwrap();
    assert_eq!((child.parent_run_id.as_deref(), child.parent_tool_call_id.as_deref()), (Some(root.as_str()), None));
    wait_for(&user, &root, &child.id, RunStatus::Succeeded).await;
    assert_eq!(
        transcript(&read_log(&user, &child_session).await),
        ["user: Tidy the notes folder.", "assistant: Done."]
    );
    assert_eq!(
        transcript(&read_log(&user, &session_id).await).iter().filter(|line| line.starts_with("result")).count(),
        1
    );
    server.stop().await;
}

#[tokio::test]
async fn a_run_spawns_at_most_ten_children_and_the_tree_is_listed_from_its_root() {
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider).await;
    provider.set_fallback(crate::support::provider::Fallback::Text("Done.".into()));
    let mut batch = Script::tool_call("d0", "delegate", r#"{"brief":"Part 0"}"#);
    for index in 1..11 {
        batch = batch.and_tool_call(&format!("d{index}"), "delegate", &format!(r#"{{"brief":"Part {index}"}}"#));
    }
    provider.push(batch);
    assert_eq!(user.call(say(&session_id, "split the work")).await.unwrap().assistant_event_id, "");
    let root = session_runs(&user, &session_id).await[0].id.clone();
    let runs = wait_for(&user, &root, &root, RunStatus::Succeeded).await;
    assert_eq!(runs.len(), 11, "the root and ten children");
    assert_eq!(runs[0].child_run_count, Some(10));
    assert!(runs[1..].iter().all(|run| run.root_run_id == root && run.status == RunStatus::Succeeded));
    let events = read_log(&user, &session_id).await;
    let refused: Vec<String> =
        transcript(&events).into_iter().filter(|line| line.starts_with("error delegate")).collect();
    assert_eq!(refused, ["error delegate: This run already spawned 10 sub-sessions; finish the remaining work here."]);
    assert_eq!(transcript(&events).iter().filter(|line| *line == "result delegate").count(), 10);
    server.stop().await;
}

#[tokio::test]
async fn children_nest_three_deep_and_a_leaf_is_not_offered_delegate() {
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider).await;
    for level in 1..4 {
        provider.push(Script::tool_call(&format!("d{level}"), "delegate", &format!(r#"{{"brief":"Level {level}"}}"#)));
    }
    provider.push(Script::text("Leaf answer."));
    for level in (0..3).rev() {
        provider.push(Script::text(&format!("Level {level} done.")));
    }
    assert_eq!(user.call(say(&session_id, "go deep")).await.unwrap().assistant_event_id, "");
    let root = session_runs(&user, &session_id).await[0].id.clone();
    let runs = wait_for(&user, &root, &root, RunStatus::Succeeded).await;
    let depths: Vec<i64> = runs.iter().map(|run| run.depth).collect();
    assert_eq!(depths, [0, 1, 2, 3]);
    let names = |index: usize| -> Vec<String> {
        provider.requests()[index].body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|tool| tool["function"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(names(2).contains(&"delegate".to_owned()), "depth 2 may still spawn");
    assert!(!names(3).contains(&"delegate".to_owned()), "depth 3 is a leaf");
    let events = read_log(&user, &session_id).await;
    assert_eq!(result_of(&events, "d1")["output"], json!({"text": "Level 1 done."}));
    assert_eq!(transcript(&events).last().unwrap(), "assistant: Level 0 done.");
    server.stop().await;
}

#[tokio::test]
async fn a_typed_child_that_never_delivers_is_sent_back_then_fails_and_its_parent_reads_the_failure() {
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider).await;
    provider.push(Script::tool_call(
        "d1",
        "delegate",
        &json!({"brief": "Count the moons.", "output": typed_schema()}).to_string(),
    ));
    for _ in 0..4 {
        provider.push(Script::text("There are many moons."));
    }
    provider.push(Script::text("The count could not be made."));
    user.call(say(&session_id, "count the moons")).await.unwrap();
    let root = session_runs(&user, &session_id).await[0].id.clone();
    let runs = wait_for(&user, &root, &root, RunStatus::Succeeded).await;
    let child = &runs[1];
    assert_eq!(child.status, RunStatus::Failed);
    let error = child.error.as_ref().unwrap();
    assert_eq!(
        (error.code.as_str(), error.message.as_str()),
        ("output-schema", "Sub-session ended without delivering a valid return_result")
    );
    let child_log = transcript(&read_log(&user, child.session_id.as_ref().unwrap()).await);
    let sent_back = child_log.iter().filter(|line| line.starts_with("system: This turn is ending")).count();
    assert_eq!(sent_back, 3, "{child_log:?}");
    assert!(child_log.contains(&"system: This run ended with work still open:".to_owned()), "{child_log:?}");
    let delivered = result_of(&read_log(&user, &session_id).await, "d1");
    assert_eq!(delivered["status"], "failed");
    assert_eq!(delivered["error"]["code"], "output-schema");
    server.stop().await;
}
