//! Envelope verification: from request bytes to a verified [`Caller`] and its action, in the
//! seed's order.
//!
//! 1. bytes decode as canonical DAG-CBOR (else 400 `Invalid CBOR request`);
//! 2. envelope shape and type, principal and signature byte shapes (401);
//! 3. `ts` within five minutes of the server clock (401);
//! 4. Ed25519 `verify_strict` over the generic value with `sig` zeroed (401 `Invalid signature`);
//! 5. the signature was not seen before in the window (401 `Replayed envelope`), for writes only
//!    ([`replay`]; see "Which envelopes are guarded" below);
//! 6. signer is the account or authorized for it ([`signers`]; 401);
//! 7. declared protocol at least the minimum (426 `protocol_too_old`, `seed_agents_compat`);
//! 8. the action may be sent over this transport (400).
//!
//! # Which envelopes are guarded
//!
//! The action table says whether an action reads or writes (`ActionInfo::effect`, the schema's
//! `x-effect`). Over HTTP:
//!
//! - a **read** is never refused as a replay: answering the same read twice changes nothing, and
//!   a client that signs with a millisecond `ts` may well send the same read twice in one
//!   millisecond;
//! - a **write** is guarded, unless it carries `clientRequestId` or `clientMessageId`: a retry of
//!   those replays the stored answer through idempotency instead;
//! - an action name the table does not know counts as a write (dispatch refuses it with 400
//!   anyway).
//!
//! Over WebSocket every envelope is guarded, reads included: a replayed `Subscribe` would hand the
//! stream it opens to whoever replays it.

pub(crate) mod replay;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::envelope::{DecodeError, SignedEnvelope, TIMESTAMP_WINDOW_MS};
use seed_agents_protocol::{ActionInfo, Effect};

use crate::caller::Caller;
use crate::edge::Edge;
use crate::error::{ApiError, ApiResult};
use crate::signers;

/// What a WebSocket frame carrying anything but `Subscribe` is told (upstream's words).
pub(crate) const NOT_SUBSCRIBE: &str = "Expected Subscribe action";

/// The transport a request arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// `POST /api/message`.
    Http,
    /// A WebSocket frame.
    WebSocket,
}

/// A verified request: the caller, the action's name and its generic value (the map with `_`
/// and `ts`).
#[derive(Debug)]
pub(crate) struct Verified {
    /// Who is acting.
    pub caller: Caller,
    /// The action's `_`.
    pub action_name: String,
    /// The action as decoded.
    pub action: Ipld,
}

/// Runs every check on `bytes`; see the module doc for the order.
///
/// Takes the body: its bytes become the signing bytes in place, so a large action is held once.
pub(crate) async fn verify(edge: &Edge, bytes: Vec<u8>, transport: Transport) -> ApiResult<Verified> {
    let app = &edge.app;
    let envelope = SignedEnvelope::decode_owned(bytes).map_err(|error| match error {
        DecodeError::Wire(_) => ApiError::invalid("Invalid CBOR request"),
        DecodeError::Envelope(error) => ApiError::unauthorized(error.to_string()),
    })?;
    let now = app.clock.now_ms();
    let ts = envelope.timestamp_ms();
    let signature = envelope.signature();
    // A `Subscribe` decompresses its signer's key without the cache: a socket's key is used once,
    // and the many readers of a public session would otherwise fill the cache (it starts over
    // when full, dropping the keys of the signers who send requests) and hold memory per reader.
    let keys = match transport {
        Transport::Http => Some(&edge.keys),
        Transport::WebSocket => None,
    };
    let verified = envelope
        .verify_with(now, TIMESTAMP_WINDOW_MS, keys)
        .map_err(|error| ApiError::unauthorized(error.to_string()))?;
    let action = verified.action();
    let keyed = action.contains_key("clientRequestId") || action.contains_key("clientMessageId");
    if replay_guarded(verified.action_name(), keyed, transport) {
        // `ts` verified finite and inside the window above.
        let expires = ts.map_or(now, |ts| ts as i64) + TIMESTAMP_WINDOW_MS;
        if !edge.replay.check_and_record(&signature, expires, now) {
            return Err(ApiError::unauthorized("Replayed envelope"));
        }
    }
    let account = verified.account();
    let signer = verified.signer();
    let account_id = account.to_string();
    let signer_id = if signer == account { account_id.clone() } else { signer.to_string() };
    let caller = Caller { account_id, signer, signer_id, protocol: verified.declared_protocol() };
    if signer != account && !signers::is_authorized(app, &caller).await? {
        return Err(ApiError::unauthorized("Signer is not authorized for account"));
    }
    seed_agents_compat::check_floor(caller.protocol, app.config.min_client_protocol)?;
    let action_name = verified.action_name().to_owned();
    check_transport(&action_name, transport)?;
    Ok(Verified { caller, action_name, action: verified.into_action() })
}

/// Whether the replay guard applies to an envelope carrying `action_name` (with an idempotency
/// key when `keyed`) that arrived over `transport`; see the module doc.
fn replay_guarded(action_name: &str, keyed: bool, transport: Transport) -> bool {
    match transport {
        Transport::WebSocket => true,
        Transport::Http => {
            let effect = ActionInfo::find(action_name).map_or(Effect::Write, |info| info.effect);
            effect == Effect::Write && !keyed
        }
    }
}

fn check_transport(action_name: &str, transport: Transport) -> ApiResult<()> {
    let Some(info) = ActionInfo::find(action_name) else {
        return Ok(()); // dispatch answers `Unsupported action`
    };
    match transport {
        Transport::Http if !info.http => {
            Err(ApiError::invalid(format!("{action_name} is only supported over WebSocket")))
        }
        // The socket carries only `Subscribe`; upstream's words for anything else.
        Transport::WebSocket if info.http => Err(ApiError::invalid(NOT_SUBSCRIBE)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscribe_is_websocket_only() {
        let error = check_transport("Subscribe", Transport::Http).unwrap_err();
        assert_eq!(error.message(), "Subscribe is only supported over WebSocket");
        assert!(check_transport("ListAgents", Transport::Http).is_ok());
        assert!(check_transport("NoSuchAction", Transport::Http).is_ok());
    }

    #[test]
    fn over_http_only_unkeyed_writes_are_guarded_and_over_websocket_everything_is() {
        for (action, keyed, guarded) in [
            ("ListAgents", false, false),
            ("GetSession", false, false),
            ("CreateAgent", false, true),
            ("CreateAgent", true, false),
            ("MessageSession", true, false),
            ("AppendFileUploadChunk", false, true),
            ("NoSuchAction", false, true),
            ("NoSuchAction", true, false),
        ] {
            assert_eq!(replay_guarded(action, keyed, Transport::Http), guarded, "{action} keyed={keyed}");
        }
        for (action, keyed) in [("Subscribe", false), ("ListAgents", false), ("CreateAgent", true)] {
            assert!(replay_guarded(action, keyed, Transport::WebSocket), "{action} over WebSocket");
        }
    }
}
