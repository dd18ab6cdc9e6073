//! Finishing (retries, parking, usage), the status mirror and its events, cancellation,
//! stopping and shutdown.

use std::sync::atomic::Ordering;

use crate::db::params;
use ipld_core::ipld::Ipld;

use super::{Harness, START, failure, limits};
use crate::error::{ApiError, ErrorKind};
use crate::runs::cancel;
use crate::runs::engine::{FailureCode, InlineOutcome, Outcome, RunFailure, StopReason};
use crate::runs::finish::{self, Backoff, Lease, Settled, Usage};
use crate::runs::queue::{Changes, Queue};
use crate::runs::wait::Wait;

/// Effectively never (keeps a run queued but not due).
const FAR: i64 = START + 1_000_000_000;

fn run(id: &str, status: &str) -> String {
    format!("run {id} {status}")
}

fn session(id: &str) -> String {
    format!("session {id}")
}

#[test]
fn backoff_doubles_to_its_cap_with_jitter_below_a_second_or_the_delay() {
    let backoff = Backoff { base_ms: 5_000, cap_ms: 300_000 };
    assert_eq!(backoff.delay(1, 0), 5_000);
    assert_eq!(backoff.delay(2, 0), 10_000);
    assert_eq!(backoff.delay(3, 999), 20_999);
    assert_eq!(backoff.delay(3, 1_000), 20_000, "jitter stays below 1 s");
    assert_eq!(backoff.delay(20, 0), 300_000, "capped at five minutes");
    assert_eq!(backoff.delay(u32::MAX, u32::MAX), 300_000 + i64::from(u32::MAX % 1_000));
    let tiny = Backoff { base_ms: 200, cap_ms: 300_000 };
    assert!((0..1000).all(|random| tiny.delay(1, random) < 400), "jitter below the delay itself");
}

#[test]
fn a_failure_answers_an_inline_caller_under_its_kind() {
    use ErrorKind::*;
    let answered = |kind| RunFailure::from_error(FailureCode::Internal, &ApiError::new(kind, "m")).to_api_error();
    let expected = [
        (Invalid, Invalid),
        (Unauthorized, Invalid),
        (Forbidden, Forbidden),
        (NotFound, NotFound),
        (Conflict, Conflict),
        (TooLarge, TooLarge),
        (UnsupportedMediaType, Invalid),
        (TooMany, TooMany),
        (TimedOut, Invalid),
        (UpdateRequired, Invalid),
        (Unavailable, Unavailable),
        (Upstream, Upstream),
        (NotImplemented, NotImplemented),
        (Internal, Upstream),
    ];
    assert_eq!(expected.len(), ErrorKind::ALL.len(), "every kind is listed");
    for (kind, answer) in expected {
        assert_eq!(answered(kind).kind(), answer, "{kind:?}");
    }
    assert_eq!(answered(NotFound).message(), "m");
    assert!(RunFailure::from_error(FailureCode::Internal, &ApiError::new(Internal, "m")).retryable);
    assert!(!RunFailure::from_error(FailureCode::Internal, &ApiError::new(Invalid, "m")).retryable);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_back_off_on_the_clock_and_the_last_failure_is_final() {
    let mut harness = Harness::new().await;
    harness.start().await;
    let id = harness.enqueue("s1", Queue::Background, 3, None).await;
    for attempt in 1..=3 {
        let started = harness.next_started().await;
        assert_eq!(started.run.attempt, attempt);
        let failed_at = harness.clock.now_ms();
        started.finish(failure(&format!("down {attempt}"), true));
        if attempt == 3 {
            break;
        }
        harness.until_status(&id, "queued").await;
        let (_, next, not_before, lease) = harness.row(&id).await;
        let not_before = not_before.unwrap();
        let delay = 5_000 * 2_i64.pow(attempt - 1);
        assert!((failed_at + delay..failed_at + delay + 1_000).contains(&not_before), "{attempt}: {not_before}");
        assert_eq!((next, lease), (attempt + 1, None), "the next execution is numbered, the lease cleared");
        assert_eq!(harness.session_status("s1").await, "streaming", "a run in backoff holds the session");
        harness.clock.set(not_before - 1);
        harness.none_started().await;
        harness.clock.set(not_before);
        harness.app.runs.notify();
    }
    harness.until_status(&id, "failed").await;
    assert_eq!(harness.session_status("s1").await, "error");
    let events =
        harness.app.db.read(|conn| crate::sessions::events::after(conn, "s1", 0, i64::MAX, None)).await.unwrap();
    let payloads: Vec<String> = events
        .iter()
        .map(|event| seed_agents_protocol::wire::to_ipld(&event.event).map(|v| format!("{v:?}")).unwrap())
        .collect();
    assert_eq!(events.len(), 1, "one error event, for the final failure only: {payloads:?}");
    assert!(payloads[0].contains("down 3") && payloads[0].contains("error"), "{payloads:?}");
    let info = harness.app.db.read(move |conn| Ok(crate::runs::store::load_info(conn, &id)?)).await.unwrap().unwrap();
    let error = info.error.unwrap();
    assert_eq!((error.code.as_str(), error.message.as_str()), ("provider-error", "down 3"));
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_mirror_follows_the_runs_and_is_announced_only_when_it_moves() {
    let mut harness = Harness::new().await;
    harness.events();
    let first = harness.enqueue("s1", Queue::Interactive, 1, None).await;
    harness.expect_events(&[run(&first, "queued"), session("s1")]).await;
    assert_eq!(harness.session_status("s1").await, "streaming");
    harness.start().await;
    let started = harness.next_started().await;
    harness.expect_events(&[run(&first, "claimed"), run(&first, "running")]).await;
    let second = harness.enqueue("s1", Queue::Interactive, 1, None).await;
    harness.expect_events(&[run(&second, "queued")]).await;
    started.finish(Outcome::Succeeded(Ipld::Null));
    let started = harness.next_started().await;
    harness.expect_events(&[run(&first, "succeeded"), run(&second, "claimed"), run(&second, "running")]).await;
    // A parked run does not hold the session.
    started.finish(Outcome::Parked(Wait::BudgetPause { note: Some("spent".into()) }));
    harness.expect_events(&[run(&second, "waiting"), session("s1")]).await;
    assert_eq!(harness.session_status("s1").await, "idle");
    let third = harness.enqueue("s1", Queue::Interactive, 1, None).await;
    let started = harness.next_started().await;
    started.finish(failure("bad key", false));
    harness
        .expect_events(&[
            run(&third, "queued"),
            session("s1"),
            run(&third, "claimed"),
            run(&third, "running"),
            run(&third, "failed"),
            "session s1 append".to_owned(),
            session("s1"),
        ])
        .await;
    assert_eq!(harness.session_status("s1").await, "error");
    // The budget pause lifted: queued again (streaming), then done (idle: the latest run succeeded).
    let (id, now) = (second.clone(), harness.clock.now_ms());
    let (resumed, changes) = harness
        .app
        .db
        .write(move |conn| {
            let mut changes = Changes::default();
            let resumed = cancel::resume_budget_pause(conn, &id, now, &mut changes)?;
            Ok((resumed, changes))
        })
        .await
        .unwrap();
    assert!(resumed);
    harness.app.runs.publish(changes);
    harness.app.runs.notify();
    let started = harness.next_started().await;
    assert_eq!((started.run.id.as_str(), started.run.attempt), (second.as_str(), 1), "resuming is not a new execution");
    started.finish(Outcome::Succeeded(Ipld::Null));
    harness.until_status(&second, "succeeded").await;
    assert_eq!(harness.session_status("s1").await, "error", "the latest run (third) failed");
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_park_wakes_on_the_clock_as_the_same_execution() {
    let mut harness = Harness::new().await;
    harness.start().await;
    let id = harness.enqueue("s1", Queue::Background, 3, None).await;
    let started = harness.next_started().await;
    let wake_at = harness.clock.now_ms() + 10_000;
    started.finish(Outcome::Parked(Wait::Timer { wake_at }));
    harness.until_status(&id, "waiting").await;
    let info = harness.app.db.read({
        let id = id.clone();
        move |conn| Ok(crate::runs::store::load_info(conn, &id)?)
    });
    let wait = info.await.unwrap().unwrap().wait.unwrap();
    assert_eq!((wait.reason.to_string(), wait.wake_at), ("timer".to_owned(), Some(wake_at)));
    harness.none_started().await;
    harness.clock.set(wake_at);
    let started = harness.next_started().await;
    assert_eq!((started.run.id.as_str(), started.run.attempt), (id.as_str(), 1));
    started.finish(Outcome::Succeeded(Ipld::Null));
    harness.until_status(&id, "succeeded").await;
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_accumulates_and_finished_children_roll_up() {
    let harness = Harness::new().await;
    let parent = harness.enqueue("s1", Queue::Interactive, 1, None).await;
    let child = harness.enqueue("s2", Queue::Background, 3, Some(&parent)).await;
    let (parent_id, child_id, now) = (parent.clone(), child.clone(), harness.clock.now_ms());
    let settled = harness
        .app
        .db
        .write(move |conn| {
            let step = Usage { input: 10, output: 2, cache_read: 1, cache_write: 0, total: 12 };
            finish::add_usage(conn, &parent_id, &step)?;
            finish::add_usage(conn, &parent_id, &step)?;
            crate::runs::store::claim_run(conn, &child_id, "test", now, now + 60_000)?.expect("claimable");
            finish::add_usage(
                conn,
                &child_id,
                &Usage { input: 5, output: 1, cache_read: 0, cache_write: 3, total: 6 },
            )?;
            let mut changes = Changes::default();
            let backoff = (limits().backoff, 0);
            finish::finish(
                conn,
                &crate::server::Consumers,
                Lease { run_id: &child_id, owner: "test" },
                Outcome::Succeeded(Ipld::Null),
                now,
                backoff,
                &mut changes,
            )
        })
        .await
        .unwrap();
    assert_eq!(settled, Settled::Stored(Outcome::Succeeded(Ipld::Null)));
    let usage =
        harness.app.db.read(move |conn| Ok(crate::runs::store::load_info(conn, &parent)?)).await.unwrap().unwrap();
    let usage = usage.usage.unwrap();
    assert_eq!((usage.input, usage.output, usage.cache_read, usage.total), (20, 4, 2, 24));
    let children = usage.children.unwrap();
    assert_eq!((children.input, children.output, children.cache_write, children.total, children.runs), (5, 1, 3, 6, 1));
    harness.stop().await;
}

/// Only an end the run-completed trigger monitor must look at is announced as one, so the
/// monitor does not scan after every turn of an account without triggers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_end_is_announced_as_watched_only_when_a_trigger_may_react() {
    let mut harness = Harness::new().await;
    harness.start().await;
    let quiet = harness.enqueue("s1", Queue::Interactive, 1, None).await;
    harness.next_started().await.finish(Outcome::Succeeded(Ipld::Null));
    let events = harness.events_until(&run(&quiet, "succeeded")).await;
    assert!(!events.iter().any(|event| event.ends_with(" watched")), "no trigger, nothing to scan: {events:?}");

    harness
        .app
        .db
        .write(|conn| {
            conn.execute(
                "INSERT INTO agent_triggers (id, account_id, agent_id, name, enabled, source_cbor, prompt, created_at,
                                             updated_at)
                 VALUES ('t', 'owner', 'a', 't', 1, x'a0', 'p', 1, 1)",
                [],
            )?;
            Ok(())
        })
        .await
        .unwrap();
    let watched = harness.enqueue("s1", Queue::Interactive, 1, None).await;
    harness.next_started().await.finish(failure("bad key", false));
    harness.events_until(&format!("{} watched", run(&watched, "failed"))).await;
    let not_due = "UPDATE runs SET not_before = ?2 WHERE id = ?1";
    let canceled = harness.enqueue_then("s2", not_due, FAR).await;
    assert!(harness.engine().cancel_tree(&canceled).await.unwrap());
    harness.events_until(&format!("{} watched", run(&canceled, "canceled"))).await;
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canceling_a_tree_ends_queued_and_waiting_runs_at_once_and_signals_the_running_one() {
    let mut harness = Harness::new().await;
    harness.start().await;
    let root = harness.enqueue("s1", Queue::Interactive, 1, None).await;
    let started = harness.next_started().await;
    let waiting_sql = "UPDATE runs SET status = 'waiting', updated_at = ?2 WHERE id = ?1";
    let child = harness.enqueue_with("s2", Queue::Background, 3, Some(&root), Some((waiting_sql, START))).await;
    let not_due = "UPDATE runs SET not_before = ?2 WHERE id = ?1";
    let grandchild = harness.enqueue_with("s3", Queue::Background, 3, Some(&child), Some((not_due, FAR))).await;
    harness.events();
    assert!(harness.engine().cancel_tree(&root).await.unwrap());
    assert_eq!(harness.status(&child).await, "canceled");
    assert_eq!(harness.status(&grandchild).await, "canceled");
    assert_eq!(started.stop.reason(), Some(StopReason::Cancel), "the running root was asked to stop");
    harness.until_status(&root, "canceled").await;
    let events = harness.events();
    assert!(events.contains(&run(&child, "canceled")) && events.contains(&run(&grandchild, "canceled")), "{events:?}");
    assert_eq!(harness.session_status("s3").await, "idle");
    let usage = harness.app.db.read({
        let root = root.clone();
        move |conn| Ok(crate::runs::store::load_info(conn, &root)?)
    });
    let info = usage.await.unwrap().unwrap();
    assert_eq!(info.child_run_count, Some(1));
    let child_info =
        harness.app.db.read(move |conn| Ok(crate::runs::store::load_info(conn, &child)?)).await.unwrap().unwrap();
    assert_eq!(child_info.usage.unwrap().children.unwrap().runs, 1, "a canceled child rolls up into its parent");
    assert!(!harness.engine().cancel_tree(&root).await.unwrap(), "nothing left to cancel");
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canceled_is_sticky_and_a_failure_after_a_stop_request_ends_canceled() {
    let mut harness = Harness::new().await;
    harness.start().await;
    // Claimed by a process that is gone (its lease still valid): nothing here can signal it, so
    // the cancellation ends it at once and its late result is dropped.
    let running_sql = "UPDATE runs SET status = 'running', lease_owner = 'other', lease_expires_at = ?2 WHERE id = ?1";
    let orphan = harness.enqueue_with("s1", Queue::Interactive, 1, None, Some((running_sql, FAR))).await;
    assert!(harness.engine().cancel_tree(&orphan).await.unwrap());
    assert_eq!(harness.status(&orphan).await, "canceled");
    let (id, now) = (orphan.clone(), harness.clock.now_ms());
    let late = harness
        .app
        .db
        .write(move |conn| {
            let output = Ipld::String("late".into());
            let backoff = (limits().backoff, 0);
            finish::finish(
                conn,
                &crate::server::Consumers,
                Lease { run_id: &id, owner: "other" },
                Outcome::Succeeded(output),
                now,
                backoff,
                &mut Changes::default(),
            )
        })
        .await
        .unwrap();
    assert_eq!(late, Settled::Stored(Outcome::Canceled(Ipld::Null)));
    assert_eq!(harness.status(&orphan).await, "canceled");
    // An executor that fails on its way out after being asked to stop: canceled, not failed or
    // retried, and no error event.
    harness.gate.watch_stop.store(false, Ordering::SeqCst);
    let retried = harness.enqueue("s2", Queue::Background, 3, None).await;
    let started = harness.next_started().await;
    assert!(harness.engine().cancel_tree(&retried).await.unwrap());
    assert_eq!(harness.status(&retried).await, "running", "executing here: signaled, not ended");
    started.finish(failure("aborted", true));
    harness.until_status(&retried, "canceled").await;
    assert_eq!(harness.session_status("s2").await, "idle");
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_a_session_stops_its_turn_and_cancels_what_waits() {
    let mut harness = Harness::new().await;
    harness.start().await;
    let turn = harness.enqueue("s1", Queue::Interactive, 1, None).await;
    let started = harness.next_started().await;
    let behind = harness.enqueue("s1", Queue::Interactive, 1, None).await;
    let not_due = "UPDATE runs SET not_before = ?2 WHERE id = ?1";
    let child = harness.enqueue_with("s2", Queue::Background, 3, Some(&turn), Some((not_due, FAR))).await;
    assert!(harness.engine().stop_session("s1").await.unwrap());
    assert_eq!(started.stop.reason(), Some(StopReason::Stop), "the session's own turn is stopped, not canceled");
    assert_eq!((harness.status(&behind).await, harness.status(&child).await), ("canceled".into(), "canceled".into()));
    harness.until_status(&turn, "canceled").await;
    assert_eq!(harness.session_status("s1").await, "idle");
    assert!(!harness.engine().stop_session("s1").await.unwrap(), "idle: nothing to stop");
    // A stale mirror with nothing live is corrected, and counts as stopped.
    harness.sql("UPDATE sessions SET status = 'streaming' WHERE id = ?1", vec!["s3".to_owned().into()]).await;
    assert!(harness.engine().stop_session("s3").await.unwrap());
    assert_eq!(harness.session_status("s3").await, "idle");
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_leaves_executing_runs_to_the_next_boot_sweep() {
    let mut harness = Harness::new().await;
    harness.start().await;
    let id = harness.enqueue("s1", Queue::Interactive, 1, None).await;
    let started = harness.next_started().await;
    let stop = started.stop.clone();
    harness.app.runs.shutdown().await;
    assert_eq!(stop.reason(), Some(StopReason::Shutdown));
    assert_eq!(harness.engine().executing(), 0);
    assert_eq!(harness.status(&id).await, "running", "not finished: the failure was the shutdown's");
    let queued = harness.enqueue("s2", Queue::Interactive, 1, None).await;
    let inline = harness.app.runs.run_inline(&queued).await.unwrap();
    assert_eq!(inline, InlineOutcome::NotClaimed, "a stopping engine claims nothing");
    drop(started);
    let dir = harness.stop().await;
    let mut restarted = Harness::with(limits(), dir, false).await;
    restarted.start().await;
    let mut ids = vec![restarted.next_started().await, restarted.next_started().await];
    ids.sort_by(|a, b| a.run.id.cmp(&b.run.id));
    let mut got: Vec<(String, u32)> = ids.iter().map(|s| (s.run.id.clone(), s.run.attempt)).collect();
    got.sort();
    let mut expected = vec![(id.clone(), 1), (queued.clone(), 1)];
    expected.sort();
    assert_eq!(got, expected);
    for started in ids {
        started.finish(Outcome::Succeeded(Ipld::Null));
    }
    restarted.until_status(&id, "succeeded").await;
    restarted.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_session_or_agent_cancels_its_runs_first() {
    let mut harness = Harness::new().await;
    harness.start().await;
    let turn = harness.enqueue("s1", Queue::Interactive, 1, None).await;
    let started = harness.next_started().await;
    let not_due = "UPDATE runs SET not_before = ?2 WHERE id = ?1";
    let queued = harness.enqueue_with("s2", Queue::Background, 3, None, Some((not_due, FAR))).await;
    let (now, ending) = (harness.clock.now_ms(), harness.engine().ending());
    let (canceled, changes) = harness
        .app
        .db
        .write(move |conn| {
            let mut changes = Changes::default();
            let canceled = cancel::cancel_session(conn, "s1", now, &ending, &mut changes)?;
            conn.execute("DELETE FROM sessions WHERE id = 's1'", [])?;
            Ok((canceled, changes))
        })
        .await
        .unwrap();
    assert_eq!(canceled.live, [(turn.clone(), Some("s1".to_owned()))]);
    assert!(harness.engine().after_cancel(canceled, changes, None));
    assert_eq!(started.stop.reason(), Some(StopReason::Cancel));
    harness.until_status(&turn, "canceled").await;
    let (now, ending) = (harness.clock.now_ms(), harness.engine().ending());
    let canceled = harness
        .app
        .db
        .write(move |conn| cancel::cancel_agent(conn, "a", now, &ending, &mut Changes::default()))
        .await
        .unwrap();
    assert_eq!(canceled.canceled, [queued]);
    let detached = harness
        .app
        .db
        .read(move |conn| {
            Ok(conn.query_row("SELECT session_id FROM runs WHERE id = ?1", params![turn], |row| {
                row.get::<_, Option<String>>(0)
            })?)
        })
        .await
        .unwrap();
    assert_eq!(detached, None, "the run outlives its session");
    harness.stop().await;
}
