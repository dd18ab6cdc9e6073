//! `~/memory/<path>`: read a file (or list a directory), write, delete or fill a file — through
//! the memory feature's path rules and store, never around them.

use ipld_core::ipld::Ipld;
use seed_agents_protocol::Value;
use seed_agents_protocol::generated::{AgentMemoryEntry, AgentMemoryEntryType, AgentMemoryFileEncoding};
use serde::Serialize;

use super::{Context, Input, plural, record};
use crate::error::{ApiError, ApiResult};
use crate::memory::download::{self, blocking};
use crate::memory::path::MemoryPath;
use crate::memory::store;

/// The options `write ~/memory/<path>` understands.
const WRITE_OPTIONS: &[&str] = &["delete", "fromUrl", "fromAttachment"];

#[derive(Serialize)]
struct Listing<'a> {
    path: &'a str,
    entries: &'a [AgentMemoryEntry],
    #[serde(rename = "totalBytes")]
    total_bytes: i64,
}

#[derive(Serialize)]
struct Deleted<'a> {
    path: &'a str,
    deleted: bool,
}

/// Reads a file; a path ending in `/` (or the root) lists instead, and so does a file read that
/// failed where a directory is.
pub(super) async fn read(context: &Context<'_>, raw: String) -> ApiResult<Value> {
    let root = context.memory_root.clone();
    blocking(move || {
        if raw.is_empty() || raw.ends_with('/') {
            return list(&root, raw.trim_end_matches('/'));
        }
        let path = MemoryPath::parse(&raw)?;
        match store::read(&root, &path) {
            Ok(file) => {
                let summary = match (&file.encoding, &file.mime_type) {
                    (AgentMemoryFileEncoding::Utf8, _) => format!("Read {} ({} bytes).", file.path, file.size),
                    (AgentMemoryFileEncoding::Binary, mime) => format!(
                        "{} is a binary file ({} bytes{}); content not shown.",
                        file.path,
                        file.size,
                        mime.as_deref().map(|mime| format!(", {mime}")).unwrap_or_default()
                    ),
                };
                let mut output = record(summary, &file)?;
                if let Ipld::Map(fields) = &mut output.0 {
                    fields.remove("data");
                }
                Ok(output)
            }
            Err(error) => list(&root, &raw).map_err(|_| error),
        }
    })
    .await
}

fn list(root: &std::path::Path, raw: &str) -> ApiResult<Value> {
    let path = match raw {
        "" => None,
        raw => Some(MemoryPath::parse(raw)?),
    };
    let (rel, entries, total_bytes) = store::list_dir(root, path.as_ref())?;
    let files = entries.iter().filter(|entry| entry.type_ == AgentMemoryEntryType::File).count();
    let dirs = entries.len() - files;
    let place = if rel.is_empty() { "Memory root".to_owned() } else { format!("{rel}/") };
    let summary = if entries.is_empty() {
        format!("{place} is empty.")
    } else {
        let dirs = match dirs {
            0 => String::new(),
            n => format!(" and {} (read a directory address to look inside)", plural(n, "directory", "directories")),
        };
        format!("{place} holds {} ({total_bytes} bytes){dirs}.", plural(files, "file", "files"))
    };
    record(summary, &Listing { path: &rel, entries: &entries, total_bytes })
}

/// Writes `content` (a string) to the file, or follows one of [`WRITE_OPTIONS`].
pub(super) async fn write(context: &Context<'_>, raw: String, input: &Input<'_>) -> ApiResult<Value> {
    let options = input.known_options("write ~/memory/<path>", WRITE_OPTIONS)?;
    let option = |key: &str| options.and_then(|options| options.get(key));
    let option_text = |key: &str| match option(key) {
        Some(Ipld::String(text)) if !text.is_empty() => Some(text.clone()),
        _ => None,
    };
    let root = context.memory_root.clone();
    let output = if option("delete") == Some(&Ipld::Bool(true)) {
        let path = MemoryPath::parse(&raw)?;
        let deleted = blocking(move || store::delete(&root, &path).map(|deleted| (path, deleted))).await?;
        let (path, deleted) = deleted;
        if deleted {
            context.memory_changed();
        }
        let summary = if deleted {
            format!("Deleted {}.", path.as_str())
        } else {
            format!("Nothing existed at {}.", path.as_str())
        };
        return record(summary, &Deleted { path: path.as_str(), deleted });
    } else if let Some(url) = option_text("fromUrl") {
        from_url(context, &raw, &url).await?
    } else if let Some(id) = option_text("fromAttachment") {
        from_attachment(context, &raw, id).await?
    } else {
        let content = match input.get("content") {
            Some(Ipld::String(content)) => content.clone().into_bytes(),
            _ => {
                return Err(ApiError::invalid(
                    "write to ~/memory requires content (or options.delete / options.fromUrl / options.fromAttachment)",
                ));
            }
        };
        let path = MemoryPath::parse(&raw)?;
        crate::memory::check_quota(context.app, &context.owner_id, &root, &path, content.len()).await?;
        let entry = blocking(move || store::write(&root, &path, &content)).await?;
        record(format!("Wrote {} ({} bytes).", entry.path, entry.size), &entry)?
    };
    context.memory_changed();
    Ok(output)
}

async fn from_url(context: &Context<'_>, raw: &str, url: &str) -> ApiResult<Value> {
    let options = download::Options {
        allow_private_network: context.app.config.allow_private_network,
        idle_timeout: download::IDLE_TIMEOUT,
        now_ms: context.app.clock.now_ms(),
        room: crate::quota::room(context.app, &context.owner_id).await?,
    };
    let done = download::download(context.memory_root.clone(), url, Some(raw), options).await?;
    #[derive(Serialize)]
    struct Downloaded<'a> {
        path: &'a str,
        size: i64,
        #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none")]
        mime_type: Option<&'a str>,
        #[serde(rename = "finalUrl")]
        final_url: &'a str,
        #[serde(rename = "contentType", skip_serializing_if = "Option::is_none")]
        content_type: Option<&'a str>,
    }
    let entry = &done.entry;
    let mime = entry.mime_type.as_deref().map(|mime| format!(", {mime}")).unwrap_or_default();
    let summary = format!("Downloaded {} to {} ({} bytes{mime}).", done.final_url, entry.path, entry.size);
    record(
        summary,
        &Downloaded {
            path: &entry.path,
            size: entry.size,
            mime_type: entry.mime_type.as_deref(),
            final_url: &done.final_url,
            content_type: done.content_type.as_deref(),
        },
    )
}

async fn from_attachment(context: &Context<'_>, raw: &str, id: String) -> ApiResult<Value> {
    let dir = crate::attachments::session_dir(&crate::attachments::root(&context.app.config), context.session()?)?;
    let (info, data) = blocking(move || crate::attachments::read(&dir, &id)).await?;
    // The copy counts toward the storage quota like any other write (nothing it replaces is
    // subtracted: a copy over an existing file is refused a little early, never let through).
    crate::quota::check(context.app, &context.owner_id, data.len() as u64, 0).await?;
    let (root, raw, name) = (context.memory_root.clone(), raw.to_owned(), info.name.clone());
    let entry = blocking(move || {
        let target = if raw.is_empty() { format!("attachments/{name}") } else { raw };
        store::write(&root, &MemoryPath::parse(&target)?, &data)
    })
    .await?;
    #[derive(Serialize)]
    struct Saved<'a> {
        id: &'a str,
        path: &'a str,
        size: i64,
        #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none")]
        mime_type: Option<&'a str>,
    }
    let summary = format!("Saved attachment {} to memory at {} ({} bytes).", info.name, entry.path, entry.size);
    record(summary, &Saved { id: &info.id, path: &entry.path, size: entry.size, mime_type: entry.mime_type.as_deref() })
}
