//! Loads the schema files, merges their `$defs` into one namespace and reads our `x-` keywords.
//!
//! Every file in `schema/json/` is a JSON Schema (draft 2020-12) document whose `$defs` hold named
//! types. References name a file and a definition (`common.json#/$defs/Bytes`) or a definition of
//! the same file (`#/$defs/AgentInfo`). Definition names are unique across files, so merged they
//! become `#/$defs/<Name>` of one root schema.
//!
//! Our keywords:
//! - `x-kind`: `action` or `response` (absent: a named type).
//! - `x-response`: on an action, the name of its response.
//! - `x-since`: the protocol version a definition (or a property) appeared in; default 1.
//! - `x-transport`: `websocket` on actions that are not accepted over HTTP.
//! - `x-effect`: on every action, required: `read` (changes no state) or `write` (anything else).
//! - `x-discriminator`: on a `oneOf` of `$ref`s, the property whose `const` tells members apart.
//! - `x-open`: on such a union, members not listed are kept as open values instead of refused.
//! - `x-rust-type`: typify's keyword, naming our hand-written leaf types.
//! - `x-protocol`, `x-min-client-protocol`: on the envelope file, the version constants.
//! - `x-ids`: on a file (`common.json`), the typed ids: each entry names a newtype (`AgentId`) with
//!   its `description` and, optionally, a `format` its checked `parse` enforces (`principal`: a
//!   canonical base58btc principal string; `sha256-hex`: 64 lowercase hex digits).
//! - `x-id`: on a string property, the `x-ids` entry it holds (its Rust type; the wire stays a
//!   string), or `false` for an id that stays a plain string. Every property named `id` or ending
//!   in `Id` states one or the other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value as Json;

use crate::Error;

/// The merged schema.
#[derive(Debug)]
pub struct Model {
    /// Every definition by name, references rewritten to `#/$defs/<Name>`.
    pub defs: BTreeMap<String, Def>,
    /// `AGENTS_PROTOCOL_VERSION` as the schema states it.
    pub protocol: u32,
    /// `MIN_CLIENT_PROTOCOL` as the schema states it.
    pub min_client_protocol: u32,
    /// Every schema file by name (`agents.json`), with its `title` (empty when it has none).
    pub files: BTreeMap<String, String>,
    /// The typed ids (`x-ids`), by type name.
    pub ids: BTreeMap<String, IdType>,
}

/// One typed id of the `x-ids` table: a transparent newtype over the wire's string.
#[derive(Debug, Clone)]
pub struct IdType {
    /// The Rust type name (`AgentId`).
    pub name: String,
    /// The file whose `x-ids` declares it.
    pub file: String,
    /// What the id names (its rustdoc).
    pub description: String,
    /// The format its checked `parse` enforces, if any.
    pub format: Option<IdFormat>,
}

/// A format an `x-ids` entry may name (`format`), checked by the type's `parse`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdFormat {
    /// `principal`: the canonical base58btc string of a principal (`z…`).
    Principal,
    /// `sha256-hex`: a SHA-256 digest as 64 lowercase hex digits.
    Sha256Hex,
}

impl IdFormat {
    /// The schema's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            IdFormat::Principal => "principal",
            IdFormat::Sha256Hex => "sha256-hex",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [IdFormat::Principal, IdFormat::Sha256Hex].into_iter().find(|format| format.as_str() == text)
    }
}

/// One named definition.
#[derive(Debug, Clone)]
pub struct Def {
    /// The definition name, also its Rust type name.
    pub name: String,
    /// The file it lives in (`agents.json`).
    pub file: String,
    /// The schema, references normalised.
    pub schema: Json,
}

/// What an action does to the server's state (`x-effect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// `read`: changes no state.
    Read,
    /// `write`: changes state, starts work or publishes.
    Write,
}

impl Effect {
    /// The schema's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Read => "read",
            Effect::Write => "write",
        }
    }
}

/// What a definition is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A signed action.
    Action,
    /// A success or error response.
    Response,
    /// Any other named type.
    Type,
}

impl Def {
    /// Action, response or type.
    pub fn kind(&self) -> Kind {
        match self.schema.get("x-kind").and_then(Json::as_str) {
            Some("action") => Kind::Action,
            Some("response") => Kind::Response,
            _ => Kind::Type,
        }
    }

    /// The protocol version it appeared in.
    pub fn since(&self) -> u32 {
        since_of(&self.schema)
    }

    /// For an action, its response name.
    pub fn response(&self) -> Option<&str> {
        self.schema.get("x-response").and_then(Json::as_str)
    }

    /// For an action, its `x-effect`; `None` when absent or neither `read` nor `write` (which
    /// [`Model::load`] refuses, so every action of a loaded model has one).
    pub fn effect(&self) -> Option<Effect> {
        match self.schema.get("x-effect").and_then(Json::as_str) {
            Some("read") => Some(Effect::Read),
            Some("write") => Some(Effect::Write),
            _ => None,
        }
    }

    /// Whether the action travels over HTTP.
    pub fn http(&self) -> bool {
        self.schema.get("x-transport").and_then(Json::as_str) != Some("websocket")
    }

    /// The description, if any.
    pub fn description(&self) -> Option<&str> {
        self.schema.get("description").and_then(Json::as_str)
    }

    /// For an object, its properties in file order.
    pub fn properties(&self) -> Vec<(&str, &Json)> {
        properties(&self.schema)
    }

    /// For an object, its required property names.
    pub fn required(&self) -> BTreeSet<&str> {
        required(&self.schema)
    }

    /// For a discriminated union, the tag property and member names.
    pub fn union(&self) -> Option<Union<'_>> {
        let tag = self.schema.get("x-discriminator")?.as_str()?;
        let members = self
            .schema
            .get("oneOf")?
            .as_array()?
            .iter()
            .filter_map(|member| ref_name(member).map(str::to_owned))
            .collect();
        let open = self.schema.get("x-open").and_then(Json::as_bool).unwrap_or(false);
        Some(Union { tag, members, open })
    }

    /// The `const` value of property `tag`, for a member of a discriminated union.
    pub fn tag_value(&self, tag: &str) -> Option<&str> {
        self.schema.get("properties")?.get(tag)?.get("const")?.as_str()
    }
}

/// A discriminated union.
#[derive(Debug, Clone)]
pub struct Union<'a> {
    /// The property that tells members apart (`_`, `type`, `kind`, `action`).
    pub tag: &'a str,
    /// Member definition names.
    pub members: Vec<String>,
    /// Whether unknown members are kept as open values.
    pub open: bool,
}

/// The protocol version a schema (definition or property) states, 1 when it says nothing.
pub fn since_of(schema: &Json) -> u32 {
    schema.get("x-since").and_then(Json::as_u64).map(|v| v as u32).unwrap_or(1)
}

/// Properties of an object schema in file order.
pub fn properties(schema: &Json) -> Vec<(&str, &Json)> {
    schema
        .get("properties")
        .and_then(Json::as_object)
        .map(|props| props.iter().map(|(k, v)| (k.as_str(), v)).collect())
        .unwrap_or_default()
}

/// Required property names of an object schema.
pub fn required(schema: &Json) -> BTreeSet<&str> {
    schema
        .get("required")
        .and_then(Json::as_array)
        .map(|names| names.iter().filter_map(Json::as_str).collect())
        .unwrap_or_default()
}

/// What a property's `x-id` says: `Some(Some(name))` for a typed id, `Some(None)` for `false` (a
/// plain string on purpose), `None` when it has none (or not one of those).
pub fn id_of(schema: &Json) -> Option<Option<&str>> {
    match schema.get("x-id")? {
        Json::String(name) => Some(Some(name)),
        Json::Bool(false) => Some(None),
        _ => None,
    }
}

/// Whether a property name asks for an `x-id`: `id`, or ending in `Id` (`agentId`).
pub fn is_id_name(name: &str) -> bool {
    name == "id" || name.ends_with("Id")
}

/// Calls `f` with every property below `schema` (nested objects, array items, map values and union
/// alternatives included) as `(path, name, schema)`, the path `Def.field.sub`.
pub fn walk_properties<'a>(path: &str, schema: &'a Json, f: &mut impl FnMut(&str, &'a str, &'a Json)) {
    if let Some(props) = schema.get("properties").and_then(Json::as_object) {
        for (name, prop) in props {
            let at = format!("{path}.{name}");
            f(&at, name, prop);
            walk_properties(&at, prop, f);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(inner) = schema.get(key).filter(|inner| inner.is_object()) {
            walk_properties(path, inner, f);
        }
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        for member in schema.get(key).and_then(Json::as_array).into_iter().flatten() {
            walk_properties(path, member, f);
        }
    }
}

/// Whether a schema is a string (or a nullable one) and nothing narrower: what an `x-id` may type.
fn is_plain_string(schema: &Json) -> bool {
    let schema = nullable_inner(schema).unwrap_or(schema);
    schema.get("type").and_then(Json::as_str) == Some("string")
        && schema.get("enum").is_none()
        && schema.get("const").is_none()
        && schema.get("$ref").is_none()
}

/// The `x-ids` table of one file.
fn read_ids(file: &str, table: &Json, ids: &mut BTreeMap<String, IdType>) -> Result<(), Error> {
    let table = table.as_object().ok_or_else(|| Error::Schema(format!("{file}: x-ids is not an object")))?;
    for (name, entry) in table {
        let problem = |what: &str| Error::Schema(format!("{file}: x-ids {name}: {what}"));
        let valid = syn::parse_str::<syn::Ident>(name).is_ok()
            && name.ends_with("Id")
            && name.starts_with(|c: char| c.is_ascii_uppercase());
        if !valid {
            return Err(problem("the name must be a Rust type name ending in `Id`"));
        }
        let entry = entry.as_object().ok_or_else(|| problem("not an object"))?;
        if let Some(key) = entry.keys().find(|key| !["description", "format"].contains(&key.as_str())) {
            return Err(problem(&format!("unknown key {key:?} (only description and format)")));
        }
        let description = entry
            .get("description")
            .and_then(Json::as_str)
            .filter(|text| !text.trim().is_empty())
            .ok_or_else(|| problem("needs a description (its rustdoc)"))?;
        let format = match entry.get("format") {
            None => None,
            Some(Json::String(format)) => Some(
                IdFormat::parse(format)
                    .ok_or_else(|| problem(&format!("unknown format {format:?} (known: principal, sha256-hex)")))?,
            ),
            Some(other) => return Err(problem(&format!("format {other} is not a string"))),
        };
        let id = IdType { name: name.clone(), file: file.to_owned(), description: description.to_owned(), format };
        if let Some(previous) = ids.insert(name.clone(), id) {
            return Err(problem(&format!("also declared in {}", previous.file)));
        }
    }
    Ok(())
}

/// The definition a `{"$ref": "#/$defs/X"}` schema names.
pub fn ref_name(schema: &Json) -> Option<&str> {
    schema.get("$ref")?.as_str()?.strip_prefix("#/$defs/")
}

/// For a property that may be null (`oneOf`/`anyOf` of a schema and `{"type": "null"}`), the
/// non-null schema.
pub fn nullable_inner(schema: &Json) -> Option<&Json> {
    let alts = schema.get("oneOf").or_else(|| schema.get("anyOf"))?.as_array()?;
    if alts.len() != 2 {
        return None;
    }
    let is_null = |s: &Json| s.get("type").and_then(Json::as_str) == Some("null");
    match (is_null(&alts[0]), is_null(&alts[1])) {
        (false, true) => Some(&alts[0]),
        (true, false) => Some(&alts[1]),
        _ => None,
    }
}

impl Model {
    /// Loads every `*.json` file of `dir`.
    pub fn load(dir: &Path) -> Result<Model, Error> {
        Model::from_documents(read_documents(dir)?)
    }

    /// Builds the model from parsed schema files, each with its file name, in file-name order.
    pub fn from_documents(documents: Vec<(String, Json)>) -> Result<Model, Error> {
        let mut defs = BTreeMap::new();
        let mut protocol = None;
        let mut min_client = None;
        let mut files = BTreeMap::new();
        let mut ids = BTreeMap::new();
        for (file, doc) in documents {
            if let Some(table) = doc.get("x-ids") {
                read_ids(&file, table, &mut ids)?;
            }
            files.insert(file.clone(), doc.get("title").and_then(Json::as_str).unwrap_or_default().to_owned());
            if let Some(v) = doc.get("x-protocol").and_then(Json::as_u64) {
                protocol = Some(v as u32);
            }
            if let Some(v) = doc.get("x-min-client-protocol").and_then(Json::as_u64) {
                min_client = Some(v as u32);
            }
            let Some(file_defs) = doc.get("$defs").and_then(Json::as_object) else {
                return Err(Error::Schema(format!("{file}: no $defs")));
            };
            for (name, schema) in file_defs {
                let mut schema = schema.clone();
                normalize_refs(&mut schema, &file)?;
                let def = Def { name: name.clone(), file: file.clone(), schema };
                if let Some(previous) = defs.insert(name.clone(), def) {
                    return Err(Error::Schema(format!("{name} is defined in both {} and {file}", previous.file)));
                }
            }
        }
        let model = Model {
            defs,
            protocol: protocol.ok_or_else(|| Error::Schema("no file states x-protocol".into()))?,
            min_client_protocol: min_client
                .ok_or_else(|| Error::Schema("no file states x-min-client-protocol".into()))?,
            files,
            ids,
        };
        model.check()?;
        Ok(model)
    }

    /// Definitions of one kind, by name.
    pub fn of_kind(&self, kind: Kind) -> impl Iterator<Item = &Def> {
        self.defs.values().filter(move |def| def.kind() == kind)
    }

    /// Consistency checks a schema author can get wrong.
    fn check(&self) -> Result<(), Error> {
        let mut problems = Vec::new();
        for def in self.defs.values() {
            walk_refs(&def.schema, &mut |target| {
                if !self.defs.contains_key(target) {
                    problems.push(format!("{} refers to missing {target}", def.name));
                }
            });
            if def.kind() == Kind::Action {
                if def.effect().is_none() {
                    let found = match def.schema.get("x-effect") {
                        None => "none".to_owned(),
                        Some(value) => value.to_string(),
                    };
                    problems.push(format!(
                        "{}: every action needs x-effect \"read\" (changes no state) or \"write\"; found {found}",
                        def.name
                    ));
                }
                match def.response() {
                    Some(response) if self.defs.get(response).is_some_and(|r| r.kind() == Kind::Response) => {}
                    Some(response) if !def.http() && response.is_empty() => {}
                    Some(response) => problems.push(format!("{}: x-response {response} is not a response", def.name)),
                    None if !def.http() => {}
                    None => problems.push(format!("{}: action without x-response", def.name)),
                }
            }
            if matches!(def.kind(), Kind::Action | Kind::Response) && def.tag_value("_") != Some(def.name.as_str()) {
                problems.push(format!("{}: `_` must be const \"{}\"", def.name, def.name));
            }
            if let Some(union) = def.union() {
                for member in &union.members {
                    match self.defs.get(member) {
                        Some(m) if m.tag_value(union.tag).is_some() => {}
                        _ => problems.push(format!("{}: member {member} has no const `{}`", def.name, union.tag)),
                    }
                }
            }
        }
        self.check_ids(&mut problems);
        for (union_name, kind) in [("AgentAction", Kind::Action), ("AgentResponse", Kind::Response)] {
            let listed: BTreeSet<String> = self
                .defs
                .get(union_name)
                .and_then(Def::union)
                .map(|u| u.members.into_iter().collect())
                .unwrap_or_default();
            for def in self.of_kind(kind.clone()) {
                if !listed.contains(&def.name) {
                    problems.push(format!("{} is not listed in {union_name}", def.name));
                }
            }
        }
        if problems.is_empty() { Ok(()) } else { Err(Error::Schema(problems.join("\n"))) }
    }
}

impl Model {
    /// Typed ids: every id-named property states its `x-id`, every `x-id` names an `x-ids` entry
    /// and types a plain string, every entry is used, and no entry shares a definition's name.
    fn check_ids(&self, problems: &mut Vec<String>) {
        let mut used = BTreeSet::new();
        for def in self.defs.values() {
            if def.schema.get("x-id").is_some() {
                problems.push(format!("{}: x-id belongs on a property, not on a definition", def.name));
            }
            walk_properties(&def.name, &def.schema, &mut |path, name, prop| match prop.get("x-id") {
                None if is_id_name(name) => problems.push(format!(
                    "{path}: an id property needs \"x-id\": the x-ids type it holds, or false to keep a plain string"
                )),
                None => {}
                Some(_) => match id_of(prop) {
                    None => problems.push(format!("{path}: x-id must be an x-ids type name or false")),
                    Some(None) => {}
                    Some(Some(id)) => {
                        used.insert(id.to_owned());
                        if !self.ids.contains_key(id) {
                            problems.push(format!("{path}: x-id {id} is not an entry of x-ids"));
                        }
                        if !is_plain_string(prop) {
                            problems.push(format!("{path}: x-id {id} types a string property, and this is not one"));
                        }
                    }
                },
            });
        }
        for id in self.ids.values() {
            if self.defs.contains_key(&id.name) {
                problems.push(format!("x-ids {} has the name of a definition", id.name));
            }
            if !used.contains(&id.name) {
                problems.push(format!("x-ids {} ({}): no property holds it (x-id)", id.name, id.file));
            }
        }
    }
}

/// Every `*.json` file of `dir`, parsed, with its file name, sorted by name.
pub fn read_documents(dir: &Path) -> Result<Vec<(String, Json)>, Error> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| Error::Io(dir.display().to_string(), e))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    let mut documents = Vec::with_capacity(files.len());
    for path in files {
        let file = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        let text = std::fs::read_to_string(&path).map_err(|e| Error::Io(path.display().to_string(), e))?;
        let doc: Json = serde_json::from_str(&text).map_err(|e| Error::Schema(format!("{file}: {e}")))?;
        documents.push((file, doc));
    }
    Ok(documents)
}

fn normalize_refs(schema: &mut Json, file: &str) -> Result<(), Error> {
    match schema {
        Json::Object(map) => {
            if let Some(Json::String(target)) = map.get_mut("$ref") {
                let (ref_file, pointer) = target
                    .split_once('#')
                    .ok_or_else(|| Error::Schema(format!("{file}: reference {target} has no #/$defs/ pointer")))?;
                let name = pointer
                    .strip_prefix("/$defs/")
                    .ok_or_else(|| Error::Schema(format!("{file}: reference {target} is not to $defs")))?;
                if !ref_file.is_empty() && !ref_file.ends_with(".json") {
                    return Err(Error::Schema(format!("{file}: reference {target} names no .json file")));
                }
                *target = format!("#/$defs/{name}");
            }
            for value in map.values_mut() {
                normalize_refs(value, file)?;
            }
        }
        Json::Array(items) => {
            for item in items {
                normalize_refs(item, file)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Calls `f` with every definition name a schema refers to.
pub fn walk_refs<'a>(schema: &'a Json, f: &mut impl FnMut(&'a str)) {
    match schema {
        Json::Object(map) => {
            if let Some(name) = ref_name(schema) {
                f(name);
            }
            for value in map.values() {
                walk_refs(value, f);
            }
        }
        Json::Array(items) => items.iter().for_each(|item| walk_refs(item, f)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn documents() -> Vec<(String, Json)> {
        read_documents(&crate::workspace_root().join("schema/json")).expect("schema files")
    }

    /// The `$defs` entry `name`, wherever it lives.
    fn definition<'a>(documents: &'a mut [(String, Json)], name: &str) -> &'a mut serde_json::Map<String, Json> {
        documents
            .iter_mut()
            .find_map(|(_, doc)| doc.get_mut("$defs")?.get_mut(name)?.as_object_mut())
            .expect("definition exists")
    }

    #[test]
    fn every_action_of_the_schema_has_an_effect() {
        let model = Model::from_documents(documents()).expect("the schema loads");
        assert_eq!(model.defs["ListAgents"].effect(), Some(Effect::Read));
        assert_eq!(model.defs["CreateAgent"].effect(), Some(Effect::Write));
        assert!(model.of_kind(Kind::Action).all(|def| def.effect().is_some()));
    }

    #[test]
    fn an_action_without_a_valid_effect_fails_generation_naming_it() {
        let mut documents = documents();
        assert!(definition(&mut documents, "CreateAgent").remove("x-effect").is_some());
        definition(&mut documents, "ListAgents").insert("x-effect".into(), Json::from("readonly"));
        let Err(Error::Schema(message)) = Model::from_documents(documents) else {
            panic!("a schema with an action lacking x-effect must not load");
        };
        assert!(
            message.contains(
                "CreateAgent: every action needs x-effect \"read\" (changes no state) or \"write\"; found none"
            ),
            "{message}"
        );
        assert!(message.contains("ListAgents: every action needs x-effect"), "{message}");
        assert!(message.contains("found \"readonly\""), "{message}");
        assert_eq!(message.matches("x-effect").count(), 2, "only the two broken actions: {message}");
    }

    /// A property of `definition` (`name`), wherever the definition lives.
    fn property<'a>(
        documents: &'a mut [(String, Json)],
        def: &str,
        name: &str,
    ) -> &'a mut serde_json::Map<String, Json> {
        definition(documents, def)
            .get_mut("properties")
            .and_then(|props| props.get_mut(name))
            .and_then(Json::as_object_mut)
            .expect("property exists")
    }

    #[test]
    fn the_schema_types_its_ids() {
        let model = Model::from_documents(documents()).expect("the schema loads");
        assert!(model.ids.contains_key("AgentId") && model.ids.contains_key("AccountId"));
        assert_eq!(model.ids["AccountId"].format, Some(IdFormat::Principal));
        assert_eq!(id_of(&model.defs["GetAgent"].schema["properties"]["agentId"]), Some(Some("AgentId")));
        assert_eq!(id_of(&model.defs["CreateAgent"].schema["properties"]["clientRequestId"]), Some(None));
    }

    #[test]
    fn an_id_property_without_x_id_or_with_an_unknown_one_fails_generation() {
        let mut documents = documents();
        assert!(property(&mut documents, "GetAgent", "agentId").remove("x-id").is_some());
        property(&mut documents, "GetRun", "runId").insert("x-id".into(), Json::from("RunIdentifier"));
        property(&mut documents, "CreateAgent", "clientRequestId").insert("x-id".into(), Json::from(true));
        let Err(Error::Schema(message)) = Model::from_documents(documents) else {
            panic!("a schema with an untyped id property must not load");
        };
        assert!(message.contains("GetAgent.agentId: an id property needs \"x-id\""), "{message}");
        assert!(message.contains("GetRun.runId: x-id RunIdentifier is not an entry of x-ids"), "{message}");
        assert!(message.contains("CreateAgent.clientRequestId: x-id must be an x-ids type name or false"), "{message}");
    }

    #[test]
    fn x_ids_entries_are_used_documented_and_in_a_known_format() {
        let mut documents = documents();
        let table =
            documents.iter_mut().find_map(|(_, doc)| doc.get_mut("x-ids")?.as_object_mut()).expect("a file has x-ids");
        table.insert("UnusedId".into(), serde_json::json!({"description": "Nobody holds it."}));
        table.insert("CheckedId".into(), serde_json::json!({"description": "Checked.", "format": "uuid"}));
        let Err(Error::Schema(message)) = Model::from_documents(documents.clone()) else { panic!("loaded") };
        assert!(message.contains("x-ids CheckedId: unknown format \"uuid\""), "{message}");
        let table = documents.iter_mut().find_map(|(_, doc)| doc.get_mut("x-ids")?.as_object_mut()).expect("x-ids");
        table.remove("CheckedId");
        let Err(Error::Schema(message)) = Model::from_documents(documents) else { panic!("loaded") };
        assert!(message.contains("x-ids UnusedId (common.json): no property holds it"), "{message}");
    }
}
