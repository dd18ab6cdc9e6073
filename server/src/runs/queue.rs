//! The queue: enqueueing a run, the boot sweep, waking parked runs whose time came, and the
//! session status mirror every transition recomputes (claims and leases are single statements:
//! [`store`]).
//!
//! Everything here runs on a `&Connection` through [`store`], so it composes with the caller's
//! own write transaction (MessageSession appends the user's events and enqueues the turn in one). What a
//! transition changed is noted in a [`Changes`], published once the transaction committed
//! (ARCHITECTURE.md rule 5).

use crate::db::Connection;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    RunInfo, RunInfoKind, RunJournalEntryInfo, RunStatus, SessionEvent, SessionInfoStatus,
};

pub use super::store::queue::{Claimed, Queue};
use super::store::{self, NewRow};
use crate::sessions::store as session_store;

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
pub fn enqueue(conn: &Connection, run: &NewRun, now_ms: i64, changes: &mut Changes) -> crate::db::Result<String> {
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
) -> crate::db::Result<String> {
    insert(conn, run, Some(parent_tool_call_id), now_ms, changes)
}

fn insert(
    conn: &Connection,
    run: &NewRun,
    parent_tool_call_id: Option<&str>,
    now_ms: i64,
    changes: &mut Changes,
) -> crate::db::Result<String> {
    let id = uuid::Uuid::now_v7().to_string();
    let (root, depth) = match &run.parent_run_id {
        Some(parent) => {
            let (root, depth) = store::root_and_depth(conn, parent)?;
            (root, depth + 1)
        }
        None => (id.clone(), 0),
    };
    let row = NewRow {
        kind: RunInfoKind::Agent,
        source_text: None,
        id: &id,
        account_id: &run.account_id,
        root_run_id: &root,
        parent_run_id: run.parent_run_id.as_deref(),
        depth,
        origin: run.origin,
        agent_id: &run.agent_id,
        session_id: Some(&run.session_id),
        title: run.title.as_deref(),
        input: &run.input,
        queue: run.queue,
        max_attempts: run.max_attempts,
        parent_tool_call_id,
    };
    store::insert(conn, &row, now_ms)?;
    changes.run(conn, &id)?;
    sync_session_status(conn, &run.session_id, now_ms, changes)?;
    Ok(id)
}

/// A workflow run to enqueue: a script child of `parent_run_id` (or, with none, the root of its
/// own tree: a trigger's `script` or `tool` continuation), with no session of its own and its
/// source pinned on the row (docs/workflows.md).
#[derive(Debug)]
pub(crate) struct NewWorkflow {
    /// The account it is stored under: the agent's owner.
    pub account_id: String,
    /// The agent whose grants its tool calls use.
    pub agent_id: String,
    /// The run that started it; `None` for a root run (depth 0).
    pub parent_run_id: Option<String>,
    /// The parent's tool call it answers (`delegate {script}`), when one waits for it.
    pub parent_tool_call_id: Option<String>,
    /// Who started it (`agent`, `trigger`).
    pub origin: &'static str,
    /// Its name.
    pub title: String,
    /// The script.
    pub source: String,
    /// What the script receives (`{input, parentToolCallId?, …}`).
    pub input: Ipld,
}

/// Inserts `run` as a queued `workflow` run on the background queue, executed once (a script
/// resumes from its journal, so the engine never retries it); returns its id.
pub(crate) fn enqueue_workflow(
    conn: &Connection,
    run: &NewWorkflow,
    now_ms: i64,
    changes: &mut Changes,
) -> crate::db::Result<String> {
    let id = uuid::Uuid::now_v7().to_string();
    let (root, depth) = match &run.parent_run_id {
        Some(parent) => {
            let (root, depth) = store::root_and_depth(conn, parent)?;
            (root, depth + 1)
        }
        None => (id.clone(), 0),
    };
    let row = NewRow {
        kind: RunInfoKind::Workflow,
        source_text: Some(&run.source),
        id: &id,
        account_id: &run.account_id,
        root_run_id: &root,
        parent_run_id: run.parent_run_id.as_deref(),
        depth,
        origin: run.origin,
        agent_id: &run.agent_id,
        session_id: None,
        title: Some(&run.title),
        input: &run.input,
        queue: Queue::Background,
        max_attempts: 1,
        parent_tool_call_id: run.parent_tool_call_id.as_deref(),
    };
    store::insert(conn, &row, now_ms)?;
    changes.run(conn, &id)?;
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
    /// Journal entries appended, with their run's root (published to `runs/<root>`).
    pub(super) journal: Vec<(String, RunJournalEntryInfo)>,
}

impl Changes {
    /// Notes run `run_id` as it is now (inside the transaction that changed it).
    pub fn run(&mut self, conn: &Connection, run_id: &str) -> crate::db::Result<()> {
        if let Some(run) = store::load_info(conn, run_id)? {
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

    /// Notes a journal entry appended to a workflow run (inside the transaction that appended it).
    pub fn journal(&mut self, conn: &Connection, entry: RunJournalEntryInfo) -> crate::db::Result<()> {
        let (root, _) = store::root_and_depth(conn, &entry.run_id)?;
        self.journal.push((root, entry));
        Ok(())
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
) -> crate::db::Result<Synced> {
    let Some((stored, agent_id)) = session_store::status_and_agent(conn, session_id)? else {
        return Ok(Synced::default());
    };
    let streaming = store::session_has_active_turn(conn, session_id)?;
    let derived = if streaming {
        SessionInfoStatus::Streaming
    } else if store::latest_status(conn, session_id)? == Some(RunStatus::Failed) {
        SessionInfoStatus::Error
    } else {
        SessionInfoStatus::Idle
    };
    if derived == stored {
        return Ok(Synced { changed: false, streaming });
    }
    session_store::set_status(conn, session_id, derived, now_ms)?;
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

/// Moves a run `owner` claimed to `running` (its first start is `started_at`); false when the
/// run is no longer this owner's claim.
pub(crate) fn start_running(
    conn: &Connection,
    run_id: &str,
    owner: &str,
    now_ms: i64,
    changes: &mut Changes,
) -> crate::db::Result<bool> {
    let started = store::start_running(conn, run_id, owner, now_ms)?;
    if started {
        changes.run(conn, run_id)?;
    }
    Ok(started)
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
) -> crate::db::Result<usize> {
    let moved = store::requeue_others_claims(conn, owner, now_ms)?;
    requeued(conn, moved, now_ms, changes)
}

/// Requeues parked runs whose wake time came (a timer, an event wait's timeout). Returns how many.
pub(crate) fn wake_due(conn: &Connection, now_ms: i64, changes: &mut Changes) -> crate::db::Result<usize> {
    let moved = store::requeue_due_waits(conn, now_ms)?;
    requeued(conn, moved, now_ms, changes)
}

/// Notes the runs a bulk transition moved and recomputes their sessions' status mirrors.
fn requeued(
    conn: &Connection,
    moved: Vec<store::Moved>,
    now_ms: i64,
    changes: &mut Changes,
) -> crate::db::Result<usize> {
    for (run_id, session_id) in &moved {
        changes.run(conn, run_id)?;
        if let Some(session_id) = session_id {
            sync_session_status(conn, session_id, now_ms, changes)?;
        }
    }
    Ok(moved.len())
}
