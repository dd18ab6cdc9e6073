//! `cli/src/generated/schema.json`: the schema the `seed-agents` tool embeds, so `call --describe`
//! and its input check read the same definitions the protocol types were generated from.
//!
//! It is the merged `$defs` of every action and response and of each type they reach, one
//! definition per line, with only what describing and checking a value needs: `type`,
//! `description`, `properties`, `required`, `items`, `additionalProperties`, `oneOf`, `anyOf`,
//! `enum`, `const`, `minimum`, `pattern`, and our `x-kind`, `x-response`, `x-effect`, `x-since`,
//! `x-transport`, `x-discriminator` and `x-open`. References stay `{"$ref": "#/$defs/Name"}`; the
//! hand-written leaf types (`x-rust-type`) become `"x-leaf": "bytes" | "float" | "value"`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value as Json};

use crate::model::{self, Kind, Model};

/// Where the file goes, relative to the workspace root.
pub const PATH: &str = "cli/src/generated/schema.json";

/// The `@generated` marker, the value of the file's first key.
pub const MARKER: &str = "by seed-agents-codegen from schema/json/*.json — DO NOT EDIT; change the schema and run `cargo run -p seed-agents-codegen`";

/// The keywords kept (anything else is dropped).
const KEPT: &[&str] = &[
    "type",
    "description",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "oneOf",
    "anyOf",
    "enum",
    "const",
    "minimum",
    "pattern",
    "$ref",
    "x-kind",
    "x-response",
    "x-effect",
    "x-since",
    "x-transport",
    "x-discriminator",
    "x-open",
];

/// Renders the file.
pub fn render(model: &Model) -> String {
    let mut wanted = BTreeSet::new();
    let mut queue: Vec<&str> =
        model.defs.values().filter(|def| def.kind() != Kind::Type).map(|def| def.name.as_str()).collect();
    while let Some(name) = queue.pop() {
        if !wanted.insert(name) {
            continue;
        }
        if let Some(def) = model.defs.get(name) {
            model::walk_refs(&def.schema, &mut |target| queue.push(target));
        }
    }
    let defs: BTreeMap<&str, Json> =
        wanted.into_iter().filter_map(|name| model.defs.get(name).map(|def| (name, compact(&def.schema)))).collect();
    let mut text = String::from("{\n");
    text.push_str(&format!("\"@generated\": {},\n", Json::from(MARKER)));
    text.push_str(&format!("\"protocol\": {},\n", model.protocol));
    text.push_str("\"defs\": {\n");
    let lines: Vec<String> = defs.iter().map(|(name, schema)| format!("{}: {schema}", Json::from(*name))).collect();
    text.push_str(&lines.join(",\n"));
    text.push_str("\n}\n}\n");
    text
}

/// `schema` with only the [`KEPT`] keywords (and every property, whatever its name).
fn compact(schema: &Json) -> Json {
    match schema {
        Json::Object(map) => {
            let mut out = Map::new();
            if let Some(leaf) = leaf(schema) {
                out.insert("x-leaf".into(), leaf.into());
            }
            for (key, value) in map.iter().filter(|(key, _)| KEPT.contains(&key.as_str())) {
                let kept = match value {
                    Json::Object(props) if key == "properties" => {
                        Json::Object(props.iter().map(|(name, prop)| (name.clone(), compact(prop))).collect())
                    }
                    other => compact(other),
                };
                out.insert(key.clone(), kept);
            }
            Json::Object(out)
        }
        Json::Array(items) => Json::Array(items.iter().map(compact).collect()),
        other => other.clone(),
    }
}

/// `bytes`, `float` or `value` for the hand-written leaf types.
fn leaf(schema: &Json) -> Option<&'static str> {
    let path = schema.get("x-rust-type")?.get("path")?.as_str()?;
    match path.rsplit("::").next()? {
        "Bytes" => Some("bytes"),
        "Float" => Some("float"),
        "Value" => Some("value"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_json_with_every_action_and_its_types() {
        let model = Model::load(&crate::workspace_root().join("schema/json")).expect("schema");
        let text = render(&model);
        let file: Json = serde_json::from_str(&text).expect("JSON");
        assert_eq!(file["@generated"], MARKER);
        let defs = file["defs"].as_object().expect("defs");
        for def in model.defs.values().filter(|def| def.kind() == Kind::Action) {
            assert!(defs.contains_key(&def.name), "{}", def.name);
        }
        assert_eq!(defs["Bytes"]["x-leaf"], "bytes");
        assert!(defs["SetModelProvider"]["properties"]["provider"]["$ref"].is_string());
        assert!(defs["ModelProviderConfig"]["properties"]["secretRefs"]["additionalProperties"].is_object());
        assert!(!text.contains("x-rust-type") && !text.contains("\"x-id\""));
        assert_eq!(text.lines().count(), defs.len() + 6, "one definition per line");
    }
}
