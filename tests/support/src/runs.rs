//! Runs for tests: a scripted executor installed in the server under test, and runs staged in a
//! given state straight through the engine's own SQL (one transaction each, so the dispatcher
//! never sees them half-made).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ipld_core::ipld::Ipld;
use seed_agents_server::testing::App;
use seed_agents_server::testing::db::ToSql;
use seed_agents_server::testing::error::ErrorKind;
use seed_agents_server::testing::runs::engine::{Claimed, Executor, Outcome, RunFailure, StopReason, StopSignal};
use seed_agents_server::testing::runs::finish::{self, Backoff, Lease};
use seed_agents_server::testing::runs::queue::{self, Changes, NewRun, Queue};
use seed_agents_server::testing::runs::wait::Wait;
use tokio::sync::{mpsc, oneshot};

use crate::TestServer;

/// `{assistantEventId: id}`, a turn's output.
pub fn turn_output(id: &str) -> Ipld {
    Ipld::Map(BTreeMap::from([("assistantEventId".to_owned(), Ipld::String(id.to_owned()))]))
}

/// An execution a [`Scripted`] executor started and holds until the test ends it.
pub struct Execution {
    pub run: Claimed,
    pub stop: StopSignal,
    finish: oneshot::Sender<Outcome>,
}

impl Execution {
    pub fn finish(self, outcome: Outcome) {
        let _ = self.finish.send(outcome);
    }
}

/// A scripted executor: with an `answer` set, every run ends with it at once; otherwise each
/// execution is handed to the test ([`Scripted::next`]) and ends when the test says, or when it
/// is asked to stop (`Canceled({assistantEventId: 'stopped'})`).
pub struct Scripted {
    answer: Mutex<Option<Outcome>>,
    started: mpsc::UnboundedSender<Execution>,
    receiver: tokio::sync::Mutex<mpsc::UnboundedReceiver<Execution>>,
}

impl Scripted {
    /// Installs a scripted executor (holding every execution) in `server`.
    pub fn install(server: &TestServer) -> Arc<Self> {
        let (started, receiver) = mpsc::unbounded_channel();
        let scripted =
            Arc::new(Self { answer: Mutex::new(None), started, receiver: tokio::sync::Mutex::new(receiver) });
        app(server).runs.install(scripted.clone());
        scripted
    }

    /// Ends every later run with `outcome` at once (`None`: hold them again).
    pub fn answer(&self, outcome: Option<Outcome>) {
        *self.answer.lock().unwrap() = outcome;
    }

    /// The next held execution (10 s at most).
    pub async fn next(&self) -> Execution {
        let mut receiver = self.receiver.lock().await;
        tokio::time::timeout(Duration::from_secs(10), receiver.recv())
            .await
            .expect("an execution within 10 s")
            .expect("the executor is installed")
    }
}

impl Executor for Scripted {
    fn execute(&self, run: Claimed, stop: StopSignal) -> futures_util::future::BoxFuture<'static, Outcome> {
        if let Some(outcome) = self.answer.lock().unwrap().clone() {
            return Box::pin(async move { outcome });
        }
        let (finish, finished) = oneshot::channel();
        let _ = self.started.send(Execution { run, stop: stop.clone(), finish });
        Box::pin(async move {
            tokio::select! {
                outcome = finished => outcome.unwrap_or(Outcome::Canceled(Ipld::Null)),
                reason = stop.stopped() => match reason {
                    StopReason::Shutdown => Outcome::Failed(failure("shutting down", ErrorKind::Upstream)),
                    StopReason::Stop | StopReason::Cancel => Outcome::Canceled(turn_output("stopped")),
                },
            }
        })
    }
}

/// A final (not retryable) provider failure with `message`, answered as `kind`.
pub fn failure(message: &str, kind: ErrorKind) -> RunFailure {
    RunFailure { kind, ..RunFailure::provider(message, false) }
}

/// The app of a running test server.
pub fn app(server: &TestServer) -> &Arc<App> {
    server.server.as_ref().expect("the server runs").app()
}

/// How a staged run is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Queued, but not due for a long time (nothing claims it): the session is streaming.
    Queued,
    /// Parked on a budget pause (SignalRun resumes it).
    Paused,
    /// Failed for good: the session shows `error` and holds its `error` event.
    Failed,
}

/// Stages a run of `agent_id` in `session_id` (stored under `owner`), titled "Staged turn".
pub async fn stage(
    server: &TestServer,
    owner: &str,
    agent_id: &str,
    session_id: &str,
    stage: Stage,
) -> seed_agents_protocol::RunId {
    let app = app(server).clone();
    let run = NewRun {
        account_id: owner.to_owned(),
        agent_id: agent_id.to_owned(),
        session_id: session_id.to_owned(),
        origin: "user",
        title: Some("Staged turn".into()),
        input: Ipld::Map(BTreeMap::from([("kind".to_owned(), Ipld::String("session-message".into()))])),
        queue: Queue::Interactive,
        max_attempts: 1,
        parent_run_id: None,
    };
    let (now, ending) = (app.clock.now_ms(), app.runs.ending());
    let (id, changes) = app
        .db
        .write(move |conn| {
            let mut changes = Changes::default();
            let id = queue::enqueue(conn, &run, now, &mut changes)?;
            let outcome = match stage {
                Stage::Queued => {
                    conn.execute("UPDATE runs SET not_before = ?2 WHERE id = ?1", &[&id as &dyn ToSql, &i64::MAX][..])?;
                    return Ok((id, changes));
                }
                Stage::Paused => Outcome::Parked(Wait::BudgetPause { note: Some("budget spent".into()) }),
                Stage::Failed => Outcome::Failed(failure("The provider refused the request", ErrorKind::Upstream)),
            };
            // The claim fails while another run of the session is live: stage only in a quiet session.
            let claimed = queue::claim_run(conn, &id, "stager", now, now + 60_000)?;
            assert!(claimed.is_some(), "stage: session {} has another live run; wait for it first", run.session_id);
            let backoff = (Backoff { base_ms: 5_000, cap_ms: 300_000 }, 0);
            finish::finish(
                conn,
                ending.hooks(),
                Lease { run_id: &id, owner: "stager" },
                outcome,
                now,
                backoff,
                &mut changes,
            )?;
            Ok((id, changes))
        })
        .await
        .expect("stage a run");
    app.runs.publish(changes);
    id.into()
}
