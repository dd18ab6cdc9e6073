//! The webhook route: `POST /api/triggers/<id>/webhook` (and the `/agents` alias). The delivery's
//! rules are `triggers::webhook`'s; this reads the headers and the bounded body, and turns the
//! answer into a status and a JSON body.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http_body_util::{BodyExt, Limited};

use crate::edge::Edge;
use crate::error::{ApiError, ErrorKind, INTERNAL_MESSAGE};
use crate::triggers::webhook::{self, Delivered, Headers, MAX_BODY_BYTES};

/// The webhook routes.
pub(super) fn routes() -> Router<Arc<Edge>> {
    Router::new()
        .route("/api/triggers/{trigger_id}/webhook", post(receive))
        .route("/agents/api/triggers/{trigger_id}/webhook", post(receive))
}

async fn receive(
    State(edge): State<Arc<Edge>>,
    Path(trigger_id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match deliver(&edge, trigger_id, &headers, body).await {
        Ok(Delivered::Fired { firing_id, session_id, run_id }) => {
            accepted(serde_json::json!({ "firingId": firing_id, "sessionId": session_id, "runId": run_id }))
        }
        Ok(Delivered::Started { firing_id, run_id }) => {
            accepted(serde_json::json!({ "firingId": firing_id, "runId": run_id }))
        }
        Ok(Delivered::Woke { firing_id, run_id }) => {
            let mut body = serde_json::json!({ "firingId": firing_id, "delivered": run_id.is_some() });
            if let Some(run_id) = run_id {
                body["runId"] = serde_json::Value::String(run_id);
            }
            accepted(body)
        }
        Err(error) if error.kind().is_server_side() => {
            tracing::warn!(%error, "webhook failed");
            refuse(StatusCode::INTERNAL_SERVER_ERROR, INTERNAL_MESSAGE)
        }
        Err(error) => refuse(super::status(error.kind()), error.message()),
    }
}

/// The headers, then the body (bounded in size and time), then the delivery.
async fn deliver(edge: &Arc<Edge>, trigger_id: String, headers: &HeaderMap, body: Body) -> Result<Delivered, ApiError> {
    let text = |name: header::HeaderName| headers.get(name).and_then(|value| value.to_str().ok());
    let signed = webhook::check_headers(
        &edge.app,
        Headers {
            id: text(header::HeaderName::from_static("webhook-id")),
            timestamp: text(header::HeaderName::from_static("webhook-timestamp")),
            signature: text(header::HeaderName::from_static("webhook-signature")),
        },
    )?;
    let too_large = || ApiError::too_large("Webhook body is too large");
    if text(header::CONTENT_LENGTH)
        .and_then(|value| value.parse::<u64>().ok())
        .is_some_and(|length| length > MAX_BODY_BYTES as u64)
    {
        return Err(too_large());
    }
    let collected =
        tokio::time::timeout(edge.app.config.body_timeout, Limited::new(body, MAX_BODY_BYTES).collect()).await;
    let body = match collected {
        Err(_) => return Err(ApiError::new(ErrorKind::TimedOut, "Webhook body did not arrive in time")),
        Ok(Err(error)) if error.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
        Ok(Err(_)) => return Err(ApiError::invalid("Webhook body could not be read")),
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    webhook::deliver(&edge.app, trigger_id, signed, text(header::CONTENT_TYPE), &body).await
}

fn accepted(body: serde_json::Value) -> Response {
    (StatusCode::ACCEPTED, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// A refusal: status and a JSON `{error}` body naming only what the sender got wrong.
fn refuse(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "error": message }).to_string();
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
