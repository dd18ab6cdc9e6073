//! Delegated children and the parents waiting for them.

use super::*;

/// A run row as delivering a child's end needs it. Its free-form CBOR columns are read
/// leniently: absent or undecodable is null.
#[derive(Debug)]
pub(crate) struct Delivery {
    /// The run.
    pub id: String,
    /// Its status.
    pub status: RunStatus,
    /// Agent or workflow.
    pub kind: RunInfoKind,
    /// Its session.
    pub session_id: Option<String>,
    /// Its agent.
    pub agent_id: Option<String>,
    /// The account it is stored under.
    pub account_id: String,
    /// The run that spawned it.
    pub parent_run_id: Option<String>,
    /// The parent's tool call it answers.
    pub parent_tool_call_id: Option<String>,
    /// What it was enqueued with.
    pub input: Ipld,
    /// What it ended with.
    pub output: Ipld,
    /// Why it failed.
    pub error: Ipld,
    /// The root of its tree.
    pub root_run_id: String,
}

/// Run `run_id` as delivery reads it.
pub(crate) fn delivery(conn: &Connection, run_id: &str) -> crate::db::Result<Option<Delivery>> {
    conn.prepare_cached(
        "SELECT id, status, kind, session_id, agent_id, account_id, parent_run_id, parent_tool_call_id,
                input_cbor, output_cbor, error_cbor, root_run_id FROM runs WHERE id = ?1",
    )?
    .query_row(params![run_id], |row| {
        Ok(Delivery {
            id: row.get(0)?,
            status: row.get::<_, Text<RunStatus>>(1)?.0,
            kind: row.get::<_, Text<RunInfoKind>>(2)?.0,
            session_id: row.get(3)?,
            agent_id: row.get(4)?,
            account_id: row.get(5)?,
            parent_run_id: row.get(6)?,
            parent_tool_call_id: row.get(7)?,
            input: lenient(row.get(8)?),
            output: lenient(row.get(9)?),
            error: lenient(row.get(10)?),
            root_run_id: row.get(11)?,
        })
    })
    .optional()
}

/// The input of run `run_id`, read leniently (null when undecodable); `None` when the run does
/// not exist.
pub(crate) fn input(conn: &Connection, run_id: &str) -> crate::db::Result<Option<Ipld>> {
    Ok(conn
        .prepare_cached("SELECT input_cbor FROM runs WHERE id = ?1")?
        .query_row(params![run_id], |row| row.get::<_, Option<Vec<u8>>>(0))
        .optional()?
        .map(lenient))
}

/// The session of run `run_id`, when it exists and has one.
pub(crate) fn session_of(conn: &Connection, run_id: &str) -> crate::db::Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT session_id FROM runs WHERE id = ?1")?
        .query_row(params![run_id], |row| row.get::<_, Option<String>>(0))
        .optional()?
        .flatten())
}

/// The depth of run `run_id` in its tree, when it exists.
pub(crate) fn depth(conn: &Connection, run_id: &str) -> crate::db::Result<Option<i64>> {
    conn.prepare_cached("SELECT depth FROM runs WHERE id = ?1")?.query_row(params![run_id], |row| row.get(0)).optional()
}

/// How many runs run `run_id` spawned.
pub(crate) fn child_count(conn: &Connection, run_id: &str) -> crate::db::Result<i64> {
    conn.prepare_cached("SELECT COUNT(*) FROM runs WHERE parent_run_id = ?1")?
        .query_row(params![run_id], |row| row.get(0))
}

/// The child of run `run_id` that answers its call `call_id`, with the child's session, if one
/// was started.
pub(crate) fn child_answering(
    conn: &Connection,
    run_id: &str,
    call_id: &str,
) -> crate::db::Result<Option<(String, Option<String>)>> {
    conn.prepare_cached("SELECT id, session_id FROM runs WHERE parent_run_id = ?1 AND parent_tool_call_id = ?2")?
        .query_row(params![run_id, call_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()
}

/// The depth of run `run_id` and whether it has delegated children (answering one of its calls),
/// when it exists.
pub(crate) fn depth_and_children(conn: &Connection, run_id: &str) -> crate::db::Result<Option<(i64, bool)>> {
    conn.prepare_cached(
        "SELECT depth, EXISTS (SELECT 1 FROM runs c WHERE c.parent_run_id = r.id
                                 AND c.parent_tool_call_id IS NOT NULL)
         FROM runs r WHERE r.id = ?1",
    )?
    .query_row(params![run_id], |row| Ok((row.get(0)?, row.get(1)?)))
    .optional()
}

/// The calls of session `session_id` a child still works on: calls of its runs' live children
/// (queued, claimed, running or waiting), whether answered yet or not.
pub(crate) fn live_child_calls(conn: &Connection, session_id: &str) -> crate::db::Result<Vec<String>> {
    conn.prepare_cached(
        "SELECT c.parent_tool_call_id FROM runs c JOIN runs p ON p.id = c.parent_run_id
         WHERE p.session_id = ?1 AND c.parent_tool_call_id IS NOT NULL
           AND c.status IN ('queued', 'claimed', 'running', 'waiting')",
    )?
    .query_map(params![session_id], |row| row.get(0))?
    .collect()
}

/// The calls of run `run_id` whose children are still live, oldest first.
pub(crate) fn live_children_of(conn: &Connection, run_id: &str) -> crate::db::Result<Vec<String>> {
    conn.prepare_cached(
        "SELECT parent_tool_call_id FROM runs WHERE parent_run_id = ?1 AND parent_tool_call_id IS NOT NULL
           AND status IN ('queued', 'claimed', 'running', 'waiting') ORDER BY created_at, id",
    )?
    .query_map(params![run_id], |row| row.get(0))?
    .collect()
}

/// The waits of session `session_id`'s `waiting` runs (a wait that does not decode is left out).
pub(crate) fn session_waits(conn: &Connection, session_id: &str) -> crate::db::Result<Vec<Wait>> {
    let waits: Vec<Option<Vec<u8>>> = conn
        .prepare_cached("SELECT wait_cbor FROM runs WHERE session_id = ?1 AND status = 'waiting'")?
        .query_map(params![session_id], |row| row.get(0))?
        .collect::<crate::db::Result<_>>()?;
    Ok(waits.into_iter().filter_map(lenient_wait).collect())
}

/// A member of a run tree as plan-step settlement reads it.
#[derive(Debug)]
pub(crate) struct Member {
    /// Its status.
    pub status: RunStatus,
    /// Its parent's session.
    pub parent_session_id: Option<String>,
    /// Its input, read leniently (null when undecodable).
    pub input: Ipld,
    /// Its parent.
    pub parent_run_id: Option<String>,
}

/// Every member of the tree rooted at `root`.
pub(crate) fn tree_members(conn: &Connection, root: &str) -> crate::db::Result<Vec<Member>> {
    conn.prepare_cached(
        "SELECT r.status, p.session_id, r.input_cbor, r.parent_run_id FROM runs r
         LEFT JOIN runs p ON p.id = r.parent_run_id WHERE r.root_run_id = ?1",
    )?
    .query_map(params![root], |row| {
        Ok(Member {
            status: row.get::<_, Text<RunStatus>>(0)?.0,
            parent_session_id: row.get(1)?,
            input: lenient(row.get(2)?),
            parent_run_id: row.get(3)?,
        })
    })?
    .collect()
}

/// The wait of run `run_id` while it is `waiting`.
pub(crate) fn parked_wait(conn: &Connection, run_id: &str) -> crate::db::Result<Option<Wait>> {
    Ok(conn
        .prepare_cached("SELECT wait_cbor FROM runs WHERE id = ?1 AND status = 'waiting'")?
        .query_row(params![run_id], |row| row.get::<_, Option<Cbor<Wait>>>(0))
        .optional()?
        .flatten()
        .map(|Cbor(wait)| wait))
}

/// Replaces the wait of run `run_id` while it is `waiting`.
pub(crate) fn set_parked_wait(conn: &Connection, run_id: &str, wait: &Wait, now_ms: i64) -> crate::db::Result<()> {
    conn.prepare_cached("UPDATE runs SET wait_cbor = ?2, updated_at = ?3 WHERE id = ?1 AND status = 'waiting'")?
        .execute(params![run_id, Cbor(wait), now_ms])?;
    Ok(())
}

/// Sends run `run_id` back to the queue when it is `waiting` (its queue position is its
/// `created_at`, unchanged; resuming is not a new execution, so `attempt` stays).
pub(crate) fn resume_parked(conn: &Connection, run_id: &str, now_ms: i64) -> crate::db::Result<()> {
    conn.prepare_cached(
        "UPDATE runs SET status = 'queued', wait_cbor = NULL, not_before = NULL, updated_at = ?2
         WHERE id = ?1 AND status = 'waiting'",
    )?
    .execute(params![run_id, now_ms])?;
    Ok(())
}

/// Runs parked without a wake time (on children, an event, a budget pause).
pub(crate) fn parked_without_timer(conn: &Connection) -> crate::db::Result<Vec<String>> {
    conn.prepare_cached("SELECT id FROM runs WHERE status = 'waiting' AND not_before IS NULL")?
        .query_map([], |row| row.get(0))?
        .collect()
}

/// The calls of run `run_id` whose answering child has ended.
pub(crate) fn ended_child_calls(conn: &Connection, run_id: &str) -> crate::db::Result<Vec<String>> {
    conn.prepare_cached(
        "SELECT parent_tool_call_id FROM runs WHERE parent_run_id = ?1 AND parent_tool_call_id IS NOT NULL
           AND status IN ('succeeded', 'failed', 'canceled')",
    )?
    .query_map(params![run_id], |row| row.get(0))?
    .collect()
}

/// The ended children of run `run_id` that answer one of its calls.
pub(crate) fn ended_children(conn: &Connection, run_id: &str) -> crate::db::Result<Vec<String>> {
    conn.prepare_cached(
        "SELECT id FROM runs WHERE parent_run_id = ?1 AND parent_tool_call_id IS NOT NULL
           AND status IN ('succeeded', 'failed', 'canceled')",
    )?
    .query_map(params![run_id], |row| row.get(0))?
    .collect()
}
