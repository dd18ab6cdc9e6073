//! The tools a model pass offers, with their JSON Schemas, and the argument check every call
//! goes through before it runs (docs/runtime.md §1.8).
//!
//! The verbs are always offered, in this order: `read`, `write`, `call`, `plan`, `status`.
//! `delegate` (after `call`, while the run may still spawn a child) and a typed child's
//! `return_result` are added by the pass (see `delegate`). Callables (reached through `call`) are promoted to provider tools of their
//! own, ahead of the verbs, once the agent itself read `~/tools/<name>` or called them in the
//! session, and only while they are granted ([`promoted`]); a promoted tool runs as `call`.
//!
//! The descriptions are ours. Each says what the tool is for and what its input means, in the
//! few lines a model reads before choosing a tool.

use std::sync::{Arc, LazyLock};

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{SessionActor, SessionEvent, SessionEventPayload};
use serde_json::{Value as Json, json};

use crate::error::{ApiError, ErrorKind};
use crate::model::ToolSpec;
use crate::tools::registry::Callable;

/// A tool the runtime can execute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tool {
    /// `read {address, format?, options?}`.
    Read,
    /// `write {address, content?, options?, dryRun?}`.
    Write,
    /// `call {tool, input?}`.
    Call,
    /// `plan {title?, steps}`: the session checklist (no durable events).
    Plan,
    /// `status {title?, description?}`: the session's title and description.
    Status,
}

impl Tool {
    /// Every tool, in the order they are offered.
    pub(crate) const ALL: [Tool; 5] = [Tool::Read, Tool::Write, Tool::Call, Tool::Plan, Tool::Status];

    /// The tool called `name`.
    pub(crate) fn named(name: &str) -> Option<Tool> {
        Self::ALL.into_iter().find(|tool| tool.name() == name)
    }

    /// Its name on the wire.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Tool::Read => "read",
            Tool::Write => "write",
            Tool::Call => "call",
            Tool::Plan => "plan",
            Tool::Status => "status",
        }
    }

    /// One line for the `~/tools` listing.
    pub(crate) fn summary(self) -> &'static str {
        match self {
            Tool::Read => "Read anything by address: memory, your own settings, attachments, threads, runs.",
            Tool::Write => "Write by address: files in your memory (create, replace, delete).",
            Tool::Call => "Run a callable tool by name with an input object.",
            Tool::Plan => "Keep the visible checklist of a multi-step task.",
            Tool::Status => "Set this conversation's title and a short description of where it stands.",
        }
    }

    /// The model-facing description.
    pub(crate) fn description(self) -> &'static str {
        match self {
            Tool::Read => {
                "Read something by its address and get it back as text or JSON.\n\
                 Addresses:\n\
                 - ~/memory/ lists your private memory; ~/memory/<path>/ lists a folder; ~/memory/<path> reads a file.\n\
                 - ~/self describes you: your model, prompt, grants and memory at a glance.\n\
                 - ~/tools/ lists what you can call; ~/tools/<name> gives one tool's contract.\n\
                 - attachment:<id> reads a file the user attached to this conversation.\n\
                 - thread:<id> reads another conversation of this account.\n\
                 - run:<id> describes a run.\n\
                 - hm://<account>/<path> reads a Seed document or comment as markdown; add /:attributes for its \
                 metadata only, /:directory for the documents under it; hm://<account>/:profile reads a profile.\n\
                 - https://… reads a web page as markdown (options.raw: true for the body as sent).\n\
                 - activity: lists recent network events (options: pageSize, pageToken, authors, eventTypes, \
                 resource, trustedOnly).\n\
                 - ipfs://<cid> downloads a file into your memory (options.path, default ipfs/<cid>).\n\
                 format: \"markdown\" (default) or \"json\". options: extra settings some addresses take."
            }
            Tool::Write => {
                "Write something by its address.\n\
                 - ~/memory/<path> with content replaces the whole file (folders are created). Read a file first and \
                 write it back whole when you change part of it.\n\
                 - options.delete: true removes the file; options.fromUrl downloads a URL into it; \
                 options.fromAttachment copies an attachment of this conversation into it.\n\
                 - hm://<your account>/<path> publishes a document from markdown content when you may publish: \
                 options.name names a new one; options.action \"update\" changes an existing one; dryRun: true \
                 only checks. Other options.action values: \"comment\" (content on that document; options.replyTo \
                 a comment id to reply), \"delete\", \"redirect\" (options.toUrl), \"move\" (options.toPath, \
                 \"/\" for the home), \"fork\" (options.fromUrl, copied to this address) and \
                 \"capability.create\" (options.input {delegate, role: WRITER or AGENT} lets another account write \
                 your documents). At hm://<your account>: \"profile.update\" (options.input {name, description, \
                 icon: an ipfs:// URL}; what you leave out stays). \"comment.update\" (content, options.input \
                 {comment: its id}) and \"comment.delete\" (options.input {comment}) change your own comments; \
                 \"contact.create\" at hm://<their account> (options.name) and \"contact.delete\" (options.input \
                 {contact: its id}) keep your contacts. \"draft.create\" keeps a draft of the document at the \
                 address (content, options.name) here without publishing it; \"draft.update\" (new content or \
                 metadata), \"draft.get\", \"draft.delete\" and \"draft.publish\" take options.input {draft: its \
                 id}, and \"draft.list\" lists your drafts.\n\
                 - hm://<your account>/<path> with options.fromPath (a ~/memory/ markdown file) publishes that \
                 file as the document, its frontmatter as metadata, creating or updating it (images it links in \
                 memory are published too); hm://<your account> alone takes the path from its name.\n\
                 - ipfs:// with options.fromPath publishes a memory file (options.fromAttachment: an attachment \
                 of this conversation, by id) and answers its ipfs:// address.\n\
                 Memory persists across conversations and the user can browse it: keep it small, organised and in \
                 plain text."
            }
            Tool::Call => {
                "Run a callable tool: {tool: <name>, input: {...}}. read ~/tools/ first to see what exists and \
                 ~/tools/<name> for its input contract. An unknown name or an input that does not fit answers \
                 with the listing or the contract so you can try again."
            }
            Tool::Plan => {
                "Keep a checklist for a task of three or more steps. Send the whole list every time, each step \
                 with a stable id, a short label and its status (pending, running, done, failed, skipped). Start \
                 a fresh plan for a new task. Before you finish, every step must be done, failed or skipped: a \
                 turn that ends with open steps is sent back to you."
            }
            Tool::Status => {
                "Name this conversation and say where it stands. Set a specific title of at most eight words \
                 early on; keep the description (one or two sentences) current; give the outcome at the end. A \
                 title the user chose is kept."
            }
        }
    }

    /// Its input schema.
    pub(crate) fn schema(self) -> &'static Json {
        &SCHEMAS[self as usize]
    }

    /// The provider-facing spec.
    pub(crate) fn spec(self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_owned(),
            description: self.description().to_owned(),
            parameters: SCHEMAS[self as usize].clone(),
        }
    }
}

static SCHEMAS: LazyLock<[Arc<Json>; 5]> = LazyLock::new(|| {
    [
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "address": {"type": "string", "minLength": 1},
                "format": {"type": "string", "enum": ["markdown", "json"]},
                "options": {"type": "object"}
            },
            "required": ["address"]
        }),
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "address": {"type": "string", "minLength": 1},
                "content": {"type": "string"},
                "options": {"type": "object"},
                "dryRun": {"type": "boolean"}
            },
            "required": ["address"]
        }),
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "tool": {"type": "string", "minLength": 1},
                "input": {"type": "object"}
            },
            "required": ["tool"]
        }),
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "title": {"type": "string"},
                "steps": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": false,
                        "properties": {
                            "id": {"type": "string", "minLength": 1},
                            "label": {"type": "string", "minLength": 1},
                            "status": {"type": "string", "enum": ["pending", "running", "done", "failed", "skipped"]}
                        },
                        "required": ["id", "label", "status"]
                    }
                }
            },
            "required": ["steps"]
        }),
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "title": {"type": "string", "minLength": 1},
                "description": {"type": "string"}
            }
        }),
    ]
    .map(Arc::new)
});

static VALIDATORS: LazyLock<Vec<jsonschema::Validator>> = LazyLock::new(|| {
    Tool::ALL
        .into_iter()
        .map(|tool| jsonschema::validator_for(tool.schema()).expect("the built-in tool schemas are valid JSON Schema"))
        .collect()
});

/// The tools offered to a pass, in order: the promoted callables, then the verbs.
pub(crate) fn offered(promoted: &[Callable]) -> Vec<ToolSpec> {
    promoted.iter().map(|callable| callable.spec()).chain(Tool::ALL.into_iter().map(Tool::spec)).collect()
}

/// The callables the agent itself touched in `log` (a `read ~/tools/<name>` or a `call` naming
/// one; never a user's verbs), in first-touch order, kept only while `granted`: a hallucinated
/// name never becomes a provider tool.
pub(crate) fn promoted(log: &[SessionEvent], granted: &[Callable]) -> Vec<Callable> {
    let mut promoted = Vec::new();
    for event in log {
        let SessionEventPayload::ToolCallEvent(call) = &event.event else { continue };
        if call.actor == Some(SessionActor::User) {
            continue;
        }
        let Ipld::Map(input) = call.input.as_ipld() else { continue };
        let text = |key: &str| match input.get(key) {
            Some(Ipld::String(text)) => Some(text.trim()),
            _ => None,
        };
        let touched = match call.name.as_str() {
            "read" => text("address")
                .and_then(|address| address.strip_prefix("~/tools/"))
                .map(|name| name.trim_end_matches('/')),
            "call" => text("tool"),
            _ => None,
        };
        if let Some(callable) = touched.and_then(Callable::named)
            && granted.contains(&callable)
            && !promoted.contains(&callable)
        {
            promoted.push(callable);
        }
    }
    promoted
}

/// Checks a promoted callable's arguments against its contract, as [`check`] does for verbs.
pub(crate) fn check_callable(callable: Callable, arguments: Json) -> Result<Json, String> {
    let validator = &CALLABLE_VALIDATORS[callable as usize];
    checked(callable.name(), callable.input_schema(), validator, arguments)
}

static CALLABLE_VALIDATORS: LazyLock<Vec<jsonschema::Validator>> = LazyLock::new(|| {
    Callable::ALL
        .into_iter()
        .map(|callable| {
            jsonschema::validator_for(callable.input_schema()).expect("the callables' schemas are valid JSON Schema")
        })
        .collect()
});

/// Checks `arguments` against `tool`'s schema, first as given and then with string primitives
/// coerced where the schema wants a boolean or a number (models often quote them). Returns the
/// arguments to run with, or the error text the model gets as the call's result.
pub(crate) fn check(tool: Tool, arguments: Json) -> Result<Json, String> {
    checked(tool.name(), tool.schema(), &VALIDATORS[tool as usize], arguments)
}

pub(super) fn checked(
    name: &str,
    schema: &Json,
    validator: &jsonschema::Validator,
    arguments: Json,
) -> Result<Json, String> {
    if validator.is_valid(&arguments) {
        return Ok(arguments);
    }
    let coerced = coerce(schema, arguments.clone());
    if validator.is_valid(&coerced) {
        return Ok(coerced);
    }
    let mut text = format!("Validation failed for tool \"{name}\":");
    for error in validator.iter_errors(&arguments) {
        let path = error.instance_path().to_string();
        let path = if path.is_empty() { "root".to_owned() } else { path };
        text.push_str(&format!("\n  - {path}: {error}"));
    }
    let received = serde_json::to_string_pretty(&arguments).unwrap_or_else(|_| arguments.to_string());
    text.push_str(&format!("\n\nReceived arguments:\n{received}"));
    Err(text)
}

/// The error text for a tool name the pass does not offer.
pub(crate) fn unknown(name: &str) -> String {
    format!("Tool {name} not found")
}

/// Top-level string values turned into the boolean or number their property's schema asks for.
fn coerce(schema: &Json, arguments: Json) -> Json {
    let Json::Object(mut fields) = arguments else { return arguments };
    let Some(properties) = schema.get("properties").and_then(Json::as_object) else { return Json::Object(fields) };
    for (key, value) in fields.iter_mut() {
        let (Some(wanted), Json::String(text)) = (properties.get(key).and_then(|p| p.get("type")), &*value) else {
            continue;
        };
        let text = text.trim();
        let replacement = match wanted.as_str() {
            Some("boolean") => match text {
                "true" => Some(Json::Bool(true)),
                "false" => Some(Json::Bool(false)),
                _ => None,
            },
            Some("integer") => text.parse::<i64>().ok().map(Json::from),
            Some("number") => text.parse::<f64>().ok().and_then(serde_json::Number::from_f64).map(Json::Number),
            _ => None,
        };
        if let Some(replacement) = replacement {
            *value = replacement;
        }
    }
    Json::Object(fields)
}

/// The text the model reads for a failed tool.
pub(super) fn model_error(name: &str, error: ApiError) -> String {
    if error.kind() == ErrorKind::Internal {
        tracing::warn!(tool = %name, error = %error.message(), "tool failed on the server's side");
        "The tool failed on the server's side; try again, or tell the user it is not working".to_owned()
    } else {
        error.message().to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_is_offered_once_in_order_with_an_object_schema() {
        let names: Vec<String> = offered(&[]).into_iter().map(|spec| spec.name).collect();
        assert_eq!(names, ["read", "write", "call", "plan", "status"]);
        let names: Vec<String> = offered(&[Callable::WebSearch]).into_iter().map(|spec| spec.name).collect();
        assert_eq!(names, ["web_search", "read", "write", "call", "plan", "status"], "promoted first");
        for tool in Tool::ALL {
            assert_eq!(Tool::named(tool.name()), Some(tool));
            assert_eq!(tool.schema()["type"], "object");
            assert_eq!(tool.schema()["additionalProperties"], false, "{}", tool.name());
        }
        assert_eq!(Tool::named("delegate"), None, "offered by the pass, by depth");
    }

    fn tool_call(name: &str, input: Json, actor: Option<SessionActor>) -> SessionEvent {
        use seed_agents_protocol::generated::{ToolCallEvent, ToolCallEventType};
        let input = seed_agents_protocol::Value(seed_agents_protocol::wire::json_to_ipld(&input));
        let call = ToolCallEvent {
            extra: Default::default(),
            actor,
            id: "c".into(),
            input,
            meta: None,
            name: name.into(),
            type_: ToolCallEventType::ToolCall,
        };
        SessionEvent {
            extra: Default::default(),
            created_at: 1,
            event: SessionEventPayload::ToolCallEvent(call),
            id: "e".into(),
            seq: 1,
            session_id: "s".into(),
            truncated: None,
        }
    }

    #[test]
    fn the_agents_own_touches_of_granted_callables_are_promoted_once_in_order() {
        let log = [
            tool_call("call", json!({"tool": "search", "input": {}}), Some(SessionActor::User)),
            tool_call("read", json!({"address": "~/tools/web_search/"}), None),
            tool_call("call", json!({"tool": " search "}), None),
            tool_call("call", json!({"tool": "bash"}), None),
            tool_call("read", json!({"address": "~/tools/search"}), None),
            tool_call("write", json!({"address": "~/tools/search"}), None),
        ];
        let both = [Callable::Search, Callable::WebSearch];
        assert_eq!(promoted(&log, &both), [Callable::WebSearch, Callable::Search]);
        assert_eq!(promoted(&log, &[Callable::Search]), [Callable::Search], "never an ungranted one");
        assert_eq!(promoted(&log[..1], &both), [], "a user's call promotes nothing");
        let checked = check_callable(Callable::Search, json!({"query": "x", "pageSize": "5"}));
        assert_eq!(checked, Ok(json!({"query": "x", "pageSize": 5})));
        let refused = check_callable(Callable::Search, json!({"q": "x"})).unwrap_err();
        assert!(refused.starts_with("Validation failed for tool \"search\":"), "{refused}");
    }

    #[test]
    fn valid_arguments_pass_unchanged() {
        let arguments = json!({"address": "~/memory/notes.md"});
        assert_eq!(check(Tool::Read, arguments.clone()), Ok(arguments));
        let plan = json!({"steps": [{"id": "1", "label": "Look", "status": "pending"}]});
        assert_eq!(check(Tool::Plan, plan.clone()), Ok(plan));
        assert_eq!(check(Tool::Status, json!({})), Ok(json!({})), "status checks its fields itself");
    }

    #[test]
    fn quoted_primitives_are_coerced() {
        let arguments = json!({"address": "hm://x", "dryRun": "true"});
        assert_eq!(check(Tool::Write, arguments), Ok(json!({"address": "hm://x", "dryRun": true})));
    }

    #[test]
    fn invalid_arguments_say_what_and_where_and_echo_the_input() {
        let error = check(Tool::Read, json!({"adress": "~/memory/"})).unwrap_err();
        assert!(error.starts_with("Validation failed for tool \"read\":\n  - "), "{error}");
        assert!(error.contains("address"), "{error}");
        assert!(error.ends_with("Received arguments:\n{\n  \"adress\": \"~/memory/\"\n}"), "{error}");
        let error = check(Tool::Plan, json!({"steps": [{"id": "1", "label": "", "status": "maybe"}]})).unwrap_err();
        assert!(error.contains("/steps/0/status"), "{error}");
        assert!(error.contains("/steps/0/label"), "{error}");
        assert_eq!(unknown("bash"), "Tool bash not found");
    }
}
