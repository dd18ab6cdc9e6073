//! Webhook triggers: `POST /api/triggers/<id>/webhook` (and the `/agents` alias), signed the
//! Standard Webhooks way (<https://www.standardwebhooks.com>), so senders' libraries work.
//!
//! A request carries `webhook-id` (the message id, 1 to 256 printable ASCII bytes),
//! `webhook-timestamp` (Unix seconds) and `webhook-signature` (space-separated `v1,<base64>`
//! entries; one must match). The signature is HMAC-SHA256, keyed with the base64 bytes after the
//! `whsec_` prefix of the trigger's secret, over `<id>.<timestamp>.<body>`. The server:
//!
//! 1. refuses missing or malformed headers (400) and a timestamp more than five minutes from
//!    its clock (401), before reading the body;
//! 2. reads the body as it streams, refusing more than [`MAX_BODY_BYTES`] (413) and a body that
//!    does not arrive within `--body-timeout` (408);
//! 3. answers an unknown trigger, a trigger that is not a webhook, and a wrong signature with the
//!    same 401, so nothing is learnt about other triggers (the comparison is constant-time);
//! 4. fires the trigger with the firing key `webhook:<webhook-id>`: a message id fires once
//!    (a replay, even re-signed, answers 409), durably, across restarts;
//! 5. hands the run `{type: 'webhook', webhookId, timestamp, contentType?, body}`: JSON bodies
//!    as values, other UTF-8 bodies as text, anything else as bytes;
//! 6. answers 202 `{firingId, sessionId, runId}`, or for a `wake` continuation
//!    `{firingId, delivered, runId?}` (the parked run that took the signal).
//!
//! Secrets are 32 random bytes, shown once as `whsec_<base64>` when the trigger is created or its
//! source is set to `webhook` again (rotation), and stored sealed with the server key.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Limited};
use ipld_core::ipld::Ipld;
use rusqlite::{Connection, OptionalExtension, params};
use seed_agents_protocol::Value;
use sha2::Sha256;

use super::firing::{self, Activity, FireOutcome};
use crate::app::App;
use crate::error::{ApiError, ApiResult};

/// The largest body a webhook accepts, in bytes.
pub const MAX_BODY_BYTES: usize = 256 * 1024;
/// How far `webhook-timestamp` may be from the server's clock, in seconds.
pub const TOLERANCE_SECONDS: i64 = 5 * 60;
/// The secret's prefix.
pub const SECRET_PREFIX: &str = "whsec_";
/// The one answer for an unknown trigger, a non-webhook trigger and a wrong signature.
pub const UNAUTHORIZED: &str = "Invalid webhook signature";

type HmacSha256 = Hmac<Sha256>;

/// The sealing name of a trigger's secret (the AEAD's associated data, with the owner).
fn sealed_name(trigger_id: &str) -> String {
    format!("webhook-trigger:{trigger_id}")
}

/// Mints, seals and stores a new secret for trigger `trigger_id` (replacing any previous one);
/// returns it as `whsec_<base64>`, the only time it is shown.
pub fn rotate_secret(app: &App, conn: &Connection, owner_id: &str, trigger_id: &str) -> ApiResult<String> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|error| ApiError::internal(format!("no randomness: {error}")))?;
    let sealed = app.secrets.seal(owner_id, &sealed_name(trigger_id), &key).map_err(ApiError::internal)?;
    conn.prepare_cached("UPDATE agent_triggers SET webhook_secret = ?2 WHERE id = ?1")?
        .execute(params![trigger_id, sealed])?;
    Ok(format!("{SECRET_PREFIX}{}", STANDARD.encode(key)))
}

/// The webhook routes.
pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/api/triggers/{trigger_id}/webhook", post(receive))
        .route("/agents/api/triggers/{trigger_id}/webhook", post(receive))
}

/// A refusal: status and a JSON `{error}` body naming only what the sender got wrong.
fn refuse(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "error": message }).to_string();
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The three Standard Webhooks headers.
struct Signed {
    id: String,
    timestamp: i64,
    signatures: Vec<Vec<u8>>,
}

fn headers(headers: &HeaderMap) -> Option<Signed> {
    let text = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    let id = text("webhook-id")?;
    if id.is_empty() || id.len() > 256 || !id.bytes().all(|byte| byte.is_ascii_graphic()) {
        return None;
    }
    let timestamp = text("webhook-timestamp")?.parse::<i64>().ok()?;
    let signatures: Vec<Vec<u8>> = text("webhook-signature")?
        .split(' ')
        .filter_map(|entry| entry.strip_prefix("v1,"))
        .filter_map(|encoded| STANDARD.decode(encoded).ok())
        .collect();
    if signatures.is_empty() {
        return None;
    }
    Some(Signed { id: id.to_owned(), timestamp, signatures })
}

/// Whether one of `signatures` is the HMAC of `<id>.<timestamp>.<body>` under `key`
/// (constant-time per comparison).
fn verify(key: &[u8], signed: &Signed, body: &[u8]) -> bool {
    let Ok(mut mac) = HmacSha256::new_from_slice(key) else { return false };
    mac.update(signed.id.as_bytes());
    mac.update(b".");
    mac.update(signed.timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    signed.signatures.iter().any(|signature| mac.clone().verify_slice(signature).is_ok())
}

/// The secret key bytes of webhook trigger `trigger_id`, if it is one and has a secret.
fn secret_key(app: &App, conn: &Connection, trigger_id: &str) -> ApiResult<Option<Vec<u8>>> {
    let row: Option<(String, Option<Vec<u8>>)> = conn
        .prepare_cached("SELECT account_id, webhook_secret FROM agent_triggers WHERE id = ?1")?
        .query_row(params![trigger_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    let Some((owner, Some(sealed))) = row else { return Ok(None) };
    Ok(app.secrets.open(&owner, &sealed_name(trigger_id), &sealed).ok())
}

/// The activity a webhook hands its run.
fn activity(signed: &Signed, content_type: Option<&str>, body: &[u8]) -> Activity {
    let is_json = content_type.is_some_and(|value| {
        let media = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        media == "application/json" || media.ends_with("+json")
    });
    let body_value = match (is_json, std::str::from_utf8(body)) {
        (true, Ok(_)) => match serde_json::from_slice::<Value>(body) {
            Ok(value) => value,
            Err(_) => Value(Ipld::String(String::from_utf8_lossy(body).into_owned())),
        },
        (_, Ok(text)) => Value(Ipld::String(text.to_owned())),
        (_, Err(_)) => Value(Ipld::Bytes(body.to_vec())),
    };
    let mut value = BTreeMap::from([
        ("type".to_owned(), Value(Ipld::String("webhook".to_owned()))),
        ("webhookId".to_owned(), Value(Ipld::String(signed.id.clone()))),
        ("timestamp".to_owned(), Value(Ipld::Integer(i128::from(signed.timestamp)))),
        ("body".to_owned(), body_value),
    ]);
    if let Some(content_type) = content_type {
        value.insert("contentType".to_owned(), Value(Ipld::String(content_type.chars().take(256).collect())));
    }
    Activity {
        summary: format!("Webhook {} ({} bytes)", signed.id, body.len()),
        value,
        matched_conditions: None,
        parent_firing_id: None,
    }
}

async fn receive(
    State(app): State<Arc<App>>,
    Path(trigger_id): Path<String>,
    request_headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(signed) = headers(&request_headers) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "Missing or malformed webhook-id, webhook-timestamp or webhook-signature header",
        );
    };
    let now_seconds = app.clock.now_ms().div_euclid(1000);
    if (now_seconds - signed.timestamp).abs() > TOLERANCE_SECONDS {
        return refuse(StatusCode::UNAUTHORIZED, "Webhook timestamp is outside the allowed window");
    }
    if request_headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok())
        .is_some_and(|length| length > MAX_BODY_BYTES as u64)
    {
        return refuse(StatusCode::PAYLOAD_TOO_LARGE, "Webhook body is too large");
    }
    let collected = tokio::time::timeout(app.config.body_timeout, Limited::new(body, MAX_BODY_BYTES).collect()).await;
    let body = match collected {
        Err(_) => return refuse(StatusCode::REQUEST_TIMEOUT, "Webhook body did not arrive in time"),
        Ok(Err(error)) if error.is::<http_body_util::LengthLimitError>() => {
            return refuse(StatusCode::PAYLOAD_TOO_LARGE, "Webhook body is too large");
        }
        Ok(Err(_)) => return refuse(StatusCode::BAD_REQUEST, "Webhook body could not be read"),
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    let lookup = {
        let (app, trigger_id) = (app.clone(), trigger_id.clone());
        app.clone().db.read(move |conn| secret_key(&app, conn, &trigger_id)).await
    };
    let key = match lookup {
        Ok(key) => key,
        Err(error) => return internal(&error),
    };
    // An unknown trigger, one without a secret and a wrong signature look the same.
    let verified = key.is_some_and(|key| verify(&key, &signed, &body));
    if !verified {
        return refuse(StatusCode::UNAUTHORIZED, UNAUTHORIZED);
    }
    let content_type = request_headers.get(header::CONTENT_TYPE).and_then(|value| value.to_str().ok());
    let activity = activity(&signed, content_type, &body);
    match firing::fire(&app, &trigger_id, &format!("webhook:{}", signed.id), activity).await {
        Ok(FireOutcome::Fired { firing_id, session_id, run_id }) => {
            let body = serde_json::json!({ "firingId": firing_id, "sessionId": session_id, "runId": run_id });
            (StatusCode::ACCEPTED, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
        }
        Ok(FireOutcome::Woke { firing_id, run_id }) => {
            let mut body = serde_json::json!({ "firingId": firing_id, "delivered": run_id.is_some() });
            if let Some(run_id) = run_id {
                body["runId"] = serde_json::Value::String(run_id);
            }
            (StatusCode::ACCEPTED, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
        }
        Ok(FireOutcome::Duplicate) => refuse(StatusCode::CONFLICT, "This webhook-id was already received"),
        Ok(FireOutcome::Inactive) => refuse(StatusCode::CONFLICT, "This trigger is disabled"),
        Err(error) => internal(&error),
    }
}

fn internal(error: &ApiError) -> Response {
    if error.kind().is_server_side() {
        tracing::warn!(%error, "webhook failed");
        refuse(StatusCode::INTERNAL_SERVER_ERROR, "Internal server error")
    } else {
        refuse(crate::http::status(error.kind()), error.message())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(id: &str, timestamp: i64, key: &[u8], body: &[u8]) -> HeaderMap {
        let mut mac = HmacSha256::new_from_slice(key).unwrap();
        mac.update(format!("{id}.{timestamp}.").as_bytes());
        mac.update(body);
        let signature = STANDARD.encode(mac.finalize().into_bytes());
        let mut headers = HeaderMap::new();
        headers.insert("webhook-id", id.parse().unwrap());
        headers.insert("webhook-timestamp", timestamp.to_string().parse().unwrap());
        headers.insert("webhook-signature", format!("v1,AAAA v1,{signature}").parse().unwrap());
        headers
    }

    #[test]
    fn signatures_follow_standard_webhooks() {
        // The Standard Webhooks reference example (its README's test vector).
        let key = STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek".parse().unwrap());
        headers.insert("webhook-timestamp", "1614265330".parse().unwrap());
        headers.insert("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=".parse().unwrap());
        let parsed = super::headers(&headers).unwrap();
        assert!(verify(&key, &parsed, br#"{"test": 2432232314}"#));
        assert!(!verify(&key, &parsed, br#"{"test": 2432232315}"#));
        assert!(!verify(b"other key", &parsed, br#"{"test": 2432232314}"#));
    }

    #[test]
    fn any_listed_signature_may_match_and_bad_headers_are_refused() {
        let headers = signed("m1", 10, b"k", b"body");
        let parsed = super::headers(&headers).unwrap();
        assert!(verify(b"k", &parsed, b"body"));
        let mut missing = headers.clone();
        missing.remove("webhook-id");
        assert!(super::headers(&missing).is_none());
        let mut bad = headers.clone();
        bad.insert("webhook-timestamp", "soon".parse().unwrap());
        assert!(super::headers(&bad).is_none());
        let mut unsigned = headers;
        unsigned.insert("webhook-signature", "v2,abc".parse().unwrap());
        assert!(super::headers(&unsigned).is_none());
    }

    #[test]
    fn bodies_become_json_text_or_bytes() {
        let headers = signed("m1", 10, b"k", b"");
        let parsed = super::headers(&headers).unwrap();
        let json = activity(&parsed, Some("application/json; charset=utf-8"), br#"{"a":[1,2]}"#);
        assert!(matches!(&json.value["body"].0, Ipld::Map(map) if map.contains_key("a")));
        let text = activity(&parsed, Some("text/plain"), b"hello");
        assert_eq!(text.value["body"].0, Ipld::String("hello".into()));
        let bytes = activity(&parsed, None, &[0xff, 0x00]);
        assert_eq!(bytes.value["body"].0, Ipld::Bytes(vec![0xff, 0x00]));
        assert_eq!(bytes.summary, "Webhook m1 (2 bytes)");
    }
}
