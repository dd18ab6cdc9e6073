//! Run-completed triggers (docs/protocol.md §E.3): when a run of an account reaches a final
//! status, its enabled `run-completed` triggers whose filters match fire, loop-guarded.
//!
//! The monitor takes finished agent runs, and finished workflow runs answering a firing (a
//! `script` or `tool` continuation's), it has not handled yet (`runs.completion_pending`, read
//! through a partial index that holds only those, so a scan costs the work left, not the run
//! history), a batch at a time, in one write transaction per batch: it records each run's outcome
//! on the firing that started it (opening a thread for a failed workflow whose continuation says
//! `onFailure: 'thread'`), fires the matching triggers (firing key `run-completed:<runId>`) for
//! agent runs that finished within [`LOOKBACK_MS`] (a run that ended long before the monitor saw
//! it, across a long downtime, starts no chain), and clears the mark. A crash before the commit
//! leaves the batch to the next scan; after it, nothing is done twice. It scans when a run ends on
//! the bus that it has to look at (one scan for every end already queued) and every [`POLL`] (a
//! lagging bus loses nothing).
//!
//! Loop guard: a firing remembers the firing whose run's completion caused it. Before firing,
//! the chain of ancestors is walked: if it already holds the same trigger, or holds
//! [`MAX_HOPS`] firings (the new one would be hop 9), the trigger is skipped.

use std::sync::Arc;
use std::time::Duration;

use crate::db::Connection;
use seed_agents_protocol::Value;
use seed_agents_protocol::generated::{
    AgentTriggerSource, RunCompletedSource, RunCompletedSourceStatus, RunInfoKind, RunStatus,
};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::task::JoinHandle;

use super::firing::{self, Activity, FireOutcome, Published};
use super::store;
use crate::app::App;
use crate::bus::Event;
use crate::error::ApiResult;
use crate::runs::store::{self as runs_store, Completed};

/// Longest chain of run-completed firings (upstream's `TRIGGER_CHAIN_MAX_HOPS`).
pub(crate) const MAX_HOPS: usize = 8;
/// How far back the monitor looks for finished runs it has not handled.
pub(crate) const LOOKBACK_MS: i64 = 10 * 60 * 1000;
/// Runs handled per transaction.
const BATCH: i64 = 100;
/// How often the monitor scans without a bus event.
pub const POLL: Duration = Duration::from_secs(1);

/// Starts the monitor; it stops when the bus closes or the task is aborted.
pub(crate) fn spawn(app: &Arc<App>) -> JoinHandle<()> {
    let app = app.clone();
    let mut events = app.bus.subscribe();
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(POLL);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                received = events.recv() => match received {
                    Ok(event) => {
                        // Ends settled in their own transaction leave nothing to scan for.
                        let Event::RunChanged { end_watched: true, .. } = event.as_ref() else { continue };
                        // One scan handles every run ended so far: drain what is queued.
                        loop {
                            match events.try_recv() {
                                Ok(_) | Err(TryRecvError::Lagged(_)) => {}
                                Err(TryRecvError::Empty) => break,
                                Err(TryRecvError::Closed) => return,
                            }
                        }
                    }
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return,
                },
            }
            loop {
                match scan(&app).await {
                    Ok(handled) if handled as i64 >= BATCH => continue,
                    Ok(_) => break,
                    Err(error) => {
                        tracing::warn!(%error, "run-completed triggers: scan failed");
                        break;
                    }
                }
            }
        }
    })
}

/// Clears the pending mark of a run that has just ended when nothing can watch its end: it was
/// not started by a firing and its account has no enabled trigger. Called in the transaction that
/// ends the run, so the monitor never sees it (the common case costs no monitor write, and no
/// scan: see [`Event::RunChanged`]'s `end_watched`); a trigger created later watches only runs
/// that finish after it exists anyway. Returns whether the end is left for the monitor.
pub(crate) fn settle_unwatched(conn: &Connection, run_id: &str) -> ApiResult<bool> {
    store::clear_unwatched_completion(conn, run_id)
}

/// Handles one batch of finished runs; returns how many.
pub async fn scan(app: &App) -> ApiResult<usize> {
    // Looked for on a reader first: most run ends were settled in their own transaction.
    let pending = app.db.read(|conn| Ok(runs_store::completion_pending(conn)?)).await?;
    if !pending {
        return Ok(0);
    }
    let now = app.clock.now_ms();
    let (handled, published, fired) = app
        .db
        .write(move |conn| {
            let mut published = Published::default();
            let runs = runs_store::pending_completions(conn, BATCH)?;
            let mut fired = false;
            for run in &runs {
                fired |= settle_firing(conn, run, now, &mut published)?;
                // Run-completed triggers watch agent runs (docs/protocol.md §E.3).
                if run.kind == RunInfoKind::Agent && run.finished_at >= now - LOOKBACK_MS {
                    fired |= fire_matching(conn, run, now, &mut published)?;
                }
                runs_store::clear_completion_pending(conn, &run.id)?;
            }
            Ok((runs.len(), published, fired))
        })
        .await?;
    published.publish(app);
    if fired {
        app.runs.notify();
    }
    Ok(handled)
}

/// Records the run's outcome on the firing that started it (and a failure on its trigger); for
/// a failed workflow run whose continuation asked for one, opens the failure thread. Whether a
/// run was queued.
fn settle_firing(conn: &Connection, run: &Completed, now: i64, published: &mut Published) -> ApiResult<bool> {
    let Some(firing_id) = &run.firing_id else { return Ok(false) };
    let error =
        (run.status == RunStatus::Failed).then(|| run.error.clone().unwrap_or_else(|| "The run failed".to_owned()));
    store::settle_firing(conn, firing_id, &run.status.to_string(), error.as_deref(), now)?;
    let Some(message) = error.as_deref().filter(|_| run.kind == RunInfoKind::Workflow) else { return Ok(false) };
    let Some(row) = runs_store::delivery(conn, &run.id)? else { return Ok(false) };
    if field(&row.input, firing::ON_FAILURE).as_deref() != Some("thread") {
        return Ok(false);
    }
    let code = field(&row.error, "code");
    let failure = firing::Failure { run_id: &run.id, code: code.as_deref(), message };
    Ok(firing::open_failure_thread(conn, firing_id, &failure, now, published)?.is_some())
}

/// A text field of a stored map.
fn field(value: &ipld_core::ipld::Ipld, key: &str) -> Option<String> {
    match value {
        ipld_core::ipld::Ipld::Map(fields) => match fields.get(key) {
            Some(ipld_core::ipld::Ipld::String(text)) => Some(text.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// Fires the account's matching run-completed triggers for `run`; whether any fired.
fn fire_matching(conn: &Connection, run: &Completed, now: i64, published: &mut Published) -> ApiResult<bool> {
    let mut fired = false;
    for store::Enabled { id: trigger_id, source, created_at, .. } in store::enabled_unmerged(conn, &run.account_id)? {
        let AgentTriggerSource::RunCompletedSource(source) = source else { continue };
        // A trigger watches runs that finish after it exists.
        if run.finished_at < created_at || !matches(&source, run) {
            continue;
        }
        if blocked_by_chain(conn, run.firing_id.as_deref(), &trigger_id)? {
            tracing::info!(trigger = %trigger_id, run = %run.id, "run-completed trigger skipped by the loop guard");
            continue;
        }
        let activity = activity(run);
        let key = format!("run-completed:{}", run.id);
        match firing::fire_in(conn, &trigger_id, &key, &activity, now, published)? {
            FireOutcome::Fired { .. } | FireOutcome::Started { .. } | FireOutcome::Woke { run_id: Some(_), .. } => {
                fired = true
            }
            FireOutcome::Woke { run_id: None, .. } | FireOutcome::Duplicate | FireOutcome::Inactive => {}
        }
    }
    Ok(fired)
}

/// Whether `run` passes the source's filters (title: case-insensitive substring).
fn matches(source: &RunCompletedSource, run: &Completed) -> bool {
    let status_ok = source.status.is_none_or(|status| {
        run.status
            == match status {
                RunCompletedSourceStatus::Succeeded => RunStatus::Succeeded,
                RunCompletedSourceStatus::Failed => RunStatus::Failed,
                RunCompletedSourceStatus::Canceled => RunStatus::Canceled,
            }
    });
    let agent_ok = source.agent_id.as_ref().is_none_or(|agent| run.agent_id.as_deref() == Some(agent.as_str()));
    let title_ok = source.title_match.as_ref().is_none_or(|needle| {
        run.title.as_ref().is_some_and(|title| title.to_lowercase().contains(&needle.to_lowercase()))
    });
    status_ok && agent_ok && title_ok
}

/// Whether the chain of firings ending at `parent` already holds `trigger_id` or is
/// [`MAX_HOPS`] long.
pub(crate) fn blocked_by_chain(conn: &Connection, parent: Option<&str>, trigger_id: &str) -> ApiResult<bool> {
    let mut current = parent.map(str::to_owned);
    let mut hops = 0;
    while let Some(firing_id) = current {
        if hops >= MAX_HOPS {
            return Ok(true);
        }
        hops += 1;
        let Some((ancestor, parent)) = store::firing_parent(conn, &firing_id)? else { break };
        if ancestor == trigger_id {
            return Ok(true);
        }
        current = parent;
    }
    Ok(hops >= MAX_HOPS)
}

fn activity(run: &Completed) -> Activity {
    use ipld_core::ipld::Ipld;
    let text = |value: &str| Value(Ipld::String(value.to_owned()));
    let mut value = std::collections::BTreeMap::from([
        ("type".to_owned(), text("run-completed")),
        ("runId".to_owned(), text(&run.id)),
        ("status".to_owned(), text(&run.status.to_string())),
        ("finishedAt".to_owned(), Value(Ipld::Integer(i128::from(run.finished_at)))),
    ]);
    for (key, field) in
        [("agentId", &run.agent_id), ("sessionId", &run.session_id), ("title", &run.title), ("error", &run.error)]
    {
        if let Some(field) = field {
            value.insert(key.to_owned(), text(field));
        }
    }
    Activity {
        summary: format!("Run {} {}: {}", run.id, run.status, run.title.as_deref().unwrap_or("(untitled)")),
        value,
        matched_conditions: None,
        parent_firing_id: run.firing_id.clone(),
    }
}

#[cfg(test)]
mod tests {
    use crate::db::params;

    use super::*;
    use crate::db::migrated_in_memory;

    #[test]
    fn the_guard_stops_a_repeated_trigger_and_a_chain_of_eight() {
        let conn = migrated_in_memory();
        conn.execute_batch(
            "INSERT INTO agents (id, account_id, definition_cbor, state_dir, status, created_at, updated_at)
                 VALUES ('a', 'owner', x'a0', '/tmp/a', 'idle', 1, 1);",
        )
        .unwrap();
        for n in 0..10 {
            conn.execute(
                "INSERT INTO agent_triggers (id, account_id, agent_id, name, enabled, source_cbor, prompt, created_at,
                                             updated_at)
                 VALUES (?1, 'owner', 'a', ?1, 1, x'a0', 'p', 1, 1)",
                params![format!("t{n}")],
            )
            .unwrap();
        }
        // A chain f0 <- f1 <- ... <- f7 (eight firings), each of its own trigger.
        for n in 0..8 {
            let parent = (n > 0).then(|| format!("f{}", n - 1));
            conn.execute(
                "INSERT INTO trigger_firings (id, account_id, trigger_id, activity_key, activity_summary, activity_cbor,
                                              source_cbor, parent_firing_id, status, created_at, updated_at)
                 VALUES (?1, 'owner', ?2, ?1, 's', x'a0', x'a0', ?3, 'started', 1, 1)",
                params![format!("f{n}"), format!("t{n}"), parent],
            )
            .unwrap();
        }
        assert!(!blocked_by_chain(&conn, None, "t0").unwrap(), "no ancestry");
        assert!(blocked_by_chain(&conn, Some("f0"), "t0").unwrap(), "the same trigger again");
        assert!(!blocked_by_chain(&conn, Some("f0"), "t9").unwrap(), "one hop");
        assert!(blocked_by_chain(&conn, Some("f6"), "t3").unwrap(), "the same trigger within the chain");
        assert!(!blocked_by_chain(&conn, Some("f6"), "t9").unwrap(), "seven ancestors: the eighth hop may fire");
        assert!(blocked_by_chain(&conn, Some("f7"), "t9").unwrap(), "eight ancestors: a ninth hop is refused");
    }

    #[test]
    fn a_run_end_nothing_watches_is_settled_in_its_own_transaction() {
        let conn = migrated_in_memory();
        let run = |id: &str, account: &str| {
            conn.execute(
                "INSERT INTO runs (id, account_id, root_run_id, kind, origin, input_cbor, status, created_at, updated_at,
                                   finished_at)
                 VALUES (?1, ?2, ?1, 'agent', 'user', x'a0', 'succeeded', 1, 1, 1)",
                params![id, account],
            )
            .unwrap();
            let watched = settle_unwatched(&conn, id).unwrap();
            let pending = conn
                .query_row("SELECT completion_pending FROM runs WHERE id = ?1", params![id], |row| row.get::<_, i64>(0))
                .unwrap();
            assert_eq!(watched, pending == 1, "what it says is what it left for the monitor");
            pending
        };
        assert_eq!(run("quiet", "owner"), 0, "no trigger can fire: nothing is left for the monitor");
        conn.execute_batch(
            "INSERT INTO agents (id, account_id, definition_cbor, state_dir, status, created_at, updated_at)
                 VALUES ('a', 'owner', x'a0', '/tmp/a', 'idle', 1, 1);
             INSERT INTO agent_triggers (id, account_id, agent_id, name, enabled, source_cbor, prompt, created_at,
                                         updated_at)
                 VALUES ('t', 'owner', 'a', 't', 1, x'a0', 'p', 1, 1);",
        )
        .unwrap();
        assert_eq!(run("watched", "owner"), 1, "an enabled trigger of the account may fire");
        conn.execute(
            "INSERT INTO runs (id, account_id, root_run_id, kind, origin, input_cbor, status, created_at, updated_at,
                               finished_at)
             VALUES ('script', 'owner', 'script', 'workflow', 'agent', x'a0', 'succeeded', 1, 1, 1)",
            [],
        )
        .unwrap();
        assert!(!settle_unwatched(&conn, "script").unwrap(), "run-completed triggers watch agent runs only");
        assert_eq!(run("elsewhere", "other"), 0, "another account's trigger never fires for it");
        conn.execute("UPDATE agent_triggers SET enabled = 0", []).unwrap();
        assert_eq!(run("disabled", "owner"), 0, "a disabled trigger does not watch");
    }

    #[test]
    fn filters_match_status_agent_and_title() {
        let run = Completed {
            id: "r".into(),
            kind: RunInfoKind::Agent,
            account_id: "o".into(),
            agent_id: Some("a".into()),
            session_id: None,
            title: Some("Nightly Report".into()),
            status: RunStatus::Failed,
            finished_at: 1,
            firing_id: None,
            error: None,
        };
        let source = |status, agent: Option<&str>, title: Option<&str>| RunCompletedSource {
            extra: Default::default(),
            agent_id: agent.map(Into::into),
            status,
            title_match: title.map(str::to_owned),
        };
        assert!(matches(&source(None, None, None), &run));
        assert!(matches(&source(Some(RunCompletedSourceStatus::Failed), Some("a"), Some("report")), &run));
        assert!(!matches(&source(Some(RunCompletedSourceStatus::Succeeded), None, None), &run));
        assert!(!matches(&source(None, Some("b"), None), &run));
        assert!(!matches(&source(None, None, Some("weekly")), &run));
    }
}
