//! The one error type of the SDK.

use seed_agents_protocol::envelope::SignError;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request never got an HTTP answer (connection refused, timeout, TLS, …).
    #[error("transport: {0}")]
    Transport(#[source] reqwest::Error),
    /// The server answered with a protocol error (`{_: 'Error', message, code?}`).
    #[error("server answered {status}: {message}")]
    Api {
        /// HTTP status.
        status: u16,
        /// The server's message, as sent (clients may match on it).
        message: String,
        /// The machine-readable class, when the server sent one.
        code: Option<String>,
    },
    /// The server refuses this client's protocol version as too old (HTTP 426,
    /// `protocol_too_old`): the app must be updated.
    #[error("this client is too old for the server (client protocol {client_protocol}): {message}")]
    ProtocolTooOld {
        /// The protocol this client declared.
        client_protocol: u32,
        /// The server's protocol, from `X-Agents-Protocol`, when sent.
        server_protocol: Option<u32>,
        /// The server's message.
        message: String,
    },
    /// The server answered, but the body is not the expected response; the raw bytes are kept.
    #[error("cannot decode the server's answer (HTTP {status}): {reason}")]
    Decode {
        /// HTTP status.
        status: u16,
        /// The body as received.
        bytes: bytes::Bytes,
        /// What was wrong with it.
        reason: String,
    },
    /// The envelope could not be built or signed.
    #[error("cannot sign the action: {0}")]
    Sign(#[from] SignError),
    /// An upload's source could not be read (or ended before its declared size).
    #[error("cannot read the upload's source: {0}")]
    Source(#[source] std::io::Error),
    /// An upload stopped. The server keeps what it received for an hour;
    /// [`Client::resume_upload`](crate::Client::resume_upload) continues from `received` (the
    /// server may have a little more: chunks in flight when it stopped can still land, and
    /// resuming skips them).
    #[error("upload {upload_id} stopped at {received} bytes: {source}")]
    Upload {
        /// The upload, for `resume_upload` or `AbortFileUpload`.
        upload_id: String,
        /// Bytes the server acknowledged (at least this many are there).
        received: u64,
        /// Why it stopped.
        source: Box<Error>,
    },
    /// The server URL is not an absolute http(s) URL.
    #[error("invalid server URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl Error {
    /// The HTTP status, when the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } | Error::Decode { status, .. } => Some(*status),
            Error::ProtocolTooOld { .. } => Some(426),
            Error::Transport(err) => err.status().map(|s| s.as_u16()),
            Error::Upload { source, .. } => source.status(),
            Error::Sign(_) | Error::InvalidUrl { .. } | Error::Source(_) => None,
        }
    }

    /// The server's `code`, when it sent one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Api { code, .. } => code.as_deref(),
            Error::ProtocolTooOld { .. } => Some(seed_agents_protocol::version::PROTOCOL_TOO_OLD),
            Error::Upload { source, .. } => source.code(),
            _ => None,
        }
    }
}
