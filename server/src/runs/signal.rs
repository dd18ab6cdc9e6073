//! Delivering a signal to a parked run: the one path `SignalRun` and a trigger's `wake`
//! continuation share (docs/protocol.md §C.4, §E.1; docs/runtime.md §6.1; docs/workflows.md).
//!
//! - A run parked on a budget pause is waiting for a person's permission, and any signal is that
//!   permission: it resumes (see [`super::cancel::resume_budget_pause`]).
//! - A workflow run parked on `ctx.waitForEvent` takes a signal one of its waits accepts (the
//!   wait's signal name, or any name for a wait with no criteria). The delivery is journaled as
//!   the wait's `event` entry and the run goes back to the queue, in the caller's transaction:
//!   exactly once, since a signal that loses the race (to a timeout, a cancellation, another
//!   signal) finds the run no longer parked and writes nothing.
//!
//! A signal nobody waits for is not delivered, which is a normal outcome, not an error.

use std::collections::BTreeMap;

use crate::db::Connection;
use ipld_core::ipld::Ipld;

use super::queue::Changes;
use super::store;
use super::wait::{Listen, Wait};
use crate::error::ApiResult;

/// Where a signal came from (`delivery.source` in the journal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// `SignalRun`.
    Signal,
    /// A trigger's `wake` continuation.
    Trigger,
}

/// A signal to deliver.
#[derive(Debug, Clone)]
pub(crate) struct Signal<'a> {
    /// Its name.
    pub name: &'a str,
    /// What it carries to the waiting script.
    pub payload: Option<&'a Ipld>,
    /// Who sent it.
    pub source: Source,
}

/// Delivers `signal` to run `run_id` inside the caller's write transaction; whether the run took
/// it (and went back to the queue: `changes` then wakes the dispatcher when published).
pub(crate) fn deliver(
    conn: &Connection,
    run_id: &str,
    signal: &Signal<'_>,
    now_ms: i64,
    changes: &mut Changes,
) -> ApiResult<bool> {
    if super::cancel::resume_budget_pause(conn, run_id, now_ms, changes)? {
        changes.wake();
        return Ok(true);
    }
    let Some(Wait::Event { listens, .. }) = store::parked_wait(conn, run_id)? else { return Ok(false) };
    let Some(listen) = listens.iter().find(|listen| listen.takes(signal.name)) else { return Ok(false) };
    let entry = store::append_entry(conn, run_id, event_entry(listen, signal), now_ms)?;
    changes.journal(conn, entry)?;
    store::resume_parked(conn, run_id, now_ms)?;
    changes.run(conn, run_id)?;
    changes.wake();
    Ok(true)
}

/// The journal entry that settles `listen`'s wait with `signal`: `{kind: 'event', callSeq,
/// waitId, delivery: {source, signal, payload?}}`, the shape `workflows::journal` reads.
fn event_entry(listen: &Listen, signal: &Signal<'_>) -> Ipld {
    let source = match signal.source {
        Source::Signal => "signal",
        Source::Trigger => "trigger",
    };
    let mut delivery = BTreeMap::from([
        ("source".to_owned(), Ipld::String(source.to_owned())),
        ("signal".to_owned(), Ipld::String(signal.name.to_owned())),
    ]);
    if let Some(payload) = signal.payload {
        delivery.insert("payload".to_owned(), payload.clone());
    }
    Ipld::Map(BTreeMap::from([
        ("kind".to_owned(), Ipld::String("event".to_owned())),
        ("callSeq".to_owned(), Ipld::Integer(i128::from(listen.call_seq))),
        ("waitId".to_owned(), Ipld::String(listen.wait_id.clone())),
        ("delivery".to_owned(), Ipld::Map(delivery)),
    ]))
}

/// Delivers `signal` to the first run of agent `agent_id` (stored under `account_id`), oldest
/// first, parked on an event wait that takes it; the run it woke, if any.
///
/// Budget pauses are not searched: resuming one spends money, so it takes a signal that names
/// the run (upstream's trigger search looks at event waits only too).
pub(crate) fn deliver_to_listener(
    conn: &Connection,
    account_id: &str,
    agent_id: &str,
    signal: &Signal<'_>,
    now_ms: i64,
    changes: &mut Changes,
) -> ApiResult<Option<String>> {
    for (run_id, wait) in store::parked_of_agent(conn, account_id, agent_id)? {
        let listening = matches!(&wait, Some(Wait::Event { listens, .. })
            if listens.iter().any(|listen| listen.takes(signal.name)));
        if listening && deliver(conn, &run_id, signal, now_ms, changes)? {
            return Ok(Some(run_id));
        }
    }
    Ok(None)
}
