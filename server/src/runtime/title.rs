//! Automatic titles (docs/runtime.md §5.9): when a turn starts on a session whose title is still
//! provisional (`title_source = 'system'`), one tool-less model call names it from the start of
//! the conversation. It never overwrites a title the agent (the `status` verb) or a person
//! gave: the update applies only while the source is still `system`. At most
//! [`MAX_ATTEMPTS`](super::titles::MAX_ATTEMPTS) tries per session per process, one at a time.
//!
//! Unlike the existing server, the call uses the session's model override when there is one
//! (the model the person chose for this conversation), and `--session-title-generation false`
//! turns it off.

use std::sync::Arc;

use seed_agents_protocol::generated::{MessageEventRole, SessionEventPayload};

use super::Turn;
use super::plan::{MAX_DESCRIPTION_BYTES, MAX_TITLE_BYTES};
use crate::app::App;
use crate::bus::{ChangeReason, Event};
use crate::error::ApiResult;
use crate::model::{Endpoint, Message, ModelRequest, UserPart};
use crate::sessions::events;
use crate::sessions::store as session_store;

/// Events the digest is made from.
const DIGEST_EVENTS: i64 = 12;
const USER_CHARS: usize = 1200;
const ASSISTANT_CHARS: usize = 600;
const DIGEST_CHARS: usize = 4000;

const INSTRUCTION: &str = "\
Name the conversation below. Answer with two lines and nothing else:
Title: a specific title of at most eight words
Description: one or two sentences on what the conversation is about";

/// Starts naming the turn's session in the background when it still has a provisional title.
pub(crate) fn start(turn: &Turn) {
    if !turn.app.config.session_title_generation || !turn.app.titles.begin(&turn.session_id) {
        return;
    }
    let app = turn.app.clone();
    let (session_id, agent_id, owner_id) = (turn.session_id.clone(), turn.agent_id.clone(), turn.owner_id.clone());
    let endpoint = turn.endpoint.clone();
    let model_defaults = turn.model_defaults.clone();
    tokio::spawn(async move {
        if let Err(error) = name(&app, &session_id, &agent_id, &owner_id, &endpoint, model_defaults).await {
            tracing::debug!(session = %session_id, error = %error.message(), "session title not generated");
        }
        app.titles.end(&session_id);
    });
}

async fn name(
    app: &Arc<App>,
    session_id: &str,
    agent_id: &str,
    owner_id: &str,
    endpoint: &Endpoint,
    model_defaults: Option<serde_json::Map<String, serde_json::Value>>,
) -> ApiResult<()> {
    let id = session_id.to_owned();
    let digest = app
        .db
        .read(move |conn| {
            if !session_store::has_provisional_title(conn, &id)? {
                return Ok(None);
            }
            let first = events::after(conn, &id, 0, DIGEST_EVENTS + 1, None)?;
            Ok(Some(digest(&first)))
        })
        .await?;
    let Some(digest) = digest.filter(|digest| !digest.is_empty()) else { return Ok(()) };
    let request = ModelRequest {
        system: INSTRUCTION.to_owned(),
        messages: vec![Message::User(vec![UserPart::Text(digest)])],
        tools: Vec::new(),
        reasoning: None,
        max_tokens: 256,
        model_defaults,
    };
    let step = app
        .model
        .step(endpoint, &request, &mut |_| {})
        .await
        .map_err(|error| crate::error::ApiError::upstream(error.message))?;
    let Some((title, description)) = parse(&step.text) else { return Ok(()) };
    let (id, now) = (session_id.to_owned(), app.clock.now_ms());
    let changed =
        app.db.write(move |conn| session_store::set_generated_title(conn, &id, &title, &description, now)).await?;
    if changed {
        app.bus.publish(Event::SessionChanged { session_id: session_id.to_owned(), agent_id: agent_id.to_owned() });
        app.bus.account_change(owner_id, ChangeReason::SessionUpdated, Some(agent_id), Some(session_id));
    }
    Ok(())
}

/// `User: …` / `Assistant: …` paragraphs from the first messages.
fn digest(events: &[seed_agents_protocol::generated::SessionEvent]) -> String {
    let mut digest = String::new();
    for event in events {
        let SessionEventPayload::MessageEvent(message) = &event.event else { continue };
        let (label, limit) = match message.role {
            MessageEventRole::User => ("User", USER_CHARS),
            MessageEventRole::Assistant => ("Assistant", ASSISTANT_CHARS),
            MessageEventRole::Tool => continue,
        };
        let text: String = message.raw_markdown.as_deref().unwrap_or(&message.content).chars().take(limit).collect();
        if !digest.is_empty() {
            digest.push_str("\n\n");
        }
        digest.push_str(&format!("{label}: {text}"));
    }
    digest.chars().take(DIGEST_CHARS).collect()
}

/// The title and description in a titling answer: the first non-empty line (without a
/// `Title:` label, quotes or trailing periods), then the rest.
pub(crate) fn parse(answer: &str) -> Option<(String, String)> {
    let mut lines = answer.lines().map(str::trim).filter(|line| !line.is_empty());
    let title = strip_label(lines.next()?, "title:");
    let title = title.trim_matches(|c| matches!(c, '"' | '\'' | '“' | '”' | '*')).trim_end_matches('.').trim();
    if title.is_empty() || title.len() > MAX_TITLE_BYTES {
        return None;
    }
    let description: Vec<&str> = lines.map(|line| strip_label(line, "description:")).collect();
    let mut description = description.join(" ");
    while description.len() > MAX_DESCRIPTION_BYTES {
        description.pop();
    }
    Some((title.to_owned(), description))
}

fn strip_label<'a>(line: &'a str, label: &str) -> &'a str {
    match line.get(..label.len()) {
        Some(head) if head.eq_ignore_ascii_case(label) => line[label.len()..].trim(),
        _ => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_into_a_title_and_a_description() {
        assert_eq!(
            parse("Title: \"Trip to Lisbon.\"\nDescription: Planning a week away.\n"),
            Some(("Trip to Lisbon".to_owned(), "Planning a week away.".to_owned()))
        );
        assert_eq!(parse("\n  Budget review  \n"), Some(("Budget review".to_owned(), String::new())));
        assert_eq!(parse("   \n"), None);
        assert_eq!(parse(&"x".repeat(300)), None, "a title that does not fit is dropped");
    }

    #[test]
    fn a_session_gets_three_tries_one_at_a_time() {
        let titler = super::super::titles::Titler::default();
        assert!(titler.begin("s"));
        assert!(!titler.begin("s"), "one at a time");
        titler.end("s");
        assert!(titler.begin("s"));
        titler.end("s");
        assert!(titler.begin("s"));
        titler.end("s");
        assert!(!titler.begin("s"), "three tries per process");
        assert!(titler.begin("other"));
    }
}
