//! MCP servers (docs/protocol.md §G.5): an account's servers, the four `*McpServer*` actions,
//! and running their tools for the agents granted them.
//!
//! A server record is an [`McpServerConfig`] under `(account, name)`: a URL, a transport or none
//! (Streamable HTTP, then SSE), plain headers and headers filled from account secrets. The
//! record never holds a secret: `secretRefs` name secrets, which are opened in memory only to
//! build a connection's headers, marked sensitive, never logged. Listings show header names only.
//!
//! `SetMcpServer` saves first, then discovers (connects and lists the tools) and records the
//! outcome, so a server that is down is still saved, with `state: 'error'` and the reason.
//! [`project`] turns the tools into `kind: 'mcp'` tool documents for every agent whose
//! `mcpServers` names the server; [`run_tool`] runs one for a model pass or a user's `call`.
//! [`client`] holds the connection and its limits; [`sse`] the legacy SSE transport.

pub(crate) mod client;
pub(crate) mod project;
mod sse;
pub(crate) mod store;

use std::collections::{BTreeMap, HashMap};

use crate::db::Connection;
use base64::Engine as _;
use reqwest::Url;
use reqwest::header::{HeaderName, HeaderValue};
use seed_agents_protocol::generated::{
    DeleteMcpServer, DeleteMcpServerResponse, ListMcpServers, ListMcpServersResponse, McpServerConfig, McpServerStatus,
    McpServerStatusState, McpServerTransport, McpToolInfo, RedactedMcpServer, RefreshMcpServer, SetMcpServer,
    SetMcpServerResponse,
};
use seed_agents_protocol::{Value, wire};
use serde::Serialize;
use serde_json::{Map, Value as Json};
use zeroize::Zeroizing;

use crate::agents;
use crate::app::App;
use crate::bus::{ChangeReason, Event};
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::memory::guard;
use crate::secrets;
use crate::tools::document::ToolDocument;
use crate::validate::{MAX_NAME_BYTES, bounded_string, is_slug};
use client::{CallFailure, Endpoint};
use store::{Discovery, ServerRow, ServerTool};

/// The 404 for a server name the account does not have.
pub(crate) const SERVER_NOT_FOUND: &str = "MCP server not found";
/// The most headers of each kind (plain, from secrets).
pub(crate) const MAX_HEADERS: usize = 16;
/// The largest plain header value, in bytes.
pub(crate) const MAX_HEADER_VALUE_BYTES: usize = 4 * 1024;
/// The longest URL, in bytes.
pub(crate) const MAX_URL_BYTES: usize = 2048;
/// The most text a tool result keeps, in bytes (the durable output; the model sees less).
pub(crate) const MAX_RESULT_TEXT_BYTES: usize = 256 * 1024;

/// `ListMcpServers`: the caller's servers by name, redacted.
pub(crate) async fn list_mcp_servers(
    app: &App,
    caller: &Caller,
    _action: ListMcpServers,
) -> ApiResult<ListMcpServersResponse> {
    let account = caller.account_id.clone();
    let rows = app.db.read(move |conn| store::load_all(conn, &account)).await?;
    Ok(ListMcpServersResponse { extra: Default::default(), servers: rows.into_iter().map(redact).collect() })
}

/// `SetMcpServer {name, config}`: validates, saves (keeping an existing record's id, creation
/// time, tools and status), then discovers and answers what it found.
pub(crate) async fn set_mcp_server(
    app: &App,
    caller: &Caller,
    action: SetMcpServer,
) -> ApiResult<SetMcpServerResponse> {
    let name = server_name(&action.name)?;
    let config = check_config(action.config, app.config.allow_private_network)?;
    let (account, now) = (caller.account_id.clone(), app.clock.now_ms());
    let saving = name.clone();
    app.db.write(move |conn| store::upsert_config(conn, &account, &saving, &config, now).map(drop)).await?;
    let server = discover(app, &caller.account_id, &name).await?;
    Ok(SetMcpServerResponse { extra: Default::default(), server })
}

/// `RefreshMcpServer {name}`: discovers again (404 for an unknown name).
pub(crate) async fn refresh_mcp_server(
    app: &App,
    caller: &Caller,
    action: RefreshMcpServer,
) -> ApiResult<SetMcpServerResponse> {
    let name = bounded_string(&action.name, "MCP server name", MAX_NAME_BYTES)?;
    let server = discover(app, &caller.account_id, &name).await?;
    Ok(SetMcpServerResponse { extra: Default::default(), server })
}

/// `DeleteMcpServer {name}`: in one transaction deletes the record, the `mcp-<name>-…` secrets
/// it references that no other server of the account references, the name from every agent's
/// `mcpServers`, and those agents' documents of its tools.
pub(crate) async fn delete_mcp_server(
    app: &App,
    caller: &Caller,
    action: DeleteMcpServer,
) -> ApiResult<DeleteMcpServerResponse> {
    let name = bounded_string(&action.name, "MCP server name", MAX_NAME_BYTES)?;
    let (account, now, deleting) = (caller.account_id.clone(), app.clock.now_ms(), name.clone());
    let regranted = app
        .db
        .write(move |conn| {
            let row = store::load(conn, &account, &deleting)?.ok_or_else(|| ApiError::not_found(SERVER_NOT_FOUND))?;
            store::delete(conn, &account, &deleting)?;
            delete_owned_secrets(conn, &account, &row)?;
            let mut regranted = Vec::new();
            for (agent_id, mut definition) in agents::store::owned_definitions(conn, &account)? {
                let Some(names) = definition.mcp_servers.as_mut() else { continue };
                if !names.contains(&deleting) {
                    continue;
                }
                names.retain(|granted| *granted != deleting);
                agents::store::set_definition(conn, &agent_id, &definition, now)?;
                project::sync_agent(conn, &account, &agent_id, &definition, now)?;
                regranted.push(agent_id);
            }
            Ok(regranted)
        })
        .await?;
    app.bus.account_change(&caller.account_id, ChangeReason::McpServersChanged, None, None);
    for agent_id in &regranted {
        app.bus.publish(Event::AgentChanged { agent_id: agent_id.clone() });
        app.bus.account_change(&caller.account_id, ChangeReason::AgentUpdated, Some(agent_id), None);
        crate::tools::changed(app, &caller.account_id, agent_id);
    }
    Ok(DeleteMcpServerResponse { extra: Default::default(), name })
}

/// Discovers server `name` of `account`, records the outcome, re-projects the agents granted
/// it, and announces the changes; the server as answered.
async fn discover(app: &App, account: &str, name: &str) -> ApiResult<RedactedMcpServer> {
    let (owner, lookup) = (account.to_owned(), name.to_owned());
    let row = app
        .db
        .read(move |conn| store::load(conn, &owner, &lookup))
        .await?
        .ok_or_else(|| ApiError::not_found(SERVER_NOT_FOUND))?;
    let found = match endpoint(app, account, &row).await {
        Err(reason) => Err(reason),
        Ok(endpoint) => client::discover(&endpoint).await,
    };
    let checked_at = app.clock.now_ms();
    let discovery = match found {
        Ok((transport, listed)) => {
            let tools = listed
                .into_iter()
                .map(|tool| ServerTool {
                    name: tool.name,
                    description: tool.description,
                    input: Value(wire::json_to_ipld(&tool.input)),
                })
                .collect();
            Discovery {
                state: McpServerStatusState::Ok,
                error: None,
                transport: Some(transport),
                tools: Some(tools),
                checked_at,
            }
        }
        Err(reason) => {
            tracing::info!(server = %name, %reason, "MCP server discovery failed");
            Discovery {
                state: McpServerStatusState::Error,
                error: Some(reason),
                transport: None,
                tools: None,
                checked_at,
            }
        }
    };
    let (owner, recording) = (account.to_owned(), name.to_owned());
    let (row, changed) = app
        .db
        .write(move |conn| {
            if !store::record_discovery(conn, &owner, &recording, &discovery)? {
                return Err(ApiError::not_found(SERVER_NOT_FOUND));
            }
            let changed = project::sync_granted(conn, &owner, &recording, checked_at)?;
            let row = store::load(conn, &owner, &recording)?.ok_or_else(|| ApiError::not_found(SERVER_NOT_FOUND))?;
            Ok((row, changed))
        })
        .await?;
    app.bus.account_change(account, ChangeReason::McpServersChanged, None, None);
    for agent_id in &changed {
        crate::tools::changed(app, account, agent_id);
    }
    Ok(redact(row))
}

/// What does not fit an MCP tool's input schema, one `<path>: <message>` per problem. A schema
/// this server cannot compile is left to the MCP server to enforce.
pub(crate) fn input_errors(schema: &Json, arguments: &Json) -> Vec<String> {
    match jsonschema::validator_for(schema) {
        Err(_) => Vec::new(),
        Ok(validator) => validator
            .iter_errors(arguments)
            .map(|error| {
                let path = error.instance_path().to_string();
                format!("${}: {error}", path.replace('/', "."))
            })
            .collect(),
    }
}

/// The provider tools of the agent's MCP documents: enabled, and of a server `definition`
/// grants.
pub(crate) fn offered(
    conn: &Connection,
    owner: &str,
    agent_id: &str,
    definition: &seed_agents_protocol::generated::AgentDefinition,
) -> ApiResult<Vec<crate::model::ToolSpec>> {
    Ok(crate::tools::store::list_mcp(conn, owner, agent_id)?
        .into_iter()
        .filter(|stored| stored.enabled && crate::tools::mcp_granted(&stored.document, definition))
        .map(|stored| crate::model::ToolSpec {
            name: stored.document.name,
            description: stored.document.description,
            parameters: stored.document.input.into(),
        })
        .collect())
}

/// What [`run_tool`] hands back: the one-line summary, the output and images for the model.
#[derive(Debug)]
pub(crate) struct Called {
    /// One line for the log.
    pub summary: String,
    /// The output object (without `summary`).
    pub output: Json,
    /// Images the tool returned.
    pub images: Vec<crate::model::Image>,
}

/// Runs the MCP tool `document` of `owner`'s server with `arguments` (already checked against
/// its schema). A server that cannot be reached, a call that fails or times out, and a result
/// the tool marks as an error all come back as an error whose message the model reads.
pub(crate) async fn run_tool(app: &App, owner: &str, document: &ToolDocument, arguments: Json) -> ApiResult<Called> {
    let (Some(server), Some(remote)) = (document.server.clone(), document.remote_name.clone()) else {
        return Err(ApiError::internal("an MCP tool document without its server"));
    };
    let (account, lookup) = (owner.to_owned(), server.clone());
    let row = app.db.read(move |conn| store::load(conn, &account, &lookup)).await?.ok_or_else(|| {
        ApiError::not_found(format!("The MCP server {server} of tool {} no longer exists", document.name))
    })?;
    let mut endpoint = endpoint(app, owner, &row)
        .await
        .map_err(|reason| ApiError::upstream(format!("MCP server {server} could not be reached: {reason}")))?;
    endpoint.transport = row.transport.or(row.config.transport);
    let arguments = match arguments {
        Json::Object(fields) => fields,
        _ => Map::new(),
    };
    let result =
        client::call(&endpoint, &remote, arguments, app.config.mcp_call_timeout).await.map_err(
            |failure| match failure {
                CallFailure::Unreachable(reason) => {
                    ApiError::upstream(format!("MCP server {server} could not be reached: {reason}"))
                }
                CallFailure::TimedOut(after) => ApiError::new(
                    ErrorKind::TimedOut,
                    format!("MCP tool {remote} of server {server} did not answer within {}s", after.as_secs_f64()),
                ),
                CallFailure::Failed(reason) => {
                    ApiError::upstream(format!("MCP tool {remote} of server {server} failed: {reason}"))
                }
            },
        )?;
    result_of(&server, &remote, &result)
}

/// A `tools/call` result as the tool's output: text parts joined (bounded), embedded text
/// resources appended, images handed to the model, links and binary resources listed; an
/// `isError` result is an error with its text.
fn result_of(server: &str, remote: &str, result: &Json) -> ApiResult<Called> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Part {
        #[serde(rename = "type")]
        kind: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        uri: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        size: Option<usize>,
    }
    let text_of = |value: &Json, key: &str| value.get(key).and_then(Json::as_str).map(str::to_owned);
    let mut text = String::new();
    let mut parts = Vec::new();
    let mut images = Vec::new();
    let push_text = |text: &mut String, more: &str| {
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        text.push_str(more);
    };
    for item in result.get("content").and_then(Json::as_array).into_iter().flatten() {
        let kind = text_of(item, "type").unwrap_or_default();
        match kind.as_str() {
            "text" => push_text(&mut text, &text_of(item, "text").unwrap_or_default()),
            "image" => {
                let mime = text_of(item, "mimeType").unwrap_or_else(|| "image/png".to_owned());
                let data = text_of(item, "data")
                    .and_then(|data| base64::engine::general_purpose::STANDARD.decode(data.as_bytes()).ok());
                let size = data.as_ref().map(Vec::len);
                if let Some(data) = data {
                    images.push(crate::model::Image { mime: mime.clone(), data });
                }
                parts.push(Part { kind, uri: None, mime_type: Some(mime), size });
            }
            "resource" => {
                let resource = item.get("resource").cloned().unwrap_or(Json::Null);
                let uri = text_of(&resource, "uri");
                match text_of(&resource, "text") {
                    Some(body) => push_text(&mut text, &format!("[{}]\n{body}", uri.as_deref().unwrap_or("resource"))),
                    None => {
                        let size = text_of(&resource, "blob").map(|blob| blob.len() / 4 * 3);
                        parts.push(Part { kind, uri, mime_type: text_of(&resource, "mimeType"), size });
                    }
                }
            }
            _ => parts.push(Part { kind, uri: text_of(item, "uri"), mime_type: text_of(item, "mimeType"), size: None }),
        }
    }
    if text.len() > MAX_RESULT_TEXT_BYTES {
        let mut end = MAX_RESULT_TEXT_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("\n[truncated]");
    }
    if result.get("isError").and_then(Json::as_bool) == Some(true) {
        let reason = if text.is_empty() { "no details".to_owned() } else { text };
        return Err(ApiError::upstream(format!("MCP tool {remote} of server {server} reported an error: {reason}")));
    }
    let mut output = Map::new();
    output.insert("server".to_owned(), Json::String(server.to_owned()));
    output.insert("tool".to_owned(), Json::String(remote.to_owned()));
    output.insert("text".to_owned(), Json::String(text));
    if !parts.is_empty() {
        output.insert("parts".to_owned(), serde_json::to_value(&parts).map_err(ApiError::internal)?);
    }
    if let Some(structured) = result.get("structuredContent").filter(|value| !value.is_null()) {
        let bytes = serde_json::to_vec(structured).map(|bytes| bytes.len()).unwrap_or(usize::MAX);
        if bytes <= MAX_RESULT_TEXT_BYTES {
            output.insert("structuredContent".to_owned(), structured.clone());
        }
    }
    let shown = if images.is_empty() { String::new() } else { format!(", {} image(s)", images.len()) };
    Ok(Called { summary: format!("Ran {remote} on MCP server {server}{shown}."), output: Json::Object(output), images })
}

/// The connection settings of `row`: its URL, configured transport, and headers (secret ones
/// opened from the account's secrets, in memory only). The reason when a secret is missing or
/// not a header value.
async fn endpoint(app: &App, account: &str, row: &ServerRow) -> Result<Endpoint, String> {
    let url = Url::parse(&row.config.url).map_err(|_| "the URL does not parse".to_owned())?;
    let mut headers = HashMap::new();
    for (name, value) in row.config.headers.iter().flatten() {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("{name} is not a header name"))?;
        let value = HeaderValue::from_str(value).map_err(|_| format!("the {name} header value is not valid"))?;
        headers.insert(name, value);
    }
    let refs: Vec<(String, String)> =
        row.config.secret_refs.iter().flatten().map(|(header, secret)| (header.clone(), secret.clone())).collect();
    if !refs.is_empty() {
        let (owner, names) = (account.to_owned(), refs.iter().map(|(_, secret)| secret.clone()).collect::<Vec<_>>());
        let sealed = app
            .db
            .read(move |conn| {
                names.iter().map(|name| secrets::store::load_sealed(conn, &owner, name)).collect::<ApiResult<Vec<_>>>()
            })
            .await
            .map_err(|_| "the secrets could not be read".to_owned())?;
        for ((header, secret), sealed) in refs.iter().zip(sealed) {
            let Some(sealed) = sealed else {
                return Err(format!("the secret {secret} for header {header} is not set"));
            };
            let opened = Zeroizing::new(
                app.secrets
                    .open(account, secret, &sealed)
                    .map_err(|_| format!("the secret {secret} could not be opened"))?,
            );
            let name =
                HeaderName::from_bytes(header.as_bytes()).map_err(|_| format!("{header} is not a header name"))?;
            let mut value = HeaderValue::from_bytes(&opened)
                .map_err(|_| format!("the secret {secret} is not a valid value for header {header}"))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
    }
    Ok(Endpoint {
        url,
        transport: row.config.transport,
        headers,
        allow_private_network: app.config.allow_private_network,
    })
}

/// Deletes the secrets `row` references whose names are `mcp-<name>-…` (the ones it owns) and
/// that no remaining server of the account references.
fn delete_owned_secrets(conn: &Connection, account: &str, row: &ServerRow) -> ApiResult<()> {
    let prefix = format!("mcp-{}-", row.name);
    let remaining = store::load_all(conn, account)?;
    let still_used = |secret: &str| {
        remaining.iter().any(|other| other.config.secret_refs.iter().flatten().any(|(_, name)| name == secret))
    };
    for secret in row.config.secret_refs.iter().flatten().map(|(_, name)| name) {
        if secret.starts_with(&prefix) && !still_used(secret) {
            secrets::store::delete_secret(conn, account, secret)?;
        }
    }
    Ok(())
}

/// A checked server name (400 otherwise).
fn server_name(name: &str) -> ApiResult<String> {
    if is_slug(name) {
        Ok(name.to_owned())
    } else {
        Err(ApiError::invalid(format!(
            "Invalid MCP server name: {}; use 1-32 of a-z, 0-9, _ and -, starting with a letter or digit",
            name.chars().take(64).collect::<String>()
        )))
    }
}

/// The config checked as the seed says: an http(s) URL (not a private address literal unless
/// allowed), at most 16 plain headers with valid names and values of at most 4 KiB, at most 16
/// secret headers naming secrets, no header both plain and secret.
fn check_config(config: McpServerConfig, allow_private_network: bool) -> ApiResult<McpServerConfig> {
    let url_text = config.url.trim().to_owned();
    if url_text.is_empty() {
        return Err(ApiError::invalid("MCP server URL is required"));
    }
    if url_text.len() > MAX_URL_BYTES {
        return Err(ApiError::invalid("MCP server URL is too large"));
    }
    let url = Url::parse(&url_text).map_err(|_| ApiError::invalid("MCP server URL must be an http(s) URL"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(ApiError::invalid("MCP server URL must be an http(s) URL"));
    }
    if !allow_private_network {
        guard::check_url(&url)
            .map_err(|blocked| ApiError::invalid(format!("MCP server URL is not allowed: {blocked}")))?;
    }
    let headers = config.headers.clone().unwrap_or_default();
    let secret_refs = config.secret_refs.clone().unwrap_or_default();
    if headers.len() > MAX_HEADERS {
        return Err(ApiError::invalid("Too many MCP server headers"));
    }
    if secret_refs.len() > MAX_HEADERS {
        return Err(ApiError::invalid("Too many MCP server secret headers"));
    }
    for (name, value) in &headers {
        header_name(name)?;
        if value.len() > MAX_HEADER_VALUE_BYTES {
            return Err(ApiError::invalid(format!("MCP server header {name} is too large")));
        }
        if HeaderValue::from_str(value).is_err() {
            return Err(ApiError::invalid(format!("MCP server header {name} has an invalid value")));
        }
    }
    let mut checked_refs = BTreeMap::new();
    for (name, secret) in secret_refs {
        header_name(&name)?;
        if headers.keys().any(|plain| plain.eq_ignore_ascii_case(&name)) {
            return Err(ApiError::invalid(format!("MCP server header {name} is both plain and secret")));
        }
        checked_refs.insert(name, bounded_string(&secret, "Secret name", MAX_NAME_BYTES)?);
    }
    Ok(McpServerConfig { url: url_text, secret_refs: config.secret_refs.map(|_| checked_refs), ..config })
}

/// 400 unless `name` is a valid HTTP header name.
fn header_name(name: &str) -> ApiResult<()> {
    match HeaderName::from_bytes(name.as_bytes()) {
        Ok(_) => Ok(()),
        Err(_) => Err(ApiError::invalid(format!(
            "Invalid MCP server header name: {}",
            name.chars().take(64).collect::<String>()
        ))),
    }
}

/// A server as answered: no header values, no secret names.
fn redact(row: ServerRow) -> RedactedMcpServer {
    let tools = row
        .tools
        .iter()
        .map(|tool| McpToolInfo {
            extra: Default::default(),
            description: tool.description.clone(),
            input_schema: wire::from_ipld(tool.input.0.clone()).ok().map(Box::new),
            name: tool.name.clone(),
            tool_name: project::tool_name(&row.name, &tool.name),
        })
        .collect();
    let header_names = row.config.headers.iter().flatten().map(|(name, _)| name.clone()).collect();
    let secret_header_names: Vec<String> =
        row.config.secret_refs.iter().flatten().map(|(name, _)| name.clone()).collect();
    RedactedMcpServer {
        extra: Default::default(),
        created_at: row.created_at,
        has_secrets: !secret_header_names.is_empty(),
        header_names,
        id: row.id,
        name: row.name,
        secret_header_names,
        status: McpServerStatus {
            extra: Default::default(),
            checked_at: row.checked_at,
            error: row.error,
            state: row.state,
        },
        tools,
        transport: row.transport.or(row.config.transport).unwrap_or(McpServerTransport::Http),
        updated_at: row.updated_at,
        url: row.config.url,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn config(url: &str) -> McpServerConfig {
        McpServerConfig::new(url)
    }

    #[test]
    fn configs_are_checked_as_the_seed_says() {
        let refused = |config: McpServerConfig| check_config(config, false).unwrap_err().message().to_owned();
        assert!(check_config(config("https://mcp.example.com/mcp"), false).is_ok());
        assert_eq!(refused(config("ftp://x")), "MCP server URL must be an http(s) URL");
        assert_eq!(refused(config("not a url")), "MCP server URL must be an http(s) URL");
        assert!(refused(config("http://127.0.0.1:9/mcp")).starts_with("MCP server URL is not allowed: "));
        assert!(check_config(config("http://127.0.0.1:9/mcp"), true).is_ok(), "the flag allows it");
        let mut many = config("https://x.example");
        many.headers = Some((0..17).map(|i| (format!("x-h{i}"), "v".to_owned())).collect());
        assert_eq!(refused(many), "Too many MCP server headers");
        let mut big = config("https://x.example");
        big.headers = Some([("x-a".to_owned(), "v".repeat(4097))].into());
        assert_eq!(refused(big), "MCP server header x-a is too large");
        let mut bad = config("https://x.example");
        bad.secret_refs = Some([("bad header".to_owned(), "s".to_owned())].into());
        assert_eq!(refused(bad), "Invalid MCP server header name: bad header");
        let mut both = config("https://x.example");
        both.headers = Some([("Authorization".to_owned(), "x".to_owned())].into());
        both.secret_refs = Some([("authorization".to_owned(), "s".to_owned())].into());
        assert_eq!(refused(both), "MCP server header authorization is both plain and secret");
        assert!(server_name("git-hub_2").is_ok());
        for bad in ["", "-x", "GitHub", &"a".repeat(33), "a b"] {
            assert!(server_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn results_become_text_images_and_errors() {
        let png = base64::engine::general_purpose::STANDARD.encode([0x89, b'P', b'N', b'G']);
        let result = json!({"content": [
            {"type": "text", "text": "one"},
            {"type": "image", "data": png, "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a", "text": "body"}},
            {"type": "resource_link", "uri": "file:///b", "name": "b"}
        ], "structuredContent": {"n": 1}});
        let called = result_of("s", "t", &result).unwrap();
        assert_eq!(called.output["text"], "one\n\n[file:///a]\nbody");
        assert_eq!(called.images.len(), 1);
        assert_eq!(called.output["parts"][0]["size"], 4);
        assert_eq!(called.output["parts"][1]["uri"], "file:///b");
        assert_eq!(called.output["structuredContent"], json!({"n": 1}));
        let failed = result_of("s", "t", &json!({"isError": true, "content": [{"type": "text", "text": "boom"}]}));
        assert_eq!(failed.unwrap_err().message(), "MCP tool t of server s reported an error: boom");
    }
}
