//! Claiming: order, the one-run-per-session rule, leases, the boot sweep, inline runs.

use std::time::Duration;

use ipld_core::ipld::Ipld;

use super::{Harness, failure, limits};
use crate::runs::engine::{InlineOutcome, Outcome};
use crate::runs::queue::Queue;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_interactive_first_then_oldest_first() {
    let mut harness =
        Harness::with(crate::runs::Limits { max_in_flight: 1, ..limits() }, tempfile::tempdir().unwrap(), true).await;
    let background_s1 = harness.enqueue("s1", Queue::Background, 1, None).await;
    let interactive_s2 = harness.enqueue("s2", Queue::Interactive, 1, None).await;
    let interactive_s3 = harness.enqueue("s3", Queue::Interactive, 1, None).await;
    let background_s4 = harness.enqueue("s4", Queue::Background, 1, None).await;
    harness.start().await;
    let mut order = Vec::new();
    for _ in 0..4 {
        let started = harness.next_started().await;
        assert_eq!(harness.engine().executing(), 1, "one at a time with max_in_flight 1");
        order.push(started.run.id.clone());
        started.finish(Outcome::Succeeded(Ipld::Null));
    }
    assert_eq!(order, [interactive_s2, interactive_s3, background_s1, background_s4]);
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freed_slot_and_a_freed_session_wake_the_dispatcher_without_its_tick() {
    // An hour's tick: only wakes move the dispatcher here.
    let one_slot = crate::runs::Limits { max_in_flight: 1, tick: Duration::from_secs(3600), ..limits() };
    let mut harness = Harness::with(one_slot, tempfile::tempdir().unwrap(), true).await;
    let first = harness.enqueue("s1", Queue::Interactive, 1, None).await;
    let behind_in_session = harness.enqueue("s1", Queue::Interactive, 1, None).await;
    let waiting_for_room = harness.enqueue("s2", Queue::Interactive, 1, None).await;
    harness.start().await;
    let started = harness.next_started().await;
    assert_eq!(started.run.id, first);
    // The slot is full: s2 waits for room, s1's second turn for its session.
    started.finish(Outcome::Succeeded(Ipld::Null));
    let mut order = Vec::new();
    for _ in 0..2 {
        let started = harness.next_started().await;
        order.push(started.run.id.clone());
        started.finish(Outcome::Succeeded(Ipld::Null));
    }
    assert_eq!(order, [behind_in_session, waiting_for_room]);
    harness.stop().await;

    // Room to spare: a turn queued behind a running one in its session starts when it ends.
    let roomy = crate::runs::Limits { tick: Duration::from_secs(3600), ..limits() };
    let mut harness = Harness::with(roomy, tempfile::tempdir().unwrap(), true).await;
    harness.start().await;
    let running = harness.enqueue("s1", Queue::Interactive, 1, None).await;
    let started = harness.next_started().await;
    assert_eq!(started.run.id, running);
    let behind = harness.enqueue("s1", Queue::Interactive, 1, None).await;
    harness.none_started().await;
    started.finish(Outcome::Succeeded(Ipld::Null));
    let next = harness.next_started().await;
    assert_eq!(next.run.id, behind);
    next.finish(Outcome::Succeeded(Ipld::Null));
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_two_executions_in_one_session_even_with_inline_claims_racing() {
    let mut harness = Harness::new().await;
    let mut runs = Vec::new();
    for index in 0..6 {
        let session = if index % 2 == 0 { "s1" } else { "s2" };
        runs.push((session, harness.enqueue(session, Queue::Interactive, 1, None).await));
    }
    harness.start().await;
    // Inline callers race the dispatcher for every run.
    let mut inline = tokio::task::JoinSet::new();
    for (_, run) in &runs {
        let (app, run) = (harness.app.clone(), run.clone());
        inline.spawn(async move { app.runs.run_inline(&run).await.unwrap() });
    }
    let mut executed = Vec::new();
    while executed.len() < runs.len() {
        let started = harness.next_started().await;
        // Let every racer try while this one holds its session.
        tokio::time::sleep(Duration::from_millis(30)).await;
        executed.push((started.run.session_id.clone().unwrap_or_default(), started.run.id.clone()));
        started.finish(Outcome::Succeeded(Ipld::Null));
    }
    assert!(!harness.gate.overlapped.load(std::sync::atomic::Ordering::SeqCst), "two executions shared a session");
    for session in ["s1", "s2"] {
        let created: Vec<&String> = runs.iter().filter(|(s, _)| *s == session).map(|(_, run)| run).collect();
        let ran: Vec<&String> = executed.iter().filter(|(s, _)| s == session).map(|(_, run)| run).collect();
        assert_eq!(ran, created, "a session's runs execute oldest first");
    }
    while let Some(outcome) = inline.join_next().await {
        // Each racer either executed its run, waited for the dispatcher's execution of it, or lost
        // to the turn holding its session (the run then executed from the queue).
        let outcome = outcome.unwrap();
        assert!(
            matches!(outcome, InlineOutcome::Finished(Outcome::Succeeded(_)) | InlineOutcome::NotClaimed),
            "{outcome:?}"
        );
    }
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_run_executes_for_its_caller_or_is_left_queued_behind_the_turn() {
    let mut harness = Harness::new().await;
    harness.app.runs.install(harness.gate.clone());
    // No dispatcher: only the inline caller claims.
    let first = harness.enqueue("s1", Queue::Interactive, 1, None).await;
    let (app, id) = (harness.app.clone(), first.clone());
    let caller = tokio::spawn(async move { app.runs.run_inline(&id).await.unwrap() });
    let started = harness.next_started().await;
    assert_eq!((started.run.id.as_str(), started.run.attempt, started.run.max_attempts), (first.as_str(), 1, 1));
    let second = harness.enqueue("s1", Queue::Interactive, 1, None).await;
    let held = harness.app.runs.run_inline(&second).await.unwrap();
    assert_eq!(held, InlineOutcome::NotClaimed, "another turn holds the session");
    assert_eq!(harness.status(&second).await, "queued");
    let output = Ipld::Map([("assistantEventId".to_owned(), Ipld::String("e1".into()))].into());
    started.finish(Outcome::Succeeded(output.clone()));
    assert_eq!(caller.await.unwrap(), InlineOutcome::Finished(Outcome::Succeeded(output)));
    // The caller gone does not strand a run: the execution is its own task.
    let (app, id) = (harness.app.clone(), second.clone());
    let abandoned = tokio::spawn(async move { app.runs.run_inline(&id).await });
    let started = harness.next_started().await;
    abandoned.abort();
    started.finish(failure("provider down", false));
    harness.until_status(&second, "failed").await;
    // An ended run reports how it ended to a late inline caller.
    let late = harness.app.runs.run_inline(&second).await.unwrap();
    assert!(
        matches!(late, InlineOutcome::Finished(Outcome::Failed(ref failure)) if failure.message == "provider down")
    );
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_boot_sweep_requeues_what_a_crash_left_without_counting_an_execution() {
    let dir = tempfile::tempdir().unwrap();
    let harness = Harness::with(limits(), dir, true).await;
    let crashed = harness.enqueue("s1", Queue::Interactive, 1, None).await;
    let also = harness.enqueue("s2", Queue::Background, 3, None).await;
    // A previous process claimed both (executions 1 and 2) and died with valid leases.
    harness
        .sql(
            "UPDATE runs SET status = 'running', lease_owner = 'dead', lease_expires_at = 9999999999, attempt = 1,
                 started_at = 5 WHERE id = ?1",
            vec![crashed.clone().into()],
        )
        .await;
    harness
        .sql(
            "UPDATE runs SET status = 'claimed', lease_owner = 'dead', lease_expires_at = 9999999999, attempt = 2
             WHERE id = ?1",
            vec![also.clone().into()],
        )
        .await;
    let dir = harness.stop().await;
    let mut restarted = Harness::with(limits(), dir, false).await;
    restarted.start().await;
    let mut started = vec![restarted.next_started().await, restarted.next_started().await];
    started.sort_by(|a, b| a.run.id.cmp(&b.run.id));
    let mut claimed: Vec<(String, u32)> = started.iter().map(|s| (s.run.id.clone(), s.run.attempt)).collect();
    let mut expected = vec![(crashed.clone(), 1), (also.clone(), 2)];
    expected.sort();
    claimed.sort();
    assert_eq!(claimed, expected, "a requeue at boot is not a new execution");
    let events = restarted.events();
    assert!(events.contains(&format!("run {crashed} queued")), "{events:?}");
    for execution in started {
        if execution.run.id == also {
            execution.finish(failure("again", true));
        } else {
            execution.finish(Outcome::Succeeded(Ipld::Null));
        }
    }
    restarted.until_status(&also, "queued").await;
    // The retry is the third execution of three: the sweep did not eat the budget.
    assert_eq!(restarted.row(&also).await.1, 3);
    restarted.until_status(&crashed, "succeeded").await;
    restarted.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_of_another_owner_is_reclaimed_and_a_live_one_holds_the_session() {
    let mut harness = Harness::new().await;
    harness.start().await;
    harness.none_started().await;
    // Another process holds `stale` until START + 60 s (written after this engine's boot sweep,
    // in the transaction that enqueues it).
    let stale = harness
        .enqueue_then(
            "s1",
            "UPDATE runs SET status = 'running', lease_owner = 'other', lease_expires_at = ?2, attempt = 1 WHERE id = ?1",
            super::START + 60_000,
        )
        .await;
    let behind = harness.enqueue("s1", Queue::Interactive, 1, None).await;
    harness.none_started().await;
    assert_eq!(harness.status(&behind).await, "queued", "the live lease holds the session");
    harness.clock.advance(61_000);
    let started = harness.next_started().await;
    assert_eq!((started.run.id.as_str(), started.run.attempt), (stale.as_str(), 1), "reclaimed, same execution");
    let (_, _, _, owner) = harness.row(&stale).await;
    assert_eq!(owner.as_deref(), Some(harness.engine().owner()));
    started.finish(Outcome::Succeeded(Ipld::Null));
    let next = harness.next_started().await;
    assert_eq!(next.run.id, behind);
    next.finish(Outcome::Succeeded(Ipld::Null));
    harness.until_status(&behind, "succeeded").await;
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executing_run_keeps_its_lease_renewed() {
    let mut harness = Harness::new().await;
    harness.start().await;
    let run = harness.enqueue("s1", Queue::Interactive, 1, None).await;
    let started = harness.next_started().await;
    let lease = |harness: &Harness| {
        let id = run.clone();
        let app = harness.app.clone();
        async move {
            app.db
                .read(move |conn| {
                    Ok(conn.query_row("SELECT lease_expires_at FROM runs WHERE id = ?1", [id], |row| {
                        row.get::<_, i64>(0)
                    })?)
                })
                .await
                .unwrap()
        }
    };
    assert_eq!(lease(&harness).await, super::START + 1 + 60_000);
    harness.clock.advance(30_000);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while lease(&harness).await != super::START + 30_001 + 60_000 {
        assert!(tokio::time::Instant::now() < deadline, "the lease was not renewed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    started.finish(Outcome::Succeeded(Ipld::Null));
    harness.until_status(&run, "succeeded").await;
    harness.stop().await;
}
