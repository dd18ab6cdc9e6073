//! A direct canonical DAG-CBOR encoder for [`Ipld`] values, with JavaScript number semantics.
//!
//! It writes exactly the bytes `serde_ipld_dagcbor` writes for [`crate::value::JsIpld`], but
//! straight into one buffer sized beforehand by [`encoded_len`]. The serde path encodes every map
//! entry into a temporary buffer so it can sort the entries, which copies a large byte string (an
//! 8 MiB upload chunk) once per enclosing map, through growing vectors; here it is copied once.
//!
//! The rules, as the serde path applies them:
//! - heads (integers, lengths, tags) in their shortest form;
//! - map keys sorted by length first, then bytewise (the order of their encodings, which is what
//!   `serde_ipld_dagcbor` sorts by);
//! - integers within `[-2^64, 2^64 - 1]`, anything else is an error (no bignums);
//! - a float that is a JavaScript safe integer (`-0.0` included) is written as that integer, any
//!   other finite float as a 64-bit float, and NaN or an infinity is an error;
//! - a link is tag 42 over a byte string holding `0x00` and the binary CID.

use ipld_core::cid::Cid;
use ipld_core::ipld::Ipld;

use super::WireError;
use crate::value::is_js_integer;

const UNSIGNED: u8 = 0x00;
const NEGATIVE: u8 = 0x20;
const BYTES: u8 = 0x40;
const TEXT: u8 = 0x60;
const LIST: u8 = 0x80;
const MAP: u8 = 0xa0;
const TAG: u8 = 0xc0;
const FALSE: u8 = 0xf4;
const TRUE: u8 = 0xf5;
const NULL: u8 = 0xf6;
const FLOAT64: u8 = 0xfb;

/// The CBOR tag of a CID link.
pub(crate) const CID_TAG: u64 = 42;

/// Encodes a value into a new vector allocated once, at its exact size.
pub(crate) fn to_vec(value: &Ipld) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::with_capacity(encoded_len(value));
    encode_ipld(value, &mut out)?;
    debug_assert_eq!(out.len(), out.capacity(), "encoded_len disagrees with encode_ipld");
    Ok(out)
}

/// Encodes a map given as borrowed entries (in any order, keys unique) into a new vector allocated
/// once, at its exact size. Lets a caller encode a map it does not own as a whole (an envelope
/// around a borrowed action, or with one value swapped) without cloning anything.
pub(crate) fn map_to_vec(entries: &mut [(&str, &Ipld)]) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::with_capacity(map_len(entries.iter().copied()));
    encode_map(entries, &mut out)?;
    debug_assert_eq!(out.len(), out.capacity(), "map_len disagrees with encode_map");
    Ok(out)
}

/// The number of bytes [`encode_ipld`] writes for `value`. Meaningless for a value that cannot be
/// encoded (an out-of-range integer, a non-finite float): encoding it fails anyway.
pub(crate) fn encoded_len(value: &Ipld) -> usize {
    match value {
        Ipld::Null | Ipld::Bool(_) => 1,
        Ipld::Integer(value) => integer_head(*value).map_or(0, |(_, argument)| head_len(argument)),
        Ipld::Float(value) => match js_integer(*value) {
            Some(value) => integer_head(value.into()).map_or(0, |(_, argument)| head_len(argument)),
            None => 9,
        },
        Ipld::String(text) => string_len(text.len()),
        Ipld::Bytes(bytes) => string_len(bytes.len()),
        Ipld::List(items) => head_len(length(items.len())) + items.iter().map(encoded_len).sum::<usize>(),
        Ipld::Map(entries) => map_len(entries.iter().map(|(key, value)| (key.as_str(), value))),
        Ipld::Link(cid) => head_len(CID_TAG) + string_len(cid_payload_len(cid)),
    }
}

/// Appends the canonical encoding of `value` to `out`.
pub(crate) fn encode_ipld(value: &Ipld, out: &mut Vec<u8>) -> Result<(), WireError> {
    match value {
        Ipld::Null => out.push(NULL),
        Ipld::Bool(value) => out.push(if *value { TRUE } else { FALSE }),
        Ipld::Integer(value) => write_integer(*value, out)?,
        Ipld::Float(value) => match js_integer(*value) {
            Some(value) => write_integer(value.into(), out)?,
            None if value.is_finite() => {
                out.push(FLOAT64);
                out.extend_from_slice(&value.to_be_bytes());
            }
            None => return Err(WireError::Encode("a float must be finite, not NaN or an infinity".into())),
        },
        Ipld::String(text) => write_string(TEXT, text.as_bytes(), out),
        Ipld::Bytes(bytes) => write_string(BYTES, bytes, out),
        Ipld::List(items) => {
            write_head(LIST, length(items.len()), out);
            for item in items {
                encode_ipld(item, out)?;
            }
        }
        Ipld::Map(entries) => {
            let mut entries: Vec<(&str, &Ipld)> = entries.iter().map(|(key, value)| (key.as_str(), value)).collect();
            encode_map(&mut entries, out)?;
        }
        Ipld::Link(cid) => {
            write_head(TAG, CID_TAG, out);
            write_head(BYTES, length(cid_payload_len(cid)), out);
            out.push(0x00);
            cid.write_bytes(&mut *out).map_err(|err| WireError::Encode(format!("cannot write a CID: {err}")))?;
        }
    }
    Ok(())
}

/// Sorts the entries canonically and appends the map.
fn encode_map(entries: &mut [(&str, &Ipld)], out: &mut Vec<u8>) -> Result<(), WireError> {
    // Entries from a `BTreeMap` arrive bytewise sorted, which a stable sort keeps nearly as is.
    entries.sort_by(|(a, _), (b, _)| a.len().cmp(&b.len()).then_with(|| a.as_bytes().cmp(b.as_bytes())));
    write_head(MAP, length(entries.len()), out);
    for (key, value) in entries.iter() {
        write_string(TEXT, key.as_bytes(), out);
        encode_ipld(value, out)?;
    }
    Ok(())
}

fn map_len<'a>(entries: impl ExactSizeIterator<Item = (&'a str, &'a Ipld)>) -> usize {
    head_len(length(entries.len()))
        + entries.map(|(key, value)| string_len(key.len()) + encoded_len(value)).sum::<usize>()
}

/// The integer a float is written as, when it is a JavaScript safe integer (`-0.0` is 0).
fn js_integer(value: f64) -> Option<i64> {
    // Exact: a safe integer has at most 53 significant bits.
    is_js_integer(value).then_some(value as i64)
}

/// The major type and head argument of an integer, `None` outside what CBOR holds without bignums.
fn integer_head(value: i128) -> Option<(u8, u64)> {
    if value >= 0 {
        u64::try_from(value).ok().map(|argument| (UNSIGNED, argument))
    } else {
        // -1 - value cannot overflow for a negative i128.
        u64::try_from(-1 - value).ok().map(|argument| (NEGATIVE, argument))
    }
}

fn write_integer(value: i128, out: &mut Vec<u8>) -> Result<(), WireError> {
    let (major, argument) = integer_head(value)
        .ok_or_else(|| WireError::Encode(format!("integer {value} is outside the CBOR range [-2^64, 2^64 - 1]")))?;
    write_head(major, argument, out);
    Ok(())
}

fn write_string(major: u8, content: &[u8], out: &mut Vec<u8>) {
    write_head(major, length(content.len()), out);
    out.extend_from_slice(content);
}

/// The length of a string or byte string of `len` bytes, head included.
fn string_len(len: usize) -> usize {
    head_len(length(len)) + len
}

/// The length of a link's byte string: the `0x00` prefix and the binary CID.
fn cid_payload_len(cid: &Cid) -> usize {
    1 + cid.encoded_len()
}

/// A length as a head argument (lossless: `usize` is at most 64 bits on every supported target).
fn length(len: usize) -> u64 {
    len as u64
}

/// The size of a head with this argument, in its shortest form.
fn head_len(argument: u64) -> usize {
    match argument {
        0..=23 => 1,
        24..=0xff => 2,
        0x100..=0xffff => 3,
        0x1_0000..=0xffff_ffff => 5,
        _ => 9,
    }
}

/// Appends a head (major type and argument) in its shortest form.
fn write_head(major: u8, argument: u64, out: &mut Vec<u8>) {
    if let Ok(small @ 0..=23) = u8::try_from(argument) {
        out.push(major | small);
    } else if let Ok(byte) = u8::try_from(argument) {
        out.extend_from_slice(&[major | 24, byte]);
    } else if let Ok(short) = u16::try_from(argument) {
        out.push(major | 25);
        out.extend_from_slice(&short.to_be_bytes());
    } else if let Ok(word) = u32::try_from(argument) {
        out.push(major | 26);
        out.extend_from_slice(&word.to_be_bytes());
    } else {
        out.push(major | 27);
        out.extend_from_slice(&argument.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    //! The encoder against the serde path it replaces (`wire::to_vec(&JsIpld(value))`), byte for
    //! byte, on random values and on the envelopes built from them.

    use std::collections::BTreeMap;

    use ipld_core::cid::multihash::Multihash;
    use proptest::prelude::*;

    use super::*;
    use crate::envelope::{SignedEnvelope, UnsignedEnvelope, insert_signature};
    use crate::signer::{Ed25519Signer, Signer};
    use crate::value::JsIpld;
    use crate::wire;

    /// The serde path, which the encoder must match.
    fn reference(value: &Ipld) -> Result<Vec<u8>, WireError> {
        wire::to_vec(&JsIpld(value))
    }

    /// The direct encoder, checking that its size pre-pass is exact.
    fn direct(value: &Ipld) -> Result<Vec<u8>, WireError> {
        let mut out = Vec::new();
        encode_ipld(value, &mut out)?;
        assert_eq!(encoded_len(value), out.len(), "encoded_len of {value:?}");
        Ok(out)
    }

    fn integer() -> impl Strategy<Value = i128> {
        const TWO_64: i128 = 1 << 64;
        prop_oneof![
            prop::sample::select(vec![
                0,
                1,
                -1,
                23,
                24,
                -24,
                -25,
                255,
                256,
                -256,
                -257,
                65_535,
                65_536,
                -65_536,
                -65_537,
                4_294_967_295,
                4_294_967_296,
                -4_294_967_296,
                -4_294_967_297,
                i64::MAX.into(),
                i64::MIN.into(),
                u64::MAX.into(),
                TWO_64,
                -TWO_64,
                -TWO_64 - 1,
                i128::MAX,
                i128::MIN,
            ]),
            any::<i64>().prop_map(i128::from),
            any::<u64>().prop_map(i128::from),
            (-TWO_64 - 4..-TWO_64 + 4),
            (TWO_64 - 4..TWO_64 + 4),
            any::<i128>(),
        ]
    }

    fn float() -> impl Strategy<Value = f64> {
        prop_oneof![
            prop::sample::select(vec![
                0.0,
                -0.0,
                0.5,
                -0.5,
                1.0,
                -1.0,
                1e300,
                -1e300,
                1e-300,
                f64::MAX,
                f64::MIN,
                f64::MIN_POSITIVE,
                f64::EPSILON,
                9_007_199_254_740_991.0,
                -9_007_199_254_740_991.0,
                9_007_199_254_740_992.0,
                -9_007_199_254_740_992.0,
                9_007_199_254_740_994.0,
                18_446_744_073_709_551_616.0,
                f64::NAN,
                -f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
            ]),
            any::<i32>().prop_map(f64::from),
            any::<i64>().prop_map(|value| value as f64),
            any::<f64>(),
            (-1e6..1e6f64),
        ]
    }

    fn link() -> impl Strategy<Value = Cid> {
        prop_oneof![
            (prop::sample::select(vec![0x55_u64, 0x71, 0x0129, 0x1_0000]), prop::collection::vec(any::<u8>(), 0..40))
                .prop_map(|(codec, digest)| {
                    Cid::new_v1(codec, Multihash::wrap(0x12, &digest).expect("digest fits"))
                }),
            prop::array::uniform32(any::<u8>())
                .prop_map(|digest| Cid::new_v0(Multihash::wrap(0x12, &digest).expect("digest fits")).expect("v0")),
        ]
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            // Few letters: many keys of equal length, which only bytewise order tells apart.
            "[a-c]{0,3}",
            "[ab_]{22,25}",
            "[ab]{254,257}",
            "\\PC{0,8}",
            "[é日😀a]{1,4}",
        ]
    }

    fn leaf() -> impl Strategy<Value = Ipld> {
        prop_oneof![
            Just(Ipld::Null),
            any::<bool>().prop_map(Ipld::Bool),
            integer().prop_map(Ipld::Integer),
            float().prop_map(Ipld::Float),
            "\\PC{0,40}".prop_map(Ipld::String),
            "[x😀]{20,30}".prop_map(Ipld::String),
            prop::collection::vec(any::<u8>(), 0..300).prop_map(Ipld::Bytes),
            link().prop_map(Ipld::Link),
        ]
    }

    fn ipld() -> impl Strategy<Value = Ipld> {
        leaf().prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Ipld::List),
                prop::collection::btree_map(key(), inner, 0..8).prop_map(Ipld::Map),
            ]
        })
    }

    /// An action map of random encodable values (with what an envelope requires: `_` and `ts`).
    fn action() -> impl Strategy<Value = Ipld> {
        let value = ipld().prop_filter("encodable", |value| reference(value).is_ok());
        (prop::collection::btree_map(key(), value, 0..6), "[A-Za-z]{1,30}", integer()).prop_map(
            |(mut map, name, ts)| {
                map.insert("_".into(), Ipld::String(name));
                map.insert("ts".into(), Ipld::Integer(ts));
                Ipld::Map(map)
            },
        )
    }

    /// The envelope signing bytes as they were computed before the direct encoder.
    fn reference_signing_bytes(envelope: &UnsignedEnvelope) -> Result<Vec<u8>, WireError> {
        let kind = Ipld::String(crate::envelope::ENVELOPE_TYPE.into());
        let signer = Ipld::Bytes(envelope.signer.to_bytes().to_vec());
        let account = Ipld::Bytes(envelope.account.to_bytes().to_vec());
        let sig = Ipld::Bytes(vec![0; crate::envelope::SIGNATURE_LEN]);
        let protocol = envelope.protocol.map(|protocol| Ipld::Integer(protocol.into()));
        let mut view = BTreeMap::from([
            ("type", JsIpld(&kind)),
            ("signer", JsIpld(&signer)),
            ("account", JsIpld(&account)),
            ("sig", JsIpld(&sig)),
            ("action", JsIpld(&envelope.action)),
        ]);
        if let Some(protocol) = &protocol {
            view.insert("protocol", JsIpld(protocol));
        }
        wire::to_vec(&view)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn matches_the_serde_path(value in ipld()) {
            let expected = reference(&value);
            let actual = direct(&value);
            prop_assert_eq!(actual.as_ref().ok(), expected.as_ref().ok(), "{:?}", value);
            prop_assert_eq!(wire::ipld_to_vec(&value).ok(), expected.ok());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn envelope_signing_bytes_match_the_serde_path(
            action in action(),
            protocol in prop::option::of(any::<u32>()),
            seed in any::<[u8; 32]>(),
        ) {
            let signer = Ed25519Signer::from_seed(&seed);
            let principal = signer.principal();
            let envelope = UnsignedEnvelope { signer: principal, account: principal, protocol, action };
            let expected = reference_signing_bytes(&envelope);
            let actual = envelope.signing_bytes();
            prop_assert_eq!(actual.as_ref().ok(), expected.as_ref().ok());
            let Ok(mut bytes) = actual else { return Ok(()) };

            // The server side: re-encoding the decoded envelope with `sig` zeroed gives them back.
            let signature = signer.sign_now(&bytes);
            insert_signature(&mut bytes, &signature).map_err(|err| TestCaseError::fail(err.to_string()))?;
            let decoded = SignedEnvelope::decode(&bytes).map_err(|err| TestCaseError::fail(err.to_string()))?;
            let reencoded = decoded.reencoded_signing_bytes().map_err(|err| TestCaseError::fail(err.to_string()))?;
            let mut map = match wire::decode_ipld(&bytes) {
                Ok(Ipld::Map(map)) => map,
                other => return Err(TestCaseError::fail(format!("not a map: {other:?}"))),
            };
            map.insert("sig".into(), Ipld::Bytes(vec![0; crate::envelope::SIGNATURE_LEN]));
            prop_assert_eq!(Some(reencoded.clone()), reference(&Ipld::Map(map)).ok());
            prop_assert_eq!(Some(reencoded), expected.ok());
        }
    }

    #[test]
    fn known_encodings() {
        let cases: Vec<(Ipld, &[u8])> = vec![
            (Ipld::Float(-0.0), &[0x00]),
            (Ipld::Float(2.0), &[0x02]),
            (Ipld::Float(-25.0), &[0x38, 0x18]),
            (Ipld::Float(0.5), &[0xfb, 0x3f, 0xe0, 0, 0, 0, 0, 0, 0]),
            (Ipld::Integer(u64::MAX.into()), &[0x1b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
            (Ipld::Integer(-(1 << 64)), &[0x3b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
            (Ipld::Integer(500), &[0x19, 0x01, 0xf4]),
            (
                Ipld::Map(BTreeMap::from([
                    ("bb".into(), Ipld::Null),
                    ("a".into(), Ipld::Bool(true)),
                    ("ab".into(), Ipld::Bool(false)),
                ])),
                &[0xa3, 0x61, b'a', 0xf5, 0x62, b'a', b'b', 0xf4, 0x62, b'b', b'b', 0xf6],
            ),
        ];
        for (value, bytes) in cases {
            assert_eq!(direct(&value).ok().as_deref(), Some(bytes), "{value:?}");
            assert_eq!(reference(&value).ok().as_deref(), Some(bytes), "{value:?}");
        }
        for value in [
            Ipld::Float(f64::NAN),
            Ipld::Float(f64::INFINITY),
            Ipld::Integer(1 << 64),
            Ipld::Integer(-(1 << 64) - 1),
            Ipld::List(vec![Ipld::Null, Ipld::Float(f64::NEG_INFINITY)]),
        ] {
            assert!(direct(&value).is_err(), "{value:?}");
            assert!(reference(&value).is_err(), "{value:?}");
        }
    }

    #[test]
    fn a_link_is_tag_42_over_a_zero_prefixed_cid() {
        let cid = Cid::new_v1(0x71, Multihash::wrap(0x12, &[7; 32]).expect("digest fits"));
        let bytes = direct(&Ipld::Link(cid)).expect("encodes");
        let mut expected = vec![0xd8, 0x2a, 0x58, 37, 0x00];
        expected.extend_from_slice(&cid.to_bytes());
        assert_eq!(bytes, expected);
        assert_eq!(reference(&Ipld::Link(cid)).ok(), Some(expected));
    }
}
