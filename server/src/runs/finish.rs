//! Finishing a run: the one place an executor's [`Outcome`] is written.
//!
//! - `Succeeded` and `Canceled` store the output and end the run.
//! - `Parked` stores the [`Wait`] in `wait_cbor` (and its wake time in `not_before`).
//! - `Failed` that is retryable while `attempt < max_attempts` goes back to `queued` with
//!   `not_before` = now + min(base·2^(attempt−1), cap) + jitter below min(1 s, that delay), and
//!   `attempt` counts the next execution; any other failure ends the run `failed`, appends a
//!   durable `{type: 'error', message}` event to its session and so mirrors `error`.
//! - A run already ended (canceled is sticky) or no longer leased by the finishing process keeps
//!   what it has: the late result is dropped.
//!
//! Every transition notes the run, recomputes its session's status mirror, wakes the dispatcher
//! when another turn of the session waits to be claimed, and rolls a finished child's usage up
//! into its parent (`usage.children`). Usage accumulates ([`add_usage`]); it is
//! never overwritten (upstream's quirk, docs/runtime.md §3.3).

use ipld_core::ipld::Ipld;
use rusqlite::{Connection, OptionalExtension, params};
use seed_agents_protocol::generated::{
    ErrorEvent, ErrorEventType, RunStatus, RunUsageInfo, RunUsageInfoChildren, SessionEventPayload,
};
use seed_agents_protocol::wire;
use serde::{Deserialize, Serialize};

use super::children;
use super::executor::{FailureCode, Outcome, RunFailure};
use super::hooks::RunHooks;
use super::queue::{Changes, sync_session_status};
use super::wait::Wait;
use crate::db::{Cbor, Generic, Text};
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::sessions::events;

/// What finishing stored.
#[derive(Debug, Clone, PartialEq)]
pub enum Settled {
    /// The run ended or parked with this outcome (for an already-ended run: what it ended with).
    Stored(Outcome),
    /// A retryable failure sent it back to the queue for another execution.
    Requeued,
    /// The run is no longer this process's to finish (reclaimed, or gone); nothing was written.
    Ignored,
}

/// Retry delays: `base_ms`·2^(attempt−1), at most `cap_ms`, plus jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first retry's delay (upstream: 5 s).
    pub base_ms: i64,
    /// The longest delay (upstream: 5 min).
    pub cap_ms: i64,
}

impl Backoff {
    /// The delay before retrying after failed execution number `attempt` (1-based), with
    /// `random` choosing the jitter below min(1 s, the delay).
    pub fn delay(&self, attempt: u32, random: u32) -> i64 {
        let doublings = attempt.saturating_sub(1).min(40);
        let delay = self.base_ms.saturating_mul(1_i64 << doublings).min(self.cap_ms).max(0);
        let span = delay.clamp(1, 1_000);
        delay + i64::from(random) % span
    }
}

/// A failure as `error_cbor` holds it: `RunInfo.error`'s `code` and `message`, plus what the
/// engine and an inline caller need.
#[derive(Debug, Serialize, Deserialize)]
struct StoredFailure {
    code: String,
    message: String,
    #[serde(default)]
    retryable: bool,
    /// [`ErrorKind::as_str`] of what an inline caller hears.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    /// What rows written before `kind` existed hold instead (see [`legacy_kind`]).
    #[serde(rename = "httpStatus", default, skip_serializing)]
    legacy_status: Option<u16>,
}

impl From<&RunFailure> for StoredFailure {
    fn from(failure: &RunFailure) -> Self {
        Self {
            code: failure.code.as_str().to_owned(),
            message: failure.message.clone(),
            retryable: failure.retryable,
            kind: Some(failure.kind.as_str().to_owned()),
            legacy_status: None,
        }
    }
}

impl StoredFailure {
    fn into_failure(self) -> RunFailure {
        let kind = match (self.kind.as_deref().and_then(ErrorKind::parse), self.legacy_status) {
            (Some(kind), _) => kind,
            (None, Some(status)) => legacy_kind(status),
            (None, None) => ErrorKind::Upstream,
        };
        RunFailure {
            code: FailureCode::parse(&self.code).unwrap_or(FailureCode::RunFailed),
            message: self.message,
            retryable: self.retryable,
            kind,
        }
    }
}

/// The kind of a failure stored by a server before 2026-12 (which kept the HTTP status an inline
/// caller was answered with): the same answer as then.
fn legacy_kind(status: u16) -> ErrorKind {
    match status {
        403 => ErrorKind::Forbidden,
        404 => ErrorKind::NotFound,
        409 => ErrorKind::Conflict,
        413 => ErrorKind::TooLarge,
        429 => ErrorKind::TooMany,
        501 => ErrorKind::NotImplemented,
        503 => ErrorKind::Unavailable,
        status if status < 500 => ErrorKind::Invalid,
        _ => ErrorKind::Upstream,
    }
}

/// The row as finishing needs it.
struct Current {
    status: RunStatus,
    lease_owner: Option<String>,
    attempt: u32,
    max_attempts: u32,
    session_id: Option<String>,
    kind: String,
    parent_run_id: Option<String>,
    output: Option<Cbor<Generic>>,
    error: Option<Cbor<StoredFailure>>,
}

fn encoding_failed(error: wire::WireError) -> ApiError {
    ApiError::internal(error)
}

/// The execution an outcome is for: the run, and the lease owner it executed under.
#[derive(Debug, Clone, Copy)]
pub struct Lease<'a> {
    /// The run.
    pub run_id: &'a str,
    /// The lease owner (a process's `Engine::owner`).
    pub owner: &'a str,
}

/// Writes `outcome` for the run that executed under `lease` (see the module docs).
pub fn finish(
    conn: &Connection,
    hooks: &dyn RunHooks,
    Lease { run_id, owner }: Lease<'_>,
    outcome: Outcome,
    now_ms: i64,
    retry: (Backoff, u32),
    changes: &mut Changes,
) -> ApiResult<Settled> {
    let Some(current) = current(conn, run_id)? else { return Ok(Settled::Ignored) };
    match current.status {
        RunStatus::Succeeded | RunStatus::Failed | RunStatus::Canceled => return Ok(Settled::Stored(stored(current))),
        RunStatus::Claimed | RunStatus::Running if current.lease_owner.as_deref() == Some(owner) => {}
        _ => return Ok(Settled::Ignored),
    }
    let (settled, ended) = match outcome {
        Outcome::Succeeded(output) => {
            end(conn, hooks, run_id, End::Succeeded(&output), now_ms, changes)?;
            (Settled::Stored(Outcome::Succeeded(output)), true)
        }
        Outcome::Canceled(output) => {
            end(conn, hooks, run_id, End::Canceled(&output), now_ms, changes)?;
            (Settled::Stored(Outcome::Canceled(output)), true)
        }
        Outcome::Parked(wait) => {
            park(conn, run_id, &wait, now_ms)?;
            // The race closer: a child may have answered between the executor's check and now.
            if matches!(wait, Wait::Children { .. }) && !children::park(conn, run_id, now_ms, changes)? {
                (Settled::Requeued, false)
            } else {
                (Settled::Stored(Outcome::Parked(wait)), false)
            }
        }
        Outcome::Failed(failure) if failure.retryable && current.attempt < current.max_attempts => {
            let (backoff, random) = retry;
            let not_before = now_ms.saturating_add(backoff.delay(current.attempt, random));
            let error = wire::to_vec(&StoredFailure::from(&failure)).map_err(encoding_failed)?;
            conn.prepare_cached(
                "UPDATE runs SET status = 'queued', error_cbor = ?2, lease_owner = NULL, lease_expires_at = NULL,
                     not_before = ?3, attempt = attempt + 1, updated_at = ?4 WHERE id = ?1",
            )?
            .execute(params![run_id, error, not_before, now_ms])?;
            (Settled::Requeued, false)
        }
        Outcome::Failed(failure) => {
            end(conn, hooks, run_id, End::Failed(&failure), now_ms, changes)?;
            if current.kind == "agent"
                && let Some(session_id) = &current.session_id
            {
                append_error(conn, session_id, &failure.message, now_ms, changes)?;
            }
            (Settled::Stored(Outcome::Failed(failure)), true)
        }
    };
    changes.run(conn, run_id)?;
    if ended && let Some(parent) = &current.parent_run_id {
        roll_up_usage(conn, run_id, parent)?;
    }
    if ended {
        children::finalized(conn, hooks, run_id, now_ms, changes)?;
    }
    if let Some(session_id) = &current.session_id {
        let synced = sync_session_status(conn, session_id, now_ms, changes)?;
        // A turn queued behind this one may be claimed now that the session is free.
        if current.kind == "agent" && synced.streaming {
            changes.wake();
        }
    }
    Ok(settled)
}

/// Where a run is, for an inline caller that could not claim it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum State {
    /// Queued (or waiting for its retry).
    Queued,
    /// Claimed or running.
    Executing,
    /// Ended, or parked (`Outcome::Parked`), with what it stored.
    Ended(Outcome),
    /// No such run.
    Missing,
}

/// Where run `run_id` is.
pub(crate) fn state(conn: &Connection, run_id: &str) -> ApiResult<State> {
    let Some(current) = current(conn, run_id)? else { return Ok(State::Missing) };
    Ok(match current.status {
        RunStatus::Queued => State::Queued,
        RunStatus::Claimed | RunStatus::Running => State::Executing,
        RunStatus::Waiting => {
            let wait: Option<Cbor<Wait>> = conn
                .prepare_cached("SELECT wait_cbor FROM runs WHERE id = ?1")?
                .query_row(params![run_id], |row| row.get(0))?;
            State::Ended(Outcome::Parked(wait.map_or(Wait::BudgetPause { note: None }, |Cbor(wait)| wait)))
        }
        RunStatus::Succeeded | RunStatus::Failed | RunStatus::Canceled => State::Ended(stored(current)),
    })
}

fn current(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<Current>> {
    conn.prepare_cached(
        "SELECT status, lease_owner, attempt, max_attempts, session_id, kind, parent_run_id, output_cbor, error_cbor
         FROM runs WHERE id = ?1",
    )?
    .query_row(params![run_id], |row| {
        Ok(Current {
            status: row.get::<_, Text<RunStatus>>(0)?.0,
            lease_owner: row.get(1)?,
            attempt: row.get(2)?,
            max_attempts: row.get(3)?,
            session_id: row.get(4)?,
            kind: row.get(5)?,
            parent_run_id: row.get(6)?,
            output: row.get(7)?,
            error: row.get(8)?,
        })
    })
    .optional()
}

/// What an ended run ended with.
fn stored(current: Current) -> Outcome {
    let output = current.output.map_or(Ipld::Null, |Cbor(Generic(output))| output);
    match current.status {
        RunStatus::Succeeded => Outcome::Succeeded(output),
        RunStatus::Failed => Outcome::Failed(match current.error {
            Some(Cbor(failure)) => failure.into_failure(),
            None => RunFailure {
                code: FailureCode::RunFailed,
                message: "Agent run failed".into(),
                retryable: false,
                kind: ErrorKind::Upstream,
            },
        }),
        _ => Outcome::Canceled(output),
    }
}

/// How [`end`] ends a run.
enum End<'a> {
    /// `succeeded`, with its output.
    Succeeded(&'a Ipld),
    /// `canceled`, with its output.
    Canceled(&'a Ipld),
    /// `failed`, with why.
    Failed(&'a RunFailure),
}

/// Ends a run as `ended` says, with no wait or lease left.
fn end(
    conn: &Connection,
    hooks: &dyn RunHooks,
    run_id: &str,
    ended: End<'_>,
    now_ms: i64,
    changes: &mut Changes,
) -> ApiResult<()> {
    let (status, output, error) = match ended {
        End::Succeeded(output) => {
            (RunStatus::Succeeded, Some(wire::ipld_to_vec(output).map_err(encoding_failed)?), None)
        }
        End::Canceled(output) => (RunStatus::Canceled, Some(wire::ipld_to_vec(output).map_err(encoding_failed)?), None),
        End::Failed(failure) => {
            (RunStatus::Failed, None, Some(wire::to_vec(&StoredFailure::from(failure)).map_err(encoding_failed)?))
        }
    };
    conn.prepare_cached(
        "UPDATE runs SET status = ?2, output_cbor = COALESCE(?3, output_cbor), error_cbor = ?4, wait_cbor = NULL,
             lease_owner = NULL, lease_expires_at = NULL, not_before = NULL, finished_at = ?5, updated_at = ?5
         WHERE id = ?1",
    )?
    .execute(params![run_id, Text(status), output, error, now_ms])?;
    if hooks.run_ended(conn, run_id)? {
        changes.end_watched(run_id);
    }
    Ok(())
}

fn park(conn: &Connection, run_id: &str, wait: &Wait, now_ms: i64) -> ApiResult<()> {
    let stored = wire::to_vec(wait).map_err(encoding_failed)?;
    conn.prepare_cached(
        "UPDATE runs SET status = 'waiting', wait_cbor = ?2, lease_owner = NULL, lease_expires_at = NULL,
             not_before = ?3, updated_at = ?4 WHERE id = ?1",
    )?
    .execute(params![run_id, stored, wait.wake_at(), now_ms])?;
    Ok(())
}

/// Appends the final failure's `{type: 'error', message}` to the session (announced with the
/// other changes).
fn append_error(
    conn: &Connection,
    session_id: &str,
    message: &str,
    now_ms: i64,
    changes: &mut Changes,
) -> ApiResult<()> {
    let Some((owner, agent)) = conn
        .prepare_cached("SELECT account_id, agent_id FROM sessions WHERE id = ?1")?
        .query_row(params![session_id], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)))
        .optional()?
    else {
        return Ok(());
    };
    let payload = SessionEventPayload::ErrorEvent(ErrorEvent {
        extra: Default::default(),
        actor: None,
        message: message.to_owned(),
        type_: ErrorEventType::Error,
    });
    let event = events::append(conn, session_id, payload, now_ms)?;
    conn.prepare_cached("UPDATE sessions SET updated_at = ?2 WHERE id = ?1")?.execute(params![session_id, now_ms])?;
    changes.event(&owner, &agent, event);
    Ok(())
}

/// Token counts to add to a run's usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    /// Input tokens.
    pub input: i64,
    /// Output tokens.
    pub output: i64,
    /// Tokens read from the provider's cache.
    pub cache_read: i64,
    /// Tokens written to the provider's cache.
    pub cache_write: i64,
    /// All of them, as the provider counts.
    pub total: i64,
}

fn zero_usage() -> RunUsageInfo {
    RunUsageInfo {
        extra: Default::default(),
        cache_read: 0,
        cache_write: 0,
        children: None,
        input: 0,
        output: 0,
        total: 0,
    }
}

fn usage_of(conn: &Connection, run_id: &str) -> ApiResult<Option<RunUsageInfo>> {
    let bytes: Option<Option<Vec<u8>>> = conn
        .prepare_cached("SELECT usage_cbor FROM runs WHERE id = ?1")?
        .query_row(params![run_id], |row| row.get(0))
        .optional()?;
    match bytes.flatten() {
        Some(bytes) => Ok(Some(wire::from_slice(&bytes).map_err(ApiError::internal)?)),
        None => Ok(None),
    }
}

fn store_usage(conn: &Connection, run_id: &str, usage: &RunUsageInfo) -> ApiResult<()> {
    let bytes = wire::to_vec(usage).map_err(encoding_failed)?;
    conn.prepare_cached("UPDATE runs SET usage_cbor = ?2 WHERE id = ?1")?.execute(params![run_id, bytes])?;
    Ok(())
}

/// Adds `usage` to run `run_id`'s usage (every pass and step adds; nothing is overwritten). No
/// event: the next run change carries it.
pub(crate) fn add_usage(conn: &Connection, run_id: &str, usage: &Usage) -> ApiResult<()> {
    let mut total = usage_of(conn, run_id)?.unwrap_or_else(zero_usage);
    total.input += usage.input;
    total.output += usage.output;
    total.cache_read += usage.cache_read;
    total.cache_write += usage.cache_write;
    total.total += usage.total;
    store_usage(conn, run_id, &total)
}

/// Rolls a finished child's usage (its own and its children's) into `parent`'s `usage.children`.
fn roll_up_usage(conn: &Connection, child: &str, parent: &str) -> ApiResult<()> {
    let child = usage_of(conn, child)?;
    let mut usage = usage_of(conn, parent)?.unwrap_or_else(zero_usage);
    let children = usage.children.get_or_insert(RunUsageInfoChildren {
        extra: Default::default(),
        cache_read: 0,
        cache_write: 0,
        input: 0,
        output: 0,
        runs: 0,
        total: 0,
    });
    if let Some(child) = child {
        let nested = child.children.as_ref();
        children.input += child.input + nested.map_or(0, |n| n.input);
        children.output += child.output + nested.map_or(0, |n| n.output);
        children.cache_read += child.cache_read + nested.map_or(0, |n| n.cache_read);
        children.cache_write += child.cache_write + nested.map_or(0, |n| n.cache_write);
        children.total += child.total + nested.map_or(0, |n| n.total);
    }
    children.runs += 1;
    store_usage(conn, parent, &usage)
}

/// [`roll_up_usage`] for a child canceled outside [`finish`] (tree cancellation).
pub(super) fn roll_up_canceled(conn: &Connection, child: &str, parent: &str) -> ApiResult<()> {
    roll_up_usage(conn, child, parent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(stored: &StoredFailure) -> RunFailure {
        wire::from_slice::<StoredFailure>(&wire::to_vec(stored).unwrap()).unwrap().into_failure()
    }

    #[test]
    fn a_stored_failure_keeps_its_kind_and_code_and_old_rows_read_as_they_answered() {
        let failure = RunFailure {
            code: FailureCode::OutputSchema,
            message: "m".into(),
            retryable: true,
            kind: ErrorKind::Conflict,
        };
        assert_eq!(read(&StoredFailure::from(&failure)), failure);
        // As a server before `kind` wrote them: the status an inline caller was answered with.
        let legacy = |status: Option<i128>| {
            let mut fields = std::collections::BTreeMap::from([
                ("code".to_owned(), Ipld::String("provider-error".into())),
                ("message".to_owned(), Ipld::String("m".into())),
                ("retryable".to_owned(), Ipld::Bool(false)),
            ]);
            if let Some(status) = status {
                fields.insert("httpStatus".to_owned(), Ipld::Integer(status));
            }
            let bytes = wire::ipld_to_vec(&Ipld::Map(fields)).unwrap();
            wire::from_slice::<StoredFailure>(&bytes).unwrap().into_failure()
        };
        let kinds: Vec<ErrorKind> = [None, Some(500), Some(502), Some(404), Some(400), Some(422), Some(429)]
            .into_iter()
            .map(|status| legacy(status).kind)
            .collect();
        use ErrorKind::*;
        assert_eq!(kinds, [Upstream, Upstream, Upstream, NotFound, Invalid, Invalid, TooMany]);
        assert_eq!(legacy(None).code, FailureCode::ProviderError);
        assert!(!wire::to_vec(&StoredFailure::from(&failure)).unwrap().windows(10).any(|w| w == b"httpStatus"));
    }
}
