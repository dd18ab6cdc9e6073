//! A workflow run's journal entries (docs/workflows.md): every effect a script asked for and
//! what came of it, recorded before the script sees the result. A resume replays the script from
//! the top and answers each effect from the journal by its content [`key`](Entry::key), first
//! in first out per key: after `ctx.parallel` results arrive in completion order, which differs
//! between a live execution and its replay, so matching by position would misfile them.
//!
//! `callSeq` groups the entries of one `ctx` call (a `call` and its `result`, a `timer` and its
//! `fired`, a `wait` and its `event`); it follows the host's processing order and is
//! informational. On the wire (`RunJournalEntryInfo.entry`) an entry is the JSON object this
//! type serializes to: `{kind, callSeq, key?, …}`.

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

/// One journal entry: the fields every entry has, and what its kind adds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// Which `ctx` call of the execution it belongs to.
    #[serde(rename = "callSeq")]
    pub call_seq: u64,
    /// The effect's content key (see the module docs); `None` on entries that only settle an
    /// earlier one of the same call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// What happened.
    #[serde(flatten)]
    pub body: Body,
}

/// What an entry records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub(crate) enum Body {
    /// A tool call (`ctx.call`) or an agent child (`ctx.delegate` / `ctx.agent`) was started.
    Call {
        /// `tool` or `agent`.
        op: CallOp,
        /// The tool's name (`op: tool`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        /// The tool's input, or the delegate spec.
        input: Json,
        /// The child run (`op: agent`), so a resume reconnects to it instead of spawning again.
        #[serde(rename = "childRunId", default, skip_serializing_if = "Option::is_none")]
        child_run_id: Option<String>,
        /// The script's own label for the call (display only; not part of the key).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    },
    /// The result of the call with the same `callSeq`.
    Result {
        /// `succeeded` or `failed`.
        status: ResultStatus,
        /// What it answered (`succeeded`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<Json>,
        /// Why it failed (`failed`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<EffectError>,
    },
    /// A durable sleep (`ctx.sleep`) until `wakeAt`.
    Timer {
        /// When it ends, Unix epoch milliseconds.
        #[serde(rename = "wakeAt")]
        wake_at: i64,
    },
    /// The timer with the same `callSeq` ended.
    Fired,
    /// A `ctx.waitForEvent` registration: what the run listens for and when it gives up.
    Wait {
        /// The wait's id, minted once: every replay registers the same wait again.
        #[serde(rename = "waitId")]
        wait_id: String,
        /// The script's match criteria (`{signal?, eventType?, resource?, author?}`).
        #[serde(rename = "match")]
        matcher: Json,
        /// When the wait gives up, Unix epoch milliseconds.
        #[serde(rename = "timeoutAt", default, skip_serializing_if = "Option::is_none")]
        timeout_at: Option<i64>,
        /// What it waits for, in words.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
    },
    /// The wait with the same `callSeq` ended: a delivered payload, or none when it timed out.
    Event {
        /// The wait's id.
        #[serde(rename = "waitId")]
        wait_id: String,
        /// The signal's payload (absent on a timeout).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        delivery: Option<Json>,
    },
    /// `ctx.now()` answered `value`.
    Now {
        /// Unix epoch milliseconds.
        value: i64,
    },
    /// `ctx.log(level, message, data?)`.
    Log {
        /// `debug`, `info`, `warn` or `error`.
        level: String,
        /// The message.
        message: String,
        /// Structured detail.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<Json>,
    },
    /// A `ctx.step(label, fn)` boundary.
    Step {
        /// The step's id.
        #[serde(rename = "stepId")]
        step_id: String,
        /// Its label.
        label: String,
        /// `start` or `end`.
        phase: StepPhase,
        /// Whether it succeeded (`end`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ok: Option<bool>,
    },
    /// `ctx.plan(plan)`: the run's plan as the script declared it (`RunPlan`'s JSON).
    Plan {
        /// The plan.
        plan: Json,
    },
}

/// What a `call` entry started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum CallOp {
    /// A tool through the agent's verb and callable path.
    Tool,
    /// An agent child run.
    Agent,
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum ResultStatus {
    /// It answered.
    Succeeded,
    /// It failed; the script sees a rejected promise.
    Failed,
}

/// Which boundary of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum StepPhase {
    /// The step began.
    Start,
    /// The step ended.
    End,
}

/// A failed effect as the script sees it (the rejection's `code`, `message`, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct EffectError {
    /// A stable code (`tool-error`, `not-granted`, `unknown-tool`, `child-failed`, …).
    pub code: String,
    /// What went wrong, in words.
    pub message: String,
    /// Whether trying again may succeed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
}
