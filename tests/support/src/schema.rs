//! The schema-driven tests' view of `schema/json/`: the merged definitions, and one example value
//! per definition ([`example`]). The protocol's round-trip properties and compat's payload
//! snapshots are built from them.

pub mod example;

use std::collections::BTreeMap;

use serde_json::Value as Json;

/// The merged `$defs` of every schema file, by name.
pub fn defs() -> BTreeMap<String, Json> {
    // This crate's manifest is in `tests/support/`.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schema/json");
    let mut defs = BTreeMap::new();
    let mut paths: Vec<_> =
        std::fs::read_dir(dir).expect("schema dir").map(|entry| entry.expect("entry").path()).collect();
    paths.sort();
    for path in paths {
        let doc: Json = serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        for (name, schema) in doc["$defs"].as_object().expect("$defs") {
            defs.insert(name.clone(), schema.clone());
        }
    }
    defs
}

/// The definition a `$ref` names.
pub fn ref_target(schema: &Json) -> Option<&str> {
    schema.get("$ref")?.as_str()?.rsplit('/').next()
}
