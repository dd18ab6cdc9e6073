//! Delivering a signal to a parked run: the one path `SignalRun` and a trigger's `wake`
//! continuation share (docs/protocol.md §C.4, §E.1; docs/runtime.md §6.1).
//!
//! A run parked on a budget pause is waiting for a person's permission, and any signal is that
//! permission: it resumes (see [`super::cancel::resume_budget_pause`]). Event waits (a script's
//! `ctx.waitForEvent`, matched on the signal's name) are not built, since no run parks on one and
//! there is no run journal to deliver a payload into, so a signal for any other run is not
//! delivered, which is a normal outcome, not an error.

use rusqlite::Connection;

use super::queue::Changes;
use super::store;
use super::wait::Wait;
use crate::error::ApiResult;

/// Delivers a signal to run `run_id` inside the caller's write transaction; whether the run took
/// it (and went back to the queue: `changes` then wakes the dispatcher when published).
pub(crate) fn deliver(conn: &Connection, run_id: &str, now_ms: i64, changes: &mut Changes) -> ApiResult<bool> {
    let resumed = super::cancel::resume_budget_pause(conn, run_id, now_ms, changes)?;
    if resumed {
        changes.wake();
    }
    Ok(resumed)
}

/// Delivers a signal to the first run of agent `agent_id` (stored under `account_id`), oldest
/// first, parked on an event wait that takes it; the run it woke, if any.
///
/// Budget pauses are not searched: resuming one spends money, so it takes a signal that names
/// the run (upstream's trigger search looks at event waits only too). As event-wait delivery is
/// not built (see the module docs), this finds no run on this server yet.
pub(crate) fn deliver_to_listener(
    conn: &Connection,
    account_id: &str,
    agent_id: &str,
    now_ms: i64,
    changes: &mut Changes,
) -> ApiResult<Option<String>> {
    for (run_id, wait) in store::parked_of_agent(conn, account_id, agent_id)? {
        let on_event = matches!(wait, Some(Wait::Event { .. }));
        if on_event && deliver(conn, &run_id, now_ms, changes)? {
            return Ok(Some(run_id));
        }
    }
    Ok(None)
}
