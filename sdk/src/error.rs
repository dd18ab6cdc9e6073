//! The one error type of the SDK.

use std::fmt;

use seed_agents_protocol::UploadId;
use seed_agents_protocol::envelope::SignError;
use seed_agents_protocol::wire::WireError;

/// Why a call failed.
///
/// `#[non_exhaustive]`: later releases may add variants (match with a `_` arm).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request never got an HTTP answer (connection refused, connect or request timeout,
    /// TLS, …). [`Error::is_timeout`] tells timeouts apart.
    #[error("transport: {0}")]
    Transport(#[source] reqwest::Error),
    /// The server answered with a protocol error (`{_: 'Error', message, code?}`).
    #[error("server answered {status}: {message}")]
    #[non_exhaustive]
    Api {
        /// HTTP status.
        status: u16,
        /// The server's message, as sent (for people; decide on [`Error::code`]).
        message: String,
        /// The machine-readable class, when the server sent one.
        code: Option<ErrorCode>,
        /// With [`ErrorCode::UploadOffsetMismatch`]: the bytes the upload holds.
        received: Option<u64>,
        /// The server's `Retry-After`, in seconds, when it sent one (with
        /// [`ErrorCode::RateLimited`], and with a busy server's 503).
        retry_after: Option<std::time::Duration>,
    },
    /// The server refuses this client's protocol version as too old (HTTP 426,
    /// `protocol_too_old`): the app must be updated.
    #[error("this client is too old for the server (client protocol {client_protocol}): {message}")]
    #[non_exhaustive]
    ProtocolTooOld {
        /// The protocol this client declared.
        client_protocol: u32,
        /// The server's protocol, from `X-Agents-Protocol`, when sent.
        server_protocol: Option<u32>,
        /// The server's message.
        message: String,
    },
    /// The server answered, but the body is not the expected response; the raw bytes are kept.
    #[error("cannot decode the server's answer (HTTP {status})")]
    #[non_exhaustive]
    Decode {
        /// HTTP status.
        status: u16,
        /// The body as received.
        bytes: bytes::Bytes,
        /// What was wrong with it.
        #[source]
        source: DecodeError,
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
    #[non_exhaustive]
    Upload {
        /// The upload, for `resume_upload` or `AbortFileUpload`.
        upload_id: UploadId,
        /// Bytes the server acknowledged (at least this many are there).
        received: u64,
        /// Why it stopped.
        source: Box<Error>,
    },
    /// The server URL is not an absolute http(s) URL.
    #[error("invalid server URL {url:?}: {reason}")]
    #[non_exhaustive]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Why a server's answer could not be decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The body is not canonical DAG-CBOR of a known response.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// A valid response, but not the one the action is answered with.
    #[error("expected {expected}, got {got}")]
    UnexpectedResponse {
        /// The response the action is answered with.
        expected: &'static str,
        /// The response that came.
        got: &'static str,
    },
    /// An upload chunk's acknowledgement that is not the bytes sent so far.
    #[error("the server acknowledged {received} bytes, expected {expected}")]
    UnexpectedAcknowledgement {
        /// What the server says it holds.
        received: i64,
        /// The end of the chunk sent.
        expected: u64,
    },
    /// A success body with an HTTP error status.
    #[error("HTTP {status} with a success body ({got})")]
    SuccessWithErrorStatus {
        /// HTTP status.
        status: u16,
        /// The response that came.
        got: &'static str,
    },
}

/// The machine-readable `code` of an API error.
///
/// Known codes have their own arm; any other is kept in [`ErrorCode::Other`] (servers may add
/// codes, and clients must tolerate them).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// `protocol_too_old`: the client's protocol is below the server's minimum (HTTP 426).
    ProtocolTooOld,
    /// `update_required`: the action needs a newer client protocol (HTTP 426).
    UpdateRequired,
    /// `upload_offset_mismatch`: a chunk's offset is not the bytes the upload holds (HTTP 409).
    UploadOffsetMismatch,
    /// `subscription_limit`: too many subscriptions on one socket.
    SubscriptionLimit,
    /// `socket_limit`: too many sockets for the account.
    SocketLimit,
    /// `sign_in_required`: the turn's subscription provider must be signed in again (offer "Sign
    /// in with ChatGPT").
    SignInRequired,
    /// `rate_limited`: past one of the account's rate limits (HTTP 429); nothing was done, and
    /// the same call may be sent again after [`Error::retry_after`]. [`Client::call`](crate::Client::call)
    /// does so itself, up to its retry count.
    RateLimited,
    /// `quota_exceeded`: the write would take the account past its storage quota (HTTP 413);
    /// nothing was written.
    QuotaExceeded,
    /// Any other code, as sent.
    Other(String),
}

impl ErrorCode {
    /// The code as it travels.
    pub fn as_str(&self) -> &str {
        match self {
            ErrorCode::ProtocolTooOld => seed_agents_protocol::codes::PROTOCOL_TOO_OLD,
            ErrorCode::UpdateRequired => "update_required",
            ErrorCode::UploadOffsetMismatch => seed_agents_protocol::codes::UPLOAD_OFFSET_MISMATCH,
            ErrorCode::SubscriptionLimit => "subscription_limit",
            ErrorCode::SocketLimit => "socket_limit",
            ErrorCode::SignInRequired => seed_agents_protocol::codes::SIGN_IN_REQUIRED,
            ErrorCode::RateLimited => seed_agents_protocol::codes::RATE_LIMITED,
            ErrorCode::QuotaExceeded => seed_agents_protocol::codes::QUOTA_EXCEEDED,
            ErrorCode::Other(code) => code,
        }
    }
}

impl From<String> for ErrorCode {
    fn from(code: String) -> Self {
        match code.as_str() {
            seed_agents_protocol::codes::PROTOCOL_TOO_OLD => ErrorCode::ProtocolTooOld,
            "update_required" => ErrorCode::UpdateRequired,
            seed_agents_protocol::codes::UPLOAD_OFFSET_MISMATCH => ErrorCode::UploadOffsetMismatch,
            "subscription_limit" => ErrorCode::SubscriptionLimit,
            "socket_limit" => ErrorCode::SocketLimit,
            seed_agents_protocol::codes::SIGN_IN_REQUIRED => ErrorCode::SignInRequired,
            seed_agents_protocol::codes::RATE_LIMITED => ErrorCode::RateLimited,
            seed_agents_protocol::codes::QUOTA_EXCEEDED => ErrorCode::QuotaExceeded,
            _ => ErrorCode::Other(code),
        }
    }
}

impl From<&str> for ErrorCode {
    fn from(code: &str) -> Self {
        ErrorCode::from(code.to_owned())
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for ErrorCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Error {
    /// An API error as a server would answer it: for code that adapts or fakes a server (tests,
    /// mocks), since the variants are `#[non_exhaustive]`.
    ///
    /// ```
    /// use seed_agents_sdk::{Error, ErrorCode};
    /// let error = Error::api(404, "Agent not found", None);
    /// assert_eq!(error.status(), Some(404));
    /// let conflict = Error::api(409, "Conflict", Some(ErrorCode::UploadOffsetMismatch));
    /// assert_eq!(conflict.code(), Some(ErrorCode::UploadOffsetMismatch));
    /// ```
    pub fn api(status: u16, message: impl Into<String>, code: Option<ErrorCode>) -> Self {
        Error::Api { status, message: message.into(), code, received: None, retry_after: None }
    }

    /// An upload that stopped at `received` bytes because of `source`.
    pub fn upload(upload_id: impl Into<UploadId>, received: u64, source: Error) -> Self {
        Error::Upload { upload_id: upload_id.into(), received, source: Box::new(source) }
    }

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
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Api { code, .. } => code.clone(),
            Error::ProtocolTooOld { .. } => Some(ErrorCode::ProtocolTooOld),
            Error::Upload { source, .. } => source.code(),
            _ => None,
        }
    }

    /// How long the server asked the client to wait before sending again (`Retry-After`), when
    /// it said.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Error::Api { retry_after, .. } => *retry_after,
            Error::Upload { source, .. } => source.retry_after(),
            _ => None,
        }
    }

    /// Whether the call ran out of time (connect or request timeout).
    pub fn is_timeout(&self) -> bool {
        match self {
            Error::Transport(err) => err.is_timeout(),
            Error::Upload { source, .. } => source.is_timeout(),
            _ => false,
        }
    }

    /// Whether no answer came (so a request that is safe to repeat may be sent again).
    pub fn is_transport(&self) -> bool {
        matches!(self, Error::Transport(_))
    }
}
