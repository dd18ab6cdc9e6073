//! How a workflow execution failed (docs/workflows.md §5): the error the realm reads off a
//! script's terminal throw and the pump reports, and the codes the two assign.

use serde::Serialize;

/// The codes of a failed execution ([`WorkflowError::code`]) the pump and the realm assign. An
/// uncaught rejection keeps its own code (`tool-error`, `child-failed`, …).
pub(crate) mod codes {
    /// The script threw, or its source does not evaluate.
    pub(crate) const WORKFLOW_ERROR: &str = "workflow-error";
    /// One compute slice ran longer than [`Limits::fuel`](crate::workflows::pump::Limits::fuel).
    pub(crate) const FUEL_EXHAUSTED: &str = "fuel-exhausted";
    /// The engine ran out of a resource: memory past [`Limits::memory_bytes`](crate::workflows::pump::Limits),
    /// or a string past its maximum length.
    pub(crate) const OUT_OF_MEMORY: &str = "out-of-memory";
    /// The script awaits something that can never resolve (a promise outside `ctx`).
    pub(crate) const DEADLOCK: &str = "workflow-deadlock";
    /// The script asked for an operation `ctx` does not have.
    pub(crate) const UNKNOWN_OP: &str = "unknown-op";
}

/// Why a workflow failed, with what the moment of failure knew.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct WorkflowError {
    /// A stable code: one of [`codes`], or the code of the effect whose rejection went uncaught.
    pub code: String,
    /// What went wrong, in words.
    pub message: String,
    /// The script's stack; its `workflow.js:LINE` lines point into the stored source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack: Option<String>,
    /// The tool of the failed `ctx.call` whose rejection went uncaught.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// That call's `callSeq` in the journal.
    #[serde(rename = "callSeq", skip_serializing_if = "Option::is_none")]
    pub call_seq: Option<u64>,
}

impl WorkflowError {
    /// An error with only a code and a message.
    pub(crate) fn new(code: &str, message: impl Into<String>) -> Self {
        Self { code: code.to_owned(), message: message.into(), stack: None, tool: None, call_seq: None }
    }
}
