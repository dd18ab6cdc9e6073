//! Cancellation and resumption: a run's tree, a session's live runs, an agent's, and a
//! budget pause lifted by a person.
//!
//! A tree is the run and every descendant over `parent_run_id`. Its queued and waiting members
//! end `canceled` at once. A claimed or running member executing in this process is left to its
//! executor, which the engine signals after the commit and which finishes it (`canceled`); one no
//! live executor here holds (a lease of a process that is gone) ends `canceled` at once too, and
//! whatever result its executor might still send is dropped (canceled is sticky).

use crate::db::Connection;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::RunStatus;
use seed_agents_protocol::wire;

use super::finish::roll_up_canceled;
use super::hooks::Ending;
use super::queue::{Changes, sync_session_status};
use super::store;
use super::wait::Wait;
use crate::error::{ApiError, ApiResult};

/// What a cancellation did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Canceled {
    /// Runs that ended `canceled` in the transaction.
    pub canceled: Vec<String>,
    /// Claimed or running runs executing in this process, as `(run, session)`: signal them after
    /// the commit.
    pub live: Vec<(String, Option<String>)>,
}

impl Canceled {
    /// Whether anything was canceled or is to be signaled.
    pub fn affected(&self) -> bool {
        !self.canceled.is_empty() || !self.live.is_empty()
    }

    fn absorb(&mut self, other: Canceled) {
        self.canceled.extend(other.canceled);
        for live in other.live {
            if !self.live.contains(&live) {
                self.live.push(live);
            }
        }
    }
}

/// Cancels the tree rooted at `run_id` (see the module docs). `ending` says whether a run is
/// executing in this process.
pub(crate) fn cancel_tree(
    conn: &Connection,
    run_id: &str,
    now_ms: i64,
    ending: &Ending,
    changes: &mut Changes,
) -> ApiResult<Canceled> {
    let members = store::live_tree(conn, run_id)?;
    let mut outcome = Canceled::default();
    let mut sessions: Vec<String> = Vec::new();
    for store::Live { id, status, session_id, parent_run_id: parent } in members {
        let executing = matches!(status, RunStatus::Claimed | RunStatus::Running);
        if executing && ending.is_live(&id) {
            outcome.live.push((id, session_id));
            continue;
        }
        store::cancel(conn, &id, now_ms)?;
        if ending.hooks().run_ended(conn, &id)? {
            changes.end_watched(&id);
        }
        changes.run(conn, &id)?;
        if let Some(parent) = &parent {
            roll_up_canceled(conn, &id, parent)?;
        }
        super::children::finalized(conn, ending.hooks(), &id, now_ms, changes)?;
        if let Some(session_id) = session_id
            && !sessions.contains(&session_id)
        {
            sessions.push(session_id);
        }
        outcome.canceled.push(id);
    }
    for session_id in sessions {
        sync_session_status(conn, &session_id, now_ms, changes)?;
    }
    Ok(outcome)
}

/// Cancels the tree of every live (queued, claimed, running or waiting) run of `column = value`.
fn cancel_all(
    conn: &Connection,
    roots: Vec<String>,
    now_ms: i64,
    ending: &Ending,
    changes: &mut Changes,
) -> ApiResult<Canceled> {
    let mut outcome = Canceled::default();
    for root in roots {
        outcome.absorb(cancel_tree(conn, &root, now_ms, ending, changes)?);
    }
    Ok(outcome)
}

/// Cancels every live run of session `session_id` with its descendants (StopSession,
/// DeleteSession).
pub(crate) fn cancel_session(
    conn: &Connection,
    session_id: &str,
    now_ms: i64,
    ending: &Ending,
    changes: &mut Changes,
) -> ApiResult<Canceled> {
    cancel_all(conn, store::live_in_session(conn, session_id)?, now_ms, ending, changes)
}

/// Cancels every live run of agent `agent_id` with its descendants (DeleteAgent).
pub(crate) fn cancel_agent(
    conn: &Connection,
    agent_id: &str,
    now_ms: i64,
    ending: &Ending,
    changes: &mut Changes,
) -> ApiResult<Canceled> {
    cancel_all(conn, store::live_of_agent(conn, agent_id)?, now_ms, ending, changes)
}

/// Lets a run parked on a budget pause go on: back to `queued`, with the wall-clock budget that
/// stopped it dropped (every other budget stays), as upstream's `resumeBudgetPause`. False when
/// the run is not parked on a budget pause.
pub(crate) fn resume_budget_pause(
    conn: &Connection,
    run_id: &str,
    now_ms: i64,
    changes: &mut Changes,
) -> ApiResult<bool> {
    let Some(store::Paused { wait, budget, session_id }) = store::paused(conn, run_id)? else { return Ok(false) };
    if !matches!(wait, Some(Wait::BudgetPause { .. })) {
        return Ok(false);
    }
    let budget = match budget {
        Some(bytes) => match wire::decode_ipld(&bytes) {
            Ok(Ipld::Map(mut budget)) => {
                budget.remove("maxWallMs");
                Some(wire::ipld_to_vec(&Ipld::Map(budget)).map_err(ApiError::internal)?)
            }
            _ => Some(bytes),
        },
        None => None,
    };
    store::resume_with_budget(conn, run_id, budget.as_deref(), now_ms)?;
    changes.run(conn, run_id)?;
    if let Some(session_id) = session_id {
        sync_session_status(conn, &session_id, now_ms, changes)?;
    }
    Ok(true)
}
