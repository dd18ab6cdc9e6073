//! Whether a feed event matches a trigger's source (docs/hypermedia.md §4.3, docs/protocol.md §E.1).
//!
//! - `document-comment {resource, author?}`: a comment on the resource or under it, by the author
//!   when one is named.
//! - `user-mention {mentionedAccounts, resourcePrefix?}`: a comment whose blocks embed a link to
//!   the account (`hm://<uid>` or its `:profile`), or a citation whose target is the account.
//!   Authorship, reply parents or document authorship alone never count.
//! - `comment-reply {repliedToAccounts, resourcePrefix?}` \[SEED\]: a comment whose direct parent
//!   was written by one of the accounts, never that account replying to itself.
//! - `document-author-comment {documentAuthors, resourcePrefix?}` \[SEED\]: a comment on a document
//!   one of the accounts authored (`targetAuthorUids`), never that author's own comment.
//! - `site-update {resourcePrefix, eventTypes?}`: any event whose resource lies under the
//!   prefix, of one of the types when given (`doc-update`, `change`, `ref`, `document-update` are
//!   one family).
//! - `activity {conditions}`: any condition; the conditions that matched are reported.
//!
//! Resource prefixes match on path boundaries (`hm://u/docs` covers `hm://u/docs/a`, not
//! `hm://u/docs2`); upstream compares plain string prefixes.

use seed_agents_protocol::generated::{
    AgentActivityCondition, AgentActivitySource, AgentTriggerSource, CommentReplySource, DocumentAuthorCommentSource,
    DocumentCommentSource, SiteUpdateSource, UserMentionSource,
};
use serde_json::Value as Json;

use super::event::{
    Event, canonical_resource, contains_text, data_case, id_of, object, raw_blob, raw_mention, text, under,
};

/// How a trigger matched an event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Matched {
    /// A single-condition source matched.
    Source,
    /// A compound `activity` source matched these conditions (at least one).
    Conditions(Vec<AgentActivityCondition>),
}

impl Matched {
    /// The conditions to record on the firing (`None` for a single source).
    pub(crate) fn into_conditions(self) -> Option<Vec<AgentActivityCondition>> {
        match self {
            Self::Source => None,
            Self::Conditions(conditions) => Some(conditions),
        }
    }
}

/// Whether `source` reads the activity feed at all (schedules, webhooks and run-completed do not).
pub(crate) fn is_activity_source(source: &AgentTriggerSource) -> bool {
    as_activity(source).is_some() || matches!(source, AgentTriggerSource::ActivitySource(_))
}

/// How `source` matches `event`, or `None`.
pub(crate) fn match_trigger(source: &AgentTriggerSource, event: &Event) -> Option<Matched> {
    if let AgentTriggerSource::ActivitySource(compound) = source {
        let matched: Vec<AgentActivityCondition> =
            compound.conditions.iter().filter(|condition| matches(&condition.source, event)).cloned().collect();
        return (!matched.is_empty()).then_some(Matched::Conditions(matched));
    }
    matches(&as_activity(source)?, event).then_some(Matched::Source)
}

/// A single activity source as the condition type (cloned; sources are small).
fn as_activity(source: &AgentTriggerSource) -> Option<AgentActivitySource> {
    Some(match source {
        AgentTriggerSource::DocumentCommentSource(s) => AgentActivitySource::DocumentCommentSource(s.clone()),
        AgentTriggerSource::UserMentionSource(s) => AgentActivitySource::UserMentionSource(s.clone()),
        AgentTriggerSource::CommentReplySource(s) => AgentActivitySource::CommentReplySource(s.clone()),
        AgentTriggerSource::DocumentAuthorCommentSource(s) => {
            AgentActivitySource::DocumentAuthorCommentSource(s.clone())
        }
        AgentTriggerSource::SiteUpdateSource(s) => AgentActivitySource::SiteUpdateSource(s.clone()),
        AgentTriggerSource::ActivitySource(_)
        | AgentTriggerSource::ScheduleSource(_)
        | AgentTriggerSource::WebhookSource(_)
        | AgentTriggerSource::RunCompletedSource(_) => return None,
    })
}

/// Whether one activity source matches `event`.
pub(crate) fn matches(source: &AgentActivitySource, event: &Event) -> bool {
    match source {
        AgentActivitySource::DocumentCommentSource(source) => document_comment(source, event),
        AgentActivitySource::UserMentionSource(source) => user_mention(source, event),
        AgentActivitySource::CommentReplySource(source) => comment_reply(source, event),
        AgentActivitySource::DocumentAuthorCommentSource(source) => document_author_comment(source, event),
        AgentActivitySource::SiteUpdateSource(source) => site_update(source, event),
    }
}

fn is_comment(event: &Event) -> bool {
    text(event, "type").as_deref() == Some("comment")
}

/// The canonical resource a resolved comment is on: `target.id.id`, else the comment's
/// `targetAccount` and `targetPath`.
fn comment_target(event: &Event) -> Option<String> {
    if let Some(id) = object(event, "target").and_then(|target| object(target, "id")).and_then(|id| text(id, "id")) {
        return Some(canonical_resource(&id));
    }
    let comment = object(event, "comment")?;
    let account = text(comment, "targetAccount")?;
    let path = text(comment, "targetPath").unwrap_or_default();
    let path = path.trim_start_matches('/');
    Some(canonical_resource(&if path.is_empty() {
        format!("hm://{account}")
    } else {
        format!("hm://{account}/{path}")
    }))
}

/// The uid of whoever wrote a resolved comment: `author.id.uid`, else `comment.author`.
fn comment_author(event: &Event) -> Option<String> {
    object(event, "author")
        .and_then(|author| object(author, "id"))
        .and_then(|id| text(id, "uid"))
        .or_else(|| object(event, "comment").and_then(|comment| text(comment, "author")))
}

/// Whether the comment is under `prefix` (no prefix: any).
fn comment_under(event: &Event, prefix: Option<&str>) -> bool {
    let Some(prefix) = prefix else { return true };
    let prefix = canonical_resource(prefix);
    match comment_target(event) {
        Some(target) => under(&target, &prefix),
        None => contains_text(&Json::Object(event.clone()), &prefix),
    }
}

fn document_comment(source: &DocumentCommentSource, event: &Event) -> bool {
    let resource = canonical_resource(&source.resource);
    if is_comment(event) {
        if let Some(author) = &source.author {
            let scope =
                object(event, "author").map_or_else(|| Json::Object(event.clone()), |a| Json::Object(a.clone()));
            if !contains_text(&scope, author) {
                return false;
            }
        }
        return match comment_target(event) {
            Some(target) => under(&target, &resource),
            None => contains_text(&Json::Object(event.clone()), &resource),
        };
    }
    let Some(blob) = raw_blob(event) else { return false };
    let kind = text(blob, "blobType").or_else(|| text(blob, "blob_type"));
    if !kind.is_some_and(|kind| kind.eq_ignore_ascii_case("comment")) {
        return false;
    }
    if let Some(author) = &source.author
        && text(blob, "author").or_else(|| text(event, "account")).as_deref() != Some(author.as_str())
    {
        return false;
    }
    text(blob, "resource").is_some_and(|target| under(&canonical_resource(&target), &resource))
}

fn user_mention(source: &UserMentionSource, event: &Event) -> bool {
    source.mentioned_accounts.iter().any(|account| mentions(account, source.resource_prefix.as_deref(), event))
}

fn mentions(account: &str, prefix: Option<&str>, event: &Event) -> bool {
    if let Some(mention) = raw_mention(event) {
        let target = text(mention, "target").unwrap_or_default();
        let root = format!("hm://{account}");
        if target != account && target != root && !target.starts_with(&format!("{root}/")) {
            return false;
        }
        let Some(prefix) = prefix else { return true };
        return [text(mention, "source"), text(mention, "sourceDocument"), Some(target)]
            .into_iter()
            .flatten()
            .any(|candidate| under(&canonical_resource(&candidate), &canonical_resource(prefix)));
    }
    let mentioned = match text(event, "type").as_deref() {
        Some("comment") => {
            object(event, "comment").is_some_and(|comment| blocks_mention(comment.get("content"), account))
        }
        Some("citation") => object(event, "target")
            .and_then(|target| object(target, "id"))
            .and_then(account_of_id)
            .is_some_and(|uid| uid == account),
        _ => false,
    };
    mentioned && mention_under(event, prefix)
}

/// The account an unpacked hm id names, when it is the account itself or its `:profile`.
fn account_of_id(id: &Event) -> Option<String> {
    let uid = text(id, "uid")?;
    match id.get("path") {
        Some(Json::Array(path)) if !path.is_empty() => (path[0].as_str() == Some(":profile")).then_some(uid),
        _ => Some(uid),
    }
}

/// The account a mention link names (`hm://<uid>` or `hm://<uid>/:profile…`), not a document.
fn account_of_link(link: &str) -> Option<&str> {
    let rest = link.trim().strip_prefix("hm://")?;
    let path = rest.split(['?', '#']).next().unwrap_or_default();
    let mut segments = path.split('/').filter(|segment| !segment.is_empty());
    let uid = segments.next()?;
    match segments.next() {
        None | Some(":profile") => Some(uid),
        Some(_) => None,
    }
}

/// Whether some block (recursively through `children`) has an `Embed` annotation linking `account`.
fn blocks_mention(nodes: Option<&Json>, account: &str) -> bool {
    let Some(Json::Array(nodes)) = nodes else { return false };
    nodes.iter().filter_map(Json::as_object).any(|node| {
        let annotations = object(node, "block").and_then(|block| block.get("annotations")).and_then(Json::as_array);
        let embeds = annotations.into_iter().flatten().filter_map(Json::as_object).any(|annotation| {
            annotation.get("type").and_then(Json::as_str) == Some("Embed")
                && annotation.get("link").and_then(Json::as_str).and_then(account_of_link) == Some(account)
        });
        embeds || blocks_mention(node.get("children"), account)
    })
}

/// The mention's resource filter: one of `source`, `target`, `commentId` lies under the prefix,
/// else any string of the event contains it.
fn mention_under(event: &Event, prefix: Option<&str>) -> bool {
    let Some(prefix) = prefix else { return true };
    let prefix = canonical_resource(prefix);
    let direct = ["source", "target", "commentId"]
        .iter()
        .filter_map(|field| id_of(event, field))
        .any(|id| under(&canonical_resource(&id), &prefix));
    direct || contains_text(&Json::Object(event.clone()), &prefix)
}

fn comment_reply(source: &CommentReplySource, event: &Event) -> bool {
    if !is_comment(event) {
        return false;
    }
    let parent = object(event, "replyParentAuthor").and_then(|parent| match object(parent, "id") {
        Some(id) => text(id, "uid"),
        None => text(parent, "id"),
    });
    let Some(parent) = parent else { return false };
    let author = comment_author(event);
    source.replied_to_accounts.iter().any(|account| *account == parent && author.as_deref() != Some(account.as_str()))
        && comment_under(event, source.resource_prefix.as_deref())
}

fn document_author_comment(source: &DocumentAuthorCommentSource, event: &Event) -> bool {
    if !is_comment(event) {
        return false;
    }
    let Some(Json::Array(authors)) = event.get("targetAuthorUids") else { return false };
    let commenter = comment_author(event);
    source.document_authors.iter().any(|account| {
        authors.iter().any(|author| author.as_str() == Some(account.as_str())) && commenter.as_deref() != Some(account)
    }) && comment_under(event, source.resource_prefix.as_deref())
}

fn site_update(source: &SiteUpdateSource, event: &Event) -> bool {
    let prefix = canonical_resource(&source.resource_prefix);
    let inside = match update_resource(event) {
        Some(resource) => under(&resource, &prefix),
        None => contains_text(&Json::Object(event.clone()), &prefix),
    };
    if !inside {
        return false;
    }
    let Some(wanted) = source.event_types.as_ref().filter(|types| !types.is_empty()) else { return true };
    let actual = update_types(event);
    wanted.iter().any(|wanted| actual.iter().any(|actual| same_type(wanted, actual)))
}

/// The resource an update is about: the raw blob's, `docId.id`, `target.id.id`, the comment's
/// target, or the document's account and path.
fn update_resource(event: &Event) -> Option<String> {
    if let Some(resource) = raw_blob(event).and_then(|blob| text(blob, "resource")) {
        return Some(canonical_resource(&resource));
    }
    for field in ["docId", "target"] {
        let id = object(event, field).and_then(|value| match object(value, "id") {
            Some(id) => text(id, "id"),
            None if field == "docId" => text(value, "id"),
            None => None,
        });
        if let Some(id) = id {
            return Some(canonical_resource(&id));
        }
    }
    if let Some(target) = comment_target(event) {
        return Some(target);
    }
    let document = object(event, "document")?;
    let account = text(document, "account")?;
    let path = text(document, "path").unwrap_or_default();
    let path = path.trim_start_matches('/');
    Some(canonical_resource(&if path.is_empty() {
        format!("hm://{account}")
    } else {
        format!("hm://{account}/{path}")
    }))
}

fn update_types(event: &Event) -> Vec<String> {
    let blob_type = raw_blob(event).and_then(|blob| text(blob, "blobType").or_else(|| text(blob, "blob_type")));
    [text(event, "type"), data_case(event), blob_type].into_iter().flatten().collect()
}

/// Event type names compare case-insensitively; the document-update family is one type.
fn same_type(wanted: &str, actual: &str) -> bool {
    const DOCUMENT: [&str; 4] = ["doc-update", "document-update", "change", "ref"];
    let (wanted, actual) = (wanted.trim().to_ascii_lowercase(), actual.trim().to_ascii_lowercase());
    if wanted.is_empty() || actual.is_empty() {
        return false;
    }
    wanted == actual || (DOCUMENT.contains(&wanted.as_str()) && DOCUMENT.contains(&actual.as_str()))
}

#[cfg(test)]
mod tests;
