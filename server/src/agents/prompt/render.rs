//! Rendering: Seed blocks back to markdown, block ids carried as `<!-- id:... -->` comments until
//! [`strip_id_comments`] removes them.

use seed_agents_protocol::generated as proto;

use super::block::{apply_annotations, as_str, attribute, field};
use super::table::render_table;
use super::text::{id_comment, indent, js_trim};

fn append_id(md: &str, id: &str) -> String {
    match md.split_once('\n') {
        _ if md.is_empty() => id_comment(id),
        Some((first, rest)) => format!("{first} {}\n{rest}", id_comment(id)),
        None => format!("{md} {}", id_comment(id)),
    }
}

pub(super) fn render_node(node: &proto::AgentPromptBlock, depth: usize) -> String {
    let block = &node.block;
    if block.type_ == "Table" {
        return render_table(node, depth);
    }
    let children_type = as_str(attribute(block, "childrenType"));
    let marker = match children_type {
        "Ordered" => Some("1. "),
        "Unordered" => Some("- "),
        "Blockquote" => Some("> "),
        _ => None,
    };
    let is_container = block.type_ == "Paragraph" && as_str(field(block, "text")).is_empty() && marker.is_some();
    let mut out = if is_container { id_comment(&block.id) } else { render_block(block, depth) };
    for child in node.children.iter().flatten() {
        let md = render_node(child, depth + 1);
        match marker {
            _ if md.is_empty() => {}
            Some(marker) => {
                out.push('\n');
                out.push_str(&indent(depth + 1));
                out.push_str(marker);
                out.push_str(js_trim(&md));
            }
            None => {
                out.push_str("\n\n");
                out.push_str(&md);
            }
        }
    }
    out
}

fn media_url(url: &str) -> String {
    url.strip_prefix("ipfs://").map_or_else(|| url.to_string(), |cid| format!("https://ipfs.io/ipfs/{cid}"))
}

fn render_block(block: &proto::AgentPromptBlockBlock, depth: usize) -> String {
    let ind = indent(depth);
    let text = as_str(field(block, "text"));
    let link = as_str(field(block, "link"));
    let id = id_comment(&block.id);
    let or = |s: &'static str| if text.is_empty() { s } else { text };
    match block.type_.as_str() {
        "Paragraph" => append_id(&format!("{ind}{}", apply_annotations(text, field(block, "annotations"))), &block.id),
        "Heading" => {
            let hashes = "#".repeat((depth + 1).min(6));
            append_id(&format!("{hashes} {}", apply_annotations(text, field(block, "annotations"))), &block.id)
        }
        "Code" => format!("{ind}```{} {id}\n{ind}{text}\n{ind}```", as_str(attribute(block, "language"))),
        "Math" => format!("{ind}$$ {id}\n{ind}{text}\n{ind}$$"),
        "Image" => format!("{ind}![{}]({}) {id}", or("image"), media_url(link)),
        "Video" => format!("{ind}[Video]({}) {id}", media_url(link)),
        "File" => {
            let name = Some(as_str(attribute(block, "name"))).filter(|n| !n.is_empty()).unwrap_or("file");
            format!("{ind}[{name}]({}) {id}", media_url(link))
        }
        "Embed" => format!("{ind}> [Embed: {link}]({link}) {id}"),
        "WebEmbed" => format!("{ind}[Web Embed]({link}) {id}"),
        "Button" => format!("{ind}[{}]({link}) {id}", or("Button")),
        "Query" => format!("{ind}<!-- Query block --> {id}"),
        "Nostr" => format!("{ind}[Nostr: {link}]({link}) {id}"),
        _ if text.is_empty() => String::new(),
        _ => append_id(&format!("{ind}{text}"), &block.id),
    }
}

/// Removes `<!-- id:... -->` comments and the spaces or tabs before them (upstream's
/// `/[ \t]*<!-- id:[^>]+ -->/g`), in one pass.
pub(super) fn strip_id_comments(s: &str) -> String {
    const OPEN: &str = "<!-- id:";
    let mut out = String::with_capacity(s.len());
    let (mut copied, mut search) = (0, 0);
    // The first `>` at or after the last place looked at, so runs of unclosed openers stay linear.
    let mut close_cache: Option<usize> = None;
    while let Some(found) = s[search..].find(OPEN) {
        let (at, body) = (search + found, search + found + OPEN.len());
        let close = match close_cache {
            Some(close) if close >= body => close,
            _ => match s[body..].find('>') {
                Some(close) => body + close,
                None => break,
            },
        };
        close_cache = Some(close);
        if close - body > 3 && s[body..close].ends_with(" --") {
            out.push_str(s[copied..at].trim_end_matches([' ', '\t']));
            (copied, search) = (close + 1, close + 1);
        } else {
            search = at + 1;
        }
    }
    out.push_str(&s[copied..]);
    out
}
