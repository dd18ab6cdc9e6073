//! Markdown `content` as blocks for documents and comments: `#`…`######` headings, fenced code
//! blocks and paragraphs (split on blank lines), each with a random 8-character id. Inline
//! markdown stays literal text (no annotations are built).

use crate::error::{ApiError, ApiResult};
use crate::hm::document::{self, TextBlock};

/// Markdown as Heading, Code and Paragraph blocks with random ids.
pub(super) fn blocks(markdown: &str) -> ApiResult<Vec<TextBlock>> {
    let mut parts: Vec<(&'static str, String)> = Vec::new();
    let mut paragraph: Vec<&str> = Vec::new();
    let mut lines = markdown.lines();
    let flush = |paragraph: &mut Vec<&str>, parts: &mut Vec<(&'static str, String)>| {
        if !paragraph.is_empty() {
            parts.push(("Paragraph", paragraph.join("\n")));
            paragraph.clear();
        }
    };
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if let Some(fence) = ["```", "~~~"].into_iter().find(|fence| trimmed.starts_with(fence)) {
            flush(&mut paragraph, &mut parts);
            let code: Vec<&str> = lines.by_ref().take_while(|line| !line.trim_start().starts_with(fence)).collect();
            parts.push(("Code", code.join("\n")));
        } else if trimmed.is_empty() {
            flush(&mut paragraph, &mut parts);
        } else if let Some(heading) = heading_text(trimmed) {
            flush(&mut paragraph, &mut parts);
            parts.push(("Heading", heading.to_owned()));
        } else {
            paragraph.push(line);
        }
    }
    flush(&mut paragraph, &mut parts);
    parts
        .into_iter()
        .map(|(kind, text)| {
            let mut random = [0u8; 8];
            getrandom::fill(&mut random).map_err(ApiError::internal)?;
            Ok(TextBlock { kind: kind.to_owned(), id: document::block_id(random), text })
        })
        .collect()
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
}
