//! `MessageSession`: a person's message becomes durable, then a run answers it (docs/runtime.md
//! §1.1, §6.2, §6.4; docs/protocol.md §D.3).
//!
//! In one write transaction: the access check, the idempotency key (reserved *before* the turn,
//! so a duplicate sent while the first is still streaming posts nothing: the existing server
//! records the key only after the turn and double-posts), the user message events (one per text
//! part; context lines and attachments ride on the first), and the run. When another turn holds
//! the session the run stays queued behind it and the request answers `assistantEventId: ''` at
//! once; otherwise the request claims the run and waits for its outcome. A reservation is
//! completed with the turn's answer; after a failed turn it keeps `''`, so a resend of the same
//! message does not post it twice (RetrySession re-runs it).

use std::sync::Arc;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::AttachmentId;
use seed_agents_protocol::generated::{
    MessageEvent, MessageEventRole, MessageEventType, MessageSession, MessageSessionContentPart,
    MessageSessionResponse, SessionAttachmentInfo, SessionEventMeta, SessionEventPayload,
};
use serde::Serialize;

use crate::access::{self, Need};
use crate::agents;
use crate::app::App;
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};
use crate::idempotency::Key;
use crate::runs;
use crate::runs::engine::{InlineOutcome, Outcome};
use crate::runs::queue::{Changes, NewRun, Queue};
use crate::sessions::control::assistant_event_id;
use crate::sessions::events;
use crate::validate::{MAX_NAME_BYTES, bounded_string};

/// The most text one request may carry (all parts, joined by newlines), in UTF-8 bytes.
pub(crate) const MAX_MESSAGE_TEXT_BYTES: usize = 64 * 1024;
/// The most context lines one context part may carry.
pub(crate) const MAX_CONTEXT_LINES: usize = 64;
/// The longest context line, in UTF-8 bytes.
pub(crate) const MAX_CONTEXT_LINE_BYTES: usize = 2 * 1024;
/// The most attachments one request may reference.
pub(crate) const MAX_MESSAGE_ATTACHMENTS: usize = 16;

/// One user message of the request.
#[derive(Debug, Default)]
struct Part {
    /// What the model reads.
    content: String,
    /// What the person typed (trimmed).
    raw: String,
    blocks: Option<Vec<seed_agents_protocol::generated::AgentPromptBlock>>,
    client_message_id: Option<String>,
    context_lines: Option<Vec<String>>,
    attachment_ids: Vec<AttachmentId>,
}

/// The request's content as user messages, with upstream's checks and messages.
fn parts(content: &[MessageSessionContentPart]) -> ApiResult<Vec<Part>> {
    let required = || ApiError::invalid("Message content is required");
    if content.is_empty() {
        return Err(required());
    }
    let mut context_lines = Vec::new();
    let mut attachment_ids: Vec<AttachmentId> = Vec::new();
    let mut parts = Vec::new();
    for part in content {
        match part {
            MessageSessionContentPart::ContextContentPart(context) => {
                if context.lines.len() > MAX_CONTEXT_LINES {
                    return Err(ApiError::invalid("Too many context lines"));
                }
                if context.lines.iter().any(|line| line.len() > MAX_CONTEXT_LINE_BYTES) {
                    return Err(ApiError::invalid("Context line is too large"));
                }
                context_lines.extend(context.lines.iter().cloned());
            }
            MessageSessionContentPart::AttachmentContentPart(attachment) => {
                let id = &attachment.id;
                if id.len() != 64 || !id.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f')) {
                    return Err(ApiError::invalid("Invalid attachment id"));
                }
                if !attachment_ids.contains(id) {
                    attachment_ids.push(id.clone());
                }
                if attachment_ids.len() > MAX_MESSAGE_ATTACHMENTS {
                    return Err(ApiError::invalid(format!(
                        "A message can reference at most {MAX_MESSAGE_ATTACHMENTS} attachments"
                    )));
                }
            }
            MessageSessionContentPart::TextContentPart(text) => {
                let raw = text.text.trim().to_owned();
                let client_message_id = text
                    .client_message_id
                    .as_deref()
                    .map(|id| bounded_string(id, "Client message ID", MAX_NAME_BYTES))
                    .transpose()?;
                let blocks = text.blocks.clone().filter(|blocks| !blocks.is_empty());
                // Rich text reaches the model as markdown (embeds are not resolved yet: their
                // links stay links); the typed text is kept for display.
                let content = match &blocks {
                    Some(blocks) => {
                        let markdown = agents::prompt::blocks_to_markdown(blocks);
                        if markdown.trim().is_empty() { raw.clone() } else { markdown }
                    }
                    None => raw.clone(),
                };
                parts.push(Part { content, raw, blocks, client_message_id, ..Default::default() });
            }
        }
    }
    if parts.is_empty() || parts.iter().any(|part| part.raw.is_empty()) {
        return Err(required());
    }
    let total = parts.iter().map(|part| part.raw.len()).sum::<usize>() + parts.len() - 1;
    if total > MAX_MESSAGE_TEXT_BYTES {
        return Err(ApiError::invalid("Message content is too large"));
    }
    if !context_lines.is_empty() {
        parts[0].context_lines = Some(context_lines);
    }
    parts[0].attachment_ids = attachment_ids;
    Ok(parts)
}

/// A run's title: the first line of the first message, whitespace collapsed, at most 80
/// characters.
pub(crate) fn run_title(text: &str) -> String {
    let first = text.split('\n').next().unwrap_or_default();
    let collapsed = first.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.is_empty() {
        return "Agent-started session".to_owned();
    }
    if collapsed.chars().count() > 80 {
        let mut cut: String = collapsed.chars().take(79).collect();
        cut.push('…');
        return cut;
    }
    collapsed
}

/// The idempotency request bytes: `{sessionId, content}`.
#[derive(Serialize)]
struct Request<'a> {
    #[serde(rename = "sessionId")]
    session_id: &'a str,
    content: &'a [MessageSessionContentPart],
}

/// `MessageSession {sessionId, content, clientMessageId?}` (chatter or better).
pub(crate) async fn message_session(
    app: &Arc<App>,
    caller: &Caller,
    action: MessageSession,
) -> ApiResult<MessageSessionResponse> {
    let parts = parts(&action.content)?;
    app.user_verbs.refuse_message(&action.session_id)?;
    let key = Key::message(
        &caller.account_id,
        "MessageSession",
        action.client_message_id.as_deref(),
        &Request { session_id: &action.session_id, content: &action.content },
    )?;
    let session_id = action.session_id.clone();
    let answer = |assistant_event_id: String| MessageSessionResponse {
        extra: Default::default(),
        assistant_event_id: assistant_event_id.into(),
        continued_to_session_id: None,
        session_id: session_id.clone(),
    };
    let (account, signer, now) = (caller.account_id.clone(), caller.signer_id.clone(), app.clock.now_ms());
    let attachments_root = crate::attachments::root(&app.config);
    let reserved = answer(String::new());
    let write_key = key.clone();
    let write_session = action.session_id.clone();
    let written = app
        .db
        .write(move |conn| {
            let access = access::require_session(conn, &write_session, &account, Need::Chat)?;
            if let Some(key) = &write_key {
                if let Some(previous) = key.replay::<MessageSessionResponse>(conn)? {
                    return Ok(Written::Replayed(previous));
                }
                key.store(conn, &reserved, now)?;
            }
            let attachments: Vec<SessionAttachmentInfo> = if parts[0].attachment_ids.is_empty() {
                Vec::new()
            } else {
                let dir = crate::attachments::session_dir(&attachments_root, &write_session)?;
                parts[0]
                    .attachment_ids
                    .iter()
                    .map(|id| crate::attachments::store::info(&dir, id))
                    .collect::<ApiResult<_>>()?
            };
            let meta = SessionEventMeta {
                account_id: Some(account.clone().into()),
                signer_id: Some(signer),
                ..Default::default()
            };
            let mut appended = Vec::new();
            for (index, part) in parts.iter().enumerate() {
                let payload = SessionEventPayload::MessageEvent(MessageEvent {
                    extra: Default::default(),
                    actor: None,
                    attachments: (index == 0 && !attachments.is_empty()).then(|| attachments.clone()),
                    blocks: part.blocks.clone(),
                    client_message_id: part.client_message_id.clone(),
                    content: part.content.clone(),
                    context_lines: part.context_lines.clone(),
                    meta: Some(meta.clone()),
                    raw_markdown: Some(part.raw.clone()),
                    role: MessageEventRole::User,
                    tool_call_id: None,
                    type_: MessageEventType::Message,
                });
                appended.push(events::append(conn, &write_session, payload, now)?);
            }
            crate::sessions::store::touch(conn, &write_session, now)?;
            let queued_behind = runs::session_has_active_turn(conn, &write_session)?;
            let ids: Vec<Ipld> = appended.iter().map(|event| Ipld::String(event.id.to_string())).collect();
            let input = Ipld::Map(
                [
                    ("kind".to_owned(), Ipld::String("session-message".to_owned())),
                    ("userEventIds".to_owned(), Ipld::List(ids)),
                    ("queuedBehindAnotherTurn".to_owned(), Ipld::Bool(queued_behind)),
                ]
                .into_iter()
                .collect(),
            );
            let run = NewRun {
                account_id: access.owner_id.clone(),
                agent_id: access.agent_id.clone(),
                session_id: write_session.to_string(),
                origin: "user",
                title: Some(run_title(&parts[0].raw)),
                input,
                queue: Queue::Interactive,
                max_attempts: 1,
                parent_run_id: None,
            };
            let mut changes = Changes::default();
            let run_id = runs::queue::enqueue(conn, &run, now, &mut changes)?;
            Ok(Written::Appended {
                appended,
                run_id,
                queued_behind,
                owner_id: access.owner_id,
                agent_id: access.agent_id,
                changes,
            })
        })
        .await?;
    let (run_id, queued_behind) = match written {
        Written::Replayed(previous) => return Ok(previous),
        Written::Appended { appended, run_id, queued_behind, owner_id, agent_id, changes } => {
            events::announce(&app.bus, &owner_id, &agent_id, appended);
            app.runs.publish(changes);
            (run_id, queued_behind)
        }
    };
    if queued_behind {
        app.runs.notify();
        return Ok(answer(String::new()));
    }
    let response = match app.runs.run_inline(&run_id).await? {
        // Another turn took the session between our insert and the claim: the run waits its turn.
        InlineOutcome::NotClaimed | InlineOutcome::Requeued => answer(String::new()),
        InlineOutcome::Finished(Outcome::Succeeded(output) | Outcome::Canceled(output)) => {
            let mut response = answer(assistant_event_id(&output));
            response.continued_to_session_id = continued_to(&output);
            response
        }
        InlineOutcome::Finished(Outcome::Failed(failure)) => return Err(failure.to_api_error()),
        InlineOutcome::Finished(Outcome::Parked(_)) => answer(String::new()),
    };
    if let Some(key) = key {
        let stored = response.clone();
        app.db.write(move |conn| key.update(conn, &stored)).await?;
    }
    Ok(response)
}

/// The session a turn continued the conversation in (`continuedToSessionId` of its output).
fn continued_to(output: &Ipld) -> Option<seed_agents_protocol::generated::SessionId> {
    match output {
        Ipld::Map(fields) => match fields.get("continuedToSessionId") {
            Some(Ipld::String(id)) => Some(id.clone().into()),
            _ => None,
        },
        _ => None,
    }
}

enum Written {
    Replayed(MessageSessionResponse),
    Appended {
        appended: Vec<seed_agents_protocol::generated::SessionEvent>,
        run_id: String,
        queued_behind: bool,
        owner_id: String,
        agent_id: String,
        changes: Changes,
    },
}

#[cfg(test)]
mod tests {
    use seed_agents_protocol::generated::{AttachmentContentPart, ContextContentPart, TextContentPart};

    use super::*;

    fn text(text: &str) -> MessageSessionContentPart {
        MessageSessionContentPart::TextContentPart(TextContentPart {
            extra: Default::default(),
            blocks: None,
            client_message_id: None,
            text: text.into(),
        })
    }

    fn message(parts: Vec<MessageSessionContentPart>) -> Result<Vec<Part>, String> {
        super::parts(&parts).map_err(|error| error.message().to_owned())
    }

    #[test]
    fn content_is_checked_with_upstream_messages() {
        assert_eq!(message(vec![]).unwrap_err(), "Message content is required");
        assert_eq!(message(vec![text("  ")]).unwrap_err(), "Message content is required");
        let context = |lines: usize, len: usize| {
            MessageSessionContentPart::ContextContentPart(ContextContentPart {
                extra: Default::default(),
                lines: vec!["x".repeat(len); lines],
            })
        };
        assert_eq!(message(vec![context(1, 1)]).unwrap_err(), "Message content is required");
        assert_eq!(message(vec![context(65, 1), text("a")]).unwrap_err(), "Too many context lines");
        assert_eq!(message(vec![context(1, 2049), text("a")]).unwrap_err(), "Context line is too large");
        let attachment = |id: String| {
            MessageSessionContentPart::AttachmentContentPart(AttachmentContentPart {
                extra: Default::default(),
                id: id.into(),
            })
        };
        assert_eq!(message(vec![attachment("x".into()), text("a")]).unwrap_err(), "Invalid attachment id");
        let many: Vec<_> = (0..17).map(|n| attachment(format!("{n:064x}"))).chain([text("a")]).collect();
        assert_eq!(message(many).unwrap_err(), "A message can reference at most 16 attachments");
        let big = "x".repeat(MAX_MESSAGE_TEXT_BYTES);
        assert!(message(vec![text(&big)]).is_ok(), "exactly the limit");
        assert_eq!(message(vec![text(&big), text("y")]).unwrap_err(), "Message content is too large");
    }

    #[test]
    fn context_and_attachments_ride_on_the_first_message() {
        let id = "a".repeat(64);
        let parts = message(vec![
            text(" first "),
            MessageSessionContentPart::ContextContentPart(ContextContentPart {
                extra: Default::default(),
                lines: vec!["line".into()],
            }),
            MessageSessionContentPart::AttachmentContentPart(AttachmentContentPart {
                extra: Default::default(),
                id: id.clone().into(),
            }),
            MessageSessionContentPart::AttachmentContentPart(AttachmentContentPart {
                extra: Default::default(),
                id: id.clone().into(),
            }),
            text("second"),
        ])
        .unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!((parts[0].raw.as_str(), parts[0].content.as_str()), ("first", "first"));
        assert_eq!(parts[0].context_lines.as_deref(), Some(&["line".to_owned()][..]));
        assert_eq!(parts[0].attachment_ids, [id], "duplicates collapse");
        assert!(parts[1].context_lines.is_none() && parts[1].attachment_ids.is_empty());
    }

    #[test]
    fn run_titles_are_the_first_line_collapsed_and_cut() {
        assert_eq!(run_title("  Plan   the\ttrip \nand more"), "Plan the trip");
        assert_eq!(run_title(""), "Agent-started session");
        let long = "word ".repeat(30);
        let title = run_title(&long);
        assert_eq!(title.chars().count(), 80);
        assert!(title.ends_with('…'));
    }
}
