//! Ended runs the run-completed trigger monitor has not handled (`runs.completion_pending`, read
//! through the partial index `runs_completion_pending`, which holds exactly those: agent runs,
//! and workflow runs answering a trigger firing; each `WHERE` repeats its condition so SQLite can
//! use it; `INDEXED BY` is SQLite's, and `db::pg` drops it for PostgreSQL, whose planner finds
//! the partial index itself).

use super::*;

/// Whether an ended run is left for the run-completed monitor.
pub(crate) fn completion_pending(conn: &Connection) -> crate::db::Result<bool> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM runs INDEXED BY runs_completion_pending
                        WHERE completion_pending = 1 AND finished_at IS NOT NULL
                          AND (kind = 'agent' OR trigger_firing_id IS NOT NULL))",
    )?
    .query_row([], |row| row.get(0))
}

/// An ended run as the run-completed monitor reads it.
#[derive(Debug, Clone)]
pub(crate) struct Completed {
    /// The run.
    pub id: String,
    /// An agent turn, or a workflow answering a trigger firing.
    pub kind: RunInfoKind,
    /// The account it is stored under.
    pub account_id: String,
    /// Its agent.
    pub agent_id: Option<String>,
    /// Its session.
    pub session_id: Option<String>,
    /// Its name.
    pub title: Option<String>,
    /// How it ended.
    pub status: RunStatus,
    /// When it ended.
    pub finished_at: i64,
    /// The trigger firing it answers.
    pub firing_id: Option<String>,
    /// Its failure's `message`, when it has one.
    pub error: Option<String>,
}

/// Up to `limit` ended runs left for the monitor, oldest end first.
pub(crate) fn pending_completions(conn: &Connection, limit: i64) -> crate::db::Result<Vec<Completed>> {
    conn.prepare_cached(
        "SELECT r.id, r.account_id, r.agent_id, r.session_id, r.title, r.status, r.finished_at, r.trigger_firing_id,
                r.error_cbor, r.kind
         FROM runs r INDEXED BY runs_completion_pending
         WHERE r.completion_pending = 1 AND r.finished_at IS NOT NULL
           AND (r.kind = 'agent' OR r.trigger_firing_id IS NOT NULL)
         ORDER BY r.finished_at, r.id LIMIT ?1",
    )?
    .query_map(params![limit], |row| {
        let error: Option<Vec<u8>> = row.get(8)?;
        Ok(Completed {
            id: row.get(0)?,
            kind: row.get::<_, Text<RunInfoKind>>(9)?.0,
            account_id: row.get(1)?,
            agent_id: row.get(2)?,
            session_id: row.get(3)?,
            title: row.get(4)?,
            status: row.get::<_, Text<RunStatus>>(5)?.0,
            finished_at: row.get(6)?,
            firing_id: row.get(7)?,
            error: error.and_then(|bytes| error_message(&bytes)),
        })
    })?
    .collect()
}

/// The `message` of a stored run failure (none when the column is not a map holding one).
fn error_message(bytes: &[u8]) -> Option<String> {
    match wire::from_slice::<seed_agents_protocol::Value>(bytes).ok()?.0 {
        Ipld::Map(map) => match map.get("message") {
            Some(Ipld::String(message)) => Some(message.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// Clears the monitor's mark on run `run_id`.
pub(crate) fn clear_completion_pending(conn: &Connection, run_id: &str) -> crate::db::Result<()> {
    conn.prepare_cached("UPDATE runs SET completion_pending = 0 WHERE id = ?1")?.execute(params![run_id])?;
    Ok(())
}
