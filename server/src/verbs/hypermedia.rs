//! `read hm://…` and `read activity:` through the configured Hypermedia server
//! (`--hm-server-url`, 30 s per request; docs/hypermedia.md §1.3, docs/runtime.md §4.2).
//!
//! - `hm://<uid>[/<path>][?v=…]`: `Resource`; a document comes back as
//!   `{type: 'hypermedia_document', requestedId, id, server, format, title?, version, metadata,
//!   markdown}` (`options.format: 'json'` gives the Resource answer as `resource` instead of
//!   `markdown`), a comment as `hypermedia_comment` with its body's markdown.
//! - `…/:attributes`: the same without the body (`view: 'attributes'`).
//! - `…/:directory`: `Query {includes: [{space, path, mode: 'Children'}]}` as a listing.
//! - `hm://<uid>/:profile`: `Account` as `hypermedia_profile`.
//! - `activity:`: `ListEvents` with the options mapped as §4.2 says.
//!
//! The `query` and `attributes` callables (docs/runtime.md §4.4) run here too: `query` is the
//! directory listing with a chosen mode, sort and limit, `attributes` the `:attributes` view.
//!
//! Markdown longer than 256 KiB is cut to 256 Ki characters plus `\n[truncated]` (§4.7).
//! [`markdown`] renders document blocks.

use serde::Serialize;
use serde_json::{Map, Value as Json, json};

use super::{Context, json_field, json_option, record};
use crate::error::{ApiError, ApiResult};
use crate::hm::{HmClient, HmError};
use seed_agents_protocol::Value;

pub(super) mod markdown;

/// The most markdown kept inline, in UTF-8 bytes before the cut (which then keeps characters).
const MAX_MARKDOWN: usize = 256 * 1024;
/// `ListEvents` page size bounds.
const PAGE_SIZE: (i64, i64) = (1, 50);

/// A parsed `hm://` address: the id to ask for and the view term, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HmAddress {
    /// The account uid (`z6Mk…`).
    pub uid: String,
    /// Path segments without view terms.
    pub path: Vec<String>,
    /// `?…` as given (version and `l`), without the `?`.
    pub query: Option<String>,
    /// `:attributes`, `:directory`, `:profile`, `:comments`, … when the last segment is one.
    pub view: Option<String>,
}

impl HmAddress {
    /// Parses `hm://<uid>[/<path…>][/:view][?query][#fragment]` (the fragment is dropped: it
    /// names a block of the same document). 400 on a malformed uid or path.
    pub(super) fn parse(raw: &str) -> ApiResult<HmAddress> {
        let invalid = || ApiError::invalid(format!("Invalid Hypermedia id: {raw}"));
        let rest = raw.strip_prefix("hm://").ok_or_else(invalid)?;
        let rest = rest.split('#').next().unwrap_or_default();
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query.to_owned()).filter(|query| !query.is_empty())),
            None => (rest, None),
        };
        let mut segments = rest.split('/');
        let uid = segments.next().unwrap_or_default().to_owned();
        if uid.is_empty() || !uid.bytes().all(|byte| byte.is_ascii_alphanumeric()) {
            return Err(invalid());
        }
        let mut path: Vec<String> = segments.filter(|segment| !segment.is_empty()).map(str::to_owned).collect();
        let view = match path.last() {
            Some(last) if last.starts_with(':') => path.pop(),
            _ => None,
        };
        if path.iter().any(|segment| segment.starts_with(':') || segment == "." || segment == "..") {
            return Err(invalid());
        }
        Ok(HmAddress { uid, path, query, view })
    }

    /// `hm://<uid>/<path>` (no version, no view).
    pub(super) fn canonical(&self) -> String {
        let mut id = format!("hm://{}", self.uid);
        for segment in &self.path {
            id.push('/');
            id.push_str(segment);
        }
        id
    }

    /// The packed id the server is asked for: the canonical id plus the query.
    fn packed(&self) -> String {
        match &self.query {
            Some(query) => format!("{}?{query}", self.canonical()),
            None => self.canonical(),
        }
    }

    /// The path in API format: `""` for the home document, else `/a/b`.
    fn api_path(&self) -> String {
        self.path.iter().map(|segment| format!("/{segment}")).collect()
    }
}

/// Why a Hypermedia read failed, as a verb error (the server's message kept).
pub(super) fn hm_error(error: HmError) -> ApiError {
    match error {
        HmError::Status { status: 404, message, .. } => ApiError::not_found(message),
        HmError::Status { status: 400, message, .. } => ApiError::invalid(message),
        other => ApiError::upstream(format!("Hypermedia server: {other}")),
    }
}

fn client<'a>(context: &'a Context<'_>) -> HmClient<'a> {
    HmClient::new(&context.app.http, &context.app.config.hm_server_url)
}

/// `read hm://…` on the configured server.
pub(super) async fn read(context: &Context<'_>, raw: &str, options: Option<&Map<String, Json>>) -> ApiResult<Value> {
    let address = HmAddress::parse(raw)?;
    read_from(&client(context), raw, &address, options).await
}

/// A read of `address` from `hm` (the configured server, or a site's origin for web URLs).
pub(super) async fn read_from(
    hm: &HmClient<'_>,
    raw: &str,
    address: &HmAddress,
    options: Option<&Map<String, Json>>,
) -> ApiResult<Value> {
    let json_format = options.and_then(|options| options.get("format")).and_then(Json::as_str) == Some("json");
    match address.view.as_deref() {
        None => resource(hm, raw, address, json_format, false).await,
        Some(":attributes") => resource(hm, raw, address, json_format, true).await,
        Some(":directory") => directory(hm, raw, address, &Listing::default()).await,
        Some(":profile") if address.path.is_empty() => profile(hm, raw, address).await,
        Some(":profile") => {
            Err(ApiError::invalid(format!("A profile belongs to an account: read hm://{}/:profile", address.uid)))
        }
        Some(view) => Err(ApiError::not_implemented(format!(
            "The {view} view of Hypermedia ids is not supported by this server; read the document, \
             …/:attributes, …/:directory or hm://<account>/:profile"
        ))),
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct DocumentOutput {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    view: Option<&'static str>,
    requested_id: String,
    id: String,
    server: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    format: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<String>,
    version: String,
    #[serde(serialize_with = "json_field")]
    metadata: Json,
    #[serde(skip_serializing_if = "Option::is_none")]
    markdown: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "json_option")]
    resource: Option<Json>,
    #[serde(skip_serializing_if = "Option::is_none")]
    truncated: Option<bool>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CommentOutput {
    #[serde(rename = "type")]
    kind: &'static str,
    requested_id: String,
    id: String,
    server: String,
    version: String,
    author: String,
    target: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    reply_parent: Option<String>,
    markdown: String,
}

async fn resource(
    hm: &HmClient<'_>,
    raw: &str,
    address: &HmAddress,
    json_format: bool,
    attributes_only: bool,
) -> ApiResult<Value> {
    let answer = hm.resource(&address.packed()).await.map_err(hm_error)?;
    let kind = text(&answer, &["type"]).unwrap_or_default();
    match kind {
        "document" => {
            let document = answer.get("document").cloned().unwrap_or(Json::Null);
            let metadata = document.get("metadata").cloned().unwrap_or_else(|| json!({}));
            let title = text(&metadata, &["name"]).map(str::to_owned);
            let version = text(&document, &["version"]).unwrap_or_default().to_owned();
            let id = document_id(&document).unwrap_or_else(|| address.canonical());
            let label = title.clone().unwrap_or_else(|| id.clone());
            let (markdown, resource_json, truncated, format, summary) = if attributes_only {
                (None, None, None, None, format!("Attributes of {label}."))
            } else if json_format {
                (None, Some(answer.clone()), None, Some("json"), format!("Read {label} (JSON)."))
            } else {
                let rendered = markdown::document(title.as_deref(), document.get("content"));
                let (markdown, cut) = cut_markdown(rendered);
                let summary = format!("Read {label} ({} characters{}).", markdown.chars().count(), cut_note(cut));
                (Some(markdown), None, cut.then_some(true), Some("markdown"), summary)
            };
            let output = DocumentOutput {
                kind: "hypermedia_document",
                view: attributes_only.then_some("attributes"),
                requested_id: raw.to_owned(),
                id,
                server: hm.base().to_owned(),
                format,
                title,
                version,
                metadata,
                markdown,
                resource: resource_json,
                truncated,
            };
            record(summary, &output)
        }
        "comment" if !attributes_only => {
            let comment = answer.get("comment").cloned().unwrap_or(Json::Null);
            let (markdown, cut) = cut_markdown(markdown::blocks(comment.get("content")));
            let author = text(&comment, &["author"]).unwrap_or_default().to_owned();
            let target = match (text(&comment, &["targetAccount"]), text(&comment, &["targetPath"])) {
                (Some(account), path) => format!("hm://{account}{}", path.unwrap_or_default()),
                (None, _) => String::new(),
            };
            let summary = format!("Comment by {author} on {target}{}.", cut_note(cut));
            let output = CommentOutput {
                kind: "hypermedia_comment",
                requested_id: raw.to_owned(),
                id: text(&comment, &["id"]).map_or_else(|| address.canonical(), |id| format!("hm://{id}")),
                server: hm.base().to_owned(),
                version: text(&comment, &["version"]).unwrap_or_default().to_owned(),
                author,
                target,
                reply_parent: text(&comment, &["replyParent"]).map(str::to_owned),
                markdown,
            };
            record(summary, &output)
        }
        "redirect" => {
            let target = text(&answer, &["redirectTarget"]).map(str::to_owned).unwrap_or_else(|| {
                answer.get("redirectTarget").and_then(|target| text(target, &["id"])).unwrap_or_default().to_owned()
            });
            #[derive(Serialize)]
            #[serde(rename_all = "camelCase")]
            struct Redirect {
                #[serde(rename = "type")]
                kind: &'static str,
                requested_id: String,
                redirect_target: String,
            }
            let output =
                Redirect { kind: "hypermedia_redirect", requested_id: raw.to_owned(), redirect_target: target.clone() };
            record(format!("{raw} redirects to {target}; read that address."), &output)
        }
        "not-found" => Err(ApiError::not_found(format!("Hypermedia resource not found: {raw}"))),
        "tombstone" => Err(ApiError::not_found(format!("Hypermedia resource was deleted: {raw}"))),
        "error" => Err(ApiError::upstream(format!(
            "Hypermedia server could not load {raw}: {}",
            text(&answer, &["message"]).unwrap_or("unknown error")
        ))),
        "comment" => Err(ApiError::invalid(format!("{raw} is a comment, which has no attributes view"))),
        other => Err(ApiError::upstream(format!("Hypermedia server answered an unknown resource type {other:?}"))),
    }
}

/// The document's id as `hm://<account><path>` from its `account` and `path` fields.
fn document_id(document: &Json) -> Option<String> {
    let account = text(document, &["account"])?;
    let path = text(document, &["path"]).unwrap_or_default();
    let path = if path.is_empty() || path.starts_with('/') { path.to_owned() } else { format!("/{path}") };
    Some(format!("hm://{account}{path}"))
}

/// How a directory is listed: `mode` (`Children` when absent), an optional sort term and its
/// direction, and a result limit.
#[derive(Debug, Default)]
struct Listing<'a> {
    mode: Option<&'a str>,
    sort: Option<(&'a str, bool)>,
    limit: Option<u64>,
}

/// The `query` callable: `{space, path?, mode?, sort?, reverse?, limit?}` (input already checked
/// against its schema) as a `Query` of the configured server.
pub(crate) async fn query(context: &Context<'_>, input: &Json) -> ApiResult<Value> {
    let space = input.get("space").and_then(Json::as_str).map(str::trim).unwrap_or_default();
    let raw = if space.starts_with("hm://") { space.to_owned() } else { format!("hm://{space}") };
    let mut address = HmAddress::parse(&raw)?;
    if let Some(path) = input.get("path").and_then(Json::as_str) {
        let within = HmAddress::parse(&format!("hm://{}/{}", address.uid, path.trim_start_matches('/')))?;
        address.path = within.path;
    }
    address.view = None;
    address.query = None;
    let listing = Listing {
        mode: input.get("mode").and_then(Json::as_str),
        sort: input
            .get("sort")
            .and_then(Json::as_str)
            .map(|term| (term, input.get("reverse").and_then(Json::as_bool).unwrap_or(false))),
        limit: Some(input.get("limit").and_then(Json::as_u64).unwrap_or(50).clamp(1, 100)),
    };
    directory(&client(context), &raw, &address, &listing).await
}

/// The `attributes` callable: `{url}` (checked against its schema) as the `:attributes` view.
pub(crate) async fn attributes(context: &Context<'_>, input: &Json) -> ApiResult<Value> {
    let raw = input.get("url").and_then(Json::as_str).map(str::trim).unwrap_or_default();
    let address = HmAddress::parse(raw)?;
    if address.view.as_deref().is_some_and(|view| view != ":attributes") {
        return Err(ApiError::invalid(format!("attributes takes a document's hm:// URL, not a view: {raw}")));
    }
    resource(&client(context), raw, &address, false, true).await
}

async fn directory(hm: &HmClient<'_>, raw: &str, address: &HmAddress, listing: &Listing<'_>) -> ApiResult<Value> {
    let mode = listing.mode.unwrap_or("Children");
    let mut input = Map::new();
    input.insert("includes".to_owned(), json!([{ "space": address.uid, "path": address.api_path(), "mode": mode }]));
    if let Some((term, reverse)) = listing.sort {
        input.insert("sort".to_owned(), json!([{ "term": term, "reverse": reverse }]));
    }
    if let Some(limit) = listing.limit {
        input.insert("limit".to_owned(), json!(limit));
    }
    let answer = hm.directory_query(&input).await.map_err(hm_error)?;
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Entry {
        id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none", serialize_with = "json_option")]
        update_time: Option<Json>,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Directory<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        requested_id: String,
        id: String,
        server: String,
        mode: &'a str,
        entries: Vec<Entry>,
        markdown: String,
    }
    let results = answer.get("results").and_then(Json::as_array).cloned().unwrap_or_default();
    let keep = listing.limit.map_or(usize::MAX, |limit| usize::try_from(limit).unwrap_or(usize::MAX));
    let entries: Vec<Entry> = results
        .iter()
        .take(keep)
        .map(|result| {
            let id = match result.get("id") {
                Some(Json::String(id)) => id.clone(),
                Some(id) => text(id, &["id"]).map(str::to_owned).unwrap_or_default(),
                None => String::new(),
            };
            let id = if id.is_empty() { child_id(address, result.get("path")) } else { id };
            Entry {
                id,
                title: result.get("metadata").and_then(|metadata| text(metadata, &["name"])).map(str::to_owned),
                update_time: result.get("updateTime").cloned(),
            }
        })
        .collect();
    let id = address.canonical();
    let mut markdown = format!("# Directory of {id}\n");
    if entries.is_empty() {
        markdown.push_str("\nNo documents under this path.\n");
    }
    for entry in &entries {
        markdown.push_str(&format!("\n- [{}]({})", entry.title.as_deref().unwrap_or(&entry.id), entry.id));
    }
    let summary = format!("{} under {id}.", super::plural(entries.len(), "document", "documents"));
    record(
        summary,
        &Directory {
            kind: "hypermedia_directory",
            requested_id: raw.to_owned(),
            id,
            server: hm.base().to_owned(),
            mode,
            entries,
            markdown,
        },
    )
}

/// `hm://<uid><path>` from a result's path (a string `/a/b` or a list of segments).
fn child_id(address: &HmAddress, path: Option<&Json>) -> String {
    let path = match path {
        Some(Json::String(path)) => path.trim_start_matches('/').to_owned(),
        Some(Json::Array(segments)) => segments.iter().filter_map(Json::as_str).collect::<Vec<_>>().join("/"),
        _ => String::new(),
    };
    if path.is_empty() { format!("hm://{}", address.uid) } else { format!("hm://{}/{path}", address.uid) }
}

async fn profile(hm: &HmClient<'_>, raw: &str, address: &HmAddress) -> ApiResult<Value> {
    let answer = hm.account(&address.uid).await.map_err(hm_error)?;
    if text(&answer, &["type"]) != Some("account") {
        return Err(ApiError::not_found(format!("Hypermedia account not found: {}", address.uid)));
    }
    let metadata = answer.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let name = text(&metadata, &["name"]).map(str::to_owned);
    let mut markdown = format!("# {}\n", name.as_deref().unwrap_or(&address.uid));
    if let Some(summary) = text(&metadata, &["summary"]).or_else(|| text(&metadata, &["description"])) {
        markdown.push_str(&format!("\n{summary}\n"));
    }
    markdown.push_str(&format!("\nAccount: hm://{}\n", address.uid));
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Profile {
        #[serde(rename = "type")]
        kind: &'static str,
        requested_id: String,
        id: String,
        server: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        #[serde(serialize_with = "json_field")]
        metadata: Json,
        markdown: String,
    }
    let summary = format!("Profile of {}.", name.as_deref().unwrap_or(&address.uid));
    record(
        summary,
        &Profile {
            kind: "hypermedia_profile",
            requested_id: raw.to_owned(),
            id: format!("hm://{}", address.uid),
            server: hm.base().to_owned(),
            title: name,
            metadata,
            markdown,
        },
    )
}

/// `read activity:` (any suffix ignored): `ListEvents` for the agent's owner with `options`
/// `pageSize` (1–50), `pageToken`, `trustedOnly`, `authors` → `filterAuthors`, `eventTypes` →
/// `filterEventType`, `resource` → `filterResource`.
pub(super) async fn activity(context: &Context<'_>, options: Option<&Map<String, Json>>) -> ApiResult<Value> {
    let mut input = Map::new();
    let option = |key: &str| options.and_then(|options| options.get(key));
    if let Some(size) = option("pageSize").and_then(Json::as_f64) {
        input.insert("pageSize".to_owned(), json!((size as i64).clamp(PAGE_SIZE.0, PAGE_SIZE.1)));
    }
    if let Some(Json::String(token)) = option("pageToken").filter(|token| token.as_str() != Some("")) {
        input.insert("pageToken".to_owned(), json!(token));
    }
    if let Some(Json::Bool(trusted)) = option("trustedOnly") {
        input.insert("trustedOnly".to_owned(), json!(trusted));
    }
    for (from, to) in [("authors", "filterAuthors"), ("eventTypes", "filterEventType")] {
        match option(from) {
            Some(Json::Array(items)) => {
                let items: Vec<&str> = items.iter().filter_map(Json::as_str).collect();
                input.insert(to.to_owned(), json!(items));
            }
            Some(Json::String(item)) => {
                input.insert(to.to_owned(), json!([item]));
            }
            _ => {}
        }
    }
    if let Some(Json::String(resource)) = option("resource") {
        input.insert("filterResource".to_owned(), json!(resource));
    }
    input.insert("currentAccount".to_owned(), json!(context.owner_id));
    let answer = client(context).list_events(&input).await.map_err(hm_error)?;
    let Some(fields) = answer.as_object() else {
        return Err(ApiError::upstream("Hypermedia server: ListEvents did not answer an object"));
    };
    let count = fields.get("events").and_then(Json::as_array).map_or(0, Vec::len);
    let more = fields.get("nextPageToken").and_then(Json::as_str).is_some_and(|token| !token.is_empty());
    let summary = format!(
        "{}{}",
        super::plural(count, "activity event", "activity events"),
        if more { "; more with options.pageToken = nextPageToken." } else { "." }
    );
    record(summary, &seed_agents_protocol::wire::json_to_ipld(&answer))
}

/// Cuts markdown over [`MAX_MARKDOWN`] bytes to that many characters plus `\n[truncated]`.
pub(super) fn cut_markdown(markdown: String) -> (String, bool) {
    if markdown.len() <= MAX_MARKDOWN {
        return (markdown, false);
    }
    let mut cut: String = markdown.chars().take(MAX_MARKDOWN).collect();
    if cut.len() == markdown.len() {
        return (markdown, false);
    }
    cut.push_str("\n[truncated]");
    (cut, true)
}

fn cut_note(cut: bool) -> &'static str {
    if cut { ", truncated" } else { "" }
}

/// The string at `path` in `value`.
fn text<'a>(value: &'a Json, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(value, |value, key| value.get(key))?.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hm_addresses_split_path_view_and_version() {
        let address = HmAddress::parse("hm://z6Mkabc/notes/today?v=bafy1.bafy2&l#blockA").unwrap();
        assert_eq!(address.uid, "z6Mkabc");
        assert_eq!(address.path, ["notes", "today"]);
        assert_eq!(address.query.as_deref(), Some("v=bafy1.bafy2&l"));
        assert_eq!(address.view, None);
        assert_eq!(address.canonical(), "hm://z6Mkabc/notes/today");
        assert_eq!(address.packed(), "hm://z6Mkabc/notes/today?v=bafy1.bafy2&l");
        assert_eq!(address.api_path(), "/notes/today");

        let view = HmAddress::parse("hm://z6Mkabc/notes/:directory").unwrap();
        assert_eq!((view.path.as_slice(), view.view.as_deref()), (&["notes".to_owned()][..], Some(":directory")));
        assert_eq!(HmAddress::parse("hm://z6Mkabc").unwrap().api_path(), "");
        assert_eq!(HmAddress::parse("hm://z6Mkabc/:profile").unwrap().view.as_deref(), Some(":profile"));
        for bad in ["hm://", "hm:///x", "hm://bad uid/x", "hm://z6Mk/../x", "hm://z6Mk/:a/b"] {
            assert!(HmAddress::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn long_markdown_is_cut_by_characters_with_a_marker() {
        let (short, cut) = cut_markdown("abc".to_owned());
        assert_eq!((short.as_str(), cut), ("abc", false));
        // 200 Ki three-byte characters: over the byte cap but under the character cap.
        let wide = "€".repeat(200 * 1024);
        let (kept, cut) = cut_markdown(wide.clone());
        assert_eq!((kept.len(), cut), (wide.len(), false));
        let long = "a".repeat(MAX_MARKDOWN + 10);
        let (kept, cut) = cut_markdown(long);
        assert!(cut);
        assert_eq!(kept.len(), MAX_MARKDOWN + "\n[truncated]".len());
        assert!(kept.ends_with("\n[truncated]"));
    }
}
