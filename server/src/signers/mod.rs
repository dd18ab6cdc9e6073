//! Delegated signers: `RegisterSigner`, and whether a signer may act for an account (step 6 of
//! `auth::verify`).
//!
//! A delegate key proves a Seed `Capability` blob issued by an account names it; from then on
//! envelopes signed by the delegate for that account pass. Authorizations are local to this
//! server (no Hypermedia lookup), like upstream.

mod store;

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{RegisterSigner, RegisterSignerResponse};
use seed_agents_protocol::{Principal, wire};

use crate::app::App;
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};

/// Whether `caller.signer` may act for `caller.account_id`.
pub(crate) async fn is_authorized(app: &App, caller: &Caller) -> ApiResult<bool> {
    let account = caller.account_id.clone();
    let signer = caller.signer_id.clone();
    app.db.read(move |conn| store::may_act(conn, &account, &signer)).await
}

/// `RegisterSigner {capability}`: records that the capability's issuer authorized the envelope's
/// signer (the capability's delegate).
pub(crate) async fn register_signer(
    app: &App,
    caller: &Caller,
    action: RegisterSigner,
) -> ApiResult<RegisterSignerResponse> {
    let capability = action.capability.0;
    let issuer = check_capability(&capability, &caller.signer)?;
    let issuer_id = issuer.to_string();
    let delegate_id = caller.signer_id.clone();
    let now = app.clock.now_ms();
    let (account, signer) = (issuer_id.clone(), delegate_id.clone());
    app.db
        .write(move |conn| {
            crate::db::ensure_account(conn, &account, now)?;
            store::authorize_agent(conn, &account, &signer, &capability, now)
        })
        .await?;
    Ok(RegisterSignerResponse { extra: Default::default(), account_id: issuer_id.into(), signer_id: delegate_id })
}

/// Checks a Capability blob in upstream's order; returns its issuer.
fn check_capability(bytes: &[u8], envelope_signer: &Principal) -> ApiResult<Principal> {
    if bytes.is_empty() {
        return Err(ApiError::invalid("Invalid capability bytes"));
    }
    let map = match wire::decode_ipld(bytes) {
        Ok(Ipld::Map(map)) => map,
        Ok(_) => return Err(ApiError::invalid("Blob is not a Capability")),
        Err(_) => return Err(ApiError::invalid("Capability is not valid CBOR")),
    };
    if !matches!(map.get("type"), Some(Ipld::String(kind)) if kind == "Capability") {
        return Err(ApiError::invalid("Blob is not a Capability"));
    }
    let issuer = principal(&map, "signer").ok_or_else(|| ApiError::invalid("Invalid capability signer"))?;
    let delegate = principal(&map, "delegate").ok_or_else(|| ApiError::invalid("Invalid capability delegate"))?;
    if !blob_signature_verifies(&map, &issuer) {
        return Err(ApiError::invalid("Invalid capability signature"));
    }
    if delegate != *envelope_signer {
        return Err(ApiError::invalid("Capability delegate does not match envelope signer"));
    }
    if !matches!(map.get("role"), Some(Ipld::String(role)) if role == "AGENT" || role == "WRITER") {
        return Err(ApiError::invalid("Capability role does not permit agent actions"));
    }
    if issuer == delegate {
        return Err(ApiError::invalid("Capability delegates to its own issuer"));
    }
    Ok(issuer)
}

fn principal(map: &BTreeMap<String, Ipld>, key: &str) -> Option<Principal> {
    match map.get(key) {
        Some(Ipld::Bytes(bytes)) => Principal::from_bytes(bytes).ok(),
        _ => None,
    }
}

/// The Seed blob rule: the signature covers the canonical encoding with `sig` set to 64 zero
/// bytes.
fn blob_signature_verifies(map: &BTreeMap<String, Ipld>, issuer: &Principal) -> bool {
    let Some(Ipld::Bytes(sig)) = map.get("sig") else { return false };
    let Ok(sig) = <[u8; 64]>::try_from(sig.as_slice()) else { return false };
    let mut zeroed = map.clone();
    zeroed.insert("sig".into(), Ipld::Bytes(vec![0; 64]));
    let Ok(message) = wire::ipld_to_vec(&Ipld::Map(zeroed)) else { return false };
    let Some(key) = issuer.verifying_key() else { return false };
    key.verify_strict(&message, &ed25519_dalek::Signature::from_bytes(&sig)).is_ok()
}

/// Builds a signed Capability blob (for tests and tools that delegate a key).
pub fn sign_capability(issuer: &ed25519_dalek::SigningKey, delegate: &Principal, role: &str, ts: i64) -> Vec<u8> {
    use ed25519_dalek::Signer as _;
    let issuer_principal = Principal::from_public_key(issuer.verifying_key().as_bytes());
    let mut map = BTreeMap::new();
    map.insert("type".to_owned(), Ipld::String("Capability".into()));
    map.insert("signer".to_owned(), Ipld::Bytes(issuer_principal.to_bytes().to_vec()));
    map.insert("delegate".to_owned(), Ipld::Bytes(delegate.to_bytes().to_vec()));
    map.insert("role".to_owned(), Ipld::String(role.into()));
    map.insert("ts".to_owned(), Ipld::Integer(i128::from(ts)));
    map.insert("sig".to_owned(), Ipld::Bytes(vec![0; 64]));
    // Encoding a map of strings, bytes and an integer cannot fail.
    let message = wire::ipld_to_vec(&Ipld::Map(map.clone())).unwrap_or_default();
    let sig = issuer.sign(&message).to_bytes();
    map.insert("sig".to_owned(), Ipld::Bytes(sig.to_vec()));
    wire::ipld_to_vec(&Ipld::Map(map)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::SigningKey;

    fn key(byte: u8) -> (SigningKey, Principal) {
        let key = SigningKey::from_bytes(&[byte; 32]);
        let principal = Principal::from_public_key(key.verifying_key().as_bytes());
        (key, principal)
    }

    #[test]
    fn accepts_a_capability_for_the_envelope_signer() {
        let (issuer, issuer_principal) = key(1);
        let (_, delegate) = key(2);
        let blob = sign_capability(&issuer, &delegate, "AGENT", 1);
        assert_eq!(check_capability(&blob, &delegate).unwrap(), issuer_principal);
        let blob = sign_capability(&issuer, &delegate, "WRITER", 1);
        assert!(check_capability(&blob, &delegate).is_ok());
    }

    #[test]
    fn refuses_each_bad_capability_with_its_message() {
        let (issuer, issuer_principal) = key(1);
        let (_, delegate) = key(2);
        let (_, stranger) = key(3);
        let message =
            |bytes: &[u8], signer: &Principal| check_capability(bytes, signer).unwrap_err().message().to_owned();
        assert_eq!(message(&[], &delegate), "Invalid capability bytes");
        assert_eq!(message(&[0xff, 0x00], &delegate), "Capability is not valid CBOR");
        assert_eq!(message(&wire::to_vec(&"text").unwrap(), &delegate), "Blob is not a Capability");
        let blob = sign_capability(&issuer, &delegate, "AGENT", 1);
        assert_eq!(message(&blob, &stranger), "Capability delegate does not match envelope signer");
        let blob = sign_capability(&issuer, &delegate, "READER", 1);
        assert_eq!(message(&blob, &delegate), "Capability role does not permit agent actions");
        let blob = sign_capability(&issuer, &issuer_principal, "AGENT", 1);
        assert_eq!(message(&blob, &issuer_principal), "Capability delegates to its own issuer");
        let mut tampered = wire::decode_ipld(&sign_capability(&issuer, &delegate, "AGENT", 1)).unwrap();
        if let Ipld::Map(map) = &mut tampered {
            map.insert("ts".into(), Ipld::Integer(2));
        }
        assert_eq!(message(&wire::ipld_to_vec(&tampered).unwrap(), &delegate), "Invalid capability signature");
    }
}
