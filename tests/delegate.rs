//! Orchestration end to end: `delegate` children on the background queue, the parent parked on
//! them and resumed with their results as data, plan steps settled by the runtime, typed results,
//! cancellation, and a parked parent that still converses. A real server, the SDK, and the
//! scripted model provider (`server/tests/common/provider.rs`) on loopback.

use std::time::Duration;

use seed_agents_protocol::generated::{
    CancelRun, CreateAgent, GetSession, ListRuns, MessageEventRole, RunInfo, RunPlanStepResolvedBy,
    RunPlanStepStatus, RunStatus, SessionActor, SessionEvent, SessionEventPayload, SetModelProvider,
};
use serde_json::{Value as Json, json};

use crate::support::provider::{Provider, Script};
use crate::support::{TestServer, User, custom_provider_config, definition, say};

async fn setup(provider: &Provider) -> (TestServer, User, String, String) {
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

async fn log(user: &User, session_id: &str) -> Vec<SessionEvent> {
    user.call(GetSession { session_id: session_id.into(), after_seq: None, before_seq: None, limit: None })
        .await
        .unwrap()
        .events
}

fn lines(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .map(|event| match &event.event {
            SessionEventPayload::MessageEvent(message) => {
                let who = match (message.role, message.actor) {
                    (_, Some(SessionActor::System)) => "system",
                    (MessageEventRole::User, _) => "user",
                    _ => "assistant",
                };
                format!("{who}: {}", message.content.lines().next().unwrap_or_default())
            }
            SessionEventPayload::ToolCallEvent(call) => format!("call {}", call.name),
            SessionEventPayload::ToolResultEvent(result) => match &result.error {
                Some(error) => format!("error {}: {error}", result.name),
                None => format!("result {}", result.name),
            },
            SessionEventPayload::ErrorEvent(error) => format!("error: {}", error.message),
            other => format!("{other:?}"),
        })
        .collect()
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
    for _ in 0..400 {
        let runs = tree(user, root).await;
        if runs.iter().any(|run| run.id == run_id && run.status == status) {
            return runs;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("run {run_id} never became {status}: {:?}", tree(user, root).await);
}

async fn wait_requests(provider: &Provider, count: usize) {
    for _ in 0..400 {
        if provider.request_count() >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("only {} provider requests", provider.request_count());
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
    let child_session = child.session_id.clone().unwrap();

    // The parent's log: the call, then the child's result as data, then the second step done here.
    let events = log(&user, &session_id).await;
    assert_eq!(
        lines(&events),
        ["user: write about otters", "call delegate", "result delegate", "assistant: Here is the write-up about otters."]
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
    let child_events = log(&user, &child_session).await;
    let SessionEventPayload::MessageEvent(first) = &child_events[0].event else { panic!() };
    assert_eq!((first.role, first.content.as_str()), (MessageEventRole::User, brief));
    let got = user
        .call(GetSession { session_id: child_session.clone(), after_seq: None, before_seq: None, limit: None })
        .await
        .unwrap()
        .session;
    assert_eq!(got.parent_session_id.as_deref(), Some(session_id.as_str()));
    assert_eq!(got.title.as_deref(), Some("Find three facts about otters."));

    // What the model was asked.
    let requests = provider.requests();
    assert_eq!(requests.len(), 5);
    assert!(!last_message(&requests[0].body).contains("<plan_state>"), "no plan yet in the first request");
    let tools: Vec<&str> =
        requests[0].body["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(tools, ["read", "write", "call", "delegate", "plan", "status"]);
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
    assert_eq!((steps[0].status, steps[0].resolved_by), (RunPlanStepStatus::Done, Some(RunPlanStepResolvedBy::Runtime)));
    assert_eq!((steps[1].status, steps[1].resolved_by), (RunPlanStepStatus::Done, None));

    // Parking and resuming is not a retry: the parent and its child each executed once.
    let app = crate::support::runs::app(&server).clone();
    let attempts: Vec<(String, i64)> = app
        .db
        .read(|conn| {
            Ok(conn
                .prepare("SELECT id, attempt FROM runs ORDER BY created_at")?
                .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?)
        })
        .await
        .unwrap();
    assert_eq!(attempts, [(root.clone(), 1), (child.id.clone(), 1)]);
    server.stop().await;
}
