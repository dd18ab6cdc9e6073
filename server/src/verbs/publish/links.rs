//! The link check of content-bearing writes: a published `hm://` link that leads nowhere is
//! broken where nobody can fix it, at the reader.
//!
//! Links are those markdown makes links, `[text](hm://…)` and `<hm://…>`, outside code blocks.
//! A link whose account is not an Ed25519 principal is malformed and always refused. The others
//! (at most [`MAX_CHECKS`], [`CONCURRENCY`] at a time) are looked up with `Resource`: a
//! `not-found` answer is a broken link and refuses the write, while a server that cannot answer
//! does not block publishing. `options.skipLinkCheck: true` skips the lookups, never the
//! malformed check. Links to a view (`…/:profile`) are checked for form only.

use futures_util::future::join_all;
use seed_agents_protocol::Principal;
use serde_json::Value as Json;

use super::Publish;
use crate::error::{ApiError, ApiResult};
use crate::hm::HmClient;
use crate::hm::document::TextBlock;
use crate::verbs::hypermedia::HmAddress;

/// The most links looked up per write; the rest pass unchecked.
const MAX_CHECKS: usize = 50;
/// Lookups in flight at once.
const CONCURRENCY: usize = 4;

/// Refuses `blocks` with malformed `hm://` links, or (unless skipped) links to nothing.
pub(super) async fn check(publish: &Publish<'_, '_>, blocks: &[TextBlock]) -> ApiResult<()> {
    let mut links: Vec<String> = Vec::new();
    for block in blocks.iter().filter(|block| block.kind != "Code") {
        for link in hm_links(&block.text) {
            if !links.contains(&link) {
                links.push(link);
            }
        }
    }
    let (mut malformed, mut targets) = (Vec::new(), Vec::new());
    for link in &links {
        let uid = link["hm://".len()..].split(['/', '?', '#']).next().unwrap_or_default();
        match (uid.parse::<Principal>(), HmAddress::parse(link)) {
            (Err(_), _) => malformed.push(link.as_str()),
            (Ok(_), Ok(address)) if address.view.is_none() => targets.push((link.as_str(), address)),
            (Ok(_), _) => {}
        }
    }
    if !malformed.is_empty() {
        return Err(ApiError::invalid(format!(
            "Content contains malformed hm:// links — fix or remove them before publishing: {}",
            malformed.join(" · ")
        )));
    }
    if publish.skip_link_check() {
        return Ok(());
    }
    let targets: Vec<(&str, String)> = targets
        .into_iter()
        .take(MAX_CHECKS)
        .map(|(link, address)| match &address.query {
            Some(query) => (link, format!("{}?{query}", address.canonical())),
            None => (link, address.canonical()),
        })
        .collect();
    let mut broken: Vec<&str> = Vec::new();
    for batch in targets.chunks(CONCURRENCY) {
        let answers = join_all(batch.iter().map(|(_, id)| missing(&publish.hm, id))).await;
        broken.extend(batch.iter().zip(answers).filter(|(_, missing)| *missing).map(|((link, _), _)| *link));
    }
    if !broken.is_empty() {
        return Err(ApiError::invalid(format!(
            "Content links to hm:// resources that do not exist on the server: {}. Fix the links (read them to \
             verify), or pass options.skipLinkCheck: true only if the targets are about to be created.",
            broken.join(" · ")
        )));
    }
    Ok(())
}

/// Whether the server says `id` is `not-found` (an unanswered lookup is not).
async fn missing(hm: &HmClient<'_>, id: &str) -> bool {
    let answer = hm.resource(id).await.ok();
    answer.is_some_and(|answer| answer.get("type").and_then(Json::as_str) == Some("not-found"))
}

/// The `hm://` targets of `[text](hm://…)` and `<hm://…>` in `text`, in order.
fn hm_links(text: &str) -> Vec<String> {
    let mut links = Vec::new();
    for (opener, closer) in [("](", ')'), ("<", '>')] {
        let mut rest = text;
        while let Some(at) = rest.find(opener) {
            rest = &rest[at + opener.len()..];
            let Some(link) = rest.strip_prefix("hm://").map(|_| rest) else { continue };
            let end = link.find(|c: char| c == closer || c.is_whitespace()).unwrap_or(link.len());
            links.push(link[..end].to_owned());
        }
    }
    links
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_markdown_links_and_autolinks_to_hm_ids() {
        let text = "See [notes](hm://z6Mkabc/notes?v=x \"title\") and <hm://z6Mkdef>, not hm://z6Mkbare or \
                    [web](https://example.com) or <b>.";
        assert_eq!(hm_links(text), ["hm://z6Mkabc/notes?v=x", "hm://z6Mkdef"]);
        assert!(hm_links("[x](hm://").iter().all(|link| link == "hm://"));
    }
}
