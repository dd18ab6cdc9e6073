//! The one error type of the server's features: what went wrong (an [`ErrorKind`]), the message
//! clients may match on, and an optional machine `code`. It is defined in the server's core crate
//! (`seed_agents_server_core::error`, with its `rusqlite` feature: `?` on a store's error answers
//! 500), so the fuzz targets build it without the server; every layer names it here.
//!
//! It knows no transport. `http/` maps a kind to a status once (`http::status`), the WebSocket
//! module to an `error` frame once (`ws::frames`); features and `db/` only say what happened.

pub(crate) use seed_agents_server_core::error::{ApiError, ApiResult, ErrorKind, INTERNAL_MESSAGE};

/// An error and its causes as one line, `: `-separated (a transport error says why only in its
/// sources: "connection refused" is levels down).
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
