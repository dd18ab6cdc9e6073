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

use crate::db::Connection;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    ErrorEvent, ErrorEventType, RunInfoKind, RunStatus, RunUsageInfo, RunUsageInfoChildren, SessionEventPayload,
};

use super::children;
use super::executor::{FailureCode, Outcome, RunFailure};
use super::hooks::RunHooks;
use super::queue::{Changes, sync_session_status};
use super::store::{self, Finishing, StoredFailure};
use super::wait::Wait;
use crate::error::{ApiResult, ErrorKind};
use crate::sessions::events;
use crate::sessions::store as session_store;

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
    let Some(current) = store::finishing(conn, run_id)? else { return Ok(Settled::Ignored) };
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
            store::park(conn, run_id, &wait, now_ms)?;
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
            store::requeue_for_retry(conn, run_id, &StoredFailure::from(&failure), not_before, now_ms)?;
            (Settled::Requeued, false)
        }
        Outcome::Failed(failure) => {
            end(conn, hooks, run_id, End::Failed(&failure), now_ms, changes)?;
            if current.kind == RunInfoKind::Agent
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
        if current.kind == RunInfoKind::Agent && synced.streaming {
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
    let Some(current) = store::finishing(conn, run_id)? else { return Ok(State::Missing) };
    Ok(match current.status {
        RunStatus::Queued => State::Queued,
        RunStatus::Claimed | RunStatus::Running => State::Executing,
        RunStatus::Waiting => {
            let wait = store::wait(conn, run_id)?;
            State::Ended(Outcome::Parked(wait.unwrap_or(Wait::BudgetPause { note: None })))
        }
        RunStatus::Succeeded | RunStatus::Failed | RunStatus::Canceled => State::Ended(stored(current)),
    })
}

/// What an ended run ended with.
fn stored(current: Finishing) -> Outcome {
    let output = current.output.unwrap_or(Ipld::Null);
    match current.status {
        RunStatus::Succeeded => Outcome::Succeeded(output),
        RunStatus::Failed => Outcome::Failed(match current.error {
            Some(failure) => failure.into_failure(),
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
    let stored;
    let (status, output, error) = match ended {
        End::Succeeded(output) => (RunStatus::Succeeded, Some(output), None),
        End::Canceled(output) => (RunStatus::Canceled, Some(output), None),
        End::Failed(failure) => {
            stored = StoredFailure::from(failure);
            (RunStatus::Failed, None, Some(&stored))
        }
    };
    store::end(conn, run_id, status, output, error, now_ms)?;
    if hooks.run_ended(conn, run_id)? {
        changes.end_watched(run_id);
    }
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
    let Some((owner, agent)) = session_store::owner_and_agent(conn, session_id)? else { return Ok(()) };
    let payload = SessionEventPayload::ErrorEvent(ErrorEvent {
        extra: Default::default(),
        actor: None,
        message: message.to_owned(),
        type_: ErrorEventType::Error,
    });
    let event = events::append(conn, session_id, payload, now_ms)?;
    session_store::touch(conn, session_id, now_ms)?;
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

/// Adds `usage` to run `run_id`'s usage (every pass and step adds; nothing is overwritten). No
/// event: the next run change carries it.
pub(crate) fn add_usage(conn: &Connection, run_id: &str, usage: &Usage) -> ApiResult<()> {
    let mut total = store::usage(conn, run_id)?.unwrap_or_else(zero_usage);
    total.input += usage.input;
    total.output += usage.output;
    total.cache_read += usage.cache_read;
    total.cache_write += usage.cache_write;
    total.total += usage.total;
    Ok(store::set_usage(conn, run_id, &total)?)
}

/// Rolls a finished child's usage (its own and its children's) into `parent`'s `usage.children`.
fn roll_up_usage(conn: &Connection, child: &str, parent: &str) -> ApiResult<()> {
    let child = store::usage(conn, child)?;
    let mut usage = store::usage(conn, parent)?.unwrap_or_else(zero_usage);
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
    Ok(store::set_usage(conn, parent, &usage)?)
}

/// [`roll_up_usage`] for a child canceled outside [`finish`] (tree cancellation).
pub(super) fn roll_up_canceled(conn: &Connection, child: &str, parent: &str) -> ApiResult<()> {
    roll_up_usage(conn, child, parent)
}

#[cfg(test)]
mod tests {
    use seed_agents_protocol::wire;

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
