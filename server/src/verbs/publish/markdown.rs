//! Markdown `content` as blocks for documents and comments: `#`…`######` headings, fenced code
//! blocks, images (a paragraph that is one `![alt](link)` line) and paragraphs (split on blank
//! lines), each with a random 8-character id. Inline markdown stays literal text (no annotations
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
            [line] => match image(line) {
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

/// The images of `text`, in order.
pub(super) fn images(text: &str) -> impl Iterator<Item = Image<'_>> {
    text.match_indices("![").filter_map(|(at, _)| {
        let rest = &text[at + 2..];
        let close = rest.find("](")?;
        let alt = &rest[..close];
        let inner_start = at + 2 + close + 2;
        let inner = &text[inner_start..];
        let end = inner.find(')')?;
        let inner = &inner[..end];
        let start = inner_start + (inner.len() - inner.trim_start().len());
        let target = match inner.trim_start().strip_prefix('<') {
            // `<…>` may hold spaces.
            Some(bracketed) => &bracketed[..bracketed.find('>')?],
            None => inner.split_whitespace().next()?,
        };
        let offset = if inner.trim_start().starts_with('<') { start + 1 } else { start };
        Some(Image { alt, target, span: offset..offset + target.len() })
    })
}

/// The image a whole line is, if it is one.
fn image(line: &str) -> Option<Image<'_>> {
    let trimmed = line.trim();
    let found = images(trimmed).next()?;
    let closing = trimmed[found.span.end..].find(')')? + found.span.end;
    (trimmed.starts_with("![") && closing + 1 == trimmed.len()).then_some(found)
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
    }

    #[test]
    fn images_are_found_with_where_their_targets_sit() {
        let text = "a ![one](<pics/a b.png>) b ![](two.png \"t\") ![broken](";
        let found: Vec<Image<'_>> = images(text).collect();
        assert_eq!(found.len(), 2);
        assert_eq!((found[0].alt, found[0].target), ("one", "pics/a b.png"));
        assert_eq!(&text[found[0].span.clone()], "pics/a b.png");
        assert_eq!((found[1].alt, &text[found[1].span.clone()]), ("", "two.png"));
    }
}
