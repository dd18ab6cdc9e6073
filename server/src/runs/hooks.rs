//! What the engine's consumers do when runs end, and how the engine reaches them: the engine
//! defines [`RunHooks`], the wiring installs an implementation (`server.rs`), and every function
//! that ends runs inside a write transaction receives it in an [`Ending`].
//!
//! The engine never names its consumers (trigger chains, plan steps): it only says what happened.

use std::fmt;
use std::sync::Arc;

use crate::db::Connection;

use crate::error::ApiResult;

/// What happens elsewhere when runs end, inside the write transaction that ends them.
pub trait RunHooks: Send + Sync + fmt::Debug + 'static {
    /// Run `run_id` ended (succeeded, failed or canceled; its row says so). Returns whether its
    /// end is left for a monitor to look at (`bus::Event::RunChanged.end_watched`).
    fn run_ended(&self, conn: &Connection, run_id: &str) -> ApiResult<bool>;

    /// No run of session `session_id` is live any more; its last agent run ended `succeeded` or
    /// failed. Returns whether the session changed.
    fn session_quiet(&self, conn: &Connection, session_id: &str, succeeded: bool, now_ms: i64) -> ApiResult<bool>;

    /// Every run delegated from session `session_id` for its plan step `step_id` succeeded.
    /// Returns whether the session changed.
    fn step_done(&self, conn: &Connection, session_id: &str, step_id: &str, now_ms: i64) -> ApiResult<bool>;
}

/// No consumers: what an engine without installed hooks (a unit test's) calls.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NoHooks;

impl RunHooks for NoHooks {
    fn run_ended(&self, _: &Connection, _: &str) -> ApiResult<bool> {
        Ok(false)
    }

    fn session_quiet(&self, _: &Connection, _: &str, _: bool, _: i64) -> ApiResult<bool> {
        Ok(false)
    }

    fn step_done(&self, _: &Connection, _: &str, _: &str, _: i64) -> ApiResult<bool> {
        Ok(false)
    }
}

/// What ending runs inside a write transaction needs from the engine: which runs execute in
/// this process (they are asked to stop instead of being ended under them), and the hooks.
/// From [`Engine::ending`](super::Engine::ending); moved into the transaction's closure.
pub struct Ending {
    is_live: Box<dyn Fn(&str) -> bool + Send>,
    hooks: Arc<dyn RunHooks>,
}

impl fmt::Debug for Ending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ending").field("hooks", &self.hooks).finish_non_exhaustive()
    }
}

impl Ending {
    /// `is_live` says whether a run executes in this process.
    pub fn new(is_live: impl Fn(&str) -> bool + Send + 'static, hooks: Arc<dyn RunHooks>) -> Self {
        Self { is_live: Box::new(is_live), hooks }
    }

    /// Whether run `run_id` executes in this process now.
    pub fn is_live(&self, run_id: &str) -> bool {
        (self.is_live)(run_id)
    }

    /// The consumers' hooks.
    pub fn hooks(&self) -> &dyn RunHooks {
        &*self.hooks
    }
}
