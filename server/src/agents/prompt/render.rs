//! Rendering: Seed blocks back to markdown, block ids carried as `<!-- id:... -->` comments until
//! [`strip_id_comments`] removes them.

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated as proto;

use super::table::render_table;
use super::text::{id_comment, indent, js_trim};

pub(super) fn field<'a>(block: &'a proto::AgentPromptBlockBlock, key: &str) -> Option<&'a Ipld> {
    block.extra.get(key).map(|value| &value.0)
}

pub(super) fn attribute<'a>(block: &'a proto::AgentPromptBlockBlock, key: &str) -> Option<&'a Ipld> {
    match field(block, "attributes") {
        Some(Ipld::Map(map)) => map.get(key),
        _ => None,
    }
}

pub(super) fn as_str(value: Option<&Ipld>) -> &str {
    match value {
        Some(Ipld::String(s)) => s,
        _ => "",
    }
}

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

fn as_position(value: &Ipld) -> Option<i64> {
    match value {
        Ipld::Integer(n) => Some(i64::try_from(*n).unwrap_or(if *n < 0 { i64::MIN } else { i64::MAX })),
        Ipld::Float(f) if f.is_finite() => Some(f.trunc() as i64),
        _ => None,
    }
}

/// Renders annotations as markdown markers. Offsets are UTF-16 units. At one offset, opening
/// markers come first, in reverse annotation order, then closing markers in annotation order:
/// the order upstream's stable merge sort gives, which nests the parser's output correctly.
pub(super) fn apply_annotations(text: &str, annotations: Option<&Ipld>) -> String {
    let Some(Ipld::List(annotations)) = annotations else { return text.to_string() };
    if annotations.is_empty() {
        return text.to_string();
    }
    // (position, 0 = open | 1 = close, order, marker)
    let mut markers: Vec<(i64, u8, i64, String)> = Vec::new();
    for annotation in annotations {
        let Ipld::Map(map) = annotation else { continue };
        let link = as_str(map.get("link"));
        let (open, close) = match as_str(map.get("type")) {
            "Bold" => ("**".to_string(), "**".to_string()),
            "Italic" => ("_".into(), "_".into()),
            "Strike" => ("~~".into(), "~~".into()),
            "Code" => ("`".into(), "`".into()),
            "Underline" => ("<u>".into(), "</u>".into()),
            "Link" => ("[".into(), format!("]({link})")),
            "Embed" => (format!("<{link}"), ">".into()),
            _ => (String::new(), String::new()),
        };
        let list = |key| match map.get(key) {
            Some(Ipld::List(items)) => &items[..],
            _ => &[],
        };
        let ends = list("ends");
        for (i, start) in list("starts").iter().enumerate() {
            let Some(start) = as_position(start) else { continue };
            let order = markers.len() as i64;
            markers.push((start, 0, -order, open.clone()));
            if let Some(end) = ends.get(i).and_then(as_position) {
                markers.push((end, 1, order, close.clone()));
            }
        }
    }
    markers.sort_by_key(|(pos, kind, order, _)| (*pos, *kind, *order));
    let units: Vec<u16> = text.encode_utf16().collect();
    let slice = |start: i64, end: Option<i64>| {
        let len = units.len() as i64;
        let clamp = |x: i64| if x < 0 { (len + x).max(0) } else { x.min(len) } as usize;
        let (start, end) = (clamp(start), clamp(end.unwrap_or(len)));
        if start < end { String::from_utf16_lossy(&units[start..end]) } else { String::new() }
    };
    let mut out = String::new();
    let mut last = 0;
    for (pos, _, _, marker) in &markers {
        out += &slice(last, Some(*pos));
        out += marker;
        last = *pos;
    }
    out += &slice(last, None);
    out.replace('\u{fffc}', "")
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
