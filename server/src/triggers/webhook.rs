//! Webhook triggers: deliveries to `POST /api/triggers/<id>/webhook` (and the `/agents` alias;
//! the route is `http::webhook`'s), signed the Standard Webhooks way
//! (<https://www.standardwebhooks.com>), so senders' libraries work.
//!
//! A request carries `webhook-id` (the message id, 1 to 256 printable ASCII bytes),
//! `webhook-timestamp` (Unix seconds) and `webhook-signature` (space-separated `v1,<base64>`
//! entries; one must match). The signature is HMAC-SHA256, keyed with the base64 bytes after the
//! `whsec_` prefix of the trigger's secret, over `<id>.<timestamp>.<body>`. The server:
//!
//! 1. refuses missing or malformed headers (400) and a timestamp more than five minutes from
//!    its clock (401), before reading the body;
//! 2. reads the body as it streams (the edge's part), refusing more than [`MAX_BODY_BYTES`] (413)
//!    and a body that does not arrive within `--body-timeout` (408);
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

use crate::db::Connection;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use ipld_core::ipld::Ipld;
use seed_agents_protocol::Value;
use sha2::Sha256;

use super::firing::{self, Activity, FireOutcome};
use super::store;
use crate::app::App;
use crate::error::{ApiError, ApiResult};
use crate::secrets::crypto::Sealed;

/// The largest body a webhook accepts, in bytes.
pub(crate) const MAX_BODY_BYTES: usize = 256 * 1024;
/// How far `webhook-timestamp` may be from the server's clock, in seconds.
pub(crate) const TOLERANCE_SECONDS: i64 = 5 * 60;
/// The secret's prefix.
pub(crate) const SECRET_PREFIX: &str = "whsec_";
/// The one answer for an unknown trigger, a non-webhook trigger and a wrong signature.
pub(crate) const UNAUTHORIZED: &str = "Invalid webhook signature";

type HmacSha256 = Hmac<Sha256>;

/// The sealing name of a trigger's secret (the AEAD's associated data, with the owner).
fn sealed_name(trigger_id: &str) -> String {
    format!("webhook-trigger:{trigger_id}")
}

/// Every trigger's sealed webhook secret.
pub(crate) fn all_sealed(conn: &Connection) -> ApiResult<Vec<Sealed<String>>> {
    Ok(store::all_webhook_secrets(conn)?
        .into_iter()
        .map(|(trigger_id, owner_id, sealed)| Sealed {
            name: sealed_name(&trigger_id),
            at: trigger_id,
            account_id: owner_id,
            sealed,
        })
        .collect())
}

/// Mints, seals and stores a new secret for trigger `trigger_id` (replacing any previous one);
/// returns it as `whsec_<base64>`, the only time it is shown.
pub(crate) fn rotate_secret(app: &App, conn: &Connection, owner_id: &str, trigger_id: &str) -> ApiResult<String> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|error| ApiError::internal(format!("no randomness: {error}")))?;
    let sealed = app.secrets.seal(owner_id, &sealed_name(trigger_id), &key).map_err(ApiError::internal)?;
    store::set_webhook_secret(conn, trigger_id, Some(&sealed))?;
    Ok(format!("{SECRET_PREFIX}{}", STANDARD.encode(key)))
}

/// The three Standard Webhooks headers, checked.
#[derive(Debug)]
pub(crate) struct Signed {
    id: String,
    timestamp: i64,
    signatures: Vec<Vec<u8>>,
}

/// The header values a delivery carries, as text (absent, or not text, is `None`).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Headers<'a> {
    /// `webhook-id`.
    pub(crate) id: Option<&'a str>,
    /// `webhook-timestamp`.
    pub(crate) timestamp: Option<&'a str>,
    /// `webhook-signature`.
    pub(crate) signature: Option<&'a str>,
}

/// What a delivery started.
#[derive(Debug)]
pub(crate) enum Delivered {
    /// The trigger fired: its firing, session and run.
    Fired {
        /// The firing.
        firing_id: String,
        /// The session it opened.
        session_id: String,
        /// The run it queued.
        run_id: String,
    },
    /// A `script` or `tool` continuation queued its workflow run.
    Started {
        /// The firing.
        firing_id: String,
        /// The workflow run it queued.
        run_id: String,
    },
    /// A `wake` continuation delivered its signal (to the parked run `run_id`, if one listened).
    Woke {
        /// The firing.
        firing_id: String,
        /// The parked run that took the signal.
        run_id: Option<String>,
    },
}

/// Steps 1 (the headers) and the window of step 1, before the body is read.
pub(crate) fn check_headers(app: &App, headers: Headers<'_>) -> ApiResult<Signed> {
    let signed = parse(headers).ok_or_else(|| {
        ApiError::invalid("Missing or malformed webhook-id, webhook-timestamp or webhook-signature header")
    })?;
    let now_seconds = app.clock.now_ms().div_euclid(1000);
    if (now_seconds - signed.timestamp).abs() > TOLERANCE_SECONDS {
        return Err(ApiError::unauthorized("Webhook timestamp is outside the allowed window"));
    }
    Ok(signed)
}

fn parse(headers: Headers<'_>) -> Option<Signed> {
    let id = headers.id?;
    if id.is_empty() || id.len() > 256 || !id.bytes().all(|byte| byte.is_ascii_graphic()) {
        return None;
    }
    let timestamp = headers.timestamp?.parse::<i64>().ok()?;
    let signatures: Vec<Vec<u8>> = headers
        .signature?
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
    let Some((owner, Some(sealed))) = store::webhook_secret(conn, trigger_id)? else { return Ok(None) };
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

/// Steps 3 to 6 for a delivery whose headers passed [`check_headers`] and whose body arrived.
pub(crate) async fn deliver(
    app: &Arc<App>,
    trigger_id: String,
    signed: Signed,
    content_type: Option<&str>,
    body: &[u8],
) -> ApiResult<Delivered> {
    let key = {
        let (reader, trigger_id) = (app.clone(), trigger_id.clone());
        app.db.read(move |conn| secret_key(&reader, conn, &trigger_id)).await?
    };
    // An unknown trigger, one without a secret and a wrong signature look the same.
    if !key.is_some_and(|key| verify(&key, &signed, body)) {
        return Err(ApiError::unauthorized(UNAUTHORIZED));
    }
    let activity = activity(&signed, content_type, body);
    match firing::fire(app, &trigger_id, &format!("webhook:{}", signed.id), activity).await? {
        FireOutcome::Fired { firing_id, session_id, run_id } => Ok(Delivered::Fired { firing_id, session_id, run_id }),
        FireOutcome::Woke { firing_id, run_id } => Ok(Delivered::Woke { firing_id, run_id }),
        FireOutcome::Started { firing_id, run_id } => Ok(Delivered::Started { firing_id, run_id }),
        FireOutcome::Duplicate => Err(ApiError::conflict("This webhook-id was already received")),
        FireOutcome::Inactive => Err(ApiError::conflict("This trigger is disabled")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(webhook-id, webhook-timestamp, webhook-signature)` of a delivery of `body` signed with `key`.
    fn signed(id: &str, timestamp: i64, key: &[u8], body: &[u8]) -> [String; 3] {
        let mut mac = HmacSha256::new_from_slice(key).unwrap();
        mac.update(format!("{id}.{timestamp}.").as_bytes());
        mac.update(body);
        let signature = STANDARD.encode(mac.finalize().into_bytes());
        [id.to_owned(), timestamp.to_string(), format!("v1,AAAA v1,{signature}")]
    }

    fn headers(values: &[String; 3]) -> Headers<'_> {
        Headers { id: Some(&values[0]), timestamp: Some(&values[1]), signature: Some(&values[2]) }
    }

    #[test]
    fn signatures_follow_standard_webhooks() {
        // The Standard Webhooks reference example (its README's test vector).
        let key = STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let headers = Headers {
            id: Some("msg_p5jXN8AQM9LWM0D4loKWxJek"),
            timestamp: Some("1614265330"),
            signature: Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="),
        };
        let parsed = parse(headers).unwrap();
        assert!(verify(&key, &parsed, br#"{"test": 2432232314}"#));
        assert!(!verify(&key, &parsed, br#"{"test": 2432232315}"#));
        assert!(!verify(b"other key", &parsed, br#"{"test": 2432232314}"#));
    }

    #[test]
    fn any_listed_signature_may_match_and_bad_headers_are_refused() {
        let values = signed("m1", 10, b"k", b"body");
        let parsed = parse(headers(&values)).unwrap();
        assert!(verify(b"k", &parsed, b"body"));
        assert!(parse(Headers { id: None, ..headers(&values) }).is_none());
        assert!(parse(Headers { timestamp: Some("soon"), ..headers(&values) }).is_none());
        assert!(parse(Headers { signature: Some("v2,abc"), ..headers(&values) }).is_none());
    }

    #[test]
    fn bodies_become_json_text_or_bytes() {
        let values = signed("m1", 10, b"k", b"");
        let parsed = parse(headers(&values)).unwrap();
        let json = activity(&parsed, Some("application/json; charset=utf-8"), br#"{"a":[1,2]}"#);
        assert!(matches!(&json.value["body"].0, Ipld::Map(map) if map.contains_key("a")));
        let text = activity(&parsed, Some("text/plain"), b"hello");
        assert_eq!(text.value["body"].0, Ipld::String("hello".into()));
        let bytes = activity(&parsed, None, &[0xff, 0x00]);
        assert_eq!(bytes.value["body"].0, Ipld::Bytes(vec![0xff, 0x00]));
        assert_eq!(bytes.summary, "Webhook m1 (2 bytes)");
    }
}
