//! Server frames as the socket sends them: JSON text, built once and shared by every subscriber
//! that reads the same shape.
//!
//! The one place a failure becomes an `error` frame ([`error`]); frames for clients of an older
//! protocol go through `seed_agents_compat::downgrade_frame` here and nowhere else.

use std::sync::Arc;

use seed_agents_protocol::generated::{AgentWsEvent, AppendFrame, ErrorFrame, RunJournalEntryInfo};
use seed_agents_protocol::version::AGENTS_PROTOCOL_VERSION;
use tokio_tungstenite::tungstenite::Utf8Bytes;

use crate::error::ApiError;

/// What one queue slot carries to a socket: one frame, or the frames of one commit (a session's
/// appends committed together go out in one slot, so each socket wakes and writes once for them),
/// encoded once per shape and shared by the sockets that read that shape.
#[derive(Debug)]
pub(crate) struct OutFrame {
    parts: Vec<Part>,
    bytes: usize,
}

/// For a session `append` (or a run's journal entry): the session (or run) and the `seq` a
/// socket dedupes it by against what its replay already sent.
pub(crate) type Dedupe = Option<(Arc<str>, i64)>;

/// One frame of an [`OutFrame`].
#[derive(Debug)]
pub(crate) struct Part {
    /// The JSON text.
    pub text: Utf8Bytes,
    /// What a socket dedupes it by.
    pub append: Dedupe,
}

impl OutFrame {
    /// The frames `parts`, in order.
    pub(crate) fn new(parts: Vec<Part>) -> Arc<Self> {
        let bytes = parts.iter().map(|part| part.text.len()).sum();
        Arc::new(Self { parts, bytes })
    }

    /// A frame with no `seq` to dedupe by.
    pub(crate) fn plain(text: Utf8Bytes) -> Arc<Self> {
        Self::new(vec![Part { text, append: None }])
    }

    /// The frames, in order.
    pub(crate) fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The bytes of text the frames hold (what a socket's queue budget counts).
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

/// The `append` frame of a workflow journal entry under `key` (`runs/<root>`).
pub(crate) fn journal(key: String, entry: RunJournalEntryInfo) -> AppendFrame {
    AppendFrame {
        extra: Default::default(),
        created_at: Some(entry.created_at),
        entry: Some(entry.entry),
        event: None,
        key,
        run_id: Some(entry.run_id),
        seq: Some(entry.seq),
    }
}

/// Which shape of a frame a client of `protocol` reads: the current one, or an older protocol's.
pub(crate) fn shape(protocol: u32) -> u32 {
    protocol.min(AGENTS_PROTOCOL_VERSION)
}

/// The frame as JSON text for a client of `protocol`.
pub(crate) fn encode(frame: &AgentWsEvent, protocol: u32) -> Utf8Bytes {
    let text = if shape(protocol) >= AGENTS_PROTOCOL_VERSION {
        serde_json::to_string(frame)
    } else {
        serde_json::to_string(&seed_agents_compat::downgrade_frame(protocol, frame.clone()))
    };
    // Frames hold strings, integers, finite floats and maps: serialising cannot fail. Should it
    // ever, the client hears a generic error rather than nothing.
    text.unwrap_or_else(|error| {
        tracing::error!(%error, "a WebSocket frame could not be encoded");
        r#"{"_":"error","message":"Internal server error"}"#.to_owned()
    })
    .into()
}

/// The `error` frame for a failure, as a client of `protocol` reads it: the same message and
/// `code` the HTTP answer carries, and the subscription `key` it concerns, when it concerns one;
/// the socket stays open.
pub(crate) fn error(error: &ApiError, key: Option<&str>, protocol: u32) -> Utf8Bytes {
    let frame = AgentWsEvent::ErrorFrame(ErrorFrame {
        extra: Default::default(),
        code: error.code().map(str::to_owned),
        key: key.map(str::to_owned),
        message: error.message().to_owned(),
    });
    encode(&frame, protocol)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn errors_keep_message_and_code_and_older_clients_lose_codes_they_do_not_know() {
        let refused = ApiError::new(ErrorKind::UpdateRequired, "Update the app").with_code("update_required");
        assert_eq!(
            error(&refused, None, 3).as_str(),
            r#"{"_":"error","code":"update_required","message":"Update the app"}"#
        );
        assert_eq!(error(&refused, None, 1).as_str(), r#"{"_":"error","message":"Update the app"}"#);
        let plain = ApiError::not_found("Agent not found");
        assert_eq!(
            error(&plain, Some("agents/a"), 2).as_str(),
            r#"{"_":"error","key":"agents/a","message":"Agent not found"}"#
        );
    }
}
