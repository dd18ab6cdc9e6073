//! Talking to an MCP server: connecting over Streamable HTTP (rmcp's client) or the legacy SSE
//! transport ([`super::sse`]), listing its tools, calling one.
//!
//! Every connection goes through the outbound client of memory downloads (`memory::guard`): no
//! proxy, and unless the operator passed `--allow-private-network`, DNS answers and redirects
//! that reach loopback, private or link-local addresses are refused. A session serves one
//! discovery or one call and is closed after it, so a server restart or an expired session
//! costs nothing but the next handshake. Connecting (handshake included), listing and calling
//! each run under a timeout; messages, tool counts and schema sizes are bounded.

use std::collections::HashMap;
use std::time::Duration;

use reqwest::Url;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt as _};
use seed_agents_protocol::generated::McpServerTransport;
use serde_json::{Map, Value as Json};

use super::sse::SseTransport;
use crate::memory::guard;

/// The most tools kept from one server; the rest are dropped (and logged).
pub(crate) const MAX_TOOLS: usize = 128;
/// The largest input schema kept, as JSON bytes; a tool with a larger one is dropped.
pub(crate) const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// The longest tool name kept, in bytes.
pub(crate) const MAX_TOOL_NAME_BYTES: usize = 256;
/// The largest message (a JSON response or one SSE event) read from a server.
pub(crate) const MAX_MESSAGE_BYTES: usize = 4 << 20;
/// How long reaching a server and its handshake may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long listing a server's tools may take once connected.
pub(crate) const LIST_TIMEOUT: Duration = Duration::from_secs(30);

/// Where and how to reach a server. Header values may come from secrets: never shown.
#[derive(Clone)]
pub(crate) struct Endpoint {
    /// The server's URL.
    pub url: Url,
    /// The transport to use; `None` tries Streamable HTTP, then SSE.
    pub transport: Option<McpServerTransport>,
    /// Every header to send, secret ones marked sensitive.
    pub headers: HashMap<HeaderName, HeaderValue>,
    /// `--allow-private-network`.
    pub allow_private_network: bool,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.keys().map(HeaderName::as_str).collect();
        f.debug_struct("Endpoint")
            .field("url", &self.url.as_str())
            .field("transport", &self.transport)
            .field("headers", &names)
            .finish()
    }
}

/// A tool as a server lists it, within the limits.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Listed {
    /// Its name on the server.
    pub name: String,
    /// Its description.
    pub description: Option<String>,
    /// Its input schema.
    pub input: Json,
}

/// Why a call did not produce a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CallFailure {
    /// The server could not be reached or refused the session.
    Unreachable(String),
    /// The call did not finish within its timeout.
    TimedOut(Duration),
    /// The call failed in the protocol (a JSON-RPC error, a broken session).
    Failed(String),
}

type Session = RunningService<RoleClient, ()>;

/// Lists the server's tools: the transport that answered and the tools within the limits.
pub(crate) async fn discover(endpoint: &Endpoint) -> Result<(McpServerTransport, Vec<Listed>), String> {
    let (session, transport) = connect(endpoint).await?;
    let listed = tokio::time::timeout(LIST_TIMEOUT, session.list_all_tools()).await;
    close(session);
    let tools = match listed {
        Err(_) => return Err(format!("the server did not list its tools within {}s", LIST_TIMEOUT.as_secs())),
        Ok(Err(error)) => return Err(format!("listing tools failed: {}", describe(&error))),
        Ok(Ok(tools)) => tools,
    };
    let mut kept = Vec::new();
    for tool in tools {
        if kept.len() == MAX_TOOLS {
            tracing::warn!(url = %endpoint.url, limit = MAX_TOOLS, "MCP server lists more tools than kept");
            break;
        }
        let name = tool.name.to_string();
        let input = Json::Object((*tool.input_schema).clone());
        let schema_bytes = serde_json::to_vec(&input).map(|bytes| bytes.len()).unwrap_or(usize::MAX);
        if name.is_empty() || name.len() > MAX_TOOL_NAME_BYTES || schema_bytes > MAX_SCHEMA_BYTES {
            tracing::warn!(url = %endpoint.url, tool = %name.chars().take(80).collect::<String>(), schema_bytes, "MCP tool dropped: name or schema over the limits");
            continue;
        }
        if kept.iter().any(|listed: &Listed| listed.name == name) {
            continue;
        }
        kept.push(Listed { name, description: tool.description.map(|text| text.into_owned()), input });
    }
    Ok((transport, kept))
}

/// Calls `tool` with `arguments`; its result as the protocol's JSON (`content`, `isError`,
/// `structuredContent`).
pub(crate) async fn call(
    endpoint: &Endpoint,
    tool: &str,
    arguments: Map<String, Json>,
    timeout: Duration,
) -> Result<Json, CallFailure> {
    let (session, _) = connect(endpoint).await.map_err(CallFailure::Unreachable)?;
    let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    let outcome = tokio::time::timeout(timeout, session.call_tool(params)).await;
    close(session);
    match outcome {
        Err(_) => Err(CallFailure::TimedOut(timeout)),
        Ok(Err(error)) => Err(CallFailure::Failed(describe(&error))),
        Ok(Ok(result)) => serde_json::to_value(&result).map_err(|error| CallFailure::Failed(error.to_string())),
    }
}

/// Connects with the endpoint's transport, or Streamable HTTP and then SSE, under
/// [`CONNECT_TIMEOUT`].
async fn connect(endpoint: &Endpoint) -> Result<(Session, McpServerTransport), String> {
    if !endpoint.allow_private_network {
        guard::check_url(&endpoint.url).map_err(|blocked| blocked.to_string())?;
    }
    let attempt = async {
        match endpoint.transport {
            Some(transport) => open(endpoint, transport).await.map(|session| (session, transport)),
            None => match open(endpoint, McpServerTransport::Http).await {
                Ok(session) => Ok((session, McpServerTransport::Http)),
                Err(http) => match open(endpoint, McpServerTransport::Sse).await {
                    Ok(session) => Ok((session, McpServerTransport::Sse)),
                    Err(sse) => Err(format!("Streamable HTTP: {http}; SSE: {sse}")),
                },
            },
        }
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, attempt).await {
        Err(_) => Err(format!("no answer within {}s", CONNECT_TIMEOUT.as_secs())),
        Ok(outcome) => outcome,
    }
}

/// Opens a session over one transport (the MCP handshake included).
async fn open(endpoint: &Endpoint, transport: McpServerTransport) -> Result<Session, String> {
    let client = guard::client(endpoint.allow_private_network).map_err(|error| describe(&error))?;
    match transport {
        McpServerTransport::Http => {
            let config = StreamableHttpClientTransportConfig::with_uri(endpoint.url.as_str())
                .custom_headers(endpoint.headers.clone())
                .max_json_response_size(MAX_MESSAGE_BYTES)
                .max_sse_event_size(MAX_MESSAGE_BYTES);
            let transport = StreamableHttpClientTransport::with_client(client, config);
            ().serve(transport).await.map_err(|error| describe(&error))
        }
        McpServerTransport::Sse => {
            let transport =
                SseTransport::connect(client, endpoint.url.clone(), endpoint.headers.clone(), MAX_MESSAGE_BYTES)
                    .await
                    .map_err(|error| describe(&error))?;
            ().serve(transport).await.map_err(|error| describe(&error))
        }
    }
}

/// Ends a session in the background (a Streamable HTTP session is deleted on the server).
fn close(session: Session) {
    tokio::spawn(async move {
        let _ = tokio::time::timeout(Duration::from_secs(5), session.cancel()).await;
    });
}

/// An error and its causes in one line, or the guard's refusal when it is one.
fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    match guard::blocked_in(error) {
        Some(blocked) => blocked.to_string(),
        None => crate::error::chain(error),
    }
}
