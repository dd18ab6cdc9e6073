//! The in-process event bus: account changes and entity changes, published after the database
//! commit, for WebSocket fan-out.
//!
//! Publishing never blocks and never fails: with no subscriber the event is dropped (the
//! durable state is already in the database); a subscriber that falls behind loses the oldest
//! events and is told so by `broadcast`'s `Lagged`, after which it re-reads state.
//!
//! A session's own frames (durable appends and live partials) do not wait in the bus: they go to
//! the [`SessionSink`] the edge installed, on the publishing task, so a partial and the appends
//! around it keep their order and no frame queues behind unrelated events.

use std::fmt;
use std::sync::{Arc, OnceLock};

use seed_agents_protocol::generated::{PartialPatch, RunInfo, RunJournalEntryInfo, SessionEvent};
use tokio::sync::broadcast;

/// Why an account's view changed (the `reason` of an `account/<id>` change frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeReason {
    /// `agent-created`
    AgentCreated,
    /// `agent-updated`
    AgentUpdated,
    /// `agent-deleted`
    AgentDeleted,
    /// `agent-collaborators-changed`
    AgentCollaboratorsChanged,
    /// `agent-invites-changed`
    AgentInvitesChanged,
    /// `model-provider-changed`
    ModelProviderChanged,
    /// `mcp-servers-changed`
    McpServersChanged,
    /// `session-created`
    SessionCreated,
    /// `session-updated`
    SessionUpdated,
    /// `session-deleted`
    SessionDeleted,
    /// `session-event`
    SessionEvent,
    /// `agent-memory-changed`
    AgentMemoryChanged,
    /// `agent-tools-changed`
    AgentToolsChanged,
    /// `trigger-created`
    TriggerCreated,
    /// `trigger-updated` (also when a trigger fires: its `lastFiredAt` moved)
    TriggerUpdated,
    /// `trigger-deleted`
    TriggerDeleted,
}

impl ChangeReason {
    /// Whether an agent-scoped change of this kind is copied to every accepted member of the
    /// agent (upstream's `#emit`); membership, invitation and deletion changes go only to the
    /// accounts they are published for.
    pub fn reaches_members(self) -> bool {
        matches!(
            self,
            Self::AgentUpdated
                | Self::AgentMemoryChanged
                | Self::AgentToolsChanged
                | Self::TriggerCreated
                | Self::TriggerUpdated
                | Self::TriggerDeleted
                | Self::SessionCreated
                | Self::SessionUpdated
                | Self::SessionDeleted
                | Self::SessionEvent
        )
    }

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AgentCreated => "agent-created",
            Self::AgentUpdated => "agent-updated",
            Self::AgentDeleted => "agent-deleted",
            Self::AgentCollaboratorsChanged => "agent-collaborators-changed",
            Self::AgentInvitesChanged => "agent-invites-changed",
            Self::ModelProviderChanged => "model-provider-changed",
            Self::McpServersChanged => "mcp-servers-changed",
            Self::SessionCreated => "session-created",
            Self::SessionUpdated => "session-updated",
            Self::SessionDeleted => "session-deleted",
            Self::SessionEvent => "session-event",
            Self::AgentMemoryChanged => "agent-memory-changed",
            Self::AgentToolsChanged => "agent-tools-changed",
            Self::TriggerCreated => "trigger-created",
            Self::TriggerUpdated => "trigger-updated",
            Self::TriggerDeleted => "trigger-deleted",
        }
    }
}

/// One published event.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Something changed for `account_id`.
    AccountChange {
        /// The account to notify.
        account_id: String,
        /// What changed.
        reason: ChangeReason,
        /// The agent concerned, when there is one.
        agent_id: Option<String>,
        /// The session concerned, when there is one.
        session_id: Option<String>,
    },
    /// An agent's record changed (or it was deleted).
    AgentChanged {
        /// The agent.
        agent_id: String,
    },
    /// A session's record changed (or it was deleted).
    SessionChanged {
        /// The session.
        session_id: String,
        /// Its agent.
        agent_id: String,
    },
    /// A durable event was appended to a session (`sessions::events::announce`).
    SessionAppended {
        /// The account the session is stored under (the agent's owner).
        owner_id: String,
        /// The session's agent.
        agent_id: String,
        /// The event, with its `seq` and `sessionId`.
        event: Arc<SessionEvent>,
    },
    /// A run changed state (`runs::Engine::publish`): a `change` for `runs/<rootRunId>` and the
    /// account-wide subscribers of its agent's owner and members.
    RunChanged {
        /// The run as it is after the change (its agent is set: runs without one are not
        /// published).
        run: Arc<RunInfo>,
        /// The run ended and its end is left for the run-completed trigger monitor (it was
        /// started by a firing, or its account has an enabled trigger): the monitor scans.
        end_watched: bool,
    },
    /// A workflow run's journal grew (an `append` for `runs/<rootRunId>`).
    JournalAppended {
        /// The root of the run's tree.
        root_run_id: String,
        /// The entry, with its run and `seq`.
        entry: Arc<RunJournalEntryInfo>,
    },
}

/// What goes to a session's own subscribers on the publisher's task, in the order it is
/// published: durable appends and partials.
#[derive(Debug, Clone, Copy)]
pub enum SessionFrame<'a> {
    /// Durable events of the session, just committed together, in `seq` order: they go out to
    /// each subscriber as one delivery (one wake-up, one write).
    Appends(&'a [SessionEvent]),
    /// A piece of the assistant message `partial_id` being written (never stored).
    Partial {
        /// The message being written.
        partial_id: &'a str,
        /// What changed.
        patch: &'a PartialPatch,
    },
}

/// Where a session's frames go: the subscribers of `sessions/<id>`, reached on the caller's task.
/// The WebSocket edge implements it; the domain only publishes.
pub trait SessionSink: Send + Sync + fmt::Debug {
    /// Sends `frame` to the subscribers of session `session_id` now. Never blocks on the network.
    fn send(&self, session_id: &str, frame: SessionFrame<'_>);
}

/// The bus; cheap to clone.
#[derive(Debug, Clone)]
pub struct Bus {
    sender: broadcast::Sender<Arc<Event>>,
    /// Where session frames go, once the edge installed it (none in tests without one).
    sessions: Arc<OnceLock<Arc<dyn SessionSink>>>,
}

impl Default for Bus {
    fn default() -> Self {
        Self::new()
    }
}

impl Bus {
    /// Events kept for slow subscribers.
    pub const CAPACITY: usize = 4096;

    /// A bus with no subscribers.
    pub fn new() -> Self {
        Self { sender: broadcast::channel(Self::CAPACITY).0, sessions: Arc::default() }
    }

    /// Sets where session frames go (the first sink installed stays).
    pub fn install_session_sink(&self, sink: Arc<dyn SessionSink>) {
        let _ = self.sessions.set(sink);
    }

    /// Sends `frame` to the subscribers of session `session_id` on this task (see [`SessionSink`]).
    pub fn to_session(&self, session_id: &str, frame: SessionFrame<'_>) {
        if let Some(sink) = self.sessions.get() {
            sink.send(session_id, frame);
        }
    }

    /// Publishes `event` to current subscribers.
    pub fn publish(&self, event: Event) {
        // An error only means nobody listens.
        let _ = self.sender.send(Arc::new(event));
    }

    /// An account change.
    pub fn account_change(
        &self,
        account_id: impl Into<String>,
        reason: ChangeReason,
        agent_id: Option<&str>,
        session_id: Option<&str>,
    ) {
        self.publish(Event::AccountChange {
            account_id: account_id.into(),
            reason,
            agent_id: agent_id.map(str::to_owned),
            session_id: session_id.map(str::to_owned),
        });
    }

    /// Receives events published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.sender.subscribe()
    }
}
