//! The `runs` table: every statement the engine (and its consumers) run on it, as plain functions
//! over the caller's connection, so each composes with the caller's transaction; run rows as the
//! protocol shows them (`RunInfo`) and as the engine reads them (typed: [`RunStatus`], the run's
//! kind, [`Queue`], `Cbor` columns).
//!
//! What a transition changed is the caller's to note (`queue::Changes`); the order of statements
//! inside a transaction stays the caller's too.
//!
//! What the SQL relies on, written so both databases take it: `UPDATE … RETURNING` (claims, the
//! boot sweep, wake-ups); a `CASE` where SQLite alone has a two-argument `MAX`; `IS DISTINCT FROM`
//! on nullable columns; `CAST(?n AS TEXT) IS NULL` for an optional filter (PostgreSQL must know
//! the parameter's type); `LIMIT +?n` (a unary plus keeps one cached SQLite statement for every
//! limit, see `sessions::store`; `db::pg` drops it); `EXISTS (…)` read as a boolean column.

use std::sync::LazyLock;

use crate::db::{Connection, OptionalExtension, Row, params};
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{RunInfo, RunInfoKind, RunPlan, RunStatus, RunUsageInfo, UnmetObligation};
use seed_agents_protocol::wire;
use serde::{Deserialize, Serialize};

use super::wait::Wait;
use crate::db::{Cbor, Generic, Text};
use crate::error::{ApiError, ApiResult};

mod cancel;
mod children;
mod completion;
mod finish;
mod journal;
pub(crate) mod queue;

pub(crate) use cancel::*;
pub(crate) use children::*;
pub(crate) use completion::*;
pub(crate) use finish::*;
pub(crate) use journal::*;
pub(crate) use queue::*;

/// Decodes a free-form CBOR column leniently: absent or undecodable is null.
fn lenient(bytes: Option<Vec<u8>>) -> Ipld {
    bytes.and_then(|bytes| wire::decode_ipld(&bytes).ok()).unwrap_or(Ipld::Null)
}

/// A wait column read leniently: absent or undecodable is `None` (a wait of another shape than
/// the caller looks for).
fn lenient_wait(bytes: Option<Vec<u8>>) -> Option<Wait> {
    bytes.and_then(|bytes| wire::from_slice(&bytes).ok())
}

/// The columns [`info_from_row`] reads, in order.
const RUN_COLUMNS: &str = "r.id, r.account_id, r.root_run_id, r.parent_run_id, r.parent_tool_call_id, \
     r.continued_from_run_id, r.depth, r.kind, r.origin, r.agent_id, r.session_id, r.title, r.source_text, \
     r.error_cbor, r.wait_cbor, r.usage_cbor, r.plan_cbor, r.status, r.created_at, r.updated_at, r.started_at, \
     r.finished_at, (SELECT COUNT(*) FROM runs c WHERE c.parent_run_id = r.id), r.output_cbor, r.input_cbor";

/// A run row selected with [`RUN_COLUMNS`].
fn info_from_row(row: &Row<'_>) -> crate::db::Result<RunInfo> {
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
fn plan_step(row: &Row<'_>, index: usize, key: &str) -> crate::db::Result<Option<String>> {
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
fn unmet_obligations(row: &Row<'_>, index: usize) -> crate::db::Result<Option<Vec<UnmetObligation>>> {
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
pub(crate) fn load_info(conn: &Connection, run_id: &str) -> crate::db::Result<Option<RunInfo>> {
    conn.prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs r WHERE r.id = ?1"))?
        .query_row(params![run_id], info_from_row)
        .optional()
}

/// Every run of the tree rooted at `root`, oldest first.
pub(crate) fn tree(conn: &Connection, root: &str) -> ApiResult<Vec<RunInfo>> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM runs r WHERE r.root_run_id = ?1 ORDER BY r.created_at, r.id"
    ))?;
    let runs = statement.query_map(params![root], info_from_row)?.collect::<crate::db::Result<Vec<_>>>();
    runs.map_err(ApiError::internal)
}

/// The runs of root `root`'s tree in `status` (any when `None`), oldest first, at most `limit`.
pub(crate) fn tree_in(
    conn: &Connection,
    root: &str,
    status: Option<RunStatus>,
    limit: i64,
) -> crate::db::Result<Vec<RunInfo>> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM runs r WHERE r.root_run_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR r.status = ?2)
         ORDER BY r.created_at, r.id LIMIT +?3"
    ))?;
    statement.query_map(params![root, status.map(Text), limit], info_from_row)?.collect()
}

/// The newest root runs of session `session_id` (not its delegated children) in `status` (any
/// when `None`), at most `limit`.
pub(crate) fn session_roots(
    conn: &Connection,
    session_id: &str,
    status: Option<RunStatus>,
    limit: i64,
) -> crate::db::Result<Vec<RunInfo>> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM runs r WHERE r.session_id = ?1 AND r.id = r.root_run_id
         AND (CAST(?2 AS TEXT) IS NULL OR r.status = ?2)
         ORDER BY r.created_at DESC, r.id DESC LIMIT +?3"
    ))?;
    statement.query_map(params![session_id, status.map(Text), limit], info_from_row)?.collect()
}

/// The newest runs of agent `agent_id` in `status` (any when `None`), at most `limit`.
pub(crate) fn agent_runs(
    conn: &Connection,
    agent_id: &str,
    status: Option<RunStatus>,
    limit: i64,
) -> crate::db::Result<Vec<RunInfo>> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM runs r WHERE r.agent_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR r.status = ?2)
         ORDER BY r.created_at DESC, r.id DESC LIMIT +?3"
    ))?;
    statement.query_map(params![agent_id, status.map(Text), limit], info_from_row)?.collect()
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
pub(crate) fn of_agent(conn: &Connection, run_id: &str, agent_id: &str) -> crate::db::Result<bool> {
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1 AND agent_id = ?2)")?
        .query_row(params![run_id, agent_id], |row| row.get(0))
}

/// Whether run `run_id` exists, is stored under `account_id` and belongs to agent `agent_id`.
pub(crate) fn of_account_agent(
    conn: &Connection,
    run_id: &str,
    account_id: &str,
    agent_id: &str,
) -> crate::db::Result<bool> {
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1 AND account_id = ?2 AND agent_id = ?3)")?
        .query_row(params![run_id, account_id, agent_id], |row| row.get(0))
}

/// Records that run `run_id` answers trigger firing `firing_id`.
pub(crate) fn set_trigger_firing(conn: &Connection, run_id: &str, firing_id: &str) -> crate::db::Result<()> {
    conn.prepare_cached("UPDATE runs SET trigger_firing_id = ?2 WHERE id = ?1")?.execute(params![run_id, firing_id])?;
    Ok(())
}

/// Runs per status, and the queued runs whose `not_before` has passed (`/metrics`).
pub(crate) fn count_by_status(conn: &Connection, now: i64) -> ApiResult<(Vec<(String, i64)>, i64)> {
    let mut statement = conn.prepare_cached("SELECT status, COUNT(*) FROM runs GROUP BY status")?;
    let counts = statement
        .query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?)))?
        .collect::<crate::db::Result<Vec<_>>>()?;
    let due = conn
        .prepare_cached(
            "SELECT COUNT(*) FROM runs WHERE status = 'queued' AND (not_before IS NULL OR not_before <= ?1)",
        )?
        .query_row([now], |row| row.get(0))?;
    Ok((counts, due))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::migrated_in_memory;

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
