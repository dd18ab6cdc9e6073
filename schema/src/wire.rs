//! Canonical DAG-CBOR: the only way bytes enter or leave the protocol.
//!
//! Encoding sorts map keys canonically (length first, then bytewise), writes integers in their
//! shortest form and floats as 64-bit, exactly as DAG-CBOR and the upstream JavaScript encoder do.
//! Decoding is strict: indefinite lengths, `undefined`, non-minimal integers, half and single
//! floats, unordered or duplicate map keys and trailing bytes are all rejected. A value that decodes
//! therefore re-encodes to the same bytes, except for whole-valued floats, which are re-encoded as
//! integers (see [`crate::Value`]).

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
    serde_ipld_dagcbor::from_slice(bytes).map_err(|err| WireError::Decode(err.to_string()))
}

/// Decodes canonical DAG-CBOR into a generic IPLD value.
pub fn decode_ipld(bytes: &[u8]) -> Result<Ipld, WireError> {
    from_slice(bytes)
}

/// Converts a typed value into a generic IPLD value (no bytes in between).
pub fn to_ipld<T: Serialize + ?Sized>(value: &T) -> Result<Ipld, WireError> {
    ipld_core::serde::to_ipld(value).map_err(|err| WireError::Encode(err.to_string()))
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
