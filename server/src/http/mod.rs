//! Routes: the signed message endpoint (and its `/agents` alias), health, version, CORS, and the
//! protocol header on every response; the accept loop ([`serve`]) and the bounded reading of
//! unauthenticated bodies ([`body`]). The only place that knows HTTP statuses ([`status`]).

pub(crate) mod body;
pub(crate) mod metrics;
pub(crate) mod requests;
pub(crate) mod serve;
mod status;
mod webhook;

pub(crate) use status::status;

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use seed_agents_protocol::version::AGENTS_PROTOCOL_VERSION;
use seed_agents_protocol::wire;
use tracing::Instrument;

use crate::auth::{self, Transport};
use crate::edge::Edge;
use crate::error::{ApiError, ErrorKind};

/// The protocol header, lower-cased for `http`.
static PROTOCOL_HEADER: HeaderName = HeaderName::from_static("x-agents-protocol");

/// The server's routes.
pub(crate) fn router(edge: Arc<Edge>) -> Router {
    Router::new()
        .route("/api/message", post(message).options(preflight))
        .route("/agents/api/message", post(message).options(preflight))
        .route("/api/health", get(health))
        .route("/agents/api/health", get(health))
        .route("/api/ready", get(ready))
        .route("/agents/api/ready", get(ready))
        .route("/api/version", get(version))
        .route("/agents/api/version", get(version))
        .merge(crate::ws::routes())
        .merge(webhook::routes())
        .fallback(not_found)
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn(protocol_header))
        .with_state(edge)
}

/// Adds `X-Agents-Protocol` (and exposes it to browsers) on every response.
async fn protocol_header(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(PROTOCOL_HEADER.clone(), HeaderValue::from(AGENTS_PROTOCOL_VERSION));
    headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static("X-Agents-Protocol"));
    response
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "Not Found").into_response()
}

async fn preflight() -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    cors(response.headers_mut(), "POST, OPTIONS");
    response
}

fn cors(headers: &mut HeaderMap, methods: &'static str) {
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static("Content-Type, Accept"));
    headers.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static(methods));
}

/// `POST /api/message`: one signed action in, one response out.
async fn message(State(edge): State<Arc<Edge>>, headers: HeaderMap, body: Body) -> Response {
    let span = tracing::info_span!(
        "request",
        action = tracing::field::Empty,
        account = tracing::field::Empty,
        status = tracing::field::Empty,
        duration_us = tracing::field::Empty,
    );
    async move {
        let started = Instant::now();
        let mut progress = Progress { protocol: AGENTS_PROTOCOL_VERSION, body_read: false, action: None };
        let outcome = handle_message(&edge, &headers, body, &mut progress).await;
        let response = match outcome {
            Ok(bytes) => cbor(StatusCode::OK, bytes),
            Err(error) => {
                let mut response = error_response(&error, progress.protocol);
                if !progress.body_read {
                    // The rest of the body is not wanted: do not keep the connection for it.
                    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                response
            }
        };
        let span = tracing::Span::current();
        let status = response.status().as_u16();
        let elapsed = started.elapsed();
        edge.requests.record(progress.action.as_deref(), status, elapsed);
        span.record("status", status);
        span.record("duration_us", elapsed.as_micros() as u64);
        // A saturated server answering 503 is expected under load; one log line per refusal
        // would make an attack fill the disk as well.
        if status >= 500 && status != 503 {
            tracing::warn!("request failed");
        } else {
            tracing::debug!("request done");
        }
        response
    }
    .instrument(span)
    .await
}

/// How far a request got: what an error answer depends on.
struct Progress {
    /// The client's declared protocol, once its envelope verified (errors are shaped for it).
    protocol: u32,
    /// Whether the whole body was read (else the connection is closed after the answer).
    body_read: bool,
    /// The action's name, once its envelope verified (the `action` label of `/metrics`).
    action: Option<String>,
}

/// What a request that took longer than `--request-timeout` hears.
const TOO_LONG: &str = "The server could not answer in time; try again later";

/// Reads, verifies and dispatches one request.
async fn handle_message(
    edge: &Edge,
    headers: &HeaderMap,
    body: Body,
    progress: &mut Progress,
) -> Result<Vec<u8>, ApiError> {
    if !is_cbor(headers) {
        return Err(ApiError::new(ErrorKind::UnsupportedMediaType, "Content-Type must be application/cbor"));
    }
    let app = &edge.app;
    let (bytes, reservation) = body::read(headers, body, &edge.body_limits(), &edge.bodies).await?;
    progress.body_read = true;
    let body_bytes = bytes.len();
    let answer = async {
        let verified = auth::verify(edge, bytes, Transport::Http).await?;
        progress.protocol = verified.caller.protocol;
        progress.action = Some(verified.action_name.clone());
        let span = tracing::Span::current();
        span.record("action", verified.action_name.as_str());
        span.record("account", verified.caller.account_id.as_str());
        // Before the action runs: a refused request changed nothing.
        app.limits.check(&verified.caller.account_id, &verified.action_name, body_bytes)?;
        crate::dispatch::dispatch(app, &verified.caller, &verified.action_name, verified.action).await
    };
    let answer = match tokio::time::timeout(app.config.request_timeout, answer).await {
        Ok(answer) => answer,
        Err(_) => {
            tracing::warn!(timeout_s = app.config.request_timeout.as_secs_f64(), "request abandoned: too slow");
            Err(ApiError::unavailable(TOO_LONG))
        }
    };
    // The body's bytes (now the action's) are held until the handler is done with them: a valid
    // signature costs nothing (any key signs), so it does not make them free.
    drop(reservation);
    answer
}

fn is_cbor(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/cbor"))
}

fn cbor(status: StatusCode, bytes: Vec<u8>) -> Response {
    let mut response = (status, bytes).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/cbor"));
    cors(headers, "POST, OPTIONS");
    response
}

/// The CBOR error body `{_: 'Error', message, code?}` with its status, in the shape a client of
/// `protocol` reads.
pub(crate) fn error_response(error: &ApiError, protocol: u32) -> Response {
    let body = seed_agents_protocol::generated::Error {
        extra: Default::default(),
        message: error.message().to_owned(),
        code: error.code().map(str::to_owned),
        received: error.received(),
    };
    let response = seed_agents_protocol::AgentResponse::Error(body);
    // Current clients read the current shape: encode directly, as dispatch does for successes.
    let bytes = if protocol >= AGENTS_PROTOCOL_VERSION {
        wire::to_vec(&response)
    } else {
        wire::to_ipld(&response)
            .map(|value| seed_agents_compat::downgrade_error(protocol, value))
            .and_then(|value| wire::ipld_to_vec(&value))
    }
    .unwrap_or_default();
    let mut response = cbor(status(error.kind()), bytes);
    if let Some(seconds) = error.retry_after() {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    } else if error.kind() == ErrorKind::Unavailable {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

fn json(value: serde_json::Value) -> Response {
    let mut response = axum::Json(value).into_response();
    cors(response.headers_mut(), "GET, POST, OPTIONS");
    response
}

/// `GET /api/health`: liveness plus what this build offers.
async fn health(State(edge): State<Arc<Edge>>) -> Response {
    let app = &edge.app;
    let exec = app.sandbox.availability();
    let runtimes: Vec<&str> = exec.runtimes.iter().map(|runtime| runtime.name()).collect();
    json(serde_json::json!({
        "status": "ok",
        "uptime": app.started.elapsed().as_secs_f64(),
        "version": env!("CARGO_PKG_VERSION"),
        "protocol": AGENTS_PROTOCOL_VERSION,
        "minClientProtocol": app.config.min_client_protocol,
        "hmServerUrl": app.config.hm_server_url,
        "webTools": {"search": app.config.searxng_url.is_some(), "readBrowser": false},
        "subscriptionAuth": app.config.subscription_auth,
        "codeExec": exec.available,
        "codeExecReason": exec.reason,
        "codeExecReasonCode": exec.reason_code,
        "codeExecRuntimes": runtimes,
        "codeExecLimits": exec.limits,
    }))
}

/// `GET /api/ready`: whether this server can answer actions now: the database answers a read on
/// a reader connection, its schema is the version this build migrates to, and the writer thread
/// runs. 200 `{status: "ready", checks}` or 503 `{status: "not-ready", checks}`, each check `"ok"`
/// or what is wrong (server/README.md, "Health and readiness").
async fn ready(State(edge): State<Arc<Edge>>) -> Response {
    let app = &edge.app;
    use crate::db::maintenance::{SCHEMA_VERSION, schema_version};
    let (database, migrations) = match app.db.read(|conn| Ok(schema_version(conn)?)).await {
        Ok(version) if version == SCHEMA_VERSION => ("ok".to_owned(), "ok".to_owned()),
        Ok(version) => ("ok".to_owned(), format!("schema version {version}, this build needs {SCHEMA_VERSION}")),
        Err(error) => (error.message().to_owned(), "unknown".to_owned()),
    };
    let writer = if app.db.writer_alive() { "ok" } else { "the database writer is not running" };
    let ok = database == "ok" && migrations == "ok" && writer == "ok";
    let mut response = json(serde_json::json!({
        "status": if ok { "ready" } else { "not-ready" },
        "checks": {"database": database, "migrations": migrations, "writer": writer},
    }));
    if !ok {
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    }
    response
}

/// `GET /api/version`: build information.
async fn version(State(edge): State<Arc<Edge>>) -> Response {
    let app = &edge.app;
    json(serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "commit": option_env!("SEED_AGENTS_COMMIT").unwrap_or("unknown"),
        "protocol": AGENTS_PROTOCOL_VERSION,
        "minClientProtocol": app.config.min_client_protocol,
    }))
}
