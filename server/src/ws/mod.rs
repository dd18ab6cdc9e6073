//! Live updates: `GET /agents/ws`, signed `Subscribe` frames, replay, then live frames.
//!
//! - [`subscribe`]: verifying a `Subscribe` and authorizing its key (the same checks and messages
//!   as an HTTP action), and what each key replays;
//! - [`socket`]: one task per socket: `connected`, subscriptions, replay, queued live frames,
//!   ping/pong, closing;
//! - [`live`]: the state they share (the registry, the socket permits, the shutdown signal);
//! - [`registry`]: which bound socket listens to which key;
//! - [`hub`]: one task turning bus events into frames for the registry's sockets;
//! - [`frames`]: JSON text frames, encoded once per shape, and the one mapping from a failure to an
//!   `error` frame.
//!
//! Beyond upstream (which has none of these): sockets are pinged and a silent peer is dropped;
//! each socket's outgoing queue is bounded and a client that falls behind is disconnected (1013)
//! to resume from its cursor; sockets per server, sockets per account and subscriptions per
//! socket are limited; read and write buffers are small; losing access to an agent ends the
//! subscriptions that depended on it.

pub(crate) mod frames;
pub(crate) mod hub;
pub(crate) mod live;
pub(crate) mod registry;
pub(crate) mod socket;
pub(crate) mod subscribe;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Version, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::task::JoinHandle;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

use crate::edge::Edge;

/// The largest frame a client may send: a `Subscribe` envelope is a few hundred bytes.
pub(crate) const MAX_CLIENT_FRAME: usize = 64 * 1024;

/// Bytes a socket reads from its connection at a time. The library keeps its read buffer for the
/// socket's life, at the largest size a frame made it (it reserves a frame's whole length on top
/// of what it already read): with 128 bytes, a `Subscribe` of a few hundred bytes leaves about its
/// own size behind, where 512 left twice that (massif). Pongs are tiny, and a larger frame still
/// arrives whole, in a few more reads. tungstenite's default is 128 KiB.
pub(crate) const READ_BUFFER: usize = 128;

/// What the WebSocket library may hold unwritten: only its pings, pongs and close frame go
/// through it (the socket writes its own frames, `socket`), and each is written at once.
const LIBRARY_WRITE_BUFFER: usize = 64 * 1024;

/// The route: `GET /agents/ws`.
pub(crate) fn routes() -> Router<Arc<Edge>> {
    Router::new().route("/agents/ws", get(upgrade))
}

/// Starts the hub (before any socket can subscribe) and the pinger (which ends at shutdown).
pub(crate) fn spawn_hub(edge: &Arc<Edge>) -> JoinHandle<()> {
    tokio::spawn(edge.live.clone().pinger());
    tokio::spawn(hub::run(edge.clone(), edge.app.bus.subscribe(), edge.live.shutdown_signal()))
}

/// The WebSocket protocol's settings for every socket.
fn config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(0)
        .max_write_buffer_size(LIBRARY_WRITE_BUFFER)
        .max_message_size(Some(MAX_CLIENT_FRAME))
        .max_frame_size(Some(MAX_CLIENT_FRAME))
}

/// An HTTP/1.1 WebSocket opening handshake (RFC 6455 §4.2.1): its `Sec-WebSocket-Key` and the
/// connection to upgrade, or `None` when the request is not one.
fn handshake(request: &mut Request) -> Option<(HeaderValue, OnUpgrade)> {
    let headers = request.headers();
    let opening = request.method() == Method::GET
        && request.version() == Version::HTTP_11
        && has_token(headers, header::CONNECTION, "upgrade")
        && has_token(headers, header::UPGRADE, "websocket")
        && headers.get(header::SEC_WEBSOCKET_VERSION).is_some_and(|version| version == "13");
    let key = headers.get(header::SEC_WEBSOCKET_KEY).filter(|_| opening)?.clone();
    let upgrade = request.extensions_mut().remove::<OnUpgrade>()?;
    Some((key, upgrade))
}

/// Whether the comma-separated header `name` lists `token` (case-insensitively).
fn has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|listed| listed.trim().eq_ignore_ascii_case(token))
}

async fn upgrade(State(edge): State<Arc<Edge>>, mut request: Request) -> Response {
    let text = |status, body: &'static str| {
        (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
    };
    let Some((key, on_upgrade)) = handshake(&mut request) else {
        return text(StatusCode::BAD_REQUEST, "WebSocket upgrade failed");
    };
    let Ok(accept) = HeaderValue::try_from(derive_accept_key(key.as_bytes())) else {
        return text(StatusCode::BAD_REQUEST, "WebSocket upgrade failed");
    };
    if *edge.live.shutdown.borrow() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "Server shutting down");
    }
    let Ok(permit) = edge.live.sockets.clone().try_acquire_owned() else {
        tracing::warn!(max = edge.live.limits.max_sockets, "WebSocket refused: the server has as many as it may");
        return text(StatusCode::SERVICE_UNAVAILABLE, "Too many live connections");
    };
    let id = edge.live.next_id.fetch_add(1, Ordering::Relaxed);
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(upgraded) => upgraded,
            Err(error) => {
                tracing::debug!(%error, "WebSocket upgrade failed");
                return;
            }
        };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config())).await;
        socket::run(edge, ws, id, permit).await;
    });
    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    response
}
