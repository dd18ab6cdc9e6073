//! `write hm://… {action: "comment.update" | "comment.delete"}`: a new version, or a tombstone,
//! of one of the signer's comments (raw dotted commands; docs/hypermedia.md §2.3).
//!
//! `options.input.comment` (or `commentId`) names the comment, `hm://<author>/<tsid>` or
//! `<author>/<tsid>`; the address is not read. The comment is read with `Comment`, and must be
//! the signer's: an edit signed by another key would be another record, not this comment's
//! new version (upstream does not check, and publishes it). Both publish a Comment blob with
//! the comment's tsid as `id` and a new `ts`, on the same document and version, with the same
//! visibility:
//!
//! - `comment.update`: the new body, from `content` (or `options.input.body`, `content`, `text`),
//!   made blocks like a new comment's and its `hm://` links checked; the reply links stay;
//! - `comment.delete`: an empty body and no reply links.

use ipld_core::cid::Cid;
use seed_agents_protocol::{Principal, Value};

use super::comment::{comment_id, is_private, read_comment};
use super::{MAX_CONTENT, Output, Publish, field, links, markdown, version_cids};
use crate::error::{ApiError, ApiResult};
use crate::hm::{blob, comment};

/// `comment.update`: `content` is the write's own.
pub(super) async fn update(publish: &Publish<'_, '_>, content: Option<&str>) -> ApiResult<Value> {
    let input = publish.raw_input()?;
    let body = match content.filter(|content| !content.trim().is_empty()) {
        Some(content) => Some(content),
        None => input.text(&["body", "content", "text"], "Comment body", MAX_CONTENT)?,
    };
    let body = body.ok_or_else(|| {
        ApiError::invalid("Comment body is required (the write's content: the comment's new markdown)")
    })?;
    edit(publish, Some(body)).await
}

/// `comment.delete`.
pub(super) async fn delete(publish: &Publish<'_, '_>) -> ApiResult<Value> {
    edit(publish, None).await
}

async fn edit(publish: &Publish<'_, '_>, body: Option<&str>) -> ApiResult<Value> {
    let action = if body.is_some() { "comment.update" } else { "comment.delete" };
    let given = publish
        .raw_input()?
        .text(&["comment", "commentId"], "Comment ID", 2048)?
        .ok_or_else(|| ApiError::invalid("Comment ID is required (options.input.comment: hm://<author>/<tsid>)"))?;
    let id = comment_id(given, "Comment ID")?;
    let blocks = body.map(markdown::blocks).transpose()?;
    let existing = read_comment(publish, &id, || format!("No comment {given}")).await?;
    let bad = |what: &str| ApiError::upstream(format!("Hypermedia server: comment {id} {what}"));
    let author = field(&existing, &["author"]).ok_or_else(|| bad("has no author"))?;
    let account = field(&existing, &["targetAccount"]).ok_or_else(|| bad("has no target account"))?;
    let space: Principal = account.parse().map_err(|_| bad("has a target account that is not an account id"))?;
    let path = match field(&existing, &["targetPath"]).unwrap_or_default().trim_matches('/') {
        "" => String::new(),
        path => format!("/{path}"),
    };
    let version = version_cids(field(&existing, &["targetVersion"]).ok_or_else(|| bad("has no target version"))?)?;
    let link = |key: &str| field(&existing, &[key]).and_then(|cid| Cid::try_from(cid).ok());
    let (reply_parent, thread_root) = match body {
        Some(_) => (link("replyParentVersion"), link("threadRootVersion")),
        None => (None, None),
    };
    let private = is_private(&existing);
    if let Some(blocks) = &blocks {
        links::check(publish, blocks).await?;
    }
    let key = publish.signing_key().await?;
    let signer = blob::principal(&key).to_string();
    if author != signer {
        return Err(ApiError::forbidden(format!(
            "Comment {id} was written by {author}; this agent signs as {signer} and can only change its own comments"
        )));
    }
    let (_, tsid) = id.split_once('/').ok_or_else(|| bad("has no tsid"))?;
    let input = comment::NewComment {
        ts_ms: publish.now,
        space,
        path: &path,
        version: &version,
        body: blocks.as_deref().unwrap_or_default(),
        reply_parent,
        thread_root,
        private,
        edits: Some(tsid),
    };
    let signed = comment::comment(&key, &input).map_err(ApiError::internal)?;
    drop(key);
    let target = format!("hm://{account}{path}");
    let output = Output {
        action,
        id: Some(format!("hm://{}", signed.id)),
        comment_id: Some(signed.id.clone()),
        target: Some(target.clone()),
        ..Output::default()
    };
    let summary = match body {
        Some(_) => format!("Updated comment hm://{} on {target}.", signed.id),
        None => format!("Deleted comment hm://{} on {target}.", signed.id),
    };
    publish.finish(&format!("comment hm://{}", signed.id), vec![signed.blob], output, summary).await
}
