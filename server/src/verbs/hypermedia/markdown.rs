//! Hypermedia document blocks as markdown, for the model to read.
//!
//! A document's `content` is a list of block nodes `{block: {id, type, text, annotations,
//! attributes?, link?, …}, children?: [node]}` (attributes may also be spread on the block).
//! Rendered: Paragraph, Heading (`##` at the top level, one `#` more per nesting level, at most
//! six), Code (fenced, with `language`), Math (`$$` fence), Image (`![alt](link)`), Video and
//! File (a link named by `name`), Embed (a quoted link), WebEmbed and Button (links), Query (a
//! one-line note: the query is not run). Annotations: Bold, Italic, Strike, Code, Link and Embed
//! (a mention, `[uid](hm://uid)`) become markdown; Underline, colours, sizes and fonts have no
//! markdown and are dropped. Children with `childrenType` Ordered/Unordered are list items,
//! Blockquote children are quoted, other children follow their parent one level deeper.
//! An unknown block type keeps its text.

use serde_json::Value as Json;

/// `# title` then the blocks.
pub(crate) fn document(title: Option<&str>, content: Option<&Json>) -> String {
    let body = blocks(content);
    match title.filter(|title| !title.trim().is_empty()) {
        Some(title) if body.is_empty() => format!("# {title}\n"),
        Some(title) => format!("# {title}\n\n{body}"),
        None => body,
    }
}

/// The blocks of a document or comment body.
pub(crate) fn blocks(content: Option<&Json>) -> String {
    let mut out = Vec::new();
    if let Some(Json::Array(nodes)) = content {
        render_nodes(nodes, 0, Kind::Group, "", &mut out);
    }
    let mut text = out.join("\n\n");
    if !text.is_empty() {
        text.push('\n');
    }
    text
}

/// How a parent lays out its children.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Group,
    Ordered,
    Unordered,
    Blockquote,
}

impl Kind {
    fn of(block: &Json) -> Kind {
        match attribute(block, "childrenType") {
            Some("Ordered") => Kind::Ordered,
            Some("Unordered") => Kind::Unordered,
            Some("Blockquote") => Kind::Blockquote,
            _ => Kind::Group,
        }
    }
}

/// Renders `nodes` laid out as `kind`, each line prefixed by `indent`.
fn render_nodes(nodes: &[Json], depth: usize, kind: Kind, indent: &str, out: &mut Vec<String>) {
    for (index, node) in nodes.iter().enumerate() {
        let Some(block) = node.get("block") else { continue };
        let rendered = render_block(block, depth);
        let children = node.get("children").and_then(Json::as_array);
        let (marker, child_indent) = match kind {
            Kind::Ordered => (format!("{}. ", index + 1), format!("{indent}   ")),
            Kind::Unordered => ("- ".to_owned(), format!("{indent}  ")),
            Kind::Blockquote => ("> ".to_owned(), format!("{indent}> ")),
            Kind::Group => (String::new(), indent.to_owned()),
        };
        if !rendered.is_empty() || kind != Kind::Group {
            let continuation = match kind {
                Kind::Blockquote => child_indent.clone(),
                _ => " ".repeat(marker.len()),
            };
            let mut lines = rendered.lines();
            let mut text = format!("{indent}{marker}{}", lines.next().unwrap_or_default());
            for line in lines {
                text.push('\n');
                text.push_str(indent);
                text.push_str(&continuation);
                text.push_str(line);
            }
            out.push(text.trim_end().to_owned());
        }
        if let Some(children) = children {
            let child_kind = Kind::of(block);
            let nested = if kind == Kind::Group { indent.to_owned() } else { child_indent };
            let mut rendered_children = Vec::new();
            render_nodes(children, depth + 1, child_kind, &nested, &mut rendered_children);
            match child_kind {
                // List items sit tight under each other.
                Kind::Ordered | Kind::Unordered => out.push(rendered_children.join("\n")),
                _ => out.extend(rendered_children),
            }
        }
    }
    out.retain(|text| !text.is_empty());
}

fn render_block(block: &Json, depth: usize) -> String {
    let kind = block.get("type").and_then(Json::as_str).unwrap_or_default();
    let raw_text = block.get("text").and_then(Json::as_str).unwrap_or_default();
    let link = block.get("link").and_then(Json::as_str).or_else(|| attribute(block, "link")).unwrap_or_default();
    match kind {
        "Heading" => format!("{} {}", "#".repeat((depth + 2).min(6)), inline(block)),
        "Code" => {
            let language = attribute(block, "language").unwrap_or_default();
            let fence = if raw_text.contains("```") { "````" } else { "```" };
            format!("{fence}{language}\n{raw_text}\n{fence}")
        }
        "Math" => format!("$$\n{raw_text}\n$$"),
        "Image" => format!(
            "![{}]({link})",
            if raw_text.is_empty() { attribute(block, "name").unwrap_or("") } else { raw_text }
        ),
        "Video" | "File" => {
            let name = attribute(block, "name").filter(|name| !name.is_empty()).unwrap_or(link);
            format!("[{kind}: {name}]({link})")
        }
        "Embed" => format!("> Embedded: [{link}]({link})"),
        "WebEmbed" => format!("[{link}]({link})"),
        "Button" => format!("[{}]({link})", if raw_text.is_empty() { link } else { raw_text }),
        "Query" => "_(a query block: its results are not rendered here)_".to_owned(),
        _ => inline(block),
    }
}

/// A block's text with its annotations as markdown.
fn inline(block: &Json) -> String {
    let chars: Vec<char> = block.get("text").and_then(Json::as_str).unwrap_or_default().chars().collect();
    // (position, closing?, order, text): closings before openings at one position; closings in
    // the reverse order of their openings.
    let mut marks: Vec<(usize, bool, usize, String)> = Vec::new();
    let annotations = block.get("annotations").and_then(Json::as_array).map(Vec::as_slice).unwrap_or_default();
    for (order, annotation) in annotations.iter().enumerate() {
        let kind = annotation.get("type").and_then(Json::as_str).unwrap_or_default();
        let link = annotation.get("link").and_then(Json::as_str).unwrap_or_default();
        let (open, close) = match kind {
            "Bold" => ("**".to_owned(), "**".to_owned()),
            "Italic" => ("_".to_owned(), "_".to_owned()),
            "Strike" => ("~~".to_owned(), "~~".to_owned()),
            "Code" => ("`".to_owned(), "`".to_owned()),
            "Link" | "Embed" => ("[".to_owned(), format!("]({link})")),
            _ => continue,
        };
        let positions = |key: &str| -> Vec<usize> {
            annotation
                .get(key)
                .and_then(Json::as_array)
                .map(|items| items.iter().filter_map(Json::as_u64).map(|n| n as usize).collect())
                .unwrap_or_default()
        };
        for (start, end) in positions("starts").into_iter().zip(positions("ends")) {
            let (start, end) = (start.min(chars.len()), end.min(chars.len()));
            if start >= end {
                continue;
            }
            marks.push((start, false, order, open.clone()));
            marks.push((end, true, order, close.clone()));
        }
    }
    marks.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(if a.1 { b.2.cmp(&a.2) } else { a.2.cmp(&b.2) }));
    let mention = |index: usize| -> Option<String> {
        // A mention's placeholder (U+FFFC) reads as the account it links to.
        annotations.iter().find_map(|annotation| {
            let starts = annotation.get("starts")?.as_array()?;
            let covers = starts.iter().any(|start| start.as_u64() == Some(index as u64));
            let link = annotation.get("link")?.as_str()?;
            (covers && annotation.get("type")?.as_str()? == "Embed")
                .then(|| link.trim_start_matches("hm://").split('/').next().unwrap_or(link).to_owned())
        })
    };
    let mut out = String::with_capacity(chars.len());
    let mut next = marks.iter().peekable();
    for (index, c) in chars.iter().enumerate() {
        while let Some(mark) = next.next_if(|mark| mark.0 == index) {
            out.push_str(&mark.3);
        }
        if *c == '\u{FFFC}' {
            out.push_str(&mention(index).unwrap_or_default());
        } else {
            out.push(*c);
        }
    }
    for mark in next {
        out.push_str(&mark.3);
    }
    out
}

/// An attribute from `attributes` or spread on the block.
fn attribute<'a>(block: &'a Json, key: &str) -> Option<&'a str> {
    block.get("attributes").and_then(|attributes| attributes.get(key)).or_else(|| block.get(key)).and_then(Json::as_str)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(block: Json, children: Option<Json>) -> Json {
        match children {
            Some(children) => json!({ "block": block, "children": children }),
            None => json!({ "block": block }),
        }
    }

    #[test]
    fn renders_headings_lists_code_and_annotations() {
        let content = json!([
            node(
                json!({"type": "Heading", "text": "Plan", "annotations": []}),
                Some(json!([
                    node(
                        json!({"type": "Paragraph", "text": "Bold and link", "annotations": [
                            {"type": "Bold", "starts": [0], "ends": [4]},
                            {"type": "Link", "starts": [9], "ends": [13], "link": "https://example.com"}
                        ]}),
                        None
                    ),
                    node(
                        json!({"type": "Paragraph", "text": "steps", "annotations": [],
                    "attributes": {"childrenType": "Ordered"}}),
                        Some(json!([
                            node(json!({"type": "Paragraph", "text": "one", "annotations": []}), None),
                            node(json!({"type": "Paragraph", "text": "two", "annotations": []}), None),
                        ]))
                    ),
                ]))
            ),
            node(json!({"type": "Code", "text": "let x = 1;", "attributes": {"language": "rust"}}), None),
            node(
                json!({"type": "Paragraph", "text": "hi \u{FFFC}!", "annotations": [
                    {"type": "Embed", "starts": [3], "ends": [4], "link": "hm://z6Mkuser"}
                ]}),
                None
            ),
            node(json!({"type": "Image", "text": "a cat", "link": "ipfs://bafycat"}), None),
        ]);
        let markdown = document(Some("Title"), Some(&content));
        assert_eq!(
            markdown,
            "# Title\n\n## Plan\n\n**Bold** and [link](https://example.com)\n\nsteps\n\n1. one\n2. two\n\n\
             ```rust\nlet x = 1;\n```\n\nhi [z6Mkuser](hm://z6Mkuser)!\n\n![a cat](ipfs://bafycat)\n"
        );
    }

    #[test]
    fn bullets_quotes_and_unknown_blocks() {
        let content = json!([
            node(
                json!({"type": "Paragraph", "text": "", "childrenType": "Unordered"}),
                Some(json!([
                    node(json!({"type": "Paragraph", "text": "a"}), None),
                    node(json!({"type": "Paragraph", "text": "b"}), None),
                ]))
            ),
            node(
                json!({"type": "Paragraph", "text": "said", "childrenType": "Blockquote"}),
                Some(json!([node(json!({"type": "Paragraph", "text": "quoted"}), None),]))
            ),
            node(json!({"type": "Mystery", "text": "kept"}), None),
            node(json!({"type": "Query", "text": ""}), None),
        ]);
        assert_eq!(
            blocks(Some(&content)),
            "- a\n- b\n\nsaid\n\n> quoted\n\nkept\n\n_(a query block: its results are not rendered here)_\n"
        );
        assert_eq!(blocks(None), "");
        assert_eq!(document(Some("Only"), Some(&json!([]))), "# Only\n");
    }
}
