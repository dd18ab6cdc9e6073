//! A session's log read through the SDK, and shown as short lines (`user: hi`,
//! `assistant: hello`, `call read`, `result read`, `error: …`) that a test compares whole.

use seed_agents_protocol::generated::{GetSession, MessageEventRole, SessionActor, SessionEvent, SessionEventPayload};

use crate::User;

/// Every event of session `session_id`, oldest first.
pub async fn read_log(user: &User, session_id: &str) -> Vec<SessionEvent> {
    user.call(GetSession { session_id: session_id.into(), after_seq: None, before_seq: None, limit: None })
        .await
        .unwrap()
        .events
}

/// The log as short lines: a message's first line after its author (`user`, `assistant`,
/// `tool`, or `system` for what the runtime wrote), `call <tool>`, `result <tool>` or
/// `error <tool>: <error>`, `error: <message>`; anything else in its `Debug` form.
pub fn transcript(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .map(|event| match &event.event {
            SessionEventPayload::MessageEvent(message) => {
                let who = match (message.role, message.actor) {
                    (_, Some(SessionActor::System)) => "system",
                    (MessageEventRole::User, _) => "user",
                    (MessageEventRole::Assistant, _) => "assistant",
                    (MessageEventRole::Tool, _) => "tool",
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
