//! Shared by the schema-driven tests: the merged schema definitions. The compat crate's
//! `tests/versions.rs` includes this file (and `example.rs` beside it) with `#[path]`.

use std::collections::BTreeMap;

use serde_json::Value as Json;

/// The merged `$defs` of every schema file, by name.
pub fn defs() -> BTreeMap<String, Json> {
    // `../schema/json` from any workspace member's manifest directory, so that other crates'
    // tests can include this file.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../schema/json");
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
