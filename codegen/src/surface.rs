//! `snapshots/surface.json`: our normalised listing of the protocol surface, for review diffs and
//! the breaking-change classifier.
//!
//! Every action (with its response, transport and effect), response and named type with its
//! fields (type, whether required, `since`), or its union members, or its alias. Keys are sorted;
//! types are written in one short notation: `string`, `integer`, `float`, `boolean`, `bytes`,
//! `value` (open IPLD), `Name`, `T[]`, `map<T>`, `"a" | "b"`, `T | null`, `{a: T; b?: U}`.

use std::collections::BTreeMap;

use serde_json::{Value as Json, json};

use crate::model::{self, Def, Kind, Model};

/// Renders the surface listing.
pub fn render(model: &Model) -> String {
    let mut actions = BTreeMap::new();
    let mut responses = BTreeMap::new();
    let mut types = BTreeMap::new();
    for def in model.defs.values() {
        let mut entry = describe(def);
        match def.kind() {
            Kind::Action => {
                entry.insert("response".into(), json!(def.response().unwrap_or_default()));
                entry.insert("transport".into(), json!(if def.http() { "http" } else { "websocket" }));
                if let Some(effect) = def.effect() {
                    entry.insert("effect".into(), json!(effect.as_str()));
                }
                actions.insert(def.name.clone(), entry);
            }
            Kind::Response => {
                responses.insert(def.name.clone(), entry);
            }
            Kind::Type => {
                types.insert(def.name.clone(), entry);
            }
        }
    }
    let surface = json!({
        "format": 1,
        "protocol": model.protocol,
        "minClientProtocol": model.min_client_protocol,
        "actions": actions,
        "responses": responses,
        "types": types,
    });
    let mut text = serde_json::to_string_pretty(&surface).unwrap_or_default();
    text.push('\n');
    text
}

fn describe(def: &Def) -> BTreeMap<String, Json> {
    let mut entry = BTreeMap::new();
    entry.insert("since".to_owned(), json!(def.since()));
    if let Some(union) = def.union() {
        entry.insert(
            "union".to_owned(),
            json!({
                "tag": union.tag,
                "open": union.open,
                "members": union.members,
            }),
        );
    } else if def.schema.get("properties").is_some() {
        entry.insert("fields".to_owned(), json!(fields(&def.schema, def.since())));
        if let Some(extra) = def.schema.get("additionalProperties").filter(|v| v.is_object()) {
            entry.insert("extraFields".to_owned(), json!(type_expr(extra)));
        }
    } else {
        entry.insert("alias".to_owned(), json!(type_expr(&def.schema)));
    }
    entry
}

fn fields(schema: &Json, since: u32) -> BTreeMap<String, Json> {
    let required = model::required(schema);
    model::properties(schema)
        .into_iter()
        .map(|(name, prop)| {
            let prop_since = prop.get("x-since").map(|_| model::since_of(prop)).unwrap_or(since);
            let entry = json!({
                "type": type_expr(prop),
                "required": required.contains(name),
                "since": prop_since,
            });
            (name.to_owned(), entry)
        })
        .collect()
}

/// A schema in the short notation.
pub fn type_expr(schema: &Json) -> String {
    if let Some(name) = model::ref_name(schema) {
        return name.to_owned();
    }
    if let Some(path) = schema.get("x-rust-type").and_then(|x| x.get("path")).and_then(Json::as_str) {
        return match path.rsplit("::").next() {
            Some("Bytes") => "bytes".into(),
            Some("Value") => "value".into(),
            Some("Float") => "float".into(),
            Some(other) => other.to_owned(),
            None => path.to_owned(),
        };
    }
    if let Some(value) = schema.get("const") {
        return value.to_string();
    }
    if let Some(inner) = model::nullable_inner(schema) {
        return format!("{} | null", type_expr(inner));
    }
    if let Some(alts) = schema.get("oneOf").or_else(|| schema.get("anyOf")).and_then(Json::as_array) {
        return alts.iter().map(type_expr).collect::<Vec<_>>().join(" | ");
    }
    if let Some(values) = schema.get("enum").and_then(Json::as_array) {
        return values.iter().map(Json::to_string).collect::<Vec<_>>().join(" | ");
    }
    match schema.get("type").and_then(Json::as_str) {
        Some("string") => match schema.get("pattern").and_then(Json::as_str) {
            Some(pattern) => format!("string /{pattern}/"),
            None => "string".into(),
        },
        Some("integer") => "integer".into(),
        Some("number") => "float".into(),
        Some("boolean") => "boolean".into(),
        Some("null") => "null".into(),
        Some("array") => {
            let items = schema.get("items").map(type_expr).unwrap_or_else(|| "value".into());
            if items.contains(' ') { format!("({items})[]") } else { format!("{items}[]") }
        }
        Some("object") => {
            let props = model::properties(schema);
            let extra = schema.get("additionalProperties").filter(|v| v.is_object()).map(type_expr);
            if props.is_empty() {
                return format!("map<{}>", extra.unwrap_or_else(|| "value".into()));
            }
            let required = model::required(schema);
            let mut parts: Vec<String> = props
                .into_iter()
                .map(|(name, prop)| {
                    let mark = if required.contains(name) { "" } else { "?" };
                    format!("{name}{mark}: {}", type_expr(prop))
                })
                .collect();
            parts.sort();
            if let Some(extra) = extra {
                parts.push(format!("[key]: {extra}"));
            }
            format!("{{{}}}", parts.join("; "))
        }
        _ => "value".into(),
    }
}
