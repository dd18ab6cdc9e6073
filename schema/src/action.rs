//! The action table: which response each action answers with, and under which name.
//!
//! The implementations are generated (one per action, from the schema's `x-response`); the SDK's
//! typed calls and the server's dispatch are built on this trait.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// One signed action of the protocol.
pub trait Action: Serialize + DeserializeOwned + Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The wire name (`_`) of the action.
    const NAME: &'static str;
    /// The protocol version the action appeared in.
    const SINCE: u32;
    /// Whether the action may be sent over HTTP (`Subscribe` is WebSocket-only).
    const HTTP: bool;
    /// The response a server answers with.
    type Response: Response;

    /// Wraps the action in the [`crate::AgentAction`] enum.
    fn into_action(self) -> crate::AgentAction;
}

/// One success response of the protocol.
pub trait Response: Serialize + DeserializeOwned + Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The wire name (`_`) of the response.
    const NAME: &'static str;

    /// Takes this response out of the [`crate::AgentResponse`] enum, when it is this one.
    fn from_response(response: crate::AgentResponse) -> Option<Self>;

    /// Wraps this response in the [`crate::AgentResponse`] enum (which adds the `_` tag).
    fn into_response(self) -> crate::AgentResponse;
}

/// One row of the action table, as data (see [`crate::generated::ACTIONS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActionInfo {
    /// The wire name (`_`).
    pub name: &'static str,
    /// The response name; empty for WebSocket-only actions, which answer with frames.
    pub response: &'static str,
    /// The protocol version the action appeared in.
    pub since: u32,
    /// Whether the action may be sent over HTTP.
    pub http: bool,
}

impl ActionInfo {
    /// The row of the action named `name`.
    pub fn find(name: &str) -> Option<&'static ActionInfo> {
        crate::generated::ACTIONS
            .binary_search_by(|info| info.name.cmp(name))
            .ok()
            .map(|index| &crate::generated::ACTIONS[index])
    }
}
