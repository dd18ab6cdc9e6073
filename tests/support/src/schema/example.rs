//! One fixed example value per schema definition, for the payload snapshots (compat's
//! `versions` tests).
//!
//! Every property is filled (optional ones too), so every field's wire form is visible: text
//! properties hold their own name, integers a fixed timestamp (`…At`, `ts`) or 1, byte strings
//! `h'00010203'`, open values a small map; unions show their first member. Deeper than 3 levels
//! (each property, array item and `$ref` is one), only required properties are filled and arrays
//! are empty, so recursive types end.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use serde_json::Value as Json;

/// The example of `schema` (a definition or a property schema); `name` is the property or
/// definition name, `depth` 0 for a definition.
pub fn example(defs: &BTreeMap<String, Json>, schema: &Json, name: &str, depth: u32) -> Ipld {
    if let Some(target) = super::ref_target(schema) {
        return example(defs, &defs[target], name, depth + 1);
    }
    if let Some(path) = schema.get("x-rust-type").and_then(|x| x["path"].as_str()) {
        return match path.rsplit("::").next() {
            Some("Bytes") => Ipld::Bytes(vec![0, 1, 2, 3]),
            Some("Float") => Ipld::Float(0.5),
            _ => Ipld::Map(BTreeMap::from([
                ("note".to_owned(), Ipld::String("open value".into())),
                ("n".to_owned(), Ipld::Integer(1)),
            ])),
        };
    }
    if let Some(value) = schema.get("const") {
        return scalar(value);
    }
    if let Some(values) = schema.get("enum").and_then(Json::as_array) {
        return scalar(&values[0]);
    }
    if let Some(alts) = schema.get("oneOf").and_then(Json::as_array) {
        let first = alts.iter().find(|alt| alt["type"] != "null").unwrap_or(&alts[0]);
        return example(defs, first, name, depth);
    }
    match schema.get("type").and_then(Json::as_str) {
        Some("string") => Ipld::String(name.to_owned()),
        Some("integer") if name.ends_with("At") || name == "ts" => Ipld::Integer(1_767_225_600_000),
        Some("integer") => Ipld::Integer(1),
        Some("number") => Ipld::Float(0.5),
        Some("boolean") => Ipld::Bool(true),
        Some("array") if depth > 3 => Ipld::List(vec![]),
        Some("array") => Ipld::List(vec![example(defs, &schema["items"], name, depth + 1)]),
        Some("object") => {
            let required: Vec<&str> =
                schema["required"].as_array().map(|r| r.iter().filter_map(Json::as_str).collect()).unwrap_or_default();
            let mut map = BTreeMap::new();
            for (prop, prop_schema) in schema["properties"].as_object().into_iter().flatten() {
                if depth > 3 && !required.contains(&prop.as_str()) {
                    continue;
                }
                map.insert(prop.clone(), example(defs, prop_schema, prop, depth + 1));
            }
            Ipld::Map(map)
        }
        _ => Ipld::Null,
    }
}

fn scalar(value: &Json) -> Ipld {
    match value {
        Json::String(s) => Ipld::String(s.clone()),
        Json::Bool(b) => Ipld::Bool(*b),
        Json::Number(n) => Ipld::Integer(n.as_i64().unwrap_or_default().into()),
        _ => Ipld::Null,
    }
}
