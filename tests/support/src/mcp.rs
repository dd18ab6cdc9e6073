//! A test MCP server on loopback, written with rmcp's server side, serving both transports:
//! Streamable HTTP at `/mcp` (rmcp's tower service) and the legacy HTTP+SSE transport at `/sse`
//! (the event stream) and `/message` (where the client posts), which rmcp no longer ships and
//! this module implements over the same handler.
//!
//! Its tools: `echo {text}` answers `echo: <text>`; `add {a, b}` answers the sum as text and as
//! structured content; `fail` answers a tool error (`isError`); `hang` never answers; `pixel`
//! answers a text and a PNG image. Every request's headers are recorded, so a test can check
//! which headers (secret ones included) arrived.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::StreamExt as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientJsonRpcMessage, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, ServerJsonRpcMessage, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt as _};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// A one-pixel PNG, the `pixel` tool's image.
pub const PIXEL_PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0d, 0x49,
    0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0, 0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d,
    0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

#[derive(Default)]
struct Shared {
    headers: Mutex<Vec<HeaderMap>>,
    calls: Mutex<Vec<(String, Value)>>,
    sse_sessions: Mutex<HashMap<String, mpsc::Sender<ClientJsonRpcMessage>>>,
}

/// The test MCP server; stops when dropped.
pub struct TestMcpServer {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl TestMcpServer {
    /// Starts on a free loopback port.
    pub async fn start() -> Self {
        Self::start_on("127.0.0.1:0".parse().expect("address")).await
    }

    /// Starts on `address` (a test reserves a port, saves a server while nothing listens there,
    /// then starts this on it).
    pub async fn start_on(address: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind(address).await.expect("bind test MCP server");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        let shared = Arc::new(Shared::default());
        let tools = Tools { shared: shared.clone() };
        let streamable = StreamableHttpService::new(
            move || Ok(tools.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        let router = Router::new()
            .nest_service("/mcp", streamable)
            .route("/sse", get(sse_stream))
            .route("/message", post(sse_message))
            .with_state(shared.clone())
            .layer(middleware::from_fn_with_state(shared.clone(), record_headers));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self { base, shared, task }
    }

    /// The Streamable HTTP endpoint.
    pub fn http_url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// The legacy SSE endpoint (it answers nothing else: a client must fall back to it).
    pub fn sse_url(&self) -> String {
        format!("{}/sse", self.base)
    }

    /// The headers of every request so far.
    pub fn headers(&self) -> Vec<HeaderMap> {
        self.shared.headers.lock().unwrap().clone()
    }

    /// Every tool call so far: name and arguments.
    pub fn calls(&self) -> Vec<(String, Value)> {
        self.shared.calls.lock().unwrap().clone()
    }
}

impl Drop for TestMcpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn record_headers(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    shared.headers.lock().unwrap().push(request.headers().clone());
    next.run(request).await
}

#[derive(Clone)]
struct Tools {
    shared: Arc<Shared>,
}

fn schema(value: Value) -> Arc<serde_json::Map<String, Value>> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!("tool schemas are objects"),
    }
}

impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let text = json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
        let numbers = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"]
        });
        let empty = json!({"type": "object"});
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("echo", "Echoes the text back. Useful for checks.", schema(text)),
            Tool::new("add", "Adds two numbers.", schema(numbers)),
            Tool::new("fail", "Always fails.", schema(empty.clone())),
            Tool::new("hang", "Never answers.", schema(empty.clone())),
            Tool::new("pixel", "Answers a one-pixel image.", schema(empty)),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        self.shared.calls.lock().unwrap().push((request.name.to_string(), arguments.clone()));
        let result = match request.name.as_ref() {
            "echo" => {
                let text = arguments["text"].as_str().unwrap_or_default();
                CallToolResult::success(vec![ContentBlock::text(format!("echo: {text}"))])
            }
            "add" => {
                let sum = arguments["a"].as_f64().unwrap_or(0.0) + arguments["b"].as_f64().unwrap_or(0.0);
                let mut result = CallToolResult::success(vec![ContentBlock::text(format!("{sum}"))]);
                result.structured_content = Some(json!({"sum": sum}));
                result
            }
            "fail" => CallToolResult::error(vec![ContentBlock::text("it broke")]),
            "hang" => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                CallToolResult::success(Vec::new())
            }
            "pixel" => {
                use base64::Engine as _;
                let data = base64::engine::general_purpose::STANDARD.encode(PIXEL_PNG);
                CallToolResult::success(vec![ContentBlock::text("a pixel"), ContentBlock::image(data, "image/png")])
            }
            other => return Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        };
        Ok(CallToolResponse::Complete(result))
    }
}

/// One legacy SSE session's transport: what the client posts arrives on `incoming`; what the
/// server sends goes to the event stream through `outgoing`.
struct SseSession {
    incoming: mpsc::Receiver<ClientJsonRpcMessage>,
    outgoing: mpsc::Sender<ServerJsonRpcMessage>,
}

#[derive(Debug)]
struct Closed;

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the event stream closed")
    }
}

impl std::error::Error for Closed {}

impl Transport<RoleServer> for SseSession {
    type Error = Closed;

    fn send(&mut self, item: ServerJsonRpcMessage) -> impl Future<Output = Result<(), Closed>> + Send + 'static {
        let outgoing = self.outgoing.clone();
        async move { outgoing.send(item).await.map_err(|_| Closed) }
    }

    fn receive(&mut self) -> impl Future<Output = Option<ClientJsonRpcMessage>> + Send {
        self.incoming.recv()
    }

    async fn close(&mut self) -> Result<(), Closed> {
        Ok(())
    }
}

static SESSIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

async fn sse_stream(State(shared): State<Arc<Shared>>) -> Response {
    let id = SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed).to_string();
    let (to_server, incoming) = mpsc::channel(16);
    let (outgoing, mut from_server) = mpsc::channel::<ServerJsonRpcMessage>(16);
    shared.sse_sessions.lock().unwrap().insert(id.clone(), to_server);
    let tools = Tools { shared: shared.clone() };
    tokio::spawn(async move {
        if let Ok(running) = tools.serve(SseSession { incoming, outgoing }).await {
            let _ = running.waiting().await;
        }
    });
    let first = futures_util::stream::once(async move {
        Ok::<_, Infallible>(format!("event: endpoint\ndata: /message?sessionId={id}\n\n"))
    });
    let rest = futures_util::stream::poll_fn(move |cx| from_server.poll_recv(cx)).map(|message| {
        let data = serde_json::to_string(&message).unwrap();
        Ok::<_, Infallible>(format!("event: message\ndata: {data}\n\n"))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(first.chain(rest)))
        .unwrap()
}

async fn sse_message(
    State(shared): State<Arc<Shared>>,
    RawQuery(query): RawQuery,
    body: axum::body::Bytes,
) -> Response {
    let id = query.unwrap_or_default().strip_prefix("sessionId=").map(str::to_owned);
    let session = id.and_then(|id| shared.sse_sessions.lock().unwrap().get(&id).cloned());
    let Some(session) = session else { return StatusCode::NOT_FOUND.into_response() };
    let Ok(message) = serde_json::from_slice::<ClientJsonRpcMessage>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    match session.send(message).await {
        Ok(()) => StatusCode::ACCEPTED.into_response(),
        Err(_) => StatusCode::GONE.into_response(),
    }
}
