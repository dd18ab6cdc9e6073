//! Cancellation and signals: a tree's live members, canceling, lifting a budget pause, parked
//! runs a signal may reach.

use super::*;

/// A live member of a run tree.
#[derive(Debug)]
pub(crate) struct Live {
    /// The run.
    pub id: String,
    /// Its status.
    pub status: RunStatus,
    /// Its session.
    pub session_id: Option<String>,
    /// Its parent.
    pub parent_run_id: Option<String>,
}

/// The queued, claimed, running or waiting members of the tree rooted at `run_id` (the run and
/// its descendants over `parent_run_id`), oldest first.
pub(crate) fn live_tree(conn: &Connection, run_id: &str) -> crate::db::Result<Vec<Live>> {
    conn.prepare_cached(
        "WITH RECURSIVE tree(id) AS (
           SELECT id FROM runs WHERE id = ?1
           UNION SELECT r.id FROM runs r JOIN tree t ON r.parent_run_id = t.id
         )
         SELECT id, status, session_id, parent_run_id FROM runs
         WHERE id IN (SELECT id FROM tree) AND status IN ('queued', 'claimed', 'running', 'waiting')
         ORDER BY created_at, id",
    )?
    .query_map(params![run_id], |row| {
        Ok(Live {
            id: row.get(0)?,
            status: row.get::<_, Text<RunStatus>>(1)?.0,
            session_id: row.get(2)?,
            parent_run_id: row.get(3)?,
        })
    })?
    .collect()
}

/// Ends run `run_id` `canceled`, no wait or lease left.
pub(crate) fn cancel(conn: &Connection, run_id: &str, now_ms: i64) -> crate::db::Result<()> {
    conn.prepare_cached(
        "UPDATE runs SET status = 'canceled', wait_cbor = NULL, lease_owner = NULL, lease_expires_at = NULL,
             not_before = NULL, finished_at = ?2, updated_at = ?2 WHERE id = ?1",
    )?
    .execute(params![run_id, now_ms])?;
    Ok(())
}

/// The live (queued, claimed, running or waiting) runs of session `session_id`, oldest first.
pub(crate) fn live_in_session(conn: &Connection, session_id: &str) -> crate::db::Result<Vec<String>> {
    conn.prepare_cached(
        "SELECT id FROM runs WHERE session_id = ?1 AND status IN ('queued', 'claimed', 'running', 'waiting')
         ORDER BY created_at, id",
    )?
    .query_map(params![session_id], |row| row.get(0))?
    .collect()
}

/// The live (queued, claimed, running or waiting) runs of agent `agent_id`, oldest first.
pub(crate) fn live_of_agent(conn: &Connection, agent_id: &str) -> crate::db::Result<Vec<String>> {
    conn.prepare_cached(
        "SELECT id FROM runs WHERE agent_id = ?1 AND status IN ('queued', 'claimed', 'running', 'waiting')
         ORDER BY created_at, id",
    )?
    .query_map(params![agent_id], |row| row.get(0))?
    .collect()
}

/// A `waiting` run as lifting a budget pause reads it.
#[derive(Debug)]
pub(crate) struct Paused {
    /// Its wait (`None` when absent or undecodable).
    pub wait: Option<Wait>,
    /// Its budget, as stored: lifting a pause rewrites a budget map and keeps anything else
    /// byte for byte.
    pub budget: Option<Vec<u8>>,
    /// Its session.
    pub session_id: Option<String>,
}

/// Run `run_id` while it is `waiting`.
pub(crate) fn paused(conn: &Connection, run_id: &str) -> crate::db::Result<Option<Paused>> {
    conn.prepare_cached("SELECT wait_cbor, budget_cbor, session_id FROM runs WHERE id = ?1 AND status = 'waiting'")?
        .query_row(params![run_id], |row| {
            Ok(Paused { wait: lenient_wait(row.get(0)?), budget: row.get(1)?, session_id: row.get(2)? })
        })
        .optional()
}

/// Sends run `run_id` back to the queue with `budget` (stored bytes) as its budget.
pub(crate) fn resume_with_budget(
    conn: &Connection,
    run_id: &str,
    budget: Option<&[u8]>,
    now_ms: i64,
) -> crate::db::Result<()> {
    conn.prepare_cached(
        "UPDATE runs SET status = 'queued', wait_cbor = NULL, not_before = NULL, budget_cbor = ?2, updated_at = ?3
         WHERE id = ?1",
    )?
    .execute(params![run_id, budget, now_ms])?;
    Ok(())
}

/// The `waiting` runs of agent `agent_id` stored under `account_id`, oldest first, with their
/// waits (`None` when absent or undecodable).
pub(crate) fn parked_of_agent(
    conn: &Connection,
    account_id: &str,
    agent_id: &str,
) -> crate::db::Result<Vec<(String, Option<Wait>)>> {
    let parked: Vec<(String, Option<Vec<u8>>)> = conn
        .prepare_cached(
            "SELECT id, wait_cbor FROM runs WHERE account_id = ?1 AND agent_id = ?2 AND status = 'waiting'
             ORDER BY created_at, id",
        )?
        .query_map(params![account_id, agent_id], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<crate::db::Result<_>>()?;
    Ok(parked.into_iter().map(|(id, wait)| (id, lenient_wait(wait))).collect())
}
