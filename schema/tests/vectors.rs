//! Every case of `tests/data/signing-vectors.json` (made by the published JS client library):
//! positive cases sign to byte-identical bytes and verify; negative cases are refused for the
//! stated reason.

use ipld_core::ipld::Ipld;
use seed_agents_protocol::envelope::{DecodeError, EnvelopeError, SignedEnvelope, UnsignedEnvelope, insert_signature};
use seed_agents_protocol::{AgentAction, Ed25519Signer, Principal, Signer, wire};
use serde_json::Value as Json;

use seed_agents_test_support::vectors::{cases, hex_field, ipld};

fn id(case: &Json) -> &str {
    case["id"].as_str().unwrap_or("?")
}

#[test]
fn keys_and_principals_match_the_vectors() {
    for case in cases() {
        let seed: [u8; 32] = hex_field(&case, &["signer", "seedHex"]).try_into().expect("32-byte seed");
        let signer = Ed25519Signer::from_seed(&seed);
        let principal = signer.principal();
        assert_eq!(principal.to_bytes().to_vec(), hex_field(&case, &["signer", "principalHex"]), "{}", id(&case));
        assert_eq!(principal.to_string(), case["signer"]["principal"].as_str().unwrap_or_default(), "{}", id(&case));
        let account: Principal = case["account"]["principal"].as_str().unwrap_or_default().parse().expect("account");
        assert_eq!(account.to_bytes().to_vec(), hex_field(&case, &["account", "principalHex"]), "{}", id(&case));
    }
}

#[test]
fn positive_cases_sign_byte_identically_and_verify() {
    let mut checked = 0;
    for case in cases().into_iter().filter(|case| case["valid"] == Json::Bool(true)) {
        let seed: [u8; 32] = hex_field(&case, &["signer", "seedHex"]).try_into().expect("seed");
        let signer = Ed25519Signer::from_seed(&seed);
        let account = Principal::from_bytes(&hex_field(&case, &["account", "principalHex"])).expect("account");
        let envelope = UnsignedEnvelope {
            signer: signer.principal(),
            account,
            protocol: case["protocol"].as_u64().map(|p| p as u32),
            action: ipld(&case["signedAction"]).expect("signed action has an IPLD form"),
        };
        let mut bytes = envelope.signing_bytes().expect("encode");
        assert_eq!(
            hex::encode(&bytes),
            case["signedBytesHex"].as_str().unwrap_or_default(),
            "signed bytes of {}",
            id(&case)
        );
        let signature = signer.sign_now(&bytes);
        assert_eq!(
            hex::encode(signature),
            case["signatureHex"].as_str().unwrap_or_default(),
            "signature of {}",
            id(&case)
        );
        insert_signature(&mut bytes, &signature).expect("insert");
        assert_eq!(hex::encode(&bytes), case["envelopeHex"].as_str().unwrap_or_default(), "envelope of {}", id(&case));

        let now = case["now"].as_i64().expect("now");
        let verified = SignedEnvelope::decode(&bytes)
            .expect("decode")
            .verify(now)
            .unwrap_or_else(|e| panic!("{}: {e}", id(&case)));
        assert_eq!(verified.signer(), signer.principal());
        assert_eq!(verified.account(), account);
        assert_eq!(verified.declared_protocol(), case["protocol"].as_u64().unwrap_or(1) as u32);
        assert_eq!(verified.action_name(), case["unsignedAction"]["_"].as_str().unwrap_or_default());
        checked += 1;
    }
    assert!(checked >= 26, "only {checked} positive cases");
}

#[test]
fn positive_cases_survive_the_async_signer() {
    // The same bytes come out of the object-safe `Signer` path the SDK uses.
    let case = cases().into_iter().find(|case| id(case) == "create-agent-key-ordering").expect("case");
    let seed: [u8; 32] = hex_field(&case, &["signer", "seedHex"]).try_into().expect("seed");
    let signer: Box<dyn Signer> = Box::new(Ed25519Signer::from_seed(&seed));
    let envelope = UnsignedEnvelope {
        signer: signer.principal(),
        account: signer.principal(),
        protocol: case["protocol"].as_u64().map(|p| p as u32),
        action: ipld(&case["signedAction"]).expect("action"),
    };
    let bytes = block_on(envelope.sign(signer.as_ref())).expect("sign");
    assert_eq!(hex::encode(bytes), case["envelopeHex"].as_str().unwrap_or_default());
}

#[test]
fn negative_cases_fail_for_the_stated_reason() {
    let mut checked = 0;
    for case in cases().into_iter().filter(|case| case["valid"] == Json::Bool(false)) {
        let bytes = hex_field(&case, &["envelopeHex"]);
        let now = case["now"].as_i64().expect("now");
        let outcome = SignedEnvelope::decode(&bytes)
            .map_err(Outcome::Decode)
            .and_then(|envelope| envelope.verify(now).map(|_| ()).map_err(Outcome::Verify));
        let expected = match id(&case) {
            "neg-signature-63-bytes" => Some(EnvelopeError::SignatureBytes),
            "neg-principal-wrong-prefix" => Some(EnvelopeError::Signer),
            "neg-wrong-envelope-type" => Some(EnvelopeError::Type),
            _ => None,
        };
        match (case["failsAt"].as_str(), outcome) {
            (Some("shape"), Err(Outcome::Decode(DecodeError::Envelope(err)))) => {
                assert_eq!(Some(err), expected, "{}", id(&case));
            }
            (Some("timestamp"), Err(Outcome::Verify(err))) => {
                assert_eq!(err, EnvelopeError::OutsideWindow, "{}", id(&case));
                assert_eq!(err.to_string(), "Action timestamp is outside allowed window");
            }
            (Some("signature"), Err(Outcome::Verify(err))) => {
                assert_eq!(err, EnvelopeError::Signature, "{}", id(&case));
                assert_eq!(err.to_string(), "Invalid signature");
            }
            // An explicit `undefined` (0xf7) is not DAG-CBOR: the strict decoder refuses the
            // envelope before any signature check, which the vectors allow ("or reject it").
            (Some("signature"), Err(Outcome::Decode(DecodeError::Wire(_))))
                if id(&case) == "neg-explicit-undefined" => {}
            (reason, outcome) => panic!("{}: expected failure at {reason:?}, got {outcome:?}", id(&case)),
        }
        checked += 1;
    }
    assert_eq!(checked, 9);
}

#[test]
fn timestamp_window_is_five_minutes_inclusive() {
    let case = cases().into_iter().find(|case| id(case) == "list-agents-minimal").expect("case");
    let bytes = hex_field(&case, &["envelopeHex"]);
    let ts = case["ts"].as_i64().expect("ts");
    let five_minutes = 5 * 60 * 1000;
    for (now, ok) in [
        (ts + five_minutes, true),
        (ts - five_minutes, true),
        (ts + five_minutes + 1, false),
        (ts - five_minutes - 1, false),
    ] {
        let result = SignedEnvelope::decode(&bytes).expect("decode").verify(now);
        assert_eq!(result.is_ok(), ok, "now = ts {:+}", now - ts);
    }
}

#[test]
fn typed_actions_reencode_to_the_signed_action_bytes() {
    // For every vector action the schema knows, typed decode + encode reproduces the bytes the
    // JS client signed (minus `ts`, which is not part of the typed action).
    let mut checked = 0;
    for case in cases().into_iter().filter(|case| case["valid"] == Json::Bool(true)) {
        let Some(Ipld::Map(mut action)) = ipld(&case["signedAction"]) else { continue };
        action.remove("ts");
        let generic = Ipld::Map(action);
        let Ok(typed) = wire::from_ipld::<AgentAction>(generic.clone()) else { continue };
        assert_eq!(
            wire::to_vec(&typed).expect("encode"),
            wire::ipld_to_vec(&generic).expect("encode"),
            "{}",
            id(&case)
        );
        checked += 1;
    }
    assert!(checked >= 15, "only {checked} typed actions");
}

#[derive(Debug)]
enum Outcome {
    Decode(DecodeError),
    Verify(EnvelopeError),
}

/// Polls a future that never waits (the in-memory signer is ready at once).
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let waker = std::task::Waker::noop();
    let mut context = std::task::Context::from_waker(waker);
    let mut future = std::pin::pin!(future);
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => panic!("the in-memory signer should be ready at once"),
    }
}
