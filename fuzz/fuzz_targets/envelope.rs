//! Arbitrary bytes as the body of `POST /api/message`.
//!
//! Nothing may panic, and what is accepted keeps its documented invariants:
//! - canonical DAG-CBOR (`schema/src/wire.rs`): decoding refuses non-canonical input, so a value
//!   `wire::decode_ipld` accepts re-encodes to the very input bytes: always through serde, and
//!   through the JavaScript-number encoder unless it holds a whole-valued float (written as an
//!   integer, the one documented difference);
//! - `SignedEnvelope::decode` and `decode_owned` agree, and the received signing bytes they keep
//!   equal the re-encoded ones;
//! - verifying (several clocks, with and without a `KeyCache`) gives one answer either way;
//! - the HTTP body prefix parser (`body::parse_prefix` of the server's core crate, which picks the body limit before
//!   the body is authenticated) never names an action other than the one the decoder reads, and
//!   a shorter prefix never names one that the whole body does not.

#![no_main]

use std::sync::LazyLock;
use std::time::Duration;

use ipld_core::ipld::Ipld;
use libfuzzer_sys::fuzz_target;
use seed_agents_protocol::envelope::{KeyCache, SignedEnvelope, TIMESTAMP_WINDOW_MS};
use seed_agents_protocol::value::is_js_integer;
use seed_agents_protocol::wire;
use seed_agents_server_core::body::{self, BodyLimits, Prefix};

/// Shared by every run, as a server shares it between requests.
static KEYS: LazyLock<KeyCache> = LazyLock::new(KeyCache::new);

const LIMITS: BodyLimits =
    BodyLimits { max_body_bytes: 128 << 20, body_timeout: Duration::from_secs(10), body_min_rate: 16 * 1024 };

fuzz_target!(|data: &[u8]| {
    let prefix = body_prefix(data);
    canonical_round_trip(data);
    envelope(data, &prefix);
});

/// The body limit's view of the bytes.
fn body_prefix(data: &[u8]) -> Prefix<'_> {
    let whole = body::parse_prefix(data);
    assert!(body::limit_for(data, &LIMITS) <= LIMITS.max_body_bytes);
    for cut in [data.len() / 2, data.len().min(512)] {
        if let Prefix::Action(name) = body::parse_prefix(&data[..cut]) {
            assert_eq!(whole, Prefix::Action(name), "the first {cut} bytes name an action the body does not");
        }
    }
    whole
}

fn canonical_round_trip(data: &[u8]) {
    let Ok(value) = wire::decode_ipld(data) else { return };
    let serde = wire::to_vec(&value).expect("an accepted value re-encodes");
    assert_eq!(serde, data, "accepted non-canonical bytes: {value:?}");
    let js = wire::ipld_to_vec(&value).expect("an accepted value re-encodes (JavaScript numbers)");
    if has_js_integer_float(&value) {
        let again = wire::decode_ipld(&js).expect("re-encoded bytes decode");
        assert_eq!(again, floats_as_integers(value), "only whole-valued floats may change");
    } else {
        assert_eq!(js, data, "accepted bytes the JavaScript-number encoder writes differently: {value:?}");
    }
    wire::diagnostic(data).expect("an accepted value has a diagnostic form");
}

fn envelope(data: &[u8], prefix: &Prefix<'_>) {
    let borrowed = SignedEnvelope::decode(data);
    let owned = SignedEnvelope::decode_owned(data.to_vec());
    let (envelope, owned) = match (borrowed, owned) {
        (Ok(borrowed), Ok(owned)) => (borrowed, owned),
        (Err(borrowed), Err(owned)) => {
            assert_eq!(borrowed.to_string(), owned.to_string());
            return;
        }
        (borrowed, owned) => panic!("decode and decode_owned disagree: {borrowed:?} / {owned:?}"),
    };
    let reencoded = envelope.reencoded_signing_bytes().expect("a decoded envelope re-encodes");
    assert_eq!(envelope.signing_bytes().ok().as_ref(), Some(&reencoded), "kept signing bytes differ from re-encoded");
    assert_eq!(owned.signing_bytes().ok().as_ref(), Some(&reencoded), "decode_owned's signing bytes differ");

    match prefix {
        Prefix::Action(name) => assert_eq!(*name, envelope.action_name(), "the body limit went by another action"),
        Prefix::Unknown => {}
        Prefix::NotEnvelope => panic!("an envelope the prefix parser calls not an envelope"),
    }

    let _ = (envelope.signer(), envelope.account(), envelope.declared_protocol(), envelope.signature());
    let ts = envelope.timestamp_ms();
    let mut clocks = vec![0, i64::MIN, i64::MAX];
    if let Some(ts) = ts {
        // `as` saturates: a huge `ts` gives the extreme clocks, which is fine.
        let ts = ts as i64;
        clocks.extend([ts, ts.saturating_add(TIMESTAMP_WINDOW_MS), ts.saturating_sub(TIMESTAMP_WINDOW_MS + 1)]);
    }
    for now in clocks {
        let cached = envelope.clone().verify_with(now, TIMESTAMP_WINDOW_MS, Some(&KEYS));
        let uncached = envelope.clone().verify_with(now, TIMESTAMP_WINDOW_MS, None);
        let answer = |result: &Result<seed_agents_protocol::VerifiedEnvelope, _>| match result {
            Ok(verified) => Ok((verified.signer(), verified.account(), verified.action_name().to_owned())),
            Err(error) => Err(*error),
        };
        assert_eq!(answer(&cached), answer(&uncached), "the key cache changed the answer at {now}");
        if let Ok(verified) = cached {
            assert_eq!(verified.action_name(), envelope.action_name());
            assert_eq!(&Ipld::Map(verified.action().clone()), &verified.into_action());
        }
    }
}

fn has_js_integer_float(value: &Ipld) -> bool {
    match value {
        Ipld::Float(float) => is_js_integer(*float),
        Ipld::List(items) => items.iter().any(has_js_integer_float),
        Ipld::Map(entries) => entries.values().any(has_js_integer_float),
        _ => false,
    }
}

/// `value` as the JavaScript-number encoder writes it: whole-valued floats become integers.
fn floats_as_integers(value: Ipld) -> Ipld {
    match value {
        Ipld::Float(float) if is_js_integer(float) => Ipld::Integer(float as i128),
        Ipld::List(items) => Ipld::List(items.into_iter().map(floats_as_integers).collect()),
        Ipld::Map(entries) => {
            Ipld::Map(entries.into_iter().map(|(key, item)| (key, floats_as_integers(item))).collect())
        }
        other => other,
    }
}
