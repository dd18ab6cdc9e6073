//! Arbitrary values through the protocol version shims (`seed_agents_compat`).
//!
//! Input: the first byte picks the client's protocol (1 to 3), the second the name passed to
//! `upgrade_action` (an action or response name of `generated::ACTIONS`, or the value's own `_`),
//! the rest is DAG-CBOR for the value. `upgrade_action`, `downgrade_response` (with the legacy
//! sessions found in the value's `sessions`, if any), `downgrade_error` and, when the value is a
//! WebSocket frame, `downgrade_frame` must not panic, must keep an encodable value encodable, and
//! are the identity at the current protocol (and above).

#![no_main]

use ipld_core::ipld::Ipld;
use libfuzzer_sys::fuzz_target;
use seed_agents_compat::{
    AGENTS_PROTOCOL_VERSION, Legacy, downgrade_error, downgrade_frame, downgrade_response, upgrade_action,
};
use seed_agents_protocol::generated::{ACTIONS, AgentWsEvent, SessionInfo};
use seed_agents_protocol::wire;

fuzz_target!(|data: &[u8]| {
    let [protocol, pick, cbor @ ..] = data else { return };
    let Ok(value) = wire::decode_ipld(cbor) else { return };
    let protocol = u32::from(*protocol % 3) + 1;
    let pick = usize::from(*pick);
    let name = match ACTIONS.get(pick / 2) {
        Some(info) if pick % 2 == 0 => info.name,
        Some(info) => info.response,
        None => match &value {
            Ipld::Map(map) => match map.get("_") {
                Some(Ipld::String(tag)) => tag.as_str(),
                _ => "",
            },
            _ => "",
        },
    };
    let legacy = Legacy { agent_sessions: legacy_sessions(&value) };
    for protocol in [protocol, AGENTS_PROTOCOL_VERSION, u32::MAX] {
        let current = protocol >= AGENTS_PROTOCOL_VERSION;
        let upgraded = upgrade_action(protocol, name, value.clone());
        if let Ok(upgraded) = &upgraded {
            encodable(upgraded);
        }
        if current {
            assert_eq!(
                upgraded.as_ref().ok(),
                Some(&value),
                "upgrade_action({protocol}, {name:?}) is not the identity"
            );
        }
        let downgraded = downgrade_response(protocol, value.clone(), &legacy);
        if let Ok(downgraded) = &downgraded {
            encodable(downgraded);
        }
        if current {
            assert_eq!(downgraded.as_ref().ok(), Some(&value), "downgrade_response({protocol}) is not the identity");
        }
        let error = downgrade_error(protocol, value.clone());
        encodable(&error);
        if protocol >= 2 {
            assert_eq!(error, value, "downgrade_error({protocol}) is not the identity");
        }
        if let Ok(frame) = wire::from_ipld::<AgentWsEvent>(value.clone()) {
            let downgraded = downgrade_frame(protocol, frame.clone());
            wire::to_vec(&downgraded).expect("a downgraded frame encodes");
            if current {
                assert_eq!(downgraded, frame, "downgrade_frame({protocol}) is not the identity");
            }
        }
    }
});

/// The sessions a protocol 1 `GetAgentResponse` would be given: those of the value's `sessions`
/// that decode.
fn legacy_sessions(value: &Ipld) -> Option<Vec<SessionInfo>> {
    let Ipld::Map(map) = value else { return None };
    let Some(Ipld::List(sessions)) = map.get("sessions") else { return None };
    Some(sessions.iter().filter_map(|session| wire::from_ipld(session.clone()).ok()).collect())
}

/// Decoded values always encode; the shims must keep it so.
fn encodable(value: &Ipld) {
    wire::ipld_to_vec(value).expect("a shimmed value encodes");
}
