//! `script` and `tool` trigger continuations end to end (docs/workflows.md §4): a webhook fires
//! a root workflow run (no session) whose script gets `{input, activity}` and acts as the agent;
//! a `tool` runs as the one-call script the server writes; the run's end settles the firing; a
//! script's agent children open top-level threads; a failure with `onFailure: 'thread'` opens a
//! thread the scripted provider answers, and the firing keeps its failure; the continuations' validation at create, update and `write
//! ~/triggers/<name>`. A real server, webhooks over HTTP, the scripted provider on loopback.

use std::time::Duration;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    AgentTriggerInfo, AgentTriggerInput, AgentTriggerInputPrompt, AgentTriggerPatch, AgentTriggerSource, CreateAgent,
    CreateAgentTrigger, GetAgentTrigger, GetAgentTriggerResponse, GetRun, GetRunJournal, GetSession, InvokeSessionTool,
    InvokeSessionToolVerb, ListSessions, MessageEventRole, ReadAgentMemoryFile, RunInfo, RunInfoKind, RunInfoOrigin,
    RunStatus, ScriptContinuation, SessionActor, SessionEventPayload, SetModelProvider, ToolContinuation,
    TriggerContinuation, TriggerFailurePolicy, TriggerFiringInfo, UpdateAgentTrigger, WebhookSource,
};
use seed_agents_protocol::{Value, wire};
use serde_json::{Value as Json, json};

use crate::support::db::read_db;
use crate::support::provider::{Fallback, Provider};
use crate::support::transcript::read_log;
use crate::support::wait;
use crate::support::webhook::{now_seconds, signed};
use crate::support::{TestServer, User, action_map, api_error, custom_provider_config, definition, error_body, now_ms};

/// A server whose agent turns all answer `done` from the scripted provider; a user with an agent.
async fn setup(provider: &Provider) -> (TestServer, User, seed_agents_protocol::AgentId) {
    provider.set_fallback(Fallback::Text("done".into()));
    let server = TestServer::start_with(tempfile::tempdir().unwrap(), |config| {
        config.session_title_generation = false;
        config.provider_timeout = Duration::from_secs(5);
    })
    .await;
    let user = server.user();
    let custom = custom_provider_config(provider.openai_base());
    user.call(SetModelProvider { name: "main".into(), provider: custom }).await.unwrap();
    let agent_id =
        user.call(CreateAgent { client_request_id: None, definition: definition("Keeper") }).await.unwrap().agent_id;
    (server, user, agent_id)
}

fn value(json: Json) -> Value {
    Value(wire::json_to_ipld(&json))
}

fn script(source: &str, input: Option<Json>, on_failure: Option<TriggerFailurePolicy>) -> TriggerContinuation {
    let mut continuation = ScriptContinuation::new(source);
    continuation.input = input.map(value);
    continuation.on_failure = on_failure;
    TriggerContinuation::ScriptContinuation(continuation)
}

fn tool(name: &str, input: Option<Json>, on_failure: Option<TriggerFailurePolicy>) -> TriggerContinuation {
    let mut continuation = ToolContinuation::new(name);
    continuation.input = input.map(value);
    continuation.on_failure = on_failure;
    TriggerContinuation::ToolContinuation(continuation)
}

fn hook(name: &str, continuation: Option<TriggerContinuation>) -> AgentTriggerInput {
    AgentTriggerInput {
        extra: Default::default(),
        continuation,
        enabled: None,
        name: name.into(),
        prompt: Some(AgentTriggerInputPrompt::String(format!("Handle {name}."))),
        source: AgentTriggerSource::WebhookSource(WebhookSource { extra: Default::default() }),
    }
}

async fn create(user: &User, agent_id: &str, trigger: AgentTriggerInput) -> (AgentTriggerInfo, String) {
    let created =
        user.call(CreateAgentTrigger { agent_id: agent_id.into(), client_request_id: None, trigger }).await.unwrap();
    (created.trigger, created.webhook_secret.unwrap())
}

async fn get(user: &User, trigger_id: &str) -> GetAgentTriggerResponse {
    user.call(GetAgentTrigger { trigger_id: trigger_id.into() }).await.unwrap()
}

/// Posts a signed webhook delivery `id` with `body`; the status and the JSON answer.
async fn post(server: &TestServer, trigger_id: &str, secret: &str, id: &str, body: &str) -> (u16, Json) {
    let mut request =
        server.http.post(format!("{}/api/triggers/{trigger_id}/webhook", server.url)).body(body.to_owned());
    for (name, value) in signed(secret, id, now_seconds(), body) {
        request = request.header(name, value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, serde_json::from_str(&response.text().await.unwrap()).unwrap())
}

/// The trigger's only firing once its status is `status`.
async fn firing_with(user: &User, trigger_id: &str, status: &str) -> TriggerFiringInfo {
    wait::until_ok(&format!("the firing is {status}"), || async move {
        let firings = get(user, trigger_id).await.firings;
        match firings.as_slice() {
            [firing] if firing.status == status => Ok(firing.clone()),
            _ => Err(firings),
        }
    })
    .await
}

async fn run(user: &User, run_id: &str) -> RunInfo {
    user.call(GetRun { run_id: run_id.into() }).await.unwrap().run
}

async fn memory(user: &User, agent_id: &str, path: &str) -> Option<String> {
    let read = ReadAgentMemoryFile { agent_id: agent_id.into(), path: path.into() };
    user.call(read).await.ok().and_then(|read| read.file.content)
}

async fn sessions(user: &User, agent_id: &str) -> usize {
    let list = ListSessions {
        agent_id: Some(agent_id.into()),
        cursor: None,
        exclude_triggered: None,
        include_children: Some(true),
        limit: None,
        parent_session_id: None,
    };
    user.call(list).await.unwrap().sessions.len()
}

/// The kinds of a run's journal entries (`call <tool>` for a call).
async fn journal(user: &User, run_id: &str) -> Vec<Json> {
    let entries = user.call(GetRunJournal { run_id: run_id.into(), after_seq: None }).await.unwrap().entries;
    entries.iter().map(|entry| serde_json::to_value(&entry.entry).unwrap()).collect()
}

const NOTE: &str = r#"
export default async function (input, ctx) {
  const body = input.activity.body;
  const address = "~/memory/hooks/" + body.event + ".md";
  await ctx.call("write", {address, content: input.input.greeting + " " + body.event});
  let attachment = "none";
  try { await ctx.call("read", {address: "attachment:abc"}); } catch (error) { attachment = error.code; }
  return {address, kind: input.activity.type, attachment};
}
"#;

#[tokio::test]
async fn a_script_continuation_runs_a_root_workflow_that_writes_memory_and_settles_its_firing() {
    let provider = Provider::start().await;
    let (server, user, agent_id) = setup(&provider).await;
    let continuation = script(NOTE, Some(json!({"greeting": "hello"})), None);
    let (trigger, secret) = create(&user, &agent_id, hook("Notes", Some(continuation))).await;

    let (status, answer) = post(&server, &trigger.id, &secret, "msg_1", r#"{"event":"deploy"}"#).await;
    assert_eq!(status, 202, "{answer}");
    assert!(answer.get("sessionId").is_none(), "a script opens no session: {answer}");
    let run_id = answer["runId"].as_str().unwrap().to_owned();

    let firing = firing_with(&user, &trigger.id, "succeeded").await;
    assert_eq!(
        (firing.id.as_str(), firing.run_id.as_deref(), firing.session_id.as_deref(), firing.error.as_deref()),
        (answer["firingId"].as_str().unwrap(), Some(&*run_id), None, None)
    );
    let info = run(&user, &run_id).await;
    assert_eq!(
        (info.kind, info.origin, info.status, info.depth, info.parent_run_id.as_ref(), info.session_id.as_ref()),
        (RunInfoKind::Workflow, RunInfoOrigin::Trigger, RunStatus::Succeeded, 0, None, None)
    );
    assert_eq!((info.root_run_id.as_str(), info.title.as_str()), (&*run_id, "Notes"));
    assert_eq!(info.source_text.as_deref(), Some(NOTE), "the trigger's script is pinned on its run");
    assert_eq!(memory(&user, &agent_id, "hooks/deploy.md").await.as_deref(), Some("hello deploy"));

    // The script's value: the address it wrote, the activity's type, the attachment refusal.
    let entries = journal(&user, &run_id).await;
    let calls: Vec<&str> = entries.iter().filter_map(|entry| entry["tool"].as_str()).collect();
    assert_eq!(calls, ["write", "read"], "{entries:?}");
    let refused = entries.iter().find(|entry| entry["kind"] == "result" && entry["error"].is_object());
    assert_eq!(refused.map(|entry| &entry["error"]["code"]), Some(&json!("invalid-input")), "{entries:?}");

    let read = get(&user, &trigger.id).await;
    assert!(read.trigger.last_fired_at.is_some() && read.trigger.last_error.is_none());
    assert!(read.sessions.is_empty());
    assert_eq!(sessions(&user, &agent_id).await, 0, "no session was opened");
    assert_eq!(provider.request_count(), 0, "no model was asked");

    // A replayed delivery fires nothing more.
    let (status, _) = post(&server, &trigger.id, &secret, "msg_1", r#"{"event":"deploy"}"#).await;
    assert_eq!(status, 409);
    server.stop().await;
}

#[tokio::test]
async fn a_trigger_started_script_delegates_into_a_top_level_thread() {
    let provider = Provider::start().await;
    let (server, user, agent_id) = setup(&provider).await;
    let source = r#"
export default async function (input, ctx) {
  const child = await ctx.delegate({brief: "Summarise " + input.activity.body.event, title: "Summary"});
  return {text: child.text};
}
"#;
    let (trigger, secret) = create(&user, &agent_id, hook("Summaries", Some(script(source, None, None)))).await;
    let (status, answer) = post(&server, &trigger.id, &secret, "msg_1", r#"{"event":"release"}"#).await;
    assert_eq!(status, 202, "{answer}");
    let firing = firing_with(&user, &trigger.id, "succeeded").await;
    let run_id = firing.run_id.unwrap();
    let entries = journal(&user, &run_id).await;
    let resolved = entries.iter().find(|entry| entry["kind"] == "result").map(|entry| &entry["output"]);
    let resolved = resolved.unwrap_or_else(|| panic!("{entries:?}"));
    assert_eq!((&resolved["status"], &resolved["output"]["text"]), (&json!("succeeded"), &json!("done")));

    // The child's session has no parent session: a top-level thread of the agent, spawned by
    // the workflow run.
    let list = seed_agents_protocol::generated::ListSessions {
        agent_id: Some(agent_id.clone()),
        cursor: None,
        exclude_triggered: None,
        include_children: None,
        limit: None,
        parent_session_id: None,
    };
    let listed = user.call(list).await.unwrap().sessions;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let child = &listed[0];
    assert_eq!((child.title.as_deref(), child.parent_session_id.as_ref()), (Some("Summary"), None));
    let child_run = entries.iter().find_map(|entry| entry["childRunId"].as_str()).unwrap();
    let child_run = run(&user, child_run).await;
    assert_eq!(
        (child_run.parent_run_id.as_deref(), child_run.depth, child_run.session_id.as_deref()),
        (Some(&*run_id), 1, Some(child.id.as_str()))
    );
    server.stop().await;
}

#[tokio::test]
async fn a_tool_continuation_makes_its_one_call_and_a_tool_it_cannot_call_fails_the_firing() {
    let provider = Provider::start().await;
    let (server, user, agent_id) = setup(&provider).await;
    let input = json!({"address": "~/memory/tool.md", "content": "written by a tool continuation"});
    let (trigger, secret) = create(&user, &agent_id, hook("Writer", Some(tool(" write ", Some(input), None)))).await;
    assert!(
        matches!(&trigger.continuation, Some(TriggerContinuation::ToolContinuation(t)) if t.tool == "write"),
        "the name is stored trimmed"
    );

    let (status, answer) = post(&server, &trigger.id, &secret, "msg_1", "{}").await;
    assert_eq!(status, 202, "{answer}");
    let firing = firing_with(&user, &trigger.id, "succeeded").await;
    let run_id = firing.run_id.unwrap();
    assert_eq!(memory(&user, &agent_id, "tool.md").await.as_deref(), Some("written by a tool continuation"));
    let info = run(&user, &run_id).await;
    assert_eq!((info.kind, info.session_id.as_ref()), (RunInfoKind::Workflow, None));
    let source = info.source_text.unwrap();
    assert!(source.contains(r#"return await ctx.call("write", input.input ?? {});"#), "{source}");
    let entries = journal(&user, &run_id).await;
    let kinds: Vec<&str> = entries.iter().map(|entry| entry["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["call", "result"], "{entries:?}");

    // A tool the agent cannot call: the run fails, the firing and the trigger say why, no thread.
    let (missing, secret) = create(&user, &agent_id, hook("Missing", Some(tool("no_such_tool", None, None)))).await;
    let (status, _) = post(&server, &missing.id, &secret, "msg_1", "{}").await;
    assert_eq!(status, 202);
    let firing = firing_with(&user, &missing.id, "failed").await;
    let error = firing.error.unwrap();
    assert!(error.contains("no_such_tool"), "{error}");
    let read = get(&user, &missing.id).await;
    assert_eq!(read.trigger.last_error.as_deref(), Some(&*error));
    assert!(firing.session_id.is_none() && read.sessions.is_empty(), "onFailure defaults to none");
    assert_eq!(run(&user, &firing.run_id.unwrap()).await.error.unwrap().code, "workflow-error");
    assert_eq!(sessions(&user, &agent_id).await, 0);
    server.stop().await;
}

#[tokio::test]
async fn a_failed_script_with_on_failure_thread_opens_a_thread_and_the_firing_keeps_its_failure() {
    let provider = Provider::start().await;
    let (server, user, agent_id) = setup(&provider).await;
    let failing = "export default async function (input, ctx) {\n  throw new Error('the upstream is down');\n}";
    let continuation = script(failing, None, Some(TriggerFailurePolicy::Thread));
    let (trigger, secret) = create(&user, &agent_id, hook("Sync", Some(continuation))).await;
    let (status, answer) = post(&server, &trigger.id, &secret, "msg_1", r#"{"event":"sync"}"#).await;
    assert_eq!(status, 202, "{answer}");
    let run_id = answer["runId"].as_str().unwrap().to_owned();

    // The failure is recorded and, in the same transaction, a thread opened for the agent.
    let firing = firing_with(&user, &trigger.id, "failed").await;
    let error = firing.error.clone().unwrap();
    assert!(error.contains("the upstream is down"), "{error}");
    assert_eq!(firing.run_id.as_deref(), Some(&*run_id), "the firing still names the failed run");
    let session_id = firing.session_id.clone().expect("the failure opened a thread");
    let read = get(&user, &trigger.id).await;
    assert_eq!(read.trigger.last_error.as_deref(), Some(&*error));
    assert_eq!(read.sessions.iter().map(|session| session.id.as_str()).collect::<Vec<_>>(), [&*session_id]);

    // The thread: the trigger's prompt, the activity and the failure, answered by the model.
    let log = wait::until_ok("the thread is answered", || {
        let (user, session_id) = (&user, &session_id);
        async move {
            let log = read_log(user, session_id).await;
            let answered = log.iter().any(|event| {
                matches!(&event.event, SessionEventPayload::MessageEvent(m) if m.role == MessageEventRole::Assistant)
            });
            if answered { Ok(log) } else { Err(log.len()) }
        }
    })
    .await;
    let SessionEventPayload::MessageEvent(opening) = &log[0].event else { panic!("{log:?}") };
    assert_eq!((opening.role, opening.actor), (MessageEventRole::User, Some(SessionActor::Trigger)));
    assert!(opening.content.starts_with("Handle Sync.\n\n<trigger_activity"), "{}", opening.content);
    assert!(opening.content.contains(&format!("<trigger_failure run=\"{run_id}\">")), "{}", opening.content);
    assert!(opening.content.contains("workflow-error: ") && opening.content.contains("the upstream is down"));
    let asked = provider.requests().iter().any(|request| request.body.to_string().contains("trigger_failure"));
    assert!(asked, "the model reads the failure");

    // The thread's run answers no firing: its success leaves the firing failed.
    let session =
        user.call(GetSession { session_id: session_id.clone(), after_seq: None, before_seq: None, limit: None });
    let context = session.await.unwrap().trigger_context.expect("the thread is attributed to the firing");
    assert_eq!((context.status.as_str(), context.firing_id.as_str()), ("failed", firing.id.as_str()));
    let thread_run = wait::until_ok("the thread's run succeeds", || {
        let (user, session_id) = (&user, &session_id);
        async move {
            let list = seed_agents_protocol::generated::ListRuns {
                agent_id: None,
                limit: None,
                root_run_id: None,
                session_id: Some(session_id.clone()),
                status: None,
            };
            let runs = user.call(list).await.unwrap().runs;
            match runs.as_slice() {
                [run] if run.status == RunStatus::Succeeded => Ok(run.clone()),
                _ => Err(runs),
            }
        }
    })
    .await;
    assert_eq!((thread_run.kind, thread_run.origin), (RunInfoKind::Agent, RunInfoOrigin::Trigger));
    // The monitor has handled the thread's end once no ended run is left for it.
    wait::until("the thread run's end is handled", || async { !pending(&server).await }).await;
    assert_eq!(firing_with(&user, &trigger.id, "failed").await.error.as_deref(), Some(&*error));
    server.stop().await;
}

/// Whether an ended run is still left for the run-completed monitor (read from the database).
async fn pending(server: &TestServer) -> bool {
    read_db(server, |conn| {
        conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE completion_pending = 1 AND finished_at IS NOT NULL
                              AND (kind = 'agent' OR trigger_firing_id IS NOT NULL))",
            [],
            |row| row.get(0),
        )
    })
    .await
}

#[tokio::test]
async fn script_and_tool_continuations_are_checked_when_written() {
    let provider = Provider::start().await;
    let (server, user, agent_id) = setup(&provider).await;
    let make = |continuation| CreateAgentTrigger {
        agent_id: agent_id.clone(),
        client_request_id: None,
        trigger: hook("Bad", Some(continuation)),
    };
    let (status, message) = api_error(user.call(make(script("return Date.now();", None, None))).await);
    assert_eq!(status, 400);
    assert!(message.starts_with("Workflow source rejected:\n- Date is not available"), "{message}");
    assert!(message.contains("exactly one `export default"), "{message}");
    assert_eq!(api_error(user.call(make(tool("  ", None, None))).await), (400, "Trigger tool is required".into()));
    let big = json!("x".repeat(300 * 1024));
    let (status, message) = api_error(user.call(make(tool("write", Some(big), None))).await);
    assert_eq!((status, message.starts_with("Trigger input is too large")), (400, true), "{message}");

    // An onFailure that is neither none nor thread, as a client the SDK would not let through.
    let continuation = Ipld::Map(
        [
            ("kind".to_owned(), Ipld::String("tool".into())),
            ("tool".to_owned(), Ipld::String("write".into())),
            ("onFailure".to_owned(), Ipld::String("retry".into())),
        ]
        .into(),
    );
    let trigger = Ipld::Map(
        [
            ("name".to_owned(), Ipld::String("Odd".into())),
            ("prompt".to_owned(), Ipld::String("x".into())),
            ("source".to_owned(), Ipld::Map([("type".to_owned(), Ipld::String("webhook".into()))].into())),
            ("continuation".to_owned(), continuation),
        ]
        .into(),
    );
    let action =
        action_map("CreateAgentTrigger", &[("agentId", Ipld::String(agent_id.to_string())), ("trigger", trigger)]);
    let (status, _, body) = server.post_raw("application/cbor", user.sign_map(action, now_ms(), Some(3)).await).await;
    let (message, _) = error_body(&body);
    assert_eq!(status, 400, "{message}");
    assert!(message.contains("onFailure") || message.contains("retry"), "{message}");

    // An update may switch a trigger to a script; a bad one is refused and changes nothing.
    let (plain, _) = create(&user, &agent_id, hook("Plain", None)).await;
    let update = |continuation| UpdateAgentTrigger {
        trigger_id: plain.id.clone(),
        expected_updated_at: None,
        patch: AgentTriggerPatch { continuation: Some(continuation), ..AgentTriggerPatch::default() },
    };
    let (status, message) =
        api_error(user.call(update(script("export default 1; export default 2;", None, None))).await);
    assert!(status == 400 && message.starts_with("Workflow source rejected:"), "{message}");
    assert!(get(&user, &plain.id).await.trigger.continuation.is_none());
    let good = "export default async function (input, ctx) { return input; }";
    let updated = user.call(update(script(good, None, Some(TriggerFailurePolicy::Thread)))).await.unwrap().trigger;
    let Some(TriggerContinuation::ScriptContinuation(stored)) = updated.continuation else { panic!("a script") };
    assert_eq!((stored.script.as_str(), stored.on_failure), (good, Some(TriggerFailurePolicy::Thread)));

    // The agent's own `write ~/triggers/<name>` goes through the same checks.
    let session_id = user.create_session(&agent_id, None).await;
    let write = |content: Json| InvokeSessionTool {
        input: value(json!({"address": "~/triggers/Nightly", "content": content.to_string()})),
        session_id: session_id.clone(),
        verb: InvokeSessionToolVerb::Write,
    };
    let schedule = json!({"type": "schedule", "schedule": {"kind": "interval", "every": 1, "unit": "hours"}});
    let bad = json!({"source": schedule, "prompt": "x", "continuation": {"kind": "script", "script": "fetch('x')"}});
    let refused = user.call(write(bad)).await.unwrap().error.unwrap();
    assert!(refused.starts_with("Workflow source rejected:"), "{refused}");
    let odd = json!({"source": schedule, "prompt": "x", "continuation": {"kind": "tool", "tool": "write", "onFailure": "never"}});
    assert!(user.call(write(odd)).await.unwrap().error.unwrap().contains("does not fit"));
    let fine = json!({"source": schedule, "prompt": "x", "continuation": {"kind": "tool", "tool": "write"}});
    assert!(user.call(write(fine)).await.unwrap().error.is_none());
    server.stop().await;
}
