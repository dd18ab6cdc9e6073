//! What a workflow execution asks of the server: the boundary between the pump (which runs the
//! script and keeps the journal's replay rules) and the server's machinery (the journal table,
//! the verbs and callables, delegated children, waits). `workflows::run` implements it over the
//! app; the pump's tests fake it.

use futures_util::future::BoxFuture;
use serde_json::Value as Json;

use super::journal::{EffectError, Entry};

/// A failure of the server itself (a write that failed, the database gone): the execution ends
/// and the run engine decides whether to retry it. Never shown to the script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostError {
    /// What failed.
    pub message: String,
    /// Whether the run may be tried again (the server was busy or stopping).
    pub retryable: bool,
}

/// A child run a `ctx.delegate` started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Spawned {
    /// The child's run.
    pub child_run_id: String,
    /// The child's session, when it has one.
    pub session_id: Option<String>,
}

/// How a child run ended, as `ctx.delegate` resolves (the script sees this object).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct ChildResolution {
    /// `succeeded`, `failed` or `canceled`.
    pub status: &'static str,
    /// Its output (`succeeded`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Json>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<EffectError>,
    /// Its session.
    #[serde(rename = "sessionId", skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// An event wait the run listens on while parked (`ctx.waitForEvent`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EventWait {
    /// The wait's id (journaled once, the same on every replay).
    pub wait_id: String,
    /// The script's criteria.
    pub matcher: Json,
    /// When it gives up, Unix epoch milliseconds.
    pub timeout_at: Option<i64>,
}

/// The server as a workflow execution sees it. Every method may be called from the pump's task
/// (a tokio task); none blocks.
pub(crate) trait Host: Send + Sync {
    /// The clock (`ctx.now`, timers), Unix epoch milliseconds.
    fn now_ms(&self) -> i64;

    /// Records `entry` durably; the script sees no result before this returned `Ok`.
    fn append(&self, entry: Entry) -> BoxFuture<'_, Result<(), HostError>>;

    /// Runs `tool` with `input` as the run's agent would through `call` (grants apply). `Err`
    /// is a failure the script sees (a rejected promise); a server failure is an `EffectError`
    /// with code `internal` and `retryable: true`.
    fn call_tool(
        &self,
        tool: String,
        input: Json,
        description: Option<String>,
    ) -> BoxFuture<'_, Result<Json, EffectError>>;

    /// Starts an agent child from a `delegate` spec (`{brief, title?, prompt?, agentId?, tools?,
    /// output?}`), queued; `step` is the innermost `ctx.step` label, for the child's plan step.
    /// Idempotent per `call_seq`: a child this call already started (the execution ended before
    /// its `call` entry was journaled) is returned instead of a second one.
    fn spawn_agent(
        &self,
        call_seq: u64,
        spec: Json,
        step: Option<String>,
    ) -> BoxFuture<'_, Result<Spawned, EffectError>>;

    /// Resolves when child run `child_run_id` has ended.
    fn await_child(&self, child_run_id: String) -> BoxFuture<'_, Result<ChildResolution, HostError>>;

    /// Resolves after `ms` milliseconds of the server's clock (a short, resident sleep).
    fn sleep(&self, ms: u64) -> BoxFuture<'_, ()>;

    /// Records what the run listens for before it parks (again on every replay that parks).
    fn register_wait(&self, wait: EventWait) -> BoxFuture<'_, Result<(), HostError>>;

    /// The run's plan changed (`ctx.plan`, `ctx.step`): `RunPlan`'s JSON.
    fn update_plan(&self, plan: Json);

    /// `ctx.progress({fraction?, label?})`: live only, never journaled.
    fn progress(&self, patch: Json);

    /// Whether the run was asked to end (CancelRun, StopSession, shutdown).
    fn canceled(&self) -> bool;

    /// Resolves once [`canceled`](Self::canceled) holds.
    fn cancellation(&self) -> BoxFuture<'_, ()>;
}
