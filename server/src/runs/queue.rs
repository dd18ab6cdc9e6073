//! The queue's SQL: enqueueing a run, claiming one under a lease, the boot sweep, waking parked
//! runs whose time came, and the session status mirror every transition recomputes.
//!
//! Everything here is plain SQL on a `&Connection`, so it composes with the caller's own write
//! transaction (MessageSession appends the user's events and enqueues the turn in one). What a
//! transition changed is noted in a [`Changes`], published once the transaction committed
//! (ARCHITECTURE.md rule 5).

use std::sync::LazyLock;

use ipld_core::ipld::Ipld;
use rusqlite::{Connection, OptionalExtension, Row, params};
use seed_agents_protocol::generated::{RunInfo, RunStatus, SessionEvent};
use seed_agents_protocol::wire;

use super::{info, session_has_active_turn};
use crate::db::Text;

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
    /// Its session.
    pub session_id: String,
    /// What it was enqueued with.
    pub input: Ipld,
    /// The execution this is, from 1 (see `queue`'s `CLAIM_SET`: a resumed execution keeps its
    /// number).
    pub attempt: u32,
    /// Executions allowed before a retryable failure becomes final.
    pub max_attempts: u32,
    /// Its queue.
    pub queue: Queue,
    /// Who started it (`user`, `trigger`, `agent`, `workflow`, `system`).
    pub origin: String,
}

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

/// A run to enqueue (always `kind = 'agent'`).
#[derive(Debug, Clone)]
pub struct NewRun {
    /// The account the run is stored under: the agent's owner.
    pub account_id: String,
    /// The agent that runs it.
    pub agent_id: String,
    /// The session it runs in.
    pub session_id: String,
    /// Who started it: `user`, `trigger`, `agent` or `system` (a CHECK constraint refuses others).
    pub origin: &'static str,
    /// The run's name (`RunInfo.title`; empty when `None`).
    pub title: Option<String>,
    /// What the executor reads (`{kind: 'session-message', …}`, `{kind: 'session-retry', …}`).
    pub input: Ipld,
    /// Which queue it waits in.
    pub queue: Queue,
    /// Executions allowed before a retryable failure becomes final (at least 1).
    pub max_attempts: u32,
    /// The run that spawned it; its root and depth follow from the parent.
    pub parent_run_id: Option<String>,
}

/// Inserts `run` as `queued` and recomputes its session's status mirror; returns the new run's
/// id (a time-ordered UUID). The new run and a session status change are noted in `changes`:
/// publish them after the commit with [`Engine::publish`](super::Engine::publish), which also
/// wakes the dispatcher.
pub fn enqueue(conn: &Connection, run: &NewRun, now_ms: i64, changes: &mut Changes) -> rusqlite::Result<String> {
    insert(conn, run, None, now_ms, changes)
}

/// [`enqueue`] for a delegated child whose result answers the parent's tool call
/// `parent_tool_call_id` (`runs.parent_tool_call_id`).
pub(crate) fn enqueue_child(
    conn: &Connection,
    run: &NewRun,
    parent_tool_call_id: &str,
    now_ms: i64,
    changes: &mut Changes,
) -> rusqlite::Result<String> {
    insert(conn, run, Some(parent_tool_call_id), now_ms, changes)
}

fn insert(
    conn: &Connection,
    run: &NewRun,
    parent_tool_call_id: Option<&str>,
    now_ms: i64,
    changes: &mut Changes,
) -> rusqlite::Result<String> {
    let id = uuid::Uuid::now_v7().to_string();
    let (root, depth) = match &run.parent_run_id {
        Some(parent) => {
            let (root, depth): (String, i64) = conn
                .prepare_cached("SELECT root_run_id, depth FROM runs WHERE id = ?1")?
                .query_row(params![parent], |row| Ok((row.get(0)?, row.get(1)?)))?;
            (root, depth + 1)
        }
        None => (id.clone(), 0),
    };
    let input = wire::ipld_to_vec(&run.input).map_err(|error| rusqlite::Error::ToSqlConversionFailure(error.into()))?;
    conn.prepare_cached(
        "INSERT INTO runs (id, account_id, root_run_id, parent_run_id, depth, kind, origin, agent_id, session_id, title,
                           input_cbor, status, queue, attempt, max_attempts, created_at, updated_at,
                           parent_tool_call_id)
         VALUES (?1, ?2, ?3, ?4, ?5, 'agent', ?6, ?7, ?8, ?9, ?10, 'queued', ?11, 0, ?12, ?13, ?13, ?14)",
    )?
    .execute(params![
        id,
        run.account_id,
        root,
        run.parent_run_id,
        depth,
        run.origin,
        run.agent_id,
        run.session_id,
        run.title,
        input,
        run.queue.as_str(),
        run.max_attempts.max(1),
        now_ms,
        parent_tool_call_id
    ])?;
    changes.run(conn, &id)?;
    sync_session_status(conn, &run.session_id, now_ms, changes)?;
    Ok(id)
}

/// What a write transaction changed, to publish after its commit: run snapshots (for
/// `runs/<root>` subscribers), sessions whose status mirror moved, and appended session events.
#[derive(Debug, Default)]
pub struct Changes {
    pub(super) runs: Vec<RunInfo>,
    pub(super) sessions: Vec<(String, String)>,
    pub(super) events: Vec<(String, String, SessionEvent)>,
    /// Runs whose end is left for the run-completed trigger monitor.
    pub(super) watched: Vec<String>,
    /// A run went back to the queue (a parent whose children all answered): wake the dispatcher.
    pub(super) wake: bool,
}

impl Changes {
    /// Notes run `run_id` as it is now (inside the transaction that changed it).
    pub fn run(&mut self, conn: &Connection, run_id: &str) -> rusqlite::Result<()> {
        if let Some(run) = info::load(conn, run_id)? {
            self.runs.push(run);
        }
        Ok(())
    }

    /// Notes that run `run_id` ended and its end is left for the run-completed trigger monitor.
    pub fn end_watched(&mut self, run_id: &str) {
        self.watched.push(run_id.to_owned());
    }

    /// Notes that session `session_id` (of `agent_id`) changed.
    pub fn session(&mut self, session_id: &str, agent_id: &str) {
        if !self.sessions.iter().any(|(session, _)| session == session_id) {
            self.sessions.push((session_id.to_owned(), agent_id.to_owned()));
        }
    }

    /// Notes an appended session event (stored under `owner_id`, in a session of `agent_id`).
    pub fn event(&mut self, owner_id: &str, agent_id: &str, event: SessionEvent) {
        self.events.push((owner_id.to_owned(), agent_id.to_owned(), event));
    }

    /// Notes that a run became due, so the dispatcher should look now rather than at its tick.
    pub fn wake(&mut self) {
        self.wake = true;
    }

    /// The run snapshots noted, oldest change first.
    pub fn runs(&self) -> &[RunInfo] {
        &self.runs
    }

    /// The sessions whose status changed, as `(session, agent)`.
    pub fn sessions(&self) -> &[(String, String)] {
        &self.sessions
    }

    /// Whether nothing was noted.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty() && self.sessions.is_empty() && self.events.is_empty() && !self.wake
    }
}

/// Recomputes session `session_id`'s status mirror: `streaming` while one of its agent runs is
/// queued, claimed or running (a `waiting` run does not count), else `error` when its latest run
/// failed, else `idle`. Writes (and notes) the status only when it changed.
pub(crate) fn sync_session_status(
    conn: &Connection,
    session_id: &str,
    now_ms: i64,
    changes: &mut Changes,
) -> rusqlite::Result<Synced> {
    let Some((stored, agent_id)) = conn
        .prepare_cached("SELECT status, agent_id FROM sessions WHERE id = ?1")?
        .query_row(params![session_id], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)))
        .optional()?
    else {
        return Ok(Synced::default());
    };
    let streaming = session_has_active_turn(conn, session_id)?;
    let derived = if streaming {
        "streaming"
    } else {
        let latest: Option<Text<RunStatus>> = conn
            .prepare_cached("SELECT status FROM runs WHERE session_id = ?1 ORDER BY created_at DESC, id DESC LIMIT 1")?
            .query_row(params![session_id], |row| row.get(0))
            .optional()?;
        if latest.is_some_and(|Text(status)| status == RunStatus::Failed) { "error" } else { "idle" }
    };
    if derived == stored {
        return Ok(Synced { changed: false, streaming });
    }
    conn.prepare_cached("UPDATE sessions SET status = ?2, updated_at = ?3 WHERE id = ?1")?
        .execute(params![session_id, derived, now_ms])?;
    changes.session(session_id, &agent_id);
    Ok(Synced { changed: true, streaming })
}

/// What [`sync_session_status`] found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Synced {
    /// The stored status moved.
    pub changed: bool,
    /// An agent run of the session is queued, claimed or running (the status is `streaming`).
    pub streaming: bool,
}

/// What a claim sets: the lease, and the execution number. `attempt` counts executions: the
/// first claim makes it 1 and only a retry after a retryable failure raises it (see
/// [`finish`](super::finish)); a claim that resumes the same execution (after a boot sweep, a
/// reclaimed lease or a parked run's wake-up) keeps it, so recovery never eats the retry budget
/// (upstream's bookkeeping quirk, docs/runtime.md §8.16).
const CLAIM_SET: &str =
    "status = 'claimed', lease_owner = ?1, lease_expires_at = ?2, attempt = MAX(attempt, 1), updated_at = ?3";

/// The columns [`claimed_from_row`] reads.
const CLAIMED_COLUMNS: &str =
    "id, root_run_id, account_id, agent_id, session_id, input_cbor, attempt, max_attempts, queue, origin";

/// Whether run `r` may be claimed at all: an agent run with its agent and session, whose session
/// no other agent run holds (claimed or running under a live lease, or under this process's).
const ELIGIBLE: &str = "r.kind = 'agent' AND r.agent_id IS NOT NULL AND r.session_id IS NOT NULL
     AND NOT EXISTS (SELECT 1 FROM runs h WHERE h.session_id = r.session_id AND h.id != r.id AND h.kind = 'agent'
                       AND h.status IN ('claimed', 'running') AND (h.lease_owner = ?1 OR h.lease_expires_at > ?3))";

fn claimed_from_row(row: &Row<'_>) -> rusqlite::Result<Claimed> {
    let input: Vec<u8> = row.get(5)?;
    let input = wire::decode_ipld(&input)
        .map_err(|error| rusqlite::Error::FromSqlConversionFailure(5, rusqlite::types::Type::Blob, error.into()))?;
    Ok(Claimed {
        id: row.get(0)?,
        root_run_id: row.get(1)?,
        account_id: row.get(2)?,
        agent_id: row.get(3)?,
        session_id: row.get(4)?,
        input,
        attempt: row.get(6)?,
        max_attempts: row.get(7)?,
        queue: Queue::parse(&row.get::<_, String>(8)?),
        origin: row.get(9)?,
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
const DUE: &str = "SELECT EXISTS (SELECT 1 FROM runs WHERE status = 'waiting' AND not_before IS NOT NULL AND not_before <= ?2),
        EXISTS (SELECT 1 FROM runs WHERE status = 'queued' AND kind = 'agent' AND (not_before IS NULL OR not_before <= ?2))
        OR EXISTS (SELECT 1 FROM runs WHERE status IN ('claimed', 'running') AND kind = 'agent'
                     AND lease_owner IS NOT ?1 AND lease_expires_at <= ?2)";

/// What the dispatcher would find to do at `now_ms` (a read, so an idle tick writes nothing).
pub(crate) fn due(conn: &Connection, owner: &str, now_ms: i64) -> rusqlite::Result<Due> {
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
) -> rusqlite::Result<Option<Claimed>> {
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
            WHERE r.status IN ('claimed', 'running') AND r.lease_owner IS NOT ?1 AND r.lease_expires_at <= ?3
              AND {ELIGIBLE}
         ) ORDER BY CASE queue WHEN 'interactive' THEN 0 ELSE 1 END, created_at, id LIMIT 1"
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
) -> rusqlite::Result<Option<Claimed>> {
    conn.prepare_cached(&CLAIM_RUN)?.query_row(params![owner, lease_until, now_ms, run_id], claimed_from_row).optional()
}

/// Moves a run `owner` claimed to `running` (its first start is `started_at`); false when the
/// run is no longer this owner's claim.
pub(crate) fn start_running(
    conn: &Connection,
    run_id: &str,
    owner: &str,
    now_ms: i64,
    changes: &mut Changes,
) -> rusqlite::Result<bool> {
    let started = conn
        .prepare_cached(
            "UPDATE runs SET status = 'running', started_at = COALESCE(started_at, ?3), updated_at = ?3
             WHERE id = ?1 AND lease_owner = ?2 AND status IN ('claimed', 'running')",
        )?
        .execute(params![run_id, owner, now_ms])?
        > 0;
    if started {
        changes.run(conn, run_id)?;
    }
    Ok(started)
}

/// Extends `owner`'s lease on a claimed or running run; false when the lease is no longer its.
pub(crate) fn renew_lease(conn: &Connection, run_id: &str, owner: &str, lease_until: i64) -> rusqlite::Result<bool> {
    Ok(conn
        .prepare_cached(
            "UPDATE runs SET lease_expires_at = ?3
             WHERE id = ?1 AND lease_owner = ?2 AND status IN ('claimed', 'running')",
        )?
        .execute(params![run_id, owner, lease_until])?
        > 0)
}

/// The boot sweep: every claimed or running run of another lease owner (a previous process,
/// which is gone: the data directory's lock admits one server) goes back to `queued` with its
/// lease cleared and its `attempt` kept; the claim that resumes it does not count a new
/// execution. `owner` is this process, whose inline claims may already be executing. Returns how
/// many were requeued.
pub(crate) fn boot_sweep(
    conn: &Connection,
    owner: &str,
    now_ms: i64,
    changes: &mut Changes,
) -> rusqlite::Result<usize> {
    requeue(
        conn,
        "UPDATE runs SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL, updated_at = ?1
         WHERE status IN ('claimed', 'running') AND lease_owner IS NOT ?2 RETURNING id, session_id",
        params![now_ms, owner],
        now_ms,
        changes,
    )
}

/// Requeues parked runs whose wake time came (a timer, an event wait's timeout). Returns how many.
pub(crate) fn wake_due(conn: &Connection, now_ms: i64, changes: &mut Changes) -> rusqlite::Result<usize> {
    requeue(
        conn,
        "UPDATE runs SET status = 'queued', wait_cbor = NULL, not_before = NULL, updated_at = ?1
         WHERE status = 'waiting' AND not_before IS NOT NULL AND not_before <= ?1 RETURNING id, session_id",
        params![now_ms],
        now_ms,
        changes,
    )
}

fn requeue(
    conn: &Connection,
    sql: &str,
    values: impl rusqlite::Params,
    now_ms: i64,
    changes: &mut Changes,
) -> rusqlite::Result<usize> {
    let moved: Vec<(String, Option<String>)> = conn
        .prepare_cached(sql)?
        .query_map(values, |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (run_id, session_id) in &moved {
        changes.run(conn, run_id)?;
        if let Some(session_id) = session_id {
            sync_session_status(conn, session_id, now_ms, changes)?;
        }
    }
    Ok(moved.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::migrated_in_memory;

    /// The query plan of `sql` (its `detail` column).
    fn plan(conn: &Connection, sql: &str) -> Vec<String> {
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
