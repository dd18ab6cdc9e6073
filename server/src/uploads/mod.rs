//! Chunked uploads into agent memory or session attachments: begin, append, commit, abort.
//!
//! Beyond upstream (whose registry lived in memory), an upload is durable: its row in `uploads`
//! and its staging file `<dataDir>/uploads/<id>.part` survive a restart, and appending continues
//! at the recorded offset.
//!
//! Invariants:
//! - `received` in the row never exceeds the durable length of the staging file: a chunk is
//!   written and fsynced first, then `received` moves. A longer file (a crash between the two) is
//!   cut back to `received` by the next append.
//! - Every operation takes the staging file's lock before reading the row (see `staging`).
//! - Chunks go straight from the request to the file; nothing buffers more than the chunk.
//! - A chunk that arrives ahead of the one before it (a pipelining client) waits for it once
//!   (see `seed_agents_server_core::upload_order`), so a client may keep two appends in flight.
//! - A committed file appears at its target by one rename, so it is never seen half-written.

pub(crate) mod memory_target;
mod staging;
mod store;
mod sweep;

use std::path::PathBuf;

use crate::db::Connection;
use seed_agents_protocol::codes::UPLOAD_OFFSET_MISMATCH;
use seed_agents_protocol::generated::{
    AbortFileUpload, AbortFileUploadResponse, AppendFileUploadChunk, AppendFileUploadChunkResponse, BeginFileUpload,
    BeginFileUploadResponse, CommitFileUpload, CommitFileUploadResponse, FileUploadTarget,
};

use crate::access::{self, Need};
use crate::app::App;
use crate::attachments::{self, blocking};
use crate::bus::ChangeReason;
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::memory::path::MemoryPath;

pub(crate) use sweep::spawn_sweeper;

/// Where staging files live (`<dataDir>/uploads`).
pub(crate) fn staging_dir(config: &crate::config::Config) -> std::path::PathBuf {
    staging::dir(config)
}

/// The id of every upload row, expired or not (`doctor` looks for staging files without one).
pub(crate) fn all_ids(conn: &crate::db::Connection) -> ApiResult<std::collections::HashSet<String>> {
    Ok(store::all(conn, i64::MIN)?.into_iter().map(|(id, _)| id).collect())
}

/// The largest chunk: 8 MiB (the body limit of `AppendFileUploadChunk` is decided by it).
pub(crate) use seed_agents_server_core::body::MAX_CHUNK_BYTES;
/// The largest upload into memory: 2 GiB.
pub(crate) const MAX_MEMORY_UPLOAD_BYTES: i64 = 2 * 1024 * 1024 * 1024;
/// Uploads untouched this long expire.
pub(crate) const TTL_MS: i64 = 60 * 60 * 1000;
/// Unexpired uploads one account may have open.
pub(crate) const MAX_ACTIVE_PER_ACCOUNT: i64 = 8;

/// One upload's row.
#[derive(Debug, Clone)]
struct Upload {
    target: FileUploadTarget,
    size: i64,
    received: i64,
    /// For memory targets, the agent's state directory.
    state_dir: Option<PathBuf>,
    /// The target agent's owner (who hears `agent-memory-changed`).
    owner_id: String,
}

/// Uploads in progress (not expired), server-wide (`/metrics`).
pub(crate) async fn in_flight(app: &App) -> ApiResult<i64> {
    let since = app.clock.now_ms() - TTL_MS;
    app.db.read(move |conn| store::in_flight(conn, since)).await
}

/// `BeginFileUpload {target, size}`: validates the target now, so a long upload cannot fail at
/// the end; answers the id and the chunk size.
pub(crate) async fn begin_file_upload(
    app: &App,
    caller: &Caller,
    action: BeginFileUpload,
) -> ApiResult<BeginFileUploadResponse> {
    if action.size <= 0 {
        return Err(ApiError::invalid("Upload size must be a positive integer"));
    }
    match &action.target {
        FileUploadTarget::MemoryUploadTarget(target) => {
            let (agent_id, account) = (target.agent_id.clone(), caller.account_id.clone());
            let (state_dir, owner) = app.db.read(move |conn| memory_access(conn, &agent_id, &account)).await?;
            let path = MemoryPath::parse(&target.path)?;
            blocking(move || memory_target::check(&memory_target::root(&state_dir), &path)).await?;
            if action.size > MAX_MEMORY_UPLOAD_BYTES {
                return Err(ApiError::too_large("Upload exceeds the maximum file size"));
            }
            // Early, so a client does not send a file the commit would refuse.
            crate::quota::check(app, &owner, action.size as u64, 0).await?;
        }
        FileUploadTarget::SessionAttachmentUploadTarget(target) => {
            let owner = attachments::require_session(app, caller, &target.session_id, Need::Chat).await?;
            if crate::validate::js_trim(&target.name).is_empty() {
                return Err(ApiError::invalid("Attachment name is required"));
            }
            if action.size as u64 > attachments::MAX_ATTACHMENT_BYTES {
                return Err(ApiError::too_large("Upload exceeds the maximum attachment size"));
            }
            crate::quota::check(app, &owner, action.size as u64, 0).await?;
        }
    }
    let id = uuid::Uuid::new_v4().to_string();
    let part = staging::part_path(&app.config, &id);
    let created = part.clone();
    blocking(move || staging::create(&created).map_err(ApiError::internal)).await?;
    let (row_id, account, now, size) = (id.clone(), caller.account_id.clone(), app.clock.now_ms(), action.size);
    let target = action.target;
    let inserted = app
        .db
        .write(move |conn| {
            if store::active_count(conn, &account, now - TTL_MS)? >= MAX_ACTIVE_PER_ACCOUNT {
                return Err(ApiError::too_many("Too many uploads in progress"));
            }
            let staging_path = staging::relative_path(&row_id);
            let upload = store::NewUpload {
                id: &row_id,
                account_id: &account,
                target: &target,
                size,
                staging_path: &staging_path,
            };
            store::insert(conn, &upload, now)
        })
        .await;
    if let Err(error) = inserted {
        blocking(move || {
            staging::remove(&part);
            Ok(())
        })
        .await?;
        return Err(error);
    }
    Ok(BeginFileUploadResponse { extra: Default::default(), max_chunk_bytes: MAX_CHUNK_BYTES, upload_id: id.into() })
}

/// `AppendFileUploadChunk {uploadId, offset, content}`: chunks in order, each durable before the
/// answer.
pub(crate) async fn append_file_upload_chunk(
    app: &App,
    caller: &Caller,
    action: AppendFileUploadChunk,
) -> ApiResult<AppendFileUploadChunkResponse> {
    let _in_flight = app.upload_order.enter(&action.upload_id);
    let (mut file, mut upload) = locked(app, caller, &action.upload_id).await?;
    let chunk = action.content.0;
    if chunk.is_empty() {
        return Err(ApiError::invalid("Chunk content must be non-empty bytes"));
    }
    if chunk.len() as i64 > MAX_CHUNK_BYTES {
        return Err(ApiError::too_large("Chunk is too large"));
    }
    if action.offset > upload.received
        && let Some(waiter) = app.upload_order.reserve(&action.upload_id)
    {
        // Ahead of `received`: let the chunk before this one (if it is coming) take the lock.
        drop(file);
        waiter.wait().await;
        (file, upload) = locked(app, caller, &action.upload_id).await?;
    }
    // When this is the chunk the upload expects, a chunk waiting behind it looks again once it
    // is done, whatever the outcome. (The waiter took its slot before this append could take the
    // lock, so the news cannot arrive too early.) A misplaced chunk wakes nobody.
    let upload_id = action.upload_id;
    let _finished = (action.offset == upload.received).then(|| app.upload_order.on_finish(&upload_id));
    if action.offset != upload.received {
        return Err(ApiError::conflict(format!(
            "Chunk offset {} does not match {} bytes received",
            action.offset, upload.received
        ))
        .with_code(UPLOAD_OFFSET_MISMATCH)
        .with_received(upload.received));
    }
    let received = upload.received + chunk.len() as i64;
    if received > upload.size {
        return Err(ApiError::invalid("Upload exceeds its declared size"));
    }
    let offset = upload.received as u64;
    let file = blocking(move || {
        staging::append(&file, offset, &chunk).map_err(ApiError::internal)?;
        Ok(file)
    })
    .await?;
    let (id, now, before) = (upload_id.clone(), app.clock.now_ms(), upload.received);
    // The staging lock travels with the write and is released only once `received` is committed
    // (even if this request is dropped meanwhile: a client that disconnects must not let the next
    // append read the old offset while the new one is still on its way to the database).
    let file = app
        .db
        .write(move |conn| {
            if store::advance(conn, &id, before, received, now)? {
                Ok(file)
            } else {
                Err(ApiError::internal("an upload's row changed while its staging file was locked"))
            }
        })
        .await?;
    drop(file);
    Ok(AppendFileUploadChunkResponse { extra: Default::default(), received, upload_id: upload_id.clone() })
}

/// `CommitFileUpload {uploadId}`: moves the complete file to its target. Memory answers
/// `entry`, a session attachment `attachment`. A refused commit discards the upload, as
/// upstream does; an internal failure keeps it, so the commit can be retried.
pub(crate) async fn commit_file_upload(
    app: &App,
    caller: &Caller,
    action: CommitFileUpload,
) -> ApiResult<CommitFileUploadResponse> {
    let (file, upload) = locked(app, caller, &action.upload_id).await?;
    if upload.received != upload.size {
        return Err(ApiError::invalid(format!(
            "Upload has {} of {} bytes; cannot commit",
            upload.received, upload.size
        )));
    }
    let part = staging::part_path(&app.config, &action.upload_id);
    let now = app.clock.now_ms();
    let staged = part.clone();
    let size = upload.size as u64;
    // Bytes past the recorded size (a chunk written before a crash) never reach the target.
    let file = blocking(move || {
        staging::trim(&file, size).map_err(ApiError::internal)?;
        Ok(file)
    })
    .await?;
    // Again at the commit: the account's other writes may have used the room since the begin.
    // A refusal ends the upload (its staged bytes are removed below) and writes nothing.
    let quota = crate::quota::check(app, &upload.owner_id, size, 0).await;
    let committed = match (quota, upload.target) {
        (Err(refused), _) => Err(refused),
        (Ok(()), FileUploadTarget::MemoryUploadTarget(target)) => {
            let state_dir = upload.state_dir.ok_or_else(|| ApiError::internal("memory upload without a state dir"))?;
            let agent_id = target.agent_id.clone();
            let committed = blocking(move || {
                let path = MemoryPath::parse(&target.path)?;
                memory_target::commit(&memory_target::root(&state_dir), &path, &staged)
            })
            .await;
            if committed.is_ok() {
                let owner = upload.owner_id.clone();
                app.bus.account_change(owner, ChangeReason::AgentMemoryChanged, Some(&agent_id), None);
            }
            committed.map(|entry| CommitFileUploadResponse {
                extra: Default::default(),
                attachment: None,
                entry: Some(entry),
            })
        }
        (Ok(()), FileUploadTarget::SessionAttachmentUploadTarget(target)) => {
            let root = attachments::root(&app.config);
            blocking(move || {
                let dir = attachments::session_dir(&root, &target.session_id)?;
                let name = attachments::normalize_name(&target.name);
                attachments::store_staged(&dir, &target.session_id, &name, target.mime_type.as_deref(), &staged, now)
            })
            .await
            .map(|attachment| CommitFileUploadResponse {
                extra: Default::default(),
                attachment: Some(attachment),
                entry: None,
            })
        }
    };
    if committed.as_ref().is_err_and(|error| error.kind().is_server_side()) {
        return committed;
    }
    forget(app, &action.upload_id).await?;
    blocking(move || {
        staging::remove(&part);
        drop(file);
        Ok(())
    })
    .await?;
    committed
}

/// `AbortFileUpload {uploadId}`: discards the staged bytes.
pub(crate) async fn abort_file_upload(
    app: &App,
    caller: &Caller,
    action: AbortFileUpload,
) -> ApiResult<AbortFileUploadResponse> {
    let (file, _) = locked(app, caller, &action.upload_id).await?;
    forget(app, &action.upload_id).await?;
    let part = staging::part_path(&app.config, &action.upload_id);
    blocking(move || {
        staging::remove(&part);
        drop(file);
        Ok(())
    })
    .await?;
    Ok(AbortFileUploadResponse { extra: Default::default(), upload_id: action.upload_id })
}

/// Locks the caller's upload and reads it, checking the caller still has access to its target:
/// 404 `Upload not found` for a malformed, unknown, expired or another account's id, and for a
/// target the caller can no longer see; 403 when its role there became too low.
async fn locked(app: &App, caller: &Caller, upload_id: &str) -> ApiResult<(std::fs::File, Upload)> {
    if upload_id.is_empty() {
        return Err(ApiError::invalid("Upload id is required"));
    }
    let not_found = || ApiError::not_found("Upload not found");
    let canonical = uuid::Uuid::parse_str(upload_id).is_ok_and(|id| id.hyphenated().to_string() == upload_id);
    if !canonical {
        return Err(not_found());
    }
    let file = staging::open_locked(staging::part_path(&app.config, upload_id)).await.map_err(ApiError::internal)?;
    let Some(file) = file else {
        // A row without its staging file is left over from a commit interrupted after its
        // rename: the file is at its target, so the upload is finished.
        forget(app, upload_id).await?;
        return Err(not_found());
    };
    let (id, account, cutoff) = (upload_id.to_owned(), caller.account_id.clone(), app.clock.now_ms() - TTL_MS);
    let upload = app
        .db
        .read(move |conn| {
            let store::Row { target, size, received } =
                store::load(conn, &id, &account, cutoff)?.ok_or_else(not_found)?;
            // A target the caller can no longer see (or that is gone) makes the upload look
            // missing too, with the upload's own message (docs/protocol.md §C.0); a role too low
            // keeps its 403.
            let invisible = |error: ApiError| if error.kind() == ErrorKind::NotFound { not_found() } else { error };
            let (state_dir, owner_id) = match &target {
                FileUploadTarget::MemoryUploadTarget(memory) => {
                    let (state_dir, owner_id) = memory_access(conn, &memory.agent_id, &account).map_err(invisible)?;
                    (Some(state_dir), owner_id)
                }
                FileUploadTarget::SessionAttachmentUploadTarget(session) => {
                    let access = access::require_session(conn, &session.session_id, &account, Need::Chat);
                    (None, access.map_err(invisible)?.owner_id)
                }
            };
            Ok(Upload { target, size, received, state_dir, owner_id })
        })
        .await?;
    Ok((file, upload))
}

/// The agent's state directory and owner, when the account may write to it.
fn memory_access(conn: &Connection, agent_id: &str, account: &str) -> ApiResult<(PathBuf, String)> {
    let access = access::require(conn, agent_id, account, Need::Write)?;
    let state_dir = crate::agents::store::state_dir(conn, &access.agent_id)?;
    Ok((PathBuf::from(state_dir), access.owner_id))
}

/// Deletes an upload's row.
async fn forget(app: &App, upload_id: &str) -> ApiResult<()> {
    let id = upload_id.to_owned();
    app.db.write(move |conn| store::delete(conn, &id)).await
}

#[cfg(test)]
mod tests;
