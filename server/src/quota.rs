//! The storage quota per account (`--storage-quota-bytes`, server/README.md "Storage quota"):
//! the bytes of the memory files of every agent an account owns plus the attachments of those
//! agents' sessions, whoever wrote them. A write that would pass it is refused with 413
//! `quota_exceeded` before anything is written.
//!
//! The usage is measured when a write asks (the owner's agents and sessions read on a reader
//! connection, their directories walked off the async threads), not kept as a running total, so
//! it stays right whatever changed the files (a deleted session, an agent's `execute`). Two
//! writes of one account in flight at once are each checked against the usage before either, so
//! together they can pass the quota by at most what they write.

use std::path::{Path, PathBuf};

use crate::app::App;
use crate::error::{ApiError, ApiResult};

/// The `code` of a quota refusal.
pub(crate) const QUOTA_EXCEEDED: &str = seed_agents_protocol::codes::QUOTA_EXCEEDED;

/// Refuses with 413 `quota_exceeded` when `owner`'s usage plus `adding` bytes (less `freeing`,
/// the bytes the write replaces) would pass the quota; a quota of 0 is no quota.
pub(crate) async fn check(app: &App, owner: &str, adding: u64, freeing: u64) -> ApiResult<()> {
    let quota = app.config.storage_quota_bytes;
    if quota == 0 {
        return Ok(());
    }
    let used = used(app, owner).await?;
    if used.saturating_sub(freeing).saturating_add(adding) > quota {
        return Err(exceeded(format!(
            "Storage quota exceeded: {used} of {quota} bytes in use, this write needs {adding} more"
        )));
    }
    Ok(())
}

/// The bytes `owner` may still store: `None` when there is no quota. For a write whose size is
/// known only once it has arrived (a download), which stops at this many bytes.
pub(crate) async fn room(app: &App, owner: &str) -> ApiResult<Option<u64>> {
    let quota = app.config.storage_quota_bytes;
    if quota == 0 {
        return Ok(None);
    }
    let used = used(app, owner).await?;
    Ok(Some(quota.saturating_sub(used)))
}

/// The refusal: 413 `quota_exceeded`, saying why.
pub(crate) fn exceeded(message: String) -> ApiError {
    ApiError::too_large(message).with_code(QUOTA_EXCEEDED)
}

/// The bytes `owner` stores now: its agents' memory files and their sessions' attachments.
async fn used(app: &App, owner: &str) -> ApiResult<u64> {
    let owner = owner.to_owned();
    let (dirs, sessions) = app
        .db
        .read(move |conn| {
            let dirs = crate::agents::store::owned_state_dirs(conn, &owner)?;
            let sessions = crate::sessions::store::ids_of_owned_agents(conn, &owner)?;
            Ok((dirs, sessions))
        })
        .await?;
    let attachments = app.config.attachments_dir();
    tokio::task::spawn_blocking(move || {
        let memory = dirs.iter().map(|dir| PathBuf::from(dir).join(crate::memory::path::MEMORY_DIR));
        let attached = sessions.iter().map(|session| attachments.join(session));
        memory.chain(attached).map(|dir| bytes_under(&dir)).sum::<u64>()
    })
    .await
    .map_err(ApiError::internal)
}

/// The bytes of the regular files under `dir` (none when it does not exist); symlinks are not
/// followed.
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() {
                total += entry.metadata().map_or(0, |meta| meta.len());
            }
        }
    }
    total
}
