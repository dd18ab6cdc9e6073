//! The queue: inserting a run, the status reads of the mirror, claims under a lease, the boot
//! sweep and wake-ups.

use super::*;

/// Which queue a run waits in: interactive runs are claimed before any background one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    /// A person is waiting for it (MessageSession, RetrySession).
    Interactive,
    /// Triggers, delegated children, retries of background work.
    Background,
}

impl Queue {
    /// The stored (and wire) name.
    pub fn as_str(self) -> &'static str {
        match self {
            Queue::Interactive => "interactive",
            Queue::Background => "background",
        }
    }

    fn parse(value: &str) -> Self {
        if value == "interactive" { Queue::Interactive } else { Queue::Background }
    }
}

/// A run claimed for execution, as the executor receives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    /// The run.
    pub id: String,
    /// The root of its tree (`runs/<root>` is where its changes are published).
    pub root_run_id: String,
    /// The account it is stored under (the agent's owner).
    pub account_id: String,
    /// Its agent.
    pub agent_id: String,
    /// Its session (a workflow run has none).
    pub session_id: Option<String>,
    /// An agent turn or a workflow script.
    pub kind: RunInfoKind,
    /// What it was enqueued with.
    pub input: Ipld,
    /// The execution this is, from 1 (see [`CLAIM_SET`]: a resumed execution keeps its number).
    pub attempt: u32,
    /// Executions allowed before a retryable failure becomes final.
    pub max_attempts: u32,
    /// Its queue.
    pub queue: Queue,
    /// Who started it (`user`, `trigger`, `agent`, `workflow`, `system`).
    pub origin: String,
}

/// A run row to insert (`queued`, attempt 0).
#[derive(Debug)]
pub(crate) struct NewRow<'a> {
    /// An agent turn or a workflow script.
    pub kind: RunInfoKind,
    /// A workflow's script, pinned on its run.
    pub source_text: Option<&'a str>,
    /// Its id.
    pub id: &'a str,
    /// The account it is stored under.
    pub account_id: &'a str,
    /// The root of its tree.
    pub root_run_id: &'a str,
    /// The run that spawned it.
    pub parent_run_id: Option<&'a str>,
    /// How deep in its tree it is.
    pub depth: i64,
    /// Who started it.
    pub origin: &'a str,
    /// Its agent.
    pub agent_id: &'a str,
    /// Its session (a workflow run has none).
    pub session_id: Option<&'a str>,
    /// Its name.
    pub title: Option<&'a str>,
    /// What the executor reads.
    pub input: &'a Ipld,
    /// Which queue it waits in.
    pub queue: Queue,
    /// Executions allowed (at least 1).
    pub max_attempts: u32,
    /// The parent's tool call it answers.
    pub parent_tool_call_id: Option<&'a str>,
}

/// The root and depth of run `run_id` (an error when it does not exist).
pub(crate) fn root_and_depth(conn: &Connection, run_id: &str) -> crate::db::Result<(String, i64)> {
    conn.prepare_cached("SELECT root_run_id, depth FROM runs WHERE id = ?1")?
        .query_row(params![run_id], |row| Ok((row.get(0)?, row.get(1)?)))
}

/// Inserts `run` as `queued`.
pub(crate) fn insert(conn: &Connection, run: &NewRow<'_>, now_ms: i64) -> crate::db::Result<()> {
    conn.prepare_cached(
        "INSERT INTO runs (id, account_id, root_run_id, parent_run_id, depth, kind, origin, agent_id, session_id, title,
                           input_cbor, status, queue, attempt, max_attempts, created_at, updated_at,
                           parent_tool_call_id, source_text)
         VALUES (?1, ?2, ?3, ?4, ?5, ?15, ?6, ?7, ?8, ?9, ?10, 'queued', ?11, 0, ?12, ?13, ?13, ?14, ?16)",
    )?
    .execute(params![
        run.id,
        run.account_id,
        run.root_run_id,
        run.parent_run_id,
        run.depth,
        run.origin,
        run.agent_id,
        run.session_id,
        run.title,
        Cbor(Generic(run.input.clone())),
        run.queue.as_str(),
        run.max_attempts.max(1),
        now_ms,
        run.parent_tool_call_id,
        Text(run.kind),
        run.source_text
    ])?;
    Ok(())
}

/// Whether an agent turn holds the session: one of its `agent` runs is queued, claimed or running.
///
/// `InvokeSessionTool` refuses user verbs while this holds, so the user's tool events never land
/// in the middle of a turn. As upstream decides it, a `waiting` run (parked on children, a timer,
/// an event or a budget pause) does not count, since a parked parent still converses and its resume
/// queues behind new turns; workflow runs do not count either. Served by `runs_by_session_status`.
pub(crate) fn session_has_active_turn(conn: &Connection, session_id: &str) -> crate::db::Result<bool> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM runs WHERE session_id = ?1 AND kind = 'agent'
             AND status IN ('queued', 'claimed', 'running'))",
    )?
    .query_row(params![session_id], |row| row.get(0))
}

/// Whether an agent run of the session is live in any state: queued, claimed, running, or
/// waiting (parked on children or a signal).
pub(crate) fn session_has_live_turn(conn: &Connection, session_id: &str) -> crate::db::Result<bool> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM runs WHERE session_id = ?1 AND kind = 'agent'
             AND status IN ('queued', 'claimed', 'running', 'waiting'))",
    )?
    .query_row(params![session_id], |row| row.get(0))
}

/// Whether any run of the session is queued, claimed, running or waiting.
pub(crate) fn session_has_live_run(conn: &Connection, session_id: &str) -> crate::db::Result<bool> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM runs WHERE session_id = ?1
             AND status IN ('queued', 'claimed', 'running', 'waiting'))",
    )?
    .query_row(params![session_id], |row| row.get(0))
}

/// The status of session `session_id`'s newest run.
pub(crate) fn latest_status(conn: &Connection, session_id: &str) -> crate::db::Result<Option<RunStatus>> {
    Ok(conn
        .prepare_cached("SELECT status FROM runs WHERE session_id = ?1 ORDER BY created_at DESC, id DESC LIMIT 1")?
        .query_row(params![session_id], |row| row.get::<_, Text<RunStatus>>(0))
        .optional()?
        .map(|Text(status)| status))
}

/// A session's newest run, as `RetrySession` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Latest {
    /// The run.
    pub id: String,
    /// Its status.
    pub status: RunStatus,
    /// Its name.
    pub title: Option<String>,
}

/// Session `session_id`'s newest run.
pub(crate) fn latest(conn: &Connection, session_id: &str) -> crate::db::Result<Option<Latest>> {
    conn.prepare_cached(
        "SELECT id, status, title FROM runs WHERE session_id = ?1 ORDER BY created_at DESC, id DESC LIMIT 1",
    )?
    .query_row(params![session_id], |row| {
        Ok(Latest { id: row.get(0)?, status: row.get::<_, Text<RunStatus>>(1)?.0, title: row.get(2)? })
    })
    .optional()
}

/// What a claim sets: the lease, and the execution number. `attempt` counts executions: the
/// first claim makes it 1 and only a retry after a retryable failure raises it (see
/// [`requeue_for_retry`]); a claim that resumes the same execution (after a boot sweep, a
/// reclaimed lease or a parked run's wake-up) keeps it, so recovery never eats the retry budget
/// (upstream's bookkeeping quirk, docs/runtime.md §8.16).
const CLAIM_SET: &str = "status = 'claimed', lease_owner = ?1, lease_expires_at = ?2, attempt = CASE WHEN attempt < 1 THEN 1 ELSE attempt END, updated_at = ?3";

/// The columns [`claimed_from_row`] reads.
const CLAIMED_COLUMNS: &str =
    "id, root_run_id, account_id, agent_id, session_id, input_cbor, attempt, max_attempts, queue, origin, kind";

/// Whether run `r` may be claimed at all: an agent run with its agent and session, whose session
/// no other agent run holds (claimed or running under a live lease, or under this process's); a
/// workflow run with its agent (it holds no session).
const ELIGIBLE: &str =
    "r.agent_id IS NOT NULL AND (r.kind = 'workflow' OR (r.kind = 'agent' AND r.session_id IS NOT NULL
     AND NOT EXISTS (SELECT 1 FROM runs h WHERE h.session_id = r.session_id AND h.id != r.id AND h.kind = 'agent'
                       AND h.status IN ('claimed', 'running') AND (h.lease_owner = ?1 OR h.lease_expires_at > ?3))))";

fn claimed_from_row(row: &Row<'_>) -> crate::db::Result<Claimed> {
    Ok(Claimed {
        id: row.get(0)?,
        root_run_id: row.get(1)?,
        account_id: row.get(2)?,
        agent_id: row.get(3)?,
        session_id: row.get(4)?,
        input: row.get::<_, Cbor<Generic>>(5)?.0.0,
        attempt: row.get(6)?,
        max_attempts: row.get(7)?,
        queue: Queue::parse(&row.get::<_, String>(8)?),
        origin: row.get(9)?,
        kind: row.get::<_, Text<RunInfoKind>>(10)?.0,
    })
}

/// Whether the dispatcher has work: parked runs to wake, runs to claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Due {
    /// A parked run's wake time came.
    pub wake: bool,
    /// A queued run is due, or another owner's lease expired.
    pub claim: bool,
}

/// [`due`]'s query (`?1` the owner, `?2` now).
const DUE: &str =
    "SELECT EXISTS (SELECT 1 FROM runs WHERE status = 'waiting' AND not_before IS NOT NULL AND not_before <= ?2),
        EXISTS (SELECT 1 FROM runs WHERE status = 'queued' AND (not_before IS NULL OR not_before <= ?2))
        OR EXISTS (SELECT 1 FROM runs WHERE status IN ('claimed', 'running')
                     AND lease_owner IS DISTINCT FROM ?1 AND lease_expires_at <= ?2)";

/// What the dispatcher would find to do at `now_ms` (a read, so an idle tick writes nothing).
pub(crate) fn due(conn: &Connection, owner: &str, now_ms: i64) -> crate::db::Result<Due> {
    conn.prepare_cached(DUE)?.query_row(params![owner, now_ms], |row| Ok(Due { wake: row.get(0)?, claim: row.get(1)? }))
}

/// [`claim_next`]'s statement (`?1` the owner, `?2` the lease's end, `?3` now), built once.
static CLAIM_NEXT: LazyLock<String> = LazyLock::new(|| {
    format!("UPDATE runs SET {CLAIM_SET} WHERE id = ({}) RETURNING {CLAIMED_COLUMNS}", next_candidate())
});

/// [`claim_run`]'s statement (as [`CLAIM_NEXT`]'s, `?4` the run), built once.
static CLAIM_RUN: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE runs SET {CLAIM_SET} WHERE id = (
           SELECT r.id FROM runs r WHERE r.id = ?4 AND r.status = 'queued'
              AND (r.not_before IS NULL OR r.not_before <= ?3) AND {ELIGIBLE}
              AND NOT EXISTS (SELECT 1 FROM runs o WHERE o.session_id = r.session_id AND o.id != r.id
                                AND o.kind = 'agent' AND o.status = 'queued'
                                AND (o.created_at < r.created_at OR (o.created_at = r.created_at AND o.id < r.id))))
         RETURNING {CLAIMED_COLUMNS}"
    )
});

/// Claims the next run for `owner` until `lease_until`: queued runs whose `not_before` passed,
/// and runs of another owner whose lease expired; interactive before background, then oldest
/// first; never a second claimed or running agent run in one session.
pub(crate) fn claim_next(
    conn: &Connection,
    owner: &str,
    now_ms: i64,
    lease_until: i64,
) -> crate::db::Result<Option<Claimed>> {
    conn.prepare_cached(&CLAIM_NEXT)?.query_row(params![owner, lease_until, now_ms], claimed_from_row).optional()
}

/// The id of the run [`claim_next`] takes (`?1` the owner, `?3` now).
fn next_candidate() -> String {
    format!(
        "SELECT id FROM (
           SELECT r.id, r.queue, r.created_at FROM runs r
            WHERE r.status = 'queued' AND (r.not_before IS NULL OR r.not_before <= ?3) AND {ELIGIBLE}
           UNION ALL
           SELECT r.id, r.queue, r.created_at FROM runs r
            WHERE r.status IN ('claimed', 'running') AND r.lease_owner IS DISTINCT FROM ?1 AND r.lease_expires_at <= ?3
              AND {ELIGIBLE}
         ) AS candidates ORDER BY CASE queue WHEN 'interactive' THEN 0 ELSE 1 END, created_at, id LIMIT 1"
    )
}

/// Claims run `run_id` for `owner` when it is queued, due, its session is free, and no older run
/// of its session waits in the queue (turns of one session run in order).
pub fn claim_run(
    conn: &Connection,
    run_id: &str,
    owner: &str,
    now_ms: i64,
    lease_until: i64,
) -> crate::db::Result<Option<Claimed>> {
    conn.prepare_cached(&CLAIM_RUN)?.query_row(params![owner, lease_until, now_ms, run_id], claimed_from_row).optional()
}

/// Moves a run `owner` claimed to `running` (its first start is `started_at`); false when the
/// run is no longer this owner's claim.
pub(crate) fn start_running(conn: &Connection, run_id: &str, owner: &str, now_ms: i64) -> crate::db::Result<bool> {
    Ok(conn
        .prepare_cached(
            "UPDATE runs SET status = 'running', started_at = COALESCE(started_at, ?3), updated_at = ?3
             WHERE id = ?1 AND lease_owner = ?2 AND status IN ('claimed', 'running')",
        )?
        .execute(params![run_id, owner, now_ms])?
        > 0)
}

/// Extends `owner`'s lease on a claimed or running run; false when the lease is no longer its.
pub(crate) fn renew_lease(conn: &Connection, run_id: &str, owner: &str, lease_until: i64) -> crate::db::Result<bool> {
    Ok(conn
        .prepare_cached(
            "UPDATE runs SET lease_expires_at = ?3
             WHERE id = ?1 AND lease_owner = ?2 AND status IN ('claimed', 'running')",
        )?
        .execute(params![run_id, owner, lease_until])?
        > 0)
}

/// A run a bulk transition moved: `(run, session)`.
pub(crate) type Moved = (String, Option<String>);

fn moved(conn: &Connection, sql: &str, values: impl crate::db::Params) -> crate::db::Result<Vec<Moved>> {
    conn.prepare_cached(sql)?.query_map(values, |row| Ok((row.get(0)?, row.get(1)?)))?.collect()
}

/// Every claimed or running run of another lease owner than `owner` back to `queued`, its lease
/// cleared and its `attempt` kept (the boot sweep).
pub(crate) fn requeue_others_claims(conn: &Connection, owner: &str, now_ms: i64) -> crate::db::Result<Vec<Moved>> {
    moved(
        conn,
        "UPDATE runs SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL, updated_at = ?1
         WHERE status IN ('claimed', 'running') AND lease_owner IS DISTINCT FROM ?2 RETURNING id, session_id",
        params![now_ms, owner],
    )
}

/// Every parked run whose wake time came (a timer, an event wait's timeout) back to `queued`.
pub(crate) fn requeue_due_waits(conn: &Connection, now_ms: i64) -> crate::db::Result<Vec<Moved>> {
    moved(
        conn,
        "UPDATE runs SET status = 'queued', wait_cbor = NULL, not_before = NULL, updated_at = ?1
         WHERE status = 'waiting' AND not_before IS NOT NULL AND not_before <= ?1 RETURNING id, session_id",
        params![now_ms],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::migrated_in_memory;

    /// The query plan of `sql` (its `detail` column).
    fn plan(conn: &Connection, sql: &str) -> Vec<String> {
        let conn = conn.as_sqlite().expect("a SQLite connection");
        let mut statement = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let count = statement.parameter_count();
        let values: Vec<rusqlite::types::Value> = (0..count).map(|_| rusqlite::types::Value::Integer(1)).collect();
        statement
            .query_map(rusqlite::params_from_iter(values), |row| row.get::<_, String>(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    #[test]
    fn the_dispatcher_searches_indexes_and_never_scans_the_runs_table() {
        let conn = migrated_in_memory();
        let claim = next_candidate();
        for sql in [claim.as_str(), DUE] {
            let steps = plan(&conn, sql);
            assert!(
                steps.iter().all(|step| !step.starts_with("SCAN r") || step.contains("INDEX")),
                "a full scan of runs: {steps:?}"
            );
        }
    }
}
