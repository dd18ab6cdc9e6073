//! Protocol version compatibility: the shims that let clients of older protocol versions keep
//! working against this server.
//!
//! A client declares its protocol in the envelope (`protocol`, absent = 1). The server runs every
//! request through this crate:
//!
//! 1. [`check_floor`]: below `MIN_CLIENT_PROTOCOL`, 426 `protocol_too_old`;
//! 2. [`upgrade_action`]: an old client's action in the current shape (or a typed refusal when the
//!    action cannot mean anything to that client);
//! 3. the handler runs on current types;
//! 4. [`needs`] says which extra facts the downgrade needs (fetched by the server), then
//!    [`downgrade_response`] / [`downgrade_error`] rewrite the answer into the client's shape;
//!    WebSocket frames go through [`downgrade_frame`].
//!
//! Each version step is one module, newest first, each rewriting from its version to the one
//! below; a client several versions behind gets every step in turn. The shims work on generic
//! IPLD values: an old shape is not a current type. Retiring a version (raising the minimum) is
//! deleting its module. `schema/PROTOCOL.md` has the changelog entry each shim serves.

pub mod classify;
mod v2;
mod v3;
mod walk;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{AgentWsEvent, SessionInfo};
pub use seed_agents_protocol::version::{AGENTS_PROTOCOL_VERSION, MIN_CLIENT_PROTOCOL, PROTOCOL_TOO_OLD};

/// The `code` of a refusal whose fix is updating the client app.
pub const UPDATE_REQUIRED: &str = "update_required";

/// A request a client of its protocol cannot be served: the HTTP status, the message and the
/// machine code to answer with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status} {message}")]
pub struct Refusal {
    /// HTTP status (426 for both kinds today).
    pub status: u16,
    /// What the client shows.
    pub message: String,
    /// `protocol_too_old` or `update_required`.
    pub code: &'static str,
}

impl Refusal {
    /// The app must be updated to see or do this (the feature is newer than its protocol).
    pub fn update_required(message: impl Into<String>) -> Self {
        Self { status: 426, message: message.into(), code: UPDATE_REQUIRED }
    }
}

/// 426 `protocol_too_old` when `declared` is below `minimum` (the server passes
/// [`MIN_CLIENT_PROTOCOL`]; tests pass a raised minimum).
pub fn check_floor(declared: u32, minimum: u32) -> Result<(), Refusal> {
    if declared >= minimum {
        return Ok(());
    }
    Err(Refusal {
        status: 426,
        message: format!(
            "This app speaks agents protocol {declared}, but this server only answers protocol {minimum} and newer. \
             Update the app to continue."
        ),
        code: PROTOCOL_TOO_OLD,
    })
}

/// Rewrites an action sent by a client of `protocol` into the current shape; refuses what such a
/// client cannot mean. `action` is the action map (with `_`).
pub fn upgrade_action(protocol: u32, name: &str, action: Ipld) -> Result<Ipld, Refusal> {
    let mut action = action;
    if protocol < 3 {
        action = v3::upgrade_action(name, action)?;
    }
    Ok(action)
}

/// Facts a downgrade needs that the current response does not carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    /// The agent's newest top-level sessions (protocol 1 `GetAgentResponse.sessions`), at most
    /// [`LEGACY_AGENT_SESSIONS`].
    pub agent_sessions: bool,
}

/// How many sessions a protocol 1 `GetAgentResponse` carries.
pub const LEGACY_AGENT_SESSIONS: usize = 50;

/// What [`downgrade_response`] will need for the response `response_name` to a client of
/// `protocol`.
pub fn needs(protocol: u32, response_name: &str) -> Needs {
    Needs { agent_sessions: protocol < 2 && response_name == "GetAgentResponse" }
}

/// The facts of [`Needs`], fetched by the server.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Legacy {
    /// The agent's newest top-level sessions as the caller may see them.
    pub agent_sessions: Option<Vec<SessionInfo>>,
}

/// Rewrites a current response (the map with `_`) into the shape a client of `protocol` reads,
/// or refuses it when that client cannot represent it.
pub fn downgrade_response(protocol: u32, response: Ipld, legacy: &Legacy) -> Result<Ipld, Refusal> {
    let mut response = response;
    if protocol < 3 {
        response = v3::downgrade_response(response)?;
    }
    if protocol < 2 {
        // Legacy facts are current shapes: bring them down through the newer steps first.
        let mut sessions: Vec<Ipld> = legacy
            .agent_sessions
            .iter()
            .flatten()
            .take(LEGACY_AGENT_SESSIONS)
            .filter_map(|session| seed_agents_protocol::wire::to_ipld(session).ok())
            .collect();
        if protocol < 3 {
            sessions.iter_mut().for_each(v3::simplify_attributions);
        }
        response = v2::downgrade_response(response, sessions);
    }
    Ok(response)
}

/// Rewrites an error body (`{_: 'Error', message, code?}`) for a client of `protocol`.
pub fn downgrade_error(protocol: u32, error: Ipld) -> Ipld {
    if protocol < 2 { v2::downgrade_error(error) } else { error }
}

/// Rewrites a WebSocket frame for a client of `protocol`.
pub fn downgrade_frame(protocol: u32, frame: AgentWsEvent) -> AgentWsEvent {
    let mut frame = frame;
    if protocol < 3 {
        frame = v3::downgrade_frame(frame);
    }
    if protocol < 2 {
        frame = v2::downgrade_frame(frame);
    }
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_refuses_older_clients_with_426() {
        assert!(check_floor(1, 1).is_ok());
        assert!(check_floor(3, 2).is_ok());
        let refusal = check_floor(1, 2).unwrap_err();
        assert_eq!((refusal.status, refusal.code), (426, "protocol_too_old"));
        assert!(refusal.message.contains("protocol 1"));
    }

    #[test]
    fn only_protocol_1_get_agent_needs_sessions() {
        assert!(needs(1, "GetAgentResponse").agent_sessions);
        assert!(!needs(2, "GetAgentResponse").agent_sessions);
        assert!(!needs(1, "ListAgentsResponse").agent_sessions);
    }
}
