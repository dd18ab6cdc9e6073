//! The `web_search` callable: a self-hosted SearXNG (`--searxng-url`), docs/runtime.md §4.4.
//!
//! `GET <searxng>/search?q&format=json&categories=<general|news>&safesearch=1&language=<lang|en>
//! [&time_range]`; `count` 10 by default (1–25). When nothing came back and some engines did not
//! answer, the query is tried once more with a fixed set of other engines. The SearXNG URL is
//! the operator's, like the Hypermedia server's, so it is not subject to the private-network
//! guard that protects client-given URLs.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value as Json;

use super::{bounded, fields};
use crate::app::App;
use crate::error::{ApiError, ApiResult};

/// How long one SearXNG request may take.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// The engines of the second try.
pub(crate) const FALLBACK_ENGINES: &str = "duckduckgo,bing,startpage,wikipedia";

/// One result.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Hit {
    pub title: String,
    pub url: String,
    pub snippet: String,
    pub engine: String,
}

/// The output (without `summary`, which the caller adds).
#[derive(Debug, Serialize)]
pub(crate) struct Output {
    pub query: String,
    pub results: Vec<Hit>,
    pub partial: bool,
    pub markdown: String,
}

/// Runs a web search: its summary and output.
pub(crate) async fn run(app: &App, input: &Json) -> ApiResult<(String, Output)> {
    let Some(base) = app.config.searxng_url.as_deref() else {
        return Err(ApiError::unavailable("web_search is not configured (no SearXNG backend)"));
    };
    let input = fields(input);
    let text = |key: &str, max: usize| -> String {
        input.get(key).and_then(Json::as_str).map(str::trim).unwrap_or_default().chars().take(max).collect()
    };
    let query = text("query", 1024);
    if query.is_empty() {
        return Err(ApiError::invalid("Search query is required"));
    }
    let count = bounded(input.get("count"), 10, 1, 25) as usize;
    let category = match input.get("category").and_then(Json::as_str) {
        Some("news") => "news",
        _ => "general",
    };
    let language = Some(text("language", 16)).filter(|language| !language.is_empty()).unwrap_or_else(|| "en".into());
    let mut params: Vec<(&str, String)> = vec![
        ("q", query.clone()),
        ("format", "json".into()),
        ("categories", category.into()),
        ("safesearch", "1".into()),
    ];
    if let Some(range) =
        input.get("timeRange").and_then(Json::as_str).filter(|range| ["day", "week", "month", "year"].contains(range))
    {
        params.push(("time_range", range.to_owned()));
    }
    params.push(("language", language));
    let (mut hits, mut unresponsive) = query_searxng(app, base, &params).await?;
    if hits.is_empty() && !unresponsive.is_empty() {
        params.push(("engines", FALLBACK_ENGINES.to_owned()));
        (hits, unresponsive) = query_searxng(app, base, &params).await?;
    }
    hits.truncate(count);
    let partial = !unresponsive.is_empty();
    let plural = if hits.len() == 1 { "" } else { "s" };
    let (summary, markdown) = if hits.is_empty() {
        let degraded = if partial {
            format!(" Some engines were unavailable: {}.", unresponsive.join(", "))
        } else {
            String::new()
        };
        (format!("No web results for \"{query}\"."), format!("No web results found for \"{query}\".{degraded}"))
    } else {
        let degraded =
            if partial { format!(", degraded: {} unavailable", unresponsive.join(", ")) } else { String::new() };
        let mut lines = vec![
            format!("Web search results for \"{query}\" ({} result{plural}{degraded})", hits.len()),
            String::new(),
        ];
        for (index, hit) in hits.iter().enumerate() {
            lines.push(format!("{}. [{}]({})", index + 1, hit.title, hit.url));
            if !hit.snippet.is_empty() {
                lines.push(format!("   {}", hit.snippet));
            }
            let engine = if hit.engine.is_empty() { String::new() } else { format!(" ({})", hit.engine) };
            lines.push(format!("   - {}{engine}", hit.url));
            lines.push(String::new());
        }
        (format!("Found {} web result{plural} for \"{query}\".", hits.len()), lines.join("\n"))
    };
    Ok((summary, Output { query, results: hits, partial, markdown }))
}

/// One SearXNG request: the results with a URL, and the engines that did not answer.
async fn query_searxng(app: &App, base: &str, params: &[(&str, String)]) -> ApiResult<(Vec<Hit>, Vec<String>)> {
    let failed = |reason: String| ApiError::upstream(format!("SearXNG request failed: {reason}"));
    let url = reqwest::Url::parse_with_params(&format!("{base}/search"), params)
        .map_err(|error| failed(error.to_string()))?;
    let response = app
        .http
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .timeout(REQUEST_TIMEOUT)
        .send()
        .await
        .map_err(|error| failed(error.without_url().to_string()))?;
    let status = response.status();
    if !status.is_success() {
        return Err(failed(format!("HTTP {}", status.as_u16())));
    }
    let unexpected = || ApiError::upstream("SearXNG returned an unexpected response");
    let bytes = response.bytes().await.map_err(|error| failed(error.without_url().to_string()))?;
    let body: Json = serde_json::from_slice(&bytes).map_err(|_| unexpected())?;
    let Some(results) = body.get("results").and_then(Json::as_array) else { return Err(unexpected()) };
    let bounded_text = |value: Option<&Json>, max: usize| -> String {
        value.and_then(Json::as_str).map(str::trim).unwrap_or_default().chars().take(max).collect()
    };
    let hits = results
        .iter()
        .filter_map(|entry| {
            let url = entry.get("url")?.as_str()?.to_owned();
            let title = bounded_text(entry.get("title"), 512);
            Some(Hit {
                title: if title.is_empty() { url.clone() } else { title },
                snippet: bounded_text(entry.get("content"), 1024),
                engine: entry.get("engine").and_then(Json::as_str).unwrap_or_default().to_owned(),
                url,
            })
        })
        .collect();
    let unresponsive = body
        .get("unresponsive_engines")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
        .filter_map(|item| item.get(0).and_then(Json::as_str).map(str::to_owned))
        .collect();
    Ok((hits, unresponsive))
}
