//! `thread:<id>`: a compact transcript of one of the agent's sessions (its newest events).

use ipld_core::ipld::Ipld;
use rusqlite::{OptionalExtension, params};
use seed_agents_protocol::{Value, wire};
use serde::Serialize;

use super::{Context, MAX_RESULT_BYTES, record};
use crate::error::{ApiError, ApiResult};

/// The most events a transcript shows.
const MAX_EVENTS: i64 = 200;

#[derive(Serialize)]
struct Transcript {
    #[serde(rename = "sessionId")]
    session_id: String,
    /// `null` when the session has no title (as upstream answers).
    title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    markdown: String,
}

pub(super) async fn read(context: &Context<'_>, session_id: String) -> ApiResult<Value> {
    let agent_id = context.agent_id.clone();
    let (session, events) = context
        .app
        .db
        .read(move |conn| {
            // Only sessions of the same agent: the caller's writer access covers exactly those.
            let session = conn
                .prepare_cached("SELECT title, description FROM sessions WHERE id = ?1 AND agent_id = ?2")?
                .query_row(params![session_id, agent_id], |row| {
                    Ok((row.get::<_, Option<String>>(0)?, row.get::<_, Option<String>>(1)?))
                })
                .optional()?
                .ok_or_else(|| ApiError::not_found(format!("No thread {session_id}")))?;
            let mut events = conn
                .prepare_cached(
                    "SELECT event_cbor FROM session_events WHERE session_id = ?1 ORDER BY seq DESC LIMIT +?2",
                )?
                .query_map(params![session_id, MAX_EVENTS], |row| row.get::<_, Vec<u8>>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            events.reverse();
            Ok(((session_id, session), events))
        })
        .await?;
    let ((session_id, (title, description)), events) = (session, events);
    let lines: Vec<String> = events.iter().map(|bytes| line(&wire::from_slice(bytes).unwrap_or(Ipld::Null))).collect();
    let markdown = bound(lines.join("\n\n"));
    let summary = format!("Thread \"{}\": {} recent events.", title.as_deref().unwrap_or(&session_id), events.len());
    record(summary, &Transcript { session_id, title, description: description.filter(|d| !d.is_empty()), markdown })
}

/// One event as a transcript line.
fn line(event: &Ipld) -> String {
    let field = |key: &str| match event {
        Ipld::Map(fields) => fields.get(key),
        _ => None,
    };
    let text = |key: &str| match field(key) {
        Some(Ipld::String(text)) => text.as_str(),
        _ => "",
    };
    match text("type") {
        "message" => {
            let role = Some(text("role")).filter(|role| !role.is_empty()).unwrap_or("unknown");
            format!("**{role}**: {}", content_text(field("content")))
        }
        "tool_call" => format!("→ tool call {}", text("name")),
        "tool_result" => format!("← tool result {}", text("name")),
        "error" => format!("⚠ error: {}", text("message")),
        "" => "(event)".to_owned(),
        other => format!("({other})"),
    }
}

/// A message's content as text: a string as is; parts by their `text`.
fn content_text(content: Option<&Ipld>) -> String {
    match content {
        Some(Ipld::String(text)) => text.clone(),
        Some(Ipld::List(parts)) => parts
            .iter()
            .filter_map(|part| match part {
                Ipld::Map(fields) => match fields.get("text") {
                    Some(Ipld::String(text)) => Some(text.as_str()),
                    _ => None,
                },
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// Keeps the newest [`MAX_RESULT_BYTES`] of a long transcript.
fn bound(markdown: String) -> String {
    if markdown.len() <= MAX_RESULT_BYTES {
        return markdown;
    }
    let mut start = markdown.len() - MAX_RESULT_BYTES;
    while !markdown.is_char_boundary(start) {
        start += 1;
    }
    format!("[earlier events truncated]\n\n{}", &markdown[start..])
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn event(fields: &[(&str, Ipld)]) -> Ipld {
        Ipld::Map(fields.iter().map(|(key, value)| ((*key).to_owned(), value.clone())).collect::<BTreeMap<_, _>>())
    }

    #[test]
    fn events_render_as_transcript_lines() {
        let text = |value: &str| Ipld::String(value.to_owned());
        let message = event(&[("type", text("message")), ("role", text("user")), ("content", text("hi"))]);
        assert_eq!(line(&message), "**user**: hi");
        let parts = Ipld::List(vec![event(&[("type", text("text")), ("text", text("a"))])]);
        assert_eq!(line(&event(&[("type", text("message")), ("content", parts)])), "**unknown**: a");
        assert_eq!(line(&event(&[("type", text("tool_call")), ("name", text("read"))])), "→ tool call read");
        assert_eq!(line(&event(&[("type", text("tool_spawn"))])), "(tool_spawn)");
        assert_eq!(line(&Ipld::Null), "(event)");
    }

    #[test]
    fn long_transcripts_keep_their_end() {
        let long = "é".repeat(MAX_RESULT_BYTES);
        let bounded = bound(long);
        assert!(bounded.starts_with("[earlier events truncated]"));
        assert!(bounded.len() <= MAX_RESULT_BYTES + 40);
    }
}
