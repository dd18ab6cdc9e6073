//! Typed decoding of a generic IPLD value.
//!
//! `ipld_core`'s own deserializer hands every integer to serde as an `i128`; serde's buffering
//! (used by internally tagged and untagged enums, i.e. every action and response) cannot hold an
//! `i128`, so decoding fails. This deserializer hands integers over as `i64`/`u64` whenever they
//! fit, exactly as the CBOR decoder does, and delegates the rare CID link to `ipld_core`.

use ipld_core::ipld::Ipld;
use serde::de::value::{Error, MapDeserializer, SeqDeserializer};
use serde::de::{self, IntoDeserializer, Visitor};
use serde::forward_to_deserialize_any;

/// A deserializer over an owned [`Ipld`] value.
#[derive(Debug)]
pub struct IpldDeserializer(pub Ipld);

impl<'de> IntoDeserializer<'de, Error> for IpldDeserializer {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'de> de::Deserializer<'de> for IpldDeserializer {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Ipld::Null => visitor.visit_unit(),
            Ipld::Bool(b) => visitor.visit_bool(b),
            Ipld::Integer(i) => {
                if let Ok(small) = i64::try_from(i) {
                    visitor.visit_i64(small)
                } else if let Ok(large) = u64::try_from(i) {
                    visitor.visit_u64(large)
                } else {
                    visitor.visit_i128(i)
                }
            }
            Ipld::Float(f) => visitor.visit_f64(f),
            Ipld::String(s) => visitor.visit_string(s),
            Ipld::Bytes(b) => visitor.visit_byte_buf(b),
            Ipld::List(items) => visitor.visit_seq(SeqDeserializer::new(items.into_iter().map(IpldDeserializer))),
            Ipld::Map(entries) => {
                visitor.visit_map(MapDeserializer::new(entries.into_iter().map(|(k, v)| (k, IpldDeserializer(v)))))
            }
            link @ Ipld::Link(_) => de::Deserializer::deserialize_any(link, visitor).map_err(de::Error::custom),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Ipld::Null => visitor.visit_none(),
            other => visitor.visit_some(IpldDeserializer(other)),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            // CIDs travel as a special newtype; ipld_core knows it.
            link @ Ipld::Link(_) => {
                de::Deserializer::deserialize_newtype_struct(link, name, visitor).map_err(de::Error::custom)
            }
            other => visitor.visit_newtype_struct(IpldDeserializer(other)),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Ipld::String(s) => visitor.visit_enum(s.into_deserializer()),
            other => de::Deserializer::deserialize_enum(other, name, variants, visitor).map_err(de::Error::custom),
        }
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}
