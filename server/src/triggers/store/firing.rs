//! Firing: the `(trigger, activity key)` firing row (inserted at most once), its outcome, the
//! chain of firings, and the run a firing opened.

use super::*;

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

/// Links firing `id` to the session its failure opened (`onFailure: 'thread'`), its run kept.
pub(crate) fn set_firing_session(conn: &Connection, id: &str, session_id: &str) -> ApiResult<()> {
    conn.prepare_cached("UPDATE trigger_firings SET session_id = ?2 WHERE id = ?1")?
        .execute(params![id, session_id])?;
    Ok(())
}

/// What a firing recorded about its activity.
#[derive(Debug, Clone)]
pub(crate) struct FiringActivity {
    /// The trigger that fired.
    pub trigger_id: String,
    /// The activity's one-line summary.
    pub summary: String,
    /// The activity as stored (an open map; empty when the stored bytes are not one).
    pub value: std::collections::BTreeMap<String, seed_agents_protocol::Value>,
}

/// What firing `id` recorded about its activity, when it exists.
pub(crate) fn firing_activity(conn: &Connection, id: &str) -> ApiResult<Option<FiringActivity>> {
    let row: Option<(String, String, Vec<u8>)> = conn
        .prepare_cached("SELECT trigger_id, activity_summary, activity_cbor FROM trigger_firings WHERE id = ?1")?
        .query_row(params![id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?;
    Ok(row.map(|(trigger_id, summary, bytes)| FiringActivity {
        trigger_id,
        summary,
        value: wire::from_slice(&bytes).unwrap_or_default(),
    }))
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
/// nothing can watch its end: it was not started by a firing, and it is a workflow run
/// (run-completed triggers watch agent runs) or its account has no enabled trigger. Whether the
/// mark stays (the end is left for the monitor).
pub(crate) fn clear_unwatched_completion(conn: &Connection, run_id: &str) -> ApiResult<bool> {
    let settled = conn
        .prepare_cached(
            "UPDATE runs SET completion_pending = 0
         WHERE id = ?1 AND trigger_firing_id IS NULL AND (kind != 'agent' OR NOT EXISTS (
             SELECT 1 FROM agent_triggers t
             WHERE t.account_id = runs.account_id AND t.enabled = 1 AND t.merged_into IS NULL))",
        )?
        .execute(params![run_id])?;
    Ok(settled == 0)
}
