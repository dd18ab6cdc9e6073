//! `delegate` and `return_result` (docs/runtime.md §5.1, §5.3, §5.4, §5.6).
//!
//! An awaited `delegate` creates a child session (linked to the caller's session, its brief as
//! the first user message, verbatim) and a child run on the background queue answering the call
//! (`runs.parent_tool_call_id`), in one write transaction. The call gets no durable result then:
//! the pass ends after its tool batch and the run parks on its children; each child's end
//! appends the real result (see `runs::children`). `await: false` starts a detached session of
//! the same agent instead and answers at once.
//!
//! A child's contract (its [`Spec`]) rides its run's input; a later run on the child's session
//! inherits it through `sessions.run_id`. With an `output` schema the child is typed: it gets
//! `return_result`, whose payload is checked server side against the schema (at most
//! [`MAX_RESULT_FAILURES`] failures) and becomes the run's output.
//!
//! Output schemas are limited to the subset upstream supports ([`shape_errors`], hand-written:
//! it is a product rule, not a JSON Schema feature); payloads are validated with the
//! `jsonschema` crate the tool arguments already use.

use std::collections::BTreeMap;

use crate::db::Connection;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{MessageEvent, MessageEventRole, MessageEventType, SessionEventPayload};
use seed_agents_protocol::wire;
use serde_json::{Value as Json, json};

use super::Turn;
use crate::bus::{ChangeReason, Event};
use crate::error::{ApiError, ApiResult};
use crate::model::ToolSpec;
use crate::runs::queue::{Changes, NewRun, Queue, enqueue, enqueue_child};
use crate::sessions::events;
use crate::sessions::store::{self as session_store, NewChild, TitleSource};

/// The deepest a run tree (awaited children) or a session chain (detached ones) may go.
pub(crate) const MAX_DEPTH: i64 = 3;
/// Awaited children one run may spawn; also detached sessions one session may start.
pub(crate) const MAX_SPAWNS: i64 = 10;
/// Agent children one workflow run may spawn: a script is written to fan out (`ctx.parallel`),
/// where a model's delegation is bounded by [`MAX_SPAWNS`].
pub(crate) const MAX_WORKFLOW_SPAWNS: i64 = 64;
/// Executions a child run may take (retries of retryable failures).
pub(crate) const CHILD_MAX_ATTEMPTS: u32 = 3;
/// Failed `return_result` calls before a typed child fails `output-schema`.
pub(crate) const MAX_RESULT_FAILURES: u32 = 3;

/// The tool's name.
pub(crate) const NAME: &str = "delegate";
/// The typed child's result tool.
pub(crate) const RETURN_RESULT: &str = "return_result";

const NO_BRIEF: &str = "delegate requires a `brief` — the task briefing as human-readable markdown";

/// A model child's contract, as its run's input stores it (`input.spec`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Spec {
    /// The child's title, when the parent gave one.
    pub title: Option<String>,
    /// A system prompt replacing the agent's.
    pub prompt: Option<String>,
    /// Another agent of the account to run as.
    pub agent_id: Option<String>,
    /// The brief (any JSON; a string is the usual case).
    pub input: Json,
    /// Tools the child is narrowed to.
    pub tools: Option<Vec<String>>,
    /// The result's JSON Schema, for a typed child.
    pub output: Option<Json>,
}

impl Spec {
    /// The agent's definition as this child runs with it: its own prompt instead of the agent's,
    /// and its tools narrowed to the ones it was given.
    pub(crate) fn apply(&self, definition: &mut seed_agents_protocol::generated::AgentDefinition) {
        if let Some(prompt) = &self.prompt {
            definition.system_prompt =
                seed_agents_protocol::generated::AgentDefinitionSystemPrompt::String(prompt.clone());
        }
        if let Some(wanted) = &self.tools {
            crate::tools::registry::narrow(definition, wanted);
        }
    }

    /// The stored shape: `{title?, prompt?, agentId?, input, tools?, output?}`.
    pub(crate) fn to_json(&self) -> Json {
        let mut spec = serde_json::Map::new();
        if let Some(title) = &self.title {
            spec.insert("title".into(), json!(title));
        }
        if let Some(prompt) = &self.prompt {
            spec.insert("prompt".into(), json!(prompt));
        }
        if let Some(agent_id) = &self.agent_id {
            spec.insert("agentId".into(), json!(agent_id));
        }
        spec.insert("input".into(), self.input.clone());
        if let Some(tools) = &self.tools {
            spec.insert("tools".into(), json!(tools));
        }
        if let Some(output) = &self.output {
            spec.insert("output".into(), output.clone());
        }
        Json::Object(spec)
    }

    fn from_json(value: &Json) -> Option<Self> {
        let fields = value.as_object()?;
        let text =
            |key: &str| fields.get(key).and_then(Json::as_str).filter(|text| !text.is_empty()).map(str::to_owned);
        Some(Self {
            title: text("title"),
            prompt: text("prompt"),
            agent_id: text("agentId"),
            input: fields.get("input").cloned().unwrap_or(Json::Null),
            tools: fields
                .get("tools")
                .and_then(Json::as_array)
                .map(|tools| tools.iter().filter_map(Json::as_str).map(str::to_owned).collect()),
            output: fields.get("output").cloned(),
        })
    }
}

/// Normalises a model child's `delegate` input, with upstream's 400s: `brief` is the stored
/// input; a lone `prompt` is read as the brief; `prompt` with `agentId` is refused; `output`
/// must be a supported schema.
pub(crate) fn normalize(raw: &Json) -> ApiResult<Spec> {
    let empty = serde_json::Map::new();
    let fields = raw.as_object().unwrap_or(&empty);
    let text = |key: &str| fields.get(key).and_then(Json::as_str).filter(|text| !text.is_empty()).map(str::to_owned);
    let mut prompt = fields.get("prompt").and_then(Json::as_str).map(str::to_owned);
    let input = match (fields.get("input"), fields.get("brief")) {
        (Some(input), _) => input.clone(),
        (None, Some(brief)) => brief.clone(),
        (None, None) => match prompt.take().filter(|prompt| !prompt.is_empty()) {
            Some(prompt) => Json::String(prompt),
            None => return Err(ApiError::invalid(NO_BRIEF)),
        },
    };
    if prompt.is_some() && fields.get("agentId").is_some_and(Json::is_string) {
        return Err(ApiError::invalid("Provide either prompt or agentId, not both"));
    }
    let output = match fields.get("output") {
        None => None,
        Some(schema) => {
            let errors = shape_errors(schema, "$");
            if !errors.is_empty() {
                return Err(ApiError::invalid(format!("output schema is not supported: {}", errors.join("; "))));
            }
            Some(schema.clone())
        }
    };
    Ok(Spec {
        title: text("title"),
        prompt: prompt.filter(|prompt| !prompt.is_empty()),
        agent_id: text("agentId"),
        input,
        tools: fields
            .get("tools")
            .and_then(Json::as_array)
            .map(|tools| tools.iter().filter_map(Json::as_str).map(str::to_owned).collect()),
        output,
    })
}

/// Where `schema` leaves the supported subset (`type`, `description`, `properties`, `required`,
/// `additionalProperties`, `enum`, `minLength`, `maxLength`, `minimum`, `maximum`, `items`,
/// `minItems`, `maxItems`; an object root), as `path: message`.
pub(crate) fn shape_errors(schema: &Json, path: &str) -> Vec<String> {
    const KNOWN: [&str; 13] = [
        "type",
        "description",
        "properties",
        "required",
        "additionalProperties",
        "enum",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "items",
        "minItems",
        "maxItems",
    ];
    let Some(fields) = schema.as_object() else { return vec![format!("{path}: schema must be an object")] };
    let mut errors = Vec::new();
    if path == "$" && fields.get("type").is_some_and(|kind| kind != "object") {
        errors.push("$.type: the root must be type \"object\" — wrap arrays/scalars in a named property".to_owned());
    }
    for key in fields.keys() {
        if !KNOWN.contains(&key.as_str()) {
            errors.push(format!("{path}.{key}: unsupported schema keyword"));
        }
    }
    let types: Vec<&Json> = match fields.get("type") {
        None => Vec::new(),
        Some(Json::Array(types)) => types.iter().collect(),
        Some(kind) => vec![kind],
    };
    for kind in types {
        let known = kind
            .as_str()
            .is_some_and(|kind| ["string", "number", "integer", "boolean", "object", "array", "null"].contains(&kind));
        if !known {
            errors.push(format!("{path}.type: unknown type {kind}"));
        }
    }
    match fields.get("properties") {
        None => {}
        Some(Json::Object(properties)) => {
            for (key, child) in properties {
                errors.extend(shape_errors(child, &format!("{path}.properties.{key}")));
            }
        }
        Some(_) => errors.push(format!("{path}.properties: properties must be an object")),
    }
    if let Some(items) = fields.get("items") {
        errors.extend(shape_errors(items, &format!("{path}.items")));
    }
    if let Some(additional) = fields.get("additionalProperties").filter(|value| value.is_object()) {
        errors.extend(shape_errors(additional, &format!("{path}.additionalProperties")));
    }
    errors
}

/// Checks a `return_result` payload against the child's schema: `path: message` per problem
/// (paths as `$.field[0]`), empty when it fits.
pub(crate) fn payload_errors(schema: &Json, payload: &Json) -> Vec<String> {
    let validator = match jsonschema::validator_for(schema) {
        Ok(validator) => validator,
        Err(error) => return vec![format!("$: the schema cannot be used: {error}")],
    };
    validator
        .iter_errors(payload)
        .map(|error| {
            let mut path = String::from("$");
            for segment in error.instance_path().to_string().split('/').skip(1) {
                let segment = segment.replace("~1", "/").replace("~0", "~");
                if !segment.is_empty() && segment.bytes().all(|byte| byte.is_ascii_digit()) {
                    path.push_str(&format!("[{segment}]"));
                } else {
                    path.push('.');
                    path.push_str(&segment);
                }
            }
            format!("{path}: {error}")
        })
        .collect()
}

/// A run's contract: its own `input.spec` (from `input`, the run's input as claimed), or the
/// spec of the run that spawned its session.
pub(crate) fn contract(conn: &Connection, run_id: &str, input: &Ipld, session_id: &str) -> ApiResult<Option<Spec>> {
    if let Some(spec) = spec_in(input) {
        return Ok(Some(spec));
    }
    // Its own input holds none, so only another spawning run can give one.
    spawning_contract(conn, session_id, Some(run_id))
}

/// The contract every run of a delegated child's session runs under (the one its spawning run
/// stored), or `None` for any other session; `spawning_run` is the session's `runId` (the run
/// that spawned it, when it is a delegated child), read by the caller.
pub(crate) fn contract_of_spawning_run(conn: &Connection, spawning_run: Option<&str>) -> ApiResult<Option<Spec>> {
    let Some(spawning) = spawning_run else { return Ok(None) };
    Ok(crate::runs::store::input(conn, spawning)?.as_ref().and_then(spec_in))
}

/// The spec stored by the run that spawned `session_id`, unless that run is `except`.
fn spawning_contract(conn: &Connection, session_id: &str, except: Option<&str>) -> ApiResult<Option<Spec>> {
    let spawning = session_store::spawning_run(conn, session_id)?;
    contract_of_spawning_run(conn, spawning.as_deref().filter(|spawning| Some(*spawning) != except))
}

fn spec_in(input: &Ipld) -> Option<Spec> {
    let Ipld::Map(fields) = input else { return None };
    let spec: Json = serde_json::to_value(seed_agents_protocol::Value(fields.get("spec")?.clone())).ok()?;
    Spec::from_json(&spec)
}

/// The `delegate` tool as offered.
pub(crate) fn delegate_spec() -> ToolSpec {
    ToolSpec {
        name: NAME.to_owned(),
        description: "Hand a task to a child session and get its result back as this call's result.\n\
             - brief: the task as human-readable markdown; it becomes the child's first message, word for word. \
             Say what to do, what to hand back, and any constraints.\n\
             - title: a short name for the child. prompt: a system prompt for an anonymous worker on your model \
             (omit it to run the child as yourself); agentId: run it as another of your agents instead (not both).\n\
             - tools: narrow the child to these tools. output: a JSON Schema (object root) the child's result \
             must fit; the child then delivers it with return_result.\n\
             - await: false starts a detached child you never hear back from.\n\
             Spawn independent children together, in one reply: they run at the same time. Your turn pauses \
             until every awaited child answers, and each call gets its own result: succeeded with output, \
             failed with an error, or canceled. Do not delegate what you can simply do yourself."
            .to_owned(),
        parameters: json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "brief": {"type": "string"},
                "title": {"type": "string"},
                "prompt": {"type": "string"},
                "agentId": {"type": "string"},
                "tools": {"type": "array", "items": {"type": "string"}},
                "output": {"type": "object"},
                "await": {"type": "boolean"},
                "input": {},
                "script": {"type": "string"}
            }
        })
        .into(),
    }
}

/// `return_result` for a typed child: its parameters are the child's output schema.
pub(crate) fn return_result_spec(schema: &Json) -> ToolSpec {
    ToolSpec {
        name: RETURN_RESULT.to_owned(),
        description: "Deliver the final result of this delegated task. Call it once, when the task is done, with \
                      a payload that fits the required schema; a payload that does not fit comes back with what \
                      to fix. Delivering it ends your task."
            .to_owned(),
        parameters: schema.clone().into(),
    }
}

/// The brief as the child's first message: a string verbatim, anything else as a fenced block of
/// pretty JSON.
pub(crate) fn render_brief(input: &Json) -> String {
    match input {
        Json::String(text) => text.clone(),
        other => format!("```json\n{}\n```", serde_json::to_string_pretty(other).unwrap_or_default()),
    }
}

/// What a spawn did, to announce after its commit.
pub(crate) struct Spawned {
    /// The child's session.
    pub session_id: String,
    /// The child's run (`None` for a detached session's run, which nobody awaits).
    pub run_id: Option<String>,
    title: String,
    agent_id: String,
    events: Vec<seed_agents_protocol::generated::SessionEvent>,
    changes: Changes,
}

impl Spawned {
    /// Announces the spawn after its commit: the run and session changes, the brief, the
    /// account's `session-created`; wakes the dispatcher.
    pub(crate) fn announce(self, app: &crate::app::App, owner_id: &str) -> SpawnedChild {
        let Spawned { session_id, run_id, title, agent_id, events, changes } = self;
        app.runs.publish(changes);
        app.bus.publish(Event::SessionChanged { session_id: session_id.clone(), agent_id: agent_id.clone() });
        app.bus.account_change(owner_id, ChangeReason::SessionCreated, Some(&agent_id), Some(&session_id));
        events::announce(&app.bus, owner_id, &agent_id, events);
        app.runs.notify();
        SpawnedChild { session_id, run_id, title }
    }
}

/// A child once announced.
#[derive(Debug)]
pub(crate) struct SpawnedChild {
    /// Its session.
    pub session_id: String,
    /// Its run.
    pub run_id: Option<String>,
    /// Its title.
    pub title: String,
}

/// `delegate {script, input?, title?}` (docs/workflows.md): the script is checked, then runs as
/// a workflow child answering this call; scripts are always awaited. Errors are the 400s the
/// model reads.
async fn spawn_script(turn: &Turn, call_id: &str, script: &str, arguments: &Json) -> ApiResult<Json> {
    if arguments.get("await").and_then(Json::as_bool) == Some(false) {
        return Err(ApiError::invalid("A script child is always awaited; drop `await: false`."));
    }
    crate::workflows::source::check(script)?;
    let input = arguments.get("input").cloned().unwrap_or(Json::Null);
    let title = arguments
        .get("title")
        .and_then(Json::as_str)
        .filter(|title| !title.is_empty())
        .map_or_else(|| "Workflow".to_owned(), str::to_owned);
    let (run_id, session_id, agent_id, owner) =
        (turn.run_id.clone(), turn.session_id.clone(), turn.agent_id.clone(), turn.owner_id.clone());
    let (call_id, script, now) = (call_id.to_owned(), script.to_owned(), turn.app.clock.now_ms());
    let spawn_title = title.clone();
    let (child_run, changes) = turn
        .app
        .db
        .write(move |conn| {
            let depth =
                crate::runs::store::depth(conn, &run_id)?.ok_or_else(|| ApiError::not_found("Run not found"))?;
            if depth + 1 > MAX_DEPTH {
                return Err(ApiError::invalid(format!("Workflow depth limit reached ({MAX_DEPTH})")));
            }
            let mut fields = BTreeMap::from([
                ("input".to_owned(), wire::json_to_ipld(&input)),
                ("parentToolCallId".to_owned(), Ipld::String(call_id.clone())),
                ("parentToolName".to_owned(), Ipld::String(NAME.to_owned())),
            ]);
            if let Some((step_id, label)) = super::plan::running_step(conn, &session_id)? {
                fields.insert("planStepId".to_owned(), Ipld::String(step_id));
                fields.insert("planStepLabel".to_owned(), Ipld::String(label));
            }
            let run = crate::runs::queue::NewWorkflow {
                account_id: owner,
                agent_id,
                parent_run_id: Some(run_id),
                parent_tool_call_id: Some(call_id),
                origin: "agent",
                title: spawn_title,
                source: script,
                input: Ipld::Map(fields),
            };
            let mut changes = Changes::default();
            let child = crate::runs::queue::enqueue_workflow(conn, &run, now, &mut changes)?;
            Ok((child, changes))
        })
        .await?;
    turn.app.runs.publish(changes);
    turn.app.runs.notify();
    Ok(json!({"status": "spawned", "runId": child_run, "title": title}))
}

/// Starts an agent child of workflow run `run_id` from a `ctx.delegate` spec: a child session
/// under `session_id` (the nearest session up the workflow's chain; a top-level session when
/// there is none, as for a workflow a trigger started) and a background run whose result the
/// script awaits; `key` stands in for the tool call a model parent would name. The depth limit
/// applies; a workflow may start [`MAX_WORKFLOW_SPAWNS`] children.
#[allow(clippy::too_many_arguments)]
pub(crate) fn spawn_for_workflow(
    conn: &Connection,
    run_id: &str,
    session_id: Option<&str>,
    agent_id: &str,
    owner: &str,
    key: &str,
    spec: Spec,
    now: i64,
) -> ApiResult<Spawned> {
    spawn_child(conn, run_id, session_id, agent_id, owner, key, spec, MAX_WORKFLOW_SPAWNS, now)
}

/// Runs a `delegate` call of `turn` with id `call_id`: the live result, and whether the pass
/// must park on the call (an awaited child). Errors are the 400s the model reads.
pub(crate) async fn call(turn: &Turn, call_id: &str, arguments: &Json) -> ApiResult<(Json, bool)> {
    // A turn asked to stop starts no more work (a child spawned now would outlive its parent).
    if turn.stop.reason().is_some() {
        return Err(ApiError::invalid("This turn was stopped; no child was started."));
    }
    if let Some(script) = arguments.get("script").and_then(Json::as_str).filter(|script| !script.is_empty()) {
        return spawn_script(turn, call_id, script, arguments).await.map(|output| (output, true));
    }
    let awaited = arguments.get("await").and_then(Json::as_bool) != Some(false);
    let (run_id, session_id, agent_id, owner) =
        (turn.run_id.clone(), turn.session_id.clone(), turn.agent_id.clone(), turn.owner_id.clone());
    let (call_id_owned, now) = (call_id.to_owned(), turn.app.clock.now_ms());
    let spawned = if awaited {
        let spec = normalize(arguments)?;
        turn.app
            .db
            .write(move |conn| {
                spawn_child(conn, &run_id, Some(&session_id), &agent_id, &owner, &call_id_owned, spec, MAX_SPAWNS, now)
            })
            .await?
    } else {
        for field in ["agentId", "output", "tools"] {
            if arguments.get(field).is_some() {
                return Err(ApiError::invalid(format!(
                    "delegate {{await: false}} does not support `{field}` — a detached child runs as this agent and \
                     returns nothing. Await the child, or drop {field}."
                )));
            }
        }
        let brief = ["brief", "input", "prompt"]
            .iter()
            .find_map(|key| arguments.get(*key))
            .cloned()
            .ok_or_else(|| ApiError::invalid(NO_BRIEF))?;
        let title = arguments.get("title").and_then(Json::as_str).filter(|title| !title.is_empty()).map(str::to_owned);
        turn.app
            .db
            .write(move |conn| spawn_detached(conn, &run_id, &session_id, &agent_id, &owner, &brief, title, now))
            .await?
    };
    let SpawnedChild { session_id, title, .. } = spawned.announce(&turn.app, &turn.owner_id);
    if awaited {
        Ok((json!({"status": "spawned", "sessionId": session_id, "title": title}), true))
    } else {
        Ok((
            json!({
                "summary": format!("Started detached child \"{title}\"; it is now running in the background."),
                "status": "detached",
                "sessionId": session_id,
                "title": title,
            }),
            false,
        ))
    }
}

/// Inserts a child session (top-level without `parent_session_id`) and its first (user) message.
#[allow(clippy::too_many_arguments)]
fn new_session(
    conn: &Connection,
    owner: &str,
    agent_id: &str,
    parent_session_id: Option<&str>,
    title: &str,
    title_source: TitleSource,
    brief: String,
    now: i64,
) -> ApiResult<(String, seed_agents_protocol::generated::SessionEvent)> {
    let id = uuid::Uuid::now_v7().to_string();
    let session = NewChild { id: &id, owner_id: owner, agent_id, parent_session_id, title, title_source };
    session_store::insert_child(conn, &session, now)?;
    let message = SessionEventPayload::MessageEvent(MessageEvent {
        extra: Default::default(),
        actor: None,
        attachments: None,
        blocks: None,
        client_message_id: None,
        content: brief,
        context_lines: None,
        meta: None,
        raw_markdown: None,
        role: MessageEventRole::User,
        tool_call_id: None,
        type_: MessageEventType::Message,
    });
    let event = events::append(conn, &id, message, now)?;
    Ok((id, event))
}

#[allow(clippy::too_many_arguments)]
fn spawn_child(
    conn: &Connection,
    run_id: &str,
    session_id: Option<&str>,
    agent_id: &str,
    owner: &str,
    call_id: &str,
    spec: Spec,
    max_spawns: i64,
    now: i64,
) -> ApiResult<Spawned> {
    let depth = crate::runs::store::depth(conn, run_id)?.ok_or_else(|| ApiError::not_found("Run not found"))?;
    if depth + 1 > MAX_DEPTH {
        return Err(ApiError::invalid(format!("Sub-session depth limit reached ({MAX_DEPTH}); finish the work here.")));
    }
    let spawned = crate::runs::store::child_count(conn, run_id)?;
    if spawned >= max_spawns {
        return Err(ApiError::invalid(format!(
            "This run already spawned {max_spawns} sub-sessions; finish the remaining work here."
        )));
    }
    let child_agent = match &spec.agent_id {
        Some(other) => {
            if !crate::agents::store::belongs_to(conn, other, owner)? {
                return Err(ApiError::not_found("Agent not found"));
            }
            other.clone()
        }
        None => agent_id.to_owned(),
    };
    let title = match (&spec.title, &spec.input) {
        (Some(title), _) => title.clone(),
        (None, Json::String(brief)) => super::message::run_title(brief),
        (None, _) => "Sub-session".to_owned(),
    };
    let title_source = if spec.title.is_some() { TitleSource::Agent } else { TitleSource::System };
    let (child_session, event) =
        new_session(conn, owner, &child_agent, session_id, &title, title_source, render_brief(&spec.input), now)?;
    let mut input = BTreeMap::from([
        ("spec".to_owned(), wire::json_to_ipld(&spec.to_json())),
        ("parentToolCallId".to_owned(), Ipld::String(call_id.to_owned())),
    ]);
    if let Some(session_id) = session_id
        && let Some((step_id, label)) = super::plan::running_step(conn, session_id)?
    {
        input.insert("planStepId".to_owned(), Ipld::String(step_id));
        input.insert("planStepLabel".to_owned(), Ipld::String(label));
    }
    let run = NewRun {
        account_id: owner.to_owned(),
        agent_id: child_agent.clone(),
        session_id: child_session.clone(),
        origin: "agent",
        title: Some(title.clone()),
        input: Ipld::Map(input),
        queue: Queue::Background,
        max_attempts: CHILD_MAX_ATTEMPTS,
        parent_run_id: Some(run_id.to_owned()),
    };
    let mut changes = Changes::default();
    let child_run = enqueue_child(conn, &run, call_id, now, &mut changes)?;
    session_store::set_spawning_run(conn, &child_session, &child_run)?;
    Ok(Spawned {
        session_id: child_session,
        run_id: Some(child_run),
        title,
        agent_id: child_agent,
        events: vec![event],
        changes,
    })
}

#[allow(clippy::too_many_arguments)]
fn spawn_detached(
    conn: &Connection,
    run_id: &str,
    session_id: &str,
    agent_id: &str,
    owner: &str,
    brief: &Json,
    title: Option<String>,
    now: i64,
) -> ApiResult<Spawned> {
    let depth = session_store::parent_chain_depth(conn, session_id)?;
    if depth >= MAX_DEPTH {
        return Err(ApiError::invalid(format!(
            "Session spawn chain limit reached ({MAX_DEPTH}); this session was itself started by a chain of \
             agent-started sessions. Finish the work here instead."
        )));
    }
    let started = session_store::child_count(conn, session_id)?;
    if started >= MAX_SPAWNS {
        return Err(ApiError::invalid(format!(
            "This session already started {MAX_SPAWNS} sessions; finish the remaining work here instead."
        )));
    }
    let brief = render_brief(brief);
    let title_source = if title.is_some() { TitleSource::Agent } else { TitleSource::System };
    let title = title.unwrap_or_else(|| super::message::run_title(&brief));
    let (child_session, event) =
        new_session(conn, owner, agent_id, Some(session_id), &title, title_source, brief, now)?;
    let input = BTreeMap::from([
        ("kind".to_owned(), Ipld::String("session-message".into())),
        ("userEventIds".to_owned(), Ipld::List(vec![Ipld::String(event.id.to_string())])),
    ]);
    let run = NewRun {
        account_id: owner.to_owned(),
        agent_id: agent_id.to_owned(),
        session_id: child_session.clone(),
        origin: "agent",
        title: Some(title.clone()),
        input: Ipld::Map(input),
        queue: Queue::Background,
        max_attempts: CHILD_MAX_ATTEMPTS,
        parent_run_id: Some(run_id.to_owned()),
    };
    let mut changes = Changes::default();
    enqueue(conn, &run, now, &mut changes)?;
    Ok(Spawned {
        session_id: child_session,
        run_id: None,
        title,
        agent_id: agent_id.to_owned(),
        events: vec![event],
        changes,
    })
}

/// What `return_result` came to for this execution.
#[derive(Debug, Default)]
pub(crate) struct Typed {
    /// Failed calls so far.
    pub failures: u32,
    /// The accepted payload.
    pub delivered: Option<Json>,
    /// The attempt limit was reached.
    pub rejected: bool,
}

/// Runs `return_result` with `payload` for a child typed by `schema`.
pub(crate) fn return_result(typed: &std::sync::Mutex<Typed>, schema: &Json, payload: &Json) -> Result<Json, String> {
    let mut typed = typed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if typed.delivered.is_some() {
        return Ok(json!({"accepted": true}));
    }
    let errors = payload_errors(schema, payload);
    if errors.is_empty() {
        typed.delivered = Some(payload.clone());
        return Ok(json!({"accepted": true}));
    }
    typed.failures += 1;
    let detail = errors.join("; ");
    if typed.failures >= MAX_RESULT_FAILURES {
        typed.rejected = true;
        return Err(format!("Result rejected (attempt limit reached): {detail}"));
    }
    Err(format!("Result does not match the required schema: {detail}. Fix and call return_result again."))
}

#[cfg(test)]
mod tests {
    use crate::db::params;

    use super::*;

    #[test]
    fn inputs_normalise_with_upstreams_messages() {
        let spec = normalize(&json!({"brief": "Find it", "title": "Finder"})).unwrap();
        assert_eq!((spec.input, spec.title.as_deref()), (json!("Find it"), Some("Finder")));
        let spec = normalize(&json!({"prompt": "Do the thing"})).unwrap();
        assert_eq!((spec.input, spec.prompt), (json!("Do the thing"), None), "a lone prompt is the brief");
        let spec = normalize(&json!({"brief": "b", "prompt": "You are terse."})).unwrap();
        assert_eq!(spec.prompt.as_deref(), Some("You are terse."));
        assert_eq!(normalize(&json!({})).unwrap_err().message(), NO_BRIEF);
        assert_eq!(
            normalize(&json!({"brief": "b", "prompt": "p", "agentId": "a"})).unwrap_err().message(),
            "Provide either prompt or agentId, not both"
        );
        let error = normalize(&json!({"brief": "b", "output": {"type": "array", "pattern": "x"}})).unwrap_err();
        assert_eq!(
            error.message(),
            "output schema is not supported: $.type: the root must be type \"object\" — wrap arrays/scalars in a \
             named property; $.pattern: unsupported schema keyword"
        );
        let error =
            normalize(&json!({"brief": "b", "output": {"type": "object", "properties": {"n": {"type": "int"}}}}))
                .unwrap_err();
        assert_eq!(error.message(), "output schema is not supported: $.properties.n.type: unknown type \"int\"");
    }

    /// A database with agent `a` of `owner`, session `s` and its run `r` at `depth`.
    fn db(depth: i64) -> Connection {
        let conn = crate::db::migrated_in_memory();
        conn.execute_batch(
            "INSERT INTO agents (id, account_id, definition_cbor, state_dir, status, created_at, updated_at)
                 VALUES ('a', 'owner', x'a0', '/tmp/a', 'active', 1, 1);
             INSERT INTO sessions (id, account_id, agent_id, title_source, status, created_at, updated_at)
                 VALUES ('s', 'owner', 'a', 'system', 'idle', 1, 1);",
        )
        .unwrap();
        conn.execute(
            "INSERT INTO runs (id, account_id, root_run_id, depth, kind, origin, agent_id, session_id, input_cbor,
                               status, created_at, updated_at)
             VALUES ('r', 'owner', 'r', ?1, 'agent', 'user', 'a', 's', x'a0', 'running', 1, 1)",
            params![depth],
        )
        .unwrap();
        conn
    }

    fn spec(brief: &str) -> Spec {
        normalize(&json!({ "brief": brief })).unwrap()
    }

    #[test]
    fn a_workflows_child_is_found_again_by_the_call_it_answers() {
        let conn = db(0);
        let spawned =
            spawn_for_workflow(&conn, "r", Some("s"), "a", "owner", "workflow-call-3", spec("x"), 5).ok().unwrap();
        let found = crate::runs::store::child_answering(&conn, "r", "workflow-call-3").unwrap();
        assert_eq!(found, Some((spawned.run_id.clone().unwrap(), Some(spawned.session_id.clone()))));
        assert_eq!(crate::runs::store::child_answering(&conn, "r", "workflow-call-4").unwrap(), None);
    }

    #[test]
    fn depth_and_spawn_limits_refuse_with_upstreams_messages() {
        let conn = db(3);
        let error = spawn_child(&conn, "r", Some("s"), "a", "owner", "c", spec("x"), MAX_SPAWNS, 5).err().unwrap();
        assert_eq!(error.message(), "Sub-session depth limit reached (3); finish the work here.");
        let conn = db(2);
        let spawned = spawn_child(&conn, "r", Some("s"), "a", "owner", "c0", spec("First line\nmore"), MAX_SPAWNS, 5)
            .ok()
            .unwrap();
        assert_eq!(spawned.title, "First line");
        let (depth, call): (i64, String) = conn
            .query_row("SELECT depth, parent_tool_call_id FROM runs WHERE parent_run_id = 'r'", [], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .unwrap();
        assert_eq!((depth, call.as_str()), (3, "c0"));
        for index in 1..10 {
            spawn_child(&conn, "r", Some("s"), "a", "owner", &format!("c{index}"), spec("x"), MAX_SPAWNS, 5)
                .ok()
                .unwrap();
        }
        let error = spawn_child(&conn, "r", Some("s"), "a", "owner", "c10", spec("x"), MAX_SPAWNS, 5).err().unwrap();
        assert_eq!(error.message(), "This run already spawned 10 sub-sessions; finish the remaining work here.");
        let other = normalize(&json!({"brief": "x", "agentId": "nobody"})).unwrap();
        let conn = db(0);
        assert_eq!(
            spawn_child(&conn, "r", Some("s"), "a", "owner", "c", other, MAX_SPAWNS, 5).err().unwrap().message(),
            "Agent not found"
        );
    }

    #[test]
    fn detached_chains_stop_at_three_sessions_and_ten_starts() {
        let conn = db(0);
        let brief = json!("Side job");
        let mut session = "s".to_owned();
        for _ in 0..3 {
            session = spawn_detached(&conn, "r", &session, "a", "owner", &brief, None, 5).ok().unwrap().session_id;
        }
        let error = spawn_detached(&conn, "r", &session, "a", "owner", &brief, None, 5).err().unwrap();
        assert_eq!(
            error.message(),
            "Session spawn chain limit reached (3); this session was itself started by a chain of agent-started \
             sessions. Finish the work here instead."
        );
        for _ in 1..10 {
            spawn_detached(&conn, "r", "s", "a", "owner", &brief, Some("Named".into()), 5).ok().unwrap();
        }
        let error = spawn_detached(&conn, "r", "s", "a", "owner", &brief, None, 5).err().unwrap();
        assert_eq!(
            error.message(),
            "This session already started 10 sessions; finish the remaining work here instead."
        );
    }

    #[test]
    fn payloads_are_checked_with_paths_and_the_third_failure_is_final() {
        let schema = json!({"type": "object", "properties": {"items": {"type": "array", "items": {"type": "integer"}}},
                            "required": ["items"]});
        assert!(payload_errors(&schema, &json!({"items": [1, 2]})).is_empty());
        let errors = payload_errors(&schema, &json!({"items": [1, "x"]}));
        assert_eq!(errors.len(), 1);
        assert!(errors[0].starts_with("$.items[1]: "), "{errors:?}");
        let typed = std::sync::Mutex::new(Typed::default());
        let first = return_result(&typed, &schema, &json!({})).unwrap_err();
        assert!(first.starts_with("Result does not match the required schema: $: "), "{first}");
        assert!(first.ends_with(". Fix and call return_result again."), "{first}");
        return_result(&typed, &schema, &json!({})).unwrap_err();
        let last = return_result(&typed, &schema, &json!({})).unwrap_err();
        assert!(last.starts_with("Result rejected (attempt limit reached): "), "{last}");
        assert!(typed.lock().unwrap().rejected);
    }
}
