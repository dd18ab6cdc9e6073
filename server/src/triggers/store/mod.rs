//! The trigger tables (`agent_triggers`, `trigger_firings`, `trigger_schedule_state`,
//! `activity_watermarks`): trigger and firing rows read back as the protocol's
//! `AgentTriggerInfo`, `TriggerFiringInfo` and session attributions; the access check for
//! trigger-scoped actions; every insert and update of the actions, of firing, and of the
//! monitors' progress.
//!
//! What the SQL relies on, on either database: `INSERT … ON CONFLICT (…) DO NOTHING` and
//! `DO UPDATE SET … = excluded.…`; booleans stored as 0/1 integers (`enabled = 1`), a bound one
//! compared as `?3 <> 0`; `LIMIT +?n` (see `sessions::store`; `db::pg` drops the `+`);
//! `CAST(?1 AS TEXT) IS NULL OR account_id = ?1` (PostgreSQL must know the parameter's type);
//! `EXISTS (…)` read as a boolean column; and, in [`clear_unwatched_completion`], an `UPDATE`
//! whose subquery names the updated table (`runs.account_id`).

use crate::db::{Connection, OptionalExtension, Row, params};
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    AgentActivityCondition, AgentPromptBlock, AgentSessionTriggerSummary, AgentTriggerInfo, AgentTriggerInfoPrompt,
    AgentTriggerSource, SessionInfo, TriggerContinuation, TriggerFiringInfo,
};
use seed_agents_protocol::wire;
use serde::{Deserialize, Serialize};

use super::validate::{Normalized, Prompt};
use crate::access::{self, Access, Need};
use crate::db::Cbor;
use crate::error::{ApiError, ApiResult};

mod firing;
mod monitors;
mod writes;

pub(crate) use firing::*;
pub(crate) use monitors::*;
pub use monitors::{Backlog, Cursor, Watermark};
pub(crate) use writes::*;

/// What a trigger-scoped action answers when the trigger is missing or invisible.
pub(crate) const NOT_FOUND: &str = "Agent trigger not found";

/// Firings `GetAgentTrigger` shows, newest first.
pub(crate) const FIRINGS_SHOWN: i64 = 50;
/// Sessions `GetAgentTrigger` shows, newest first.
pub(crate) const SESSIONS_SHOWN: i64 = 50;

const COLUMNS: &str = "id, account_id, agent_id, name, enabled, source_cbor, prompt, prompt_cbor, continuation_cbor, \
     created_at, updated_at, last_checked_at, last_fired_at, last_error, merged_into";

fn blob_error(index: usize, error: wire::WireError) -> crate::db::Error {
    crate::db::Error::column(index, error)
}

fn info_from_row(row: &Row<'_>) -> crate::db::Result<AgentTriggerInfo> {
    let source: Vec<u8> = row.get(5)?;
    let source: AgentTriggerSource = wire::from_slice(&source).map_err(|error| blob_error(5, error))?;
    let prompt_text: String = row.get(6)?;
    let prompt_blocks: Option<Vec<u8>> = row.get(7)?;
    let prompt = match prompt_blocks {
        Some(bytes) => AgentTriggerInfoPrompt::Array(
            wire::from_slice::<Vec<AgentPromptBlock>>(&bytes).map_err(|error| blob_error(7, error))?,
        ),
        None => AgentTriggerInfoPrompt::String(prompt_text),
    };
    let continuation: Option<Vec<u8>> = row.get(8)?;
    let continuation = match continuation {
        Some(bytes) => Some(wire::from_slice::<TriggerContinuation>(&bytes).map_err(|error| blob_error(8, error))?),
        None => None,
    };
    Ok(AgentTriggerInfo {
        extra: Default::default(),
        id: row.get::<_, String>(0)?.into(),
        account: row.get(1)?,
        agent_id: row.get::<_, String>(2)?.into(),
        name: row.get(3)?,
        enabled: row.get(4)?,
        source,
        prompt,
        continuation,
        created_at: row.get(9)?,
        updated_at: row.get(10)?,
        last_checked_at: row.get(11)?,
        last_fired_at: row.get(12)?,
        last_error: row.get(13)?,
        merged_into: row.get(14)?,
    })
}

/// One trigger, or `None` when it does not exist.
pub(crate) fn load(conn: &Connection, trigger_id: &str) -> ApiResult<Option<AgentTriggerInfo>> {
    Ok(conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM agent_triggers WHERE id = ?1"))?
        .query_row(params![trigger_id], info_from_row)
        .optional()?)
}

/// An agent's triggers, most recently updated first.
pub(crate) fn list(conn: &Connection, agent_id: &str) -> ApiResult<Vec<AgentTriggerInfo>> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM agent_triggers WHERE agent_id = ?1 ORDER BY updated_at DESC, id DESC"
    ))?;
    let rows = statement.query_map(params![agent_id], info_from_row)?;
    Ok(rows.collect::<crate::db::Result<_>>()?)
}

/// An agent's triggers as the system prompt lists them: `(name, enabled)`, by name.
pub(crate) fn names(conn: &Connection, agent_id: &str) -> ApiResult<Vec<(String, bool)>> {
    let mut statement =
        conn.prepare_cached("SELECT name, enabled FROM agent_triggers WHERE agent_id = ?1 ORDER BY name, id")?;
    let rows = statement.query_map(params![agent_id], |row| Ok((row.get(0)?, row.get::<_, i64>(1)? != 0)))?;
    Ok(rows.collect::<crate::db::Result<_>>()?)
}

/// The trigger and the caller's access to its agent: 404 `Agent trigger not found` when the
/// trigger is missing or its agent invisible, 403 when the role is too low.
pub(crate) fn require(
    conn: &Connection,
    trigger_id: &str,
    account_id: &str,
    need: Need,
) -> ApiResult<(AgentTriggerInfo, Access)> {
    let trigger = load(conn, trigger_id)?.ok_or_else(|| ApiError::not_found(NOT_FOUND))?;
    let access = access::resolve(conn, &trigger.agent_id, account_id)?.ok_or_else(|| ApiError::not_found(NOT_FOUND))?;
    access::check(&access, need)?;
    Ok((trigger, access))
}

const FIRING_COLUMNS: &str =
    "f.id, f.activity_key, f.activity_summary, f.created_at, f.error, f.matched_cbor, f.run_id, f.session_id, f.status";

fn firing_from_row(row: &Row<'_>) -> crate::db::Result<TriggerFiringInfo> {
    Ok(TriggerFiringInfo {
        extra: Default::default(),
        id: row.get::<_, String>(0)?.into(),
        activity_key: row.get(1)?,
        activity_summary: row.get(2)?,
        created_at: row.get(3)?,
        error: row.get(4)?,
        matched_conditions: matched(row, 5)?,
        run_id: row.get::<_, Option<String>>(6)?.map(Into::into),
        session_id: row.get::<_, Option<String>>(7)?.map(Into::into),
        status: row.get(8)?,
    })
}

fn matched(row: &Row<'_>, index: usize) -> crate::db::Result<Option<Vec<AgentActivityCondition>>> {
    let bytes: Option<Vec<u8>> = row.get(index)?;
    bytes.map(|bytes| wire::from_slice(&bytes).map_err(|error| blob_error(index, error))).transpose()
}

/// A trigger's firings, newest first (at most [`FIRINGS_SHOWN`]).
pub(crate) fn firings(conn: &Connection, trigger_id: &str) -> ApiResult<Vec<TriggerFiringInfo>> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {FIRING_COLUMNS} FROM trigger_firings f WHERE f.trigger_id = ?1
         ORDER BY f.created_at DESC, f.id DESC LIMIT +?2"
    ))?;
    let rows = statement.query_map(params![trigger_id, FIRINGS_SHOWN], firing_from_row)?;
    Ok(rows.collect::<crate::db::Result<_>>()?)
}

/// The ids of the sessions a trigger's firings opened, newest first (at most [`SESSIONS_SHOWN`]).
pub(crate) fn session_ids(conn: &Connection, trigger_id: &str) -> ApiResult<Vec<String>> {
    let mut statement = conn.prepare_cached(
        "SELECT f.session_id FROM trigger_firings f WHERE f.trigger_id = ?1 AND f.session_id IS NOT NULL
         ORDER BY f.created_at DESC, f.id DESC LIMIT +?2",
    )?;
    let rows = statement.query_map(params![trigger_id, SESSIONS_SHOWN], |row| row.get(0))?;
    Ok(rows.collect::<crate::db::Result<_>>()?)
}

/// Which trigger firing opened session `session_id`, as `SessionInfo.startedByTrigger` shows it.
pub(crate) fn attribution(conn: &Connection, session_id: &str) -> ApiResult<Option<AgentSessionTriggerSummary>> {
    Ok(conn
        .prepare_cached(
            "SELECT f.id, f.activity_key, f.activity_summary, f.created_at, f.matched_cbor, f.source_cbor,
                    f.trigger_id, t.name
             FROM trigger_firings f JOIN agent_triggers t ON t.id = f.trigger_id
             WHERE f.session_id = ?1 ORDER BY f.created_at, f.id LIMIT 1",
        )?
        .query_row(params![session_id], |row| {
            let source: Vec<u8> = row.get(5)?;
            Ok(AgentSessionTriggerSummary {
                extra: Default::default(),
                firing_id: row.get::<_, String>(0)?.into(),
                activity_key: row.get(1)?,
                activity_summary: row.get(2)?,
                fired_at: row.get(3)?,
                matched_conditions: matched(row, 4)?,
                source: wire::from_slice(&source).map_err(|error| blob_error(5, error))?,
                trigger_id: row.get::<_, String>(6)?.into(),
                trigger_name: row.get(7)?,
            })
        })
        .optional()?)
}

/// Fills `startedByTrigger` on each session a trigger firing opened.
pub(crate) fn attribute(conn: &Connection, sessions: &mut [SessionInfo]) -> ApiResult<()> {
    for session in sessions {
        session.started_by_trigger = attribution(conn, &session.id)?;
    }
    Ok(())
}

/// The firing that opened session `session_id`, as `GetSession.triggerContext` shows it.
pub(crate) fn context(
    conn: &Connection,
    session_id: &str,
) -> ApiResult<Option<seed_agents_protocol::generated::AgentSessionTriggerContext>> {
    use seed_agents_protocol::generated::AgentSessionTriggerContext;
    Ok(conn
        .prepare_cached(
            "SELECT f.id, f.activity_key, f.activity_summary, f.created_at, f.matched_cbor, f.source_cbor,
                    f.trigger_id, t.name, f.activity_cbor, f.status, f.error, t.prompt, t.prompt_cbor
             FROM trigger_firings f JOIN agent_triggers t ON t.id = f.trigger_id
             WHERE f.session_id = ?1 ORDER BY f.created_at, f.id LIMIT 1",
        )?
        .query_row(params![session_id], |row| {
            let source: Vec<u8> = row.get(5)?;
            let activity: Vec<u8> = row.get(8)?;
            let blocks: Option<Vec<u8>> = row.get(12)?;
            Ok(AgentSessionTriggerContext {
                extra: Default::default(),
                firing_id: row.get::<_, String>(0)?.into(),
                activity_key: row.get(1)?,
                activity_summary: row.get(2)?,
                fired_at: row.get(3)?,
                matched_conditions: matched(row, 4)?,
                source: wire::from_slice(&source).map_err(|error| blob_error(5, error))?,
                trigger_id: row.get::<_, String>(6)?.into(),
                trigger_name: row.get(7)?,
                activity: wire::from_slice(&activity).map_err(|error| blob_error(8, error))?,
                status: row.get(9)?,
                error: row.get(10)?,
                prompt: row.get(11)?,
                prompt_blocks: blocks
                    .map(|bytes| wire::from_slice(&bytes).map_err(|error| blob_error(12, error)))
                    .transpose()?,
            })
        })
        .optional()?)
}
