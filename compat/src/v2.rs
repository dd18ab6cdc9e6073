//! Protocol 2 → 1: `GetAgentResponse` carries `sessions` again, and errors carry no `code`.
//!
//! Changelog entry served (schema/PROTOCOL.md, protocol 2): `GetAgentResponse` lost `sessions`
//! and gained `sessionCount`; `Error` gained the optional `code`. A protocol 1 client reads
//! `sessions` unguarded, so it gets the agent's newest top-level sessions (at most
//! [`crate::LEGACY_AGENT_SESSIONS`], fetched by the server because [`crate::needs`] asked) and no
//! `sessionCount`. One `code` stays: `protocol_too_old`, the reason a server refuses a client
//! outright, which newer SDKs read from any client's answer.

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::AgentWsEvent;
use seed_agents_protocol::version::PROTOCOL_TOO_OLD;

use crate::walk::tag;

/// Rewrites a response for a protocol 1 client.
///
/// `sessions` are the agent's newest top-level sessions, already in protocol 2 shape.
pub fn downgrade_response(response: Ipld, sessions: Vec<Ipld>) -> Ipld {
    let Ipld::Map(mut map) = response else { return response };
    if tag(&map, "_") == Some("GetAgentResponse") {
        map.remove("sessionCount");
        map.insert("sessions".to_owned(), Ipld::List(sessions));
    }
    Ipld::Map(map)
}

/// Drops `code` from an error body (except `protocol_too_old`).
pub fn downgrade_error(error: Ipld) -> Ipld {
    let Ipld::Map(mut map) = error else { return error };
    if !matches!(map.get("code"), Some(Ipld::String(code)) if code == PROTOCOL_TOO_OLD) {
        map.remove("code");
    }
    Ipld::Map(map)
}

/// Drops `code` from an error frame (except `protocol_too_old`).
pub fn downgrade_frame(frame: AgentWsEvent) -> AgentWsEvent {
    match frame {
        AgentWsEvent::ErrorFrame(mut frame) => {
            frame.code = frame.code.filter(|code| code == PROTOCOL_TOO_OLD);
            AgentWsEvent::ErrorFrame(frame)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn text(value: &str) -> Ipld {
        Ipld::String(value.into())
    }

    #[test]
    fn get_agent_gets_sessions_instead_of_a_count() {
        let response = Ipld::Map(BTreeMap::from([
            ("_".to_owned(), text("GetAgentResponse")),
            ("agent".to_owned(), Ipld::Map(BTreeMap::new())),
            ("sessionCount".to_owned(), Ipld::Integer(0)),
        ]));
        let Ipld::Map(out) = downgrade_response(response, Vec::new()) else { panic!("a map") };
        assert!(!out.contains_key("sessionCount"));
        assert_eq!(out.get("sessions"), Some(&Ipld::List(vec![])));
    }

    #[test]
    fn errors_lose_their_code_except_protocol_too_old() {
        let error = |code: &str| {
            Ipld::Map(BTreeMap::from([
                ("_".to_owned(), text("Error")),
                ("message".to_owned(), text("m")),
                ("code".to_owned(), text(code)),
            ]))
        };
        let Ipld::Map(out) = downgrade_error(error("update_required")) else { panic!("a map") };
        assert!(!out.contains_key("code"));
        assert_eq!(downgrade_error(error("protocol_too_old")), error("protocol_too_old"));
        let frame =
            AgentWsEvent::ErrorFrame(seed_agents_protocol::generated::ErrorFrame::new("m").code("update_required"));
        assert_eq!(
            downgrade_frame(frame),
            AgentWsEvent::ErrorFrame(seed_agents_protocol::generated::ErrorFrame::new("m"))
        );
    }
}
