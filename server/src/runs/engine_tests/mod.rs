//! Tests of the run engine against a real database, with a scripted executor ([`Gate`]) the
//! test releases run by run, a manual clock for leases and backoff, and the bus observed.
//!
//! `dispatch.rs`: claim order, the one-run-per-session rule under concurrency, leases, the boot
//! sweep, inline runs. `lifecycle.rs`: finishing (retries, parking, usage), the status mirror and
//! its events, cancellation, stopping, shutdown.

mod dispatch;
mod lifecycle;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::db::params;
use futures_util::future::BoxFuture;
use ipld_core::ipld::Ipld;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::task::JoinHandle;

use super::engine::{Claimed, Engine, Executor, Limits, Outcome, RunFailure, StopReason, StopSignal};
use super::finish::Backoff;
use super::queue::{self, Changes, NewRun, Queue};
use crate::app::App;
use crate::bus::Event;
use crate::clock::Clock;
use crate::config::Config;

/// The manual clock's start.
const START: i64 = 1_000_000;

/// Short real-time knobs; leases and backoff keep upstream's values on the manual clock.
fn limits() -> Limits {
    Limits {
        max_in_flight: 8,
        lease_ms: 60_000,
        renew_every: Duration::from_millis(50),
        tick: Duration::from_millis(20),
        backoff: Backoff { base_ms: 5_000, cap_ms: 300_000 },
        shutdown_grace: Duration::from_secs(2),
    }
}

/// An execution the [`Gate`] started, waiting for the test to end it.
struct Started {
    run: Claimed,
    stop: StopSignal,
    finish: oneshot::Sender<Outcome>,
}

impl Started {
    fn finish(self, outcome: Outcome) {
        let _ = self.finish.send(outcome);
    }
}

/// A scripted executor: each execution is announced on a channel and ends when the test says
/// how (or, when `watch_stop`, as soon as it is asked to stop: `Canceled("stopped")`, or a
/// failure under a shutdown). It records whether two executions of one session ever overlapped.
struct Gate {
    started: mpsc::UnboundedSender<Started>,
    /// Whether an execution ends as soon as it is asked to stop (else only when released).
    watch_stop: AtomicBool,
    per_session: Arc<Mutex<HashMap<String, usize>>>,
    overlapped: Arc<AtomicBool>,
}

impl Executor for Gate {
    fn execute(&self, run: Claimed, stop: StopSignal) -> BoxFuture<'static, Outcome> {
        let (finish, finished) = oneshot::channel();
        let session = run.session_id.clone().unwrap_or_default();
        {
            let mut running = self.per_session.lock().unwrap();
            let count = running.entry(session.clone()).or_default();
            *count += 1;
            if *count > 1 {
                self.overlapped.store(true, Ordering::SeqCst);
            }
        }
        let _ = self.started.send(Started { run, stop: stop.clone(), finish });
        let (per_session, watch_stop) = (self.per_session.clone(), self.watch_stop.load(Ordering::SeqCst));
        Box::pin(async move {
            let stopped = async {
                if !watch_stop {
                    std::future::pending::<()>().await;
                }
                stop.stopped().await
            };
            let outcome = tokio::select! {
                outcome = finished => outcome.unwrap_or(Outcome::Canceled(Ipld::Null)),
                reason = stopped => match reason {
                    StopReason::Shutdown => failure("interrupted", true),
                    StopReason::Stop | StopReason::Cancel => Outcome::Canceled(Ipld::String("stopped".into())),
                },
            };
            if let Some(count) = per_session.lock().unwrap().get_mut(&session) {
                *count -= 1;
            }
            outcome
        })
    }
}

fn failure(message: &str, retryable: bool) -> Outcome {
    Outcome::Failed(RunFailure::provider(message, retryable))
}

/// An app over a temporary database with agent `a` (owned by `owner`) and sessions `s1`–`s4`.
struct Harness {
    app: Arc<App>,
    clock: Clock,
    bus: broadcast::Receiver<Arc<Event>>,
    started: mpsc::UnboundedReceiver<Started>,
    gate: Arc<Gate>,
    dispatcher: Option<JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Harness {
    async fn new() -> Self {
        Self::with(limits(), tempfile::tempdir().unwrap(), true).await
    }

    /// A harness over `dir` (a restart reuses the directory); `seed` adds the agent and sessions.
    async fn with(limits: Limits, dir: tempfile::TempDir, seed: bool) -> Self {
        let mut config = Config::new(dir.path(), "127.0.0.1:0".parse().unwrap());
        config.run_limits = limits;
        let clock = Clock::manual(START);
        let app = Arc::new(App::open(config, clock.clone()).unwrap());
        if seed {
            app.db
                .write(|conn| {
                    conn.execute_batch(
                        "INSERT INTO agents (id, account_id, definition_cbor, state_dir, status, created_at, updated_at)
                             VALUES ('a', 'owner', x'a0', '/tmp/a', 'active', 1, 1);
                         INSERT INTO sessions (id, account_id, agent_id, title_source, status, created_at, updated_at)
                             VALUES ('s1', 'owner', 'a', 'system', 'idle', 1, 1), ('s2', 'owner', 'a', 'system', 'idle', 1, 1),
                                    ('s3', 'owner', 'a', 'system', 'idle', 1, 1), ('s4', 'owner', 'a', 'system', 'idle', 1, 1);",
                    )?;
                    Ok(())
                })
                .await
                .unwrap();
        }
        let (sender, started) = mpsc::unbounded_channel();
        let gate = Arc::new(Gate {
            started: sender,
            watch_stop: AtomicBool::new(true),
            per_session: Arc::default(),
            overlapped: Arc::default(),
        });
        let bus = app.bus.subscribe();
        Self { app, clock, bus, started, gate, dispatcher: None, _dir: dir }
    }

    fn engine(&self) -> &Engine {
        &self.app.runs
    }

    /// Installs the gate and starts the dispatcher, once its boot sweep is done.
    async fn start(&mut self) {
        self.app.runs.install_hooks(std::sync::Arc::new(crate::server::Consumers));
        self.app.runs.install(self.gate.clone());
        self.dispatcher = Some(self.app.runs.start());
        self.app.runs.swept().await;
    }

    /// Enqueues an interactive run in `session` and, in the same transaction, runs `sql` with
    /// `?1` the run and `?2` `value` (so the dispatcher never sees the run in between).
    async fn enqueue_then(&self, session: &str, sql: &'static str, value: i64) -> String {
        self.enqueue_with(session, Queue::Interactive, 1, None, Some((sql, value))).await
    }

    /// Enqueues an agent run in `session` (the clock moves 1 ms, so creation orders runs).
    async fn enqueue(&self, session: &str, queue: Queue, max_attempts: u32, parent: Option<&str>) -> String {
        self.enqueue_with(session, queue, max_attempts, parent, None).await
    }

    async fn enqueue_with(
        &self,
        session: &str,
        queue: Queue,
        max_attempts: u32,
        parent: Option<&str>,
        then: Option<(&'static str, i64)>,
    ) -> String {
        let run = NewRun {
            account_id: "owner".into(),
            agent_id: "a".into(),
            session_id: session.into(),
            origin: "user",
            title: Some(format!("turn in {session}")),
            input: Ipld::Map(Default::default()),
            queue,
            max_attempts,
            parent_run_id: parent.map(str::to_owned),
        };
        let now = self.clock.now_ms();
        self.clock.advance(1);
        let (id, changes) = self
            .app
            .db
            .write(move |conn| {
                let mut changes = Changes::default();
                let id = queue::enqueue(conn, &run, now, &mut changes)?;
                if let Some((sql, value)) = then {
                    conn.execute(sql, params![id, value])?;
                }
                Ok((id, changes))
            })
            .await
            .unwrap();
        self.app.runs.publish(changes);
        self.app.runs.notify();
        id
    }

    /// Runs SQL on the writer.
    async fn sql(&self, sql: &'static str, values: Vec<crate::db::Value>) {
        self.app.db.write(move |conn| Ok(conn.execute(sql, crate::db::params_from_iter(values))?)).await.unwrap();
    }

    /// A run's `(status, attempt, not_before, lease_owner)`.
    async fn row(&self, run_id: &str) -> (String, u32, Option<i64>, Option<String>) {
        let id = run_id.to_owned();
        self.app
            .db
            .read(move |conn| {
                Ok(conn.query_row(
                    "SELECT status, attempt, not_before, lease_owner FROM runs WHERE id = ?1",
                    params![id],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
                )?)
            })
            .await
            .unwrap()
    }

    async fn status(&self, run_id: &str) -> String {
        self.row(run_id).await.0
    }

    async fn session_status(&self, session: &str) -> String {
        let id = session.to_owned();
        self.app
            .db
            .read(move |conn| {
                Ok(conn.query_row("SELECT status FROM sessions WHERE id = ?1", params![id], |row| row.get(0))?)
            })
            .await
            .unwrap()
    }

    /// Waits (5 s at most) until run `run_id` has `status`.
    async fn until_status(&self, run_id: &str, status: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let now = self.status(run_id).await;
            if now == status {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "run {run_id} stayed {now}, expected {status}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The next execution the gate started (5 s at most).
    async fn next_started(&mut self) -> Started {
        tokio::time::timeout(Duration::from_secs(5), self.started.recv())
            .await
            .expect("an execution starts within 5 s")
            .expect("the gate is alive")
    }

    /// No execution starts for a while (several dispatcher ticks).
    async fn none_started(&mut self) {
        self.app.runs.notify();
        if let Ok(Some(started)) = tokio::time::timeout(Duration::from_millis(150), self.started.recv()).await {
            panic!("expected no execution, {} started", started.run.id);
        }
    }

    /// Waits (5 s at most) for the bus events `expected` and nothing else. Each run's events and
    /// each session's must come in the order given; different runs' may interleave (a run's
    /// commit and its publication are not atomic with another run's).
    async fn expect_events(&mut self, expected: &[String]) {
        let mut seen = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while seen.len() < expected.len() && tokio::time::Instant::now() < deadline {
            seen.extend(self.events());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        seen.extend(self.events());
        let subject = |event: &String| event.split(' ').take(2).collect::<Vec<_>>().join(" ");
        let (mut sorted_seen, mut sorted_expected) = (seen.clone(), expected.to_vec());
        sorted_seen.sort();
        sorted_expected.sort();
        assert_eq!(sorted_seen, sorted_expected, "events: {seen:?}");
        for event in expected {
            let of =
                |list: &[String]| list.iter().filter(|e| subject(e) == subject(event)).cloned().collect::<Vec<_>>();
            assert_eq!(of(&seen), of(expected), "the order of {}'s events in {seen:?}", subject(event));
        }
    }

    /// The bus events published from now until `wanted` (5 s at most), summarized as
    /// [`Self::events`] does; panics when `wanted` does not come.
    async fn events_until(&mut self, wanted: &str) -> Vec<String> {
        let mut seen = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !seen.iter().any(|event| event == wanted) {
            assert!(tokio::time::Instant::now() < deadline, "{wanted:?} never came: {seen:?}");
            seen.extend(self.events());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        seen
    }

    /// The bus events published since the last call, summarized: `run <id> <status>` (with
    /// ` watched` when its end is left for the run-completed trigger monitor), `session <id>`,
    /// `session <id> append`.
    fn events(&mut self) -> Vec<String> {
        let mut seen = Vec::new();
        while let Ok(event) = self.bus.try_recv() {
            match &*event {
                Event::RunChanged { run, end_watched } => {
                    let watched = if *end_watched { " watched" } else { "" };
                    seen.push(format!("run {} {}{watched}", run.id, run.status));
                }
                Event::SessionChanged { session_id, .. } => seen.push(format!("session {session_id}")),
                Event::SessionAppended { event, .. } => seen.push(format!("session {} append", event.session_id)),
                Event::JournalAppended { entry, .. } => seen.push(format!("journal {} {}", entry.run_id, entry.seq)),
                Event::AccountChange { .. } | Event::AgentChanged { .. } => {}
            }
        }
        seen
    }

    async fn stop(mut self) -> tempfile::TempDir {
        self.app.runs.shutdown().await;
        if let Some(dispatcher) = self.dispatcher.take() {
            dispatcher.await.unwrap();
        }
        // Aborted lease renewals drop their handle on the app a moment later; the data
        // directory's lock goes with the last one.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while Arc::strong_count(&self.app) > 1 {
            assert!(tokio::time::Instant::now() < deadline, "something still holds the app");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.app.db.close();
        self._dir
    }
}
