//! Arbitrary fields under every action name: the server's path from a verified action map to a
//! typed action.
//!
//! Input: the first byte picks the action from `generated::ACTIONS`, the second the client's
//! protocol (1 to 3), the rest is DAG-CBOR for the action value (its `_` is set to the name).
//! `action::decode_named` (the server's core crate) runs what the server's `dispatch` runs before a
//! handler: the compat upgrade, the lenient fields and hand checks, and typed decoding as the
//! action's generated type (for every action of the protocol, routed or not: `Subscribe` is decoded
//! the same way over the WebSocket). It must not panic and may only refuse as a client error
//! (400) or a 426 for an old protocol.
//! The same value also goes through the protocol's `AgentAction` union (the SDK's decoding), after
//! the leniency the server applies to a few fields (`ListRuns.limit`): what the server accepts
//! must decode there too, and a typed value's encoding must survive a second round trip byte for
//! byte.

#![no_main]

use ipld_core::ipld::Ipld;
use libfuzzer_sys::fuzz_target;
use seed_agents_protocol::generated::ACTIONS;
use seed_agents_protocol::{AGENTS_PROTOCOL_VERSION, AgentAction, wire};
use seed_agents_server_core::action::{self, decode_named};
use seed_agents_server_core::error::ErrorKind;

fuzz_target!(|data: &[u8]| {
    let [pick, protocol, cbor @ ..] = data else { return };
    let name = ACTIONS[usize::from(*pick) % ACTIONS.len()].name;
    let protocol = u32::from(*protocol % 3) + 1;
    let Ok(mut value) = wire::decode_ipld(cbor) else { return };
    if let Ipld::Map(map) = &mut value {
        map.insert("_".into(), Ipld::String(name.into()));
    }

    let server = decode_named(protocol, name, value.clone());
    if let Err(error) = &server {
        match error.kind() {
            ErrorKind::Invalid => {}
            ErrorKind::UpdateRequired => assert!(protocol < AGENTS_PROTOCOL_VERSION, "426 at the current protocol"),
            other => panic!("{name}: refused as {other:?}: {}", error.message()),
        }
        assert!(!error.message().is_empty());
    }

    let mut lenient = value.clone();
    action::lenient(name, &mut lenient);
    let typed = wire::from_ipld::<AgentAction>(lenient);
    if server.is_ok() && protocol == AGENTS_PROTOCOL_VERSION && matches!(value, Ipld::Map(_)) {
        assert!(typed.is_ok(), "{name}: the server accepts what AgentAction refuses: {typed:?}");
    }
    if let Ok(typed) = typed {
        let once = wire::to_vec(&typed).expect("a decoded action encodes");
        let again: AgentAction = wire::from_slice(&once).expect("an encoded action decodes");
        assert_eq!(wire::to_vec(&again).ok(), Some(once), "{name}: a second round trip changed the bytes");
    }
});
