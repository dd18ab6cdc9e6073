//! What the executor (the model loop) sees of the engine: the `Claimed` run it is given (from
//! `queue`), the
//! [`StopSignal`] that asks it to end, the [`Outcome`] it reports, and the [`Executor`] trait it
//! implements. Re-exported from `engine`.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use ipld_core::ipld::Ipld;
use tokio::sync::watch;

use super::queue::Claimed;
use super::wait::Wait;
use crate::error::{ApiError, ErrorKind};

/// How an execution ended, as the executor reports it.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Done; `output` is what an inline caller reads (`{assistantEventId}` for a turn).
    Succeeded(Ipld),
    /// Failed; retried when retryable and executions remain.
    Failed(RunFailure),
    /// Ended because it was asked to stop or was canceled; the output as for `Succeeded`.
    Canceled(Ipld),
    /// Parked until what [`Wait`] says happens.
    Parked(Wait),
}

/// Why an execution failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFailure {
    /// What failed (`RunInfo.error.code`).
    pub code: FailureCode,
    /// The message the session's `error` event and an inline caller show.
    pub message: String,
    /// Whether another execution may succeed (upstream: provider failures and unexpected errors).
    pub retryable: bool,
    /// The kind of error an inline caller answers with.
    pub kind: ErrorKind,
}

impl RunFailure {
    /// A failure the model provider caused (seen through us: an upstream failure).
    pub fn provider(message: impl Into<String>, retryable: bool) -> Self {
        Self { code: FailureCode::ProviderError, message: message.into(), retryable, kind: ErrorKind::Upstream }
    }

    /// A run that ended on `error`: retried when the server (or a service) failed, and answered
    /// to an inline caller as [`answered_as`] says.
    pub fn from_error(code: FailureCode, error: &ApiError) -> Self {
        Self {
            code,
            message: error.message().to_owned(),
            retryable: error.kind().is_server_side(),
            kind: answered_as(error.kind()),
        }
    }

    /// The error an inline caller answers with: the run's message, as its kind.
    pub fn to_api_error(&self) -> ApiError {
        let error = ApiError::new(self.kind, self.message.clone());
        // The one failure a client acts on by itself (it offers the sign-in again) says so.
        match self.code {
            FailureCode::SignInRequired => error.with_code(seed_agents_protocol::codes::SIGN_IN_REQUIRED),
            _ => error,
        }
    }
}

/// The kind an inline caller hears for a run that failed on an error of `kind`. Upstream answers
/// such a caller with the run's message and status, 502 when the run has none: what says
/// something of the state the run met (a missing, forbidden, conflicting or too large thing, a
/// limit, a saturated or unfinished server) keeps its kind; anything else about the request is
/// invalid input, and a failure inside the run is a failed upstream (the run is the upstream of
/// the request that waited for it).
pub(crate) fn answered_as(kind: ErrorKind) -> ErrorKind {
    match kind {
        ErrorKind::Forbidden
        | ErrorKind::NotFound
        | ErrorKind::Conflict
        | ErrorKind::TooLarge
        | ErrorKind::TooMany
        | ErrorKind::NotImplemented
        | ErrorKind::Unavailable => kind,
        ErrorKind::Invalid
        | ErrorKind::Unauthorized
        | ErrorKind::UnsupportedMediaType
        | ErrorKind::TimedOut
        | ErrorKind::UpdateRequired => ErrorKind::Invalid,
        ErrorKind::Upstream | ErrorKind::Internal => ErrorKind::Upstream,
    }
}

/// What failed, as `RunInfo.error.code` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureCode {
    /// `provider-error`: the model provider failed or answered nothing.
    ProviderError,
    /// `config-error`: the agent cannot run as configured (provider, model, tools).
    ConfigError,
    /// `output-schema`: a typed child did not deliver a schema-valid result.
    OutputSchema,
    /// `step-limit`: the model took more steps in one turn than a turn may.
    StepLimit,
    /// `internal`: the server failed.
    Internal,
    /// `executor-error`: the executor panicked.
    ExecutorError,
    /// `no-executor`: no executor was installed for the run.
    NoExecutor,
    /// `run-failed`: a failed run whose stored failure is missing.
    RunFailed,
    /// `sign-in-required`: the provider's subscription sign-in is missing, expired or revoked;
    /// the owner must sign in again.
    SignInRequired,
    /// `workflow-error`: a workflow script threw (or a rejection it did not catch ended it).
    WorkflowError,
    /// `fuel-exhausted`: a workflow script computed longer than a slice allows without an effect.
    FuelExhausted,
    /// `out-of-memory`: a workflow script outgrew its memory limit.
    OutOfMemory,
    /// `workflow-deadlock`: a workflow script awaits something that can never resolve.
    WorkflowDeadlock,
    /// `journal-cap`: a workflow run outgrew its journal (entries or bytes).
    JournalCap,
    /// `not-supported`: the script used a feature this server does not run.
    NotSupported,
}

impl FailureCode {
    /// Every code.
    pub const ALL: [Self; 15] = [
        Self::ProviderError,
        Self::ConfigError,
        Self::OutputSchema,
        Self::StepLimit,
        Self::Internal,
        Self::ExecutorError,
        Self::NoExecutor,
        Self::RunFailed,
        Self::SignInRequired,
        Self::WorkflowError,
        Self::FuelExhausted,
        Self::OutOfMemory,
        Self::WorkflowDeadlock,
        Self::JournalCap,
        Self::NotSupported,
    ];

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ProviderError => "provider-error",
            Self::ConfigError => "config-error",
            Self::OutputSchema => "output-schema",
            Self::StepLimit => "step-limit",
            Self::Internal => "internal",
            Self::ExecutorError => "executor-error",
            Self::NoExecutor => "no-executor",
            Self::RunFailed => "run-failed",
            Self::SignInRequired => "sign-in-required",
            Self::WorkflowError => "workflow-error",
            Self::FuelExhausted => "fuel-exhausted",
            Self::OutOfMemory => "out-of-memory",
            Self::WorkflowDeadlock => "workflow-deadlock",
            Self::JournalCap => "journal-cap",
            Self::NotSupported => "not-supported",
        }
    }

    /// The code of a wire string.
    pub fn parse(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|known| known.as_str() == code)
    }
}

/// Why an execution is asked to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// StopSession: keep the partial text, append "Stopped.", end `canceled`.
    Stop,
    /// CancelRun, a parent's cancellation, a deleted session or agent: end `canceled`.
    Cancel,
    /// The server is stopping: end quickly; the next boot sweep requeues the run, so a `Failed`
    /// or `Canceled` outcome is not written.
    Shutdown,
}

/// A cheap cloneable stop signal handed to the executor. The first reason given wins.
#[derive(Debug, Clone)]
pub struct StopSignal {
    reason: Arc<watch::Sender<Option<StopReason>>>,
}

impl Default for StopSignal {
    fn default() -> Self {
        Self::new()
    }
}

impl StopSignal {
    /// A signal nobody gave yet.
    pub fn new() -> Self {
        Self { reason: Arc::new(watch::channel(None).0) }
    }

    /// Asks the execution to end (no effect once a reason was given).
    pub fn stop(&self, reason: StopReason) {
        self.reason.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(reason);
            true
        });
    }

    /// Why the execution was asked to end, if it was.
    pub fn reason(&self) -> Option<StopReason> {
        *self.reason.borrow()
    }

    /// Resolves when the execution is asked to end, with why.
    pub async fn stopped(&self) -> StopReason {
        let mut receiver = self.reason.subscribe();
        // Copied out at once: the borrow holds a lock that must not live across an await.
        let reason = receiver.wait_for(Option::is_some).await.map(|reason| *reason);
        match reason {
            Ok(reason) => reason.unwrap_or(StopReason::Cancel),
            // The sender lives in `self`, so this cannot happen; wait forever rather than lie.
            Err(_) => std::future::pending().await,
        }
    }
}

/// Executes claimed agent runs (the model loop). Installed once at start.
pub trait Executor: Send + Sync + 'static {
    /// Runs `run` to an [`Outcome`], ending early when `stop` says so.
    fn execute(&self, run: Claimed, stop: StopSignal) -> BoxFuture<'static, Outcome>;
}

/// What [`Engine::run_inline`](super::Engine::run_inline) came to.
#[derive(Debug, Clone, PartialEq)]
pub enum InlineOutcome {
    /// The run executed here and its outcome is stored (for an ended run, what it ended with,
    /// which a cancellation may have decided).
    Finished(Outcome),
    /// Another turn holds the session (or no executor is installed, or the server is stopping):
    /// the run stays queued.
    NotClaimed,
    /// The run went back to the queue: a retryable failure waits for its retry, or the server
    /// stopped under it and the next boot sweep requeues it.
    Requeued,
}
