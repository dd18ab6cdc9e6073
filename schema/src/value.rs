//! Open values, byte strings, fractional numbers and tri-state fields as the wire carries them.
//!
//! These are the hand-written leaf types the generated code refers to (the schema names them with
//! `x-rust-type`). Each one exists to keep a wire distinction that a plain Rust type would lose:
//!
//! - [`Value`]: an open `unknown` value kept as IPLD, so byte strings, integers, floats and null
//!   survive a round trip exactly (JSON values would turn bytes into arrays and lose int/float).
//! - [`Bytes`]: a CBOR byte string (major type 2), never an array of integers.
//! - [`Float`]: a JavaScript `number` that may be fractional; whole values are written as CBOR
//!   integers, as the JavaScript encoder does.
//! - [`Nullable`]: a field where absent, `null` and a value mean three different things.

use std::fmt;

use ipld_core::ipld::Ipld;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The largest integer a JavaScript `number` holds exactly (2^53 - 1).
pub const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// Whether the JavaScript encoder writes this number as a CBOR integer.
///
/// The upstream encoder writes every safe integer (`Number.isSafeInteger`) as an integer, and every
/// other number as a 64-bit float. `-0.0` counts as the integer 0.
pub fn is_js_integer(value: f64) -> bool {
    value.is_finite() && value.fract() == 0.0 && value.abs() <= MAX_SAFE_INTEGER
}

/// An open protocol value (`unknown`, or a member of `Record<string, unknown>`).
///
/// Wraps [`Ipld`] and keeps its distinctions: bytes stay bytes, integers stay integers, floats stay
/// floats and null stays null. Serialising follows the JavaScript encoder: a whole-valued float is
/// written as an integer, so a value built in Rust signs the same bytes the upstream server re-encodes.
///
/// ```
/// use seed_agents_protocol::Value;
/// let value = Value::from(ipld_core::ipld::Ipld::Float(2.0));
/// let bytes = seed_agents_protocol::wire::to_vec(&value).unwrap();
/// assert_eq!(bytes, [0x02]);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Value(pub Ipld);

impl Default for Value {
    /// `null`.
    fn default() -> Self {
        Value::NULL
    }
}

impl Value {
    /// The `null` value.
    pub const NULL: Value = Value(Ipld::Null);

    /// Borrows the underlying IPLD value.
    pub fn as_ipld(&self) -> &Ipld {
        &self.0
    }

    /// Returns the underlying IPLD value.
    pub fn into_ipld(self) -> Ipld {
        self.0
    }
}

impl From<Ipld> for Value {
    fn from(value: Ipld) -> Self {
        Value(value)
    }
}

impl From<Value> for Ipld {
    fn from(value: Value) -> Self {
        value.0
    }
}

impl std::ops::Deref for Value {
    type Target = Ipld;
    fn deref(&self) -> &Ipld {
        &self.0
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        JsIpld(&self.0).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ipld::deserialize(deserializer).map(Value)
    }
}

/// Serialises a borrowed [`Ipld`] with JavaScript number semantics (see [`Value`]).
#[derive(Debug, Clone, Copy)]
pub struct JsIpld<'a>(pub &'a Ipld);

impl Serialize for JsIpld<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Ipld::Float(value) if is_js_integer(*value) => serializer.serialize_i64(*value as i64),
            Ipld::List(items) => serializer.collect_seq(items.iter().map(JsIpld)),
            Ipld::Map(entries) => serializer.collect_map(entries.iter().map(|(key, value)| (key, JsIpld(value)))),
            other => other.serialize(serializer),
        }
    }
}

/// A CBOR byte string (`Uint8Array` on the TypeScript side).
///
/// ```
/// use seed_agents_protocol::Bytes;
/// let bytes = Bytes::from(vec![1, 2, 3]);
/// assert_eq!(seed_agents_protocol::wire::to_vec(&bytes).unwrap(), [0x43, 1, 2, 3]);
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Bytes(pub Vec<u8>);

impl Bytes {
    /// Returns the bytes.
    pub fn into_vec(self) -> Vec<u8> {
        self.0
    }
}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bytes({} bytes)", self.0.len())
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(value: Vec<u8>) -> Self {
        Bytes(value)
    }
}

impl From<&[u8]> for Bytes {
    fn from(value: &[u8]) -> Self {
        Bytes(value.to_vec())
    }
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    /// Accepts a byte string (CBOR) or an array of integers (JSON), never a text string: a field
    /// that may be bytes or text (`WriteAgentMemoryFile.content`) must keep the two apart.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_byte_buf(BytesVisitor)
    }
}

struct BytesVisitor;

impl<'de> serde::de::Visitor<'de> for BytesVisitor {
    type Value = Bytes;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a byte string")
    }

    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Bytes, E> {
        Ok(Bytes(v.to_vec()))
    }

    fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Bytes, E> {
        Ok(Bytes(v))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Bytes, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(byte) = seq.next_element::<u8>()? {
            out.push(byte);
        }
        Ok(Bytes(out))
    }
}

/// A protocol `number` that may be fractional.
///
/// Whole values within the safe-integer range are written as CBOR integers (the JavaScript encoder
/// cannot tell `2.0` from `2`); everything else as a 64-bit float. Integers are accepted on read.
///
/// ```
/// use seed_agents_protocol::{Float, wire};
/// assert_eq!(wire::to_vec(&Float(3.0)).unwrap(), [0x03]);
/// assert_eq!(wire::to_vec(&Float(0.5)).unwrap()[0], 0xfb);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Default)]
pub struct Float(pub f64);

impl From<f64> for Float {
    fn from(value: f64) -> Self {
        Float(value)
    }
}

impl From<Float> for f64 {
    fn from(value: Float) -> Self {
        value.0
    }
}

impl Serialize for Float {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if is_js_integer(self.0) { serializer.serialize_i64(self.0 as i64) } else { serializer.serialize_f64(self.0) }
    }
}

impl<'de> Deserialize<'de> for Float {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        f64::deserialize(deserializer).map(Float)
    }
}

/// A field where absent, `null` and a value are three different requests.
///
/// Used only where the protocol gives `null` a meaning (for example `UpdateSession.modelOverride`:
/// absent leaves the override alone, `null` clears it). Generated structs mark such fields with
/// `#[serde(default, skip_serializing_if = "Nullable::is_absent")]`, so [`Nullable::Absent`] is
/// omitted from the map, [`Nullable::Null`] is written as CBOR null and [`Nullable::Value`] as the
/// value.
///
/// ```
/// use seed_agents_protocol::Nullable;
/// let clear: Nullable<String> = Nullable::Null;
/// assert!(!clear.is_absent());
/// assert_eq!(Nullable::from(Some(1)), Nullable::Value(1));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Nullable<T> {
    /// The key is not in the map.
    #[default]
    Absent,
    /// The key is present with CBOR null.
    Null,
    /// The key is present with a value.
    Value(T),
}

impl<T> Nullable<T> {
    /// Whether the key is left out of the map.
    pub fn is_absent(&self) -> bool {
        matches!(self, Nullable::Absent)
    }

    /// The value, when there is one.
    pub fn as_value(&self) -> Option<&T> {
        match self {
            Nullable::Value(value) => Some(value),
            _ => None,
        }
    }
}

impl<T> From<Option<T>> for Nullable<T> {
    /// `None` becomes an explicit null; `Some` a value.
    fn from(value: Option<T>) -> Self {
        match value {
            Some(value) => Nullable::Value(value),
            None => Nullable::Null,
        }
    }
}

impl<T: Serialize> Serialize for Nullable<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            // Only reached when a caller forgets `skip_serializing_if`; null is the closest truth.
            // `none`, not `unit`: the IPLD serializer refuses unit; both encoders write null.
            Nullable::Absent | Nullable::Null => serializer.serialize_none(),
            Nullable::Value(value) => value.serialize(serializer),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Nullable<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Option::<T>::deserialize(deserializer).map(|value| match value {
            Some(value) => Nullable::Value(value),
            None => Nullable::Null,
        })
    }
}

/// Reads an optional open value so that an explicit `null` stays a value (`Some(Value::NULL)`):
/// for `unknown` fields null is data, and dropping it would change what the signer signed. A
/// missing key is `None` through `#[serde(default)]`. Generated code uses it on every optional
/// [`Value`] field.
pub fn deserialize_some<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Update {
        #[serde(skip_serializing_if = "Nullable::is_absent")]
        value: Nullable<u8>,
    }

    #[test]
    fn a_null_tri_state_is_null_through_both_encoders() {
        let update = Update { value: Nullable::Null };
        // 0xa1 map(1), 0x65 "value", 0xf6 null.
        assert_eq!(crate::wire::to_vec(&update).unwrap(), [&[0xa1, 0x65][..], b"value", &[0xf6]].concat());
        let ipld = crate::wire::to_ipld(&update).unwrap();
        assert_eq!(crate::wire::ipld_to_vec(&ipld).unwrap(), crate::wire::to_vec(&update).unwrap());
        let absent = Update { value: Nullable::Absent };
        assert_eq!(crate::wire::to_vec(&absent).unwrap(), [0xa0]);
    }
}
