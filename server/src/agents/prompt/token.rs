//! Block tokens: markdown lines cut into headings, paragraphs, code and math fences, images,
//! lists and tables, each with the block id its source names.

use super::text::{is_js_space, js_trim, standalone_id, strip_block_id};

#[derive(Debug)]
pub(super) enum Token {
    Heading { level: usize, text: String, id: Option<String> },
    Paragraph { text: String, id: Option<String> },
    Code { language: String, text: String, id: Option<String> },
    Math { text: String, id: Option<String> },
    Image { alt: String, url: String, id: Option<String> },
    List { ordered: bool, items: Vec<(String, Option<String>)>, container: Option<String> },
    Table { lines: Vec<String>, container: Option<String> },
}

/// Drops a leading `---` ... `---` section.
pub(super) fn strip_front_matter(markdown: &str) -> &str {
    let trimmed = markdown.trim_start_matches(is_js_space);
    match trimmed.starts_with("---").then(|| trimmed[3..].find("\n---")).flatten() {
        Some(at) => &trimmed[3 + at + 4..],
        None => markdown,
    }
}

/// `# text` with one to six hashes: the level and the text.
fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.chars().take_while(|&c| c == '#').count();
    let rest = &line[level..];
    let text = rest.trim_start_matches(is_js_space);
    let ends_line = |c: char| matches!(c, '\r' | '\u{2028}' | '\u{2029}');
    ((1..=6).contains(&level) && text.len() < rest.len() && !text.is_empty() && !text.contains(ends_line))
        .then_some((level, text))
}

/// `![alt](url)` at the start of a line: alt, url and what follows.
fn image(line: &str) -> Option<(&str, &str, &str)> {
    let rest = line.strip_prefix("![")?;
    let (alt, rest) = rest.split_once(']')?;
    let (url, trailing) = rest.strip_prefix('(')?.split_once(')')?;
    (!url.is_empty()).then_some((alt, url, trailing))
}

/// A list item line: whether it is ordered, and its text after the marker.
fn list_item(line: &str) -> Option<(bool, &str)> {
    let (ordered, rest) = match line.strip_prefix(['-', '*', '+']) {
        Some(rest) => (false, rest),
        None => {
            let digits = line.chars().take_while(char::is_ascii_digit).count();
            (true, line[digits..].strip_prefix('.').filter(|_| digits > 0)?)
        }
    };
    let text = rest.trim_start_matches(is_js_space);
    (text.len() < rest.len()).then_some((ordered, text))
}

fn starts_block(line: &str) -> bool {
    let t = js_trim(line);
    t.is_empty()
        || ["```", "$$", "#", "|"].iter().any(|p| t.starts_with(p))
        || standalone_id(line).is_some()
        || image(t).is_some()
        || list_item(t).is_some()
}

pub(super) fn tokenize(markdown: &str) -> Vec<Token> {
    let lines: Vec<&str> = markdown.split('\n').collect();
    let mut tokens = Vec::new();
    let mut container = None;
    let mut i = 0;
    while i < lines.len() {
        let line = js_trim(lines[i]);
        if line.is_empty() {
            i += 1;
            continue;
        }
        if let Some(id) = standalone_id(line) {
            container = Some(id);
            i += 1;
            continue;
        }
        let fence = ["```", "$$"].into_iter().find(|f| line.starts_with(f));
        let token = if let Some(fence) = fence {
            let (info, id) = strip_block_id(js_trim(&line[fence.len()..]));
            let end = (i + 1..lines.len()).find(|&j| js_trim(lines[j]).starts_with(fence)).unwrap_or(lines.len());
            let text = lines[i + 1..end].join("\n");
            i = end + 1;
            if fence == "$$" { Token::Math { text, id } } else { Token::Code { language: info, text, id } }
        } else if let Some((level, text)) = heading(line) {
            let (text, id) = strip_block_id(text);
            i += 1;
            Token::Heading { level, text, id }
        } else if let Some((alt, url, trailing)) = image(line) {
            let has_scheme = url.find("://").is_some_and(|at| {
                let scheme = &url[..at];
                scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                    && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'))
            });
            let url = if has_scheme { url.to_string() } else { format!("file://{url}") };
            i += 1;
            Token::Image { alt: alt.to_string(), url, id: strip_block_id(trailing).1 }
        } else if line.starts_with('|') {
            let end = (i..lines.len()).find(|&j| !js_trim(lines[j]).starts_with('|')).unwrap_or(lines.len());
            let lines = lines[i..end].iter().map(|l| l.to_string()).collect();
            i = end;
            Token::Table { lines, container: container.take() }
        } else if let Some((ordered, _)) = list_item(line) {
            let mut items = Vec::new();
            while let Some((kind, text)) = lines.get(i).and_then(|l| list_item(js_trim(l)))
                && kind == ordered
            {
                items.push(strip_block_id(text));
                i += 1;
            }
            Token::List { ordered, items, container: container.take() }
        } else {
            // Leading indentation is the emitter's nesting depth, not content.
            // A line that only looks like a block (`#tag`) is a paragraph of its own.
            let single = starts_block(lines[i]);
            let mut text = vec![lines[i].trim_start_matches(is_js_space)];
            i += 1;
            while !single && i < lines.len() && !starts_block(lines[i]) {
                text.push(lines[i].trim_start_matches(is_js_space));
                i += 1;
            }
            let (first, id) = strip_block_id(text[0]);
            text[0] = &first;
            Token::Paragraph { text: text.join("\n"), id }
        };
        if !matches!(token, Token::Table { .. } | Token::List { .. }) {
            container = None;
        }
        tokens.push(token);
    }
    tokens
}
