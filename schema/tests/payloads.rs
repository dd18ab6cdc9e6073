//! Snapshots (insta) of one example CBOR payload per action and response, as hex plus CBOR
//! diagnostic notation, in `snapshots/payloads/`. A change to the schema or to the encoder shows
//! up as a snapshot diff for review.
//!
//! Examples are built from the schema with every property filled (optional ones too), so every
//! field's wire form is visible: text properties hold their own name, integers a fixed timestamp
//! or 1, byte strings `h'00010203'`, open values a small map; unions show their first member.
//! The typed value is decoded from that generic example and its own encoding is what is recorded.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::{AgentAction, AgentResponse, wire};
use serde_json::Value as Json;

mod common;

fn example(defs: &BTreeMap<String, Json>, schema: &Json, name: &str, depth: u32) -> Ipld {
    if let Some(target) = common::ref_target(schema) {
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

fn render(bytes: &[u8]) -> String {
    let hex = hex::encode(bytes);
    let lines: Vec<&str> =
        hex.as_bytes().chunks(64).map(|chunk| std::str::from_utf8(chunk).unwrap_or_default()).collect();
    format!(
        "hex ({} bytes):\n{}\n\ndiagnostic:\n{}\n",
        bytes.len(),
        lines.join("\n"),
        wire::diagnostic(bytes).expect("diagnostic")
    )
}

fn snapshot_all(kind: &str, encode: impl Fn(Ipld) -> Vec<u8>) -> usize {
    let defs = common::defs();
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("../../snapshots/payloads");
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    let mut count = 0;
    settings.bind(|| {
        for (name, schema) in &defs {
            if schema.get("x-kind").and_then(Json::as_str) != Some(kind) {
                continue;
            }
            let bytes = encode(example(&defs, schema, name, 0));
            insta::assert_snapshot!(format!("{kind}-{name}"), render(&bytes));
            count += 1;
        }
    });
    count
}

#[test]
fn one_payload_per_action() {
    let count = snapshot_all("action", |generic| {
        let typed: AgentAction = wire::from_ipld(generic.clone()).unwrap_or_else(|e| panic!("{generic:?}: {e}"));
        wire::to_vec(&typed).expect("encode")
    });
    assert!(count >= 74);
}

#[test]
fn one_payload_per_response() {
    let count = snapshot_all("response", |generic| {
        let typed: AgentResponse = wire::from_ipld(generic.clone()).unwrap_or_else(|e| panic!("{generic:?}: {e}"));
        wire::to_vec(&typed).expect("encode")
    });
    assert!(count >= 68);
}
