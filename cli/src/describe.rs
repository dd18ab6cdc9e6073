//! `call --list`, `call <Action> --describe` and `--describe-response`: the protocol explained
//! from the embedded schema ([`crate::schema`]), so a person with only the binary can compose any
//! action.
//!
//! Each is built as JSON first (what `--format json` and `--jq` see) and rendered as text from
//! that: the action table one line per action; a description with every field (its path, type,
//! whether it is required and the schema's description, nested types expanded) and a skeleton of
//! the required fields to fill in.

use serde_json::{Map, Value as Json, json};

use crate::schema;
use seed_agents_sdk::protocol::generated::ACTIONS;

/// Text is wrapped at this width.
const WIDTH: usize = 100;

/// The action table: one object per HTTP action.
pub fn list() -> Json {
    let rows = ACTIONS
        .iter()
        .filter(|info| info.http)
        .map(|info| {
            let description = schema::def(info.name).and_then(schema::description).unwrap_or_default();
            json!({
                "action": info.name,
                "effect": info.effect.as_str(),
                "response": info.response,
                "since": info.since,
                "description": schema::first_sentence(description),
            })
        })
        .collect();
    Json::Array(rows)
}

/// The action table as text: name, effect, the description's first sentence (cut to the width).
pub fn list_text(rows: &Json) -> String {
    let rows = rows.as_array().map(Vec::as_slice).unwrap_or_default();
    let width = rows.iter().filter_map(|row| row["action"].as_str()).map(str::len).max().unwrap_or(0);
    let mut text = String::new();
    for row in rows {
        let name = row["action"].as_str().unwrap_or_default();
        let effect = row["effect"].as_str().unwrap_or_default();
        let description = row["description"].as_str().unwrap_or_default();
        let room = WIDTH.saturating_sub(width + 9).max(20);
        let description = if description.chars().count() > room {
            format!("{}…", description.chars().take(room - 1).collect::<String>())
        } else {
            description.to_owned()
        };
        text.push_str(&format!("{name:<width$}  {effect:<5}  {description}\n"));
    }
    text.push_str("\n`seed-agents call <Action> --describe` shows an action's fields and a skeleton to fill in.");
    text
}

/// The description of the definition `name` (an action or a response); `None` when this build
/// has no such definition.
pub fn describe(name: &str) -> Option<Json> {
    let (name, def) = schema::defs().get_key_value(name)?;
    let name = name.as_str();
    let mut out = Map::new();
    let kind = def.get("x-kind").and_then(Json::as_str).unwrap_or("type");
    out.insert(kind.to_owned(), json!(name));
    if let Some(info) = ACTIONS.iter().find(|info| info.name == name) {
        out.insert("effect".into(), json!(info.effect.as_str()));
        out.insert("since".into(), json!(info.since));
        out.insert("response".into(), json!(info.response));
    }
    out.insert("description".into(), json!(schema::description(def).unwrap_or_default()));
    let mut fields = Vec::new();
    walk(def, "", &mut vec![name], None, &mut fields);
    out.insert("fields".into(), Json::Array(fields));
    if kind == "action" {
        out.insert("skeleton".into(), skeleton(def, &mut vec![name]));
    }
    Some(Json::Object(out))
}

/// The union member a field belongs to: its definition, and the tag value that selects it.
#[derive(Debug, Clone)]
struct Member {
    name: &'static str,
    when: String,
}

/// Appends the fields of object `schema` under `path`, then each one's nested fields. `stack`
/// holds the definitions being expanded (a recursive type is not expanded again); `member` names
/// the union member these fields belong to.
fn walk(
    schema: &'static Json,
    path: &str,
    stack: &mut Vec<&'static str>,
    member: Option<&Member>,
    out: &mut Vec<Json>,
) {
    let Some(properties) = schema::properties(schema) else { return };
    for (name, property) in properties.iter().filter(|(name, _)| name.as_str() != "_") {
        let at = format!("{path}.{name}");
        let resolved = schema::resolve(property);
        let description = schema::description(property).or_else(|| schema::description(resolved)).unwrap_or_default();
        let mut field = json!({
            "path": at,
            "type": schema::type_name(property),
            "required": schema::is_required(schema, name),
            "description": description,
        });
        if let Some(member) = member {
            field["member"] = json!(member.name);
            field["when"] = json!(member.when);
        }
        out.push(field);
        nested(property, &at, stack, member, out);
    }
}

/// The fields inside a field's type, when it has any: objects, array items, map values, union
/// members and alternatives.
fn nested(
    schema: &'static Json,
    path: &str,
    stack: &mut Vec<&'static str>,
    member: Option<&Member>,
    out: &mut Vec<Json>,
) {
    let named = schema::ref_name(schema);
    if let Some(name) = named {
        if stack.contains(&name) {
            return;
        }
        stack.push(name);
    }
    let resolved = schema::resolve(schema);
    if let Some((tag, members)) = schema::union(resolved) {
        for one in members {
            if !stack.contains(&one.name) {
                stack.push(one.name);
                let this = Member { name: one.name, when: format!("{path}.{tag} is \"{}\"", one.tag) };
                walk(one.schema, path, stack, Some(&this), out);
                stack.pop();
            }
        }
    } else if let Some(alternatives) = schema::alternatives(resolved) {
        for alternative in alternatives {
            nested(alternative, path, stack, member, out);
        }
    } else if schema::properties(resolved).is_some() {
        walk(resolved, path, stack, member, out);
    } else if let Some(items) = resolved.get("items") {
        nested(items, &format!("{path}[]"), stack, member, out);
    } else if let Some(values) = resolved.get("additionalProperties").filter(|values| values.is_object()) {
        nested(values, &format!("{path}.<key>"), stack, member, out);
    }
    if named.is_some() {
        stack.pop();
    }
}

/// A value of `schema` with its required fields, placeholders to fill in.
fn skeleton(schema: &'static Json, stack: &mut Vec<&'static str>) -> Json {
    let named = schema::ref_name(schema);
    if let Some(name) = named {
        if stack.contains(&name) {
            return json!({});
        }
        stack.push(name);
    }
    let resolved = schema::resolve(schema);
    let value = if let Some(leaf) = schema::leaf(resolved) {
        match leaf {
            "bytes" => json!({"$bytes": "<hex digits>"}),
            "float" => json!(0),
            _ => json!({}),
        }
    } else if let Some(value) = resolved.get("const") {
        value.clone()
    } else if let Some(values) = resolved.get("enum").and_then(Json::as_array) {
        let names: Vec<&str> = values.iter().filter_map(Json::as_str).collect();
        json!(format!("<{}>", names.join(" | ")))
    } else if let Some(first) = schema::union(resolved).and_then(|(_, members)| members.first().copied()) {
        skeleton_of_object(first.schema, stack)
    } else if let Some(first) = schema::nullable_inner(resolved).or_else(|| schema::alternatives(resolved)?.first()) {
        skeleton(first, stack)
    } else {
        match resolved.get("type").and_then(Json::as_str) {
            Some("string") => json!("<string>"),
            Some("integer" | "number") => json!(0),
            Some("boolean") => json!(false),
            Some("null") => Json::Null,
            Some("array") => match resolved.get("items") {
                Some(items) => json!([skeleton(items, stack)]),
                None => json!([]),
            },
            Some("object") if schema::properties(resolved).is_some() => skeleton_of_object(resolved, stack),
            Some("object") => match resolved.get("additionalProperties").filter(|values| values.is_object()) {
                Some(values) => json!({"<key>": skeleton(values, stack)}),
                None => json!({}),
            },
            _ => json!({}),
        }
    };
    if named.is_some() {
        stack.pop();
    }
    value
}

fn skeleton_of_object(schema: &'static Json, stack: &mut Vec<&'static str>) -> Json {
    let mut out = Map::new();
    for (name, property) in schema::properties(schema).into_iter().flatten() {
        if name != "_" && schema::is_required(schema, name) {
            out.insert(name.clone(), skeleton(property, stack));
        }
    }
    Json::Object(out)
}

/// The description as text: a header, the description, the fields, the skeleton.
pub fn describe_text(described: &Json) -> String {
    let mut text = String::new();
    if let Some(action) = described["action"].as_str() {
        text.push_str(&format!(
            "{action}: a {} action, since protocol {}; answers {}.\n\n",
            described["effect"].as_str().unwrap_or_default(),
            described["since"],
            described["response"].as_str().unwrap_or_default()
        ));
    } else if let Some(response) = described["response"].as_str() {
        text.push_str(&format!("{response}: a response.\n\n"));
    }
    text.push_str(&wrap(described["description"].as_str().unwrap_or_default(), ""));
    let fields = described["fields"].as_array().map(Vec::as_slice).unwrap_or_default();
    if fields.is_empty() {
        text.push_str("\nNo fields.\n");
    } else {
        text.push_str("\nFields (* required; a path with [] is each item of an array, <key> each key of a map):\n");
    }
    let mut member = None;
    for field in fields {
        let this_member = field["when"].as_str();
        if this_member != member {
            if let Some(when) = this_member {
                let name = field["member"].as_str().unwrap_or_default();
                text.push_str(&format!("  -- {name}, when {when}:\n"));
            }
            member = this_member;
        }
        let path = field["path"].as_str().unwrap_or_default();
        let mark = if field["required"] == true { "*" } else { "" };
        text.push_str(&format!("  {path}{mark}  {}\n", field["type"].as_str().unwrap_or_default()));
        let description = field["description"].as_str().unwrap_or_default();
        if !description.is_empty() {
            text.push_str(&wrap(description, "      "));
        }
    }
    if let Some(skeleton) = described.get("skeleton") {
        let pretty = serde_json::to_string_pretty(skeleton).unwrap_or_default();
        text.push_str("\nSkeleton of the required fields (fill in the <…>; `_` and `ts` are added when signing):\n");
        text.push_str(&pretty);
    }
    text.trim_end().to_owned()
}

/// `text` wrapped at [`WIDTH`], each line starting with `indent`.
fn wrap(text: &str, indent: &str) -> String {
    let mut out = String::new();
    let mut line = String::from(indent);
    for word in text.split_whitespace() {
        if line.len() > indent.len() && line.len() + 1 + word.len() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = String::from(indent);
        }
        if line.len() > indent.len() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if line.len() > indent.len() {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field<'a>(described: &'a Json, path: &str) -> &'a Json {
        described["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|field| field["path"] == path)
            .unwrap_or_else(|| panic!("no field {path} in {described:#}"))
    }

    #[test]
    fn an_action_is_described_with_nested_fields_and_a_skeleton() {
        let described = describe("SetModelProvider").unwrap();
        assert_eq!(described["effect"], "write");
        assert_eq!(described["response"], "SetModelProviderResponse");
        assert_eq!(field(&described, ".provider.secretRefs")["type"], "map<string>");
        assert_eq!(field(&described, ".provider.type")["required"], true);
        assert!(field(&described, ".provider.baseUrl")["description"].as_str().unwrap().contains("custom"));
        assert_eq!(described["skeleton"], json!({"name": "<string>", "provider": {"type": "<string>"}}));
        let text = describe_text(&described);
        assert!(text.starts_with("SetModelProvider: a write action"), "{text}");
        assert!(text.contains("  .provider.secretRefs  map<string>\n"), "{text}");
    }

    #[test]
    fn unions_and_arrays_are_expanded_and_recursion_stops() {
        let described = describe("MessageSession").unwrap();
        let text = field(&described, ".content[].text");
        assert_eq!(text["member"], "TextContentPart");
        assert_eq!(text["when"], ".content[].type is \"text\"");
        assert_eq!(field(&described, ".content[].blocks[].block.id")["member"], "TextContentPart");
        let agent = describe("CreateAgent").unwrap();
        field(&agent, ".definition.systemPrompt[].block.id");
        field(&agent, ".definition.systemPrompt[].children");
        assert!(agent["fields"].as_array().unwrap().len() < 200, "recursion is cut");
        let secret = describe("SetSecret").unwrap();
        assert_eq!(secret["skeleton"]["value"], json!({"$bytes": "<hex digits>"}));
        let response = describe("InvokeSessionToolResponse").unwrap();
        assert_eq!(field(&response, ".error")["type"], "string");
        assert!(response.get("skeleton").is_none());
    }

    #[test]
    fn every_action_and_response_describes() {
        for info in ACTIONS.iter().filter(|info| info.http) {
            let described = describe(info.name).unwrap();
            assert!(!describe_text(&described).is_empty());
            assert!(describe(info.response).is_some(), "{}", info.response);
        }
        let rows = list();
        assert!(rows.as_array().unwrap().iter().all(|row| !row["description"].as_str().unwrap().is_empty()));
        let text = list_text(&rows);
        assert!(text.lines().any(|line| line.starts_with("ListAgents ") && line.contains("  read   ")), "{text}");
        assert!(text.lines().all(|line| line.chars().count() <= WIDTH), "{text}");
    }
}
