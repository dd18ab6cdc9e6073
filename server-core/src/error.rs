//! The one error type of the server's features: what went wrong (an [`ErrorKind`]), the message
//! clients may match on, and an optional machine `code`.
//!
//! It knows no transport. The server's `http/` maps a kind to a status once, its WebSocket module
//! to an `error` frame once; features and storage only say what happened.

use std::borrow::Cow;
use std::fmt;

/// What kind of failure an [`ApiError`] is. Each edge maps a kind to its own form (an HTTP
/// status, a WebSocket `error` frame) in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The request is malformed or fails validation.
    Invalid,
    /// The envelope did not verify (shape, window, signature, signer, replay).
    Unauthorized,
    /// The caller sees the resource, but its role is too low.
    Forbidden,
    /// Missing, or not visible to the caller (which must look the same).
    NotFound,
    /// Conflicts with the current state (stale offset, payload mismatch, a live run).
    Conflict,
    /// Over a size or count limit.
    TooLarge,
    /// The request body is not `application/cbor`.
    UnsupportedMediaType,
    /// Too many of something in progress for this caller (uploads).
    TooMany,
    /// The request did not arrive in time (a body that stalls or trickles).
    TimedOut,
    /// The client's protocol cannot be served: it must update (`protocol_too_old`,
    /// `update_required`).
    UpdateRequired,
    /// The server is saturated right now; the same request may succeed shortly.
    Unavailable,
    /// A service the server called failed (model provider, Hypermedia server, download).
    Upstream,
    /// An action of the protocol this server does not implement yet.
    NotImplemented,
    /// Something that should not happen; the cause was logged, the client sees a generic message.
    Internal,
}

impl ErrorKind {
    /// Every kind.
    pub const ALL: [Self; 14] = [
        Self::Invalid,
        Self::Unauthorized,
        Self::Forbidden,
        Self::NotFound,
        Self::Conflict,
        Self::TooLarge,
        Self::UnsupportedMediaType,
        Self::TooMany,
        Self::TimedOut,
        Self::UpdateRequired,
        Self::Unavailable,
        Self::Upstream,
        Self::NotImplemented,
        Self::Internal,
    ];

    /// A stable name, for what the server stores (a run's failure).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Invalid => "invalid",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::NotFound => "not-found",
            Self::Conflict => "conflict",
            Self::TooLarge => "too-large",
            Self::UnsupportedMediaType => "unsupported-media-type",
            Self::TooMany => "too-many",
            Self::TimedOut => "timed-out",
            Self::UpdateRequired => "update-required",
            Self::Unavailable => "unavailable",
            Self::Upstream => "upstream",
            Self::NotImplemented => "not-implemented",
            Self::Internal => "internal",
        }
    }

    /// The kind [`Self::as_str`] names.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == name)
    }

    /// Whether the server (or a service it called) failed rather than the request: the same
    /// request may succeed later, and nothing about it was refused.
    pub fn is_server_side(self) -> bool {
        matches!(self, Self::Internal | Self::Unavailable | Self::Upstream | Self::NotImplemented)
    }
}

/// An expected failure of an action, with the protocol's message for it.
///
/// Unexpected failures are built with [`ApiError::internal`], which logs the cause and answers
/// with the generic `Internal server error` (the cause never reaches the client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    kind: ErrorKind,
    message: Cow<'static, str>,
    code: Option<&'static str>,
    /// With code `upload_offset_mismatch`: the bytes of the upload the server holds.
    received: Option<i64>,
    /// With code `rate_limited`: the seconds to wait before sending again (`Retry-After`).
    retry_after: Option<u64>,
}

impl ApiError {
    /// An error of any kind.
    pub fn new(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Self {
        Self { kind, message: message.into(), code: None, received: None, retry_after: None }
    }

    /// Bad input.
    pub fn invalid(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::Invalid, message)
    }

    /// The envelope did not verify.
    pub fn unauthorized(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::Unauthorized, message)
    }

    /// Visible, but the role is too low.
    pub fn forbidden(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::Forbidden, message)
    }

    /// Missing, or not visible to the caller.
    pub fn not_found(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    /// Conflicts with the current state.
    pub fn conflict(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::Conflict, message)
    }

    /// Over a size or count limit.
    pub fn too_large(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::TooLarge, message)
    }

    /// Too many of something in progress.
    pub fn too_many(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::TooMany, message)
    }

    /// The server is saturated; try again shortly.
    pub fn unavailable(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }

    /// A service we called failed.
    pub fn upstream(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::Upstream, message)
    }

    /// An action of the protocol this server does not implement yet.
    pub fn not_implemented(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::NotImplemented, message)
    }

    /// Adds a machine-readable code (`protocol_too_old`).
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// Adds the bytes an upload holds (with code `upload_offset_mismatch`).
    pub fn with_received(mut self, received: i64) -> Self {
        self.received = Some(received);
        self
    }

    /// Adds the seconds a client must wait before sending again (with code `rate_limited`).
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// The seconds to wait before sending again, sent as `Retry-After`.
    pub fn retry_after(&self) -> Option<u64> {
        self.retry_after
    }

    /// The bytes an upload holds, sent with an offset conflict.
    pub fn received(&self) -> Option<i64> {
        self.received
    }

    /// Something that should not happen: logs `cause` with the caller's location and answers the
    /// generic message. Use for database failures, I/O errors and broken invariants.
    #[track_caller]
    pub fn internal(cause: impl fmt::Display) -> Self {
        let location = std::panic::Location::caller();
        tracing::error!(%cause, at = %location, "internal error");
        Self::new(ErrorKind::Internal, INTERNAL_MESSAGE)
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message clients see.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The machine code, when there is one.
    pub fn code(&self) -> Option<&'static str> {
        self.code
    }
}

/// The message of every [`ErrorKind::Internal`] error (upstream's words).
pub const INTERNAL_MESSAGE: &str = "Internal server error";

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)
    }
}

impl std::error::Error for ApiError {}

/// A database failure is an internal error: logged, answered with the generic message (with the
/// `rusqlite` feature).
#[cfg(feature = "rusqlite")]
impl From<rusqlite::Error> for ApiError {
    #[track_caller]
    fn from(error: rusqlite::Error) -> Self {
        Self::internal(error)
    }
}

/// A compat refusal (`protocol_too_old`, `update_required`): the client must update.
impl From<seed_agents_compat::Refusal> for ApiError {
    fn from(refusal: seed_agents_compat::Refusal) -> Self {
        Self::new(ErrorKind::UpdateRequired, refusal.message).with_code(refusal.code)
    }
}

/// The result of an action handler.
pub type ApiResult<T> = Result<T, ApiError>;
