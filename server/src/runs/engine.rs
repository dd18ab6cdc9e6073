//! The engine: claims runs from the queue, executes them through the installed [`Executor`], and
//! finishes them; cancels and stops them; sweeps what a crash left at boot.
//!
//! One dispatcher task (started by [`Engine::start`]) first runs the boot sweep, then, on every
//! [`Engine::notify`] and at least once per tick (1 s), requeues parked runs whose wake time came
//! and claims runs while fewer than `max_in_flight` (8) execute in this process. Each claimed run
//! executes on its own task: claimed → running, the executor's future (its lease renewed every
//! 20 s), then [`finish`]. [`Engine::run_inline`] claims one given run for a
//! caller who waits for it (MessageSession, RetrySession); it executes on a task of its own too,
//! so a caller that goes away (a closed connection, the request timeout) never strands a claimed
//! run.
//!
//! Runs executing in this process are registered with their [`StopSignal`] inside the claim's
//! transaction, on the writer thread, so any later transaction that sees the run claimed also
//! finds its signal (cancellation decides there between signaling and canceling at once).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures_util::FutureExt as _;
use ipld_core::ipld::Ipld;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::cancel::{self, Canceled};
pub(crate) use super::executor::{Executor, FailureCode, InlineOutcome, Outcome, RunFailure, StopReason, StopSignal};
use super::finish::{self, Backoff, Lease, Settled};
use super::hooks::{Ending, NoHooks, RunHooks};
pub(crate) use super::queue::Claimed;
use super::queue::{self, Changes};
use super::store;
pub(crate) use super::wait::Wait;
use crate::bus::{Bus, Event};
use crate::clock::Clock;
use crate::db::Db;
use crate::error::{ApiError, ApiResult, ErrorKind};

/// The engine's knobs (upstream's constants by default; tests shorten them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Runs executing at once in this process that the dispatcher respects (inline runs count
    /// but are never refused: a person is waiting for them).
    pub max_in_flight: usize,
    /// How long a claim's lease lasts, in ms of the app's clock.
    pub lease_ms: i64,
    /// How often an executing run's lease is renewed.
    pub renew_every: Duration,
    /// How often the dispatcher looks for due work without being notified.
    pub tick: Duration,
    /// Retry delays.
    pub backoff: Backoff,
    /// How long [`Engine::shutdown`] waits for executions to end.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_in_flight: 8,
            lease_ms: 60_000,
            renew_every: Duration::from_secs(20),
            tick: Duration::from_secs(1),
            backoff: Backoff { base_ms: 5_000, cap_ms: 5 * 60_000 },
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// A run executing in this process.
#[derive(Debug)]
struct Live {
    stop: StopSignal,
    /// The claim that registered it (to undo a registration whose transaction did not commit).
    claim: u64,
    /// Set to what finishing stored, just before the run is forgotten (an inline caller whose run
    /// the dispatcher claimed first waits on it).
    done: watch::Sender<Option<Settled>>,
}

/// The run engine (lives in the `App` as `app.runs`); cheap to clone.
///
/// It works over its own handles (the database, the bus, the clock) and knows its executor and
/// its consumers only through what was installed ([`Engine::install`], [`Engine::install_hooks`]).
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    /// This process's lease owner id.
    owner: String,
    db: Db,
    bus: Bus,
    clock: Clock,
    limits: Limits,
    executor: RwLock<Option<Arc<dyn Executor>>>,
    /// The consumers told when runs end ([`NoHooks`] until installed).
    hooks: RwLock<Arc<dyn RunHooks>>,
    /// Wakes the dispatcher.
    wake: Notify,
    /// Runs executing here, by id.
    live: Mutex<HashMap<String, Live>>,
    /// Told whenever a run stops executing here.
    drained: Notify,
    /// Set by [`Engine::shutdown`]: nothing more is claimed.
    closing: AtomicBool,
    /// Set once the boot sweep is done.
    swept: watch::Sender<bool>,
    /// Set while the dispatcher stopped claiming because `max_in_flight` runs executed: the next
    /// run to stop executing wakes it.
    starved: AtomicBool,
    claims: AtomicU64,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("owner", &self.inner.owner)
            .field("limits", &self.inner.limits)
            .field("executing", &self.executing())
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing panics while the lock is held; recover the data if it ever did.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Inner {
    fn is_live(&self, run_id: &str) -> bool {
        lock(&self.live).contains_key(run_id)
    }
}

impl Engine {
    /// An engine over `db`, publishing on `bus`, with no executor or hooks installed.
    pub fn new(db: Db, bus: Bus, clock: Clock, limits: Limits) -> Self {
        Self {
            inner: Arc::new(Inner {
                owner: uuid::Uuid::new_v4().to_string(),
                db,
                bus,
                clock,
                limits,
                executor: RwLock::new(None),
                hooks: RwLock::new(Arc::new(NoHooks)),
                wake: Notify::new(),
                live: Mutex::new(HashMap::new()),
                drained: Notify::new(),
                closing: AtomicBool::new(false),
                swept: watch::channel(false).0,
                starved: AtomicBool::new(false),
                claims: AtomicU64::new(0),
            }),
        }
    }

    /// The lease owner id of this process.
    pub fn owner(&self) -> &str {
        &self.inner.owner
    }

    /// The engine's knobs.
    pub fn limits(&self) -> Limits {
        self.inner.limits
    }

    /// Installs the executor runs are given to (replacing any), and wakes the dispatcher. With
    /// none installed, nothing is claimed.
    pub fn install(&self, executor: Arc<dyn Executor>) {
        *self.inner.executor.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(executor);
        self.notify();
    }

    /// Installs the consumers told when runs end (replacing any). Install before anything can
    /// end a run: until then, runs end with [`NoHooks`].
    pub fn install_hooks(&self, hooks: Arc<dyn RunHooks>) {
        *self.inner.hooks.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = hooks;
    }

    fn hooks(&self) -> Arc<dyn RunHooks> {
        self.inner.hooks.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    fn executor(&self) -> Option<Arc<dyn Executor>> {
        self.inner.executor.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Publishes everything `changes` noted (call after the commit): each run change, then the
    /// appended events, then the session changes, and wakes the dispatcher when a run went back
    /// to the queue. A run without an agent is visible to nobody and is not published.
    pub fn publish(&self, changes: Changes) {
        let bus = &self.inner.bus;
        for run in changes.runs {
            if run.agent_id.is_some() {
                let end_watched = changes.watched.iter().any(|watched| *watched == run.id);
                bus.publish(Event::RunChanged { run: Arc::new(run), end_watched });
            }
        }
        for (root_run_id, entry) in changes.journal {
            bus.publish(Event::JournalAppended { root_run_id, entry: Arc::new(entry) });
        }
        for (owner, agent, event) in changes.events {
            crate::sessions::events::announce(bus, &owner, &agent, vec![event]);
        }
        for (session_id, agent_id) in changes.sessions {
            bus.publish(Event::SessionChanged { session_id, agent_id });
        }
        if changes.wake {
            self.notify();
        }
    }

    /// Wakes the dispatcher (call after committing an enqueued run).
    pub fn notify(&self) {
        self.inner.wake.notify_one();
    }

    /// How many runs execute in this process now.
    pub fn executing(&self) -> usize {
        lock(&self.inner.live).len()
    }

    /// Whether run `run_id` executes in this process now.
    pub fn is_executing(&self, run_id: &str) -> bool {
        self.inner.is_live(run_id)
    }

    /// What ending runs inside a write transaction needs (for the `cancel` and `finish`
    /// functions): which runs execute in this process, and the consumers' hooks.
    pub fn ending(&self) -> Ending {
        let inner = self.inner.clone();
        Ending::new(move |run_id| inner.is_live(run_id), self.hooks())
    }

    /// Asks these executing runs to end: `Stop` for those of `stopped_session`, `Cancel` for the
    /// rest (call after the commit that canceled their trees).
    pub fn signal(&self, live: &[(String, Option<String>)], stopped_session: Option<&str>) {
        let runs = lock(&self.inner.live);
        for (run_id, session_id) in live {
            let reason = match (stopped_session, session_id) {
                (Some(stopped), Some(session)) if stopped == session => StopReason::Stop,
                _ => StopReason::Cancel,
            };
            if let Some(run) = runs.get(run_id) {
                run.stop.stop(reason);
            }
        }
    }

    /// Starts the dispatcher: the boot sweep, then claims until [`Engine::shutdown`].
    pub fn start(&self) -> JoinHandle<()> {
        tokio::spawn(dispatch(self.clone()))
    }

    /// Resolves once the dispatcher's boot sweep is done.
    pub async fn swept(&self) {
        let mut swept = self.inner.swept.subscribe();
        // The sender lives in the engine, so the wait ends only when the sweep is done.
        let _ = swept.wait_for(|swept| *swept).await;
    }

    /// Claims run `run_id` now if its session is free and executes it, waiting for the outcome.
    ///
    /// The dispatcher may claim a fresh run between the enqueuing commit and this call; the
    /// caller then waits for that execution instead (or reads how it ended, when it already
    /// did). `NotClaimed` means another turn holds the session: the run stays queued.
    pub async fn run_inline(&self, run_id: &str) -> ApiResult<InlineOutcome> {
        let settled = match self.claim(Some(run_id.to_owned())).await? {
            Some((claimed, stop)) => {
                tokio::spawn(execute(self.clone(), claimed, stop)).await.map_err(ApiError::internal)?
            }
            None => match self.attach(run_id).await? {
                Some(settled) => settled,
                None => return Ok(InlineOutcome::NotClaimed),
            },
        };
        Ok(match settled {
            Settled::Stored(outcome) => InlineOutcome::Finished(outcome),
            Settled::Requeued | Settled::Ignored => InlineOutcome::Requeued,
        })
    }

    /// For a run [`Engine::run_inline`] could not claim: waits for its execution here, or reads how
    /// it ended or parked; `None` while it waits in the queue (or another process executes it).
    async fn attach(&self, run_id: &str) -> ApiResult<Option<Settled>> {
        // Registration precedes the claim's commit and deregistration follows the finish's, so a
        // run the database shows executing is either registered here or ended by the next read.
        for _ in 0..3 {
            let id = run_id.to_owned();
            let state = self.inner.db.read(move |conn| finish::state(conn, &id)).await?;
            match state {
                finish::State::Executing => {
                    let done = lock(&self.inner.live).get(run_id).map(|live| live.done.subscribe());
                    if let Some(mut done) = done {
                        let settled = done.wait_for(Option::is_some).await.map(|settled| settled.clone());
                        return Ok(settled.ok().flatten());
                    }
                }
                finish::State::Ended(outcome) => return Ok(Some(Settled::Stored(outcome))),
                finish::State::Queued | finish::State::Missing => return Ok(None),
            }
        }
        Ok(None)
    }

    /// Cancels run `run_id` and its descendants (see `cancel`); whether anything was affected.
    pub async fn cancel_tree(&self, run_id: &str) -> ApiResult<bool> {
        let (run_id, now, ending) = (run_id.to_owned(), self.inner.clock.now_ms(), self.ending());
        let (canceled, changes) = self
            .inner
            .db
            .write(move |conn| {
                let mut changes = Changes::default();
                let canceled = cancel::cancel_tree(conn, &run_id, now, &ending, &mut changes)?;
                Ok((canceled, changes))
            })
            .await?;
        Ok(self.after_cancel(canceled, changes, None))
    }

    /// Stops session `session_id`: cancels its live runs with their descendants and asks its live
    /// turn to stop. True when anything was canceled or signaled, or a stale `streaming` mirror
    /// was corrected; false when the session was idle.
    pub async fn stop_session(&self, session_id: &str) -> ApiResult<bool> {
        let (session, now, ending) = (session_id.to_owned(), self.inner.clock.now_ms(), self.ending());
        let (canceled, resynced, changes) = self
            .inner
            .db
            .write(move |conn| {
                let mut changes = Changes::default();
                let canceled = cancel::cancel_session(conn, &session, now, &ending, &mut changes)?;
                let resynced = queue::sync_session_status(conn, &session, now, &mut changes)?.changed;
                Ok((canceled, resynced, changes))
            })
            .await?;
        Ok(self.after_cancel(canceled, changes, Some(session_id)) || resynced)
    }

    /// After a cancellation committed: publishes what changed, signals the live runs; whether
    /// anything was affected.
    pub fn after_cancel(&self, canceled: Canceled, changes: Changes, stopped_session: Option<&str>) -> bool {
        self.publish(changes);
        self.signal(&canceled.live, stopped_session);
        canceled.affected()
    }

    /// Stops claiming, asks every executing run to end (`Shutdown`) and waits up to
    /// `shutdown_grace` for them; their rows are requeued by the next boot sweep.
    pub async fn shutdown(&self) {
        self.inner.closing.store(true, Ordering::SeqCst);
        self.notify();
        for run in lock(&self.inner.live).values() {
            run.stop.stop(StopReason::Shutdown);
        }
        let drained = async {
            loop {
                let notified = self.inner.drained.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.executing() == 0 {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(self.inner.limits.shutdown_grace, drained).await.is_err() {
            tracing::warn!(
                executing = self.executing(),
                "runs still executing at shutdown; the next start requeues them"
            );
        }
    }

    fn closing(&self) -> bool {
        self.inner.closing.load(Ordering::SeqCst)
    }

    /// Claims `run_id` (or the next due run) and registers it as executing here, in the claim's
    /// transaction. `None` when there is nothing to claim, no executor, or the server is stopping.
    async fn claim(&self, run_id: Option<String>) -> ApiResult<Option<(Claimed, StopSignal)>> {
        if self.closing() || self.executor().is_none() {
            return Ok(None);
        }
        let inner = self.inner.clone();
        let claim = inner.claims.fetch_add(1, Ordering::Relaxed);
        let now = inner.clock.now_ms();
        let lease_until = now + inner.limits.lease_ms;
        let written = self
            .inner
            .db
            .write(move |conn| {
                let claimed = match &run_id {
                    Some(run_id) => store::claim_run(conn, run_id, &inner.owner, now, lease_until)?,
                    None => store::claim_next(conn, &inner.owner, now, lease_until)?,
                };
                let Some(claimed) = claimed else { return Ok(None) };
                let mut changes = Changes::default();
                changes.run(conn, &claimed.id)?;
                let stop = StopSignal::new();
                let live = Live { stop: stop.clone(), claim, done: watch::channel(None).0 };
                lock(&inner.live).insert(claimed.id.clone(), live);
                // A shutdown that began meanwhile may have signaled the runs before this one was
                // registered: signal it here (it then never starts; the boot sweep resumes it).
                if inner.closing.load(Ordering::SeqCst) {
                    stop.stop(StopReason::Shutdown);
                }
                Ok(Some((claimed, stop, changes)))
            })
            .await;
        match written {
            Ok(Some((claimed, stop, changes))) => {
                self.publish(changes);
                Ok(Some((claimed, stop)))
            }
            Ok(None) => Ok(None),
            Err(error) => {
                // The transaction may have registered a run it then failed to commit.
                lock(&self.inner.live).retain(|_, live| live.claim != claim);
                self.inner.drained.notify_waiters();
                Err(error)
            }
        }
    }

    /// Forgets a run that stopped executing here. The dispatcher is woken only when it may now
    /// have something to do: it stopped claiming for want of room, or the run went back to the
    /// queue or could not be finished. (A turn queued behind it in its session is woken by the
    /// finish that freed the session; see `finish`.)
    fn deregister(&self, run_id: &str, settled: &Settled) {
        if let Some(live) = lock(&self.inner.live).remove(run_id) {
            live.done.send_replace(Some(settled.clone()));
        }
        self.inner.drained.notify_waiters();
        if self.inner.starved.swap(false, Ordering::SeqCst) || !matches!(settled, Settled::Stored(_)) {
            self.notify();
        }
    }
}

/// The dispatcher task.
async fn dispatch(engine: Engine) {
    sweep(&engine).await;
    engine.inner.swept.send_replace(true);
    while !engine.closing() {
        pass(&engine).await;
        tokio::select! {
            () = engine.inner.wake.notified() => {}
            () = tokio::time::sleep(engine.inner.limits.tick) => {}
        }
    }
}

/// The boot sweep (see `queue::boot_sweep`).
async fn sweep(engine: &Engine) {
    let (now, owner) = (engine.inner.clock.now_ms(), engine.inner.owner.clone());
    let swept = engine
        .inner
        .db
        .write(move |conn| {
            let mut changes = Changes::default();
            let count = queue::boot_sweep(conn, &owner, now, &mut changes)?;
            let resumed = super::children::boot_reconcile(conn, now, &mut changes)?;
            Ok((count + resumed, changes))
        })
        .await;
    match swept {
        Ok((count, changes)) => {
            if count > 0 {
                tracing::info!(count, "boot sweep requeued runs a previous process left executing");
            }
            engine.publish(changes);
        }
        Err(error) => tracing::error!(%error, "the boot sweep failed"),
    }
}

/// One dispatcher pass: wake parked runs that are due, then claim while there is room. A read
/// first tells whether either has anything to do, so an idle server does not queue writes.
async fn pass(engine: &Engine) {
    let (now, owner) = (engine.inner.clock.now_ms(), engine.inner.owner.clone());
    let due = match engine.inner.db.read(move |conn| Ok(store::due(conn, &owner, now)?)).await {
        Ok(due) => due,
        Err(error) => {
            tracing::warn!(%error, "looking for due runs failed");
            return;
        }
    };
    if due.wake {
        let woken = engine
            .inner
            .db
            .write(move |conn| {
                let mut changes = Changes::default();
                queue::wake_due(conn, now, &mut changes)?;
                Ok(changes)
            })
            .await;
        match woken {
            Ok(changes) => engine.publish(changes),
            Err(error) => tracing::warn!(%error, "waking parked runs failed"),
        }
    }
    if !due.wake && !due.claim {
        return;
    }
    loop {
        // Set before looking, so a run that stops executing after the look sees it (deregister).
        engine.inner.starved.store(true, Ordering::SeqCst);
        if engine.executing() >= engine.inner.limits.max_in_flight {
            break;
        }
        engine.inner.starved.store(false, Ordering::SeqCst);
        match engine.claim(None).await {
            Ok(Some((claimed, stop))) => {
                tokio::spawn(execute(engine.clone(), claimed, stop));
            }
            Ok(None) => break,
            Err(error) => {
                tracing::warn!(%error, "claiming a run failed");
                break;
            }
        }
    }
}

/// Executes one claimed run to its finish, then forgets it.
async fn execute(engine: Engine, claimed: Claimed, stop: StopSignal) -> Settled {
    let run_id = claimed.id.clone();
    let settled = match execute_claimed(&engine, claimed, &stop).await {
        Ok(settled) => settled,
        Err(error) => {
            tracing::error!(%error, run = %run_id, "a run could not be finished; its lease will expire");
            Settled::Ignored
        }
    };
    engine.deregister(&run_id, &settled);
    settled
}

async fn execute_claimed(engine: &Engine, claimed: Claimed, stop: &StopSignal) -> ApiResult<Settled> {
    let owner = engine.inner.owner.clone();
    let (run_id, now) = (claimed.id.clone(), engine.inner.clock.now_ms());
    let (id, started_by) = (run_id.clone(), owner.clone());
    let (started, changes) = engine
        .inner
        .db
        .write(move |conn| {
            let mut changes = Changes::default();
            let started = queue::start_running(conn, &id, &started_by, now, &mut changes)?;
            Ok((started, changes))
        })
        .await?;
    engine.publish(changes);
    if !started {
        return Ok(Settled::Ignored);
    }
    if stop.reason() == Some(StopReason::Shutdown) {
        return Ok(Settled::Requeued);
    }
    let outcome = match engine.executor() {
        Some(executor) => {
            let renewal = tokio::spawn(renew(engine.clone(), run_id.clone()));
            let future = executor.execute(claimed, stop.clone());
            let outcome = std::panic::AssertUnwindSafe(future).catch_unwind().await.unwrap_or_else(|_| {
                tracing::error!(run = %run_id, "the executor panicked");
                Outcome::Failed(RunFailure {
                    code: FailureCode::ExecutorError,
                    message: "The agent stopped unexpectedly".into(),
                    retryable: false,
                    kind: ErrorKind::Upstream,
                })
            });
            renewal.abort();
            outcome
        }
        None => Outcome::Failed(RunFailure {
            code: FailureCode::NoExecutor,
            message: "No executor for agent runs".into(),
            retryable: false,
            kind: ErrorKind::Upstream,
        }),
    };
    let outcome = match (stop.reason(), outcome) {
        // Stopping under a shutdown is not the run's failure: the boot sweep resumes it.
        (Some(StopReason::Shutdown), Outcome::Failed(_) | Outcome::Canceled(_)) => return Ok(Settled::Requeued),
        // Asked to end: whatever went wrong on the way out, or a park, ends canceled.
        (Some(StopReason::Stop | StopReason::Cancel), Outcome::Failed(_) | Outcome::Parked(_)) => {
            Outcome::Canceled(Ipld::Null)
        }
        (_, outcome) => outcome,
    };
    let (backoff, random, hooks) = (engine.inner.limits.backoff, getrandom::u32().unwrap_or(0), engine.hooks());
    let now = engine.inner.clock.now_ms();
    let (settled, changes) = engine
        .inner
        .db
        .write(move |conn| {
            let mut changes = Changes::default();
            let lease = Lease { run_id: &run_id, owner: &owner };
            let settled = finish::finish(conn, &*hooks, lease, outcome, now, (backoff, random), &mut changes)?;
            Ok((settled, changes))
        })
        .await?;
    engine.publish(changes);
    Ok(settled)
}

/// Renews an executing run's lease every `renew_every` until aborted.
async fn renew(engine: Engine, run_id: String) {
    let limits = engine.inner.limits;
    loop {
        tokio::time::sleep(limits.renew_every).await;
        let (id, owner) = (run_id.clone(), engine.inner.owner.clone());
        let lease_until = engine.inner.clock.now_ms() + limits.lease_ms;
        match engine.inner.db.write(move |conn| Ok(store::renew_lease(conn, &id, &owner, lease_until)?)).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(run = %run_id, "an executing run's lease is no longer this process's");
                return;
            }
            Err(error) => tracing::warn!(%error, run = %run_id, "renewing a run's lease failed"),
        }
    }
}
