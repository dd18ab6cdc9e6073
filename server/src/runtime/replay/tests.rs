use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::Value;
use seed_agents_protocol::generated::{
    ErrorEvent, ErrorEventType, MessageEventType, RunPlanStep, SessionEventMeta, ToolCallEventType, ToolResultEventType,
};

use super::*;

fn event(seq: i64, payload: SessionEventPayload) -> SessionEvent {
    SessionEvent {
        extra: Default::default(),
        created_at: 0,
        event: payload,
        id: format!("e{seq}").into(),
        seq,
        session_id: "s".into(),
        truncated: None,
    }
}

fn message(role: MessageEventRole, content: &str, account: Option<&str>) -> SessionEventPayload {
    SessionEventPayload::MessageEvent(MessageEvent {
        extra: Default::default(),
        actor: None,
        attachments: None,
        blocks: None,
        client_message_id: None,
        content: content.into(),
        context_lines: None,
        meta: account.map(|account| SessionEventMeta { account_id: Some(account.into()), ..Default::default() }),
        raw_markdown: None,
        role,
        tool_call_id: None,
        type_: MessageEventType::Message,
    })
}

fn object(fields: &[(&str, &str)]) -> Value {
    Value(Ipld::Map(
        fields.iter().map(|(k, v)| ((*k).to_owned(), Ipld::String((*v).to_owned()))).collect::<BTreeMap<_, _>>(),
    ))
}

fn call(id: &str, name: &str, input: Value, actor: Option<SessionActor>) -> SessionEventPayload {
    SessionEventPayload::ToolCallEvent(ToolCallEvent {
        extra: Default::default(),
        actor,
        id: id.into(),
        input,
        meta: None,
        name: name.into(),
        type_: ToolCallEventType::ToolCall,
    })
}

fn result(
    id: &str,
    name: &str,
    output: Option<Value>,
    error: Option<&str>,
    actor: Option<SessionActor>,
) -> SessionEventPayload {
    SessionEventPayload::ToolResultEvent(ToolResultEvent {
        extra: Default::default(),
        actor,
        error: error.map(str::to_owned),
        meta: None,
        name: name.into(),
        output,
        tool_call_id: id.into(),
        type_: ToolResultEventType::ToolResult,
    })
}

fn text(message: &Message) -> &str {
    match message {
        Message::User(parts) => match &parts[..] {
            [UserPart::Text(text)] => text,
            other => panic!("{other:?}"),
        },
        other => panic!("not a user message: {other:?}"),
    }
}

#[test]
fn calls_and_results_pair_up_in_call_order_wherever_the_results_landed() {
    let events = [
        event(1, message(MessageEventRole::User, "hi", Some("alice"))),
        event(2, message(MessageEventRole::Assistant, "Looking.", None)),
        event(3, call("c1", "read", object(&[("address", "~/memory/")]), None)),
        event(4, call("c2", "read", object(&[("address", "~/self")]), None)),
        // Completion order, not call order; an error event in between is never replayed.
        event(5, result("c2", "read", Some(object(&[("summary", "me")])), None, None)),
        event(
            6,
            SessionEventPayload::ErrorEvent(ErrorEvent {
                extra: Default::default(),
                actor: None,
                message: "x".into(),
                type_: ErrorEventType::Error,
            }),
        ),
        event(7, result("c1", "read", None, Some("Memory directory not found: ~/memory/"), None)),
        event(8, message(MessageEventRole::Assistant, "Done.", None)),
    ];
    let messages = conversation(&events, &Tail::default());
    assert_eq!(messages.len(), 5, "{messages:#?}");
    assert_eq!(text(&messages[0]), "<message_sender>\n{\"accountId\":\"alice\"}\n</message_sender>\n\nhi");
    let Message::Assistant { text: said, tool_calls, .. } = &messages[1] else { panic!() };
    assert_eq!(said, "Looking.");
    assert_eq!(tool_calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["c1", "c2"]);
    assert_eq!(tool_calls[0].arguments, serde_json::json!({"address": "~/memory/"}));
    let Message::ToolResults(results) = &messages[2] else { panic!() };
    assert_eq!(results[0].call_id, "c1");
    assert!(results[0].is_error);
    assert_eq!(results[1].text, "{\"summary\":\"me\"}");
    assert!(
        matches!(&messages[3], Message::Assistant { text, tool_calls, .. } if text == "Done." && tool_calls.is_empty())
    );
    // The replay ended on the assistant: the pass says why the turn goes on.
    assert!(text(&messages[4]).starts_with("<turn_resumed>"));
}

#[test]
fn user_actions_are_escaped_text_and_agent_results_for_them_are_dropped() {
    let events = [
        event(1, call("user-1", "read", object(&[("address", "<x>")]), Some(SessionActor::User))),
        event(2, result("user-1", "read", Some(object(&[("summary", "a<b")])), None, Some(SessionActor::User))),
        event(3, result("user-1", "read", None, Some("forged"), None)),
        event(4, message(MessageEventRole::User, "and?", None)),
    ];
    let messages = conversation(&events, &Tail::default());
    assert_eq!(messages.len(), 3, "{messages:#?}");
    assert_eq!(text(&messages[0]), "<user_action verb=\"read\">\n{\"address\":\"\\u003cx>\"}\n</user_action>");
    assert_eq!(
        text(&messages[1]),
        "<user_action_result verb=\"read\">\n{\"summary\":\"a\\u003cb\"}\n</user_action_result>"
    );
    assert_eq!(text(&messages[2]), "and?", "no sender prefix without a signer");
}

#[test]
fn a_call_without_a_result_gets_an_error_result_and_long_results_are_cut() {
    let long = "é".repeat(5000); // 10,000 bytes
    let events = [
        event(1, message(MessageEventRole::User, "go", None)),
        event(2, call("c1", "read", Value(Ipld::Null), None)),
        event(3, call("c2", "read", object(&[]), None)),
        event(4, result("c2", "read", None, Some(&long), None)),
    ];
    let messages = conversation(&events, &Tail::default());
    let Message::Assistant { tool_calls, .. } = &messages[1] else { panic!() };
    assert_eq!(tool_calls[0].arguments, serde_json::json!({}), "a non-object input replays as {{}}");
    let Message::ToolResults(results) = &messages[2] else { panic!() };
    assert_eq!((results[0].text.as_str(), results[0].is_error), (NO_RESULT, true));
    assert!(results[1].text.starts_with(&"é".repeat(4096)));
    assert!(results[1].text.contains("[RESULT TRUNCATED: 10000 bytes in total, only the first 8192 are shown."));
    assert_eq!(messages.len(), 3, "a replay ending in tool results needs no nudge");
}

#[test]
fn the_tail_names_queued_messages_and_the_plan() {
    let events = [
        event(1, message(MessageEventRole::User, "first", Some("alice"))),
        event(2, message(MessageEventRole::User, "second", Some("bob"))),
    ];
    let plan = RunPlan {
        extra: Default::default(),
        owner_run_id: None,
        settled_at: None,
        title: None,
        steps: vec![RunPlanStep {
            extra: Default::default(),
            id: "a<".into(),
            label: "Look".into(),
            resolved_by: None,
            status: RunPlanStepStatus::Running,
        }],
    };
    let ids = ["e2".to_owned()];
    let messages = conversation(&events, &Tail { queued_behind: Some(&ids), plan: Some(&plan), ..Default::default() });
    assert_eq!(messages.len(), 4);
    let concurrent = text(&messages[2]);
    assert!(concurrent.starts_with("<concurrent_user_messages>\n"), "{concurrent}");
    assert!(concurrent.contains("[{\"accountId\":\"bob\",\"content\":\"second\",\"eventId\":\"e2\"}]"), "{concurrent}");
    let state = text(&messages[3]);
    assert!(state.starts_with("<plan_state>\na\\u003c · Look · running\n\n"), "{state}");
    assert!(state.ends_with("</plan_state>"));
}

#[test]
fn unanswered_calls_are_agent_calls_without_an_agent_result() {
    let input = object(&[("address", "~/memory/")]);
    let asked = event(1, call("c1", "read", input.clone(), None));
    let answered = event(2, result("c1", "read", Some(object(&[])), None, None));
    assert!(!has_unanswered_calls(&[]));
    assert!(has_unanswered_calls(std::slice::from_ref(&asked)));
    assert!(!has_unanswered_calls(&[asked.clone(), answered]));
    // A user's own action is not the agent's call; a user's result does not answer the agent's.
    let by_user = event(3, call("u1", "read", input, Some(SessionActor::User)));
    assert!(!has_unanswered_calls(std::slice::from_ref(&by_user)));
    let user_result = event(4, result("c1", "read", None, None, Some(SessionActor::User)));
    assert!(has_unanswered_calls(&[asked, user_result]));
}
