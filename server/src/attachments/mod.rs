//! Session attachments: files a user attaches to a session, private to it and deleted with it.
//!
//! Stored under `<dataDir>/session-attachments/<sessionId>/` as `<sha256>.bin` (the bytes) and
//! `<sha256>.json` (the `SessionAttachmentInfo`, the same sidecar upstream writes). The id is the
//! lowercase hex SHA-256 of the bytes, so uploading identical bytes again answers the existing
//! record with its original name and MIME type.
//!
//! Invariants:
//! - A `.json` sidecar exists only once its `.bin` is complete: both are written to a temporary
//!   file, fsynced and renamed, the `.bin` first, then the directory is fsynced.
//! - Writers of one session take the session directory's lock file, so the 200-per-session cap
//!   is exact under concurrency.
//! - No file operation runs on the async executor's threads.

pub(crate) mod store;

use std::path::{Path, PathBuf};

use seed_agents_protocol::Bytes;
use seed_agents_protocol::generated::{
    ReadSessionAttachment, ReadSessionAttachmentResponse, UploadSessionAttachment, UploadSessionAttachmentResponse,
};

use crate::access::{self, Need};
use crate::app::App;
use crate::caller::Caller;
use crate::config::Config;
use crate::error::{ApiError, ApiResult};

pub(crate) use store::{infer_mime_type, read, store_bytes, store_staged};

/// The largest attachment: 100 MiB (the body limit of `UploadSessionAttachment` is decided by it).
pub(crate) use seed_agents_server_core::body::MAX_ATTACHMENT_BYTES;
/// The most attachments one session holds.
pub(crate) const MAX_ATTACHMENTS_PER_SESSION: usize = 200;
/// Names longer than this (UTF-8 bytes) keep only their last 64 characters.
pub(crate) const MAX_NAME_BYTES: usize = 256;

/// Where every session's attachments live.
pub(crate) fn root(config: &Config) -> PathBuf {
    config.attachments_dir()
}

/// One session's attachment directory; 400 `Invalid session id` unless the id is
/// `[A-Za-z0-9_-]{1,128}` (so it can never name another directory).
pub(crate) fn session_dir(root: &Path, session_id: &str) -> ApiResult<PathBuf> {
    let valid = (1..=128).contains(&session_id.len())
        && session_id.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_');
    if !valid {
        return Err(ApiError::invalid("Invalid session id"));
    }
    Ok(root.join(session_id))
}

/// A client's file name as stored: the last path segment, control characters removed, trimmed;
/// `file` when nothing is left; only the last 64 characters when longer than 256 bytes.
pub(crate) fn normalize_name(raw: &str) -> String {
    let trimmed = crate::validate::js_trim(raw);
    let base = trimmed.rsplit(['/', '\\']).next().unwrap_or("");
    let cleaned: String = base.chars().filter(|c| !matches!(*c as u32, 0x00..=0x1f | 0x7f)).collect();
    let cleaned = crate::validate::js_trim(&cleaned);
    if cleaned.is_empty() {
        return "file".to_owned();
    }
    if cleaned.len() > MAX_NAME_BYTES {
        // Upstream slices UTF-16 code units; characters are the closest safe equivalent.
        let count = cleaned.chars().count();
        return cleaned.chars().skip(count.saturating_sub(64)).collect();
    }
    cleaned.to_owned()
}

/// The MIME type stored: the client's (trimmed) when not blank, else inferred from the name.
pub(crate) fn mime_type_for(name: &str, given: Option<&str>) -> Option<String> {
    match given.map(crate::validate::js_trim) {
        Some(given) if !given.is_empty() => Some(given.to_owned()),
        _ => infer_mime_type(name),
    }
}

/// `UploadSessionAttachment {sessionId, name, mimeType?, content}` (writer, or chatter on a
/// public-chat agent).
pub(crate) async fn upload_session_attachment(
    app: &App,
    caller: &Caller,
    action: UploadSessionAttachment,
) -> ApiResult<UploadSessionAttachmentResponse> {
    let owner = require_session(app, caller, &action.session_id, Need::Chat).await?;
    let dir = session_dir(&root(&app.config), &action.session_id)?;
    crate::quota::check(app, &owner, action.content.0.len() as u64, 0).await?;
    let now = app.clock.now_ms();
    let UploadSessionAttachment { content: Bytes(content), mime_type, name, session_id } = action;
    let attachment =
        blocking(move || store_bytes(&dir, &session_id, &normalize_name(&name), mime_type.as_deref(), &content, now))
            .await?;
    Ok(UploadSessionAttachmentResponse { extra: Default::default(), attachment })
}

/// `ReadSessionAttachment {sessionId, attachmentId}` (reader): the record and its bytes.
pub(crate) async fn read_session_attachment(
    app: &App,
    caller: &Caller,
    action: ReadSessionAttachment,
) -> ApiResult<ReadSessionAttachmentResponse> {
    require_session(app, caller, &action.session_id, Need::Read).await?;
    let dir = session_dir(&root(&app.config), &action.session_id)?;
    let (attachment, data) = blocking(move || read(&dir, &action.attachment_id)).await?;
    Ok(ReadSessionAttachmentResponse { extra: Default::default(), attachment, data: Bytes(data) })
}

/// Removes the attachments of sessions that were just deleted (call after the deleting commit).
/// Failures are logged, never returned: the sessions are gone either way, and the boot sweep of
/// `uploads` removes directories whose session no longer exists.
pub(crate) async fn remove_for_sessions(app: &App, session_ids: Vec<String>) {
    let root = root(&app.config);
    let removed = tokio::task::spawn_blocking(move || {
        for session_id in session_ids {
            let Ok(dir) = session_dir(&root, &session_id) else { continue };
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    tracing::warn!(%error, dir = %dir.display(), "could not remove a deleted session's attachments")
                }
            }
        }
    })
    .await;
    if let Err(error) = removed {
        tracing::warn!(%error, "removing deleted sessions' attachments panicked");
    }
}

/// 404 `Session not found` unless the caller has `need` on the session's agent.
pub(crate) async fn require_session(app: &App, caller: &Caller, session_id: &str, need: Need) -> ApiResult<String> {
    let account = caller.account_id.clone();
    let session_id = session_id.to_owned();
    app.db
        .read(move |conn| access::require_session(conn, &session_id, &account, need).map(|access| access.owner_id))
        .await
}

/// Runs blocking file work off the async executor.
pub(crate) async fn blocking<T: Send + 'static>(work: impl FnOnce() -> ApiResult<T> + Send + 'static) -> ApiResult<T> {
    tokio::task::spawn_blocking(work).await.map_err(ApiError::internal)?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitised_like_upstream() {
        assert_eq!(normalize_name("  ../../etc/passwd "), "passwd");
        assert_eq!(normalize_name("C:\\Users\\me\\photo.png"), "photo.png");
        assert_eq!(normalize_name("a\u{0}b\u{1f}c\u{7f}.txt"), "abc.txt");
        assert_eq!(normalize_name("   "), "file");
        assert_eq!(normalize_name("dir/"), "file");
        let long = format!("{}.md", "x".repeat(300));
        let kept = normalize_name(&long);
        assert_eq!(kept.chars().count(), 64);
        assert!(kept.ends_with("x.md"));
        assert_eq!(normalize_name(&"é".repeat(128)), "é".repeat(128), "256 bytes is allowed");
    }

    #[test]
    fn mime_types_are_given_or_inferred() {
        assert_eq!(mime_type_for("a.PNG", None).as_deref(), Some("image/png"));
        assert_eq!(mime_type_for("a.png", Some("  ")).as_deref(), Some("image/png"));
        assert_eq!(mime_type_for("a.png", Some(" text/x-custom ")).as_deref(), Some("text/x-custom"));
        assert_eq!(mime_type_for("noext", None), None);
        assert_eq!(mime_type_for("a.ts", None).as_deref(), Some("text/plain"));
    }

    #[test]
    fn session_dirs_refuse_odd_ids() {
        let root = Path::new("/r");
        assert_eq!(session_dir(root, "abc-DEF_1").unwrap(), Path::new("/r/abc-DEF_1"));
        for bad in ["", "..", "a/b", "a.b", &"x".repeat(129)] {
            assert_eq!(session_dir(root, bad).unwrap_err().message(), "Invalid session id", "{bad}");
        }
    }
}
