//! The trigger tables (`agent_triggers`, `trigger_firings`, `trigger_schedule_state`,
//! `activity_watermarks`): trigger and firing rows read back as the protocol's
//! `AgentTriggerInfo`, `TriggerFiringInfo` and session attributions; the access check for
//! trigger-scoped actions; every insert and update of the actions, of firing, and of the
//! monitors' progress.
//!
//! SQLite-only constructs, for a second backend: `INSERT … ON CONFLICT (…) DO NOTHING` and
//! `DO UPDATE SET … = excluded.…` (PostgreSQL spells them the same); booleans stored as 0/1
//! integers (`enabled = 1`); `CASE WHEN ?3 THEN 0 …` on a bound boolean; `LIMIT +?n` (see
//! `sessions::store`); `?1 IS NULL OR account_id = ?1` on an untyped parameter (PostgreSQL needs
//! a cast); `EXISTS (…)` read as a boolean column; and, in [`clear_unwatched_completion`], an
//! `UPDATE` whose subquery names the updated table (`runs.account_id`).

use ipld_core::ipld::Ipld;
use rusqlite::{Connection, OptionalExtension, Row, params};
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

/// What a trigger-scoped action answers when the trigger is missing or invisible.
pub(crate) const NOT_FOUND: &str = "Agent trigger not found";

/// Firings `GetAgentTrigger` shows, newest first.
pub(crate) const FIRINGS_SHOWN: i64 = 50;
/// Sessions `GetAgentTrigger` shows, newest first.
pub(crate) const SESSIONS_SHOWN: i64 = 50;

const COLUMNS: &str = "id, account_id, agent_id, name, enabled, source_cbor, prompt, prompt_cbor, continuation_cbor, \
     created_at, updated_at, last_checked_at, last_fired_at, last_error, merged_into";

fn blob_error(index: usize, error: wire::WireError) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Blob, Box::new(error))
}

fn info_from_row(row: &Row<'_>) -> rusqlite::Result<AgentTriggerInfo> {
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
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// An agent's triggers as the system prompt lists them: `(name, enabled)`, by name.
pub(crate) fn names(conn: &Connection, agent_id: &str) -> ApiResult<Vec<(String, bool)>> {
    let mut statement =
        conn.prepare_cached("SELECT name, enabled FROM agent_triggers WHERE agent_id = ?1 ORDER BY name, id")?;
    let rows = statement.query_map(params![agent_id], |row| Ok((row.get(0)?, row.get::<_, i64>(1)? != 0)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
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

fn firing_from_row(row: &Row<'_>) -> rusqlite::Result<TriggerFiringInfo> {
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

fn matched(row: &Row<'_>, index: usize) -> rusqlite::Result<Option<Vec<AgentActivityCondition>>> {
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
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The ids of the sessions a trigger's firings opened, newest first (at most [`SESSIONS_SHOWN`]).
pub(crate) fn session_ids(conn: &Connection, trigger_id: &str) -> ApiResult<Vec<String>> {
    let mut statement = conn.prepare_cached(
        "SELECT f.session_id FROM trigger_firings f WHERE f.trigger_id = ?1 AND f.session_id IS NOT NULL
         ORDER BY f.created_at DESC, f.id DESC LIMIT +?2",
    )?;
    let rows = statement.query_map(params![trigger_id, SESSIONS_SHOWN], |row| row.get(0))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
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

// ---------------------------------------------------------------------------------------------
// The trigger actions' writes.

/// Inserts trigger `id` for `agent_id` (stored under `owner_id`), without a webhook secret.
pub(crate) fn insert(
    conn: &Connection,
    id: &str,
    owner_id: &str,
    agent_id: &str,
    trigger: &Normalized,
    now: i64,
) -> ApiResult<()> {
    conn.prepare_cached(
        "INSERT INTO agent_triggers (id, account_id, agent_id, name, enabled, source_cbor, prompt, prompt_cbor,
                                     continuation_cbor, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10)",
    )?
    .execute(params![
        id,
        owner_id,
        agent_id,
        trigger.name,
        trigger.enabled,
        Cbor(&trigger.source),
        trigger.prompt.markdown,
        trigger.prompt.blocks.as_ref().map(Cbor),
        trigger.continuation.as_ref().map(Cbor),
        now
    ])?;
    Ok(())
}

/// Inserts an enabled trigger `id` for `agent_id` (stored under `owner_id`) with a text prompt
/// and no continuation (an agent's default trigger).
#[allow(clippy::too_many_arguments)]
pub(crate) fn insert_enabled(
    conn: &Connection,
    id: &str,
    owner_id: &str,
    agent_id: &str,
    name: &str,
    source: &AgentTriggerSource,
    prompt: &str,
    now: i64,
) -> ApiResult<()> {
    conn.prepare_cached(
        "INSERT INTO agent_triggers
           (id, account_id, agent_id, name, enabled, source_cbor, prompt, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, ?7, ?7)",
    )?
    .execute(params![id, owner_id, agent_id, name, Cbor(source), prompt, now])?;
    Ok(())
}

/// Replaces every field of trigger `id` with `trigger`, its webhook secret cleared, `updatedAt`
/// set to `updated_at`.
pub(crate) fn replace(conn: &Connection, id: &str, trigger: &Normalized, updated_at: i64) -> ApiResult<()> {
    conn.prepare_cached(
        "UPDATE agent_triggers SET name = ?2, enabled = ?3, source_cbor = ?4, prompt = ?5, prompt_cbor = ?6,
                continuation_cbor = ?7, webhook_secret = NULL, updated_at = ?8
         WHERE id = ?1",
    )?
    .execute(params![
        id,
        trigger.name,
        trigger.enabled,
        Cbor(&trigger.source),
        trigger.prompt.markdown,
        trigger.prompt.blocks.as_ref().map(Cbor),
        trigger.continuation.as_ref().map(Cbor),
        updated_at
    ])?;
    Ok(())
}

/// Renames trigger `id`.
pub(crate) fn set_name(conn: &Connection, id: &str, name: &str) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET name = ?2 WHERE id = ?1")?.execute(params![id, name])?;
    Ok(())
}

/// Enables or disables trigger `id`.
pub(crate) fn set_enabled(conn: &Connection, id: &str, enabled: bool) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET enabled = ?2 WHERE id = ?1")?.execute(params![id, enabled])?;
    Ok(())
}

/// Replaces trigger `id`'s prompt.
pub(crate) fn set_prompt(conn: &Connection, id: &str, prompt: &Prompt) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET prompt = ?2, prompt_cbor = ?3 WHERE id = ?1")?.execute(params![
        id,
        prompt.markdown,
        prompt.blocks.as_ref().map(Cbor)
    ])?;
    Ok(())
}

/// Replaces (or, with `None`, removes) trigger `id`'s continuation.
pub(crate) fn set_continuation(
    conn: &Connection,
    id: &str,
    continuation: Option<&TriggerContinuation>,
) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET continuation_cbor = ?2 WHERE id = ?1")?
        .execute(params![id, continuation.map(Cbor)])?;
    Ok(())
}

/// Gives trigger `id` another action: the prompt (markdown, and blocks when it has them) and the
/// continuation of another trigger.
pub(crate) fn set_action(
    conn: &Connection,
    id: &str,
    markdown: &str,
    blocks: Option<&Vec<AgentPromptBlock>>,
    continuation: Option<&TriggerContinuation>,
) -> ApiResult<()> {
    conn.prepare_cached(
        "UPDATE agent_triggers SET prompt = ?2, prompt_cbor = ?3, continuation_cbor = ?4 WHERE id = ?1",
    )?
    .execute(params![id, markdown, blocks.map(Cbor), continuation.map(Cbor)])?;
    Ok(())
}

/// Replaces trigger `id`'s source.
pub(crate) fn set_source(conn: &Connection, id: &str, source: &AgentTriggerSource) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET source_cbor = ?2 WHERE id = ?1")?
        .execute(params![id, Cbor(source)])?;
    Ok(())
}

/// Sets trigger `id`'s `updatedAt`.
pub(crate) fn set_updated_at(conn: &Connection, id: &str, updated_at: i64) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET updated_at = ?2 WHERE id = ?1")?.execute(params![id, updated_at])?;
    Ok(())
}

/// Marks trigger `id` merged into `survivor`: disabled, `mergedInto` set, `updatedAt` moved.
pub(crate) fn merge_into(conn: &Connection, id: &str, survivor: &str, updated_at: i64) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET merged_into = ?2, enabled = 0, updated_at = ?3 WHERE id = ?1")?
        .execute(params![id, survivor, updated_at])?;
    Ok(())
}

/// Deletes trigger `id` (its firings go by cascade); triggers merged into it are released first.
pub(crate) fn delete(conn: &Connection, id: &str) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET merged_into = NULL WHERE merged_into = ?1")?.execute(params![id])?;
    conn.prepare_cached("DELETE FROM agent_triggers WHERE id = ?1")?.execute(params![id])?;
    Ok(())
}

/// Stores trigger `id`'s sealed webhook secret (or, with `None`, removes it).
pub(crate) fn set_webhook_secret(conn: &Connection, id: &str, sealed: Option<&[u8]>) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET webhook_secret = ?2 WHERE id = ?1")?.execute(params![id, sealed])?;
    Ok(())
}

/// The owner of trigger `id` and its sealed webhook secret, when the trigger exists.
pub(crate) fn webhook_secret(conn: &Connection, id: &str) -> ApiResult<Option<(String, Option<Vec<u8>>)>> {
    Ok(conn
        .prepare_cached("SELECT account_id, webhook_secret FROM agent_triggers WHERE id = ?1")?
        .query_row(params![id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?)
}

// ---------------------------------------------------------------------------------------------
// Firing.

/// Whether `key` already fired a trigger merged into `trigger_id`.
pub(crate) fn handled_by_merged(conn: &Connection, trigger_id: &str, key: &str) -> ApiResult<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM trigger_firings f JOIN agent_triggers t ON t.id = f.trigger_id
                             WHERE t.merged_into = ?1 AND f.activity_key = ?2)",
        )?
        .query_row(params![trigger_id, key], |row| row.get(0))?)
}

/// A firing row to insert.
#[derive(Debug)]
pub(crate) struct NewFiring<'a> {
    /// Its id.
    pub id: &'a str,
    /// The trigger's owner.
    pub account_id: &'a str,
    /// The trigger.
    pub trigger_id: &'a str,
    /// The activity's firing key.
    pub activity_key: &'a str,
    /// The one-line summary.
    pub activity_summary: &'a str,
    /// The activity, as canonical CBOR (the caller checked its size).
    pub activity: &'a [u8],
    /// The trigger's source when it fired.
    pub source: &'a AgentTriggerSource,
    /// The conditions of a compound trigger that matched.
    pub matched: Option<&'a Vec<AgentActivityCondition>>,
    /// The firing whose run's completion caused this one.
    pub parent_firing_id: Option<&'a str>,
    /// Its status.
    pub status: &'a str,
}

/// Inserts `firing` unless its `(trigger, activity key)` pair already fired; whether it did.
pub(crate) fn insert_firing(conn: &Connection, firing: &NewFiring<'_>, now: i64) -> ApiResult<bool> {
    let inserted = conn
        .prepare_cached(
            "INSERT INTO trigger_firings (id, account_id, trigger_id, activity_key, activity_summary, activity_cbor,
                                          source_cbor, matched_cbor, parent_firing_id, status, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11)
             ON CONFLICT (trigger_id, activity_key) DO NOTHING",
        )?
        .execute(params![
            firing.id,
            firing.account_id,
            firing.trigger_id,
            firing.activity_key,
            firing.activity_summary,
            firing.activity,
            Cbor(firing.source),
            firing.matched.map(Cbor),
            firing.parent_firing_id,
            firing.status,
            now
        ])?;
    Ok(inserted > 0)
}

/// Links firing `id` to the session it opened and the run answering it.
pub(crate) fn set_firing_thread(conn: &Connection, id: &str, session_id: &str, run_id: &str) -> ApiResult<()> {
    conn.prepare_cached("UPDATE trigger_firings SET session_id = ?2, run_id = ?3 WHERE id = ?1")?
        .execute(params![id, session_id, run_id])?;
    Ok(())
}

/// Records how firing `id` ended: its status, why it failed, the run it reached.
pub(crate) fn set_firing_outcome(
    conn: &Connection,
    id: &str,
    status: &str,
    error: Option<&str>,
    run_id: Option<&str>,
    now: i64,
) -> ApiResult<()> {
    conn.prepare_cached(
        "UPDATE trigger_firings SET status = ?2, error = ?3, run_id = ?4, updated_at = ?5 WHERE id = ?1",
    )?
    .execute(params![id, status, error, run_id, now])?;
    Ok(())
}

/// Stamps trigger `id` fired at `now`, its last error cleared.
pub(crate) fn mark_fired(conn: &Connection, id: &str, now: i64) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET last_fired_at = ?2, last_error = NULL WHERE id = ?1")?
        .execute(params![id, now])?;
    Ok(())
}

/// Records the outcome of the run firing `firing_id` started (`status`, and `error` when it
/// failed, which the firing's trigger shows too).
pub(crate) fn settle_firing(
    conn: &Connection,
    firing_id: &str,
    status: &str,
    error: Option<&str>,
    now: i64,
) -> ApiResult<()> {
    conn.prepare_cached("UPDATE trigger_firings SET status = ?2, error = ?3, updated_at = ?4 WHERE id = ?1")?
        .execute(params![firing_id, status, error, now])?;
    if let Some(error) = error {
        conn.prepare_cached(
            "UPDATE agent_triggers SET last_error = ?2
             WHERE id = (SELECT trigger_id FROM trigger_firings WHERE id = ?1)",
        )?
        .execute(params![firing_id, error])?;
    }
    Ok(())
}

/// The trigger of firing `firing_id` and the firing whose run's completion caused it, when the
/// firing exists.
pub(crate) fn firing_parent(conn: &Connection, firing_id: &str) -> ApiResult<Option<(String, Option<String>)>> {
    Ok(conn
        .prepare_cached("SELECT trigger_id, parent_firing_id FROM trigger_firings WHERE id = ?1")?
        .query_row(params![firing_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?)
}

/// The input of the run the first firing that opened session `session_id` started, read
/// leniently (null when undecodable); `None` when no firing opened it.
pub(crate) fn opening_run_input(conn: &Connection, session_id: &str) -> ApiResult<Option<Ipld>> {
    let opening: Option<Vec<u8>> = conn
        .prepare_cached(
            "SELECT r.input_cbor FROM trigger_firings f JOIN runs r ON r.id = f.run_id
             WHERE f.session_id = ?1 ORDER BY f.created_at, f.id LIMIT 1",
        )?
        .query_row(params![session_id], |row| row.get(0))
        .optional()?;
    Ok(opening.map(|bytes| wire::decode_ipld(&bytes).unwrap_or(Ipld::Null)))
}

/// Clears the run-completed monitor's mark (`runs.completion_pending`) on run `run_id` when
/// nothing can watch its end: it was not started by a firing and its account has no enabled
/// trigger. Whether the mark stays (the end is left for the monitor).
pub(crate) fn clear_unwatched_completion(conn: &Connection, run_id: &str) -> ApiResult<bool> {
    let settled = conn
        .prepare_cached(
            "UPDATE runs SET completion_pending = 0
         WHERE id = ?1 AND trigger_firing_id IS NULL AND NOT EXISTS (
             SELECT 1 FROM agent_triggers t
             WHERE t.account_id = runs.account_id AND t.enabled = 1 AND t.merged_into IS NULL)",
        )?
        .execute(params![run_id])?;
    Ok(settled == 0)
}

// ---------------------------------------------------------------------------------------------
// The monitors.

/// An enabled trigger as a monitor reads it. Sources this build cannot decode are left out: they
/// are not sources it could run.
#[derive(Debug, Clone)]
pub(crate) struct Enabled {
    /// The trigger.
    pub id: String,
    /// Its owner.
    pub account_id: String,
    /// When it was created.
    pub created_at: i64,
    /// Its source.
    pub source: AgentTriggerSource,
}

fn enabled(rows: Vec<(String, String, i64, Vec<u8>)>) -> Vec<Enabled> {
    rows.into_iter()
        .filter_map(|(id, account_id, created_at, source)| {
            let source = wire::from_slice(&source).ok()?;
            Some(Enabled { id, account_id, created_at, source })
        })
        .collect()
}

/// The enabled triggers of `account_id` not merged into another (the run-completed candidates).
pub(crate) fn enabled_unmerged(conn: &Connection, account_id: &str) -> ApiResult<Vec<Enabled>> {
    let rows = conn
        .prepare_cached(
            "SELECT id, account_id, created_at, source_cbor FROM agent_triggers
             WHERE account_id = ?1 AND enabled = 1 AND merged_into IS NULL",
        )?
        .query_map(params![account_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(enabled(rows))
}

/// Enabled triggers (one account's, when given), oldest first.
pub(crate) fn enabled_triggers(conn: &Connection, account_id: Option<&str>) -> ApiResult<Vec<Enabled>> {
    let rows = conn
        .prepare_cached(
            "SELECT id, account_id, created_at, source_cbor FROM agent_triggers
             WHERE enabled = 1 AND (?1 IS NULL OR account_id = ?1) ORDER BY created_at, id",
        )?
        .query_map([account_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(enabled(rows))
}

/// An enabled trigger with the schedule monitor's progress on it.
#[derive(Debug, Clone)]
pub(crate) struct Scheduled {
    /// The trigger and its source.
    pub trigger: Enabled,
    /// The last occurrence fired.
    pub last_scheduled_at: Option<i64>,
    /// Why it last failed.
    pub last_error: Option<String>,
}

/// Every enabled trigger, oldest first, with the schedule monitor's progress.
pub(crate) fn enabled_with_schedule_state(conn: &Connection) -> ApiResult<Vec<Scheduled>> {
    type Raw = (String, String, i64, Vec<u8>, Option<i64>, Option<String>);
    let rows: Vec<Raw> = conn
        .prepare_cached(
            "SELECT t.id, t.account_id, t.created_at, t.source_cbor, s.last_scheduled_at, t.last_error
             FROM agent_triggers t LEFT JOIN trigger_schedule_state s ON s.trigger_id = t.id
             WHERE t.enabled = 1 ORDER BY t.created_at, t.id",
        )?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows
        .into_iter()
        .filter_map(|(id, account_id, created_at, source, last_scheduled_at, last_error)| {
            let source = wire::from_slice(&source).ok()?;
            let trigger = Enabled { id, account_id, created_at, source };
            Some(Scheduled { trigger, last_scheduled_at, last_error })
        })
        .collect())
}

/// Stamps each of `ids` checked at `now`.
pub(crate) fn mark_checked(conn: &Connection, ids: &[String], now: i64) -> ApiResult<()> {
    let mut statement = conn.prepare_cached("UPDATE agent_triggers SET last_checked_at = ?1 WHERE id = ?2")?;
    for id in ids {
        statement.execute(params![now, id])?;
    }
    Ok(())
}

/// Whether trigger `id` exists.
pub(crate) fn exists(conn: &Connection, id: &str) -> ApiResult<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM agent_triggers WHERE id = ?1")?
        .query_row(params![id], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Records schedule occurrence `scheduled_at` of trigger `id` fired (so it is never due again).
pub(crate) fn save_schedule_state(conn: &Connection, id: &str, scheduled_at: i64, now: i64) -> ApiResult<()> {
    conn.prepare_cached(
        "INSERT INTO trigger_schedule_state (trigger_id, last_scheduled_at, updated_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (trigger_id) DO UPDATE SET last_scheduled_at = excluded.last_scheduled_at,
                                                updated_at = excluded.updated_at",
    )?
    .execute(params![id, scheduled_at, now])?;
    Ok(())
}

/// Stamps scheduled trigger `id` fired at `now`, its error cleared, and disabled when `once`.
pub(crate) fn mark_schedule_fired(conn: &Connection, id: &str, once: bool, now: i64) -> ApiResult<()> {
    conn.prepare_cached(
        "UPDATE agent_triggers SET last_fired_at = ?2, last_error = NULL,
                enabled = CASE WHEN ?3 THEN 0 ELSE enabled END
         WHERE id = ?1",
    )?
    .execute(params![id, now, once])?;
    Ok(())
}

/// Records why trigger `id` last failed.
pub(crate) fn set_last_error(conn: &Connection, id: &str, message: &str) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET last_error = ?2 WHERE id = ?1")?.execute(params![id, message])?;
    Ok(())
}

/// What the activity monitor remembers of an account's feed, stored as CBOR
/// `{seenKeys: [..], backlog?: {pageToken, until: [..]}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// Keys of the events handled at the top of the feed, newest first.
    #[serde(rename = "seenKeys")]
    pub seen_keys: Vec<String>,
    /// A walk down the feed that ran out of pages before it met handled events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog: Option<Backlog>,
}

/// Where the walk through a backlog goes on, and where it ends.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backlog {
    /// The page token to continue from.
    #[serde(rename = "pageToken")]
    pub page_token: String,
    /// Keys of the newest events handled before the backlog arrived: meeting one ends it.
    pub until: Vec<String>,
}

/// One account's watermark row, as read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Watermark {
    /// `None` until a poll succeeded (no baseline yet).
    pub cursor: Option<Cursor>,
    /// When a poll last started.
    pub last_poll_at: Option<i64>,
    /// When a poll last succeeded.
    pub last_success_at: Option<i64>,
    /// Why the last poll failed (cleared by a success).
    pub last_error: Option<String>,
}

/// The watermark of `account` on `server` (all `None` when there is none).
pub(crate) fn watermark(conn: &Connection, account: &str, server: &str) -> ApiResult<Watermark> {
    Ok(conn
        .prepare_cached(
            "SELECT cursor_cbor, last_poll_at, last_success_at, last_error FROM activity_watermarks
             WHERE account_id = ?1 AND server_url = ?2",
        )?
        .query_row(params![account, server], |row| {
            Ok(Watermark {
                cursor: row.get::<_, Option<Cbor<Cursor>>>(0)?.map(|Cbor(cursor)| cursor),
                last_poll_at: row.get(1)?,
                last_success_at: row.get(2)?,
                last_error: row.get(3)?,
            })
        })
        .optional()?
        .unwrap_or_default())
}

/// Stores `cursor` after a successful poll that started at `poll_at` and ended at `now`.
pub(crate) fn save_watermark(
    conn: &Connection,
    account: &str,
    server: &str,
    cursor: &Cursor,
    poll_at: i64,
    now: i64,
) -> ApiResult<()> {
    conn.prepare_cached(
        "INSERT INTO activity_watermarks (account_id, server_url, cursor_cbor, last_poll_at, last_success_at, last_error)
         VALUES (?1, ?2, ?3, ?4, ?5, NULL)
         ON CONFLICT (account_id, server_url) DO UPDATE SET cursor_cbor = excluded.cursor_cbor,
             last_poll_at = excluded.last_poll_at, last_success_at = excluded.last_success_at, last_error = NULL",
    )?
    .execute(params![account, server, Cbor(cursor), poll_at, now])?;
    Ok(())
}

/// Records a failed poll; a row that did not exist is created without a cursor.
pub(crate) fn record_watermark_error(
    conn: &Connection,
    account: &str,
    server: &str,
    poll_at: i64,
    message: &str,
) -> ApiResult<()> {
    conn.prepare_cached(
        "INSERT INTO activity_watermarks (account_id, server_url, cursor_cbor, last_poll_at, last_error)
         VALUES (?1, ?2, NULL, ?3, ?4)
         ON CONFLICT (account_id, server_url) DO UPDATE SET last_poll_at = excluded.last_poll_at,
             last_error = excluded.last_error",
    )?
    .execute(params![account, server, poll_at, message])?;
    Ok(())
}
