//! The machine-readable `code`s an `Error` response can carry (clients must tolerate others).

pub use crate::version::PROTOCOL_TOO_OLD;

/// HTTP 409 to an `AppendFileUploadChunk` whose offset is not the bytes the upload holds; the
/// error's `received` says how many it holds (the offset the next chunk must have).
pub const UPLOAD_OFFSET_MISMATCH: &str = "upload_offset_mismatch";

/// A turn on a subscription provider ("Sign in with ChatGPT") that cannot run until the owner
/// signs in again: the credentials are missing, or the vendor refused to refresh them. The run's
/// `error.code` is `sign-in-required`.
pub const SIGN_IN_REQUIRED: &str = "sign_in_required";

/// HTTP 400 to `SubmitProviderOAuthCode` whose redirect carries another sign-in's `state`; the
/// sign-in failed.
pub const SIGN_IN_STATE_MISMATCH: &str = "sign_in_state_mismatch";

/// HTTP 400 to `SubmitProviderOAuthCode` whose code the vendor refused; the sign-in failed.
pub const SIGN_IN_CODE_REFUSED: &str = "sign_in_code_refused";

/// HTTP 400 to `SubmitProviderOAuthCode` for a sign-in that already ended (completed, failed,
/// canceled, replaced or timed out).
pub const SIGN_IN_ENDED: &str = "sign_in_ended";

/// HTTP 429 to a request past one of its account's rate limits (writes, turns, uploads, bytes of
/// file content); the `Retry-After` header says how many seconds to wait. The request changed
/// nothing, so it may be sent again (newly signed) after that wait.
pub const RATE_LIMITED: &str = "rate_limited";

/// HTTP 413 to a write that would take its account past its storage quota (memory files and
/// attachments together); nothing was written.
pub const QUOTA_EXCEEDED: &str = "quota_exceeded";
