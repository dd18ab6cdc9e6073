//! The input check: a JSON value against a definition of the embedded schema ([`crate::schema`]),
//! before anything is signed.
//!
//! Every problem is named by its path in the input (`.provider.secretRefs`, `.content[0].type`)
//! and says what JSON was expected: an unknown key anywhere (except in the maps the schema leaves
//! open, `additionalProperties`) with the nearest known name, a missing required field, a value of
//! the wrong kind (`expected an integer, got the string "5"`), a value outside an enumeration, and
//! a byte string given as anything but `{"$bytes": "<hex>"}`.

use serde_json::Value as Json;

use crate::json::BYTES_KEY;
use crate::schema;

/// At most this many problems are reported at once.
const MAX_PROBLEMS: usize = 20;

/// The problems of `value` against the definition `name`, each `at <path>: <what>`; empty when it
/// fits.
pub fn check(value: &Json, name: &str) -> Vec<String> {
    let mut checker = Checker::default();
    match schema::def(name) {
        Some(schema) => checker.value(value, schema, &mut String::new()),
        None => checker.problems.push(format!("{name} is not in this build's schema")),
    }
    checker.problems.truncate(MAX_PROBLEMS);
    checker.problems
}

/// The known name nearest to `word`, when it is near enough to be a likely typo (a small edit
/// distance, case ignored).
pub fn nearest<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = word.to_lowercase();
    let limit = (word.chars().count() / 3).max(2);
    known
        .into_iter()
        .map(|candidate| (strsim::damerau_levenshtein(&lower, &candidate.to_lowercase()), candidate))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

#[derive(Default)]
struct Checker {
    problems: Vec<String>,
}

impl Checker {
    fn problem(&mut self, path: &str, message: impl std::fmt::Display) {
        let at = if path.is_empty() { "the top level" } else { path };
        self.problems.push(format!("at {at}: {message}"));
    }

    fn mismatch(&mut self, path: &str, expected: &str, value: &Json) {
        self.problem(path, format_args!("expected {expected}, got {}", shown(value)));
    }

    fn value(&mut self, value: &Json, schema: &'static Json, path: &mut String) {
        let schema = schema::resolve(schema);
        if let Some(leaf) = schema::leaf(schema) {
            return self.leaf(value, leaf, path);
        }
        if let Some(expected) = schema.get("const") {
            if value != expected {
                self.mismatch(path, &expected.to_string(), value);
            }
            return;
        }
        if let Some(values) = schema.get("enum").and_then(Json::as_array) {
            return self.enumeration(value, values, path);
        }
        if schema.get("x-discriminator").is_some() {
            return self.union(value, schema, path);
        }
        if let Some(alternatives) = schema::alternatives(schema) {
            return self.one_of(value, alternatives, schema, path);
        }
        match schema.get("type").and_then(Json::as_str) {
            Some("string") if !value.is_string() => self.mismatch(path, "a string", value),
            Some("boolean") if !value.is_boolean() => self.mismatch(path, "true or false", value),
            Some("null") if !value.is_null() => self.mismatch(path, "null", value),
            Some("number") if !value.is_number() => self.mismatch(path, "a number", value),
            Some("integer") => self.integer(value, schema, path),
            Some("array") => self.array(value, schema, path),
            Some("object") => self.object(value, schema, path),
            _ => {}
        }
    }

    fn leaf(&mut self, value: &Json, leaf: &str, path: &str) {
        match leaf {
            "bytes" => match value {
                Json::Object(map) if map.len() == 1 && map.contains_key(BYTES_KEY) => {
                    match map.get(BYTES_KEY).and_then(Json::as_str) {
                        Some(text) if hex::decode(text).is_ok() => {}
                        Some(_) => self.problem(path, "\"$bytes\" must hold an even number of hex digits"),
                        None => self.problem(path, "\"$bytes\" must be a string of hex digits"),
                    }
                }
                // Not echoed: a byte string is often a secret.
                Json::String(_) => self.problem(
                    path,
                    "expected bytes, written {\"$bytes\": \"<hex digits>\"} (\"hi\" is {\"$bytes\": \"6869\"}), got a string",
                ),
                other => self.mismatch(path, "bytes, written {\"$bytes\": \"<hex digits>\"}", other),
            },
            "float" if !value.is_number() => self.mismatch(path, "a number", value),
            _ => {}
        }
    }

    fn enumeration(&mut self, value: &Json, values: &[Json], path: &str) {
        if values.contains(value) {
            return;
        }
        let listed = values.iter().map(Json::to_string).collect::<Vec<_>>().join(", ");
        let hint = value
            .as_str()
            .and_then(|text| nearest(text, values.iter().filter_map(Json::as_str)))
            .map(|near| format!(" (did you mean \"{near}\"?)"))
            .unwrap_or_default();
        self.problem(path, format_args!("expected one of {listed}, got {}{hint}", shown(value)));
    }

    fn union(&mut self, value: &Json, schema: &'static Json, path: &mut String) {
        let Some((tag, members)) = schema::union(schema) else { return };
        let tags = || members.iter().map(|member| format!("\"{}\"", member.tag)).collect::<Vec<_>>().join(", ");
        let Some(map) = value.as_object() else {
            return self.mismatch(path, &format!("an object with \"{tag}\" ({})", tags()), value);
        };
        let Some(given) = map.get(tag) else {
            return self.problem(path, format_args!("missing \"{tag}\": one of {}", tags()));
        };
        match members.iter().find(|member| given.as_str() == Some(member.tag)) {
            Some(member) => self.value(value, member.schema, path),
            None if schema.get("x-open").and_then(Json::as_bool) == Some(true) => {}
            None => {
                let hint = given
                    .as_str()
                    .and_then(|text| nearest(text, members.iter().map(|member| member.tag)))
                    .map(|near| format!(" (did you mean \"{near}\"?)"))
                    .unwrap_or_default();
                let len = path.len();
                path.push('.');
                path.push_str(tag);
                self.problem(path, format_args!("expected one of {}, got {}{hint}", tags(), shown(given)));
                path.truncate(len);
            }
        }
    }

    /// An undiscriminated `oneOf` (`string` or a list of blocks, a value or null): the value fits
    /// one alternative; when it fits none, the problems of the one of its JSON kind, if one is.
    fn one_of(&mut self, value: &Json, alternatives: &'static [Json], schema: &Json, path: &mut String) {
        let mut of_its_kind = Vec::new();
        for alternative in alternatives {
            let mut attempt = Checker::default();
            attempt.value(value, alternative, path);
            if attempt.problems.is_empty() {
                return;
            }
            if same_kind(value, alternative) {
                of_its_kind.push(attempt.problems);
            }
        }
        match <[Vec<String>; 1]>::try_from(of_its_kind) {
            Ok([problems]) => self.problems.extend(problems),
            Err(_) => self.mismatch(path, &expected(schema), value),
        }
    }

    fn integer(&mut self, value: &Json, schema: &Json, path: &str) {
        let Some(number) = value.as_i64().map(i128::from).or_else(|| value.as_u64().map(i128::from)) else {
            return self.mismatch(path, "an integer", value);
        };
        if let Some(minimum) = schema.get("minimum").and_then(Json::as_i64)
            && number < i128::from(minimum)
        {
            self.problem(path, format_args!("expected an integer of at least {minimum}, got {number}"));
        }
    }

    fn array(&mut self, value: &Json, schema: &'static Json, path: &mut String) {
        let Some(items) = value.as_array() else {
            return self.mismatch(path, "an array", value);
        };
        let Some(item_schema) = schema.get("items") else { return };
        for (index, item) in items.iter().enumerate() {
            let len = path.len();
            path.push_str(&format!("[{index}]"));
            self.value(item, item_schema, path);
            path.truncate(len);
        }
    }

    fn object(&mut self, value: &Json, schema: &'static Json, path: &mut String) {
        let map = match value {
            Json::Object(map) if !is_bytes(value) => map,
            other => return self.mismatch(path, "an object", other),
        };
        let properties = schema::properties(schema);
        let extra = schema.get("additionalProperties");
        for (key, item) in map {
            let len = path.len();
            path.push('.');
            path.push_str(key);
            match (properties.and_then(|props| props.get(key)), extra) {
                (Some(property), _) => self.value(item, property, path),
                (None, Some(values)) if values.is_object() => self.value(item, values, path),
                (None, Some(Json::Bool(true))) => {}
                (None, _) if properties.is_none() => {}
                (None, _) => {
                    let known = properties.into_iter().flat_map(|props| props.keys().map(String::as_str));
                    let message = match nearest(key, known.clone().filter(|name| *name != "_")) {
                        Some(near) => format!("unknown field (did you mean \"{near}\"?)"),
                        None => format!(
                            "unknown field; known here: {}",
                            known.filter(|name| *name != "_").collect::<Vec<_>>().join(", ")
                        ),
                    };
                    self.problem(path, message);
                }
            }
            path.truncate(len);
        }
        for required in schema.get("required").and_then(Json::as_array).into_iter().flatten() {
            if let Some(name) = required.as_str().filter(|name| !map.contains_key(*name)) {
                let kind = properties.and_then(|props| props.get(name)).map(schema::type_name).unwrap_or_default();
                self.problem(path, format_args!("missing the required field \"{name}\" ({kind})"));
            }
        }
    }
}

fn is_bytes(value: &Json) -> bool {
    value.as_object().is_some_and(|map| map.len() == 1 && map.contains_key(BYTES_KEY))
}

/// Whether `value` has the JSON kind `schema` asks for (without looking inside).
fn same_kind(value: &Json, schema: &'static Json) -> bool {
    let schema = schema::resolve(schema);
    if let Some(leaf) = schema::leaf(schema) {
        return match leaf {
            "bytes" => is_bytes(value),
            "float" => value.is_number(),
            _ => true,
        };
    }
    if schema.get("x-discriminator").is_some() {
        return value.is_object() && !is_bytes(value);
    }
    if let Some(expected) = schema.get("const") {
        return std::mem::discriminant(expected) == std::mem::discriminant(value);
    }
    if let Some(values) = schema.get("enum").and_then(Json::as_array) {
        return values.iter().any(|item| std::mem::discriminant(item) == std::mem::discriminant(value));
    }
    match schema.get("type").and_then(Json::as_str) {
        Some("string") => value.is_string(),
        Some("boolean") => value.is_boolean(),
        Some("null") => value.is_null(),
        Some("number") => value.is_number(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("array") => value.is_array(),
        Some("object") => value.is_object() && !is_bytes(value),
        _ => false,
    }
}

/// What a schema expects, in words (`a string or an array`).
fn expected(schema: &Json) -> String {
    let words = |schema: &Json| -> String {
        let resolved = match schema::ref_name(schema).and_then(schema::def) {
            Some(target) => target,
            None => schema,
        };
        if let Some(leaf) = schema::leaf(resolved) {
            return match leaf {
                "bytes" => "bytes ({\"$bytes\": \"<hex digits>\"})".to_owned(),
                "float" => "a number".to_owned(),
                _ => "any value".to_owned(),
            };
        }
        if let Some(value) = resolved.get("const") {
            return value.to_string();
        }
        match resolved.get("type").and_then(Json::as_str) {
            Some("string") if resolved.get("enum").is_some() => format!("one of {}", schema::type_name(resolved)),
            Some("string") => "a string".to_owned(),
            Some("integer") => "an integer".to_owned(),
            Some("number") => "a number".to_owned(),
            Some("boolean") => "true or false".to_owned(),
            Some("null") => "null".to_owned(),
            Some("array") => format!("an array of {}", schema::type_name(resolved.get("items").unwrap_or(&Json::Null))),
            _ => match schema::ref_name(schema) {
                Some(name) => format!("an object ({name})"),
                None => "an object".to_owned(),
            },
        }
    };
    schema::alternatives(schema)
        .map_or_else(|| words(schema), |alternatives| alternatives.iter().map(words).collect::<Vec<_>>().join(" or "))
}

/// A JSON value in words, for "got …" (strings and numbers quoted, short).
fn shown(value: &Json) -> String {
    match value {
        Json::Null => "null".to_owned(),
        Json::Bool(b) => b.to_string(),
        Json::Number(n) => format!("the number {n}"),
        Json::String(text) if text.chars().count() > 40 => {
            format!("the string \"{}…\"", text.chars().take(40).collect::<String>())
        }
        Json::String(text) => format!("the string {}", Json::from(text.as_str())),
        Json::Array(_) => "an array".to_owned(),
        Json::Object(_) if is_bytes(value) => "bytes".to_owned(),
        Json::Object(_) => "an object".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(name: &str, value: Json) -> Vec<String> {
        let mut value = value;
        value["_"] = json!(name);
        check(&value, name)
    }

    #[test]
    fn a_nested_typo_is_named_with_its_path_and_the_nearest_name() {
        let found = problems(
            "SetModelProvider",
            json!({"name": "main", "provider": {"type": "openai", "secretRef": {"apiKey": "k"}}}),
        );
        assert_eq!(found, ["at .provider.secretRef: unknown field (did you mean \"secretRefs\"?)"]);
        let far = problems("GetAgent", json!({"agentId": "a", "zzzzzzzz": 1}));
        assert_eq!(far, ["at .zzzzzzzz: unknown field; known here: agentId"]);
    }

    #[test]
    fn open_maps_take_any_key() {
        let found = problems(
            "SetModelProvider",
            json!({"name": "m", "provider": {"type": "openai", "secretRefs": {"anything": "k"}, "modelDefaults": {"temperature": 0.2}}}),
        );
        assert!(found.is_empty(), "{found:?}");
        let wrong = problems(
            "SetModelProvider",
            json!({"name": "m", "provider": {"type": "openai", "secretRefs": {"apiKey": 5}}}),
        );
        assert_eq!(wrong, ["at .provider.secretRefs.apiKey: expected a string, got the number 5"]);
    }

    #[test]
    fn type_errors_say_what_json_was_expected() {
        let found = problems("ListSessions", json!({"limit": "5"}));
        assert!(found.contains(&"at .limit: expected an integer, got the string \"5\"".to_owned()), "{found:?}");
        let secret = problems("SetSecret", json!({"name": "k", "value": "sk-secret"}));
        assert_eq!(secret.len(), 1, "{secret:?}");
        assert!(secret[0].starts_with("at .value: expected bytes, written {\"$bytes\""), "{secret:?}");
        assert!(!secret[0].contains("sk-secret"), "a secret is not echoed");
        let missing = problems("GetAgent", json!({}));
        assert_eq!(missing, ["at the top level: missing the required field \"agentId\" (string)"]);
        let verb = problems("InvokeSessionTool", json!({"sessionId": "s", "verb": "rread", "input": {}}));
        assert_eq!(
            verb,
            [
                "at .verb: expected one of \"call\", \"read\", \"write\", got the string \"rread\" (did you mean \"read\"?)"
            ]
        );
    }

    #[test]
    fn unions_are_checked_by_their_tag_and_alternatives_by_kind() {
        let target = problems("BeginFileUpload", json!({"target": {"kind": "memroy"}, "size": 1}));
        assert!(
            target.iter().any(|p| p.contains("at .target.kind") && p.contains("did you mean \"memory\"")),
            "{target:?}"
        );
        let prompt = problems(
            "CreateAgent",
            json!({"definition": {"name": "n", "model": "m", "modelProvider": "p", "systemPrompt": [{"block": {"id": "b", "type": "Paragraph", "text": "hi"}, "childern": []}]}}),
        );
        assert_eq!(prompt, ["at .definition.systemPrompt[0].childern: unknown field (did you mean \"children\"?)"]);
        let neither = problems(
            "CreateAgent",
            json!({"definition": {"name": "n", "model": "m", "modelProvider": "p", "systemPrompt": 5}}),
        );
        assert_eq!(neither.len(), 1, "{neither:?}");
        assert!(
            neither[0].contains("expected an array of AgentPromptBlock or a string, got the number 5"),
            "{neither:?}"
        );
    }

    #[test]
    fn every_action_accepts_what_its_schema_says_and_nearest_stays_near() {
        assert_eq!(nearest("agentid", ["agentId", "sessionId"]), Some("agentId"));
        assert_eq!(nearest("ListAgent", ["ListAgents", "GetAgent"]), Some("ListAgents"));
        assert_eq!(nearest("xyz", ["ListAgents"]), None);
    }
}
