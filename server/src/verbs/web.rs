//! `read http(s)://…`: first as Hypermedia, then as a web page (docs/runtime.md §4.2).
//!
//! Hypermedia first: the configured server's `GetDomain {domain}`; when the site's domain is
//! registered to an account, the URL's path is read as `hm://<account>/<path>` and only a
//! not-found answer falls through to the web. A `GetDomain` failure counts as "not a Seed site".
//! (Upstream's second probe, the `OPTIONS` request for `x-hypermedia-*` headers, is not made.)
//!
//! The web reader is one tier: a streamed fetch through the SSRF guard of memory downloads
//! ([`crate::memory::guard`]: refused private, loopback and link-local destinations unless
//! `--allow-private-network`), at most [`MAX_BODY`] bytes of body, 30 s to answer and between
//! chunks; HTML becomes markdown with `htmd` (scripts, styles, navigation and forms dropped),
//! other text types are returned as they are; the result is cut at [`MAX_MARKDOWN`] bytes on a
//! character boundary. `options.raw: true` returns the text body verbatim (same cut). The body is
//! read as UTF-8 (invalid sequences replaced); declared charsets are not converted.

use std::time::Duration;

use reqwest::Url;
use serde::Serialize;
use serde_json::{Map, Value as Json, json};

use super::hypermedia::{self, HmAddress};
use super::{Context, record};
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::hm::HmClient;
use crate::memory::guard;
use seed_agents_protocol::Value;

/// Most markdown (or raw text) returned, in UTF-8 bytes.
pub(super) const MAX_MARKDOWN: usize = 200 * 1024;
/// Most body bytes read from the site; the rest is not fetched.
pub(super) const MAX_BODY: usize = 2 * 1024 * 1024;
/// Time to answer, and between two chunks of the body.
const TIMEOUT: Duration = Duration::from_secs(30);
/// Elements whose content is not page text.
const SKIPPED: &[&str] = &["head", "script", "style", "noscript", "template", "svg", "nav", "iframe", "form", "button"];

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Page {
    #[serde(rename = "type")]
    kind: &'static str,
    url: String,
    final_url: String,
    status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    content_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<String>,
    format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    markdown: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<String>,
    truncated: bool,
}

/// `read http(s)://…`.
pub(super) async fn read(context: &Context<'_>, raw: &str, options: Option<&Map<String, Json>>) -> ApiResult<Value> {
    let url = Url::parse(raw).map_err(|_| ApiError::invalid(format!("Invalid URL: {raw}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(ApiError::invalid(format!("Invalid URL: {raw}")));
    }
    let hm = HmClient::new(&context.app.http, &context.app.config.hm_server_url);
    if let Some(address) = site_address(&hm, &url).await {
        match hypermedia::read_from(&hm, raw, &address, options).await {
            Err(error) if error.kind() == ErrorKind::NotFound => {}
            other => return other,
        }
    }
    let raw_body = options.and_then(|options| options.get("raw")) == Some(&Json::Bool(true));
    fetch(url, raw_body, context.app.config.allow_private_network).await
}

/// `hm://<account>/<path>` when the URL's domain is registered to an account on the Hypermedia
/// server.
async fn site_address(hm: &HmClient<'_>, url: &Url) -> Option<HmAddress> {
    let mut input = Map::new();
    input.insert("domain".to_owned(), json!(url.host_str()?));
    let answer = match hm.read_query("GetDomain", &crate::hm::read::generic_params(&input)).await {
        Ok(answer) => answer,
        Err(error) => {
            tracing::debug!(%error, "GetDomain failed; reading the URL as a web page");
            return None;
        }
    };
    let uid = answer.get("registeredAccountUid")?.as_str()?.to_owned();
    let path = url.path_segments()?.filter(|segment| !segment.is_empty()).map(str::to_owned).collect();
    Some(HmAddress { uid, path, query: None, view: None }).filter(|address| !address.uid.is_empty())
}

/// The web reader.
async fn fetch(url: Url, raw_body: bool, allow_private_network: bool) -> ApiResult<Value> {
    if !allow_private_network {
        guard::check_url(&url).map_err(|blocked| refused(&blocked))?;
    }
    let client = guard::client(allow_private_network).map_err(ApiError::internal)?;
    let request = client
        .get(url.clone())
        .header(reqwest::header::ACCEPT, "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5")
        .send();
    let mut response = match tokio::time::timeout(TIMEOUT, request).await {
        Err(_) => return Err(could_not(&url, "no response within 30 seconds")),
        Ok(Err(error)) => match guard::blocked_in(&error) {
            Some(blocked) => return Err(refused(blocked)),
            None => return Err(could_not(&url, &crate::error::chain(&error))),
        },
        Ok(Ok(response)) => response,
    };
    let status = response.status();
    if status == reqwest::StatusCode::NOT_FOUND || status == reqwest::StatusCode::GONE {
        return Err(ApiError::not_found(format!("Web page not found: {url} (HTTP {})", status.as_u16())));
    }
    if !status.is_success() {
        return Err(could_not(&url, &format!("HTTP {}", status.as_u16())));
    }
    let content_type =
        response.headers().get(reqwest::header::CONTENT_TYPE).and_then(|value| value.to_str().ok()).map(str::to_owned);
    let essence = content_type.as_deref().map(essence).unwrap_or_default();
    if !is_text(&essence) && !essence.is_empty() {
        return Err(ApiError::invalid(format!(
            "{url} is not a text page ({essence}); save it with write ~/memory/<path> options.fromUrl instead"
        )));
    }
    let final_url = response.url().to_string();
    let mut body = Vec::new();
    let mut body_cut = false;
    loop {
        let chunk = match tokio::time::timeout(TIMEOUT, response.chunk()).await {
            Err(_) => return Err(could_not(&url, "no data received for 30 seconds")),
            Ok(Err(error)) => return Err(could_not(&url, &crate::error::chain(&error))),
            Ok(Ok(None)) => break,
            Ok(Ok(Some(chunk))) => chunk,
        };
        let room = MAX_BODY - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            body_cut = true;
            break;
        }
        body.extend_from_slice(&chunk);
    }
    let text = String::from_utf8_lossy(&body).into_owned();
    let html = is_html(&essence) || (essence.is_empty() && looks_like_html(&text));
    let title = html.then(|| title_of(&text)).flatten();
    let (format, converted) = if raw_body || !html {
        ("raw", text)
    } else {
        let markdown = tokio::task::spawn_blocking(move || to_markdown(&text)).await.map_err(ApiError::internal)?;
        ("markdown", markdown)
    };
    let (kept, cut) = cut_on_char_boundary(converted, MAX_MARKDOWN);
    let truncated = cut || body_cut;
    let label = title.clone().unwrap_or_else(|| final_url.clone());
    let summary =
        format!("Read {label} ({} characters{}).", kept.chars().count(), if truncated { ", truncated" } else { "" });
    let (markdown, content) = if format == "markdown" { (Some(kept), None) } else { (None, Some(kept)) };
    record(
        summary,
        &Page {
            kind: "web_page",
            url: url.to_string(),
            final_url,
            status: status.as_u16(),
            content_type,
            title,
            format,
            markdown,
            content,
            truncated,
        },
    )
}

/// HTML as markdown: `htmd` (Turndown's rules) without the elements in [`SKIPPED`].
pub(super) fn to_markdown(html: &str) -> String {
    let converter = htmd::HtmlToMarkdown::builder().skip_tags(SKIPPED.to_vec()).build();
    match converter.convert(html) {
        Ok(markdown) => markdown.trim().to_owned(),
        // The parser recovers from any markup; a failure here is an I/O error of its sink.
        Err(_) => html.to_owned(),
    }
}

/// The `<title>` text, entities for `&amp; &lt; &gt; &quot; &#39;` decoded, whitespace folded.
fn title_of(html: &str) -> Option<String> {
    let lower = html.to_ascii_lowercase();
    let open = lower.find("<title")?;
    let start = open + lower[open..].find('>')? + 1;
    let end = start + lower[start..].find("</title")?;
    let text = html.get(start..end)?;
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let text = text
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&");
    Some(text).filter(|text| !text.is_empty())
}

/// The longest prefix of at most `max` bytes ending on a character boundary.
pub(super) fn cut_on_char_boundary(mut text: String, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    (text, true)
}

fn essence(content_type: &str) -> String {
    content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase()
}

fn is_html(essence: &str) -> bool {
    matches!(essence, "text/html" | "application/xhtml+xml")
}

fn is_text(essence: &str) -> bool {
    essence.starts_with("text/")
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
        || matches!(
            essence,
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/x-javascript"
                | "application/yaml"
                | "application/x-yaml"
                | "application/xhtml+xml"
        )
}

fn looks_like_html(text: &str) -> bool {
    let start = text.trim_start().get(..15).unwrap_or_default().to_ascii_lowercase();
    start.starts_with("<!doctype html") || start.starts_with("<html")
}

fn refused(blocked: &guard::Blocked) -> ApiError {
    ApiError::invalid(format!("URL is not allowed: {blocked}"))
}

fn could_not(url: &Url, reason: &str) -> ApiError {
    ApiError::upstream(format!("Could not read {url}: {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_becomes_markdown_without_scripts_or_navigation() {
        let html = "<html><head><title>T &amp; U</title><style>p{}</style></head><body><nav><a href=/>Home</a></nav>\
                    <h1>Hello</h1><p>Some <b>bold</b> and <a href=\"https://x.test/\">a link</a>.</p>\
                    <script>alert(1)</script><ul><li>one</li><li>two</li></ul></body></html>";
        let markdown = to_markdown(html);
        assert!(markdown.starts_with("# Hello"), "{markdown}");
        assert!(markdown.contains("Some **bold** and [a link](https://x.test/)."), "{markdown}");
        assert!(markdown.contains("one") && markdown.contains("two"), "{markdown}");
        assert!(!markdown.contains("alert") && !markdown.contains("Home") && !markdown.contains("p{}"), "{markdown}");
        assert_eq!(title_of(html).as_deref(), Some("T & U"));
    }

    #[test]
    fn cuts_land_on_character_boundaries() {
        let (kept, cut) = cut_on_char_boundary("aé€".to_owned(), 4);
        assert_eq!((kept.as_str(), cut), ("aé", true));
        let (kept, cut) = cut_on_char_boundary("abc".to_owned(), 3);
        assert_eq!((kept.as_str(), cut), ("abc", false));
    }

    #[test]
    fn text_types() {
        for text in ["text/plain", "application/json", "application/ld+json", "image/svg+xml", "text/csv"] {
            assert!(is_text(text), "{text}");
        }
        for binary in ["image/png", "application/pdf", "application/octet-stream"] {
            assert!(!is_text(binary), "{binary}");
        }
        assert_eq!(essence("Text/HTML; charset=utf-8"), "text/html");
    }
}
