//! Tool schemas as Gemini takes them, converted in this one place (docs/runtime.md §2.5).
//!
//! Gemini reads a function's parameters as JSON Schema (`parametersJsonSchema`) but honours only
//! a subset of it and refuses some of the rest. The conversion keeps the keywords Gemini documents
//! and drops every other one, which only ever loosens a schema: the runtime still checks each
//! call's arguments against the tool's full schema before anything runs (docs/runtime.md §1.8),
//! and the model corrects itself from that error. In detail:
//!
//! - `$ref`s into the schema itself (`#/$defs/…`, `#/definitions/…`, any local JSON pointer) are
//!   inlined and `$defs`/`definitions` dropped; a reference back into a schema being inlined
//!   (a recursive type) becomes an unconstrained schema at that point. A reference that leads
//!   nowhere or out of the document is refused with an [`ModelErrorKind::Unsupported`] error that
//!   names the tool.
//! - `const` becomes a one-value `enum`; an `enum` with anything but strings is dropped (Gemini
//!   takes string enums only); `oneOf` becomes `anyOf`; `allOf` is merged into its parent.
//! - A type list (`["string", "null"]`) becomes an `anyOf` of one branch per type, `null`
//!   included.
//! - `format` stays only where Gemini knows it: `date-time`, `date` and `time` on strings,
//!   `int32`, `int64`, `float` and `double` on numbers.
//! - `required` keeps only names the same object lists in `properties`.
//! - Dropped, among others: `$schema`, `$id`, `$comment`, `additionalProperties`,
//!   `patternProperties`, `not`, `if`/`then`/`else`, `prefixItems`, `uniqueItems`, `multipleOf`,
//!   `examples`.
//!
//! [`ModelErrorKind::Unsupported`]: crate::model::ModelErrorKind::Unsupported

use serde_json::{Map, Value, json};

use crate::model::ModelError;

/// Annotation keywords copied as they are (when of the right JSON type).
const ANNOTATIONS: [&str; 3] = ["title", "description", "default"];

/// Numeric constraint keywords copied when they are numbers.
const NUMBERS: [&str; 8] =
    ["minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"];

const STRING_FORMATS: [&str; 3] = ["date-time", "date", "time"];
const NUMBER_FORMATS: [&str; 4] = ["int32", "int64", "float", "double"];

/// Deeper nodes are left unconstrained (a guard against pathological nesting).
const MAX_DEPTH: usize = 48;

/// A tool's parameters as Gemini takes them; the root is always an object schema.
pub(crate) fn parameters(tool: &str, schema: &Value) -> Result<Value, ModelError> {
    let converter = Converter { tool, root: schema };
    let mut references = vec!["#".to_owned()];
    let mut converted = converter.node(schema, &mut references, 0)?;
    let Value::Object(root) = &mut converted else {
        return Ok(json!({"type": "object"}));
    };
    match root.get("type") {
        None if !root.contains_key("anyOf") => {
            root.insert("type".into(), "object".into());
        }
        Some(Value::String(kind)) if kind == "object" => {}
        _ => return Err(converter.refused("its root is not an object schema")),
    }
    Ok(converted)
}

struct Converter<'a> {
    tool: &'a str,
    root: &'a Value,
}

impl Converter<'_> {
    fn refused(&self, detail: &str) -> ModelError {
        ModelError::unsupported(format!("Tool {} has a parameter schema Gemini cannot take: {detail}", self.tool))
    }

    /// One schema node. `references` are the `$ref`s being inlined above it (a recursion guard).
    fn node(&self, value: &Value, references: &mut Vec<String>, depth: usize) -> Result<Value, ModelError> {
        let Value::Object(fields) = value else {
            // `true`, `false` and anything that is not a schema object: no constraint Gemini takes.
            return Ok(json!({}));
        };
        if depth > MAX_DEPTH {
            return Ok(unconstrained(fields));
        }
        if let Some(reference) = fields.get("$ref") {
            return self.reference(fields, reference, references, depth);
        }
        let mut out = Map::new();
        for key in ANNOTATIONS {
            if let Some(value) = fields.get(key).filter(|value| key == "default" || value.is_string()) {
                out.insert(key.into(), value.clone());
            }
        }
        for key in NUMBERS {
            if let Some(value) = fields.get(key).filter(|value| value.is_number()) {
                out.insert(key.into(), value.clone());
            }
        }
        for key in ["pattern", "format"] {
            if let Some(text) = fields.get(key).filter(|text| text.is_string()) {
                out.insert(key.into(), text.clone());
            }
        }
        if let Some(Value::Array(order)) = fields.get("propertyOrdering")
            && order.iter().all(Value::is_string)
        {
            out.insert("propertyOrdering".into(), Value::Array(order.clone()));
        }
        match (fields.get("enum"), fields.get("const")) {
            (Some(Value::Array(values)), _) if !values.is_empty() && values.iter().all(Value::is_string) => {
                out.insert("enum".into(), Value::Array(values.clone()));
            }
            (None, Some(Value::String(only))) => {
                out.insert("enum".into(), json!([only]));
            }
            _ => {}
        }
        if let Some(Value::Object(properties)) = fields.get("properties") {
            let mut converted = Map::new();
            for (name, child) in properties {
                converted.insert(name.clone(), self.node(child, references, depth + 1)?);
            }
            out.insert("properties".into(), Value::Object(converted));
        }
        if let Some(items) = fields.get("items").filter(|items| items.is_object()) {
            out.insert("items".into(), self.node(items, references, depth + 1)?);
        }
        let mut branches = Vec::new();
        for key in ["anyOf", "oneOf"] {
            for branch in fields.get(key).and_then(Value::as_array).into_iter().flatten() {
                branches.push(self.node(branch, references, depth + 1)?);
            }
        }
        for member in fields.get("allOf").and_then(Value::as_array).into_iter().flatten() {
            if let Value::Object(member) = self.node(member, references, depth + 1)? {
                merge_member(&mut out, member);
            }
        }
        if let Some(Value::Array(required)) = fields.get("required") {
            let listed = out.get("properties").and_then(Value::as_object);
            let kept: Vec<Value> = required
                .iter()
                .filter(|name| name.as_str().is_some_and(|name| listed.is_some_and(|listed| listed.contains_key(name))))
                .cloned()
                .collect();
            if !kept.is_empty() {
                merge_member(&mut out, Map::from_iter([("required".to_owned(), Value::Array(kept))]));
            }
        }
        Ok(typed(out, fields.get("type"), branches))
    }

    /// A `$ref` node: its target inlined, refined by the keywords beside the `$ref`.
    fn reference(
        &self,
        fields: &Map<String, Value>,
        reference: &Value,
        references: &mut Vec<String>,
        depth: usize,
    ) -> Result<Value, ModelError> {
        let Some(reference) = reference.as_str() else {
            return Err(self.refused("a $ref that is not a string"));
        };
        let target = match reference {
            "#" => Some(self.root),
            pointer => {
                pointer.strip_prefix('#').filter(|rest| rest.starts_with('/')).and_then(|rest| self.root.pointer(rest))
            }
        };
        if references.iter().any(|seen| seen == reference) {
            // Recursion: unconstrained here, described as the reference or its target is.
            let described = fields.get("description").or_else(|| target.and_then(|target| target.get("description")));
            return Ok(described
                .filter(|text| text.is_string())
                .map_or_else(|| json!({}), |text| json!({"description": text})));
        }
        let Some(target) = target else {
            return Err(self.refused(&format!(
                "$ref {reference} does not point into the schema itself (only local references such as \
                 #/$defs/name can be inlined)"
            )));
        };
        references.push(reference.to_owned());
        let resolved = self.node(target, references, depth + 1);
        references.pop();
        let mut resolved = resolved?;
        let siblings: Map<String, Value> =
            fields.iter().filter(|(key, _)| *key != "$ref").map(|(key, value)| (key.clone(), value.clone())).collect();
        if !siblings.is_empty()
            && let (Value::Object(target), Value::Object(own)) =
                (&mut resolved, self.node(&Value::Object(siblings), references, depth + 1)?)
        {
            for (key, value) in own {
                target.insert(key, value);
            }
        }
        Ok(resolved)
    }
}

/// An unconstrained schema keeping the node's description (a depth cut-off).
fn unconstrained(fields: &Map<String, Value>) -> Value {
    match fields.get("description").filter(|text| text.is_string()) {
        Some(description) => json!({"description": description}),
        None => json!({}),
    }
}

/// Merges an `allOf` member into its parent: properties joined, required names added, any other
/// keyword taken only where the parent has none.
fn merge_member(out: &mut Map<String, Value>, member: Map<String, Value>) {
    for (key, value) in member {
        match (key.as_str(), out.get_mut(&key), value) {
            ("properties", Some(Value::Object(mine)), Value::Object(theirs)) => {
                for (name, schema) in theirs {
                    mine.entry(name).or_insert(schema);
                }
            }
            ("required", Some(Value::Array(mine)), Value::Array(theirs)) => {
                for name in theirs {
                    if !mine.contains(&name) {
                        mine.push(name);
                    }
                }
            }
            (_, Some(_), _) => {}
            (_, None, value) => {
                out.insert(key, value);
            }
        }
    }
}

/// Puts the node's type on the converted keywords: one type as `type`, a list as one `anyOf`
/// branch per type (the constraints repeated in each; JSON Schema applies a keyword only to its
/// own type). `format` stays only on a single type that Gemini knows it for.
fn typed(mut out: Map<String, Value>, kind: Option<&Value>, mut branches: Vec<Value>) -> Value {
    let kinds: Vec<&str> = match kind {
        Some(Value::String(kind)) => vec![kind.as_str()],
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let format_known = |format: &str| match kinds.as_slice() {
        ["string"] => STRING_FORMATS.contains(&format),
        ["number" | "integer"] => NUMBER_FORMATS.contains(&format),
        _ => false,
    };
    if out.get("format").and_then(Value::as_str).is_some_and(|format| !format_known(format)) {
        out.remove("format");
    }
    match kinds.as_slice() {
        [] => {}
        [one] => {
            out.insert("type".into(), (*one).into());
        }
        _ if !branches.is_empty() => {
            // The schema's own union wins over a type list; a listed null still admits null.
            if kinds.contains(&"null") {
                branches.push(json!({"type": "null"}));
            }
        }
        many => {
            let mut annotations = Map::new();
            for key in ANNOTATIONS {
                if let Some(value) = out.remove(key) {
                    annotations.insert(key.into(), value);
                }
            }
            branches = many
                .iter()
                .map(|kind| {
                    let mut branch = if *kind == "null" { Map::new() } else { out.clone() };
                    branch.insert("type".into(), (*kind).into());
                    Value::Object(branch)
                })
                .collect();
            out = annotations;
        }
    }
    if !branches.is_empty() {
        out.insert("anyOf".into(), Value::Array(branches));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelErrorKind;

    fn convert(schema: Value) -> Value {
        parameters("t", &schema).expect("converted")
    }

    #[test]
    fn the_verbs_schemas_lose_only_what_gemini_refuses() {
        let read = json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
            "additionalProperties": false,
            "properties": {"address": {"type": "string", "minLength": 1},
                "format": {"type": "string", "enum": ["markdown", "json"]}, "options": {"type": "object"}},
            "required": ["address", "nowhere"]});
        assert_eq!(
            convert(read),
            json!({"type": "object",
                "properties": {"address": {"type": "string", "minLength": 1},
                    "format": {"type": "string", "enum": ["markdown", "json"]}, "options": {"type": "object"}},
                "required": ["address"]})
        );
    }

    #[test]
    fn references_are_inlined_and_recursion_is_cut() {
        let schema = json!({"type": "object",
            "$defs": {"step": {"type": "object", "description": "A step.",
                "properties": {"label": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/step"}}}}},
            "definitions": {"when": {"type": "string", "format": "date-time"}},
            "properties": {"first": {"$ref": "#/$defs/step", "description": "The first step."},
                "at": {"$ref": "#/definitions/when"}}});
        assert_eq!(
            convert(schema),
            json!({"type": "object", "properties": {
                "first": {"type": "object", "description": "The first step.", "properties": {
                    "label": {"type": "string"},
                    "children": {"type": "array", "items": {"description": "A step."}}}},
                "at": {"type": "string", "format": "date-time"}}})
        );
        let error = parameters("save", &json!({"type": "object", "properties": {"x": {"$ref": "other.json#/a"}}}))
            .expect_err("refused");
        assert_eq!(error.kind, ModelErrorKind::Unsupported);
        assert!(error.message.starts_with("Tool save has a parameter schema Gemini cannot take: $ref other.json#/a"));
        let missing = parameters("t", &json!({"properties": {"x": {"$ref": "#/$defs/none"}}}));
        assert_eq!(missing.expect_err("refused").kind, ModelErrorKind::Unsupported);
        // A reference to the root inside the root is recursion, not an error.
        let tree = convert(json!({"type": "object", "properties": {"child": {"$ref": "#"}}}));
        assert_eq!(tree, json!({"type": "object", "properties": {"child": {}}}));
    }

    #[test]
    fn consts_enums_unions_and_formats() {
        let schema = json!({"type": "object", "properties": {
            "kind": {"const": "note"},
            "level": {"type": "integer", "enum": [1, 2, 3], "format": "int32"},
            "site": {"type": "string", "format": "uri"},
            "maybe": {"type": ["string", "null"], "minLength": 1, "description": "Or nothing."},
            "either": {"type": ["string", "number"]},
            "only": {"type": ["boolean"]},
            "choice": {"oneOf": [{"type": "string"}, {"type": "integer", "minimum": 0}]},
            "both": {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                {"properties": {"b": {"type": "number"}}, "required": ["b"]}]},
            "free": true,
            "pairs": {"type": "object", "additionalProperties": {"type": "string"}, "patternProperties": {"^x": {}}},
            "tuple": {"type": "array", "prefixItems": [{"type": "string"}], "uniqueItems": true, "maxItems": 2}}});
        assert_eq!(
            convert(schema),
            json!({"type": "object", "properties": {
                "kind": {"enum": ["note"]},
                "level": {"type": "integer", "format": "int32"},
                "site": {"type": "string"},
                "maybe": {"description": "Or nothing.",
                    "anyOf": [{"type": "string", "minLength": 1}, {"type": "null"}]},
                "either": {"anyOf": [{"type": "string"}, {"type": "number"}]},
                "only": {"type": "boolean"},
                "choice": {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 0}]},
                "both": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "number"}},
                    "required": ["a", "b"]},
                "free": {},
                "pairs": {"type": "object"},
                "tuple": {"type": "array", "maxItems": 2}}})
        );
    }

    #[test]
    fn the_root_is_an_object() {
        assert_eq!(convert(json!({})), json!({"type": "object"}));
        assert_eq!(convert(json!(true)), json!({"type": "object"}));
        let error = parameters("t", &json!({"type": "string"})).expect_err("not an object");
        assert_eq!(error.kind, ModelErrorKind::Unsupported);
    }
}
