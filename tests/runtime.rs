//! Agent turns end to end: a real server, the SDK, and a scripted model provider on loopback that
//! streams exactly as the vendors do (`support::provider`).

use std::time::Duration;

use futures_util::StreamExt as _;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    AgentDefinition, CreateAgent, GetSession, ModelProviderConfig, SessionEvent, SessionEventPayload,
    SessionInfoStatus, SetModelProvider, StopSession,
};
use seed_agents_sdk::subscription::Event as Live;

use crate::support::db::write_db_at;
use crate::support::provider::{Gate, Provider, Script};
use crate::support::transcript::{read_log, transcript};
use crate::support::wait;
use crate::support::{TestServer, User, api_error, custom_provider_config, definition, say};

/// A server whose turns go to `provider`: a `custom` (chat completions) provider `main` at the
/// scripted server, automatic titles off unless `titles` (they would take scripted answers).
async fn setup(
    provider: &Provider,
    titles: bool,
) -> (TestServer, User, seed_agents_protocol::AgentId, seed_agents_protocol::SessionId) {
    let server = start(provider, titles, tempfile::tempdir().unwrap()).await;
    let user = server.user();
    let custom = custom_provider_config(provider.openai_base());
    user.call(SetModelProvider { name: "main".into(), provider: custom }).await.unwrap();
    let agent_id =
        user.call(CreateAgent { client_request_id: None, definition: definition("Scout") }).await.unwrap().agent_id;
    let session_id = user.create_session(&agent_id, None).await;
    (server, user, agent_id, session_id)
}

/// A server in `dir` whose `anthropic` provider type goes to `provider`.
async fn start(provider: &Provider, titles: bool, dir: tempfile::TempDir) -> TestServer {
    let anthropic = provider.anthropic_base();
    TestServer::start_with(dir, |config| {
        config.session_title_generation = titles;
        config.provider_timeout = Duration::from_secs(2);
        crate::support::route_provider(config, &format!("anthropic={anthropic}"));
    })
    .await
}

fn seqs_are_gap_free(events: &[SessionEvent]) {
    let seqs: Vec<i64> = events.iter().map(|event| event.seq).collect();
    assert_eq!(seqs, (1..=events.len() as i64).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_text_turn_streams_partials_and_stores_the_answer_with_its_meta() {
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider, false).await;
    let mut live = user.client.subscribe(format!("sessions/{session_id}")).start();
    assert!(matches!(live.next().await, Some(Ok(Live::Subscribed { .. }))));
    provider.push(Script::text("Hello there, friend.").split().usage(120, 7, 100, 0));

    let answer = user.call(say(&session_id, "  hi  ")).await.unwrap();
    let log = read_log(&user, &session_id).await;
    assert_eq!(transcript(&log), ["user: hi", "assistant: Hello there, friend."]);
    assert_eq!(answer.assistant_event_id, log[1].id);
    seqs_are_gap_free(&log);
    let SessionEventPayload::MessageEvent(question) = &log[0].event else { panic!() };
    let meta = question.meta.as_ref().unwrap();
    assert_eq!((meta.account_id.as_deref(), meta.signer_id.as_deref()), (Some(&*user.id), Some(&*user.id)));
    assert_eq!(question.raw_markdown.as_deref(), Some("hi"));
    let SessionEventPayload::MessageEvent(reply) = &log[1].event else { panic!() };
    let meta = reply.meta.as_ref().unwrap();
    assert_eq!((meta.model.as_deref(), meta.provider.as_deref()), (Some("gpt-4.1"), Some("custom")));
    let usage = meta.usage.as_ref().unwrap();
    assert_eq!((usage.input, usage.output, usage.cache_read), (120, 7, 100));

    // What the provider was asked: our prompt (no server path), the sender-tagged message, the verbs.
    let request = &provider.requests()[0];
    let body = &request.body;
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert!(system.starts_with("You are helpful."), "{system}");
    assert!(system.contains("<space>") && system.contains("memory/ — empty"), "{system}");
    let data_dir = server.dir.path().to_string_lossy().into_owned();
    assert!(!system.contains(&data_dir), "the prompt names no server path");
    let sent = body["messages"][1]["content"].as_str().unwrap();
    assert_eq!(sent, format!("<message_sender>\n{{\"accountId\":\"{}\"}}\n</message_sender>\n\nhi", user.id));
    let tools: Vec<&str> =
        body["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(tools, ["read", "write", "call", "delegate", "plan", "status", "continue_session"]);
    assert_eq!(body["stream"], true);

    // Live: the user message, the partials in order, `done` just before the durable answer.
    let mut seen = Vec::new();
    while seen.last().map(String::as_str) != Some("append assistant") {
        match tokio::time::timeout(Duration::from_secs(10), live.next()).await.unwrap().unwrap().unwrap() {
            Live::Append { event, .. } => seen.push(match &event.event {
                SessionEventPayload::MessageEvent(message) => format!("append {}", message.role),
                other => format!("append {other:?}"),
            }),
            Live::Partial { patch, .. } => {
                if let Some(delta) = patch.text_delta {
                    seen.push(format!("delta {delta}"));
                }
                if patch.done == Some(true) {
                    seen.push("done".into());
                }
                if let Some(activity) = patch.activity {
                    seen.push(format!("activity {}", activity.phase));
                }
            }
            Live::Change { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    let text: String = seen.iter().filter_map(|line| line.strip_prefix("delta ")).collect();
    assert_eq!(text, "Hello there, friend.");
    assert!(seen.iter().filter(|line| line.starts_with("delta ")).count() > 5, "split into small deltas: {seen:?}");
    let position = |wanted: &str| seen.iter().position(|line| line == wanted).unwrap_or(usize::MAX);
    assert!(position("append user") < position("activity starting"), "{seen:?}");
    assert!(position("activity responding") < position("delta H"), "{seen:?}");
    assert!(position("activity starting") < position("activity responding"), "{seen:?}");
    assert_eq!(position("activity thinking") + 1, position("done"), "the step ended, then done: {seen:?}");
    assert_eq!(position("done") + 1, seen.len() - 1, "done immediately before the append: {seen:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_turn_writes_then_reads_its_memory_with_tools() {
    let provider = Provider::start().await;
    let (server, user, agent_id, session_id) = setup(&provider, false).await;
    provider.push(
        Script::tool_call("call_1", "write", r#"{"address":"~/memory/notes.md","content":"milk, eggs"}"#)
            .with_text("Saving that.")
            .split(),
    );
    provider.push(Script::tool_call("call_2", "read", r#"{"address":"~/memory/notes.md"}"#).split());
    provider.push(Script::text("Your list: milk, eggs."));
    user.call(say(&session_id, "remember milk and eggs")).await.unwrap();
    let log = read_log(&user, &session_id).await;
    assert_eq!(
        transcript(&log),
        [
            "user: remember milk and eggs",
            "assistant: Saving that.",
            "call write",
            "result write",
            "call read",
            "result read",
            "assistant: Your list: milk, eggs.",
        ]
    );
    seqs_are_gap_free(&log);
    let agent = user.call(seed_agents_protocol::generated::GetAgent { agent_id }).await.unwrap().agent;
    let stored = std::fs::read_to_string(std::path::Path::new(&agent.state_dir).join("memory/notes.md")).unwrap();
    assert_eq!(stored, "milk, eggs");
    // The third request carries both calls and their results, in call order.
    let third = &provider.requests()[2].body["messages"];
    let roles: Vec<&str> = third.as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant", "tool"]);
    assert_eq!(third[3]["tool_call_id"], "call_1");
    assert!(third[5]["content"].as_str().unwrap().contains("milk, eggs"));
    server.stop().await;
}

#[tokio::test]
async fn bad_arguments_and_unknown_tools_come_back_as_errors_the_model_can_fix() {
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider, false).await;
    // JSON null in arguments (as strict-mode models send for optional fields) is validated like any value.
    provider.push(
        Script::tool_call("c1", "read", r#"{"adress":"~/memory/"}"#)
            .and_tool_call("c2", "bash", r#"{"cmd":"ls"}"#)
            .and_tool_call("c3", "read", r#"{"address":"~/memory/","format":null}"#),
    );
    provider.push(Script::text("Sorry about that."));
    user.call(say(&session_id, "look around")).await.unwrap();
    let lines = transcript(&read_log(&user, &session_id).await);
    assert_eq!(lines.len(), 8, "{lines:?}");
    assert!(lines[4].starts_with("error read: Validation failed for tool \"read\":"), "{lines:?}");
    assert_eq!(lines[5], "error bash: Tool bash not found");
    assert!(lines[6].starts_with("error read: Validation failed for tool \"read\":"), "{lines:?}");
    assert_eq!(lines[7], "assistant: Sorry about that.");
    server.stop().await;
}

#[tokio::test]
async fn an_open_plan_is_sent_back_and_settles_and_status_names_the_session() {
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider, false).await;
    let plan = |status: &str| format!(r#"{{"steps":[{{"id":"1","label":"Find the notes","status":"{status}"}}]}}"#);
    provider.push(Script::tool_call("p1", "plan", &plan("running")).and_tool_call(
        "s1",
        "status",
        r#"{"title":"Notes hunt","description":"Looking for notes."}"#,
    ));
    provider.push(Script::text("Working on it."));
    // The continuation: the model settles the step and answers.
    provider.push(Script::tool_call("p2", "plan", &plan("done")));
    provider.push(Script::text("Found them."));
    user.call(say(&session_id, "find my notes")).await.unwrap();
    let log = read_log(&user, &session_id).await;
    assert_eq!(
        transcript(&log),
        [
            "user: find my notes",
            "call status",
            "result status",
            "assistant: Working on it.",
            "system: This turn is ending with work you committed to still open:",
            "assistant: Found them.",
        ],
        "plan calls leave no trace"
    );
    let session = user
        .call(GetSession { session_id: session_id.clone(), after_seq: None, before_seq: None, limit: None })
        .await
        .unwrap()
        .session;
    assert_eq!(session.title.as_deref(), Some("Notes hunt"));
    assert_eq!(session.description.as_deref(), Some("Looking for notes."));
    let plan = session.plan.unwrap();
    assert!(plan.settled_at.is_some());
    // The model saw its plan as the last message of the continuation pass.
    let requests = provider.requests();
    let last = requests[2].body["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap().to_owned();
    assert!(last.starts_with("<plan_state>\n1 · Find the notes · running"), "{last}");
    server.stop().await;
}

#[tokio::test]
async fn a_plan_never_finished_ends_with_a_notice_and_unmet_obligations() {
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider, false).await;
    provider.push(Script::tool_call("p1", "plan", r#"{"steps":[{"id":"a","label":"Write it","status":"pending"}]}"#));
    for _ in 0..4 {
        provider.push(Script::text("Not yet."));
    }
    user.call(say(&session_id, "write it")).await.unwrap();
    let lines = transcript(&read_log(&user, &session_id).await);
    let continuations = lines.iter().filter(|line| line.starts_with("system: This turn is ending")).count();
    assert_eq!(continuations, 3, "{lines:?}");
    assert_eq!(lines.last().unwrap(), "system: This run ended with work still open:");
    let app = server.server.as_ref().unwrap().app().clone();
    let output: Vec<u8> =
        app.db.read(|conn| Ok(conn.query_row("SELECT output_cbor FROM runs", [], |row| row.get(0))?)).await.unwrap();
    let output = seed_agents_protocol::wire::decode_ipld(&output).unwrap();
    let Ipld::Map(fields) = output else { panic!() };
    assert_eq!(
        fields.get("unmetObligations"),
        Some(&Ipld::List(vec![Ipld::Map(
            [
                ("kind".to_owned(), Ipld::String("plan".into())),
                ("steps".to_owned(), Ipld::List(vec![Ipld::String("Write it".into())]))
            ]
            .into()
        )]))
    );
    server.stop().await;
}

#[tokio::test]
async fn a_provider_failure_is_an_error_event_and_a_502_and_a_hang_times_out() {
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider, false).await;
    for _ in 0..3 {
        provider.push(Script::status(500).message("upstream broke"));
    }
    let (status, message) = api_error(user.call(say(&session_id, "hi")).await);
    assert_eq!(status, 502);
    assert!(message.contains("500"), "{message}");
    assert_eq!(provider.request_count(), 3, "two quick retries, then the failure");
    provider.push(Script::text("Half an ans").hang_after(3));
    let (status, message) = api_error(user.call(say(&session_id, "again")).await);
    assert_eq!(status, 502);
    assert!(message.to_lowercase().contains("idle"), "{message}");
    let lines = transcript(&read_log(&user, &session_id).await);
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(lines[1].starts_with("error: 500"), "{lines:?}");
    assert!(lines[3].starts_with("error: "), "{lines:?}");
    let session = user
        .call(GetSession { session_id: session_id.clone(), after_seq: None, before_seq: None, limit: None })
        .await
        .unwrap()
        .session;
    assert_eq!(session.status, SessionInfoStatus::Error);
    server.stop().await;
}

#[tokio::test]
async fn stop_mid_stream_keeps_the_partial_text() {
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider, false).await;
    provider.push(Script::text("One two three four five six").split().delay(Duration::from_millis(150)));
    let mut live = user.client.subscribe(format!("sessions/{session_id}")).start();
    let sending = {
        let (client, session_id) = (user.client.clone(), session_id.clone());
        tokio::spawn(async move { client.call(say(&session_id, "count")).await })
    };
    // Once a few deltas are out, stop.
    let mut deltas = 0;
    while deltas < 4 {
        if let Live::Partial { patch, .. } = live.next().await.unwrap().unwrap()
            && patch.text_delta.is_some()
        {
            deltas += 1;
        }
    }
    let stopped = user.call(StopSession { session_id: session_id.clone() }).await.unwrap();
    assert!(stopped.stopped);
    let answer = sending.await.unwrap().unwrap();
    let log = read_log(&user, &session_id).await;
    let SessionEventPayload::MessageEvent(kept) = &log.last().unwrap().event else { panic!() };
    assert_eq!(answer.assistant_event_id, log.last().unwrap().id);
    assert!(kept.content.starts_with("One ") && kept.content.len() < "One two three four five six".len(), "{kept:?}");
    let status = user
        .call(GetSession { session_id, after_seq: None, before_seq: None, limit: None })
        .await
        .unwrap()
        .session
        .status;
    assert_eq!(status, SessionInfoStatus::Idle);
    server.stop().await;
}

#[tokio::test]
async fn a_duplicate_message_sent_mid_stream_posts_once() {
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider, false).await;
    // The answer holds after its first event until the duplicate is in.
    let gate = Gate::new();
    provider.push(Script::text("slow answer").split().hold_after(1, &gate));
    let mut keyed = say(&session_id, "only once");
    keyed.client_message_id = Some("m-1".into());
    let first = {
        let (client, keyed) = (user.client.clone(), keyed.clone());
        tokio::spawn(async move { client.call(keyed).await })
    };
    wait::until_true("the turn asks the provider", || provider.request_count() == 1).await;
    let duplicate = user.call(keyed.clone()).await.unwrap();
    assert_eq!(duplicate.assistant_event_id, "", "still streaming: nothing new posted, nothing to show yet");
    gate.open();
    let first = first.await.unwrap().unwrap();
    assert!(!first.assistant_event_id.is_empty());
    let again = user.call(keyed).await.unwrap();
    assert_eq!(again.assistant_event_id, first.assistant_event_id, "after the turn: its answer");
    let lines = transcript(&read_log(&user, &session_id).await);
    assert_eq!(lines, ["user: only once", "assistant: slow answer"]);
    assert_eq!(provider.request_count(), 1);
    server.stop().await;
}

#[tokio::test]
async fn anthropic_wire_turns_work_through_a_provider_url() {
    let provider = Provider::start().await;
    let (server, user, _agent, _) = setup(&provider, false).await;
    user.call(seed_agents_protocol::generated::SetSecret {
        name: "claude".into(),
        value: seed_agents_protocol::Bytes(b"sk-ant-test".to_vec()),
        metadata: None,
    })
    .await
    .unwrap();
    let anthropic = ModelProviderConfig {
        extra: Default::default(),
        auth_mode: None,
        base_url: None,
        model_defaults: None,
        secret_refs: Some([("apiKey".to_owned(), "claude".to_owned())].into()),
        type_: "anthropic".into(),
    };
    user.call(SetModelProvider { name: "claude".into(), provider: anthropic }).await.unwrap();
    let definition = AgentDefinition {
        model: "claude-sonnet-4-5".into(),
        model_provider: "claude".into(),
        reasoning_level: Some(seed_agents_protocol::generated::ReasoningLevel::Low),
        ..definition("Claude")
    };
    let agent_id = user.call(CreateAgent { client_request_id: None, definition }).await.unwrap().agent_id;
    let session_id = user.create_session(&agent_id, None).await;
    provider.push(
        Script::tool_call("toolu_1", "read", r#"{"address":"~/memory/"}"#).reasoning("Check memory first.").split(),
    );
    provider.push(Script::text("Your memory is empty.").split());
    user.call(say(&session_id, "what do you remember?")).await.unwrap();
    assert_eq!(
        transcript(&read_log(&user, &session_id).await),
        ["user: what do you remember?", "call read", "result read", "assistant: Your memory is empty."]
    );
    let requests = provider.requests();
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].header("x-api-key"), "sk-ant-test");
    let second = &requests[1].body["messages"];
    assert_eq!(second[2]["content"][0]["type"], "tool_result");
    assert_eq!(second[2]["content"][0]["tool_use_id"], "toolu_1");
    // Thinking goes on through the tool loop: the step's signed block goes back first, whole.
    assert_eq!(requests[0].body["thinking"], serde_json::json!({"type": "enabled", "budget_tokens": 2048}));
    assert_eq!(requests[1].body["thinking"], requests[0].body["thinking"]);
    assert_eq!(
        second[1]["content"][0],
        serde_json::json!({"type": "thinking", "thinking": "Check memory first.", "signature": "c2NyaXB0ZWQ="})
    );
    assert_eq!(second[1]["content"][1]["type"], "tool_use");
    // Reasoning is never stored: the log holds no trace of it.
    let log = serde_json::to_string(&read_log(&user, &session_id).await).unwrap();
    assert!(!log.contains("Check memory first"), "{log}");
    server.stop().await;
}

#[tokio::test]
async fn an_automatic_title_names_a_new_session_once() {
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider, true).await;
    // The titling call races the answer, so both get the same text (a titling answer).
    provider.set_fallback(crate::support::provider::Fallback::Text(
        "Title: \"Grocery planning.\"\nDescription: A shopping list.".into(),
    ));
    user.call(say(&session_id, "plan my groceries")).await.unwrap();
    let (user_ref, session_ref) = (&user, &session_id);
    let session = wait::until_ok("the session has a title", || async move {
        let get = GetSession { session_id: session_ref.clone(), after_seq: None, before_seq: None, limit: None };
        let session = user_ref.call(get).await.unwrap().session;
        if session.title.is_some() { Ok(session) } else { Err(session) }
    })
    .await;
    assert_eq!(session.title.as_deref(), Some("Grocery planning"));
    assert_eq!(session.description.as_deref(), Some("A shopping list."));
    let requests = provider.requests();
    let titling: Vec<_> = requests.iter().filter(|request| request.body.get("tools").is_none()).collect();
    assert_eq!(titling.len(), 1, "one titling call");
    let digest = titling[0].body["messages"][1]["content"].as_str().unwrap();
    assert_eq!(digest, "User: plan my groceries");
    // Titled now: the next turn does not ask again.
    user.call(say(&session_id, "and drinks")).await.unwrap();
    let requests = provider.requests();
    assert_eq!(requests.iter().filter(|request| request.body.get("tools").is_none()).count(), 1);
    server.stop().await;
}

async fn wait_idle(user: &User, session_id: &str) {
    wait::until(&format!("session {session_id} stops streaming"), || async move {
        let get = GetSession { session_id: session_id.into(), after_seq: None, before_seq: None, limit: None };
        user.call(get).await.unwrap().session.status != SessionInfoStatus::Streaming
    })
    .await;
}

#[tokio::test]
async fn two_writers_at_once_are_answered_in_turn() {
    use seed_agents_protocol::generated::{AcceptAgentInvite, AgentCollaboratorRole, InviteAgentCollaborator};
    let provider = Provider::start().await;
    let (server, owner, agent_id, session_id) = setup(&provider, false).await;
    let friend = server.user();
    let invite = InviteAgentCollaborator {
        agent_id: agent_id.clone(),
        account_id: friend.id.clone(),
        role: AgentCollaboratorRole::Writer,
    };
    owner.call(invite).await.unwrap();
    friend.call(AcceptAgentInvite { agent_id: agent_id.clone() }).await.unwrap();
    // The first answer holds after its first event until the friend has written.
    let gate = Gate::new();
    provider.push(Script::text("First answer.").split().hold_after(1, &gate));
    provider.push(Script::text("Second answer."));
    let first = {
        let (client, session_id) = (owner.client.clone(), session_id.clone());
        tokio::spawn(async move { client.call(say(&session_id, "from the owner")).await })
    };
    // Once the first turn is streaming, the friend writes.
    wait::until_true("the owner's turn asks the provider", || provider.request_count() == 1).await;
    let second = friend.call(say(&session_id, "from the friend")).await.unwrap();
    assert_eq!(second.assistant_event_id, "", "queued behind the owner's turn, not refused");
    gate.open();
    let first = first.await.unwrap().unwrap();
    assert!(!first.assistant_event_id.is_empty());
    wait_idle(&owner, &session_id).await;
    let log = read_log(&owner, &session_id).await;
    assert_eq!(
        transcript(&log),
        ["user: from the owner", "user: from the friend", "assistant: First answer.", "assistant: Second answer."]
    );
    // The second turn was told which messages it answers, and who sent them.
    let requests = provider.requests();
    let last = requests[1].body["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap().to_owned();
    assert!(last.starts_with("<concurrent_user_messages>"), "{last}");
    assert!(last.contains(&format!("\"accountId\":\"{}\"", friend.id)) && last.contains(log[1].id.as_str()), "{last}");
    let SessionEventPayload::MessageEvent(by_friend) = &log[1].event else { panic!() };
    assert_eq!(by_friend.meta.as_ref().unwrap().account_id.as_deref(), Some(&*friend.id));
    server.stop().await;
}

#[tokio::test]
async fn retry_after_a_provider_failure_answers_and_cancel_ends_a_queued_run() {
    use seed_agents_protocol::generated::{CancelRun, ListRuns, RetrySession, RunStatus};
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider, false).await;
    for _ in 0..3 {
        provider.push(Script::status(500).message("overloaded"));
    }
    let (status, _) = api_error(user.call(say(&session_id, "hi")).await);
    assert_eq!(status, 502);
    provider.push(Script::text("Better now."));
    let retried = user.call(RetrySession { session_id: session_id.clone() }).await.unwrap();
    let log = read_log(&user, &session_id).await;
    assert_eq!(transcript(&log), ["user: hi", "error: 500 overloaded", "assistant: Better now."]);
    assert_eq!(retried.assistant_event_id, log[2].id);
    // The retried pass replayed the log without the error event.
    let retry_request = &provider.requests()[3].body["messages"];
    assert_eq!(retry_request.as_array().unwrap().len(), 2, "system and the user message only");

    // A run queued behind a streaming turn is canceled before it starts (the answer holds after
    // its first event until then).
    let gate = Gate::new();
    provider.push(Script::text("Long answer here.").split().hold_after(1, &gate));
    let first = {
        let (client, session_id) = (user.client.clone(), session_id.clone());
        tokio::spawn(async move { client.call(say(&session_id, "first")).await })
    };
    wait::until_true("the first turn asks the provider", || provider.request_count() == 5).await;
    assert_eq!(user.call(say(&session_id, "second")).await.unwrap().assistant_event_id, "");
    let runs = user
        .call(ListRuns {
            agent_id: None,
            limit: None,
            root_run_id: None,
            session_id: Some(session_id.clone()),
            status: None,
        })
        .await
        .unwrap()
        .runs;
    let queued = runs.iter().find(|run| run.status == RunStatus::Queued).expect("the second turn is queued");
    let canceled = user.call(CancelRun { run_id: queued.id.clone() }).await.unwrap();
    assert!(canceled.canceled);
    gate.open();
    first.await.unwrap().unwrap();
    wait_idle(&user, &session_id).await;
    let lines = transcript(&read_log(&user, &session_id).await);
    assert_eq!(
        &lines[3..],
        ["user: first", "user: second", "assistant: Long answer here."],
        "nothing answered the canceled run"
    );
    assert_eq!(provider.request_count(), 5);

    // The user (and the model) can read a run by its address; another agent's run is not there.
    let input = |address: String| {
        seed_agents_protocol::Value(Ipld::Map([("address".to_owned(), Ipld::String(address))].into()))
    };
    let read = |address: String| seed_agents_protocol::generated::InvokeSessionTool {
        session_id: session_id.clone(),
        verb: seed_agents_protocol::generated::InvokeSessionToolVerb::Read,
        input: input(address),
    };
    let answer = user.call(read(format!("run:{}", queued.id))).await.unwrap();
    let output = serde_json::to_value(answer.output.unwrap()).unwrap();
    assert_eq!(output["status"], "canceled");
    assert_eq!(output["summary"], "Run \"second\" is canceled.");
    let answer = user.call(read("run:nope".into())).await.unwrap();
    assert_eq!(answer.error.as_deref(), Some("No run nope"));
    // `thread:` lists the agent's conversations; a query finds one by what was said in it.
    let listed = serde_json::to_value(user.call(read("thread:".into())).await.unwrap().output.unwrap()).unwrap();
    assert_eq!(listed["threads"].as_array().unwrap().len(), 1);
    assert_eq!(listed["threads"][0]["sessionId"], session_id.as_str());
    let mut search = read("thread:".into());
    search.input = seed_agents_protocol::Value(Ipld::Map(
        [
            ("address".to_owned(), Ipld::String("thread:".into())),
            ("options".to_owned(), Ipld::Map([("query".to_owned(), Ipld::String("LONG answer".into()))].into())),
        ]
        .into(),
    ));
    let found = serde_json::to_value(user.call(search.clone()).await.unwrap().output.unwrap()).unwrap();
    assert_eq!(found["threads"][0]["snippet"], "Long answer here.");
    assert_eq!(found["summary"], "1 thread matches \"long answer\".");
    server.stop().await;
}

/// A tool call the server never saw finish (it died while the tool ran) gets an error result
/// before the next turn's model request, so the log and the provider conversation are whole.
#[tokio::test]
async fn an_interrupted_tool_call_is_answered_before_the_next_turn() {
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider, false).await;
    provider.push(Script::text("Hello."));
    user.call(say(&session_id, "hi")).await.unwrap();
    let dir = server.stop().await;

    // What a crash mid-tool leaves: the durable call, no result. (The repair runs when the next
    // run executes, so its result lands after the message that started that run.)
    let call = Ipld::Map(
        [
            ("type", Ipld::String("tool_call".into())),
            ("id", Ipld::String("call_lost".into())),
            ("name", Ipld::String("write".into())),
            ("input", Ipld::Map([("address".to_owned(), Ipld::String("~/memory/a.md".into()))].into())),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect(),
    );
    let (session, call) = (session_id.to_string(), seed_agents_protocol::wire::ipld_to_vec(&call).unwrap());
    write_db_at(dir.path(), move |conn| {
        conn.execute(
            "INSERT INTO session_events (id, session_id, seq, event_cbor, created_at)
             SELECT 'lost', ?1, MAX(seq) + 1, ?2, 1 FROM session_events WHERE session_id = ?1",
            (session, call),
        )
    })
    .await;

    let server = start(&provider, false, dir).await;
    let user = User::new(&server.url, (*user.signer).clone(), None);
    provider.push(Script::text("Checking again."));
    user.call(say(&session_id, "did it save?")).await.unwrap();
    let log = read_log(&user, &session_id).await;
    assert_eq!(
        transcript(&log),
        [
            "user: hi",
            "assistant: Hello.",
            "call write",
            "user: did it save?",
            "error write: {INTERRUPTED}",
            "assistant: Checking again."
        ]
        .map(|line| line.replace("{INTERRUPTED}", seed_agents_server::testing::runtime::INTERRUPTED)),
    );
    seqs_are_gap_free(&log);
    // The model saw the call answered with that error, in place.
    let messages = &provider.requests()[1].body["messages"];
    let roles: Vec<&str> = messages.as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "user"], "{messages}");
    assert_eq!(messages[2]["tool_calls"][0]["id"], "call_lost");
    assert_eq!(messages[3]["tool_call_id"], "call_lost");
    assert!(messages[3]["content"].as_str().unwrap().contains("Interrupted by a service restart"));

    // A second turn finds nothing to repair: no second result.
    provider.push(Script::text("Yes."));
    user.call(say(&session_id, "ok")).await.unwrap();
    let results =
        transcript(&read_log(&user, &session_id).await).iter().filter(|line| line.starts_with("error write")).count();
    assert_eq!(results, 1);
    server.stop().await;
}

/// `read attachment:` of an image: a model that takes images sees it with the result (after the
/// tool messages, as chat completions wants), the log keeps `shownAsImage` and no bytes; a
/// text-only model gets the description instead.
#[tokio::test]
async fn an_image_attachment_is_shown_to_a_model_that_takes_images() {
    use seed_agents_protocol::Bytes;
    use seed_agents_protocol::generated::{UpdateAgent, UploadSessionAttachment};
    let provider = Provider::start().await;
    let (server, user, agent_id, session_id) = setup(&provider, false).await;
    let png: Vec<u8> = [&b"\x89PNG\r\n\x1a\n"[..], &[7u8; 64][..]].concat();
    let upload = UploadSessionAttachment {
        session_id: session_id.clone(),
        name: "chart.png".into(),
        mime_type: Some("image/png".into()),
        content: Bytes(png.clone()),
    };
    let attachment = user.call(upload).await.unwrap().attachment;
    let address = format!(r#"{{"address":"attachment:{}"}}"#, attachment.id);
    provider.push(Script::tool_call("call_1", "read", &address));
    provider.push(Script::text("A bar chart."));
    user.call(say(&session_id, "what is in the chart?")).await.unwrap();

    let requests = provider.requests();
    let messages = requests[1].body["messages"].as_array().unwrap();
    let tool = messages.iter().find(|m| m["role"] == "tool").unwrap();
    let shown: serde_json::Value = serde_json::from_str(tool["content"].as_str().unwrap()).unwrap();
    assert_eq!(shown["shownAsImage"], true, "{shown}");
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"][0]["text"], "Attached image(s) from tool result:");
    use base64::Engine as _;
    let url = format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(&png));
    assert_eq!(last["content"][1]["image_url"]["url"], url.as_str());
    // The log keeps what was shown, not the bytes.
    let log = read_log(&user, &session_id).await;
    let SessionEventPayload::ToolResultEvent(result) = &log[2].event else { panic!("{log:?}") };
    let stored = serde_json::to_value(result.output.as_ref().unwrap()).unwrap();
    assert_eq!(stored["shownAsImage"], true);
    assert!(stored.get("content").is_none(), "{stored}");
    // A later turn replays the result without the image.
    provider.push(Script::text("Still a bar chart."));
    user.call(say(&session_id, "and now?")).await.unwrap();
    let replayed = &provider.requests()[2].body["messages"];
    assert!(!replayed.to_string().contains("image_url"), "{replayed}");

    // A text-only model is told about the image instead.
    let mut definition = definition("Scout");
    definition.model = "llama3".into();
    user.call(UpdateAgent { agent_id: agent_id.clone(), definition }).await.unwrap();
    provider.push(Script::tool_call("call_2", "read", &address));
    provider.push(Script::text("I cannot see it."));
    user.call(say(&session_id, "look again")).await.unwrap();
    let requests = provider.requests();
    let messages = requests.last().unwrap().body["messages"].as_array().unwrap().clone();
    let tool = messages.iter().rev().find(|m| m["role"] == "tool").unwrap();
    let described: serde_json::Value = serde_json::from_str(tool["content"].as_str().unwrap()).unwrap();
    assert_eq!(described["shownAsImage"], false, "{described}");
    assert!(!serde_json::Value::Array(messages).to_string().contains("image_url"));
    server.stop().await;
}
