//! The JSON Schema subset tool contracts may use (docs/runtime.md §4.5), and checking a call's
//! input against a contract.
//!
//! A lambda's `input` and `output` schemas must stay inside the subset providers and our checks
//! understand: `type` (a name or a list), `description`, `properties`, `required`,
//! `additionalProperties` (boolean or schema), `enum` (strings), `minLength`/`maxLength`,
//! `minimum`/`maximum`, `items`, `minItems`/`maxItems`; the root must be an object schema. The
//! subset is itself a JSON Schema (the meta-schema below), so the `jsonschema` crate checks both
//! the shape of a contract and the values against it.

use std::sync::LazyLock;

use serde_json::{Value as Json, json};

static SUBSET: LazyLock<jsonschema::Validator> = LazyLock::new(|| {
    let subset = json!({
        "$ref": "#/$defs/schema",
        "$defs": {
            "type": {"enum": ["array", "boolean", "integer", "null", "number", "object", "string"]},
            "schema": {
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "type": {"anyOf": [{"$ref": "#/$defs/type"}, {"type": "array", "items": {"$ref": "#/$defs/type"}}]},
                    "description": {"type": "string"},
                    "properties": {"type": "object", "additionalProperties": {"$ref": "#/$defs/schema"}},
                    "required": {"type": "array", "items": {"type": "string"}},
                    "additionalProperties": {"anyOf": [{"type": "boolean"}, {"$ref": "#/$defs/schema"}]},
                    "enum": {"type": "array", "items": {"type": "string"}},
                    "minLength": {"type": "integer", "minimum": 0},
                    "maxLength": {"type": "integer", "minimum": 0},
                    "minimum": {"type": "number"},
                    "maximum": {"type": "number"},
                    "items": {"$ref": "#/$defs/schema"},
                    "minItems": {"type": "integer", "minimum": 0},
                    "maxItems": {"type": "integer", "minimum": 0}
                }
            }
        }
    });
    jsonschema::validator_for(&subset).expect("the subset meta-schema is valid JSON Schema")
});

/// The problems of `schema` as a tool contract, as `<path>: <message>` lines (empty when fine).
pub(crate) fn shape_errors(schema: &Json) -> Vec<String> {
    let mut errors: Vec<String> = SUBSET
        .iter_errors(schema)
        .map(|error| format!("{}: {error}", dotted(&error.instance_path().to_string())))
        .collect();
    if errors.is_empty() && schema.get("type").is_some_and(|kind| kind != "object") {
        errors.push("$.type: the root must be type \"object\"; wrap other values in a named property".to_owned());
    }
    errors
}

/// The problems of `value` against the contract `schema`, as `<path>: <message>` lines.
pub(crate) fn value_errors(schema: &Json, value: &Json) -> Vec<String> {
    match jsonschema::validator_for(schema) {
        Ok(validator) => validator
            .iter_errors(value)
            .map(|error| format!("{}: {error}", dotted(&error.instance_path().to_string())))
            .collect(),
        Err(error) => vec![format!("$: the contract itself is not valid JSON Schema: {error}")],
    }
}

/// A JSON Pointer (`/a/0/b`) as a dotted path from `$` (`$.a[0].b`).
fn dotted(pointer: &str) -> String {
    let mut path = "$".to_owned();
    for segment in pointer.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        if !segment.is_empty() && segment.bytes().all(|byte| byte.is_ascii_digit()) {
            path.push_str(&format!("[{segment}]"));
        } else {
            path.push('.');
            path.push_str(&segment);
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contracts_inside_the_subset_pass() {
        let schema = json!({
            "type": "object",
            "description": "x",
            "additionalProperties": false,
            "properties": {
                "text": {"type": "string", "minLength": 1, "maxLength": 10},
                "n": {"type": ["integer", "null"], "minimum": 0, "maximum": 1.5},
                "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 3},
                "extra": {"type": "object", "additionalProperties": {"type": "boolean"}}
            },
            "required": ["text"]
        });
        assert_eq!(shape_errors(&schema), Vec::<String>::new());
        assert_eq!(shape_errors(&json!({})), Vec::<String>::new(), "no type: an open object");
    }

    #[test]
    fn keywords_outside_the_subset_and_non_object_roots_are_refused() {
        let errors = shape_errors(&json!({"type": "object", "properties": {"a": {"oneOf": []}}}));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].starts_with("$.properties.a: "), "{errors:?}");
        assert!(!shape_errors(&json!({"type": "object", "$ref": "#"})).is_empty());
        assert!(!shape_errors(&json!({"type": "strange"})).is_empty());
        assert!(!shape_errors(&json!([])).is_empty());
        assert_eq!(
            shape_errors(&json!({"type": "array"})),
            ["$.type: the root must be type \"object\"; wrap other values in a named property"]
        );
    }

    #[test]
    fn values_are_checked_with_dotted_paths() {
        let schema = json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {"query": {"type": "string"}, "list": {"type": "array", "items": {"type": "integer"}}},
            "required": ["query"]
        });
        assert!(value_errors(&schema, &json!({"query": "x", "list": [1]})).is_empty());
        let errors = value_errors(&schema, &json!({"query": 5, "list": [1, "two"], "other": true}));
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors.iter().any(|error| error.starts_with("$.query: ")), "{errors:?}");
        assert!(errors.iter().any(|error| error.starts_with("$.list[1]: ")), "{errors:?}");
        assert!(errors.iter().any(|error| error.starts_with("$: ") && error.contains("other")), "{errors:?}");
        assert_eq!(value_errors(&schema, &json!({})).len(), 1);
    }
}
