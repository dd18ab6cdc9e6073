//! `write hm://… {action: "comment"}`: a Comment blob on a document (docs/hypermedia.md §2.3,
//! §2.7).
//!
//! The target is `options.target` or the address, and must be a document (a `?v=` version in
//! it picks the version commented on). `options.replyTo` names a comment (`hm://<author>/<tsid>`
//! or `<author>/<tsid>`), read with `Comment`: the reply links the parent's version and the
//! thread root's (the parent's `threadRootVersion`, else its own version), comments on the
//! parent's document version, and must be written to the parent's document. A comment on a
//! private document, or replying to a private comment, is private. Comments may go on any
//! account's documents; the record id `<author>/<tsid>` is computed from the signed blob and
//! the comment's CID is the one the server gives it.

use seed_agents_protocol::Value;
use serde_json::Value as Json;

use super::{Found, Output, Publish, api_path, field, hm_error, links, markdown, space_of, version_cids};
use crate::error::{ApiError, ApiResult};
use crate::hm::{HmError, blob, comment};
use crate::verbs::hypermedia::HmAddress;

/// Comments on the target document.
pub(super) async fn write(publish: &Publish<'_, '_>, raw: &str, content: Option<&str>) -> ApiResult<Value> {
    let content = content
        .filter(|content| !content.trim().is_empty())
        .ok_or_else(|| ApiError::invalid("write hm:// with action comment needs content (the comment's markdown)"))?;
    let target_raw = publish.text_option("target")?.unwrap_or(raw);
    let target = HmAddress::parse(target_raw)?;
    if target.view.is_some() {
        return Err(ApiError::invalid(format!("Comment target must be a document, not {target_raw}")));
    }
    let parent = match publish.text_option("replyTo")? {
        Some(reply_to) => Some(parent_comment(publish, reply_to).await?),
        None => None,
    };
    let target_id = target.canonical();
    if let Some(parent) = &parent
        && parent.target != target_id
    {
        return Err(ApiError::invalid(format!(
            "Comment {} is on {}, not on {target_id}; write the reply to {}",
            parent.id, parent.target, parent.target
        )));
    }
    let resource_id = match &target.query {
        Some(query) => format!("{target_id}?{query}"),
        None => target_id.clone(),
    };
    let document = match publish.find(&resource_id).await? {
        Found::Document(document) => document,
        Found::Missing => return Err(ApiError::not_found(format!("Comment target {target_raw} does not exist"))),
        Found::Other(kind) => return Err(ApiError::invalid(format!("Comment target is {kind}, not a document"))),
    };
    let blocks = markdown::blocks(content)?;
    links::check(publish, &blocks).await?;
    let version = match parent.as_ref().and_then(|parent| parent.target_version.as_deref()) {
        Some(version) => version.to_owned(),
        None => field(&document, &["version"])
            .ok_or_else(|| ApiError::upstream(format!("Hypermedia server: {target_id} has no version")))?
            .to_owned(),
    };
    let version = version_cids(&version)?;
    let private = field(&document, &["visibility"]) == Some("PRIVATE") || parent.as_ref().is_some_and(|p| p.private);
    let path = api_path(&target);
    let key = publish.signing_key().await?;
    let input = comment::NewComment {
        ts_ms: publish.now,
        space: space_of(&target)?,
        path: &path,
        version: &version,
        body: &blocks,
        reply_parent: parent.as_ref().map(|parent| parent.version),
        thread_root: parent.as_ref().map(|parent| parent.thread_root),
        private,
        edits: None,
    };
    let signed = comment::comment(&key, &input).map_err(ApiError::internal)?;
    let author = blob::principal(&key);
    drop(key);
    let mut output = Output {
        action: "comment",
        target: Some(target_id.clone()),
        reply_to: parent.as_ref().map(|parent| parent.id.clone()),
        ..Output::default()
    };
    if publish.dry_run {
        let summary = format!(
            "Dry run: a comment of {} by {author} on {target_id} was signed; nothing was published.",
            crate::verbs::plural(blocks.len(), "block", "blocks")
        );
        output.dry_run = Some(true);
        return super::record(summary, &output);
    }
    output.cids = publish.send(&format!("a comment on {target_id}"), &[signed.blob]).await?;
    output.version = output.cids.first().cloned();
    output.id = Some(format!("hm://{}", signed.id));
    output.comment_id = Some(signed.id.clone());
    let summary = match &parent {
        Some(parent) => format!("Replied to {} on {target_id} (comment hm://{}).", parent.id, signed.id),
        None => format!("Commented on {target_id} (comment hm://{}).", signed.id),
    };
    super::record(summary, &output)
}

/// What a reply needs of its parent comment.
#[derive(Debug)]
struct Parent {
    /// `<author>/<tsid>`.
    id: String,
    /// The canonical id of the document it is on.
    target: String,
    target_version: Option<String>,
    version: ipld_core::cid::Cid,
    thread_root: ipld_core::cid::Cid,
    private: bool,
}

/// Reads the comment `reply_to` names.
async fn parent_comment(publish: &Publish<'_, '_>, reply_to: &str) -> ApiResult<Parent> {
    let id = comment_id(reply_to, "options.replyTo")?;
    let answer = read_comment(publish, &id, || format!("No comment {reply_to} to reply to")).await?;
    let bad = |what: &str| ApiError::upstream(format!("Hypermedia server: comment {id} {what}"));
    let cid = |key: &str| field(&answer, &[key]).and_then(|cid| ipld_core::cid::Cid::try_from(cid).ok());
    let version = cid("version").ok_or_else(|| bad("has no version"))?;
    let account = field(&answer, &["targetAccount"]).ok_or_else(|| bad("has no target account"))?;
    let path = field(&answer, &["targetPath"]).unwrap_or_default().trim_matches('/');
    Ok(Parent {
        target: if path.is_empty() { format!("hm://{account}") } else { format!("hm://{account}/{path}") },
        target_version: field(&answer, &["targetVersion"]).filter(|version| !version.is_empty()).map(str::to_owned),
        thread_root: cid("threadRootVersion").unwrap_or(version),
        version,
        private: is_private(&answer),
        id,
    })
}

/// The `Comment` the server answers for record id `id`; 404 with `missing()` when it has none.
pub(super) async fn read_comment(
    publish: &Publish<'_, '_>,
    id: &str,
    missing: impl FnOnce() -> String,
) -> ApiResult<Json> {
    match publish.hm.comment(id).await {
        Ok(answer) => Ok(answer),
        Err(HmError::Status { status: 404, .. }) => Err(ApiError::not_found(missing())),
        Err(error) => Err(hm_error(error)),
    }
}

/// Whether a `Comment` answer is a private comment.
pub(super) fn is_private(answer: &Json) -> bool {
    answer.get("visibility").and_then(Json::as_str) == Some("PRIVATE")
}

/// Whether `tsid` is a record's tsid: `z` then base58 letters or digits.
pub(super) fn is_tsid(tsid: &str) -> bool {
    tsid.len() > 1 && tsid.starts_with('z') && tsid.bytes().all(|byte| byte.is_ascii_alphanumeric())
}

/// A comment's record id `<author>/<tsid>` from `hm://<author>/<tsid>` or `<author>/<tsid>`;
/// `what` names the field in the error.
pub(super) fn comment_id(raw: &str, what: &str) -> ApiResult<String> {
    let bare = raw.strip_prefix("hm://").unwrap_or(raw);
    let bare = bare.split(['?', '#']).next().unwrap_or_default();
    let parts: Vec<&str> = bare.split('/').collect();
    let valid = match parts.as_slice() {
        [author, tsid] => author.parse::<seed_agents_protocol::Principal>().is_ok() && is_tsid(tsid),
        _ => false,
    };
    if !valid {
        return Err(ApiError::invalid(format!(
            "{what} must be a comment id, hm://<author>/<tsid> or <author>/<tsid>, not {raw}"
        )));
    }
    Ok(bare.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_ids_are_author_and_tsid() {
        let author = "z6MkvDqGT54cXesYGvABpF1UapVNwjCqRcafi4Px6Thv5T3Z";
        let id = format!("{author}/zQ3shTsid");
        assert_eq!(comment_id(&format!("hm://{id}"), "x").unwrap(), id);
        assert_eq!(comment_id(&id, "x").unwrap(), id);
        assert_eq!(comment_id(&format!("hm://{id}?v=x#b"), "x").unwrap(), id);
        for bad in ["z6Mknope/zabc", "hm://z6MkvDqGT54cXesYGvABpF1UapVNwjCqRcafi4Px6Thv5T3Z", "a/b/c"] {
            assert!(comment_id(bad, "x").is_err(), "{bad}");
        }
        let error = comment_id("nope", "Comment ID").unwrap_err();
        assert!(error.message().starts_with("Comment ID must be a comment id"), "{}", error.message());
    }
}
