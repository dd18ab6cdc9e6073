//! `continue_session` end to end (docs/runtime.md §5.10): the agent moves a conversation to a new
//! session that answers its brief, the two sessions link both ways, `MessageSession` names the new
//! one, a delegated child is never offered the verb, and bad input is an error the model reads. A
//! real server, the SDK, and the scripted model provider on loopback.

use std::time::Duration;

use seed_agents_protocol::generated::{
    CreateAgent, GetSession, ListRuns, ListSessions, MessageEventRole, RunStatus, SessionContinuationReason,
    SessionEventPayload, SessionInfo, SetModelProvider,
};
use serde_json::{Value as Json, json};

use crate::support::provider::{Provider, Recorded, Script};
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

fn tool_names(request: &Recorded) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .map(|tools| tools.iter().filter_map(|tool| tool["function"]["name"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

fn last_message(request: &Recorded) -> String {
    request.body["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap_or_default().to_owned()
}

async fn session(user: &User, session_id: &str) -> SessionInfo {
    user.call(GetSession { session_id: session_id.into(), after_seq: None, before_seq: None, limit: None })
        .await
        .unwrap()
        .session
}

async fn wait_for_run(user: &User, session_id: &str, status: RunStatus) {
    wait::until_ok(&format!("a run of {session_id} becomes {status}"), || async move {
        let list = ListRuns {
            agent_id: None,
            limit: None,
            root_run_id: None,
            session_id: Some(session_id.into()),
            status: None,
        };
        let runs = user.call(list).await.unwrap().runs;
        if runs.iter().any(|run| run.status == status) { Ok(()) } else { Err(runs) }
    })
    .await;
}

#[tokio::test]
async fn the_agent_moves_the_conversation_to_a_linked_session_that_answers_its_brief() {
    let provider = Provider::start().await;
    let (_server, user, agent_id, old) = setup(&provider).await;
    let brief = "Goal: plan the garden.\nDone: soil tested.\nLeft: choose the plants.";
    provider.push(
        Script::tool_call(
            "c1",
            "continue_session",
            &json!({"reason": "context_pressure", "brief": brief, "title": "Garden, part two"}).to_string(),
        )
        .with_text("This has grown long; I will carry on in a fresh session."),
    );
    provider.push(Script::text("Picking up: the plants."));

    let answer = user.call(say(&old, "let us keep planning")).await.unwrap();
    let new = answer.continued_to_session_id.clone().expect("MessageSession names the new session");
    assert_ne!(new, old);
    assert!(!answer.assistant_event_id.is_empty(), "the moving step's text is the turn's answer");
    wait_for_run(&user, &new, RunStatus::Succeeded).await;

    // The offer: after `status`, to a top-level run; the moving pass made no further request.
    let requests = provider.requests();
    assert_eq!(requests.len(), 2, "one request per session");
    let names = tool_names(&requests[0]);
    assert_eq!(&names[names.len() - 3..], ["plan", "status", "continue_session"], "{names:?}");
    assert_eq!(last_message(&requests[1]), brief, "the new session starts from the brief");
    assert!(tool_names(&requests[1]).contains(&"continue_session".to_owned()), "a continuation may continue");

    // The old session: the call, its result naming the new session, and nothing after.
    let old_log = read_log(&user, &old).await;
    assert_eq!(
        transcript(&old_log),
        [
            "user: let us keep planning",
            "assistant: This has grown long; I will carry on in a fresh session.",
            "call continue_session",
            "result continue_session",
        ]
    );
    let call_event = &old_log[2];
    let SessionEventPayload::ToolResultEvent(result) = &old_log[3].event else { panic!("a tool result") };
    let output = serde_json::to_value(result.output.as_ref().unwrap()).unwrap();
    assert_eq!(output["status"], "continued");
    assert_eq!(output["sessionId"], Json::String(new.to_string()));

    // The new session: the brief (pointing back at the call) and the answer.
    let new_log = read_log(&user, &new).await;
    assert_eq!(transcript(&new_log), ["user: Goal: plan the garden.", "assistant: Picking up: the plants."]);
    let SessionEventPayload::MessageEvent(first) = &new_log[0].event else { panic!("a message") };
    assert_eq!((first.role, first.content.as_str()), (MessageEventRole::User, brief));
    let from = first.meta.as_ref().and_then(|meta| meta.continued_from.as_ref()).expect("meta.continuedFrom");
    assert_eq!(
        (from.session_id.as_str(), from.seq, from.event_id.as_str()),
        (old.as_str(), call_event.seq, call_event.id.as_str())
    );

    // Both sessions link, each with the other's title; the new one is top-level.
    let (old_info, new_info) = (session(&user, &old).await, session(&user, &new).await);
    let to = old_info.continued_to.expect("continuedTo");
    let back = new_info.continued_from.clone().expect("continuedFrom");
    assert_eq!(
        (to.session_id.as_str(), to.reason, to.title.as_deref()),
        (new.as_str(), SessionContinuationReason::ContextPressure, Some("Garden, part two"))
    );
    assert_eq!((back.session_id.as_str(), back.continuation_id.as_str()), (old.as_str(), to.continuation_id.as_str()));
    assert_eq!((old_info.continued_from, new_info.continued_to), (None, None));
    assert_eq!(new_info.parent_session_id, None);
    assert_eq!(new_info.title.as_deref(), Some("Garden, part two"));

    // Lists carry the links too.
    let list = ListSessions {
        agent_id: Some(agent_id),
        cursor: None,
        exclude_triggered: None,
        include_children: None,
        limit: None,
        parent_session_id: None,
    };
    let sessions = user.call(list).await.unwrap().sessions;
    let listed = sessions.iter().find(|session| session.id == new).expect("the new session is listed");
    assert_eq!(listed.continued_from, new_info.continued_from);
}

#[tokio::test]
async fn a_delegated_child_is_not_offered_continue_session_and_calling_it_is_an_error() {
    let provider = Provider::start().await;
    let (_server, user, _agent, session_id) = setup(&provider).await;
    provider.push(Script::tool_call("d1", "delegate", &json!({"brief": "Count the otters."}).to_string()));
    // The child tries the verb anyway; it is not one of its tools.
    provider.push(Script::tool_call(
        "c1",
        "continue_session",
        &json!({"reason": "other", "brief": "Counting otters."}).to_string(),
    ));
    provider.push(Script::text("Seven otters."));
    provider.push(Script::text("There are seven otters."));

    user.call(say(&session_id, "count the otters")).await.unwrap();
    wait_for_run(&user, &session_id, RunStatus::Succeeded).await;
    let requests = provider.requests();
    assert_eq!(requests.len(), 4);
    assert!(tool_names(&requests[0]).contains(&"continue_session".to_owned()), "the parent has it");
    assert!(!tool_names(&requests[1]).contains(&"continue_session".to_owned()), "the child does not");
    let child_messages = requests[2].body["messages"].as_array().unwrap();
    let refused = child_messages.iter().rev().find(|message| message["role"] == "tool").unwrap();
    assert_eq!(refused["content"], "Tool continue_session not found");
    let info = session(&user, &session_id).await;
    assert_eq!(info.continued_to, None, "nothing moved");
}

#[tokio::test]
async fn bad_input_and_a_second_continuation_are_errors_the_model_reads() {
    let provider = Provider::start().await;
    let (_server, user, _agent, session_id) = setup(&provider).await;
    provider.push(Script::tool_call(
        "c1",
        "continue_session",
        &json!({"reason": "bored", "brief": "Next."}).to_string(),
    ));
    // Two calls in one batch: the first moves the conversation, the second is refused.
    provider.push(
        Script::tool_call("c2", "continue_session", &json!({"reason": "refocus", "brief": "One."}).to_string())
            .and_tool_call("c3", "continue_session", &json!({"reason": "refocus", "brief": "Two."}).to_string()),
    );
    provider.push(Script::text("Continuing."));

    let answer = user.call(say(&session_id, "go on")).await.unwrap();
    let new = answer.continued_to_session_id.expect("the second step moved it");
    wait_for_run(&user, &new, RunStatus::Succeeded).await;

    let log = read_log(&user, &session_id).await;
    let lines = transcript(&log);
    assert!(
        lines[2].starts_with("error continue_session: Validation failed for tool \"continue_session\""),
        "{lines:?}"
    );
    assert_eq!(lines.len(), 7, "{lines:?}");
    let results: Vec<&str> = lines[5..].iter().map(String::as_str).collect();
    let moved = results.iter().filter(|line| **line == "result continue_session").count();
    let refused: Vec<&&str> = results.iter().filter(|line| line.contains("already continued")).collect();
    assert_eq!((moved, refused.len()), (1, 1), "{results:?}");
    assert!(refused[0].contains(new.as_str()), "the refusal names the session: {refused:?}");
    assert_eq!(provider.request_count(), 3, "the batch ended the turn; the new session answered once");
}
