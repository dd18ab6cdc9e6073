//! Cancellation and resumption, as SQL: a run's tree, a session's live runs, an agent's, and a
//! budget pause lifted by a person.
//!
//! A tree is the run and every descendant over `parent_run_id`. Its queued and waiting members
//! end `canceled` at once. A claimed or running member executing in this process is left to its
//! executor, which the engine signals after the commit and which finishes it (`canceled`); one no
//! live executor here holds (a lease of a process that is gone) ends `canceled` at once too, and
//! whatever result its executor might still send is dropped (canceled is sticky).

use rusqlite::{Connection, params};
use seed_agents_protocol::generated::RunStatus;

use super::finish::roll_up_canceled;
use super::hooks::Ending;
use super::queue::{Changes, sync_session_status};
use crate::db::Text;
use crate::error::ApiResult;

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
    let members: Vec<(String, RunStatus, Option<String>, Option<String>)> = conn
        .prepare_cached(
            "WITH RECURSIVE tree(id) AS (
               SELECT id FROM runs WHERE id = ?1
               UNION SELECT r.id FROM runs r JOIN tree t ON r.parent_run_id = t.id
             )
             SELECT id, status, session_id, parent_run_id FROM runs
             WHERE id IN (SELECT id FROM tree) AND status IN ('queued', 'claimed', 'running', 'waiting')
             ORDER BY created_at, id",
        )?
        .query_map(params![run_id], |row| {
            Ok((row.get(0)?, row.get::<_, Text<RunStatus>>(1)?.0, row.get(2)?, row.get(3)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut outcome = Canceled::default();
    let mut sessions: Vec<String> = Vec::new();
    for (id, status, session_id, parent) in members {
        let executing = matches!(status, RunStatus::Claimed | RunStatus::Running);
        if executing && ending.is_live(&id) {
            outcome.live.push((id, session_id));
            continue;
        }
        conn.prepare_cached(
            "UPDATE runs SET status = 'canceled', wait_cbor = NULL, lease_owner = NULL, lease_expires_at = NULL,
                 not_before = NULL, finished_at = ?2, updated_at = ?2 WHERE id = ?1",
        )?
        .execute(params![id, now_ms])?;
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
fn cancel_live_of(
    conn: &Connection,
    sql: &str,
    value: &str,
    now_ms: i64,
    ending: &Ending,
    changes: &mut Changes,
) -> ApiResult<Canceled> {
    let roots: Vec<String> =
        conn.prepare_cached(sql)?.query_map(params![value], |row| row.get(0))?.collect::<rusqlite::Result<_>>()?;
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
    cancel_live_of(
        conn,
        "SELECT id FROM runs WHERE session_id = ?1 AND status IN ('queued', 'claimed', 'running', 'waiting')
         ORDER BY created_at, id",
        session_id,
        now_ms,
        ending,
        changes,
    )
}

/// Cancels every live run of agent `agent_id` with its descendants (DeleteAgent).
pub(crate) fn cancel_agent(
    conn: &Connection,
    agent_id: &str,
    now_ms: i64,
    ending: &Ending,
    changes: &mut Changes,
) -> ApiResult<Canceled> {
    cancel_live_of(
        conn,
        "SELECT id FROM runs WHERE agent_id = ?1 AND status IN ('queued', 'claimed', 'running', 'waiting')
         ORDER BY created_at, id",
        agent_id,
        now_ms,
        ending,
        changes,
    )
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
    use rusqlite::OptionalExtension as _;
    type Paused = (Option<Vec<u8>>, Option<Vec<u8>>, Option<String>);
    let row: Option<Paused> = conn
        .prepare_cached("SELECT wait_cbor, budget_cbor, session_id FROM runs WHERE id = ?1 AND status = 'waiting'")?
        .query_row(params![run_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?;
    let Some((Some(wait), budget, session_id)) = row else { return Ok(false) };
    let paused =
        matches!(seed_agents_protocol::wire::from_slice::<super::Wait>(&wait), Ok(super::Wait::BudgetPause { .. }));
    if !paused {
        return Ok(false);
    }
    let budget = match budget {
        Some(bytes) => match seed_agents_protocol::wire::decode_ipld(&bytes) {
            Ok(ipld_core::ipld::Ipld::Map(mut budget)) => {
                budget.remove("maxWallMs");
                Some(
                    seed_agents_protocol::wire::ipld_to_vec(&ipld_core::ipld::Ipld::Map(budget))
                        .map_err(crate::error::ApiError::internal)?,
                )
            }
            _ => Some(bytes),
        },
        None => None,
    };
    conn.prepare_cached(
        "UPDATE runs SET status = 'queued', wait_cbor = NULL, not_before = NULL, budget_cbor = ?2, updated_at = ?3
         WHERE id = ?1",
    )?
    .execute(params![run_id, budget, now_ms])?;
    changes.run(conn, run_id)?;
    if let Some(session_id) = session_id {
        sync_session_status(conn, &session_id, now_ms, changes)?;
    }
    Ok(true)
}
