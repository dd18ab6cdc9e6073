//! Reading `schema/tests/data/signing-vectors.json` (made by the published JS client library),
//! for the protocol's and the SDK's vector tests.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use serde_json::Value as Json;

/// The vectors file, as committed.
const VECTORS: &str = include_str!("../../../schema/tests/data/signing-vectors.json");

/// Every case of the vectors file, in order.
pub fn cases() -> Vec<Json> {
    let doc: Json = serde_json::from_str(VECTORS).expect("vectors parse");
    doc["cases"].as_array().expect("cases").clone()
}

/// The vectors' JSON notation as IPLD: `{"$bytes": hex}` is a byte string, integral numbers are
/// integers, fractional numbers floats. `{"$undefined": true}` has no IPLD form (`None`).
pub fn ipld(json: &Json) -> Option<Ipld> {
    Some(match json {
        Json::Null => Ipld::Null,
        Json::Bool(b) => Ipld::Bool(*b),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Ipld::Integer(i.into()),
            (None, Some(u)) => Ipld::Integer(u.into()),
            _ => Ipld::Float(n.as_f64()?),
        },
        Json::String(s) => Ipld::String(s.clone()),
        Json::Array(items) => Ipld::List(items.iter().map(ipld).collect::<Option<_>>()?),
        Json::Object(map) => {
            if let (1, Some(Json::String(hex))) = (map.len(), map.get("$bytes")) {
                return Some(Ipld::Bytes(hex::decode(hex).expect("$bytes is hex")));
            }
            if map.contains_key("$undefined") {
                return None;
            }
            let mut out = BTreeMap::new();
            for (key, value) in map {
                out.insert(key.clone(), ipld(value)?);
            }
            Ipld::Map(out)
        }
    })
}

/// A hex field of a case, as bytes (`path` walks nested objects).
pub fn hex_field(case: &Json, path: &[&str]) -> Vec<u8> {
    let value = path.iter().fold(case, |value, key| &value[*key]);
    hex::decode(value.as_str().unwrap_or_else(|| panic!("{path:?} missing"))).expect("hex field")
}
