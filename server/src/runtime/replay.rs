//! The durable log of a session turned into the conversation a provider reads (docs/runtime.md
//! §1.6), and the ephemeral blocks appended after it (§1.7), which are never stored.
//!
//! The log is the only memory of a conversation: every pass rebuilds its messages from it, so a
//! retried, recovered or queued turn sees exactly what happened. The rules:
//!
//! - `error` events and kinds this build does not know are not replayed;
//! - a user's own verb calls and results (InvokeSessionTool) become `<user_action>` /
//!   `<user_action_result>` user messages, escaped and cut to [`MODEL_RESULT_BYTES`]; an agent
//!   result that names a user call is dropped (it cannot be a real answer to it);
//! - consecutive assistant text and agent tool calls form one assistant message, followed by each
//!   call's result in call order, wherever in the log the result landed; a call with no result
//!   gets an error result, so the request stays legal;
//! - signed user messages carry a `<message_sender>` prefix with the account that sent them.

use std::collections::{HashMap, HashSet};

use seed_agents_protocol::Value;
use seed_agents_protocol::generated::{
    MessageEvent, MessageEventRole, RunPlan, RunPlanStepStatus, SessionActor, SessionEvent, SessionEventPayload,
    ToolCallEvent, ToolResultEvent,
};
use serde_json::Value as Json;

use crate::model::{Message, ToolCall, ToolResult, UserPart};

/// The most of one tool result (or user action) the model sees, in UTF-8 bytes. The log keeps
/// the whole result.
pub(crate) const MODEL_RESULT_BYTES: usize = 8 * 1024;

/// The result text for a call whose result never reached the log.
const NO_RESULT: &str = "No result was recorded for this call.";

/// What the pass appends after the log.
#[derive(Debug, Default)]
pub(crate) struct Tail<'a> {
    /// The user messages this run answers, when it was queued behind another turn: their ids.
    pub queued_behind: Option<&'a [String]>,
    /// The session's live plan.
    pub plan: Option<&'a RunPlan>,
    /// Calls a child still works on: replayed with a "still running" result.
    pub pending: Option<&'a HashSet<String>>,
    /// The run resumed after its children answered: a log ending on an assistant message gets
    /// the `<background_work_update>` nudge.
    pub resumed: bool,
}

/// The result a call a child still works on replays with (never stored).
pub(crate) const STILL_RUNNING: &str = "{\"status\":\"running\",\"note\":\"Still running in the background. Its real result \
                                 will arrive in a later turn as this tool call's result; do not wait for it — respond \
                                 to the user now.\"}";

/// What a resumed parent reads when its log ends on an assistant message.
pub const BACKGROUND_WORK_UPDATE: &str = "<background_work_update>\nThe children you were waiting on have finished; \
     their results are attached to their tool calls above. Continue now: act on those results and reply to the user, \
     including anything you promised to deliver once they completed.\n</background_work_update>";

/// The provider conversation for `events` (in seq order) and `tail`.
pub(crate) fn conversation(events: &[SessionEvent], tail: &Tail<'_>) -> Vec<Message> {
    let mut replay = Replay::index(events);
    replay.pending = tail.pending;
    for event in events {
        replay.emit(&event.event);
    }
    replay.flush();
    let mut messages = replay.messages;
    if let Some(ids) = tail.queued_behind.filter(|ids| !ids.is_empty()) {
        let wanted: HashSet<&str> = ids.iter().map(String::as_str).collect();
        let entries: Vec<Json> = events
            .iter()
            .filter(|event| wanted.contains(event.id.as_str()))
            .filter_map(|event| match &event.event {
                SessionEventPayload::MessageEvent(message) if message.role == MessageEventRole::User => {
                    Some(serde_json::json!({
                        "eventId": event.id,
                        "accountId": message.meta.as_ref().and_then(|meta| meta.account_id.clone()),
                        "content": message.content,
                    }))
                }
                _ => None,
            })
            .collect();
        if !entries.is_empty() {
            let list = serde_json::to_string(&entries).unwrap_or_default();
            messages.push(user_text(format!(
                "<concurrent_user_messages>\nThese messages arrived while the previous response was being written; \
                 any assistant message after them in the conversation belongs to that earlier turn. Answer them \
                 now:\n{list}\n</concurrent_user_messages>"
            )));
        }
    } else if tail.resumed && matches!(messages.last(), Some(Message::Assistant { .. })) {
        messages.push(user_text(BACKGROUND_WORK_UPDATE.to_owned()));
    } else if matches!(messages.last(), Some(Message::Assistant { .. })) {
        // A provider cannot continue from its own last word: say why the turn goes on.
        messages.push(user_text(
            "<turn_resumed>\nThe previous response stopped before it was finished (it was interrupted or is being \
             retried). Continue from where it stopped and answer the latest request.\n</turn_resumed>"
                .to_owned(),
        ));
    }
    if let Some(plan) = tail.plan {
        messages.push(user_text(plan_state(plan)));
    }
    messages
}

/// The `<plan_state>` block: one line per step, then what to do with it.
pub(crate) fn plan_state(plan: &RunPlan) -> String {
    let mut text = String::from("<plan_state>\n");
    for step in &plan.steps {
        text.push_str(&format!("{} · {} · {}\n", escape(&step.id), escape(&step.label), step.status));
    }
    let open =
        plan.steps.iter().any(|step| matches!(step.status, RunPlanStepStatus::Pending | RunPlanStepStatus::Running));
    text.push('\n');
    text.push_str(if open {
        "This is your plan for the current task. Keep the statuses true with the plan tool as you go; before you \
         finish, mark every step done, failed or skipped."
    } else {
        "Every step of this plan is settled. Start a new plan for a new task."
    });
    text.push_str("\n</plan_state>");
    text
}

/// `text` cut to [`MODEL_RESULT_BYTES`] on a character boundary, with a notice saying how much
/// was left out and what to do about it.
pub(crate) fn bound(text: &str) -> String {
    if text.len() <= MODEL_RESULT_BYTES {
        return text.to_owned();
    }
    let mut kept = MODEL_RESULT_BYTES;
    while !text.is_char_boundary(kept) {
        kept -= 1;
    }
    format!(
        "{}\n\n[RESULT TRUNCATED: {} bytes in total, only the first {kept} are shown. Read a narrower part (a \
         smaller file, a folder listing, a section), or save the whole result to memory and read it piece by \
         piece.]",
        &text[..kept],
        text.len()
    )
}

/// Every `<` as the six characters `\u003c`, so text inside a block cannot close or open one.
pub(crate) fn escape(text: &str) -> String {
    text.replace('<', "\\u003c")
}

/// A stored value as JSON text (the model's view of a tool output).
pub(crate) fn json_text(value: Option<&Value>) -> String {
    match value {
        None => "{}".to_owned(),
        Some(value) => serde_json::to_string(value).unwrap_or_else(|_| "{}".to_owned()),
    }
}

/// A stored value as JSON (a tool call's arguments: an object, else `{}`).
pub(crate) fn json_arguments(value: &Value) -> Json {
    match serde_json::to_value(value) {
        Ok(Json::Object(fields)) => Json::Object(fields),
        _ => Json::Object(Default::default()),
    }
}

/// The model-facing text of a stored result: its error, or its output as JSON, cut.
fn result_text(result: &ToolResultEvent) -> (String, bool) {
    match &result.error {
        Some(error) => (bound(error), true),
        None => (bound(&json_text(result.output.as_ref())), false),
    }
}

fn user_text(text: String) -> Message {
    Message::User(vec![UserPart::Text(text)])
}

/// Whether an agent call in `log` has no agent result. Only then do the calls parked runs and
/// live children wait on matter (to the replay, and to repairing interrupted calls), so the
/// queries for them are skipped in the usual case where every call was answered.
pub(crate) fn has_unanswered_calls(log: &[SessionEvent]) -> bool {
    let answered: HashSet<&str> = log
        .iter()
        .filter_map(|event| match &event.event {
            SessionEventPayload::ToolResultEvent(result) if !is_user(result.actor) => {
                Some(result.tool_call_id.as_str())
            }
            _ => None,
        })
        .collect();
    log.iter().any(|event| {
        matches!(&event.event, SessionEventPayload::ToolCallEvent(call)
            if !is_user(call.actor) && !answered.contains(call.id.as_str()))
    })
}

fn is_user(actor: Option<SessionActor>) -> bool {
    actor == Some(SessionActor::User)
}

struct Replay<'a> {
    /// Agent results by call id.
    results: HashMap<&'a str, &'a ToolResultEvent>,
    /// Ids of user verb calls.
    user_calls: HashSet<&'a str>,
    /// Agent call ids already emitted with their results.
    emitted: HashSet<String>,
    text: Vec<String>,
    calls: Vec<ToolCall>,
    messages: Vec<Message>,
    /// Calls a child still works on.
    pending: Option<&'a HashSet<String>>,
}

impl<'a> Replay<'a> {
    fn index(events: &'a [SessionEvent]) -> Self {
        let mut results = HashMap::new();
        let mut user_calls = HashSet::new();
        for event in events {
            match &event.event {
                SessionEventPayload::ToolResultEvent(result) if !is_user(result.actor) => {
                    results.insert(result.tool_call_id.as_str(), result);
                }
                SessionEventPayload::ToolCallEvent(call) if is_user(call.actor) => {
                    user_calls.insert(call.id.as_str());
                }
                _ => {}
            }
        }
        Self {
            results,
            user_calls,
            emitted: HashSet::new(),
            text: Vec::new(),
            calls: Vec::new(),
            messages: Vec::new(),
            pending: None,
        }
    }

    fn emit(&mut self, event: &'a SessionEventPayload) {
        match event {
            SessionEventPayload::MessageEvent(message) => match message.role {
                MessageEventRole::Assistant => {
                    if !message.content.trim().is_empty() {
                        self.text.push(message.content.clone());
                    }
                }
                MessageEventRole::User => {
                    self.flush();
                    self.messages.push(user_text(user_content(message)));
                }
                MessageEventRole::Tool => {}
            },
            SessionEventPayload::ToolCallEvent(call) if is_user(call.actor) => {
                self.flush();
                let input = bound(&json_text(Some(&call.input)));
                self.messages.push(user_text(format!(
                    "<user_action verb=\"{}\">\n{}\n</user_action>",
                    escape(&call.name),
                    escape(&input)
                )));
            }
            SessionEventPayload::ToolCallEvent(call) => self.calls.push(agent_call(call)),
            SessionEventPayload::ToolResultEvent(result) if is_user(result.actor) => {
                self.flush();
                let (text, _) = result_text(result);
                self.messages.push(user_text(format!(
                    "<user_action_result verb=\"{}\">\n{}\n</user_action_result>",
                    escape(&result.name),
                    escape(&text)
                )));
            }
            SessionEventPayload::ToolResultEvent(result) => {
                if self.user_calls.contains(result.tool_call_id.as_str()) {
                    return; // an agent result for a user's call is not an answer to it
                }
                self.flush();
                if !self.emitted.contains(result.tool_call_id.as_str()) {
                    // A result whose call is not in the log: give the model both halves.
                    let call = ToolCall {
                        id: result.tool_call_id.to_string(),
                        name: result.name.clone(),
                        arguments: Json::Object(Default::default()),
                    };
                    let (text, is_error) = result_text(result);
                    self.messages.push(Message::Assistant {
                        text: String::new(),
                        tool_calls: vec![call],
                        thinking: Vec::new(),
                    });
                    self.messages.push(Message::ToolResults(vec![ToolResult {
                        call_id: result.tool_call_id.to_string(),
                        name: result.name.clone(),
                        text,
                        images: Vec::new(),
                        is_error,
                    }]));
                    self.emitted.insert(result.tool_call_id.to_string());
                }
            }
            SessionEventPayload::ErrorEvent(_)
            | SessionEventPayload::ToolSpawnEvent(_)
            | SessionEventPayload::Other(_) => {}
        }
    }

    /// Emits the pending assistant message and the results of its calls.
    fn flush(&mut self) {
        if self.text.is_empty() && self.calls.is_empty() {
            return;
        }
        let text = std::mem::take(&mut self.text).join("\n\n");
        let calls = std::mem::take(&mut self.calls);
        let results: Vec<ToolResult> = calls
            .iter()
            .map(|call| {
                let (text, is_error) = match self.results.get(call.id.as_str()) {
                    Some(result) => result_text(result),
                    None if self.pending.is_some_and(|pending| pending.contains(&call.id)) => {
                        (STILL_RUNNING.to_owned(), false)
                    }
                    None => (NO_RESULT.to_owned(), true),
                };
                ToolResult { call_id: call.id.clone(), name: call.name.clone(), text, images: Vec::new(), is_error }
            })
            .collect();
        self.emitted.extend(calls.iter().map(|call| call.id.clone()));
        self.messages.push(Message::Assistant { text, tool_calls: calls, thinking: Vec::new() });
        if !results.is_empty() {
            self.messages.push(Message::ToolResults(results));
        }
    }
}

fn agent_call(call: &ToolCallEvent) -> ToolCall {
    let name = if call.name.is_empty() { "read".to_owned() } else { call.name.clone() };
    ToolCall { id: call.id.to_string(), name, arguments: json_arguments(&call.input) }
}

/// A user message as the model reads it: who sent it, what it says, the context lines the
/// client attached, and the attachments it carries.
fn user_content(message: &MessageEvent) -> String {
    let mut text = message.content.clone();
    if let Some(lines) = message.context_lines.as_ref().filter(|lines| !lines.is_empty()) {
        text.push_str(&format!("\n\n<window_context>\n{}\n</window_context>", lines.join("\n")));
    }
    if let Some(attachments) = message.attachments.as_ref().filter(|list| !list.is_empty()) {
        text.push_str(
            "\n\n<attachments>\nFiles attached to this message. Read one with read attachment:<id>; save it to \
             memory with write ~/memory/<path> and options.fromAttachment.\n",
        );
        for attachment in attachments {
            let mime = attachment.mime_type.as_deref().unwrap_or("unknown type");
            text.push_str(&format!(
                "- \"{}\" ({mime}, {} bytes) — attachment id {}\n",
                attachment.name, attachment.size, attachment.id
            ));
        }
        text.push_str("</attachments>");
    }
    if let Some(account) = message.meta.as_ref().and_then(|meta| meta.account_id.as_deref()) {
        let sender = serde_json::json!({ "accountId": account });
        text = format!("<message_sender>\n{sender}\n</message_sender>\n\n{text}");
    }
    text
}

#[cfg(test)]
mod tests;
