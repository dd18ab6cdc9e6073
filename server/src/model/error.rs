//! What can go wrong in a model step, classified once, with messages in the OpenAI SDK's style
//! (`"<status> <error.message or body>"`) because that is the text upstream shows users.

use std::time::Duration;

/// The longest error message we keep, in bytes; provider bodies can be large.
const MAX_MESSAGE_BYTES: usize = 4096;

/// A failed model step.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ModelError {
    /// What kind of failure it was.
    pub kind: ModelErrorKind,
    /// The provider's HTTP status, when it answered with one.
    pub status: Option<u16>,
    /// The message for the user and the logs; never contains the API key.
    pub message: String,
}

/// The kind of a [`ModelError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModelErrorKind {
    /// The provider answered with a non-2xx status (after any retries).
    Http,
    /// No connection could be made.
    Connect,
    /// The provider did not answer in time, or its stream went idle.
    Timeout,
    /// The stream broke off or carried something we could not read (bad SSE or JSON, a vendor
    /// `error` event).
    Stream,
    /// The provider ended the answer for a reason that is a failure (`content_filter`,
    /// `refusal`, …).
    FinishReason,
    /// This build has no codec for the provider type or model.
    Unsupported,
}

impl ModelErrorKind {
    /// Every kind.
    pub const ALL: [Self; 6] =
        [Self::Http, Self::Connect, Self::Timeout, Self::Stream, Self::FinishReason, Self::Unsupported];

    /// A stable name (the `type` label of `/metrics`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Connect => "connect",
            Self::Timeout => "timeout",
            Self::Stream => "stream",
            Self::FinishReason => "finish_reason",
            Self::Unsupported => "unsupported",
        }
    }
}

impl ModelError {
    pub(crate) fn new(kind: ModelErrorKind, message: impl Into<String>) -> Self {
        Self { kind, status: None, message: bounded(message.into()) }
    }

    pub(crate) fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ModelErrorKind::Unsupported, message)
    }

    pub(crate) fn stream(message: impl Into<String>) -> Self {
        Self::new(ModelErrorKind::Stream, message)
    }

    pub(crate) fn timeout(message: impl Into<String>) -> Self {
        Self::new(ModelErrorKind::Timeout, message)
    }

    /// `Provider finish_reason: X`.
    pub(crate) fn finish_reason(reason: &str) -> Self {
        Self::new(ModelErrorKind::FinishReason, format!("Provider finish_reason: {reason}"))
    }

    /// A non-2xx answer: `"<status> <message>"` with the message taken from the body.
    pub(crate) fn http(status: u16, body: &[u8]) -> Self {
        Self { kind: ModelErrorKind::Http, status: Some(status), message: bounded(http_message(status, body)) }
    }

    /// A transport failure of `reqwest` before or while sending.
    pub(crate) fn transport(error: &reqwest::Error) -> Self {
        let kind = if error.is_timeout() { ModelErrorKind::Timeout } else { ModelErrorKind::Connect };
        Self::new(kind, format!("Connection error: {}", error_chain(error)))
    }

    /// Replaces every occurrence of `secret` in the message (a provider may echo the key).
    pub(crate) fn redact(mut self, secret: &str) -> Self {
        if !secret.is_empty() && self.message.contains(secret) {
            self.message = self.message.replace(secret, "[redacted]");
        }
        self
    }
}

/// `N s` with at most one decimal (`120 s`, `0.3 s`).
pub(crate) fn seconds(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis.is_multiple_of(1000) {
        format!("{} s", millis / 1000)
    } else {
        format!("{:.1} s", duration.as_secs_f64())
    }
}

/// An error with its sources, which `reqwest`'s own `Display` leaves out.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The OpenAI SDK's message for a status and body: `error.message` from a JSON error body (every
/// vendor nests it there; a plain string `error` counts too, and so does the first element of an
/// array, as Gemini wraps errors outside SSE), else the body text, else `status code (no body)`.
fn http_message(status: u16, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return format!("{status} status code (no body)");
    }
    let from_json = serde_json::from_str::<serde_json::Value>(text).ok().and_then(|json| {
        let error = json.get("error").or_else(|| json.get(0)?.get("error"))?;
        match error.get("message") {
            Some(serde_json::Value::String(message)) => Some(message.clone()),
            _ => match error {
                serde_json::Value::String(message) => Some(message.clone()),
                other => Some(other.to_string()),
            },
        }
    });
    format!("{status} {}", from_json.as_deref().unwrap_or(text))
}

fn bounded(mut message: String) -> String {
    if message.len() > MAX_MESSAGE_BYTES {
        let mut cut = MAX_MESSAGE_BYTES;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push('…');
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_messages_follow_the_openai_sdk() {
        let openai = br#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#;
        assert_eq!(ModelError::http(401, openai).message, "401 Incorrect API key provided");
        let anthropic =
            br#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too large"}}"#;
        assert_eq!(ModelError::http(400, anthropic).message, "400 max_tokens: too large");
        assert_eq!(ModelError::http(404, br#"{"error":"model 'x' not found"}"#).message, "404 model 'x' not found");
        let gemini = br#"{"error":{"code":400,"message":"API key not valid.","status":"INVALID_ARGUMENT"}}"#;
        assert_eq!(ModelError::http(400, gemini).message, "400 API key not valid.");
        let wrapped = br#"[{"error":{"code":429,"message":"Quota exceeded.","status":"RESOURCE_EXHAUSTED"}}]"#;
        assert_eq!(ModelError::http(429, wrapped).message, "429 Quota exceeded.");
        assert_eq!(ModelError::http(500, b"nope\n").message, "500 nope");
        assert_eq!(ModelError::http(502, b"").message, "502 status code (no body)");
        assert_eq!(ModelError::http(400, br#"{"detail":"bad"}"#).message, r#"400 {"detail":"bad"}"#);
        let error = ModelError::http(429, b"slow down");
        assert_eq!((error.kind, error.status), (ModelErrorKind::Http, Some(429)));
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let body = "é".repeat(10_000);
        let message = ModelError::http(500, body.as_bytes()).message;
        assert!(message.len() <= MAX_MESSAGE_BYTES + '…'.len_utf8());
        assert!(message.ends_with('…'));
    }

    #[test]
    fn redaction_removes_the_key() {
        let error = ModelError::http(401, br#"{"error":{"message":"Incorrect API key provided: sk-abc123"}}"#);
        assert_eq!(error.redact("sk-abc123").message, "401 Incorrect API key provided: [redacted]");
    }

    #[test]
    fn seconds_are_short() {
        assert_eq!(seconds(Duration::from_secs(120)), "120 s");
        assert_eq!(seconds(Duration::from_millis(300)), "0.3 s");
    }
}
