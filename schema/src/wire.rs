//! Canonical DAG-CBOR: the only way bytes enter or leave the protocol.
//!
//! Encoding sorts map keys canonically (length first, then bytewise), writes integers in their
//! shortest form and floats as 64-bit, exactly as DAG-CBOR and the upstream JavaScript encoder do.
//! Decoding is strict: indefinite lengths (map keys included), `undefined`, non-minimal integers,
//! half and single floats, unordered or duplicate map keys, bytes after a link's CID and trailing
//! bytes are all rejected. A value that decodes therefore re-encodes to the same bytes, except for
//! whole-valued floats, which are re-encoded as integers (see [`crate::Value`]); the `envelope` fuzz
//! target checks it.

use ipld_core::ipld::Ipld;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub(crate) mod encode;

/// Why bytes could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The bytes are not canonical DAG-CBOR, or do not have the expected shape.
    #[error("invalid DAG-CBOR: {0}")]
    Decode(String),
    /// The value cannot be written as DAG-CBOR (for example a NaN float).
    #[error("cannot encode as DAG-CBOR: {0}")]
    Encode(String),
}

/// Encodes a value as canonical DAG-CBOR.
///
/// ```
/// use std::collections::BTreeMap;
/// let mut map = BTreeMap::new();
/// map.insert("ts", 1);
/// map.insert("_", 2);
/// assert_eq!(seed_agents_protocol::wire::to_vec(&map).unwrap(), [0xa2, 0x61, b'_', 2, 0x62, b't', b's', 1]);
/// ```
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, WireError> {
    serde_ipld_dagcbor::to_vec(value).map_err(|err| WireError::Encode(err.to_string()))
}

/// Encodes a generic IPLD value canonically, with JavaScript number semantics.
///
/// Gives the same bytes as `to_vec(&JsIpld(value))` (see [`crate::value::JsIpld`]), written
/// directly into one buffer of the exact size: a large byte string is copied once, not once per
/// enclosing map.
pub fn ipld_to_vec(value: &Ipld) -> Result<Vec<u8>, WireError> {
    encode::to_vec(value)
}

/// Decodes canonical DAG-CBOR into a typed value.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, WireError> {
    canonical_forms_only(bytes)?;
    serde_ipld_dagcbor::from_slice(bytes).map_err(|err| WireError::Decode(err.to_string()))
}

/// Refuses what `serde_ipld_dagcbor` 0.7 lets through although it is not canonical DAG-CBOR,
/// anywhere in the first item of `bytes`:
/// - an indefinite length (or a reserved head): the decoder refuses them where a generic value
///   starts, but takes an indefinite-length text string as a map key (and as a typed string or
///   byte string field);
/// - a link (tag 42) whose byte string holds bytes after the CID: the decoder reads the CID and
///   drops the rest.
///
/// Either way a value would decode from bytes that are not its encoding, so an envelope's received
/// bytes could differ from the bytes its signature covers. One pass over the heads, skipping string
/// contents; truncated or otherwise malformed input is left to the decoder, which reports it.
fn canonical_forms_only(bytes: &[u8]) -> Result<(), WireError> {
    let mut at = 0;
    // Items still to read: the first, then every element, key, value and tagged item it holds.
    let mut remaining: u64 = 1;
    while remaining > 0 {
        let Some((major, argument, next)) = head(bytes, at)? else { return Ok(()) };
        remaining -= 1;
        at = next;
        match major {
            2 | 3 => match string_end(bytes, at, argument) {
                Some(end) => at = end,
                None => return Ok(()),
            },
            4 => remaining = remaining.saturating_add(argument),
            5 => remaining = remaining.saturating_add(argument.saturating_mul(2)),
            6 => {
                if argument == encode::CID_TAG {
                    link_without_trailing_bytes(bytes, at)?;
                }
                remaining = remaining.saturating_add(1);
            }
            // Integers and simple values: the head is the whole item.
            _ => {}
        }
    }
    Ok(())
}

/// The head at `at`: its major type, its argument and where the item's content starts; `None`
/// when the bytes end first.
fn head(bytes: &[u8], at: usize) -> Result<Option<(u8, u64, usize)>, WireError> {
    let Some(&initial) = bytes.get(at) else { return Ok(None) };
    let (major, info) = (initial >> 5, initial & 0x1f);
    let width = match info {
        0..=23 => 0,
        24 => 1,
        25 => 2,
        26 => 4,
        27 => 8,
        _ => return Err(WireError::Decode(format!("indefinite length or reserved head at byte {at}"))),
    };
    let Some(raw) = bytes.get(at + 1..at + 1 + width) else { return Ok(None) };
    let argument = match width {
        0 => u64::from(info),
        _ => raw.iter().fold(0, |value, byte| value << 8 | u64::from(*byte)),
    };
    Ok(Some((major, argument, at + 1 + width)))
}

/// Where a string of `len` bytes starting at `at` ends, if it lies within the bytes.
fn string_end(bytes: &[u8], at: usize, len: u64) -> Option<usize> {
    usize::try_from(len).ok().and_then(|len| at.checked_add(len)).filter(|end| *end <= bytes.len())
}

/// Refuses a link whose byte string (at `at`, after the tag) holds more than `0x00` and one CID.
fn link_without_trailing_bytes(bytes: &[u8], at: usize) -> Result<(), WireError> {
    let Some((2, len, start)) = head(bytes, at)? else { return Ok(()) };
    let Some(end) = string_end(bytes, start, len) else { return Ok(()) };
    if let [0, cid @ ..] = &bytes[start..end] {
        let mut rest = cid;
        if ipld_core::cid::Cid::read_bytes(&mut rest).is_ok() && !rest.is_empty() {
            return Err(WireError::Decode(format!("the link at byte {at} holds {} bytes after its CID", rest.len())));
        }
    }
    Ok(())
}

/// Decodes canonical DAG-CBOR into a generic IPLD value.
pub fn decode_ipld(bytes: &[u8]) -> Result<Ipld, WireError> {
    from_slice(bytes)
}

/// Converts a typed value into a generic IPLD value (no bytes in between).
pub fn to_ipld<T: Serialize + ?Sized>(value: &T) -> Result<Ipld, WireError> {
    ipld_core::serde::to_ipld(value).map_err(|err| WireError::Encode(err.to_string()))
}

/// Converts a JSON value into a generic IPLD value; it cannot fail.
///
/// Use it for anything that is JSON already (model tool arguments, tool schemas, feed events):
/// [`to_ipld`] refuses JSON `null`, which serde writes as a unit. Numbers follow the JavaScript
/// encoder like [`crate::Value`]: a safe whole number is an integer, any other number a float.
pub fn json_to_ipld(value: &serde_json::Value) -> Ipld {
    use serde_json::Value as Json;
    match value {
        Json::Null => Ipld::Null,
        Json::Bool(flag) => Ipld::Bool(*flag),
        Json::Number(number) => match (number.as_i64(), number.as_u64(), number.as_f64()) {
            (Some(integer), _, _) => Ipld::Integer(integer.into()),
            (None, Some(integer), _) => Ipld::Integer(integer.into()),
            (None, None, Some(float)) if crate::value::is_js_integer(float) => Ipld::Integer(float as i128),
            (None, None, Some(float)) => Ipld::Float(float),
            // Only arbitrary-precision builds of serde_json have numbers f64 cannot hold.
            (None, None, None) => Ipld::Null,
        },
        Json::String(text) => Ipld::String(text.clone()),
        Json::Array(items) => Ipld::List(items.iter().map(json_to_ipld).collect()),
        Json::Object(fields) => {
            Ipld::Map(fields.iter().map(|(key, value)| (key.clone(), json_to_ipld(value))).collect())
        }
    }
}

/// Converts a generic IPLD value into a typed value.
pub fn from_ipld<T: DeserializeOwned>(value: Ipld) -> Result<T, WireError> {
    T::deserialize(crate::ipld_de::IpldDeserializer(value)).map_err(|err| WireError::Decode(err.to_string()))
}

/// Renders DAG-CBOR bytes in CBOR diagnostic notation (RFC 8949 §8), for snapshots and logs.
///
/// Byte strings are written `h'…'`, floats always with a fraction or exponent.
pub fn diagnostic(bytes: &[u8]) -> Result<String, WireError> {
    let value = decode_ipld(bytes)?;
    let mut out = String::new();
    write_diag(&value, &mut out);
    Ok(out)
}

fn write_diag(value: &Ipld, out: &mut String) {
    use std::fmt::Write;
    match value {
        Ipld::Null => out.push_str("null"),
        Ipld::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Ipld::Integer(i) => {
            let _ = write!(out, "{i}");
        }
        Ipld::Float(f) => {
            let _ = write!(out, "{f:?}");
        }
        Ipld::String(s) => {
            let _ = write!(out, "{s:?}");
        }
        Ipld::Bytes(b) => {
            out.push_str("h'");
            for byte in b {
                let _ = write!(out, "{byte:02x}");
            }
            out.push('\'');
        }
        Ipld::List(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push_str(", ");
                }
                write_diag(item, out);
            }
            out.push(']');
        }
        Ipld::Map(entries) => {
            // Diagnostic output follows wire order, which is canonical, not BTreeMap order.
            let mut keys: Vec<&String> = entries.keys().collect();
            keys.sort_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.as_bytes().cmp(b.as_bytes())));
            out.push('{');
            for (index, key) in keys.into_iter().enumerate() {
                if index > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{key:?}: ");
                if let Some(item) = entries.get(key) {
                    write_diag(item, out);
                }
            }
            out.push('}');
        }
        Ipld::Link(cid) => {
            let _ = write!(out, "42(h'00{}')", hex_string(&cid.to_bytes()));
        }
    }
}

fn hex_string(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut acc, byte| {
        let _ = write!(acc, "{byte:02x}");
        acc
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Found by the `envelope` fuzz target: `{"": -1627395072}` with its key written as an
    /// indefinite-length text string (`7f ff`) decoded, and re-encoded to other bytes.
    #[test]
    fn an_indefinite_length_map_key_is_refused() {
        let bytes = [0xa1, 0x7f, 0xff, 0x3a, 0x61, 0x00, 0x13, 0xff];
        assert!(decode_ipld(&bytes).is_err());
        // The key "ab" in two chunks, and in one: only the definite form decodes.
        assert!(decode_ipld(&[0xa1, 0x7f, 0x61, b'a', 0x61, b'b', 0xff, 0x01]).is_err());
        let definite = [0xa1, 0x62, b'a', b'b', 0x01];
        let value = decode_ipld(&definite).expect("canonical bytes decode");
        assert_eq!(value, Ipld::Map(BTreeMap::from([("ab".to_owned(), Ipld::Integer(1))])));
    }

    /// Why it mattered: an envelope whose signer signed non-canonical bytes (an indefinite-length
    /// key in the action) decoded, kept those bytes as its signing bytes and verified, although
    /// its canonical encoding (what upstream checks the signature over) is other bytes.
    #[test]
    fn an_envelope_signed_over_non_canonical_bytes_is_refused() {
        use crate::envelope::{SignedEnvelope, UnsignedEnvelope, insert_signature};
        use crate::signer::{Ed25519Signer, Signer};

        let signer = Ed25519Signer::from_seed(&[3; 32]);
        let action = Ipld::Map(BTreeMap::from([
            ("_".to_owned(), Ipld::String("ListAgents".into())),
            ("ts".to_owned(), Ipld::Integer(1_000)),
            ("zz".to_owned(), Ipld::Null),
        ]));
        let unsigned =
            UnsignedEnvelope { signer: signer.principal(), account: signer.principal(), protocol: Some(3), action };
        let canonical = unsigned.signing_bytes().unwrap();
        // The key "zz" (62 7a 7a) written as an indefinite-length string (7f 62 7a 7a ff).
        let at = canonical.windows(3).position(|window| window == [0x62, b'z', b'z']).unwrap();
        let mut bytes = canonical[..at].to_vec();
        bytes.extend([0x7f, 0x62, b'z', b'z', 0xff]);
        bytes.extend(&canonical[at + 3..]);
        let signature = signer.sign_now(&bytes);
        insert_signature(&mut bytes, &signature).unwrap();
        assert!(SignedEnvelope::decode(&bytes).is_err());

        let mut canonical = canonical;
        let signature = signer.sign_now(&canonical);
        insert_signature(&mut canonical, &signature).unwrap();
        assert!(SignedEnvelope::decode(&canonical).unwrap().verify(1_000).is_ok());
    }

    #[test]
    fn json_converts_with_nulls_and_javascript_numbers() {
        let json = serde_json::json!({"a": null, "b": [1, 2.0, 2.5, -0.0, 1e300], "c": {"d": true, "e": "x"}});
        assert!(to_ipld(&json).is_err(), "the serde route refuses null; json_to_ipld exists for that");
        let expected = Ipld::Map(BTreeMap::from([
            ("a".to_owned(), Ipld::Null),
            (
                "b".to_owned(),
                Ipld::List(vec![
                    Ipld::Integer(1),
                    Ipld::Integer(2),
                    Ipld::Float(2.5),
                    Ipld::Integer(0),
                    Ipld::Float(1e300),
                ]),
            ),
            (
                "c".to_owned(),
                Ipld::Map(BTreeMap::from([
                    ("d".to_owned(), Ipld::Bool(true)),
                    ("e".to_owned(), Ipld::String("x".into())),
                ])),
            ),
        ]));
        assert_eq!(json_to_ipld(&json), expected);
        assert_eq!(json_to_ipld(&serde_json::json!(u64::MAX)), Ipld::Integer(u64::MAX.into()));
    }

    #[test]
    fn indefinite_lengths_are_refused_everywhere() {
        for bytes in [
            &[0x7f, 0x61, b'a', 0xff][..],
            &[0x5f, 0x41, 0x01, 0xff],
            &[0x9f, 0x01, 0xff],
            &[0xbf, 0x61, b'a', 0x01, 0xff],
            &[0x82, 0x01, 0x7f, 0xff],
            &[0xa1, 0x61, b'a', 0x81, 0xa1, 0x7f, 0xff, 0x01],
            &[0xd8, 0x2a, 0x5f, 0xff],
            &[0xff],
            &[0x1c],
        ] {
            assert!(decode_ipld(bytes).is_err(), "{bytes:02x?}");
        }
        // Typed decoding too: a string field read straight from the bytes.
        assert!(from_slice::<String>(&[0x7f, 0x61, b'a', 0xff]).is_err());
        assert!(from_slice::<BTreeMap<String, u8>>(&[0xa1, 0x7f, 0x61, b'a', 0xff, 0x01]).is_err());
        assert_eq!(from_slice::<String>(&[0x61, b'a']).ok().as_deref(), Some("a"));
    }

    /// Found by the `envelope` fuzz target: a link whose byte string held three bytes after its CID
    /// decoded (the CID read, the rest dropped) and re-encoded without them.
    #[test]
    fn a_link_with_bytes_after_its_cid_is_refused() {
        let padded = [0xd8, 0x2a, 0x49, 0x00, 0x01, 0x48, 0x00, 0x01, 0xff, 0xed, 0xee, 0xee];
        assert!(decode_ipld(&padded).is_err());
        assert!(decode_ipld(&[&[0x81][..], &padded].concat()).is_err(), "inside a list");
        let exact = [0xd8, 0x2a, 0x46, 0x00, 0x01, 0x48, 0x00, 0x01, 0xff];
        let value = decode_ipld(&exact).expect("a link decodes");
        assert_eq!(ipld_to_vec(&value).ok().as_deref(), Some(&exact[..]));
    }

    /// Why it mattered: an envelope holding a link is verified over its re-encoding, so padding a
    /// link of a captured envelope gave other bytes that verified with the same signature.
    #[test]
    fn a_padded_link_does_not_make_a_second_valid_envelope() {
        use crate::envelope::{SignedEnvelope, UnsignedEnvelope, insert_signature};
        use crate::signer::{Ed25519Signer, Signer};

        let signer = Ed25519Signer::from_seed(&[4; 32]);
        let link = decode_ipld(&[0xd8, 0x2a, 0x46, 0x00, 0x01, 0x48, 0x00, 0x01, 0xff]).unwrap();
        let action = Ipld::Map(BTreeMap::from([
            ("_".to_owned(), Ipld::String("ListAgents".into())),
            ("ts".to_owned(), Ipld::Integer(1_000)),
            ("x".to_owned(), link),
        ]));
        let unsigned =
            UnsignedEnvelope { signer: signer.principal(), account: signer.principal(), protocol: Some(3), action };
        let mut bytes = unsigned.signing_bytes().unwrap();
        let signature = signer.sign_now(&bytes);
        insert_signature(&mut bytes, &signature).unwrap();
        assert!(SignedEnvelope::decode(&bytes).unwrap().verify(1_000).is_ok());

        let at = bytes.windows(3).position(|window| window == [0xd8, 0x2a, 0x46]).unwrap();
        let mut padded = bytes[..at].to_vec();
        padded.extend([0xd8, 0x2a, 0x47]);
        padded.extend(&bytes[at + 3..at + 9]);
        padded.push(0x00);
        padded.extend(&bytes[at + 9..]);
        assert!(SignedEnvelope::decode(&padded).is_err());
    }

    #[test]
    fn truncated_input_is_still_reported_by_the_decoder() {
        for bytes in [&[][..], &[0x82, 0x01], &[0x5a, 0xff, 0xff, 0xff, 0xff, 0x00], &[0x9b, 0xff]] {
            assert!(matches!(decode_ipld(bytes), Err(WireError::Decode(_))), "{bytes:02x?}");
        }
        // A long string's contents are skipped, not read as heads.
        let mut long = vec![0x59, 0x01, 0x00];
        long.extend([0xff; 256]);
        assert_eq!(decode_ipld(&long).ok(), Some(Ipld::Bytes(vec![0xff; 256])));
    }
}
