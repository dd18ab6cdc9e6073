//! Executing a claimed workflow run (docs/workflows.md): its pinned script and journal are read,
//! the pump replays the script from the top against the server ([`AppHost`]), and how the pump
//! ended becomes the run's outcome: succeeded with the script's value, failed with a stable
//! code, canceled, or parked on a timer or on event waits (which `SignalRun` and a trigger's
//! `wake` answer through `runs::signal`).
//!
//! Effects act as the run's agent, in the nearest session up the run's chain of parents (a
//! script has no session of its own): `ctx.call` goes through the same verbs and callables a
//! model pass uses, with their grants; `ctx.delegate` starts an agent child there. A workflow a
//! trigger started has no session up its chain: its calls run without one (only `attachment:`
//! addresses refuse) and its agent children open top-level threads.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use futures_util::future::BoxFuture;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{AgentDefinition, RunPlan, RunStatus};
use seed_agents_protocol::{Value, wire};
use serde_json::{Value as Json, json};
use tokio::sync::broadcast::error::RecvError;

use super::host::{ChildResolution, EventWait, Host, HostError, Spawned};
use super::journal::{Body, EffectError, Entry};
use super::pump::{self, Limits, Park};
use crate::app::App;
use crate::bus::Event;
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::runs::engine::{Claimed, Executor, FailureCode, Outcome, RunFailure, StopSignal, Wait};
use crate::runs::queue::Changes;
use crate::runs::wait::Listen;

/// Entries a journal may hold before the run fails `journal-cap`.
pub(crate) const MAX_JOURNAL_ENTRIES: i64 = 5_000;
/// Stored bytes a journal may hold before the run fails `journal-cap`.
pub(crate) const MAX_JOURNAL_BYTES: i64 = 8 * 1024 * 1024;

/// Runs workflow runs (installed beside the agent executor; see `server`).
#[derive(Debug, Default)]
pub(crate) struct WorkflowExecutor {
    /// The app runs execute in (weak: the app holds the engine that holds this executor).
    app: Weak<App>,
}

impl WorkflowExecutor {
    /// The executor of `app`'s workflow runs.
    pub(crate) fn new(app: &Arc<App>) -> Self {
        Self { app: Arc::downgrade(app) }
    }
}

impl Executor for WorkflowExecutor {
    fn execute(&self, run: Claimed, stop: StopSignal) -> BoxFuture<'static, Outcome> {
        let app = self.app.upgrade();
        Box::pin(async move {
            match app {
                Some(app) => execute(app, run, stop).await,
                // The server is gone; the next start's boot sweep resumes the run.
                None => Outcome::Canceled(Ipld::Null),
            }
        })
    }
}

/// What an execution starts from, read in one go.
struct Start {
    source: String,
    session_id: Option<String>,
    owner_id: String,
    definition: AgentDefinition,
    state_dir: String,
    journal: Vec<Entry>,
    bytes: i64,
}

async fn execute(app: Arc<App>, run: Claimed, stop: StopSignal) -> Outcome {
    let (run_id, agent_id) = (run.id.clone(), run.agent_id.clone());
    let start = app
        .db
        .read(move |conn| {
            let (source, session_id) = crate::runs::store::workflow_source(conn, &run_id)?
                .ok_or_else(|| ApiError::internal("A workflow run has no script"))?;
            let runnable = crate::agents::store::runnable(conn, &agent_id)?
                .ok_or_else(|| ApiError::not_found("Agent not found"))?;
            let stored = crate::runs::store::journal_after(conn, &run_id, 0, None)?;
            let (_, bytes) = crate::runs::store::journal_size(conn, &run_id)?;
            let journal = stored
                .into_iter()
                .map(|info| {
                    let json = serde_json::to_value(&info.entry).map_err(ApiError::internal)?;
                    serde_json::from_value::<Entry>(json).map_err(ApiError::internal)
                })
                .collect::<ApiResult<Vec<_>>>()?;
            Ok(Start {
                source,
                session_id,
                owner_id: runnable.owner_id,
                definition: runnable.definition,
                state_dir: runnable.state_dir,
                journal,
                bytes,
            })
        })
        .await;
    let start = match start {
        Ok(start) => start,
        Err(error) => return Outcome::Failed(RunFailure::from_error(FailureCode::Internal, &error)),
    };
    let input = match &run.input {
        Ipld::Map(fields) => fields
            .get("input")
            .map_or(Json::Null, |value| serde_json::to_value(Value(value.clone())).unwrap_or(Json::Null)),
        _ => Json::Null,
    };
    let wait_seqs = start
        .journal
        .iter()
        .filter_map(|entry| match &entry.body {
            Body::Wait { wait_id, .. } => Some((wait_id.clone(), entry.call_seq)),
            _ => None,
        })
        .collect();
    let host = Arc::new(AppHost {
        app: app.clone(),
        run_id: run.id.clone(),
        owner_id: start.owner_id,
        agent_id: run.agent_id.clone(),
        definition: start.definition,
        memory_root: PathBuf::from(&start.state_dir).join(crate::memory::path::MEMORY_DIR),
        session_id: start.session_id,
        stop,
        state: Mutex::new(State {
            entries: start.journal.len() as i64,
            bytes: start.bytes,
            wait_seqs,
            ..State::default()
        }),
    });
    let limits = Limits { fuel: app.config.workflow_compute_slice, ..Limits::default() };
    let outcome = pump::run(host.clone(), &run.id, &start.source, input, start.journal, &limits).await;
    if let Err(error) = host.flush_plan().await {
        return Outcome::Failed(RunFailure::from_error(FailureCode::Internal, &error));
    }
    let state = std::mem::take(&mut *lock(&host.state));
    match outcome {
        pump::Outcome::Succeeded(value) => Outcome::Succeeded(wire::json_to_ipld(&value)),
        pump::Outcome::Canceled => Outcome::Canceled(Ipld::Null),
        pump::Outcome::Parked(Park::Timer { wake_at }) => Outcome::Parked(Wait::Timer { wake_at }),
        pump::Outcome::Parked(Park::Children { call_seqs }) => {
            Outcome::Parked(Wait::Children { tool_call_ids: call_seqs.into_iter().map(child_key).collect() })
        }
        pump::Outcome::Parked(Park::Event { wait_id, timeout_at, label, answer_with }) => {
            Outcome::Parked(Wait::Event { wait_id, timeout_at, label, answer_with, listens: state.listens })
        }
        pump::Outcome::ContinuedAsNew(_) => Outcome::Failed(failure(
            FailureCode::NotSupported,
            "ctx.continueAsNew is not supported by this server yet; return the state instead".to_owned(),
        )),
        pump::Outcome::Failed(error) => {
            let code = match error.code.as_str() {
                "fuel-exhausted" => FailureCode::FuelExhausted,
                "out-of-memory" => FailureCode::OutOfMemory,
                "workflow-deadlock" => FailureCode::WorkflowDeadlock,
                "journal-cap" => FailureCode::JournalCap,
                _ => FailureCode::WorkflowError,
            };
            let message = match &error.tool {
                Some(tool) => format!("{} (from the call of {tool})", error.message),
                None => error.message.clone(),
            };
            Outcome::Failed(failure(code, message))
        }
        pump::Outcome::HostFailed(_) if state.cap_reached => Outcome::Failed(failure(
            FailureCode::JournalCap,
            format!(
                "The workflow's journal reached its cap ({MAX_JOURNAL_ENTRIES} entries or \
                 {MAX_JOURNAL_BYTES} bytes); split the work into smaller workflows"
            ),
        )),
        pump::Outcome::HostFailed(error) => Outcome::Failed(RunFailure {
            code: FailureCode::Internal,
            message: error.message,
            retryable: error.retryable,
            kind: ErrorKind::Internal,
        }),
    }
}

/// The call an agent child of a workflow answers (`runs.parent_tool_call_id`): the same for the
/// call on every execution.
fn child_key(call_seq: u64) -> String {
    format!("workflow-call-{call_seq}")
}

fn failure(code: FailureCode, message: String) -> RunFailure {
    RunFailure { code, message, retryable: false, kind: ErrorKind::Invalid }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What an execution learned as it went.
#[derive(Debug, Default)]
struct State {
    /// Journal entries so far.
    entries: i64,
    /// Their stored bytes.
    bytes: i64,
    /// The journal cap stopped an append.
    cap_reached: bool,
    /// The `callSeq` of each `wait` entry, by wait id.
    wait_seqs: HashMap<String, u64>,
    /// The waits registered for the park.
    listens: Vec<Listen>,
    /// The newest plan not yet written to the run.
    plan: Option<RunPlan>,
}

/// The server as a workflow execution sees it.
struct AppHost {
    app: Arc<App>,
    run_id: String,
    owner_id: String,
    agent_id: String,
    definition: AgentDefinition,
    memory_root: PathBuf,
    session_id: Option<String>,
    stop: StopSignal,
    state: Mutex<State>,
}

impl AppHost {
    /// Writes the newest plan the script declared onto its run.
    async fn flush_plan(&self) -> ApiResult<()> {
        let Some(plan) = lock(&self.state).plan.take() else { return Ok(()) };
        let run_id = self.run_id.clone();
        let changes = self
            .app
            .db
            .write(move |conn| {
                crate::runs::store::set_plan(conn, &run_id, &plan)?;
                let mut changes = Changes::default();
                changes.run(conn, &run_id)?;
                Ok(changes)
            })
            .await?;
        self.app.runs.publish(changes);
        Ok(())
    }

    fn context(&self) -> crate::verbs::Context<'_> {
        crate::verbs::Context::for_agent(
            &self.app,
            self.session_id.as_deref(),
            &self.agent_id,
            &self.owner_id,
            self.definition.clone(),
            self.memory_root.clone(),
        )
    }
}

/// A failed verb as the script sees it: a stable code for the kind of failure and the message
/// (the server's own failures are not described).
fn effect_error(error: ApiError) -> EffectError {
    let (code, retryable) = match error.kind() {
        ErrorKind::NotFound => ("not-found", false),
        ErrorKind::Invalid | ErrorKind::TooLarge => ("invalid-input", false),
        ErrorKind::Forbidden | ErrorKind::Unauthorized => ("not-granted", false),
        ErrorKind::NotImplemented => ("not-supported", false),
        ErrorKind::Conflict => ("conflict", true),
        ErrorKind::Upstream | ErrorKind::TimedOut => ("upstream-error", true),
        ErrorKind::Internal | ErrorKind::Unavailable => ("internal", true),
        _ => ("tool-error", false),
    };
    let message = if matches!(error.kind(), ErrorKind::Internal) {
        tracing::warn!(error = %error.message(), "a workflow effect failed on the server's side");
        "The tool failed on the server's side".to_owned()
    } else {
        error.message().to_owned()
    };
    EffectError { code: code.to_owned(), message, retryable: Some(retryable) }
}

fn host_error(error: ApiError) -> HostError {
    HostError { message: error.message().to_owned(), retryable: error.kind().is_server_side() }
}

fn terminal(status: RunStatus) -> bool {
    matches!(status, RunStatus::Succeeded | RunStatus::Failed | RunStatus::Canceled)
}

fn text(value: &Ipld, key: &str) -> Option<String> {
    match value {
        Ipld::Map(fields) => match fields.get(key) {
            Some(Ipld::String(text)) => Some(text.clone()),
            _ => None,
        },
        _ => None,
    }
}

impl Host for AppHost {
    fn now_ms(&self) -> i64 {
        self.app.clock.now_ms()
    }

    fn append(&self, entry: Entry) -> BoxFuture<'_, Result<(), HostError>> {
        Box::pin(async move {
            let json = serde_json::to_value(&entry)
                .map_err(|error| HostError { message: error.to_string(), retryable: false })?;
            let ipld = wire::json_to_ipld(&json);
            let size = wire::ipld_to_vec(&ipld)
                .map_err(|error| HostError { message: error.to_string(), retryable: false })?
                .len() as i64;
            {
                let mut state = lock(&self.state);
                if state.entries + 1 > MAX_JOURNAL_ENTRIES || state.bytes + size > MAX_JOURNAL_BYTES {
                    state.cap_reached = true;
                    return Err(HostError { message: "The workflow journal is full".to_owned(), retryable: false });
                }
                if let Body::Wait { wait_id, .. } = &entry.body {
                    state.wait_seqs.insert(wait_id.clone(), entry.call_seq);
                }
            }
            let plan = lock(&self.state).plan.take();
            let (run_id, now) = (self.run_id.clone(), self.app.clock.now_ms());
            let changes = self
                .app
                .db
                .write(move |conn| {
                    let mut changes = Changes::default();
                    let info = crate::runs::store::append_entry(conn, &run_id, ipld, now)?;
                    changes.journal(conn, info)?;
                    // A plan the script declared rides the next append.
                    if let Some(plan) = &plan {
                        crate::runs::store::set_plan(conn, &run_id, plan)?;
                        changes.run(conn, &run_id)?;
                    }
                    Ok(changes)
                })
                .await
                .map_err(host_error)?;
            self.app.runs.publish(changes);
            let mut state = lock(&self.state);
            state.entries += 1;
            state.bytes += size;
            Ok(())
        })
    }

    fn call_tool(
        &self,
        tool: String,
        input: Json,
        _description: Option<String>,
    ) -> BoxFuture<'_, Result<Json, EffectError>> {
        Box::pin(async move {
            let context = self.context();
            let output = match tool.as_str() {
                "read" => crate::verbs::read(&context, &Value(wire::json_to_ipld(&input))).await,
                "write" => crate::verbs::write(&context, &Value(wire::json_to_ipld(&input))).await,
                _ => {
                    let call = json!({"tool": tool, "input": input});
                    crate::verbs::call_from_script(&context, &Value(wire::json_to_ipld(&call))).await
                }
            };
            let output = output.map_err(effect_error)?;
            serde_json::to_value(&output).map_err(|error| effect_error(ApiError::internal(error)))
        })
    }

    fn spawn_agent(
        &self,
        call_seq: u64,
        spec: Json,
        _step: Option<String>,
    ) -> BoxFuture<'_, Result<Spawned, EffectError>> {
        Box::pin(async move {
            let spec = crate::runtime::delegate::normalize(&spec).map_err(effect_error)?;
            let session_id = self.session_id.clone();
            let (run_id, agent_id, owner) = (self.run_id.clone(), self.agent_id.clone(), self.owner_id.clone());
            // The child answers this call of the workflow: the same key on every execution, so a
            // child started just before a crash is found again rather than started twice.
            let (key, now) = (child_key(call_seq), self.app.clock.now_ms());
            let spawned = self
                .app
                .db
                .write(move |conn| {
                    if let Some(child) = crate::runs::store::child_answering(conn, &run_id, &key)? {
                        return Ok(Err(child));
                    }
                    crate::runtime::delegate::spawn_for_workflow(
                        conn,
                        &run_id,
                        session_id.as_deref(),
                        &agent_id,
                        &owner,
                        &key,
                        spec,
                        now,
                    )
                    .map(Ok)
                })
                .await
                .map_err(effect_error)?;
            match spawned {
                Ok(spawned) => {
                    let child = spawned.announce(&self.app, &self.owner_id);
                    let child_run_id = child.run_id.ok_or_else(|| effect_error(ApiError::internal("no child run")))?;
                    Ok(Spawned { child_run_id, session_id: Some(child.session_id) })
                }
                Err((child_run_id, session_id)) => Ok(Spawned { child_run_id, session_id }),
            }
        })
    }

    fn await_child(&self, child_run_id: String) -> BoxFuture<'_, Result<ChildResolution, HostError>> {
        Box::pin(async move {
            // Subscribed before the first read, so an end committed in between is not missed.
            let mut events = self.app.bus.subscribe();
            loop {
                let id = child_run_id.clone();
                let row = self
                    .app
                    .db
                    .read(move |conn| Ok(crate::runs::store::delivery(conn, &id)?))
                    .await
                    .map_err(host_error)?;
                let Some(child) = row else {
                    return Ok(ChildResolution {
                        status: "failed",
                        output: None,
                        error: Some(EffectError {
                            code: "child-missing".to_owned(),
                            message: "The child run no longer exists".to_owned(),
                            retryable: Some(false),
                        }),
                        session_id: None,
                    });
                };
                if terminal(child.status) {
                    let output =
                        serde_json::to_value(Value(child.output.clone())).ok().filter(|value| !value.is_null());
                    let (status, error) = match child.status {
                        RunStatus::Succeeded => ("succeeded", None),
                        RunStatus::Canceled => ("canceled", None),
                        _ => (
                            "failed",
                            Some(EffectError {
                                code: text(&child.error, "code").unwrap_or_else(|| "run-failed".to_owned()),
                                message: text(&child.error, "message")
                                    .unwrap_or_else(|| "The child run failed".to_owned()),
                                retryable: Some(false),
                            }),
                        ),
                    };
                    let output = if status == "succeeded" { output } else { None };
                    return Ok(ChildResolution { status, output, error, session_id: child.session_id });
                }
                loop {
                    match events.recv().await {
                        Ok(event) => {
                            if let Event::RunChanged { run, .. } = &*event
                                && run.id.as_str() == child_run_id
                                && terminal(run.status)
                            {
                                break;
                            }
                        }
                        Err(RecvError::Lagged(_)) => break,
                        Err(RecvError::Closed) => {
                            return Err(HostError { message: "The server is stopping".to_owned(), retryable: true });
                        }
                    }
                }
            }
        })
    }

    fn sleep(&self, ms: u64) -> BoxFuture<'_, ()> {
        Box::pin(tokio::time::sleep(std::time::Duration::from_millis(ms)))
    }

    fn register_wait(&self, wait: EventWait) -> BoxFuture<'_, Result<(), HostError>> {
        Box::pin(async move {
            let field = |key: &str| wait.matcher.get(key).filter(|value| !value.is_null());
            let signal = match field("signal") {
                Some(Json::String(name)) => Some(name.clone()),
                Some(_) => {
                    return Err(HostError {
                        message: "ctx.waitForEvent: `signal` must be a string".to_owned(),
                        retryable: false,
                    });
                }
                None if ["eventType", "resource", "author"].iter().any(|key| field(key).is_some()) => {
                    return Err(HostError {
                        message: "Waiting for activity (eventType, resource, author) is not supported by this \
                                  server yet; wait for a signal (ctx.waitForEvent({signal}))"
                            .to_owned(),
                        retryable: false,
                    });
                }
                None => None,
            };
            let mut state = lock(&self.state);
            let call_seq = state.wait_seqs.get(&wait.wait_id).copied().ok_or_else(|| HostError {
                message: format!("The wait {} was registered before it was journaled", wait.wait_id),
                retryable: false,
            })?;
            if !state.listens.iter().any(|listen| listen.wait_id == wait.wait_id) {
                state.listens.push(Listen { wait_id: wait.wait_id, call_seq, signal });
            }
            Ok(())
        })
    }

    fn update_plan(&self, plan: Json) {
        match serde_json::from_value::<RunPlan>(plan) {
            Ok(plan) => lock(&self.state).plan = Some(plan),
            Err(error) => tracing::debug!(run = %self.run_id, %error, "a workflow plan that is no RunPlan"),
        }
    }

    fn progress(&self, patch: Json) {
        // Progress is live-only and the protocol has no frame for a script's yet: it is logged.
        tracing::debug!(run = %self.run_id, %patch, "workflow progress");
    }

    fn canceled(&self) -> bool {
        self.stop.reason().is_some()
    }

    fn cancellation(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.stop.stopped().await;
        })
    }
}
