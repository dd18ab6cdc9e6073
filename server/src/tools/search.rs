//! The `search` callable: the configured Hypermedia server's Search API (docs/runtime.md §4.4).
//!
//! Defaults and bounds are upstream's: `includeBody` false, `contextSize` 48 (0–512),
//! `searchType` hybrid (keyword 0, semantic 1, hybrid 2), `pageSize` 20, or 30 for a query under
//! three characters (1–50); the owner's account is the perspective. Each entity becomes
//! `{title, url, type, parentNames, versionTime?}` with its `hm://` URL.

use serde::Serialize;
use serde_json::{Map, Value as Json};

use super::{bounded, fields};
use crate::app::App;
use crate::error::{ApiError, ApiResult};
use crate::hm::HmClient;
use crate::hm::search::SearchInput;

/// One result.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Found {
    pub title: String,
    pub url: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// Kept as the search API gave them (strings, in practice).
    #[serde(serialize_with = "parents")]
    pub parent_names: Vec<Json>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version_time: Option<String>,
}

/// `parentNames` through [`json_to_ipld`](seed_agents_protocol::wire::json_to_ipld), which (unlike serde's route) takes JSON null.
fn parents<S: serde::Serializer>(names: &[Json], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(names.iter().map(seed_agents_protocol::wire::json_to_ipld))
}

/// The output (without `summary`, which the caller adds).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Output {
    pub markdown: String,
    pub query: String,
    pub search_type: &'static str,
    pub include_body: bool,
    pub results: Vec<Found>,
}

/// Runs a search for the agent of `owner_id`: its summary and output.
pub(crate) async fn run(app: &App, owner_id: &str, input: &Json) -> ApiResult<(String, Output)> {
    let input = fields(input);
    let query = input.get("query").and_then(Json::as_str).map(str::trim).unwrap_or_default().to_owned();
    if query.is_empty() {
        return Err(ApiError::invalid("Search query is required"));
    }
    let (search_type, code) = match input.get("searchType").and_then(Json::as_str) {
        Some("keyword") => ("keyword", 0),
        Some("semantic") => ("semantic", 1),
        _ => ("hybrid", 2),
    };
    let include_body = input.get("includeBody").and_then(Json::as_bool).unwrap_or(false);
    let page_size = bounded(input.get("pageSize"), if query.chars().count() < 3 { 30 } else { 20 }, 1, 50);
    let request = SearchInput {
        query: query.clone(),
        account_uid: input.get("accountUid").and_then(Json::as_str).map(str::to_owned),
        include_body,
        context_size: bounded(input.get("contextSize"), 48, 0, 512),
        perspective_account_uid: owner_id.to_owned(),
        search_type: code,
        page_size,
    };
    let answer = HmClient::new(&app.http, &app.config.hm_server_url)
        .search(&request)
        .await
        .map_err(|error| ApiError::upstream(format!("Search failed on {}: {error}", app.config.hm_server_url)))?;
    let entities = answer.get("entities").and_then(Json::as_array).cloned().unwrap_or_default();
    let results: Vec<Found> = entities.iter().take(page_size as usize).filter_map(Json::as_object).map(found).collect();
    let plural = if results.len() == 1 { "" } else { "s" };
    let body = if include_body { "yes" } else { "no" };
    let (summary, markdown) = if results.is_empty() {
        (
            format!("No results found for \"{query}\"."),
            format!("No results found for \"{query}\" (search type: {search_type}, include body: {body})."),
        )
    } else {
        let mut lines = vec![
            format!(
                "Search results for \"{query}\" ({} result{plural}, search type: {search_type}, include body: {body})",
                results.len()
            ),
            String::new(),
        ];
        for (index, result) in results.iter().enumerate() {
            lines.push(format!("{}. [{}]({})", index + 1, result.title, result.url));
            lines.push(format!("   - Type: {}", result.kind));
            let parents: Vec<&str> = result.parent_names.iter().filter_map(Json::as_str).collect();
            if !parents.is_empty() {
                lines.push(format!("   - Parents: {}", parents.join(" / ")));
            }
            if let Some(time) = &result.version_time {
                lines.push(format!("   - Updated: {time}"));
            }
            lines.push(format!("   - URL: {}", result.url));
            lines.push(String::new());
        }
        (format!("Found {} result{plural} for \"{query}\".", results.len()), lines.join("\n"))
    };
    Ok((summary, Output { markdown, query, search_type, include_body, results }))
}

fn found(entity: &Map<String, Json>) -> Found {
    let url = entity.get("id").map(hm_url).unwrap_or_default();
    let title = entity.get("title").and_then(Json::as_str).filter(|title| !title.is_empty());
    Found {
        title: title.map_or_else(|| url.clone(), str::to_owned),
        kind: entity.get("type").and_then(Json::as_str).unwrap_or_default().to_owned(),
        parent_names: entity.get("parentNames").and_then(Json::as_array).cloned().unwrap_or_default(),
        version_time: entity.get("versionTime").and_then(Json::as_str).map(str::to_owned),
        url,
    }
}

/// An entity's id as an `hm://` URL: a packed string as it is, or the unpacked object
/// `{uid, path, version, latest, blockRef}` packed (docs/hypermedia.md §1.5).
fn hm_url(id: &Json) -> String {
    if let Some(text) = id.as_str() {
        return text.to_owned();
    }
    let Some(uid) = id.get("uid").and_then(Json::as_str) else { return String::new() };
    let mut url = format!("hm://{uid}");
    for segment in id.get("path").and_then(Json::as_array).into_iter().flatten().filter_map(Json::as_str) {
        if !segment.is_empty() {
            url.push('/');
            url.push_str(segment);
        }
    }
    if let Some(version) = id.get("version").and_then(Json::as_str).filter(|version| !version.is_empty()) {
        url.push_str("?v=");
        url.push_str(version);
        if id.get("latest").and_then(Json::as_bool) == Some(true) {
            url.push_str("&l");
        }
    }
    if let Some(block) = id.get("blockRef").and_then(Json::as_str).filter(|block| !block.is_empty()) {
        url.push('#');
        url.push_str(block);
    }
    url
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn entity_ids_become_hm_urls() {
        assert_eq!(hm_url(&json!("hm://z6Mk/a")), "hm://z6Mk/a");
        assert_eq!(hm_url(&json!({"uid": "z6Mk", "path": ["docs", "intro"]})), "hm://z6Mk/docs/intro");
        assert_eq!(
            hm_url(&json!({"uid": "z6Mk", "path": null, "version": "bafy1", "latest": true, "blockRef": "b1"})),
            "hm://z6Mk?v=bafy1&l#b1"
        );
        assert_eq!(hm_url(&json!({"path": ["x"]})), "");
    }
}
