//! The network side of a model step: one POST per attempt, retries before any answer byte was
//! consumed, timeouts, and the streamed answer handed to the wire's codec.

use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

use super::error::seconds;
use super::retry::{Retry, retryable_status};
use super::{
    Endpoint, ModelError, ModelErrorKind, ModelRequest, Step, StepEvents, Wire, anthropic, google, openai, responses,
    sse,
};

/// The most of an error body we read (the message is cut shorter still).
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// How long a step waits for each phase of an answer. There is no total limit: a model may
/// stream for as long as it keeps sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Connecting (10 s). The time to the response head is bounded by `connect + first_byte`;
    /// a connect phase shorter than that needs the `reqwest::Client` built with
    /// `connect_timeout`, as the server's outbound client is.
    pub connect: Duration,
    /// From the response head to the first body bytes (120 s); models may think for long.
    pub first_byte: Duration,
    /// The longest silence between two body chunks (120 s).
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self { connect: Duration::from_secs(10), first_byte: Duration::from_secs(120), idle: Duration::from_secs(120) }
    }
}

/// Runs model steps against any [`Endpoint`]. Cheap to clone; share one per process.
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    timeouts: Timeouts,
    retry: Retry,
    /// Failed steps per [`ModelErrorKind`] (in [`ModelErrorKind::ALL`]'s order), for `/metrics`.
    errors: std::sync::Arc<[std::sync::atomic::AtomicU64; ModelErrorKind::ALL.len()]>,
}

/// One step's request, ready to send as often as the retry policy allows.
#[derive(Debug)]
struct Prepared {
    /// The wire it goes out on (and its answer comes back in).
    wire: Wire,
    url: reqwest::Url,
    headers: HeaderMap,
    body: Bytes,
}

impl Client {
    /// A client over `http` (its connection pool, TLS and proxy settings) with the default
    /// [`Retry`] policy.
    pub fn new(http: reqwest::Client, timeouts: Timeouts) -> Self {
        Self { http, timeouts, retry: Retry::default(), errors: Default::default() }
    }

    /// The same client with another retry policy (tests use short waits).
    pub fn with_retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// One model step: sends the request (retrying per the policy before any byte was
    /// streamed), streams events to `on_event` as they arrive, returns the assembled step.
    /// Cancel by dropping the future. Error messages never contain the endpoint's key.
    pub async fn step(
        &self,
        endpoint: &Endpoint,
        request: &ModelRequest,
        on_event: &mut (dyn FnMut(super::StreamEvent) + Send),
    ) -> Result<Step, ModelError> {
        let key = endpoint.api_key.as_ref().map_or("", |key| key.as_str());
        self.run(endpoint, request, on_event).await.map_err(|error| {
            if let Some(at) = ModelErrorKind::ALL.iter().position(|kind| *kind == error.kind) {
                self.errors[at].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            error.redact(key)
        })
    }

    /// Failed steps so far, per kind of failure (`/metrics`).
    pub fn errors(&self) -> impl Iterator<Item = (ModelErrorKind, u64)> + '_ {
        ModelErrorKind::ALL
            .into_iter()
            .zip(self.errors.iter().map(|count| count.load(std::sync::atomic::Ordering::Relaxed)))
    }

    async fn run(
        &self,
        endpoint: &Endpoint,
        request: &ModelRequest,
        on_event: &mut StepEvents<'_>,
    ) -> Result<Step, ModelError> {
        let prepared = prepare(endpoint, request)?;
        let response = self.send(&prepared).await?;
        sse::decode(prepared.wire, sse::body_chunks(response, self.timeouts), on_event).await
    }

    /// Sends until a 2xx answer, a failure not worth retrying, or the retries are spent.
    async fn send(&self, prepared: &Prepared) -> Result<reqwest::Response, ModelError> {
        let mut backoff = self.retry.delays();
        loop {
            let (error, headers) = match self.attempt(prepared).await {
                Ok(response) if response.status().is_success() => return Ok(response),
                Ok(response) => {
                    let status = response.status().as_u16();
                    let headers = response.headers().clone();
                    let error = ModelError::http(status, &self.error_body(response).await);
                    if !retryable_status(status, &headers) {
                        return Err(error);
                    }
                    (error, Some(headers))
                }
                Err(error) => (error, None),
            };
            let Some(delay) = backoff.next() else {
                return Err(error);
            };
            let wait = self.retry.wait(delay, headers.as_ref());
            tracing::debug!(status = ?error.status, kind = ?error.kind, wait_ms = wait.as_millis(), "retrying model request");
            tokio::time::sleep(wait).await;
        }
    }

    /// One attempt, up to the response head.
    async fn attempt(&self, prepared: &Prepared) -> Result<reqwest::Response, ModelError> {
        let request =
            self.http.post(prepared.url.clone()).headers(prepared.headers.clone()).body(prepared.body.clone());
        let limit = self.timeouts.connect + self.timeouts.first_byte;
        match tokio::time::timeout(limit, request.send()).await {
            Err(_) => Err(ModelError::timeout(format!("Provider did not answer within {}", seconds(limit)))),
            Ok(Err(error)) => Err(ModelError::transport(&error)),
            Ok(Ok(response)) => Ok(response),
        }
    }

    /// Up to [`MAX_ERROR_BODY_BYTES`] of a failed answer's body, each chunk under the idle
    /// timeout; whatever arrived when reading stops.
    async fn error_body(&self, mut response: reqwest::Response) -> Vec<u8> {
        let mut body = Vec::new();
        while body.len() < MAX_ERROR_BODY_BYTES {
            match tokio::time::timeout(self.timeouts.idle, response.chunk()).await {
                Ok(Ok(Some(chunk))) => {
                    let room = MAX_ERROR_BODY_BYTES - body.len();
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                _ => break,
            }
        }
        body
    }
}

/// The URL, headers and body of a step, or why it cannot be sent.
fn prepare(endpoint: &Endpoint, request: &ModelRequest) -> Result<Prepared, ModelError> {
    let base = endpoint.base_url.trim_end_matches('/');
    let key = endpoint.api_key.as_ref().map_or("local", |key| key.as_str());
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let wire = endpoint.wire_for(request);
    let (url, body) = match wire {
        Wire::OpenAiChat => {
            headers.insert(AUTHORIZATION, secret_header(&format!("Bearer {key}"))?);
            (format!("{base}/chat/completions"), openai::body(endpoint, request))
        }
        Wire::OpenAiResponses => {
            headers.insert(AUTHORIZATION, secret_header(&format!("Bearer {key}"))?);
            (format!("{base}/responses"), responses::body(endpoint, request))
        }
        Wire::Anthropic => {
            headers.insert(HeaderName::from_static("x-api-key"), secret_header(key)?);
            headers.insert(HeaderName::from_static("anthropic-version"), HeaderValue::from_static("2023-06-01"));
            if anthropic::thinking_enabled(request).is_some() {
                headers.insert(
                    HeaderName::from_static("anthropic-beta"),
                    HeaderValue::from_static("interleaved-thinking-2025-05-14"),
                );
            }
            (format!("{base}/v1/messages"), anthropic::body(endpoint, request))
        }
        Wire::Google => {
            headers.insert(HeaderName::from_static("x-goog-api-key"), secret_header(key)?);
            (format!("{base}/{}", google::stream_path(&endpoint.model)), google::body(endpoint, request)?)
        }
    };
    for name in endpoint.extra_headers.keys() {
        headers.remove(name);
    }
    for (name, value) in &endpoint.extra_headers {
        headers.append(name, value.clone());
    }
    let url = reqwest::Url::parse(&url)
        .map_err(|error| ModelError::new(ModelErrorKind::Connect, format!("Invalid provider URL {url}: {error}")))?;
    let body = serde_json::to_vec(&body)
        .map_err(|error| ModelError::stream(format!("Could not encode the provider request: {error}")))?;
    Ok(Prepared { wire, url, headers, body: Bytes::from(body) })
}

/// A header carrying the key, marked sensitive so no debug output shows it.
fn secret_header(value: &str) -> Result<HeaderValue, ModelError> {
    let mut header = HeaderValue::from_str(value).map_err(|_| {
        ModelError::new(ModelErrorKind::Connect, "The provider API key contains characters not allowed in a header")
    })?;
    header.set_sensitive(true);
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Message, UserPart, endpoint_for};

    fn is_send<T: Send>(_: &T) {}

    #[test]
    fn a_step_can_run_on_any_worker() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = Client::new(reqwest::Client::new(), Timeouts::default());
        let endpoint = endpoint_for("ollama", "http://127.0.0.1:9/v1".into(), None, "m".into()).expect("supported");
        let request = ModelRequest {
            messages: vec![Message::User(vec![UserPart::Text("hi".into())])],
            ..ModelRequest::default()
        };
        let mut events = |_: crate::model::StreamEvent| {};
        // Never polled: only its type is checked.
        let step = client.step(&endpoint, &request, &mut events);
        is_send(&step);
        is_send(&client);
    }

    #[test]
    fn prepared_requests() {
        let endpoint = endpoint_for("anthropic", "https://api.anthropic.com/".into(), None, "c".into()).expect("ok");
        let prepared = prepare(&endpoint, &ModelRequest::default()).expect("prepared");
        assert_eq!(prepared.url.as_str(), "https://api.anthropic.com/v1/messages");
        assert_eq!(prepared.headers["x-api-key"], "local");
        assert!(prepared.headers["x-api-key"].is_sensitive());
        let google = endpoint_for("google", "http://127.0.0.1:9/v1beta/".into(), None, "gemini-2.5-flash".into());
        let prepared = prepare(&google.expect("ok"), &ModelRequest::default()).expect("prepared");
        assert_eq!(
            prepared.url.as_str(),
            "http://127.0.0.1:9/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        assert_eq!(prepared.headers["x-goog-api-key"], "local");
        assert!(prepared.headers["x-goog-api-key"].is_sensitive());
        assert!(prepared.headers.get("authorization").is_none());
        let bad = endpoint_for("custom", "not a url".into(), None, "m".into()).expect("ok");
        let error = prepare(&bad, &ModelRequest::default()).expect_err("invalid URL");
        assert_eq!(error.kind, ModelErrorKind::Connect);
    }

    /// A reasoning level on an OpenAI reasoning model goes to `/responses`; a subscription-style
    /// endpoint adds its own headers after the wire's.
    #[test]
    fn responses_requests_and_extra_headers() {
        let key = zeroize::Zeroizing::new("sk-abc".to_owned());
        let mut endpoint =
            endpoint_for("openai", "https://api.openai.com/v1/".into(), Some(key), "o3".into()).expect("ok");
        let leveled = ModelRequest { reasoning: Some("high".into()), ..ModelRequest::default() };
        let prepared = prepare(&endpoint, &leveled).expect("prepared");
        assert_eq!(
            (prepared.wire, prepared.url.as_str()),
            (Wire::OpenAiResponses, "https://api.openai.com/v1/responses")
        );
        assert_eq!(prepared.headers[AUTHORIZATION], "Bearer sk-abc");
        assert!(prepared.headers[AUTHORIZATION].is_sensitive());
        let plain = prepare(&endpoint, &ModelRequest::default()).expect("prepared");
        assert_eq!((plain.wire, plain.url.path()), (Wire::OpenAiChat, "/v1/chat/completions"));

        endpoint.extra_headers.insert("chatgpt-account-id", HeaderValue::from_static("acct_1"));
        endpoint.extra_headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json; charset=utf-8"));
        let prepared = prepare(&endpoint, &leveled).expect("prepared");
        assert_eq!(prepared.headers["chatgpt-account-id"], "acct_1");
        assert_eq!(prepared.headers[CONTENT_TYPE], "application/json; charset=utf-8");
        let shown = format!("{endpoint:?}");
        assert!(
            shown.contains("chatgpt-account-id") && !shown.contains("acct_1") && !shown.contains("sk-abc"),
            "{shown}"
        );
    }
}
