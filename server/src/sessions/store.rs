//! The `sessions` table and its event log (`session_events`): session rows as the protocol shows
//! them, keyset pages, the inserts, updates and deletes of the session actions, what the run
//! engine and the runtime read and write of a session, and the statements under `events` (which
//! keeps the log's rules: the next `seq`, announcing after the commit).
//!
//! What the SQL relies on: `LIMIT +?n` (below; `db::pg` drops the `+`); `WITH RECURSIVE` with
//! `UNION ALL` in [`parent_chain_depth`]; `EXISTS`/`COUNT` subqueries read as columns; a bound
//! `i64::MAX` for "no limit" (PostgreSQL refuses SQLite's `-1`).

use crate::db::{Connection, OptionalExtension, Row, params};
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    ListSessions, RunPlan, SessionContinuationLink, SessionContinuationReason, SessionEvent, SessionEventPayload,
    SessionInfo, SessionInfoStatus, SessionModelOverride, Thoroughness,
};
use seed_agents_protocol::wire;

use crate::db::{Cbor, Text};
use crate::error::{ApiError, ApiResult};

// Every `LIMIT` binds as `LIMIT +?n`: SQLite reads a plainly bound LIMIT while compiling and
// recompiles the cached statement whenever the value changes; the unary `+` keeps it a runtime
// expression (the test `limits_do_not_recompile_cached_statements` checks it).

/// The columns [`info_from_row`] reads, as a literal (so `concat!` can build whole statements).
macro_rules! session_columns {
    () => {
        "s.id, s.account_id, s.agent_id, s.title, s.status, s.parent_session_id, s.run_id, \
         s.model_override_cbor, s.thoroughness, s.description, \
         (SELECT COUNT(*) FROM sessions c WHERE c.parent_session_id = s.id), s.created_at, s.updated_at, s.plan_cbor"
    };
}
const SESSION_COLUMNS: &str = session_columns!();

fn info_from_row(row: &Row<'_>) -> crate::db::Result<SessionInfo> {
    let model_override = row.get::<_, Option<Cbor<SessionModelOverride>>>(7)?.map(|Cbor(value)| value);
    let status: String = row.get(4)?;
    let thoroughness: Option<String> = row.get(8)?;
    let plan = row.get::<_, Option<Cbor<RunPlan>>>(13)?.map(|Cbor(plan)| plan);
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

/// The ids of every session of the agents `owner` owns, whoever opened them (the storage quota
/// walks their attachments).
pub(crate) fn ids_of_owned_agents(conn: &Connection, owner: &str) -> ApiResult<Vec<String>> {
    let mut statement = conn.prepare_cached(
        "SELECT sessions.id FROM sessions JOIN agents ON agents.id = sessions.agent_id WHERE agents.account_id = ?1",
    )?;
    let ids = statement.query_map(params![owner], |row| row.get(0))?.collect::<crate::db::Result<Vec<String>>>()?;
    Ok(ids)
}

/// One session; 404 `Session not found` when missing.
///
/// The row also says whether the session was continued from or to another, so the link
/// statements run only for a session that has links (most have none; this is on every
/// `GetSession` and every session snapshot a subscriber gets).
pub(crate) fn load_info(conn: &Connection, session_id: &str) -> ApiResult<SessionInfo> {
    let (mut session, continued_from, continued_to) = conn
        .prepare_cached(concat!(
            "SELECT ",
            session_columns!(),
            ", EXISTS (SELECT 1 FROM session_continuations c WHERE c.to_session_id = s.id),
               EXISTS (SELECT 1 FROM session_continuations c WHERE c.from_session_id = s.id)
             FROM sessions s WHERE s.id = ?1"
        ))?
        .query_row(params![session_id], |row| {
            Ok((info_from_row(row)?, row.get::<_, bool>(14)?, row.get::<_, bool>(15)?))
        })
        .optional()?
        .ok_or_else(|| ApiError::not_found("Session not found"))?;
    session.started_by_trigger = crate::triggers::store::attribution(conn, session_id)?;
    if continued_from || continued_to {
        link_continuations(conn, &mut session)?;
    }
    Ok(session)
}

/// An agent's newest top-level sessions, newest update first.
pub(crate) fn newest_top_level(conn: &Connection, agent_id: &str, limit: usize) -> ApiResult<Vec<SessionInfo>> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.agent_id = ?1 AND s.parent_session_id IS NULL
         ORDER BY s.updated_at DESC, s.id DESC LIMIT +?2"
    ))?;
    let rows = statement.query_map(params![agent_id, limit as i64], info_from_row)?;
    let mut sessions = rows.collect::<crate::db::Result<Vec<_>>>()?;
    crate::triggers::store::attribute(conn, &mut sessions)?;
    for session in &mut sessions {
        link_continuations(conn, session)?;
    }
    Ok(sessions)
}

/// One page (plus one row, to tell whether more exist).
pub(crate) fn page(conn: &Connection, account: &str, action: &ListSessions, limit: i64) -> ApiResult<Vec<SessionInfo>> {
    let mut sql = format!("SELECT {SESSION_COLUMNS} FROM sessions s WHERE ");
    let mut values: Vec<crate::db::Value> = Vec::new();
    let mut bind = |value: crate::db::Value| {
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
    let rows = statement.query_map(crate::db::params_from_iter(values.iter()), info_from_row)?;
    let mut sessions = rows.collect::<crate::db::Result<Vec<_>>>()?;
    crate::triggers::store::attribute(conn, &mut sessions)?;
    for session in &mut sessions {
        link_continuations(conn, session)?;
    }
    Ok(sessions)
}

/// A session to insert.
#[derive(Debug)]
pub(crate) struct NewSession<'a> {
    /// Its id.
    pub(crate) id: &'a str,
    /// The agent's owner (where session rows are stored).
    pub(crate) owner_id: &'a str,
    /// Its agent.
    pub(crate) agent_id: &'a str,
    /// Its title, when it has one yet.
    pub(crate) title: Option<&'a str>,
    /// Who gave the title.
    pub(crate) title_source: TitleSource,
    /// The model it uses instead of the agent's.
    pub(crate) model_override: Option<&'a SessionModelOverride>,
    /// How thoroughly its agent works.
    pub(crate) thoroughness: Option<Thoroughness>,
}

/// Inserts `session`, `idle`.
pub(crate) fn insert(conn: &Connection, session: &NewSession<'_>, now: i64) -> ApiResult<()> {
    conn.prepare_cached(
        "INSERT INTO sessions (id, account_id, agent_id, title, title_source, status, model_override_cbor,
                               thoroughness, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?8, 'idle', ?5, ?6, ?7, ?7)",
    )?
    .execute(params![
        session.id,
        session.owner_id,
        session.agent_id,
        session.title,
        session.model_override.map(Cbor),
        session.thoroughness.map(|value| value.to_string()),
        now,
        session.title_source.as_str()
    ])?;
    Ok(())
}

/// Sets a session's title, as a person gave it.
pub(crate) fn set_title(conn: &Connection, session_id: &str, title: &str, now: i64) -> ApiResult<()> {
    conn.prepare_cached("UPDATE sessions SET title = ?2, title_source = 'user', updated_at = ?3 WHERE id = ?1")?
        .execute(params![session_id, title, now])?;
    Ok(())
}

/// Sets (or, with `None`, clears) a session's model override.
pub(crate) fn set_model_override(
    conn: &Connection,
    session_id: &str,
    model_override: Option<&SessionModelOverride>,
    now: i64,
) -> ApiResult<()> {
    conn.prepare_cached("UPDATE sessions SET model_override_cbor = ?2, updated_at = ?3 WHERE id = ?1")?
        .execute(params![session_id, model_override.map(Cbor), now])?;
    Ok(())
}

/// Sets (or, with `None`, clears) a session's thoroughness.
pub(crate) fn set_thoroughness(
    conn: &Connection,
    session_id: &str,
    thoroughness: Option<Thoroughness>,
    now: i64,
) -> ApiResult<()> {
    conn.prepare_cached("UPDATE sessions SET thoroughness = ?2, updated_at = ?3 WHERE id = ?1")?.execute(params![
        session_id,
        thoroughness.map(|value| value.to_string()),
        now
    ])?;
    Ok(())
}

/// Deletes a session. Its events go by cascade; its children are promoted and its runs detached
/// by ON DELETE SET NULL.
pub(crate) fn delete(conn: &Connection, session_id: &str) -> ApiResult<()> {
    conn.prepare_cached("DELETE FROM sessions WHERE id = ?1")?.execute(params![session_id])?;
    Ok(())
}

// The event log (`session_events`): `events` appends and reads through these.

/// The `seq` the next event of `session_id` gets.
pub(crate) fn next_seq(conn: &Connection, session_id: &str) -> ApiResult<i64> {
    Ok(conn
        .prepare_cached("SELECT COALESCE(MAX(seq), 0) + 1 FROM session_events WHERE session_id = ?1")?
        .query_row(params![session_id], |row| row.get(0))?)
}

/// Inserts event `id` of `session_id` at `seq`.
pub(crate) fn insert_event(
    conn: &Connection,
    id: &str,
    session_id: &str,
    seq: i64,
    payload: &SessionEventPayload,
    now: i64,
) -> ApiResult<()> {
    conn.prepare_cached(
        "INSERT INTO session_events (id, session_id, seq, event_cbor, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![id, session_id, seq, Cbor(payload), now])?;
    Ok(())
}

fn event_from_row(row: &Row<'_>) -> crate::db::Result<SessionEvent> {
    Ok(SessionEvent {
        extra: Default::default(),
        id: row.get::<_, String>(0)?.into(),
        seq: row.get(1)?,
        event: row.get::<_, Cbor<SessionEventPayload>>(2)?.0,
        created_at: row.get(3)?,
        session_id: row.get::<_, String>(4)?.into(),
        truncated: None,
    })
}

/// Events of `session_id` with `after < seq < before`, oldest first; at most `limit` of them
/// (`i64::MAX`: all).
pub(crate) fn events_after(
    conn: &Connection,
    session_id: &str,
    after: i64,
    before: i64,
    limit: i64,
) -> ApiResult<Vec<SessionEvent>> {
    let mut statement = conn.prepare_cached(
        "SELECT id, seq, event_cbor, created_at, session_id FROM session_events
         WHERE session_id = ?1 AND seq > ?2 AND seq < ?3 ORDER BY seq LIMIT +?4",
    )?;
    let rows = statement.query_map(params![session_id, after, before, limit], event_from_row)?;
    Ok(rows.collect::<crate::db::Result<_>>()?)
}

/// Events of `session_id` with `after < seq < before`, newest first; at most `limit` of them.
pub(crate) fn events_before(
    conn: &Connection,
    session_id: &str,
    after: i64,
    before: i64,
    limit: i64,
) -> ApiResult<Vec<SessionEvent>> {
    let mut statement = conn.prepare_cached(
        "SELECT id, seq, event_cbor, created_at, session_id FROM session_events
         WHERE session_id = ?1 AND seq > ?2 AND seq < ?3 ORDER BY seq DESC LIMIT +?4",
    )?;
    let rows = statement.query_map(params![session_id, after, before, limit], event_from_row)?;
    Ok(rows.collect::<crate::db::Result<_>>()?)
}

/// The newest `limit` events of `session_id`, oldest first, each read leniently (an event this
/// build cannot decode is null).
pub(crate) fn newest_events_lenient(conn: &Connection, session_id: &str, limit: i64) -> ApiResult<Vec<Ipld>> {
    let mut events = conn
        .prepare_cached("SELECT event_cbor FROM session_events WHERE session_id = ?1 ORDER BY seq DESC LIMIT +?2")?
        .query_map(params![session_id, limit], |row| row.get::<_, Vec<u8>>(0))?
        .collect::<crate::db::Result<Vec<_>>>()?;
    events.reverse();
    Ok(events.iter().map(|bytes| wire::from_slice(bytes).unwrap_or(Ipld::Null)).collect())
}

/// The newest `limit` events of agent `agent_id`'s sessions, newest first, as `(session, event)`,
/// each read leniently (an event this build cannot decode is null).
pub(crate) fn agent_events_lenient(conn: &Connection, agent_id: &str, limit: i64) -> ApiResult<Vec<(String, Ipld)>> {
    let rows = conn
        .prepare_cached(
            "SELECT e.session_id, e.event_cbor FROM session_events e JOIN sessions s ON s.id = e.session_id
             WHERE s.agent_id = ?1 ORDER BY e.created_at DESC, e.seq DESC LIMIT +?2",
        )?
        .query_map(params![agent_id, limit], |row| Ok((row.get::<_, String>(0)?, row.get::<_, Vec<u8>>(1)?)))?
        .collect::<crate::db::Result<Vec<_>>>()?;
    Ok(rows.into_iter().map(|(session, bytes)| (session, wire::from_slice(&bytes).unwrap_or(Ipld::Null))).collect())
}

/// The title and description of session `session_id` when it belongs to agent `agent_id`.
pub(crate) fn title_of_agents(
    conn: &Connection,
    session_id: &str,
    agent_id: &str,
) -> ApiResult<Option<(Option<String>, Option<String>)>> {
    Ok(conn
        .prepare_cached("SELECT title, description FROM sessions WHERE id = ?1 AND agent_id = ?2")?
        .query_row(params![session_id, agent_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?)
}

/// A session as the agent's `thread:` listing shows it.
#[derive(Debug)]
pub(crate) struct Thread {
    /// The session.
    pub(crate) id: String,
    /// Its title.
    pub(crate) title: Option<String>,
    /// Its description.
    pub(crate) description: Option<String>,
    /// Its status mirror.
    pub(crate) status: SessionInfoStatus,
    /// When it last changed.
    pub(crate) updated_at: i64,
}

/// Every session of agent `agent_id`, newest update first.
pub(crate) fn threads(conn: &Connection, agent_id: &str) -> ApiResult<Vec<Thread>> {
    let mut statement = conn.prepare_cached(
        "SELECT id, title, description, status, updated_at FROM sessions WHERE agent_id = ?1
         ORDER BY updated_at DESC, id DESC",
    )?;
    let rows = statement.query_map(params![agent_id], |row| {
        Ok(Thread {
            id: row.get(0)?,
            title: row.get(1)?,
            description: row.get(2)?,
            status: row.get::<_, Text<SessionInfoStatus>>(3)?.0,
            updated_at: row.get(4)?,
        })
    })?;
    Ok(rows.collect::<crate::db::Result<_>>()?)
}

/// The id of every session.
pub(crate) fn all_ids(conn: &Connection) -> ApiResult<std::collections::HashSet<String>> {
    let mut statement = conn.prepare_cached("SELECT id FROM sessions")?;
    let rows = statement.query_map([], |row| row.get::<_, String>(0))?;
    Ok(rows.collect::<crate::db::Result<_>>()?)
}

/// Who gave a session its title (`sessions.title_source`): the system's provisional one is
/// replaced by a generated title, the agent's by the user's; the user's is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TitleSource {
    /// Provisional (a run's first line, the trigger's name).
    System,
    /// The agent's (`status`, a generated title, a delegation's given title).
    Agent,
}

impl TitleSource {
    fn as_str(self) -> &'static str {
        match self {
            TitleSource::System => "system",
            TitleSource::Agent => "agent",
        }
    }
}

/// A delegated child's session to insert: `idle`, under `parent_session_id`.
#[derive(Debug)]
pub(crate) struct NewChild<'a> {
    /// Its id.
    pub(crate) id: &'a str,
    /// The agent's owner (where session rows are stored).
    pub(crate) owner_id: &'a str,
    /// Its agent.
    pub(crate) agent_id: &'a str,
    /// The session that spawned it; `None` for a child of a workflow with no session up its
    /// chain (a trigger's), which is a top-level session.
    pub(crate) parent_session_id: Option<&'a str>,
    /// Its title.
    pub(crate) title: &'a str,
    /// Who gave the title.
    pub(crate) title_source: TitleSource,
}

/// Inserts a delegated child's session.
pub(crate) fn insert_child(conn: &Connection, session: &NewChild<'_>, now: i64) -> ApiResult<()> {
    conn.prepare_cached(
        "INSERT INTO sessions (id, account_id, agent_id, title, title_source, status, parent_session_id, created_at,
                               updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, 'idle', ?6, ?7, ?7)",
    )?
    .execute(params![
        session.id,
        session.owner_id,
        session.agent_id,
        session.title,
        session.title_source.as_str(),
        session.parent_session_id,
        now
    ])?;
    Ok(())
}

/// Links a delegated child's session to the run that spawned it (`sessions.run_id`).
pub(crate) fn set_spawning_run(conn: &Connection, session_id: &str, run_id: &str) -> ApiResult<()> {
    conn.prepare_cached("UPDATE sessions SET run_id = ?2 WHERE id = ?1")?.execute(params![session_id, run_id])?;
    Ok(())
}

/// How many sessions up the chain of parents from `session_id` goes (0 for a top-level session;
/// the walk stops at 32).
pub(crate) fn parent_chain_depth(conn: &Connection, session_id: &str) -> ApiResult<i64> {
    Ok(conn
        .prepare_cached(
            "WITH RECURSIVE chain(id, d) AS (
               SELECT parent_session_id, 1 FROM sessions WHERE id = ?1 AND parent_session_id IS NOT NULL
               UNION ALL
               SELECT s.parent_session_id, c.d + 1 FROM sessions s JOIN chain c ON s.id = c.id
                WHERE s.parent_session_id IS NOT NULL AND c.d < 32
             )
             SELECT COALESCE(MAX(d), 0) FROM chain",
        )?
        .query_row(params![session_id], |row| row.get(0))?)
}

/// How many sessions `session_id` started.
pub(crate) fn child_count(conn: &Connection, session_id: &str) -> ApiResult<i64> {
    Ok(conn
        .prepare_cached("SELECT COUNT(*) FROM sessions WHERE parent_session_id = ?1")?
        .query_row(params![session_id], |row| row.get(0))?)
}

/// A session's model override: `None` when the session does not exist, `Some(None)` when it
/// has none.
pub(crate) fn model_override(conn: &Connection, session_id: &str) -> ApiResult<Option<Option<SessionModelOverride>>> {
    Ok(conn
        .prepare_cached("SELECT model_override_cbor FROM sessions WHERE id = ?1")?
        .query_row(params![session_id], |row| row.get::<_, Option<Cbor<SessionModelOverride>>>(0))
        .optional()?
        .map(|value| value.map(|Cbor(value)| value)))
}

/// A session's plan, when it has one.
pub(crate) fn plan(conn: &Connection, session_id: &str) -> ApiResult<Option<RunPlan>> {
    Ok(conn
        .prepare_cached("SELECT plan_cbor FROM sessions WHERE id = ?1")?
        .query_row(params![session_id], |row| row.get::<_, Option<Cbor<RunPlan>>>(0))
        .optional()?
        .flatten()
        .map(|Cbor(plan)| plan))
}

/// Replaces (or, with `None`, clears) a session's plan.
pub(crate) fn set_plan(conn: &Connection, session_id: &str, plan: Option<&RunPlan>, now: i64) -> ApiResult<()> {
    conn.prepare_cached("UPDATE sessions SET plan_cbor = ?2, updated_at = ?3 WHERE id = ?1")?.execute(params![
        session_id,
        plan.map(Cbor),
        now
    ])?;
    Ok(())
}

/// Sets a session's title as the agent's unless its user named it; whether it did.
pub(crate) fn set_agent_title(conn: &Connection, session_id: &str, title: &str, now: i64) -> ApiResult<bool> {
    Ok(conn
        .prepare_cached(
            "UPDATE sessions SET title = ?2, title_source = 'agent', updated_at = ?3
             WHERE id = ?1 AND title_source <> 'user'",
        )?
        .execute(params![session_id, title, now])?
        > 0)
}

/// Sets a session's description.
pub(crate) fn set_description(conn: &Connection, session_id: &str, description: &str, now: i64) -> ApiResult<()> {
    conn.prepare_cached("UPDATE sessions SET description = ?2, updated_at = ?3 WHERE id = ?1")?.execute(params![
        session_id,
        description,
        now
    ])?;
    Ok(())
}

/// Whether a session's title is still the system's provisional one (an error when the session
/// does not exist).
pub(crate) fn has_provisional_title(conn: &Connection, session_id: &str) -> ApiResult<bool> {
    let source: String = conn
        .prepare_cached("SELECT title_source FROM sessions WHERE id = ?1")?
        .query_row(params![session_id], |row| row.get(0))?;
    Ok(source == TitleSource::System.as_str())
}

/// Replaces a provisional title with a generated one (and fills an empty description); whether
/// the title was still provisional.
pub(crate) fn set_generated_title(
    conn: &Connection,
    session_id: &str,
    title: &str,
    description: &str,
    now: i64,
) -> ApiResult<bool> {
    Ok(conn
        .prepare_cached(
            "UPDATE sessions SET title = ?2, title_source = 'agent', updated_at = ?4,
                 description = CASE WHEN description IS NULL OR description = '' THEN ?3 ELSE description END
             WHERE id = ?1 AND title_source = 'system'",
        )?
        .execute(params![session_id, title, description, now])?
        > 0)
}

// What the run engine reads and writes of a session, inside the transaction that changes a run
// (the status mirror, the touch after an appended event): `crate::db::Result`, as the engine's
// queue functions answer.

/// A session's status mirror and its agent, when the session exists.
pub(crate) fn status_and_agent(
    conn: &Connection,
    session_id: &str,
) -> crate::db::Result<Option<(SessionInfoStatus, String)>> {
    conn.prepare_cached("SELECT status, agent_id FROM sessions WHERE id = ?1")?
        .query_row(params![session_id], |row| Ok((row.get::<_, Text<SessionInfoStatus>>(0)?.0, row.get(1)?)))
        .optional()
}

/// Sets a session's status mirror (the run engine's to derive).
pub(crate) fn set_status(
    conn: &Connection,
    session_id: &str,
    status: SessionInfoStatus,
    now: i64,
) -> crate::db::Result<()> {
    conn.prepare_cached("UPDATE sessions SET status = ?2, updated_at = ?3 WHERE id = ?1")?.execute(params![
        session_id,
        Text(status),
        now
    ])?;
    Ok(())
}

/// The owner (where its rows are stored) and the agent of a session, when it exists.
pub(crate) fn owner_and_agent(conn: &Connection, session_id: &str) -> crate::db::Result<Option<(String, String)>> {
    conn.prepare_cached("SELECT account_id, agent_id FROM sessions WHERE id = ?1")?
        .query_row(params![session_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()
}

/// Marks a session updated (after an event was appended to it).
pub(crate) fn touch(conn: &Connection, session_id: &str, now: i64) -> crate::db::Result<()> {
    conn.prepare_cached("UPDATE sessions SET updated_at = ?2 WHERE id = ?1")?.execute(params![session_id, now])?;
    Ok(())
}

/// The run that spawned a delegated child's session (`sessions.run_id`), when the session exists
/// and has one.
pub(crate) fn spawning_run(conn: &Connection, session_id: &str) -> crate::db::Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT run_id FROM sessions WHERE id = ?1")?
        .query_row(params![session_id], |row| row.get::<_, Option<String>>(0))
        .optional()?
        .flatten())
}

#[cfg(test)]
mod tests {

    #[test]
    fn limits_do_not_recompile_cached_statements() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (n INTEGER); INSERT INTO t VALUES (1), (2), (3);").unwrap();
        for sql in ["SELECT n FROM t ORDER BY n LIMIT +?1", "SELECT n FROM t ORDER BY n LIMIT ?1"] {
            for limit in [1, 2, 3] {
                let mut statement = conn.prepare_cached(sql).unwrap();
                let rows: Vec<i64> =
                    statement.query_map([limit], |row| row.get(0)).unwrap().collect::<rusqlite::Result<_>>().unwrap();
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
}

/// A continuation to record (`continue_session`, docs/runtime.md §5.10).
#[derive(Debug)]
pub(crate) struct NewContinuation<'a> {
    /// Its id.
    pub(crate) id: &'a str,
    /// The session the conversation left.
    pub(crate) from_session_id: &'a str,
    /// The session it moved to.
    pub(crate) to_session_id: &'a str,
    /// The run that moved it.
    pub(crate) run_id: &'a str,
    /// Why.
    pub(crate) reason: SessionContinuationReason,
}

/// Records a continuation.
pub(crate) fn insert_continuation(conn: &Connection, continuation: &NewContinuation<'_>, now: i64) -> ApiResult<()> {
    conn.prepare_cached(
        "INSERT INTO session_continuations (id, from_session_id, to_session_id, run_id, reason, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        continuation.id,
        continuation.from_session_id,
        continuation.to_session_id,
        continuation.run_id,
        continuation.reason.to_string(),
        now
    ])?;
    Ok(())
}

/// The session run `run_id` continued its conversation in, if it did.
pub(crate) fn continued_by_run(conn: &Connection, run_id: &str) -> ApiResult<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT to_session_id FROM session_continuations WHERE run_id = ?1")?
        .query_row(params![run_id], |row| row.get(0))
        .optional()?)
}

/// Sets `session`'s `continuedFrom` (the session it continues) and `continuedTo` (the newest
/// session it was continued in), each with the other session's current title.
fn link_continuations(conn: &Connection, session: &mut SessionInfo) -> ApiResult<()> {
    let link = |row: &Row<'_>| -> crate::db::Result<SessionContinuationLink> {
        let reason: String = row.get(3)?;
        Ok(SessionContinuationLink {
            extra: Default::default(),
            continuation_id: row.get(0)?,
            created_at: row.get(1)?,
            // The CHECK constraint admits only the protocol's reasons.
            reason: reason.parse().unwrap_or(SessionContinuationReason::Other),
            session_id: row.get::<_, String>(2)?.into(),
            title: row.get(4)?,
        })
    };
    session.continued_from = conn
        .prepare_cached(
            "SELECT c.id, c.created_at, c.from_session_id, c.reason, s.title
             FROM session_continuations c JOIN sessions s ON s.id = c.from_session_id
             WHERE c.to_session_id = ?1",
        )?
        .query_row(params![session.id.as_str()], link)
        .optional()?;
    session.continued_to = conn
        .prepare_cached(
            "SELECT c.id, c.created_at, c.to_session_id, c.reason, s.title
             FROM session_continuations c JOIN sessions s ON s.id = c.to_session_id
             WHERE c.from_session_id = ?1 ORDER BY c.created_at DESC, c.id DESC LIMIT 1",
        )?
        .query_row(params![session.id.as_str()], link)
        .optional()?;
    Ok(())
}
