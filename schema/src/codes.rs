//! The machine-readable `code`s an `Error` response can carry (clients must tolerate others).

pub use crate::version::PROTOCOL_TOO_OLD;

/// HTTP 409 to an `AppendFileUploadChunk` whose offset is not the bytes the upload holds; the
/// error's `received` says how many it holds (the offset the next chunk must have).
pub const UPLOAD_OFFSET_MISMATCH: &str = "upload_offset_mismatch";
