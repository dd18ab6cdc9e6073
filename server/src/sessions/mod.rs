//! Sessions: create, list (keyset pages), read with events, update, delete — with their SQL.
//!
//! Session rows are stored under the agent owner's account even when a collaborator or chatter
//! creates them. Pages are ordered `(updated_at DESC, id DESC)` and the cursor is that pair, so
//! sessions sharing a millisecond are neither skipped nor repeated across pages.

use std::collections::BTreeSet;

use rusqlite::{Connection, Row, params};
use seed_agents_protocol::generated::{
    CreateSession, CreateSessionResponse, DeleteSession, DeleteSessionResponse, GetSession, GetSessionEvent,
    GetSessionEventResponse, GetSessionResponse, ListSessions, ListSessionsResponse, RunPlan, SessionInfo,
    SessionInfoStatus, SessionListCursor, SessionModelOverride, Thoroughness, UpdateSession, UpdateSessionResponse,
};
use seed_agents_protocol::{Nullable, wire};
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

/// Sessions per page when the client does not say.
pub(crate) const DEFAULT_PAGE: i64 = 50;
/// The most sessions per page.
pub(crate) const MAX_PAGE: i64 = 200;
/// The most events per `GetSession` page when the client asks for a tail page.
pub(crate) const MAX_EVENT_PAGE: i64 = 1000;

// Every `LIMIT` binds as `LIMIT +?n`: SQLite reads a plainly bound LIMIT while compiling and
// recompiles the cached statement whenever the value changes; the unary `+` keeps it a runtime
// expression (the test `limits_do_not_recompile_cached_statements` checks it).

const SESSION_COLUMNS: &str = "s.id, s.account_id, s.agent_id, s.title, s.status, s.parent_session_id, s.run_id, \
     s.model_override_cbor, s.thoroughness, s.description, \
     (SELECT COUNT(*) FROM sessions c WHERE c.parent_session_id = s.id), s.created_at, s.updated_at, s.plan_cbor";

fn info_from_row(row: &Row<'_>) -> rusqlite::Result<SessionInfo> {
    let blob_error = |index, error: wire::WireError| {
        rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Blob, Box::new(error))
    };
    let model_override: Option<Vec<u8>> = row.get(7)?;
    let model_override = match model_override {
        Some(bytes) => Some(wire::from_slice::<SessionModelOverride>(&bytes).map_err(|error| blob_error(7, error))?),
        None => None,
    };
    let status: String = row.get(4)?;
    let thoroughness: Option<String> = row.get(8)?;
    let plan: Option<Vec<u8>> = row.get(13)?;
    let plan = match plan {
        Some(bytes) => Some(wire::from_slice::<RunPlan>(&bytes).map_err(|error| blob_error(13, error))?),
        None => None,
    };
    Ok(SessionInfo {
        extra: Default::default(),
        account: row.get(1)?,
        activity: None,
        agent_id: row.get::<_, String>(2)?.into(),
        child_session_count: Some(row.get(10)?),
        continued_from: None,
        continued_to: None,
        created_at: row.get(11)?,
        description: row.get(9)?,
        id: row.get::<_, String>(0)?.into(),
        model_override,
        parent_session_id: row.get::<_, Option<String>>(5)?.map(Into::into),
        plan,
        run_id: row.get::<_, Option<String>>(6)?.map(Into::into),
        started_by_trigger: None,
        status: match status.as_str() {
            "streaming" => SessionInfoStatus::Streaming,
            "stopped" => SessionInfoStatus::Stopped,
            "error" => SessionInfoStatus::Error,
            _ => SessionInfoStatus::Idle,
        },
        thoroughness: thoroughness.as_deref().and_then(parse_thoroughness),
        title: row.get(3)?,
        updated_at: row.get(12)?,
    })
}

fn parse_thoroughness(value: &str) -> Option<Thoroughness> {
    match value {
        "quick" => Some(Thoroughness::Quick),
        "normal" => Some(Thoroughness::Normal),
        "deep" => Some(Thoroughness::Deep),
        _ => None,
    }
}

/// One session; 404 `Session not found` when missing.
pub(crate) fn load_info(conn: &Connection, session_id: &str) -> ApiResult<SessionInfo> {
    use rusqlite::OptionalExtension as _;
    let mut session = conn
        .prepare_cached(&format!("SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.id = ?1"))?
        .query_row(params![session_id], info_from_row)
        .optional()?
        .ok_or_else(|| ApiError::not_found("Session not found"))?;
    session.started_by_trigger = crate::triggers::store::attribution(conn, session_id)?;
    Ok(session)
}

/// An agent's newest top-level sessions (for protocol 1 clients' `GetAgentResponse.sessions`).
pub(crate) async fn newest_top_level(app: &App, agent_id: &str, limit: usize) -> ApiResult<Vec<SessionInfo>> {
    let agent_id = agent_id.to_owned();
    app.db
        .read(move |conn| {
            let mut statement = conn.prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.agent_id = ?1 AND s.parent_session_id IS NULL
                 ORDER BY s.updated_at DESC, s.id DESC LIMIT +?2"
            ))?;
            let rows = statement.query_map(params![agent_id, limit as i64], info_from_row)?;
            let mut sessions = rows.collect::<rusqlite::Result<Vec<_>>>()?;
            crate::triggers::store::attribute(conn, &mut sessions)?;
            Ok(sessions)
        })
        .await
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
    let account = caller.account_id.clone();
    let now = app.clock.now_ms();
    let (response, agent_id, owner, replayed) = app
        .db
        .write(move |conn| {
            let access = access::require(conn, &action.agent_id, &account, Need::Chat)?;
            let model_override = match &action.model_override {
                Some(model_override) => Some(check_model_override(conn, &access.owner_id, model_override)?),
                None => None,
            };
            let (response, replayed) = idempotency::once(conn, key.as_ref(), now, || {
                // A time-ordered UUID (v7): inserts append to the primary key's index instead of
                // touching a random page each.
                let id = uuid::Uuid::now_v7().to_string();
                let model_override = match &model_override {
                    Some(value) => Some(wire::to_vec(value).map_err(ApiError::internal)?),
                    None => None,
                };
                conn.prepare_cached(
                    "INSERT INTO sessions (id, account_id, agent_id, title, title_source, status, model_override_cbor,
                                           thoroughness, created_at, updated_at)
                     VALUES (?1, ?2, ?3, ?4, 'system', 'idle', ?5, ?6, ?7, ?7)",
                )?
                .execute(params![
                    id,
                    access.owner_id,
                    access.agent_id,
                    title,
                    model_override,
                    action.thoroughness.map(|value| value.to_string()),
                    now
                ])?;
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
            let mut rows = page(conn, &account, &action, limit)?;
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

/// One page (plus one row, to tell whether more exist).
fn page(conn: &Connection, account: &str, action: &ListSessions, limit: i64) -> ApiResult<Vec<SessionInfo>> {
    let mut sql = format!("SELECT {SESSION_COLUMNS} FROM sessions s WHERE ");
    let mut values: Vec<rusqlite::types::Value> = Vec::new();
    let mut bind = |value: rusqlite::types::Value| {
        values.push(value);
        format!("?{}", values.len())
    };
    match &action.agent_id {
        Some(agent_id) => sql.push_str(&format!("s.agent_id = {}", bind(agent_id.to_string().into()))),
        None => {
            let account = bind(account.to_owned().into());
            sql.push_str(&format!(
                "(s.account_id = {account} OR s.agent_id IN (SELECT agent_id FROM agent_collaborators
                   WHERE account_id = {account} AND status = 'accepted'))"
            ));
        }
    }
    if let Some(parent) = &action.parent_session_id {
        sql.push_str(&format!(" AND s.parent_session_id = {}", bind(parent.to_string().into())));
    } else if action.include_children == Some(false) {
        sql.push_str(" AND s.parent_session_id IS NULL");
    }
    if let Some(cursor) = &action.cursor {
        let updated = bind(cursor.updated_before.into());
        let id = bind(cursor.id_before.clone().into());
        sql.push_str(&format!(" AND (s.updated_at < {updated} OR (s.updated_at = {updated} AND s.id < {id}))"));
    }
    if action.exclude_triggered == Some(true) {
        sql.push_str(" AND NOT EXISTS (SELECT 1 FROM trigger_firings f WHERE f.session_id = s.id)");
    }
    sql.push_str(&format!(" ORDER BY s.updated_at DESC, s.id DESC LIMIT +{}", bind((limit + 1).into())));
    let mut statement = conn.prepare_cached(&sql)?;
    let rows = statement.query_map(rusqlite::params_from_iter(values.iter()), info_from_row)?;
    let mut sessions = rows.collect::<rusqlite::Result<Vec<_>>>()?;
    crate::triggers::store::attribute(conn, &mut sessions)?;
    Ok(sessions)
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
    let web_search = app.config.searxng_url.is_some();
    app.db
        .read(move |conn| {
            let access = access::require_session(conn, &action.session_id, &account, Need::Read)?;
            let session = load_info(conn, &action.session_id)?;
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
            if let Some(spec) = crate::runtime::delegate::session_contract(conn, &action.session_id)? {
                spec.apply(&mut agent.definition);
            }
            if let Some(thread) = crate::triggers::thread::of_session(conn, &action.session_id)? {
                thread.apply(&mut agent.definition);
            }
            let memory_root = std::path::Path::new(&agent.state_dir).join(crate::memory::path::MEMORY_DIR);
            let callables = crate::tools::registry::granted_with(web_search, &agent.definition);
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
                trigger_context: crate::triggers::store::context(conn, &action.session_id)?,
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
                conn.prepare_cached(
                    "UPDATE sessions SET title = ?2, title_source = 'user', updated_at = ?3 WHERE id = ?1",
                )?
                .execute(params![action.session_id.as_str(), title, now])?;
            }
            let model_override = match &action.model_override {
                Nullable::Absent => None,
                Nullable::Null => Some(None),
                Nullable::Value(value) => {
                    let checked = check_model_override(conn, &access.owner_id, value)?;
                    Some(Some(wire::to_vec(&checked).map_err(ApiError::internal)?))
                }
            };
            if let Some(model_override) = model_override {
                conn.prepare_cached("UPDATE sessions SET model_override_cbor = ?2, updated_at = ?3 WHERE id = ?1")?
                    .execute(params![action.session_id.as_str(), model_override, now])?;
            }
            let thoroughness = match &action.thoroughness {
                Nullable::Absent => None,
                Nullable::Null => Some(None),
                Nullable::Value(value) => Some(Some(value.to_string())),
            };
            if let Some(thoroughness) = thoroughness {
                conn.prepare_cached("UPDATE sessions SET thoroughness = ?2, updated_at = ?3 WHERE id = ?1")?
                    .execute(params![action.session_id.as_str(), thoroughness, now])?;
            }
            Ok((load_info(conn, &action.session_id)?, access.owner_id))
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
            // Events go by cascade; children are promoted and runs detached by ON DELETE SET NULL.
            conn.prepare_cached("DELETE FROM sessions WHERE id = ?1")?.execute(params![action.session_id.as_str()])?;
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
    fn limits_do_not_recompile_cached_statements() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (n INTEGER); INSERT INTO t VALUES (1), (2), (3);").unwrap();
        for sql in ["SELECT n FROM t ORDER BY n LIMIT +?1", "SELECT n FROM t ORDER BY n LIMIT ?1"] {
            for limit in [1, 2, 3] {
                let mut statement = conn.prepare_cached(sql).unwrap();
                let rows: Vec<i64> =
                    statement.query_map([limit], |row| row.get(0)).unwrap().collect::<Result<_, _>>().unwrap();
                assert_eq!(rows.len(), limit as usize);
            }
            let statement = conn.prepare_cached(sql).unwrap();
            let reprepared = statement.get_status(rusqlite::StatementStatus::RePrepare);
            if sql.contains('+') {
                assert_eq!(reprepared, 0, "{sql}");
            } else {
                assert!(reprepared > 0, "the plain form does recompile (this test's premise): {sql}");
            }
        }
    }

    #[test]
    fn placeholder_titles_are_recognised_in_any_case() {
        assert!(is_placeholder_title("Untitled session"));
        assert!(is_placeholder_title("NEW CHAT"));
        assert!(is_placeholder_title("untitled sub-session"));
        assert!(!is_placeholder_title("New chat about cats"));
    }
}
