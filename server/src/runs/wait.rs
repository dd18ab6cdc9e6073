//! What a parked (`waiting`) run waits for, and how it is stored in `runs.wait_cbor`.
//!
//! The column holds the whole wait (the tool calls a parent waits on, an event wait's id), not
//! just what `RunInfo.wait` shows: [`Wait::to_info`] derives the public view (`pendingChildren`,
//! `wakeAt`, `label`) the way upstream's `runInfoFromRecord` does.

use seed_agents_protocol::generated::{RunWaitInfo, RunWaitInfoReason};
use serde::{Deserialize, Serialize};

/// Why a run is parked. Stored as data in `wait_cbor`; the engine itself parks nothing yet, the
/// executor's [`Outcome::Parked`](super::executor::Outcome::Parked) does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason")]
pub enum Wait {
    /// Delegated children answering these tool calls of the parent.
    #[serde(rename = "children")]
    Children {
        /// The parent's tool calls still waiting for a child's result.
        #[serde(rename = "toolCallIds")]
        tool_call_ids: Vec<String>,
    },
    /// A durable sleep: the dispatcher requeues the run once the clock reaches `wake_at`.
    #[serde(rename = "timer")]
    Timer {
        /// When to wake, in ms since the epoch.
        #[serde(rename = "wakeAt")]
        wake_at: i64,
    },
    /// An external event (a script's `waitForEvent`), with an optional timeout.
    #[serde(rename = "event")]
    Event {
        /// The wait's id (what a delivery names).
        #[serde(rename = "waitId")]
        wait_id: String,
        /// When the wait gives up and the run is requeued anyway.
        #[serde(rename = "timeoutAt", default, skip_serializing_if = "Option::is_none")]
        timeout_at: Option<i64>,
        /// What it waits for, in words (`RunWaitInfo.label`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
        /// The signal that answers it (`RunWaitInfo.answerWith`), when a signal can.
        #[serde(rename = "answerWith", default, skip_serializing_if = "Option::is_none")]
        answer_with: Option<String>,
        /// Every wait the script listens on while parked (parallel waits all register; any of
        /// them wakes the run).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        listens: Vec<Listen>,
    },
    /// The run spent a budget; only a person resumes it (`SignalRun`).
    #[serde(rename = "budget-pause")]
    BudgetPause {
        /// Shown as the wait's `label`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
}

/// One event wait of a parked workflow run: which journal call it settles and which signals
/// take it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listen {
    /// The wait's id.
    #[serde(rename = "waitId")]
    pub wait_id: String,
    /// The journal `callSeq` of its `wait` entry (the delivery's `event` entry takes the same).
    #[serde(rename = "callSeq")]
    pub call_seq: u64,
    /// The signal name it takes; `None` takes any signal (a wait that names no criteria).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
}

impl Listen {
    /// Whether a signal called `signal` answers this wait.
    pub fn takes(&self, signal: &str) -> bool {
        self.signal.as_deref().is_none_or(|wanted| wanted == signal)
    }
}

impl Wait {
    /// When the dispatcher should requeue the run by itself (`runs.not_before` while waiting):
    /// a timer's wake time or an event wait's timeout; children and budget pauses never.
    pub fn wake_at(&self) -> Option<i64> {
        match self {
            Wait::Timer { wake_at } => Some(*wake_at),
            Wait::Event { timeout_at, .. } => *timeout_at,
            Wait::Children { .. } | Wait::BudgetPause { .. } => None,
        }
    }

    /// The public view of the wait (`RunInfo.wait`).
    pub fn to_info(&self) -> RunWaitInfo {
        let info = |reason| RunWaitInfo {
            extra: Default::default(),
            answer_with: None,
            label: None,
            pending_children: None,
            reason,
            wake_at: None,
        };
        match self {
            Wait::Children { tool_call_ids } => {
                RunWaitInfo { pending_children: Some(tool_call_ids.len() as i64), ..info(RunWaitInfoReason::Children) }
            }
            Wait::Timer { wake_at } => RunWaitInfo { wake_at: Some(*wake_at), ..info(RunWaitInfoReason::Timer) },
            Wait::Event { timeout_at, label, answer_with, .. } => RunWaitInfo {
                wake_at: *timeout_at,
                label: label.clone(),
                answer_with: answer_with.clone(),
                ..info(RunWaitInfoReason::Event)
            },
            Wait::BudgetPause { note } => RunWaitInfo { label: note.clone(), ..info(RunWaitInfoReason::BudgetPause) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seed_agents_protocol::wire;

    #[test]
    fn waits_round_trip_and_show_upstreams_public_view() {
        let children = Wait::Children { tool_call_ids: vec!["a".into(), "b".into()] };
        let bytes = wire::to_vec(&children).unwrap();
        assert_eq!(wire::diagnostic(&bytes).unwrap(), r#"{"reason": "children", "toolCallIds": ["a", "b"]}"#);
        assert_eq!(wire::from_slice::<Wait>(&bytes).unwrap(), children);
        assert_eq!(children.to_info().pending_children, Some(2));
        assert_eq!(children.wake_at(), None);
        let listen = Listen { wait_id: "w".into(), call_seq: 3, signal: Some("approve".into()) };
        let event = Wait::Event {
            wait_id: "w".into(),
            timeout_at: Some(9),
            label: Some("Approval".into()),
            answer_with: Some("approve".into()),
            listens: vec![listen.clone()],
        };
        assert_eq!((event.wake_at(), event.to_info().wake_at), (Some(9), Some(9)));
        assert_eq!(event.to_info().answer_with.as_deref(), Some("approve"));
        assert_eq!(event.to_info().label.as_deref(), Some("Approval"));
        assert!(listen.takes("approve") && !listen.takes("reject"));
        assert!(Listen { signal: None, ..listen }.takes("anything"), "a wait without a name takes any signal");
        let bytes = wire::to_vec(&event).unwrap();
        assert_eq!(wire::from_slice::<Wait>(&bytes).unwrap(), event);
        let pause = Wait::BudgetPause { note: Some("spent".into()) };
        assert_eq!(pause.to_info().label.as_deref(), Some("spent"));
        assert_eq!(pause.to_info().reason, RunWaitInfoReason::BudgetPause);
        assert_eq!(Wait::Timer { wake_at: 5 }.wake_at(), Some(5));
    }
}
