//! Agent tools (docs/runtime.md §4.4–§4.6): the callables an agent reaches through `call`, their
//! contracts as content-addressed tool documents, and the `*AgentTool*` actions.
//!
//! [`registry`] lists the callables and decides grants; [`document`](mod@document) builds, checks and
//! content-addresses documents; [`store`] keeps them in `tool_documents`; [`schema`] is the JSON
//! Schema subset contracts use; [`search`], [`web_search`] and [`execute`] run those three
//! callables (`query` and `attributes` run with the Hypermedia reads in `verbs`).
//!
//! Builtin documents are written for an agent before anything lists or reads its tools, and
//! rewritten only when this build's CID differs from the stored one. Lambdas (authored tools) can
//! be saved, listed, read and deleted; for an agent granted `execute` they run ([`lambda`]: python
//! in the code sandbox, TypeScript in a QuickJS realm, [`typescript`]) and are offered to its
//! model as tools of their own; their `granted` is true in listings, as upstream reports it. MCP documents are projected from the
//! owner's MCP servers for the agents granted them (`mcp::project`) and run through `mcp`.

pub(crate) mod document;
pub(crate) mod execute;
pub(crate) mod lambda;
pub(crate) mod registry;
pub(crate) mod schema;
pub(crate) mod search;
pub(crate) mod store;
pub(crate) mod typescript;
pub(crate) mod web_search;

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    AgentDefinition, AgentToolInfo, AgentToolInfoKind, AgentToolInfoRuntime, AgentToolInputRuntime, DeleteAgentTool,
    DeleteAgentToolResponse, ListAgentTools, ListAgentToolsResponse, SaveAgentTool, SaveAgentToolResponse,
};
use seed_agents_protocol::{Value, wire};
use serde_json::{Map, Value as Json};

use crate::access::{self, Need};
use crate::agents::store as agent_rows;
use crate::app::App;
use crate::bus::ChangeReason;
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};
use document::{Kind, LambdaInput, Runtime, ToolDocument};
use registry::Callable;
use store::Stored;

/// Where lambdas run (a note in their contracts, the `~/tools` listing and a save's answer).
pub(crate) const LAMBDA_RUNTIMES: &str = "Lambda tools run for agents granted execute: python lambdas in the code \
                                          sandbox with memory as their workspace, TypeScript lambdas in a JavaScript \
                                          realm with no file or network access.";

/// The longest tool name accepted before the name rules apply, in bytes.
const MAX_NAME_BYTES: usize = 256;

/// Writes the agent's builtin documents when this build's differ from the stored ones (a read
/// first, so the writer is taken only after an upgrade or for a new agent).
pub(crate) async fn ensure_builtins(app: &App, owner_id: &str, agent_id: &str) -> ApiResult<()> {
    let (owner, agent) = (owner_id.to_owned(), agent_id.to_owned());
    let stale = app.db.read(move |conn| store::builtins_stale(conn, &owner, &agent)).await?;
    if stale {
        let (owner, agent, now) = (owner_id.to_owned(), agent_id.to_owned(), app.clock.now_ms());
        app.db.write(move |conn| store::ensure_builtins(conn, &owner, &agent, now)).await?;
    }
    Ok(())
}

/// Every document of the agent (builtins ensured first), by name.
pub(crate) async fn documents(app: &App, owner_id: &str, agent_id: &str) -> ApiResult<Vec<Stored>> {
    ensure_builtins(app, owner_id, agent_id).await?;
    let (owner, agent) = (owner_id.to_owned(), agent_id.to_owned());
    app.db.read(move |conn| store::list(conn, &owner, &agent)).await
}

/// The document called `name` (builtins ensured first).
pub(crate) async fn document(app: &App, owner_id: &str, agent_id: &str, name: &str) -> ApiResult<Option<Stored>> {
    ensure_builtins(app, owner_id, agent_id).await?;
    let (owner, agent, name) = (owner_id.to_owned(), agent_id.to_owned(), name.to_owned());
    app.db.read(move |conn| store::get(conn, &owner, &agent, &name)).await
}

/// Whether `stored` is offered to the agent: a builtin in its grants, a tool of an MCP server
/// its definition names, or a lambda that runs here ([`lambda_runs`]).
pub(crate) fn is_granted(stored: &Stored, granted: &[Callable], definition: &AgentDefinition) -> bool {
    match stored.document.kind {
        Kind::Builtin => Callable::named(&stored.document.name).is_some_and(|callable| granted.contains(&callable)),
        Kind::Mcp => mcp_granted(&stored.document, definition),
        Kind::Lambda => lambda_runs(&stored.document, granted),
    }
}

/// Whether lambda `document` runs for an agent granted `granted`: any lambda of an agent granted
/// `execute` (granted only where code execution is available; a python lambda runs in the
/// sandbox, whose probe found python, a TypeScript one in a QuickJS realm).
pub(crate) fn lambda_runs(_document: &ToolDocument, granted: &[Callable]) -> bool {
    granted.contains(&Callable::Execute)
}

/// The enabled lambdas of `agent` that run for it, as the model's tools (their input schemas as
/// parameters).
pub(crate) fn offered_lambdas(
    conn: &crate::db::Connection,
    owner: &str,
    agent: &str,
    granted: &[Callable],
) -> ApiResult<Vec<crate::model::ToolSpec>> {
    if !granted.contains(&Callable::Execute) {
        return Ok(Vec::new());
    }
    Ok(store::list(conn, owner, agent)?
        .into_iter()
        .filter(|stored| stored.enabled && stored.document.kind == Kind::Lambda)
        .filter(|stored| lambda_runs(&stored.document, granted))
        .map(|stored| crate::model::ToolSpec {
            name: stored.document.name,
            description: stored.document.description,
            parameters: stored.document.input.into(),
        })
        .collect())
}

/// `granted` as `ListAgentTools` shows it: [`is_granted`], and always for a lambda (the seed's
/// "Lambdas: always true", whether or not this host runs it).
pub(crate) fn listed_as_granted(stored: &Stored, granted: &[Callable], definition: &AgentDefinition) -> bool {
    stored.document.kind == Kind::Lambda || is_granted(stored, granted, definition)
}

/// Whether an MCP tool's server is among the definition's `mcpServers`.
pub(crate) fn mcp_granted(document: &ToolDocument, definition: &AgentDefinition) -> bool {
    let Some(server) = &document.server else { return false };
    definition.mcp_servers.as_ref().is_some_and(|names| names.contains(server))
}

/// `ListAgentTools {agentId}` (reader): every document with its CID and whether it is granted.
pub(crate) async fn list_agent_tools(
    app: &App,
    caller: &Caller,
    action: ListAgentTools,
) -> ApiResult<ListAgentToolsResponse> {
    let agent_id = action.agent_id.clone();
    let (access, definition) = access::read(app, caller, agent_id, Need::Read, move |conn, access| {
        let definition = agent_rows::load_info(conn, &access.agent_id, access.role)?.definition;
        Ok((access, definition))
    })
    .await?;
    let granted = granted(app, &definition);
    let tools = documents(app, &access.owner_id, &access.agent_id)
        .await?
        .iter()
        .map(|stored| info(stored, listed_as_granted(stored, &granted, &definition)))
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(ListAgentToolsResponse { extra: Default::default(), agent_id: access.agent_id.into(), tools })
}

/// `SaveAgentTool {agentId, tool, previousName?}` (writer): creates a lambda, or replaces
/// `previousName` (renaming it atomically, keeping its `createdAt`). 404 when `previousName` is
/// missing, 400 for a builtin, 409 when another tool already has the name.
pub(crate) async fn save_agent_tool(
    app: &App,
    caller: &Caller,
    action: SaveAgentTool,
) -> ApiResult<SaveAgentToolResponse> {
    let previous = action.previous_name.as_deref().map(|name| bounded_name(name, "Previous tool name")).transpose()?;
    let tool = action.tool;
    let raw = LambdaInput {
        name: bounded_name(&tool.name, "Tool name")?,
        description: Some(tool.description),
        summary: tool.summary,
        input: Some(json_of(tool.input)?),
        output: tool.output.map(json_of).transpose()?,
        source: Some(tool.source),
        runtime: Some(
            match tool.runtime {
                AgentToolInputRuntime::Python => "python",
                AgentToolInputRuntime::Typescript => "typescript",
            }
            .to_owned(),
        ),
    };
    let (agent_id, now) = (action.agent_id, app.clock.now_ms());
    let (access, saved) = access::write(app, caller, agent_id, Need::Write, move |conn, access| {
        let (owner, agent) = (access.owner_id.as_str(), access.agent_id.as_str());
        store::ensure_builtins(conn, owner, agent, now)?;
        let before = match &previous {
            Some(name) => match store::get(conn, owner, agent, name)? {
                None => return Err(ApiError::not_found(format!("Tool \"{name}\" not found"))),
                Some(stored) if stored.document.kind == Kind::Builtin => {
                    return Err(ApiError::invalid("Builtin tools cannot be edited"));
                }
                Some(stored) if stored.document.kind == Kind::Mcp => {
                    return Err(ApiError::invalid("MCP tools cannot be edited"));
                }
                Some(stored) => Some(stored),
            },
            None => None,
        };
        if previous.as_deref() != Some(raw.name.as_str()) && store::get(conn, owner, agent, &raw.name)?.is_some() {
            return Err(ApiError::conflict(format!("A tool named \"{}\" already exists", raw.name)));
        }
        let document = ToolDocument::lambda(raw)?;
        store::put_lambda(conn, owner, agent, &document, now)?;
        if let (Some(before), Some(previous)) = (before, &previous)
            && *previous != document.name
        {
            store::set_created_at(conn, owner, agent, &document.name, before.created_at)?;
            store::delete(conn, owner, agent, previous)?;
        }
        let saved = store::get(conn, owner, agent, &document.name)?
            .ok_or_else(|| ApiError::internal("a saved tool document is missing"))?;
        Ok((access, saved))
    })
    .await?;
    changed(app, &access.owner_id, &access.agent_id);
    Ok(SaveAgentToolResponse { extra: Default::default(), agent_id: access.agent_id.into(), tool: info(&saved, true)? })
}

/// `DeleteAgentTool {agentId, name}` (writer): deletes a lambda; `deleted: false` when there is
/// none; 400 for a builtin.
pub(crate) async fn delete_agent_tool(
    app: &App,
    caller: &Caller,
    action: DeleteAgentTool,
) -> ApiResult<DeleteAgentToolResponse> {
    let name = bounded_name(&action.name, "Tool name")?;
    let (agent_id, deleting) = (action.agent_id, name.clone());
    let (access, deleted) = access::write(app, caller, agent_id, Need::Write, move |conn, access| {
        let deleted = delete_lambda(conn, &access.owner_id, &access.agent_id, &deleting)?;
        Ok((access, deleted))
    })
    .await?;
    if deleted {
        changed(app, &access.owner_id, &access.agent_id);
    }
    Ok(DeleteAgentToolResponse { extra: Default::default(), agent_id: access.agent_id.into(), deleted, name })
}

/// Deletes the lambda `name`: whether there was one; 400 for a builtin's name.
pub(crate) fn delete_lambda(conn: &crate::db::Connection, owner: &str, agent: &str, name: &str) -> ApiResult<bool> {
    let builtin = match store::get(conn, owner, agent, name)? {
        Some(stored) if stored.document.kind == Kind::Mcp => {
            return Err(ApiError::invalid(format!(
                "\"{name}\" is a tool of an MCP server; remove the server from the agent's mcpServers instead"
            )));
        }
        Some(stored) => stored.document.kind == Kind::Builtin,
        None => Callable::named(name).is_some(),
    };
    if builtin {
        return Err(ApiError::invalid(format!(
            "\"{name}\" is a builtin tool; disable it via the agent's tool grants instead"
        )));
    }
    store::delete(conn, owner, agent, name)
}

/// Tells the owner and members the agent's tools changed.
pub(crate) fn changed(app: &App, owner_id: &str, agent_id: &str) {
    app.bus.account_change(owner_id, ChangeReason::AgentToolsChanged, Some(agent_id), None);
}

/// The callables granted to an agent of `definition` on this server.
pub(crate) fn granted(app: &App, definition: &AgentDefinition) -> Vec<Callable> {
    registry::granted(backends(app), definition)
}

/// Which callables that need a backend have one here.
pub(crate) fn backends(app: &App) -> registry::Backends {
    registry::Backends { web_search: app.config.searxng_url.is_some(), execute: app.sandbox.availability().available }
}

/// A stored document as the protocol shows it.
pub(crate) fn info(stored: &Stored, granted: bool) -> ApiResult<AgentToolInfo> {
    let document = &stored.document;
    Ok(AgentToolInfo {
        extra: Default::default(),
        cid: stored.cid.clone(),
        created_at: stored.created_at,
        description: document.description.clone(),
        enabled: stored.enabled,
        granted,
        input: map_of(&document.input)?,
        kind: match document.kind {
            Kind::Builtin => AgentToolInfoKind::Builtin,
            Kind::Lambda => AgentToolInfoKind::Lambda,
            Kind::Mcp => AgentToolInfoKind::Mcp,
        },
        name: document.name.clone(),
        output: document.output.as_ref().map(map_of).transpose()?,
        remote_name: document.remote_name.clone(),
        runtime: document.runtime.map(|runtime| match runtime {
            Runtime::Python => AgentToolInfoRuntime::Python,
            Runtime::Typescript => AgentToolInfoRuntime::Typescript,
        }),
        server: document.server.clone(),
        source: document.source.clone(),
        summary: document.summary.clone(),
        updated_at: stored.updated_at,
    })
}

/// A trimmed name of at most [`MAX_NAME_BYTES`] (400 `<label> is required` / `… is too long`).
fn bounded_name(name: &str, label: &str) -> ApiResult<String> {
    let name = name.trim();
    if name.is_empty() {
        return Err(ApiError::invalid(format!("{label} is required")));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(ApiError::invalid(format!("{label} is too long")));
    }
    Ok(name.to_owned())
}

/// An open map from the wire as JSON.
fn json_of(map: BTreeMap<String, Value>) -> ApiResult<Json> {
    serde_json::to_value(&map).map_err(|error| ApiError::invalid(format!("Tool schema is not JSON: {error}")))
}

/// A JSON object as an open map for the wire.
fn map_of(json: &Json) -> ApiResult<BTreeMap<String, Value>> {
    match wire::json_to_ipld(json) {
        Ipld::Map(fields) => Ok(fields.into_iter().map(|(key, value)| (key, Value(value))).collect()),
        _ => Err(ApiError::internal("a tool schema is not an object")),
    }
}

/// The fields of a callable's input (a non-object reads as empty).
fn fields(input: &Json) -> Map<String, Json> {
    input.as_object().cloned().unwrap_or_default()
}

/// Upstream's `boundedInteger`: a finite number floored and clamped to `min..=max`, else
/// `fallback`.
fn bounded(value: Option<&Json>, fallback: u32, min: u32, max: u32) -> u32 {
    match value.and_then(Json::as_f64).filter(|number| number.is_finite()) {
        Some(number) => number.floor().clamp(f64::from(min), f64::from(max)) as u32,
        None => fallback,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn bounded_integers_floor_clamp_or_fall_back() {
        assert_eq!(bounded(None, 20, 1, 50), 20);
        assert_eq!(bounded(Some(&json!(7.9)), 20, 1, 50), 7);
        assert_eq!(bounded(Some(&json!(500)), 20, 1, 50), 50);
        assert_eq!(bounded(Some(&json!(-3)), 20, 1, 50), 1);
        assert_eq!(bounded(Some(&json!("9")), 20, 1, 50), 20);
    }
}
