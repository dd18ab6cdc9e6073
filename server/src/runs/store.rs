//! The `runs` table: every statement the engine (and its consumers) run on it, as plain functions
//! over the caller's connection, so each composes with the caller's transaction; run rows as the
//! protocol shows them (`RunInfo`) and as the engine reads them (typed: [`RunStatus`], the run's
//! kind, [`Queue`], `Cbor` columns).
//!
//! What a transition changed is the caller's to note (`queue::Changes`); the order of statements
//! inside a transaction stays the caller's too.
//!
//! SQLite-only constructs, for a second backend: `UPDATE … RETURNING` (claims, the boot sweep,
//! wake-ups: PostgreSQL has it too); the two-argument scalar `MAX(attempt, 1)` (PostgreSQL:
//! `GREATEST`); `IS NOT` on nullable columns (PostgreSQL: `IS DISTINCT FROM`); `LIMIT +?n` (a
//! unary plus keeps one cached statement for every limit, see `sessions::store`; PostgreSQL takes
//! a plain parameter); `EXISTS (…)` read as a boolean column.

use std::sync::LazyLock;

use ipld_core::ipld::Ipld;
use rusqlite::{Connection, OptionalExtension, Row, params};
use seed_agents_protocol::generated::{RunInfo, RunInfoKind, RunPlan, RunStatus, RunUsageInfo, UnmetObligation};
use seed_agents_protocol::wire;
use serde::{Deserialize, Serialize};

use super::wait::Wait;
use crate::db::{Cbor, Generic, Text};
use crate::error::{ApiError, ApiResult};

// ---------------------------------------------------------------------------------------------
// Rows as the protocol shows them.

/// The columns [`info_from_row`] reads, in order.
const RUN_COLUMNS: &str = "r.id, r.account_id, r.root_run_id, r.parent_run_id, r.parent_tool_call_id, \
     r.continued_from_run_id, r.depth, r.kind, r.origin, r.agent_id, r.session_id, r.title, r.source_text, \
     r.error_cbor, r.wait_cbor, r.usage_cbor, r.plan_cbor, r.status, r.created_at, r.updated_at, r.started_at, \
     r.finished_at, (SELECT COUNT(*) FROM runs c WHERE c.parent_run_id = r.id), r.output_cbor, r.input_cbor";

/// A run row selected with [`RUN_COLUMNS`].
fn info_from_row(row: &Row<'_>) -> rusqlite::Result<RunInfo> {
    Ok(RunInfo {
        extra: Default::default(),
        id: row.get::<_, String>(0)?.into(),
        account: row.get(1)?,
        root_run_id: row.get::<_, String>(2)?.into(),
        parent_run_id: row.get::<_, Option<String>>(3)?.map(Into::into),
        parent_tool_call_id: row.get::<_, Option<String>>(4)?.map(Into::into),
        continued_from_run_id: row.get::<_, Option<String>>(5)?.map(Into::into),
        depth: row.get(6)?,
        kind: row.get::<_, Text<_>>(7)?.0,
        origin: row.get::<_, Text<_>>(8)?.0,
        agent_id: row.get::<_, Option<String>>(9)?.map(Into::into),
        session_id: row.get::<_, Option<String>>(10)?.map(Into::into),
        title: row.get::<_, Option<String>>(11)?.unwrap_or_default(),
        source_text: row.get(12)?,
        error: row.get::<_, Option<Cbor<_>>>(13)?.map(|Cbor(value)| value),
        wait: row.get::<_, Option<Cbor<Wait>>>(14)?.map(|Cbor(wait)| wait.to_info()),
        usage: row.get::<_, Option<Cbor<_>>>(15)?.map(|Cbor(value)| value),
        plan: row.get::<_, Option<Cbor<_>>>(16)?.map(|Cbor(value)| value),
        status: row.get::<_, Text<_>>(17)?.0,
        created_at: row.get(18)?,
        updated_at: row.get(19)?,
        started_at: row.get(20)?,
        finished_at: row.get(21)?,
        // Upstream adds the count only when the run has children.
        child_run_count: Some(row.get::<_, i64>(22)?).filter(|count| *count > 0),
        plan_step_id: plan_step(row, 24, "planStepId")?,
        step_label: plan_step(row, 24, "planStepLabel")?,
        unmet_obligations: unmet_obligations(row, 23)?,
    })
}

/// `input.planStepId` / `input.planStepLabel`: the plan step a delegated child works on.
fn plan_step(row: &Row<'_>, index: usize, key: &str) -> rusqlite::Result<Option<String>> {
    let Some(bytes) = row.get::<_, Option<Vec<u8>>>(index)? else { return Ok(None) };
    // Inputs are free-form: anything else names no step.
    Ok(match wire::decode_ipld(&bytes) {
        Ok(Ipld::Map(fields)) => match fields.get(key) {
            Some(Ipld::String(text)) => Some(text.clone()),
            _ => None,
        },
        _ => None,
    })
}

/// `output.unmetObligations` of a run that ended owing work (docs/runtime.md §5.8).
fn unmet_obligations(row: &Row<'_>, index: usize) -> rusqlite::Result<Option<Vec<UnmetObligation>>> {
    #[derive(serde::Deserialize)]
    struct Output {
        #[serde(rename = "unmetObligations")]
        unmet_obligations: Option<Vec<UnmetObligation>>,
    }
    // Outputs are free-form: one without the field (or not a map) owes nothing.
    let Some(bytes) = row.get::<_, Option<Vec<u8>>>(index)? else { return Ok(None) };
    Ok(wire::from_slice::<Output>(&bytes).ok().and_then(|output| output.unmet_obligations))
}

/// Run `run_id` as clients see it, when it exists.
pub(crate) fn load_info(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<RunInfo>> {
    conn.prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs r WHERE r.id = ?1"))?
        .query_row(params![run_id], info_from_row)
        .optional()
}

/// Every run of the tree rooted at `root`, oldest first.
pub(crate) fn tree(conn: &Connection, root: &str) -> ApiResult<Vec<RunInfo>> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM runs r WHERE r.root_run_id = ?1 ORDER BY r.created_at, r.id"
    ))?;
    let runs = statement.query_map(params![root], info_from_row)?.collect::<rusqlite::Result<Vec<_>>>();
    runs.map_err(ApiError::internal)
}

/// The newest root runs of session `session_id` (not its delegated children), at most `limit`.
pub(crate) fn session_roots(conn: &Connection, session_id: &str, limit: i64) -> rusqlite::Result<Vec<RunInfo>> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM runs r WHERE r.session_id = ?1 AND r.id = r.root_run_id
         ORDER BY r.created_at DESC, r.id DESC LIMIT +?2"
    ))?;
    statement.query_map(params![session_id, limit], info_from_row)?.collect()
}

/// The newest runs of agent `agent_id`, at most `limit`.
pub(crate) fn agent_runs(conn: &Connection, agent_id: &str, limit: i64) -> rusqlite::Result<Vec<RunInfo>> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM runs r WHERE r.agent_id = ?1 ORDER BY r.created_at DESC, r.id DESC LIMIT +?2"
    ))?;
    statement.query_map(params![agent_id, limit], info_from_row)?.collect()
}

/// The root and the agent of run `run_id`, when it exists and still has an agent (runs outlive
/// their agent, and a run without one is visible to nobody).
pub(crate) fn root_and_agent(conn: &Connection, run_id: &str) -> ApiResult<Option<(String, String)>> {
    Ok(conn
        .prepare_cached("SELECT root_run_id, agent_id FROM runs WHERE id = ?1 AND agent_id IS NOT NULL")?
        .query_row(params![run_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?)
}

/// Whether run `run_id` exists and belongs to agent `agent_id`.
pub(crate) fn of_agent(conn: &Connection, run_id: &str, agent_id: &str) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1 AND agent_id = ?2)")?
        .query_row(params![run_id, agent_id], |row| row.get(0))
}

/// Whether run `run_id` exists, is stored under `account_id` and belongs to agent `agent_id`.
pub(crate) fn of_account_agent(
    conn: &Connection,
    run_id: &str,
    account_id: &str,
    agent_id: &str,
) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1 AND account_id = ?2 AND agent_id = ?3)")?
        .query_row(params![run_id, account_id, agent_id], |row| row.get(0))
}

/// Records that run `run_id` answers trigger firing `firing_id`.
pub(crate) fn set_trigger_firing(conn: &Connection, run_id: &str, firing_id: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE runs SET trigger_firing_id = ?2 WHERE id = ?1")?.execute(params![run_id, firing_id])?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Enqueueing and claiming.

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
    /// Its session.
    pub session_id: String,
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

/// A run row to insert (always `kind = 'agent'`, `queued`, attempt 0).
#[derive(Debug)]
pub(crate) struct NewRow<'a> {
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
    /// Its session.
    pub session_id: &'a str,
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
pub(crate) fn root_and_depth(conn: &Connection, run_id: &str) -> rusqlite::Result<(String, i64)> {
    conn.prepare_cached("SELECT root_run_id, depth FROM runs WHERE id = ?1")?
        .query_row(params![run_id], |row| Ok((row.get(0)?, row.get(1)?)))
}

/// Inserts `run` as `queued`.
pub(crate) fn insert(conn: &Connection, run: &NewRow<'_>, now_ms: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO runs (id, account_id, root_run_id, parent_run_id, depth, kind, origin, agent_id, session_id, title,
                           input_cbor, status, queue, attempt, max_attempts, created_at, updated_at,
                           parent_tool_call_id)
         VALUES (?1, ?2, ?3, ?4, ?5, 'agent', ?6, ?7, ?8, ?9, ?10, 'queued', ?11, 0, ?12, ?13, ?13, ?14)",
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
        run.parent_tool_call_id
    ])?;
    Ok(())
}

/// Whether an agent turn holds the session: one of its `agent` runs is queued, claimed or running.
///
/// `InvokeSessionTool` refuses user verbs while this holds, so the user's tool events never land
/// in the middle of a turn. As upstream decides it, a `waiting` run (parked on children, a timer,
/// an event or a budget pause) does not count, since a parked parent still converses and its resume
/// queues behind new turns; workflow runs do not count either. Served by `runs_by_session_status`.
pub(crate) fn session_has_active_turn(conn: &Connection, session_id: &str) -> rusqlite::Result<bool> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM runs WHERE session_id = ?1 AND kind = 'agent'
             AND status IN ('queued', 'claimed', 'running'))",
    )?
    .query_row(params![session_id], |row| row.get(0))
}

/// Whether any run of the session is queued, claimed, running or waiting.
pub(crate) fn session_has_live_run(conn: &Connection, session_id: &str) -> rusqlite::Result<bool> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM runs WHERE session_id = ?1
             AND status IN ('queued', 'claimed', 'running', 'waiting'))",
    )?
    .query_row(params![session_id], |row| row.get(0))
}

/// The status of session `session_id`'s newest run.
pub(crate) fn latest_status(conn: &Connection, session_id: &str) -> rusqlite::Result<Option<RunStatus>> {
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
pub(crate) fn latest(conn: &Connection, session_id: &str) -> rusqlite::Result<Option<Latest>> {
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
pub(crate) fn start_running(conn: &Connection, run_id: &str, owner: &str, now_ms: i64) -> rusqlite::Result<bool> {
    Ok(conn
        .prepare_cached(
            "UPDATE runs SET status = 'running', started_at = COALESCE(started_at, ?3), updated_at = ?3
             WHERE id = ?1 AND lease_owner = ?2 AND status IN ('claimed', 'running')",
        )?
        .execute(params![run_id, owner, now_ms])?
        > 0)
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

/// A run a bulk transition moved: `(run, session)`.
pub(crate) type Moved = (String, Option<String>);

fn moved(conn: &Connection, sql: &str, values: impl rusqlite::Params) -> rusqlite::Result<Vec<Moved>> {
    conn.prepare_cached(sql)?.query_map(values, |row| Ok((row.get(0)?, row.get(1)?)))?.collect()
}

/// Every claimed or running run of another lease owner than `owner` back to `queued`, its lease
/// cleared and its `attempt` kept (the boot sweep).
pub(crate) fn requeue_others_claims(conn: &Connection, owner: &str, now_ms: i64) -> rusqlite::Result<Vec<Moved>> {
    moved(
        conn,
        "UPDATE runs SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL, updated_at = ?1
         WHERE status IN ('claimed', 'running') AND lease_owner IS NOT ?2 RETURNING id, session_id",
        params![now_ms, owner],
    )
}

/// Every parked run whose wake time came (a timer, an event wait's timeout) back to `queued`.
pub(crate) fn requeue_due_waits(conn: &Connection, now_ms: i64) -> rusqlite::Result<Vec<Moved>> {
    moved(
        conn,
        "UPDATE runs SET status = 'queued', wait_cbor = NULL, not_before = NULL, updated_at = ?1
         WHERE status = 'waiting' AND not_before IS NOT NULL AND not_before <= ?1 RETURNING id, session_id",
        params![now_ms],
    )
}

// ---------------------------------------------------------------------------------------------
// Finishing and parking.

/// A failure as `error_cbor` holds it: `RunInfo.error`'s `code` and `message`, plus what the
/// engine and an inline caller need (`finish` converts it from and to a `RunFailure`).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct StoredFailure {
    /// `RunInfo.error.code`.
    pub code: String,
    /// `RunInfo.error.message`.
    pub message: String,
    /// Whether another execution may succeed.
    #[serde(default)]
    pub retryable: bool,
    /// `ErrorKind::as_str` of what an inline caller hears.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// What rows written before `kind` existed hold instead (the HTTP status an inline caller
    /// was answered with).
    #[serde(rename = "httpStatus", default, skip_serializing)]
    pub legacy_status: Option<u16>,
}

/// The row as finishing needs it.
#[derive(Debug)]
pub(crate) struct Finishing {
    /// Its status.
    pub status: RunStatus,
    /// Who holds its lease.
    pub lease_owner: Option<String>,
    /// The execution it is on.
    pub attempt: u32,
    /// Executions allowed.
    pub max_attempts: u32,
    /// Its session.
    pub session_id: Option<String>,
    /// Agent or workflow.
    pub kind: RunInfoKind,
    /// The run that spawned it.
    pub parent_run_id: Option<String>,
    /// What it ended with.
    pub output: Option<Ipld>,
    /// Why it failed.
    pub error: Option<StoredFailure>,
}

/// Run `run_id` as finishing reads it.
pub(crate) fn finishing(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<Finishing>> {
    conn.prepare_cached(
        "SELECT status, lease_owner, attempt, max_attempts, session_id, kind, parent_run_id, output_cbor, error_cbor
         FROM runs WHERE id = ?1",
    )?
    .query_row(params![run_id], |row| {
        Ok(Finishing {
            status: row.get::<_, Text<RunStatus>>(0)?.0,
            lease_owner: row.get(1)?,
            attempt: row.get(2)?,
            max_attempts: row.get(3)?,
            session_id: row.get(4)?,
            kind: row.get::<_, Text<RunInfoKind>>(5)?.0,
            parent_run_id: row.get(6)?,
            output: row.get::<_, Option<Cbor<Generic>>>(7)?.map(|Cbor(Generic(output))| output),
            error: row.get::<_, Option<Cbor<StoredFailure>>>(8)?.map(|Cbor(error)| error),
        })
    })
    .optional()
}

/// The stored wait of run `run_id` (an error when the run does not exist).
pub(crate) fn wait(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<Wait>> {
    Ok(conn
        .prepare_cached("SELECT wait_cbor FROM runs WHERE id = ?1")?
        .query_row(params![run_id], |row| row.get::<_, Option<Cbor<Wait>>>(0))?
        .map(|Cbor(wait)| wait))
}

/// Sends a run that failed retryably back to the queue for its next execution at `not_before`.
pub(crate) fn requeue_for_retry(
    conn: &Connection,
    run_id: &str,
    failure: &StoredFailure,
    not_before: i64,
    now_ms: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE runs SET status = 'queued', error_cbor = ?2, lease_owner = NULL, lease_expires_at = NULL,
             not_before = ?3, attempt = attempt + 1, updated_at = ?4 WHERE id = ?1",
    )?
    .execute(params![run_id, Cbor(failure), not_before, now_ms])?;
    Ok(())
}

/// Ends a run with `status` (`output` kept when `None`, `error` replaced), no wait or lease left.
pub(crate) fn end(
    conn: &Connection,
    run_id: &str,
    status: RunStatus,
    output: Option<&Ipld>,
    error: Option<&StoredFailure>,
    now_ms: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE runs SET status = ?2, output_cbor = COALESCE(?3, output_cbor), error_cbor = ?4, wait_cbor = NULL,
             lease_owner = NULL, lease_expires_at = NULL, not_before = NULL, finished_at = ?5, updated_at = ?5
         WHERE id = ?1",
    )?
    .execute(params![
        run_id,
        Text(status),
        output.map(|output| Cbor(Generic(output.clone()))),
        error.map(Cbor),
        now_ms
    ])?;
    Ok(())
}

/// Parks a run on `wait` (woken by the dispatcher at its wake time, if any), its lease cleared.
pub(crate) fn park(conn: &Connection, run_id: &str, wait: &Wait, now_ms: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE runs SET status = 'waiting', wait_cbor = ?2, lease_owner = NULL, lease_expires_at = NULL,
             not_before = ?3, updated_at = ?4 WHERE id = ?1",
    )?
    .execute(params![run_id, Cbor(wait), wait.wake_at(), now_ms])?;
    Ok(())
}

/// The usage of run `run_id`, when it has any.
pub(crate) fn usage(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<RunUsageInfo>> {
    Ok(conn
        .prepare_cached("SELECT usage_cbor FROM runs WHERE id = ?1")?
        .query_row(params![run_id], |row| row.get::<_, Option<Cbor<RunUsageInfo>>>(0))
        .optional()?
        .flatten()
        .map(|Cbor(usage)| usage))
}

/// Replaces run `run_id`'s usage.
pub(crate) fn set_usage(conn: &Connection, run_id: &str, usage: &RunUsageInfo) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE runs SET usage_cbor = ?2 WHERE id = ?1")?.execute(params![run_id, Cbor(usage)])?;
    Ok(())
}

/// Copies a settled plan onto the run that owned it.
pub(crate) fn set_plan(conn: &Connection, run_id: &str, plan: &RunPlan) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE runs SET plan_cbor = ?2 WHERE id = ?1")?.execute(params![run_id, Cbor(plan)])?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Children and the parents waiting for them.

/// Decodes a free-form CBOR column leniently: absent or undecodable is null.
fn lenient(bytes: Option<Vec<u8>>) -> Ipld {
    bytes.and_then(|bytes| wire::decode_ipld(&bytes).ok()).unwrap_or(Ipld::Null)
}

/// A wait column read leniently: absent or undecodable is `None` (a wait of another shape than
/// the caller looks for).
fn lenient_wait(bytes: Option<Vec<u8>>) -> Option<Wait> {
    bytes.and_then(|bytes| wire::from_slice(&bytes).ok())
}

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
pub(crate) fn delivery(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<Delivery>> {
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
pub(crate) fn input(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<Ipld>> {
    Ok(conn
        .prepare_cached("SELECT input_cbor FROM runs WHERE id = ?1")?
        .query_row(params![run_id], |row| row.get::<_, Option<Vec<u8>>>(0))
        .optional()?
        .map(lenient))
}

/// The session of run `run_id`, when it exists and has one.
pub(crate) fn session_of(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT session_id FROM runs WHERE id = ?1")?
        .query_row(params![run_id], |row| row.get::<_, Option<String>>(0))
        .optional()?
        .flatten())
}

/// The depth of run `run_id` in its tree, when it exists.
pub(crate) fn depth(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT depth FROM runs WHERE id = ?1")?.query_row(params![run_id], |row| row.get(0)).optional()
}

/// How many runs run `run_id` spawned.
pub(crate) fn child_count(conn: &Connection, run_id: &str) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT COUNT(*) FROM runs WHERE parent_run_id = ?1")?
        .query_row(params![run_id], |row| row.get(0))
}

/// The depth of run `run_id` and whether it has delegated children (answering one of its calls),
/// when it exists.
pub(crate) fn depth_and_children(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<(i64, bool)>> {
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
pub(crate) fn live_child_calls(conn: &Connection, session_id: &str) -> rusqlite::Result<Vec<String>> {
    conn.prepare_cached(
        "SELECT c.parent_tool_call_id FROM runs c JOIN runs p ON p.id = c.parent_run_id
         WHERE p.session_id = ?1 AND c.parent_tool_call_id IS NOT NULL
           AND c.status IN ('queued', 'claimed', 'running', 'waiting')",
    )?
    .query_map(params![session_id], |row| row.get(0))?
    .collect()
}

/// The calls of run `run_id` whose children are still live, oldest first.
pub(crate) fn live_children_of(conn: &Connection, run_id: &str) -> rusqlite::Result<Vec<String>> {
    conn.prepare_cached(
        "SELECT parent_tool_call_id FROM runs WHERE parent_run_id = ?1 AND parent_tool_call_id IS NOT NULL
           AND status IN ('queued', 'claimed', 'running', 'waiting') ORDER BY created_at, id",
    )?
    .query_map(params![run_id], |row| row.get(0))?
    .collect()
}

/// The waits of session `session_id`'s `waiting` runs (a wait that does not decode is left out).
pub(crate) fn session_waits(conn: &Connection, session_id: &str) -> rusqlite::Result<Vec<Wait>> {
    let waits: Vec<Option<Vec<u8>>> = conn
        .prepare_cached("SELECT wait_cbor FROM runs WHERE session_id = ?1 AND status = 'waiting'")?
        .query_map(params![session_id], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
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
pub(crate) fn tree_members(conn: &Connection, root: &str) -> rusqlite::Result<Vec<Member>> {
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
pub(crate) fn parked_wait(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<Wait>> {
    Ok(conn
        .prepare_cached("SELECT wait_cbor FROM runs WHERE id = ?1 AND status = 'waiting'")?
        .query_row(params![run_id], |row| row.get::<_, Option<Cbor<Wait>>>(0))
        .optional()?
        .flatten()
        .map(|Cbor(wait)| wait))
}

/// Replaces the wait of run `run_id` while it is `waiting`.
pub(crate) fn set_parked_wait(conn: &Connection, run_id: &str, wait: &Wait, now_ms: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE runs SET wait_cbor = ?2, updated_at = ?3 WHERE id = ?1 AND status = 'waiting'")?
        .execute(params![run_id, Cbor(wait), now_ms])?;
    Ok(())
}

/// Sends run `run_id` back to the queue when it is `waiting` (its queue position is its
/// `created_at`, unchanged; resuming is not a new execution, so `attempt` stays).
pub(crate) fn resume_parked(conn: &Connection, run_id: &str, now_ms: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE runs SET status = 'queued', wait_cbor = NULL, not_before = NULL, updated_at = ?2
         WHERE id = ?1 AND status = 'waiting'",
    )?
    .execute(params![run_id, now_ms])?;
    Ok(())
}

/// Runs parked without a wake time (on children, an event, a budget pause).
pub(crate) fn parked_without_timer(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    conn.prepare_cached("SELECT id FROM runs WHERE status = 'waiting' AND not_before IS NULL")?
        .query_map([], |row| row.get(0))?
        .collect()
}

/// The children of run `run_id` answering one of its calls that ended.
pub(crate) fn ended_children(conn: &Connection, run_id: &str) -> rusqlite::Result<Vec<String>> {
    conn.prepare_cached(
        "SELECT id FROM runs WHERE parent_run_id = ?1 AND parent_tool_call_id IS NOT NULL
           AND status IN ('succeeded', 'failed', 'canceled')",
    )?
    .query_map(params![run_id], |row| row.get(0))?
    .collect()
}

// ---------------------------------------------------------------------------------------------
// Cancellation and signals.

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
pub(crate) fn live_tree(conn: &Connection, run_id: &str) -> rusqlite::Result<Vec<Live>> {
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
pub(crate) fn cancel(conn: &Connection, run_id: &str, now_ms: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE runs SET status = 'canceled', wait_cbor = NULL, lease_owner = NULL, lease_expires_at = NULL,
             not_before = NULL, finished_at = ?2, updated_at = ?2 WHERE id = ?1",
    )?
    .execute(params![run_id, now_ms])?;
    Ok(())
}

/// The live (queued, claimed, running or waiting) runs of session `session_id`, oldest first.
pub(crate) fn live_in_session(conn: &Connection, session_id: &str) -> rusqlite::Result<Vec<String>> {
    conn.prepare_cached(
        "SELECT id FROM runs WHERE session_id = ?1 AND status IN ('queued', 'claimed', 'running', 'waiting')
         ORDER BY created_at, id",
    )?
    .query_map(params![session_id], |row| row.get(0))?
    .collect()
}

/// The live (queued, claimed, running or waiting) runs of agent `agent_id`, oldest first.
pub(crate) fn live_of_agent(conn: &Connection, agent_id: &str) -> rusqlite::Result<Vec<String>> {
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
pub(crate) fn paused(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<Paused>> {
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
) -> rusqlite::Result<()> {
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
) -> rusqlite::Result<Vec<(String, Option<Wait>)>> {
    let parked: Vec<(String, Option<Vec<u8>>)> = conn
        .prepare_cached(
            "SELECT id, wait_cbor FROM runs WHERE account_id = ?1 AND agent_id = ?2 AND status = 'waiting'
             ORDER BY created_at, id",
        )?
        .query_map(params![account_id, agent_id], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(parked.into_iter().map(|(id, wait)| (id, lenient_wait(wait))).collect())
}

// ---------------------------------------------------------------------------------------------
// Ended runs the run-completed trigger monitor has not handled (`runs.completion_pending`, read
// through the partial index `runs_completion_pending`, which holds exactly those; each `WHERE`
// repeats its condition so SQLite can use it; `INDEXED BY` is SQLite's, a second backend drops
// it).

/// Whether an ended agent run is left for the run-completed monitor.
pub(crate) fn completion_pending(conn: &Connection) -> rusqlite::Result<bool> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM runs INDEXED BY runs_completion_pending
                        WHERE completion_pending = 1 AND finished_at IS NOT NULL AND kind = 'agent')",
    )?
    .query_row([], |row| row.get(0))
}

/// An ended run as the run-completed monitor reads it.
#[derive(Debug, Clone)]
pub(crate) struct Completed {
    /// The run.
    pub id: String,
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

/// Up to `limit` ended agent runs left for the monitor, oldest end first.
pub(crate) fn pending_completions(conn: &Connection, limit: i64) -> rusqlite::Result<Vec<Completed>> {
    conn.prepare_cached(
        "SELECT r.id, r.account_id, r.agent_id, r.session_id, r.title, r.status, r.finished_at, r.trigger_firing_id,
                r.error_cbor
         FROM runs r INDEXED BY runs_completion_pending
         WHERE r.completion_pending = 1 AND r.finished_at IS NOT NULL AND r.kind = 'agent'
         ORDER BY r.finished_at, r.id LIMIT ?1",
    )?
    .query_map(params![limit], |row| {
        let error: Option<Vec<u8>> = row.get(8)?;
        Ok(Completed {
            id: row.get(0)?,
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
pub(crate) fn clear_completion_pending(conn: &Connection, run_id: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE runs SET completion_pending = 0 WHERE id = ?1")?.execute(params![run_id])?;
    Ok(())
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

    #[test]
    fn a_tree_reads_back_oldest_first_with_child_counts() {
        let conn = migrated_in_memory();
        conn.execute_batch(
            "INSERT INTO agents (id, account_id, definition_cbor, state_dir, status, created_at, updated_at)
                 VALUES ('a', 'owner', x'a0', '/tmp/a', 'active', 1, 1);
             INSERT INTO runs (id, account_id, root_run_id, parent_run_id, depth, kind, origin, agent_id,
                               title, input_cbor, status, queue, created_at, updated_at)
                 VALUES ('root', 'owner', 'root', NULL, 0, 'agent', 'user', 'a', 'Turn', x'a0', 'waiting',
                         'interactive', 1, 1),
                        ('child', 'owner', 'root', 'root', 1, 'agent', 'agent', 'a', NULL, x'a0', 'succeeded',
                         'background', 2, 3),
                        ('orphan', 'owner', 'orphan', NULL, 0, 'workflow', 'system', NULL, 'x', x'a0', 'failed',
                         'background', 1, 1);",
        )
        .unwrap();
        let runs = tree(&conn, "root").unwrap();
        let summary: Vec<_> = runs
            .iter()
            .map(|run| (run.id.as_str(), run.status.to_string(), run.child_run_count, run.title.as_str()))
            .collect();
        assert_eq!(summary, [("root", "waiting".into(), Some(1), "Turn"), ("child", "succeeded".into(), None, "")]);
        assert_eq!(root_and_agent(&conn, "child").unwrap(), Some(("root".into(), "a".into())));
        assert_eq!(root_and_agent(&conn, "orphan").unwrap(), None, "no agent: visible to nobody");
        assert_eq!(root_and_agent(&conn, "missing").unwrap(), None);
    }
}
