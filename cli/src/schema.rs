//! The protocol's schema as this build was generated from it: `generated/schema.json`, written by
//! codegen from `schema/json/` (see `ARCHITECTURE.md`, "codegen") and embedded in the binary.
//! `call --describe` and the input check read it, so neither can drift from the protocol types.
//!
//! A definition is JSON Schema with references `{"$ref": "#/$defs/Name"}`, our `x-` keywords, and
//! `"x-leaf": "bytes" | "float" | "value"` for the leaf types JSON Schema cannot say.

use std::sync::OnceLock;

use serde_json::{Map, Value as Json};

/// The embedded file.
const TEXT: &str = include_str!("generated/schema.json");

/// Every definition by name.
pub fn defs() -> &'static Map<String, Json> {
    static DEFS: OnceLock<Map<String, Json>> = OnceLock::new();
    DEFS.get_or_init(|| {
        // The file is generated and checked by codegen's tests; a unit test parses it too.
        match serde_json::from_str::<Json>(TEXT) {
            Ok(Json::Object(mut file)) => match file.remove("defs") {
                Some(Json::Object(defs)) => defs,
                _ => Map::new(),
            },
            _ => Map::new(),
        }
    })
}

/// The definition `name`.
pub fn def(name: &str) -> Option<&'static Json> {
    defs().get(name)
}

/// The name a `{"$ref": "#/$defs/Name"}` schema refers to.
pub fn ref_name(schema: &Json) -> Option<&str> {
    schema.get("$ref")?.as_str()?.strip_prefix("#/$defs/")
}

/// `schema` with references followed (a property's own `description` is lost; read it first).
pub fn resolve(mut schema: &'static Json) -> &'static Json {
    // References only name definitions; a chain of aliases is short, and a loop is cut.
    for _ in 0..16 {
        match ref_name(schema).and_then(def) {
            Some(target) => schema = target,
            None => break,
        }
    }
    schema
}

/// A leaf type: `bytes`, `float` or `value`.
pub fn leaf(schema: &Json) -> Option<&str> {
    schema.get("x-leaf").and_then(Json::as_str)
}

/// The alternatives of a `oneOf`/`anyOf`.
pub fn alternatives(schema: &Json) -> Option<&Vec<Json>> {
    schema.get("oneOf").or_else(|| schema.get("anyOf")).and_then(Json::as_array)
}

/// The property names of an object schema, in order.
pub fn properties(schema: &Json) -> Option<&Map<String, Json>> {
    schema.get("properties").and_then(Json::as_object)
}

/// Whether an object schema requires `name`.
pub fn is_required(schema: &Json, name: &str) -> bool {
    schema.get("required").and_then(Json::as_array).is_some_and(|names| names.iter().any(|n| n == name))
}

/// The `description`, if any.
pub fn description(schema: &Json) -> Option<&str> {
    schema.get("description").and_then(Json::as_str)
}

/// The first sentence of a description (up to the first `. ` outside backquotes).
pub fn first_sentence(text: &str) -> &str {
    let mut quoted = false;
    let bytes = text.as_bytes();
    for (index, byte) in bytes.iter().enumerate() {
        match byte {
            b'`' => quoted = !quoted,
            b'.' if !quoted && bytes.get(index + 1).is_none_or(|next| *next == b' ' || *next == b'\n') => {
                return &text[..=index];
            }
            _ => {}
        }
    }
    text
}

/// A member of a discriminated union: the definition and the value of its tag.
#[derive(Debug, Clone, Copy)]
pub struct Member {
    /// The member's definition name.
    pub name: &'static str,
    /// The member's tag value (`"memory"`).
    pub tag: &'static str,
    /// The member's schema.
    pub schema: &'static Json,
}

/// For a discriminated union (`x-discriminator`), its tag property and members.
pub fn union(schema: &'static Json) -> Option<(&'static str, Vec<Member>)> {
    let tag = schema.get("x-discriminator")?.as_str()?;
    let members = alternatives(schema)?
        .iter()
        .filter_map(|member| {
            let name = ref_name(member)?;
            let schema = def(name)?;
            let value = schema.get("properties")?.get(tag)?.get("const")?.as_str()?;
            Some(Member { name, tag: value, schema })
        })
        .collect();
    Some((tag, members))
}

/// For `oneOf [T, {"type": "null"}]`, the non-null `T`.
pub fn nullable_inner(schema: &Json) -> Option<&Json> {
    let alts = alternatives(schema)?;
    let is_null = |s: &Json| s.get("type").and_then(Json::as_str) == Some("null");
    match alts.as_slice() {
        [inner, null] | [null, inner] if is_null(null) && !is_null(inner) => Some(inner),
        _ => None,
    }
}

/// A schema in a short notation: `string`, `integer`, `float`, `boolean`, `bytes`, `value` (any
/// JSON), `Name`, `T[]`, `map<T>`, `"a" | "b"`, `T | null`, `object`.
pub fn type_name(schema: &Json) -> String {
    if let Some(name) = ref_name(schema) {
        let target = def(name);
        if let Some(leaf) = target.and_then(leaf) {
            return leaf.to_owned();
        }
        if let Some(target) = target.filter(|target| target.get("enum").is_some()) {
            return type_name(target);
        }
        return name.to_owned();
    }
    if let Some(leaf) = leaf(schema) {
        return leaf.to_owned();
    }
    if let Some(value) = schema.get("const") {
        return value.to_string();
    }
    if let Some(values) = schema.get("enum").and_then(Json::as_array) {
        return values.iter().map(Json::to_string).collect::<Vec<_>>().join(" | ");
    }
    if let Some(alts) = alternatives(schema) {
        return alts.iter().map(type_name).collect::<Vec<_>>().join(" | ");
    }
    match schema.get("type").and_then(Json::as_str) {
        Some("number") => "float".to_owned(),
        Some("array") => {
            let items = schema.get("items").map_or_else(|| "value".to_owned(), type_name);
            if items.contains(' ') { format!("({items})[]") } else { format!("{items}[]") }
        }
        Some("object") if properties(schema).is_none() => match schema.get("additionalProperties") {
            Some(values) if values.is_object() => format!("map<{}>", type_name(values)),
            _ => "map<value>".to_owned(),
        },
        Some(other) => other.to_owned(),
        None => "value".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_schema_has_every_action_of_this_build() {
        for info in seed_agents_sdk::protocol::generated::ACTIONS {
            let def = def(info.name).unwrap_or_else(|| panic!("{} is not in the embedded schema", info.name));
            assert_eq!(def["x-kind"], "action", "{}", info.name);
            assert!(info.response.is_empty() || super::def(info.response).is_some(), "{}", info.response);
        }
    }

    #[test]
    fn types_read_short() {
        let provider = def("ModelProviderConfig").unwrap();
        assert_eq!(type_name(&provider["properties"]["secretRefs"]), "map<string>");
        assert_eq!(type_name(&def("SetSecret").unwrap()["properties"]["value"]), "bytes");
        assert_eq!(type_name(&def("SetModelProvider").unwrap()["properties"]["provider"]), "ModelProviderConfig");
        assert_eq!(first_sentence("Runs `a.b` here. Then more."), "Runs `a.b` here.");
        assert_eq!(first_sentence("No full stop"), "No full stop");
    }
}
