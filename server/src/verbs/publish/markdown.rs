//! Markdown `content` as blocks for documents and comments: `#`…`######` headings, fenced code
//! blocks, images (a paragraph that is one `![alt](link)` line whose link is an `ipfs://` or
//! `http(s)://` URL) and paragraphs (split on blank lines), each with a random 8-character id. Inline markdown stays literal text (no annotations
//! are built).

use crate::error::{ApiError, ApiResult};
use crate::hm::document::{self, TextBlock};

/// Markdown as Heading, Code, Image and Paragraph blocks with random ids.
pub(super) fn blocks(markdown: &str) -> ApiResult<Vec<TextBlock>> {
    type Part = (&'static str, String, Option<String>);
    let mut parts: Vec<Part> = Vec::new();
    let mut paragraph: Vec<&str> = Vec::new();
    let mut lines = markdown.lines();
    let flush = |paragraph: &mut Vec<&str>, parts: &mut Vec<Part>| {
        if paragraph.is_empty() {
            return;
        }
        match paragraph.as_slice() {
            [line] => match image(line).filter(|image| loadable(image.target)) {
                Some(image) => parts.push(("Image", image.alt.to_owned(), Some(image.target.to_owned()))),
                None => parts.push(("Paragraph", (*line).to_owned(), None)),
            },
            _ => parts.push(("Paragraph", paragraph.join("\n"), None)),
        }
        paragraph.clear();
    };
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if let Some(fence) = ["```", "~~~"].into_iter().find(|fence| trimmed.starts_with(fence)) {
            flush(&mut paragraph, &mut parts);
            let code: Vec<&str> = lines.by_ref().take_while(|line| !line.trim_start().starts_with(fence)).collect();
            parts.push(("Code", code.join("\n"), None));
        } else if trimmed.is_empty() {
            flush(&mut paragraph, &mut parts);
        } else if let Some(heading) = heading_text(trimmed) {
            flush(&mut paragraph, &mut parts);
            parts.push(("Heading", heading.to_owned(), None));
        } else {
            paragraph.push(line);
        }
    }
    flush(&mut paragraph, &mut parts);
    parts
        .into_iter()
        .map(|(kind, text, link)| {
            let mut random = [0u8; 8];
            getrandom::fill(&mut random).map_err(ApiError::internal)?;
            Ok(TextBlock { kind: kind.to_owned(), id: document::block_id(random), text, link })
        })
        .collect()
}

/// A markdown image: `![alt](target "title")`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Image<'t> {
    pub alt: &'t str,
    /// The link, without angle brackets or title.
    pub target: &'t str,
    /// Where the target sits in the text it was found in.
    pub span: std::ops::Range<usize>,
}

/// The images of `text`, in order: none inside fenced code blocks or inline code spans, and
/// none overlapping (the search goes on after each image's closing parenthesis).
pub(super) fn images(text: &str) -> Vec<Image<'_>> {
    let mut found = Vec::new();
    let mut fence: Option<&str> = None;
    let mut line_start = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let opens = ["```", "~~~"].into_iter().find(|marker| trimmed.starts_with(marker));
        match (fence, opens) {
            (None, Some(marker)) => fence = Some(marker),
            (Some(open), Some(marker)) if open == marker => fence = None,
            (None, None) => images_in_line(text, line_start, line_start + line.len(), &mut found),
            _ => {}
        }
        line_start += line.len();
    }
    found
}

/// The images of `text[from..to]` (one line) outside inline code, appended to `found`.
fn images_in_line<'t>(text: &'t str, from: usize, to: usize, found: &mut Vec<Image<'t>>) {
    let bytes = text.as_bytes();
    let mut at = from;
    while at < to {
        if bytes[at] == b'`' {
            // An inline code span: its run of backticks up to the same run again.
            let run = bytes[at..to].iter().take_while(|byte| **byte == b'`').count();
            let ticks = &text[at..at + run];
            at = match text[at + run..to].find(ticks) {
                Some(close) => at + run + close + run,
                None => at + run,
            };
        } else if text[at..to].starts_with("![") {
            match image_at(text, at, to) {
                Some((image, end)) => {
                    found.push(image);
                    at = end;
                }
                None => at += 2,
            }
        } else {
            at += text[at..].chars().next().map_or(1, char::len_utf8);
        }
    }
}

/// The image `![alt](target "title")` starting at `at` (within `..to`) and the index after its
/// closing parenthesis.
fn image_at(text: &str, at: usize, to: usize) -> Option<(Image<'_>, usize)> {
    let line = &text[..to];
    let close = line[at + 2..].find("](")? + at + 2;
    let alt = &line[at + 2..close];
    let mut cursor = close + 2;
    cursor += line[cursor..].len() - line[cursor..].trim_start().len();
    let (target, span) = match line[cursor..].strip_prefix('<') {
        // `<…>` may hold spaces.
        Some(bracketed) => {
            let length = bracketed.find('>')?;
            let span = cursor + 1..cursor + 1 + length;
            cursor = span.end + 1;
            (&line[span.clone()], span)
        }
        None => {
            let length = line[cursor..].find(|c: char| c.is_whitespace() || c == ')')?;
            let span = cursor..cursor + length;
            cursor = span.end;
            (&line[span.clone()], span)
        }
    };
    if target.is_empty() {
        return None;
    }
    cursor += line[cursor..].len() - line[cursor..].trim_start().len();
    // An optional title: "…", '…' or (…).
    if let Some(open) = line[cursor..].chars().next().filter(|c| matches!(c, '"' | '\'' | '(')) {
        let closing = if open == '(' { ')' } else { open };
        cursor += 1 + line[cursor + 1..].find(closing)? + 1;
        cursor += line[cursor..].len() - line[cursor..].trim_start().len();
    }
    line[cursor..].starts_with(')').then(|| (Image { alt, target, span }, cursor + 1))
}

/// The image a whole line is, if it is one.
fn image(line: &str) -> Option<Image<'_>> {
    let trimmed = line.trim();
    if !trimmed.starts_with("![") {
        return None;
    }
    let (found, end) = image_at(trimmed, 0, trimmed.len())?;
    (end == trimmed.len()).then_some(found)
}

/// Whether an Image block may link `target`: an image URL a reader can load (`ipfs://`,
/// `http(s)://`). Anything else (a relative path, `file:`, `hm://`, whose links the link check
/// reads in text) stays a paragraph's text.
fn loadable(target: &str) -> bool {
    ["ipfs://", "https://", "http://"].iter().any(|scheme| target.starts_with(scheme))
}

/// The text of an ATX heading line (`#` to `######` then a space).
fn heading_text(line: &str) -> Option<&str> {
    let hashes = line.bytes().take_while(|byte| *byte == b'#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &line[hashes..];
    (rest.is_empty() || rest.starts_with(' ')).then(|| rest.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each block's kind and text.
    fn kinds(blocks: &[TextBlock]) -> Vec<(&str, &str)> {
        blocks.iter().map(|block| (block.kind.as_str(), block.text.as_str())).collect()
    }

    #[test]
    fn markdown_becomes_headings_code_and_paragraphs() {
        let blocks =
            blocks("# Title\n\nFirst line\nsecond **line**\n\n```rust\nlet a = 1;\n\nlet b = 2;\n```\n## End").unwrap();
        assert_eq!(
            kinds(&blocks),
            [
                ("Heading", "Title"),
                ("Paragraph", "First line\nsecond **line**"),
                ("Code", "let a = 1;\n\nlet b = 2;"),
                ("Heading", "End"),
            ]
        );
        assert!(blocks.iter().all(|block| block.id.len() == 8));
        assert_eq!(heading_text("#hashtag"), None);
        assert_eq!(heading_text("####### seven"), None);
        assert!(super::blocks(" \n\n").unwrap().is_empty());
    }

    #[test]
    fn a_paragraph_that_is_one_image_becomes_an_image_block() {
        let blocks =
            blocks("![A heron](ipfs://bafkreiabc \"title\")\n\nSee ![x](a.png) inline.\n\n![a](b)\n![c](d)").unwrap();
        assert_eq!(
            kinds(&blocks),
            [("Image", "A heron"), ("Paragraph", "See ![x](a.png) inline."), ("Paragraph", "![a](b)\n![c](d)")]
        );
        assert_eq!(blocks[0].link.as_deref(), Some("ipfs://bafkreiabc"));
        assert!(blocks[1..].iter().all(|block| block.link.is_none()));
        // Only a URL a reader can load makes an Image; a title may hold parentheses.
        let urls =
            super::blocks("![local](chart.png)\n\n![f](file:///etc/x)\n\n![q](https://x.test/q.png \"Q3 (draft)\")");
        assert_eq!(
            kinds(&urls.unwrap()),
            [("Paragraph", "![local](chart.png)"), ("Paragraph", "![f](file:///etc/x)"), ("Image", "q")]
        );
    }

    #[test]
    fn images_are_found_with_where_their_targets_sit() {
        let text = "a ![one](<pics/a b.png>) b ![](two.png \"t\") ![broken](";
        let found = images(text);
        assert_eq!(found.len(), 2);
        assert_eq!((found[0].alt, found[0].target), ("one", "pics/a b.png"));
        assert_eq!(&text[found[0].span.clone()], "pics/a b.png");
        assert_eq!((found[1].alt, &text[found[1].span.clone()]), ("", "two.png"));
    }

    #[test]
    fn images_never_overlap_and_code_holds_none() {
        // Two `![` before one target: one image, found once.
        let text = "![a ![b](c.png)";
        let found = images(text);
        assert_eq!(found.len(), 1);
        assert_eq!(&text[found[0].span.clone()], "c.png");
        let text = "`![x](inline.png)` and ``code ` ![y](tick.png)`` then ![z](real.png)\n```\n![w](fenced.png)\n```\n~~~md\n![v](tilde.png)\n~~~\n![u](after.png)";
        let targets: Vec<&str> = images(text).iter().map(|image| image.target).collect();
        assert_eq!(targets, ["real.png", "after.png"]);
        // Unicode before an image keeps the offsets right.
        let text = "é ![ü](ü.png)";
        assert_eq!(&text[images(text)[0].span.clone()], "ü.png");
    }
}
