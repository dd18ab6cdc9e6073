//! The legacy HTTP+SSE transport of MCP (protocol revision 2024-11-05), as an rmcp `Transport`.
//!
//! rmcp ships only Streamable HTTP, and servers that predate it still answer SSE, which the
//! protocol's fallback rule (docs/protocol.md §G.5: no `transport` means Streamable HTTP, then
//! SSE) needs. The client opens `GET <url>` as an event stream; the first `endpoint` event names
//! the URL to `POST` each JSON-RPC message to (resolved against the stream's URL, and refused
//! unless it has the same origin, so a server cannot send the configured headers elsewhere); the
//! server's messages arrive as `message` events on the stream.

use std::collections::HashMap;
use std::pin::Pin;

use bytes::Bytes;
use futures_util::{Stream, StreamExt as _};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue};
use reqwest::{Client, Url};
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;

/// Why the SSE transport failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SseError {
    /// The HTTP request failed.
    #[error("{0}")]
    Http(#[from] reqwest::Error),
    /// The server answered with something else than expected.
    #[error("{0}")]
    Protocol(String),
}

type Events = Pin<Box<dyn Stream<Item = Result<sseer::event::Event, String>> + Send>>;

/// An open SSE session: the event stream and the URL messages are posted to.
pub(crate) struct SseTransport {
    client: Client,
    endpoint: Url,
    headers: HashMap<HeaderName, HeaderValue>,
    events: Events,
    max_event_bytes: usize,
}

impl std::fmt::Debug for SseTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values may be secrets: never shown.
        f.debug_struct("SseTransport").field("endpoint", &self.endpoint.as_str()).finish_non_exhaustive()
    }
}

impl SseTransport {
    /// Opens the event stream at `url` and waits for its `endpoint` event.
    pub(crate) async fn connect(
        client: Client,
        url: Url,
        headers: HashMap<HeaderName, HeaderValue>,
        max_event_bytes: usize,
    ) -> Result<Self, SseError> {
        let mut request = client.get(url.clone()).header(ACCEPT, "text/event-stream");
        for (name, value) in &headers {
            request = request.header(name, value.clone());
        }
        let response = request.send().await?;
        if !response.status().is_success() {
            return Err(SseError::Protocol(format!("HTTP {}", response.status().as_u16())));
        }
        let is_stream = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.trim_start().starts_with("text/event-stream"));
        if !is_stream {
            return Err(SseError::Protocol("the server did not answer with an event stream".to_owned()));
        }
        // The parser buffers an event until it ends: the whole stream is bounded, so a server
        // that never ends an event cannot grow memory without limit (a session serves one
        // discovery or one call).
        let budget = max_event_bytes.saturating_mul(4);
        let chunks = response.bytes_stream().scan(0usize, move |seen, chunk| {
            let chunk = chunk.map_err(|error| error.to_string()).and_then(|chunk: Bytes| {
                *seen += chunk.len();
                if *seen > budget { Err("the event stream is over its size limit".to_owned()) } else { Ok(chunk) }
            });
            std::future::ready(Some(chunk))
        });
        let mut events: Events = Box::pin(sseer::EventStream::new(chunks).map(|event| match event {
            Ok(event) => Ok(event),
            Err(error) => Err(match error {
                sseer::errors::EventStreamError::Transport(error) => error,
                sseer::errors::EventStreamError::Utf8Error(error) => error.to_string(),
            }),
        }));
        let endpoint = loop {
            match events.next().await {
                None => return Err(SseError::Protocol("the event stream ended before its endpoint".to_owned())),
                Some(Err(error)) => return Err(SseError::Protocol(error)),
                Some(Ok(event)) if event.event == "endpoint" => break event.data.trim().to_owned(),
                Some(Ok(_)) => continue,
            }
        };
        let endpoint = url
            .join(&endpoint)
            .map_err(|_| SseError::Protocol("the server sent an endpoint that is not a URL".to_owned()))?;
        if endpoint.origin() != url.origin() {
            return Err(SseError::Protocol("the server sent an endpoint on another origin".to_owned()));
        }
        Ok(Self { client, endpoint, headers, events, max_event_bytes })
    }
}

impl Transport<RoleClient> for SseTransport {
    type Error = SseError;

    fn send(&mut self, item: ClientJsonRpcMessage) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let mut request = self.client.post(self.endpoint.clone()).header(CONTENT_TYPE, "application/json");
        for (name, value) in &self.headers {
            request = request.header(name, value.clone());
        }
        async move {
            let body = serde_json::to_vec(&item).map_err(|error| SseError::Protocol(error.to_string()))?;
            let response = request.body(body).send().await?;
            if !response.status().is_success() {
                return Err(SseError::Protocol(format!("HTTP {}", response.status().as_u16())));
            }
            Ok(())
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            let event = match self.events.next().await? {
                Ok(event) => event,
                Err(error) => {
                    tracing::debug!(%error, "MCP event stream failed");
                    return None;
                }
            };
            if event.data.len() > self.max_event_bytes {
                tracing::warn!(bytes = event.data.len(), "MCP server sent an event over the size limit");
                return None;
            }
            if !(event.event.is_empty() || event.event == "message") {
                continue;
            }
            match serde_json::from_str(&event.data) {
                Ok(message) => return Some(message),
                Err(error) => tracing::debug!(%error, "MCP server sent a message that is not JSON-RPC"),
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}
