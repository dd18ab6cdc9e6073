//! Text helpers shared by parsing and rendering: JavaScript white space, block id comments and
//! indentation.

/// JavaScript's `\s` and `trim()` set: Unicode white space without U+0085, plus U+FEFF.
pub(super) fn is_js_space(c: char) -> bool {
    c == '\u{feff}' || (c.is_whitespace() && c != '\u{85}')
}

pub(super) fn js_trim(s: &str) -> &str {
    s.trim_matches(is_js_space)
}

pub(super) fn is_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Matches `<!--\s*{key}([A-Za-z0-9_-]+)\s*-->` at the start of `s`; returns the id and the length.
fn comment_at(s: &str, key: &str) -> Option<(String, usize)> {
    let body = s.strip_prefix("<!--")?.trim_start_matches(is_js_space).strip_prefix(key)?;
    let id_len = body.find(|c| !is_id_char(c)).unwrap_or(body.len());
    let tail = body[id_len..].trim_start_matches(is_js_space).strip_prefix("-->")?;
    (id_len > 0).then(|| (body[..id_len].to_string(), s.len() - tail.len()))
}

/// The first `<!-- {key}... -->` comment in `s`: its byte range and id.
pub(super) fn find_comment(s: &str, key: &str) -> Option<(std::ops::Range<usize>, String)> {
    s.match_indices("<!--").find_map(|(at, _)| comment_at(&s[at..], key).map(|(id, len)| (at..at + len, id)))
}

/// Splits a trailing `<!-- id:... -->` off `s`: the text before it (end-trimmed) and the id.
pub(super) fn strip_block_id(s: &str) -> (String, Option<String>) {
    let trimmed = s.trim_end_matches(is_js_space);
    if let Some(at) = trimmed.rfind("<!--")
        && let Some((id, len)) = comment_at(&trimmed[at..], "id:")
        && at + len == trimmed.len()
    {
        return (s[..at].trim_end_matches(is_js_space).to_string(), Some(id));
    }
    (s.to_string(), None)
}

/// A line holding only an id comment (it names the container of the next list or table).
pub(super) fn standalone_id(line: &str) -> Option<String> {
    let line = js_trim(line);
    comment_at(line, "id:").filter(|(_, len)| *len == line.len()).map(|(id, _)| id)
}

pub(super) fn id_comment(id: &str) -> String {
    format!("<!-- id:{id} -->")
}

pub(super) fn indent(depth: usize) -> String {
    "  ".repeat(depth)
}
