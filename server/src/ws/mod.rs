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
use axum::extract::State;
use axum::extract::ws::{WebSocketUpgrade, rejection::WebSocketUpgradeRejection};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::task::JoinHandle;

use crate::edge::Edge;

/// The largest frame a client may send: a `Subscribe` envelope is a few hundred bytes.
pub(crate) const MAX_CLIENT_FRAME: usize = 64 * 1024;

/// Bytes a socket reads from its connection at a time: a `Subscribe` frame is a few hundred bytes
/// and pongs are tiny (tungstenite's default is 128 KiB, held by every socket for its life; a
/// larger frame still arrives whole, the buffer grows for it).
pub(crate) const READ_BUFFER: usize = 512;

/// Bytes of frames gathered before a write when several go out together (see `socket::BATCH`).
pub(crate) const WRITE_BUFFER: usize = 4 * 1024;

/// The route: `GET /agents/ws`.
pub(crate) fn routes() -> Router<Arc<Edge>> {
    Router::new().route("/agents/ws", get(upgrade))
}

/// Starts the hub (before any socket can subscribe).
pub(crate) fn spawn_hub(edge: &Arc<Edge>) -> JoinHandle<()> {
    tokio::spawn(hub::run(edge.clone(), edge.app.bus.subscribe(), edge.live.shutdown_signal()))
}

async fn upgrade(
    State(edge): State<Arc<Edge>>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let text = |status, body: &'static str| {
        (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
    };
    let Ok(upgrade) = upgrade else {
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
    upgrade
        .read_buffer_size(READ_BUFFER)
        // Frames sent together (a burst of queued live frames) share a write up to this size.
        .write_buffer_size(WRITE_BUFFER)
        .max_write_buffer_size(1 << 20)
        .max_message_size(MAX_CLIENT_FRAME)
        .max_frame_size(MAX_CLIENT_FRAME)
        .on_upgrade(move |socket| socket::run(edge, socket, id, permit))
}
