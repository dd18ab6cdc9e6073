//! Finishing and parking: the row finishing reads, ending, retrying, parking, usage, plans.

use super::*;

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
pub(crate) fn finishing(conn: &Connection, run_id: &str) -> crate::db::Result<Option<Finishing>> {
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
pub(crate) fn wait(conn: &Connection, run_id: &str) -> crate::db::Result<Option<Wait>> {
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
) -> crate::db::Result<()> {
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
) -> crate::db::Result<()> {
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

/// Records (or, with `None`, clears) the answer the last pass of run `run_id` gave: the event id
/// of its final assistant message (docs/runtime.md §6.3).
pub(crate) fn set_answered(conn: &Connection, run_id: &str, event_id: Option<&str>) -> crate::db::Result<()> {
    conn.prepare_cached("UPDATE runs SET answered_event_id = ?2 WHERE id = ?1")?.execute(params![run_id, event_id])?;
    Ok(())
}

/// The answer run `run_id`'s last pass gave and no continuation followed, if any.
pub(crate) fn answered(conn: &Connection, run_id: &str) -> crate::db::Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT answered_event_id FROM runs WHERE id = ?1")?
        .query_row(params![run_id], |row| row.get::<_, Option<String>>(0))
        .optional()?
        .flatten())
}

/// Parks a run on `wait` (woken by the dispatcher at its wake time, if any), its lease cleared.
pub(crate) fn park(conn: &Connection, run_id: &str, wait: &Wait, now_ms: i64) -> crate::db::Result<()> {
    conn.prepare_cached(
        "UPDATE runs SET status = 'waiting', wait_cbor = ?2, lease_owner = NULL, lease_expires_at = NULL,
             not_before = ?3, updated_at = ?4 WHERE id = ?1",
    )?
    .execute(params![run_id, Cbor(wait), wait.wake_at(), now_ms])?;
    Ok(())
}

/// The usage of run `run_id`, when it has any.
pub(crate) fn usage(conn: &Connection, run_id: &str) -> crate::db::Result<Option<RunUsageInfo>> {
    Ok(conn
        .prepare_cached("SELECT usage_cbor FROM runs WHERE id = ?1")?
        .query_row(params![run_id], |row| row.get::<_, Option<Cbor<RunUsageInfo>>>(0))
        .optional()?
        .flatten()
        .map(|Cbor(usage)| usage))
}

/// Replaces run `run_id`'s usage.
pub(crate) fn set_usage(conn: &Connection, run_id: &str, usage: &RunUsageInfo) -> crate::db::Result<()> {
    conn.prepare_cached("UPDATE runs SET usage_cbor = ?2 WHERE id = ?1")?.execute(params![run_id, Cbor(usage)])?;
    Ok(())
}

/// Copies a settled plan onto the run that owned it.
pub(crate) fn set_plan(conn: &Connection, run_id: &str, plan: &RunPlan) -> crate::db::Result<()> {
    conn.prepare_cached("UPDATE runs SET plan_cbor = ?2 WHERE id = ?1")?.execute(params![run_id, Cbor(plan)])?;
    Ok(())
}
