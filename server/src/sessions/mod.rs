//! Sessions: create, list (keyset pages), read with events, update, delete — with their SQL.
//!
//! Session rows are stored under the agent owner's account even when a collaborator or chatter
//! creates them. Pages are ordered `(updated_at DESC, id DESC)` and the cursor is that pair, so
//! sessions sharing a millisecond are neither skipped nor repeated across pages.

use std::collections::BTreeSet;

use crate::db::Connection;
use seed_agents_protocol::Nullable;
use seed_agents_protocol::generated::{
    CreateSession, CreateSessionResponse, DeleteSession, DeleteSessionResponse, GetSession, GetSessionEvent,
    GetSessionEventResponse, GetSessionResponse, ListSessions, ListSessionsResponse, SessionInfo, SessionListCursor,
    SessionModelOverride, UpdateSession, UpdateSessionResponse,
};
use serde::Serialize;

use crate::access::{self, Need};
use crate::agents;
use crate::app::App;
use crate::bus::{ChangeReason, Event};
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};
use crate::idempotency::{self, Key};
use crate::model::vendors;
use crate::validate::{MAX_NAME_BYTES, bounded_string};

pub(crate) mod control;
pub(crate) mod events;
pub(crate) mod store;

/// Sessions per page when the client does not say.
pub(crate) const DEFAULT_PAGE: i64 = 50;
/// The most sessions per page.
pub(crate) const MAX_PAGE: i64 = 200;
/// The most events per `GetSession` page when the client asks for a tail page.
pub(crate) const MAX_EVENT_PAGE: i64 = 1000;

/// An agent's newest top-level sessions (for protocol 1 clients' `GetAgentResponse.sessions`).
pub(crate) async fn newest_top_level(app: &App, agent_id: &str, limit: usize) -> ApiResult<Vec<SessionInfo>> {
    let agent_id = agent_id.to_owned();
    app.db.read(move |conn| store::newest_top_level(conn, &agent_id, limit)).await
}

/// Titles clients sent as display placeholders; stored as no title.
fn is_placeholder_title(title: &str) -> bool {
    ["untitled session", "untitled sub-session", "new chat"]
        .iter()
        .any(|placeholder| title.eq_ignore_ascii_case(placeholder))
}

/// A session model override checked against the owner's providers (`None` clears).
fn check_model_override(
    conn: &Connection,
    owner_id: &str,
    model_override: &SessionModelOverride,
) -> ApiResult<SessionModelOverride> {
    let provider = bounded_string(&model_override.provider, "Model provider", MAX_NAME_BYTES)?;
    let model = bounded_string(&model_override.model, "Model", agents::definition::MAX_MODEL_BYTES)?;
    let provider_type = crate::providers::store::provider_type(conn, owner_id, &provider)?
        .ok_or_else(|| ApiError::invalid(crate::providers::PROVIDER_NOT_FOUND))?;
    vendors::check_override_reasoning_level(&provider_type, &model, model_override.reasoning_level)?;
    Ok(SessionModelOverride {
        extra: Default::default(),
        provider,
        model,
        reasoning_level: model_override.reasoning_level,
    })
}

#[derive(Serialize)]
struct CreateSessionRequest<'a> {
    #[serde(rename = "agentId")]
    agent_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<&'a str>,
}

/// `CreateSession {agentId, title?, clientRequestId?, modelOverride?, thoroughness?}` (writer, or
/// chatter on a public-chat agent).
pub(crate) async fn create_session(
    app: &App,
    caller: &Caller,
    action: CreateSession,
) -> ApiResult<CreateSessionResponse> {
    let key = Key::request(
        &caller.account_id,
        "CreateSession",
        action.client_request_id.as_deref(),
        &CreateSessionRequest { agent_id: &action.agent_id, title: action.title.as_deref() },
    )?;
    let title = match &action.title {
        Some(title) => Some(bounded_string(title, "Session title", MAX_NAME_BYTES)?),
        None => None,
    }
    .filter(|title| !is_placeholder_title(title));
    let now = app.clock.now_ms();
    let (response, agent_id, owner, replayed) =
        access::write(app, caller, action.agent_id.clone(), Need::Chat, move |conn, access| {
            let model_override = match &action.model_override {
                Some(model_override) => Some(check_model_override(conn, &access.owner_id, model_override)?),
                None => None,
            };
            let (response, replayed) = idempotency::once(conn, key.as_ref(), now, || {
                // A time-ordered UUID (v7): inserts append to the primary key's index instead of
                // touching a random page each.
                let id = uuid::Uuid::now_v7().to_string();
                let session = store::NewSession {
                    id: &id,
                    owner_id: &access.owner_id,
                    agent_id: &access.agent_id,
                    title: title.as_deref(),
                    title_source: store::TitleSource::System,
                    model_override: model_override.as_ref(),
                    thoroughness: action.thoroughness,
                };
                store::insert(conn, &session, now)?;
                Ok(CreateSessionResponse { extra: Default::default(), session_id: id.into() })
            })?;
            Ok((response, access.agent_id, access.owner_id, replayed))
        })
        .await?;
    if !replayed {
        let session_id = response.session_id.to_string();
        app.bus.publish(Event::SessionChanged { session_id: session_id.clone(), agent_id: agent_id.clone() });
        app.bus.account_change(owner, ChangeReason::SessionCreated, Some(&agent_id), Some(&session_id));
    }
    Ok(response)
}

/// `ListSessions`: the caller's sessions across agents it owns or collaborates on, or one agent's
/// (reader, public read included) — newest update first, keyset-paged.
pub(crate) async fn list_sessions(app: &App, caller: &Caller, action: ListSessions) -> ApiResult<ListSessionsResponse> {
    let limit = action.limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE);
    if let Some(cursor) = &action.cursor {
        bounded_string(&cursor.id_before, "Cursor idBefore", MAX_NAME_BYTES)?;
    }
    let account = caller.account_id.clone();
    app.db
        .read(move |conn| {
            let scoped = match &action.agent_id {
                Some(agent_id) => Some(access::require(conn, agent_id, &account, Need::Read)?),
                None => None,
            };
            let mut rows = store::page(conn, &account, &action, limit)?;
            let more = rows.len() as i64 > limit;
            rows.truncate(limit as usize);
            let next_cursor = match (more, rows.last()) {
                (true, Some(last)) => Some(SessionListCursor {
                    extra: Default::default(),
                    updated_before: last.updated_at,
                    id_before: last.id.to_string(),
                }),
                _ => None,
            };
            let referenced: BTreeSet<&str> = rows.iter().map(|session| session.agent_id.as_str()).collect();
            let mut agents: Vec<_> = agents::store::visible_agents(conn, &account)?
                .into_iter()
                .filter(|agent| referenced.contains(agent.id.as_str()))
                .collect();
            // A public agent listed by id is not among the caller's agents; show it as its viewer sees it.
            if let Some(access) = scoped
                && !rows.is_empty()
                && !agents.iter().any(|agent| agent.id == access.agent_id)
            {
                agents.push(agents::store::load_info(conn, &access.agent_id, access.role)?);
            }
            Ok(ListSessionsResponse { extra: Default::default(), agents, next_cursor, sessions: rows })
        })
        .await
}

/// `GetSession {sessionId, afterSeq?, beforeSeq?, limit?}` (reader): the session, its events with
/// `seq > afterSeq` (and `< beforeSeq`), oldest first; with `limit`, the newest `limit` of those
/// and whether older ones remain.
pub(crate) async fn get_session(app: &App, caller: &Caller, action: GetSession) -> ApiResult<GetSessionResponse> {
    let after = action.after_seq.unwrap_or(0);
    if after < 0 {
        return Err(ApiError::invalid("afterSeq must be a non-negative integer"));
    }
    if action.before_seq.is_some_and(|before| before < 0) {
        return Err(ApiError::invalid("beforeSeq must be a non-negative integer"));
    }
    let limit = action.limit.map(|limit| limit.clamp(1, MAX_EVENT_PAGE));
    let (account, now) = (caller.account_id.clone(), app.clock.now_ms());
    let backends = crate::tools::backends(app);
    app.db
        .read(move |conn| {
            let access = access::require_session(conn, &action.session_id, &account, Need::Read)?;
            let session = store::load_info(conn, &action.session_id)?;
            let before = action.before_seq.unwrap_or(i64::MAX);
            let (events, has_more_before) = match limit {
                Some(limit) => {
                    let (events, more) = events::tail(conn, &action.session_id, after, before, limit)?;
                    (events, Some(more))
                }
                None => (events::after(conn, &action.session_id, after, before, None)?, None),
            };
            let mut agent = agents::store::load_info(conn, &access.agent_id, access.role)?;
            // What the agent's next pass is told (the live parts: time, members, `<space>`), with
            // a delegated child's contract or a trigger thread's own instructions and tools, applied
            // in the order the runtime applies them.
            // The session row read above (same snapshot) names the spawning run, and says whether
            // a trigger firing opened the session: without one there is no thread and no context.
            let spawning_run = session.run_id.as_ref().map(|run| run.as_str());
            if let Some(spec) = crate::runtime::delegate::contract_of_spawning_run(conn, spawning_run)? {
                spec.apply(&mut agent.definition);
            }
            let fired = session.started_by_trigger.is_some();
            if fired && let Some(thread) = crate::triggers::thread::of_session(conn, &action.session_id)? {
                thread.apply(&mut agent.definition);
            }
            let memory_root = std::path::Path::new(&agent.state_dir).join(crate::memory::path::MEMORY_DIR);
            let callables = crate::tools::registry::granted(backends, &agent.definition);
            let inputs = crate::runtime::prompt::Inputs {
                definition: &agent.definition,
                owner_id: &access.owner_id,
                agent_id: &access.agent_id,
                memory_root: &memory_root,
                now_ms: now,
                callables: &callables,
            };
            let system_prompt_markdown = crate::runtime::prompt::system(conn, &inputs)?;
            Ok(GetSessionResponse {
                extra: Default::default(),
                context_window: None,
                events,
                has_more_before: has_more_before.filter(|_| limit.is_some() || action.before_seq.is_some()),
                session,
                system_prompt_markdown,
                trigger_context: match fired {
                    true => crate::triggers::store::context(conn, &action.session_id)?,
                    false => None,
                },
            })
        })
        .await
}

/// `GetSessionEvent {sessionId, seq}` (reader): one durable event by its `seq` (checked while
/// decoding: 400 `seq must be a non-negative integer`); 404 `Session event not found` when the
/// session has none with that `seq`.
pub(crate) async fn get_session_event(
    app: &App,
    caller: &Caller,
    action: GetSessionEvent,
) -> ApiResult<GetSessionEventResponse> {
    let account = caller.account_id.clone();
    app.db
        .read(move |conn| {
            access::require_session(conn, &action.session_id, &account, Need::Read)?;
            let (after, before) = (action.seq.saturating_sub(1), action.seq.saturating_add(1));
            let event = events::after(conn, &action.session_id, after, before, Some(1))?.pop();
            let event = event.ok_or_else(|| ApiError::not_found("Session event not found"))?;
            Ok(GetSessionEventResponse { extra: Default::default(), event })
        })
        .await
}

/// `UpdateSession {sessionId, title?, modelOverride?, thoroughness?}` (writer).
pub(crate) async fn update_session(
    app: &App,
    caller: &Caller,
    action: UpdateSession,
) -> ApiResult<UpdateSessionResponse> {
    if action.title.is_none() && action.model_override.is_absent() && action.thoroughness.is_absent() {
        return Err(ApiError::invalid("Nothing to update: provide a title or a model override"));
    }
    let title = match &action.title {
        Some(title) => Some(bounded_string(title, "Session title", MAX_NAME_BYTES)?),
        None => None,
    };
    let account = caller.account_id.clone();
    let now = app.clock.now_ms();
    let (session, owner) = app
        .db
        .write(move |conn| {
            let access = access::require_session(conn, &action.session_id, &account, Need::Write)?;
            if let Some(title) = &title {
                store::set_title(conn, &action.session_id, title, now)?;
            }
            let model_override = match &action.model_override {
                Nullable::Absent => None,
                Nullable::Null => Some(None),
                Nullable::Value(value) => Some(Some(check_model_override(conn, &access.owner_id, value)?)),
            };
            if let Some(model_override) = model_override {
                store::set_model_override(conn, &action.session_id, model_override.as_ref(), now)?;
            }
            let thoroughness = match action.thoroughness {
                Nullable::Absent => None,
                Nullable::Null => Some(None),
                Nullable::Value(value) => Some(Some(value)),
            };
            if let Some(thoroughness) = thoroughness {
                store::set_thoroughness(conn, &action.session_id, thoroughness, now)?;
            }
            Ok((store::load_info(conn, &action.session_id)?, access.owner_id))
        })
        .await?;
    app.bus
        .publish(Event::SessionChanged { session_id: session.id.to_string(), agent_id: session.agent_id.to_string() });
    app.bus.account_change(owner, ChangeReason::SessionUpdated, Some(&session.agent_id), Some(&session.id));
    Ok(UpdateSessionResponse { extra: Default::default(), session })
}

/// `DeleteSession {sessionId}` (writer): cancels the session's live runs with their
/// descendants (an executing turn is asked to stop), then deletes the session and its events in
/// the same transaction; its child sessions become top-level and its runs stay, detached.
pub(crate) async fn delete_session(
    app: &App,
    caller: &Caller,
    action: DeleteSession,
) -> ApiResult<DeleteSessionResponse> {
    let (account, now, ending) = (caller.account_id.clone(), app.clock.now_ms(), app.runs.ending());
    let (response, owner, canceled, changes) = app
        .db
        .write(move |conn| {
            let access = access::require_session(conn, &action.session_id, &account, Need::Write)?;
            let mut changes = crate::runs::Changes::default();
            let canceled = crate::runs::cancel::cancel_session(conn, &action.session_id, now, &ending, &mut changes)?;
            store::delete(conn, &action.session_id)?;
            let response = DeleteSessionResponse {
                extra: Default::default(),
                agent_id: access.agent_id.into(),
                session_id: action.session_id,
            };
            Ok((response, access.owner_id, canceled, changes))
        })
        .await?;
    app.runs.after_cancel(canceled, changes, None);
    app.bus.publish(Event::SessionChanged {
        session_id: response.session_id.to_string(),
        agent_id: response.agent_id.to_string(),
    });
    crate::attachments::remove_for_sessions(app, vec![response.session_id.to_string()]).await;
    app.bus.account_change(owner, ChangeReason::SessionDeleted, Some(&response.agent_id), Some(&response.session_id));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholder_titles_are_recognised_in_any_case() {
        assert!(is_placeholder_title("Untitled session"));
        assert!(is_placeholder_title("NEW CHAT"));
        assert!(is_placeholder_title("untitled sub-session"));
        assert!(!is_placeholder_title("New chat about cats"));
    }
}
