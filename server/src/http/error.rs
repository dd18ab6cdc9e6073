//! The one error type of the HTTP edge: a status, a message clients may match on, and an
//! optional machine code. Rendered as CBOR `{_: 'Error', message, code?}`.

use std::borrow::Cow;
use std::fmt;

use axum::http::StatusCode;

/// An expected failure of an action, with the status and message the protocol gives it.
///
/// Unexpected failures are built with [`ApiError::internal`], which logs the cause and answers
/// 500 `Internal server error` (the cause never reaches the client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    status: StatusCode,
    message: Cow<'static, str>,
    code: Option<&'static str>,
}

impl ApiError {
    /// An error with any status.
    pub fn new(status: StatusCode, message: impl Into<Cow<'static, str>>) -> Self {
        Self { status, message: message.into(), code: None }
    }

    /// 400: bad input.
    pub fn bad_request(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 401: the envelope did not verify.
    pub fn unauthorized(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, message)
    }

    /// 403: visible, but the role is too low.
    pub fn forbidden(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::FORBIDDEN, message)
    }

    /// 404: missing, or not visible to the caller (which must look the same).
    pub fn not_found(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// 409: conflicts with the current state.
    pub fn conflict(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }

    /// 413: over a size limit.
    pub fn too_large(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, message)
    }

    /// 502: a service we called failed.
    pub fn bad_gateway(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::BAD_GATEWAY, message)
    }

    /// Adds a machine-readable code (`protocol_too_old`).
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// 500 for something that should not happen: logs `cause` with the caller's location and
    /// answers the generic message. Use for database failures, I/O errors and broken invariants.
    #[track_caller]
    pub fn internal(cause: impl fmt::Display) -> Self {
        let location = std::panic::Location::caller();
        tracing::error!(%cause, at = %location, "internal error");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "Internal server error")
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
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

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl std::error::Error for ApiError {}

impl From<rusqlite::Error> for ApiError {
    #[track_caller]
    fn from(error: rusqlite::Error) -> Self {
        Self::internal(error)
    }
}

/// The result of an action handler.
pub type ApiResult<T> = Result<T, ApiError>;
