//! Documentation check: every definition (action, response, named type) and every property in
//! `schema/json/*.json`, nested ones included, has a non-empty `description`. Codegen turns these
//! into the generated rustdoc, so a new field without one fails here rather than shipping
//! undocumented.

use serde_json::Value as Json;

/// Every place in `schema` that must carry a description, as `Def.field.sub` paths, collected
/// into `out` when its description is missing or blank. `schema` is itself such a place.
fn undocumented(path: &str, schema: &Json, out: &mut Vec<String>) {
    let blank = schema.get("description").and_then(Json::as_str).is_none_or(|text| text.trim().is_empty());
    if blank {
        out.push(path.to_owned());
    }
    nested(path, schema, out);
}

/// The properties of `schema` and of the object schemas it contains (array items, map values,
/// union members), which document fields under the same path.
fn nested(path: &str, schema: &Json, out: &mut Vec<String>) {
    if let Some(properties) = schema.get("properties").and_then(Json::as_object) {
        for (name, property) in properties {
            undocumented(&format!("{path}.{name}"), property, out);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(inner) = schema.get(key).filter(|inner| inner.is_object()) {
            nested(path, inner, out);
        }
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        for member in schema.get(key).and_then(Json::as_array).into_iter().flatten() {
            nested(path, member, out);
        }
    }
}

fn undocumented_in(doc: &Json) -> Vec<String> {
    let mut out = Vec::new();
    for (name, def) in doc.get("$defs").and_then(Json::as_object).into_iter().flatten() {
        undocumented(name, def, &mut out);
    }
    out
}

#[test]
fn every_definition_and_property_has_a_description() {
    let root = seed_agents_codegen::workspace_root();
    let documents = seed_agents_codegen::model::read_documents(&root.join("schema/json")).expect("schema");
    assert!(!documents.is_empty(), "no schema files found");
    let missing: Vec<String> = documents
        .iter()
        .flat_map(|(file, doc)| undocumented_in(doc).into_iter().map(move |path| format!("{file}: {path}")))
        .collect();
    assert!(
        missing.is_empty(),
        "{} schema definitions or properties have no description (write one: units, limits, who may call, errors):\n{}",
        missing.len(),
        missing.join("\n")
    );
}

#[test]
fn the_check_finds_nested_and_blank_descriptions() {
    let doc = serde_json::json!({"$defs": {
        "Documented": {"description": "A thing.", "properties": {"a": {"description": "An a."}}},
        "Bare": {"properties": {"_": {"const": "Bare"}}},
        "Nested": {
            "description": "Has nested fields.",
            "properties": {
                "list": {"description": "A list.", "type": "array", "items": {"properties": {"x": {"description": " "}}}},
                "either": {"description": "A union.", "oneOf": [{"properties": {"y": {}}}]},
                "map": {"description": "A map.", "additionalProperties": {"properties": {"z": {"description": "Z."}}}}
            }
        }
    }});
    assert_eq!(undocumented_in(&doc), ["Bare", "Bare._", "Nested.either.y", "Nested.list.x"]);
}
