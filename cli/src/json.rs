//! JSON in, JSON out: the IPLD values actions and responses are made of, written as JSON.
//!
//! JSON has no byte strings, so a byte string is the object `{"$bytes": "<hex>"}` both ways (and
//! a CID link, which only ever comes out, `{"$link": "<cid>"}`). Integers stay integers and
//! fractional numbers stay floats, as the wire keeps them apart.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use serde_json::{Map, Number, Value};

/// The key of the object that stands for a byte string.
pub const BYTES_KEY: &str = "$bytes";
/// The key of the object that stands for a CID link.
pub const LINK_KEY: &str = "$link";

/// Converts JSON input into an IPLD value; the error names where in the input it went wrong.
pub fn to_ipld(value: Value) -> Result<Ipld, String> {
    to_ipld_at(value, &mut String::new())
}

fn to_ipld_at(value: Value, path: &mut String) -> Result<Ipld, String> {
    Ok(match value {
        Value::Null => Ipld::Null,
        Value::Bool(b) => Ipld::Bool(b),
        Value::Number(n) => number_to_ipld(&n),
        Value::String(s) => Ipld::String(s),
        Value::Array(items) => {
            let mut list = Vec::with_capacity(items.len());
            for (index, item) in items.into_iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{index}]"));
                list.push(to_ipld_at(item, path)?);
                path.truncate(len);
            }
            Ipld::List(list)
        }
        Value::Object(map) => {
            if let Some(bytes) = bytes_object(&map) {
                return bytes.map(Ipld::Bytes).map_err(|reason| format!("{} at {}: {reason}", BYTES_KEY, shown(path)));
            }
            let mut out = BTreeMap::new();
            for (key, item) in map {
                let len = path.len();
                path.push('.');
                path.push_str(&key);
                let item = to_ipld_at(item, path)?;
                path.truncate(len);
                out.insert(key, item);
            }
            Ipld::Map(out)
        }
    })
}

/// `Some` when `map` is `{"$bytes": …}`: the decoded bytes, or why they are not hex.
fn bytes_object(map: &Map<String, Value>) -> Option<Result<Vec<u8>, String>> {
    if map.len() != 1 {
        return None;
    }
    match map.get(BYTES_KEY)? {
        Value::String(text) => Some(hex::decode(text).map_err(|error| format!("not hex ({error})"))),
        _ => Some(Err("must be a string of hex digits".to_owned())),
    }
}

fn number_to_ipld(n: &Number) -> Ipld {
    if let Some(i) = n.as_i64() {
        Ipld::Integer(i.into())
    } else if let Some(u) = n.as_u64() {
        Ipld::Integer(u.into())
    } else {
        // serde_json without arbitrary precision holds every other number as a finite f64.
        Ipld::Float(n.as_f64().unwrap_or(f64::NAN))
    }
}

fn shown(path: &str) -> &str {
    if path.is_empty() { "the top level" } else { path }
}

/// Converts an IPLD value into JSON for output.
pub fn from_ipld(value: &Ipld) -> Value {
    match value {
        Ipld::Null => Value::Null,
        Ipld::Bool(b) => Value::Bool(*b),
        Ipld::Integer(i) => integer_to_json(*i),
        // DAG-CBOR has no NaN or infinities; `from_f64` refuses only those.
        Ipld::Float(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
        Ipld::String(s) => Value::String(s.clone()),
        Ipld::Bytes(bytes) => single(BYTES_KEY, Value::String(hex::encode(bytes))),
        Ipld::List(items) => Value::Array(items.iter().map(from_ipld).collect()),
        Ipld::Map(map) => Value::Object(map.iter().map(|(key, item)| (key.clone(), from_ipld(item))).collect()),
        Ipld::Link(cid) => single(LINK_KEY, Value::String(cid.to_string())),
    }
}

fn integer_to_json(i: i128) -> Value {
    if let Ok(small) = i64::try_from(i) {
        Value::Number(small.into())
    } else if let Ok(large) = u64::try_from(i) {
        Value::Number(large.into())
    } else {
        // Below -2^63: CBOR can carry it, JSON numbers without arbitrary precision cannot; the
        // nearest float is what a JavaScript client would see too.
        Number::from_f64(i as f64).map_or(Value::Null, Value::Number)
    }
}

fn single(key: &str, value: Value) -> Value {
    let mut map = Map::new();
    map.insert(key.to_owned(), value);
    Value::Object(map)
}

/// The fields of `input` that `typed` (the same value after a round trip through this build's
/// types) no longer has: typos, or fields this build does not know. Paths like `.definition.nmae`.
pub fn dropped_fields(input: &Ipld, typed: &Ipld) -> Vec<String> {
    let mut dropped = Vec::new();
    walk_dropped(input, typed, &mut String::new(), &mut dropped);
    dropped
}

fn walk_dropped(input: &Ipld, typed: &Ipld, path: &mut String, dropped: &mut Vec<String>) {
    match (input, typed) {
        (Ipld::Map(input), Ipld::Map(typed)) => {
            for (key, item) in input {
                let len = path.len();
                path.push('.');
                path.push_str(key);
                match typed.get(key) {
                    Some(kept) => walk_dropped(item, kept, path, dropped),
                    None => dropped.push(path.clone()),
                }
                path.truncate(len);
            }
        }
        (Ipld::List(input), Ipld::List(typed)) => {
            for (index, (item, kept)) in input.iter().zip(typed).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{index}]"));
                walk_dropped(item, kept, path, dropped);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ipld(value: Value) -> Ipld {
        to_ipld(value).unwrap()
    }

    #[test]
    fn bytes_integers_and_floats_keep_their_kind_both_ways() {
        let input = json!({"value": {"$bytes": "00ff10"}, "n": 3, "big": u64::MAX, "neg": -7, "f": 1.5, "list": [null, true, "s"]});
        let value = ipld(input.clone());
        let Ipld::Map(map) = &value else { panic!("a map") };
        assert_eq!(map["value"], Ipld::Bytes(vec![0, 255, 16]));
        assert_eq!(map["n"], Ipld::Integer(3));
        assert_eq!(map["big"], Ipld::Integer(u64::MAX.into()));
        assert_eq!(map["neg"], Ipld::Integer(-7));
        assert_eq!(map["f"], Ipld::Float(1.5));
        assert_eq!(from_ipld(&value), input);
    }

    #[test]
    fn an_object_with_more_than_bytes_is_a_map() {
        let value = ipld(json!({"$bytes": "00", "other": 1}));
        assert!(matches!(value, Ipld::Map(map) if map.len() == 2));
    }

    #[test]
    fn bad_bytes_name_their_place() {
        let error = to_ipld(json!({"a": [{"b": {"$bytes": "xyz"}}]})).unwrap_err();
        assert!(error.contains(".a[0].b"), "{error}");
        let error = to_ipld(json!({"$bytes": 5})).unwrap_err();
        assert!(error.contains("the top level") && error.contains("hex"), "{error}");
    }

    #[test]
    fn dropped_fields_are_listed_with_their_paths() {
        let input = ipld(json!({"agentId": "a", "nmae": "x", "definition": {"tools": [{"x": 1, "y": 2}]}}));
        let typed = ipld(json!({"agentId": "a", "definition": {"tools": [{"x": 1}]}}));
        assert_eq!(dropped_fields(&input, &typed), vec![".definition.tools[0].y".to_owned(), ".nmae".to_owned()]);
        assert!(dropped_fields(&input, &input).is_empty());
    }
}
