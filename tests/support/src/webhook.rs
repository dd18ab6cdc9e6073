//! Standard Webhooks, as a sender signs a call: the key of the `whsec_…` secret a trigger hands
//! out, an HMAC-SHA256 over `<id>.<timestamp>.<body>`, and the headers that carry it.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac as _};
use sha2::Sha256;

/// The key of a `whsec_…` secret (base64 after the prefix).
pub fn key(secret: &str) -> Vec<u8> {
    STANDARD.decode(secret.strip_prefix("whsec_").expect("a whsec_ secret")).expect("base64 after whsec_")
}

/// The headers of call `id` at `timestamp` (seconds) with `body`, signed with the secret's `key`:
/// `webhook-id`, `webhook-timestamp`, `webhook-signature` (`v1,<base64 HMAC>`) and a JSON
/// content type.
pub fn headers(key: &[u8], id: &str, timestamp: i64, body: &str) -> Vec<(&'static str, String)> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
    let signature = STANDARD.encode(mac.finalize().into_bytes());
    vec![
        ("webhook-id", id.to_owned()),
        ("webhook-timestamp", timestamp.to_string()),
        ("webhook-signature", format!("v1,{signature}")),
        ("content-type", "application/json".to_owned()),
    ]
}

/// [`headers`] signed with `secret` (`whsec_…`).
pub fn signed(secret: &str, id: &str, timestamp: i64, body: &str) -> Vec<(&'static str, String)> {
    headers(&key(secret), id, timestamp, body)
}

/// Now, in seconds since the epoch: the `webhook-timestamp` of a call sent now.
pub fn now_seconds() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() as i64
}
