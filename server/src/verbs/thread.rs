//! `thread:<id>`: a compact transcript of one of the agent's sessions (its newest events).

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::Value;
use serde::Serialize;

use super::{Context, MAX_RESULT_BYTES, plural, record};
use crate::error::{ApiError, ApiResult};
use crate::sessions::store as session_store;

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
            let session = session_store::title_of_agents(conn, &session_id, &agent_id)?
                .ok_or_else(|| ApiError::not_found(format!("No thread {session_id}")))?;
            let events = session_store::newest_events_lenient(conn, &session_id, MAX_EVENTS)?;
            Ok(((session_id, session), events))
        })
        .await?;
    let ((session_id, (title, description)), events) = (session, events);
    let lines: Vec<String> = events.iter().map(line).collect();
    let markdown = bound(lines.join("\n\n"));
    let summary = format!("Thread \"{}\": {} recent events.", title.as_deref().unwrap_or(&session_id), events.len());
    record(summary, &Transcript { session_id, title, description: description.filter(|d| !d.is_empty()), markdown })
}

/// Threads a listing shows when the caller does not say.
const DEFAULT_LIST: i64 = 25;
/// The most threads a listing shows.
const MAX_LIST: i64 = 100;
/// How many of the newest events a `query` searches.
const QUERY_SCAN_EVENTS: i64 = 4000;

#[derive(Serialize)]
struct Listed {
    #[serde(rename = "sessionId")]
    session_id: String,
    title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    status: String,
    #[serde(rename = "updatedAt")]
    updated_at: i64,
    /// Where `query` matched, when it matched inside the conversation.
    #[serde(skip_serializing_if = "Option::is_none")]
    snippet: Option<String>,
}

#[derive(Serialize)]
struct Listing {
    threads: Vec<Listed>,
}

/// `thread:` — the agent's conversations, newest first. `options.limit` (default 25, at most
/// 100); `options.query` keeps those whose title matches or whose recent events mention it
/// (case-insensitive, over the agent's newest 4,000 events), with a snippet. Only the agent's
/// own threads, as `thread:<id>` reads only those.
pub(super) async fn list(context: &Context<'_>, options: Option<&BTreeMap<String, Ipld>>) -> ApiResult<Value> {
    let limit = match options.and_then(|options| options.get("limit")) {
        Some(Ipld::Integer(limit)) => i64::try_from(*limit).unwrap_or(MAX_LIST).clamp(1, MAX_LIST),
        Some(Ipld::Float(limit)) if limit.is_finite() => (*limit as i64).clamp(1, MAX_LIST),
        _ => DEFAULT_LIST,
    };
    let query = match options.and_then(|options| options.get("query")) {
        Some(Ipld::String(query)) => Some(query.trim().to_lowercase()).filter(|query| !query.is_empty()),
        _ => None,
    };
    let agent_id = context.agent_id.clone();
    let wanted = query.clone();
    let threads = context
        .app
        .db
        .read(move |conn| {
            let mut snippets: std::collections::HashMap<String, String> = std::collections::HashMap::new();
            if let Some(query) = &wanted {
                for (session, event) in session_store::agent_events_lenient(conn, &agent_id, QUERY_SCAN_EVENTS)? {
                    if snippets.contains_key(&session) {
                        continue;
                    }
                    let text = match &event {
                        Ipld::Map(fields) => content_text(fields.get("content")),
                        _ => String::new(),
                    };
                    if let Some(snippet) = snippet(&text, query) {
                        snippets.insert(session, snippet);
                    }
                }
            }
            let mut threads = Vec::new();
            for row in session_store::threads(conn, &agent_id)? {
                let mut thread = Listed {
                    session_id: row.id,
                    title: row.title,
                    description: row.description.filter(|d| !d.is_empty()),
                    status: row.status.to_string(),
                    updated_at: row.updated_at,
                    snippet: None,
                };
                if let Some(query) = &wanted {
                    let titled = thread.title.as_deref().is_some_and(|title| title.to_lowercase().contains(query));
                    thread.snippet = snippets.remove(&thread.session_id);
                    if !titled && thread.snippet.is_none() {
                        continue;
                    }
                }
                threads.push(thread);
                if threads.len() as i64 >= limit {
                    break;
                }
            }
            Ok(threads)
        })
        .await?;
    let summary = match &query {
        Some(query) => format!("{} \"{query}\".", plural(threads.len(), "thread matches", "threads match")),
        None => format!("{}, newest first.", plural(threads.len(), "thread", "threads")),
    };
    record(summary, &Listing { threads })
}

/// Up to 60 characters either side of the first case-insensitive match of `query` in `text`.
fn snippet(text: &str, query: &str) -> Option<String> {
    let lower = text.to_lowercase();
    let at = lower.find(query)?;
    // Lowercasing can change lengths; work in characters, from the original text when the
    // lowered one lines up with it.
    let original: Vec<char> = text.chars().collect();
    let lowered: Vec<char> = lower.chars().collect();
    let chars = if original.len() == lowered.len() { original } else { lowered };
    let start_char = lower[..at].chars().count();
    let from = start_char.saturating_sub(60);
    let to = (start_char + query.chars().count() + 60).min(chars.len());
    let mut snippet: String = chars[from..to].iter().collect();
    if from > 0 {
        snippet.insert(0, '…');
    }
    if to < chars.len() {
        snippet.push('…');
    }
    Some(snippet)
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
    fn snippets_surround_the_first_match() {
        assert_eq!(snippet("Buy MILK today", "milk"), Some("Buy MILK today".to_owned()));
        let long = format!("{}needle{}", "a".repeat(100), "b".repeat(100));
        let found = snippet(&long, "needle").unwrap();
        assert!(found.starts_with('…') && found.ends_with('…') && found.contains("needle"), "{found}");
        assert_eq!(snippet("nothing here", "needle"), None);
    }

    #[test]
    fn long_transcripts_keep_their_end() {
        let long = "é".repeat(MAX_RESULT_BYTES);
        let bounded = bound(long);
        assert!(bounded.starts_with("[earlier events truncated]"));
        assert!(bounded.len() <= MAX_RESULT_BYTES + 40);
    }
}
