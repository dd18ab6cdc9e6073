//! Agent prompts as Seed blocks: the normalisation of `systemPrompt` and trigger `prompt`.
//!
//! A prompt arrives either as markdown text (the legacy form) or as a tree of Seed block nodes.
//! [`normalize_prompt`] turns both into blocks, renders them back with [`blocks_to_markdown`] and
//! checks that the rendering is non-empty and at most [`MAX_PROMPT_BYTES`]. Blocks are stored; this
//! markdown is what the limit measures and what trigger summaries show as `prompt`. (Upstream
//! renders the model's prompt differently: embeds resolved through the Hypermedia server and
//! top-level blocks separated by a blank line. That lives with the run code, not here.)
//!
//! The dialect follows the upstream TypeScript client library (`markdown-to-blocks.ts`,
//! `blocks-to-markdown.ts`) and the prompt helpers of the upstream agents service, quirks
//! included, so both servers store and render the same prompts:
//!
//! - Parsing: optional front matter is dropped; headings nest the content after them (the level
//!   is not stored, a heading renders at its depth); paragraphs, fenced code with a language,
//!   `$$` math, standalone images and GFM tables become blocks; a run of `-`/`*`/`+` or `1.` items
//!   becomes the children of the preceding text block (or of an empty container paragraph) with
//!   `childrenType` `Unordered`/`Ordered`. Indentation is not structure: indented items join the
//!   surrounding flat list. Block quotes are not parsed (a `>` line is paragraph text). Inline
//!   `**bold**`, `*italic*`, `` `code` ``, `[text](url)` and `<scheme:...>` autolinks become
//!   annotations whose offsets count UTF-16 units, as JavaScript strings do.
//! - Rendering: children of a list parent are `- `/`1. `/`> ` lines indented two spaces per depth;
//!   other children follow after a blank line; top-level blocks are joined by one newline. Block
//!   ids travel as `<!-- id:... -->` comments during rendering and are stripped from the result.
//!
//! Block ids: upstream draws 8 random characters from `[A-Za-z0-9_-]`. Ours have the same shape
//! but are derived from a SHA-256 of the source markdown and the block's creation order, so the
//! same prompt always yields the same blocks (stable tests, no spurious diffs on an update that
//! resends the same text). Ids written as `<!-- id:... -->` in the source are kept, as upstream does.
//!
//! Deviations, all on inputs upstream mishandles: front matter is dropped without checking that
//! it is valid YAML (we have no YAML parser); links nested more than 64 deep stay plain text
//! (upstream overflows its stack); tables that could never render within the limit are not
//! filled in (upstream builds every cell, then rejects the prompt as too large, as we do).
//! Inline parsing is linear where upstream's rescanning is quadratic.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::Value;
use seed_agents_protocol::generated as proto;
use sha2::{Digest, Sha256};

use crate::http::error::{ApiError, ApiResult};

/// The largest prompt, in UTF-8 bytes: of the trimmed markdown input and of the rendered blocks.
pub const MAX_PROMPT_BYTES: usize = 64 * 1024;

/// Every table cell renders as at least three bytes (`| ` ... ` |`), so a prompt whose tables
/// hold more cells than this is too large whatever the cells say.
const MAX_TABLE_CELLS: usize = MAX_PROMPT_BYTES / 3;

/// Normalises a prompt given as markdown text or blocks into blocks.
///
/// `label` names the field in error messages (`System prompt`, `Trigger prompt`): `<label> is
/// required` when the rendered markdown is empty, `<label> is too large` over [`MAX_PROMPT_BYTES`]
/// and `<label> blocks are invalid` when a block has an empty `id` or `type`. Blocks are returned
/// as given (unknown fields kept); text is parsed with [`markdown_to_blocks`] after trimming.
pub fn normalize_prompt(
    input: &proto::AgentDefinitionSystemPrompt,
    label: &str,
) -> ApiResult<Vec<proto::AgentPromptBlock>> {
    let blocks = match input {
        proto::AgentDefinitionSystemPrompt::String(text) => {
            let text = js_trim(text);
            if text.is_empty() {
                return Err(ApiError::bad_request(format!("{label} is required")));
            }
            if text.len() > MAX_PROMPT_BYTES {
                return Err(ApiError::bad_request(format!("{label} is too large")));
            }
            let (blocks, fits) = parse_markdown(text);
            if !fits {
                return Err(ApiError::bad_request(format!("{label} is too large")));
            }
            blocks
        }
        proto::AgentDefinitionSystemPrompt::Array(nodes) => {
            nodes.iter().try_for_each(|node| check_node(node, label))?;
            // Rendering dense tables costs rows x columns: refuse the hopeless ones first.
            if table_cells(nodes) > MAX_TABLE_CELLS {
                return Err(ApiError::bad_request(format!("{label} is too large")));
            }
            nodes.clone()
        }
    };
    let markdown = blocks_to_markdown(&blocks);
    if markdown.is_empty() {
        return Err(ApiError::bad_request(format!("{label} is required")));
    }
    if markdown.len() > MAX_PROMPT_BYTES {
        return Err(ApiError::bad_request(format!("{label} is too large")));
    }
    Ok(blocks)
}

/// Reads a prompt from an undecoded value with upstream's messages for malformed shapes:
/// `<label> must be blocks` (neither text nor a list), `<label> blocks are invalid` (a node or its
/// `block` is not a map, or `id`/`type` is not a non-empty string) and `<label> block children are
/// invalid` (`children` neither absent, null nor a list). Other node keys are dropped.
pub fn prompt_from_ipld(value: &Ipld, label: &str) -> ApiResult<proto::AgentDefinitionSystemPrompt> {
    match value {
        Ipld::String(text) => Ok(proto::AgentDefinitionSystemPrompt::String(text.clone())),
        Ipld::List(nodes) => {
            let nodes = nodes.iter().map(|node| node_from_ipld(node, label)).collect::<ApiResult<_>>()?;
            Ok(proto::AgentDefinitionSystemPrompt::Array(nodes))
        }
        _ => Err(ApiError::bad_request(format!("{label} must be blocks"))),
    }
}

/// Parses markdown into Seed block nodes (see the module docs for the dialect).
///
/// Tables get one cell per row and column. Once the tables of a document hold more cells than a
/// prompt can render (at three bytes a cell), further tables keep their columns but lose their rows;
/// [`normalize_prompt`] rejects such a prompt as too large, as upstream does after rendering it.
pub fn markdown_to_blocks(markdown: &str) -> Vec<proto::AgentPromptBlock> {
    parse_markdown(markdown).0
}

/// Renders blocks as markdown, without block id comments and trimmed.
pub fn blocks_to_markdown(blocks: &[proto::AgentPromptBlock]) -> String {
    let parts: Vec<String> = blocks.iter().map(|node| render_node(node, 0)).filter(|md| !md.is_empty()).collect();
    js_trim(&strip_id_comments(&parts.join("\n"))).to_string()
}

/// The blocks and whether every table got all its cells (see [`markdown_to_blocks`]).
fn parse_markdown(markdown: &str) -> (Vec<proto::AgentPromptBlock>, bool) {
    let mut tree = Tree::new(markdown);
    for token in tokenize(strip_front_matter(markdown)) {
        tree.add_token(token);
    }
    (tree.roots.iter().map(|&idx| tree.to_proto(idx)).collect(), !tree.oversized)
}

/// The cells the rendered tables will have: columns x rows of every table outside a table.
fn table_cells(nodes: &[proto::AgentPromptBlock]) -> usize {
    nodes.iter().fold(0usize, |sum, node| {
        let children = node.children.as_deref().unwrap_or_default();
        let cells = if node.block.type_ == "Table" {
            let count = |kind: &str| children.iter().filter(|c| c.block.type_ == kind).count();
            count("TableColumn").saturating_mul(count("TableRow"))
        } else {
            table_cells(children)
        };
        sum.saturating_add(cells)
    })
}

fn check_node(node: &proto::AgentPromptBlock, label: &str) -> ApiResult<()> {
    if node.block.id.is_empty() || node.block.type_.is_empty() {
        return Err(ApiError::bad_request(format!("{label} blocks are invalid")));
    }
    node.children.iter().flatten().try_for_each(|child| check_node(child, label))
}

fn node_from_ipld(value: &Ipld, label: &str) -> ApiResult<proto::AgentPromptBlock> {
    let invalid = || ApiError::bad_request(format!("{label} blocks are invalid"));
    let Ipld::Map(node) = value else { return Err(invalid()) };
    let Some(Ipld::Map(block)) = node.get("block") else { return Err(invalid()) };
    let (Some(Ipld::String(id)), Some(Ipld::String(type_))) = (block.get("id"), block.get("type")) else {
        return Err(invalid());
    };
    if id.is_empty() || type_.is_empty() {
        return Err(invalid());
    }
    let children = match node.get("children") {
        None | Some(Ipld::Null) => None,
        Some(Ipld::List(children)) => {
            Some(children.iter().map(|child| node_from_ipld(child, label)).collect::<ApiResult<_>>()?)
        }
        Some(_) => return Err(ApiError::bad_request(format!("{label} block children are invalid"))),
    };
    let extra = block
        .iter()
        .filter(|(key, _)| *key != "id" && *key != "type")
        .map(|(key, value)| (key.clone(), Value(value.clone())))
        .collect();
    Ok(proto::AgentPromptBlock {
        block: proto::AgentPromptBlockBlock { id: id.clone(), type_: type_.clone(), extra },
        children,
    })
}

// ─── Text helpers shared by parsing and rendering ───────────────────────────────────────────────

/// JavaScript's `\s` and `trim()` set: Unicode white space without U+0085, plus U+FEFF.
fn is_js_space(c: char) -> bool {
    c == '\u{feff}' || (c.is_whitespace() && c != '\u{85}')
}

fn js_trim(s: &str) -> &str {
    s.trim_matches(is_js_space)
}

fn is_id_char(c: char) -> bool {
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
fn find_comment(s: &str, key: &str) -> Option<(std::ops::Range<usize>, String)> {
    s.match_indices("<!--").find_map(|(at, _)| comment_at(&s[at..], key).map(|(id, len)| (at..at + len, id)))
}

/// Splits a trailing `<!-- id:... -->` off `s`: the text before it (end-trimmed) and the id.
fn strip_block_id(s: &str) -> (String, Option<String>) {
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
fn standalone_id(line: &str) -> Option<String> {
    let line = js_trim(line);
    comment_at(line, "id:").filter(|(_, len)| *len == line.len()).map(|(id, _)| id)
}

fn id_comment(id: &str) -> String {
    format!("<!-- id:{id} -->")
}

fn indent(depth: usize) -> String {
    "  ".repeat(depth)
}

// ─── Block ids ──────────────────────────────────────────────────────────────────────────────────

const ID_CHARS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";

/// Deterministic 8-character ids: SHA-256 of (source digest, sequence number).
struct BlockIds {
    seed: [u8; 32],
    next: u64,
}

impl BlockIds {
    fn new(source: &str) -> Self {
        Self { seed: Sha256::digest(source.as_bytes()).into(), next: 0 }
    }

    fn generate(&mut self) -> String {
        let digest = Sha256::new()
            .chain_update(b"seed-prompt-block")
            .chain_update(self.seed)
            .chain_update(self.next.to_be_bytes())
            .finalize();
        self.next += 1;
        digest.iter().take(8).map(|byte| char::from(ID_CHARS[usize::from(byte & 63)])).collect()
    }
}

// ─── Inline formatting ──────────────────────────────────────────────────────────────────────────

#[derive(Debug, Clone, PartialEq)]
struct Annotation {
    kind: &'static str,
    start: usize,
    end: usize,
    link: Option<String>,
}

/// Plain text, its length in UTF-16 units, and annotations over those units.
#[derive(Debug, Default)]
struct Inline {
    text: String,
    units: usize,
    annotations: Vec<Annotation>,
}

impl Inline {
    fn push(&mut self, c: char) {
        self.text.push(c);
        self.units += c.len_utf16();
    }

    fn push_all(&mut self, chars: &[char]) {
        chars.iter().for_each(|&c| self.push(c));
    }

    /// Appends `inner` (its annotations shifted) and an annotation spanning it.
    fn wrap(&mut self, inner: Inline, kind: &'static str, link: Option<String>) {
        let start = self.units;
        self.text.push_str(&inner.text);
        self.units += inner.units;
        let shifted =
            inner.annotations.into_iter().map(|a| Annotation { start: a.start + start, end: a.end + start, ..a });
        self.annotations.extend(shifted);
        self.annotations.push(Annotation { kind, start, end: self.units, link });
    }
}

/// Links may nest inside links; deeper nesting than this stays plain text, so a hostile prompt
/// cannot exhaust the stack (upstream would fail with a JavaScript stack overflow instead).
const MAX_INLINE_DEPTH: usize = 64;

/// Marks "no such position" in [`InlineParser`] tables.
const NONE: usize = usize::MAX;

/// Inline markdown of one text, with lookup tables so each construct finds its end in constant
/// time. Upstream rescans the rest of the text for every `[`, `<`, `*` or `` ` ``, which is
/// quadratic (seconds for 64 KiB of `[`); the results here are the same.
struct InlineParser<'a> {
    raw: &'a [char],
    /// The `]` matching the `[` at each index (a match depends only on what follows the `[`).
    bracket: Vec<usize>,
    /// The next `)`, `>`, `` ` ``, `**`, and `*` with no `*` beside it, at or after each index.
    paren: Vec<usize>,
    angle: Vec<usize>,
    tick: Vec<usize>,
    double_star: Vec<usize>,
    lone_star: Vec<usize>,
}

impl<'a> InlineParser<'a> {
    fn new(raw: &'a [char]) -> Self {
        let n = raw.len();
        let mut bracket = vec![NONE; n];
        let mut open = Vec::new();
        for (j, &c) in raw.iter().enumerate() {
            if c == '[' {
                open.push(j);
            } else if c == ']'
                && let Some(i) = open.pop()
            {
                bracket[i] = j;
            }
        }
        let star = |k: usize| raw.get(k) == Some(&'*');
        let scan = |hit: &dyn Fn(usize) -> bool| {
            let mut next = vec![NONE; n + 1];
            for j in (0..n).rev() {
                next[j] = if hit(j) { j } else { next[j + 1] };
            }
            next
        };
        Self {
            raw,
            bracket,
            paren: scan(&|j| raw[j] == ')'),
            angle: scan(&|j| raw[j] == '>'),
            tick: scan(&|j| raw[j] == '`'),
            double_star: scan(&|j| star(j) && star(j + 1)),
            lone_star: scan(&|j| star(j) && !star(j + 1) && (j == 0 || !star(j - 1))),
        }
    }

    /// The first hit in `table` at or after `from` and before `bound`.
    fn next(table: &[usize], from: usize, bound: usize) -> Option<usize> {
        table.get(from).copied().filter(|&j| j < bound)
    }

    /// For `[...](...)` with `[` at `open`, inside `..hi`: the matching `]` and the first `)` after it.
    fn link_shape(&self, open: usize, hi: usize) -> Option<(usize, usize)> {
        let close = Self::next(&self.bracket, open, hi)?;
        if close + 1 >= hi || self.raw[close + 1] != '(' {
            return None;
        }
        Some((close, Self::next(&self.paren, close + 2, hi)?))
    }

    /// The closing `*` of an italic span inside `..hi`. The last position of a nested slice is
    /// checked by hand: the table looked at the character after the slice.
    fn lone_star(&self, from: usize, hi: usize) -> Option<usize> {
        if let Some(end) = Self::next(&self.lone_star, from, hi.saturating_sub(1)) {
            return Some(end);
        }
        let last = hi.checked_sub(1)?;
        (last >= from && self.raw[last] == '*' && self.raw[last - 1] != '*').then_some(last)
    }

    /// Parses `raw[lo..hi]` as upstream parses that substring on its own.
    fn parse(&self, lo: usize, hi: usize, depth: usize) -> Inline {
        let raw = self.raw;
        let mut out = Inline::default();
        if depth > MAX_INLINE_DEPTH {
            out.push_all(&raw[lo..hi]);
            return out;
        }
        let mut i = lo;
        while i < hi {
            let (c, next) = (raw[i], (i + 1 < hi).then(|| raw[i + 1]));
            if c == '\\'
                && let Some(escaped) = next
            {
                out.push(escaped);
                i += 2;
                continue;
            }
            // An inline image keeps only its alt text: Seed has no inline images.
            if c == '!'
                && next == Some('[')
                && let Some((close, paren)) = self.link_shape(i + 1, hi)
            {
                out.push_all(&raw[i + 2..close]);
                i = paren + 1;
                continue;
            }
            if c == '<'
                && let Some(end) = Self::next(&self.angle, i + 1, hi)
                && is_autolink(&raw[i + 1..end])
            {
                let url: String = raw[i + 1..end].iter().collect();
                // Hypermedia links are embeds on an object-replacement placeholder.
                let (kind, shown) = if url.starts_with("hm://") { ("Embed", "\u{fffc}") } else { ("Link", &*url) };
                let mut inner = Inline::default();
                shown.chars().for_each(|c| inner.push(c));
                out.wrap(inner, kind, Some(url.clone()));
                i = end + 1;
                continue;
            }
            if c == '['
                && let Some((close, paren)) = self.link_shape(i, hi)
            {
                out.wrap(self.parse(i + 1, close, depth + 1), "Link", Some(raw[close + 2..paren].iter().collect()));
                i = paren + 1;
                continue;
            }
            if c == '*'
                && next == Some('*')
                && let Some(end) = Self::next(&self.double_star, i + 2, hi.saturating_sub(1))
            {
                out.wrap(self.parse(i + 2, end, depth + 1), "Bold", None);
                i = end + 2;
                continue;
            }
            if c == '*'
                && next != Some('*')
                && let Some(end) = self.lone_star(i + 1, hi)
            {
                out.wrap(self.parse(i + 1, end, depth + 1), "Italic", None);
                i = end + 1;
                continue;
            }
            if c == '`'
                && let Some(end) = Self::next(&self.tick, i + 1, hi)
            {
                let mut code = Inline::default();
                code.push_all(&raw[i + 1..end]);
                out.wrap(code, "Code", None);
                i = end + 1;
                continue;
            }
            out.push(c);
            i += 1;
        }
        out
    }
}

/// `^[a-zA-Z][a-zA-Z0-9+.-]*:\S*$` with no `<`, `>` or space anywhere.
fn is_autolink(inner: &[char]) -> bool {
    let scheme = inner.iter().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-')).count();
    inner.first().is_some_and(|c| c.is_ascii_alphabetic())
        && inner.get(scheme) == Some(&':')
        && !inner.iter().any(|&c| is_js_space(c) || c == '<' || c == '>')
}

// ─── Tokens ─────────────────────────────────────────────────────────────────────────────────────

#[derive(Debug)]
enum Token {
    Heading { level: usize, text: String, id: Option<String> },
    Paragraph { text: String, id: Option<String> },
    Code { language: String, text: String, id: Option<String> },
    Math { text: String, id: Option<String> },
    Image { alt: String, url: String, id: Option<String> },
    List { ordered: bool, items: Vec<(String, Option<String>)>, container: Option<String> },
    Table { lines: Vec<String>, container: Option<String> },
}

/// Drops a leading `---` ... `---` section.
fn strip_front_matter(markdown: &str) -> &str {
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

fn tokenize(markdown: &str) -> Vec<Token> {
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

// ─── Tree building ──────────────────────────────────────────────────────────────────────────────

#[derive(Debug)]
struct Node {
    kind: &'static str,
    id: String,
    inline: Inline,
    children_type: Option<&'static str>,
    language: Option<String>,
    link: Option<String>,
    attributes: BTreeMap<String, Ipld>,
    children: Vec<usize>,
}

/// An arena of nodes plus the stack of open headings (level, node).
struct Tree {
    nodes: Vec<Node>,
    roots: Vec<usize>,
    headings: Vec<(usize, usize)>,
    ids: BlockIds,
    /// Table cells still allowed, and whether a table went over (see [`markdown_to_blocks`]).
    cells_left: usize,
    oversized: bool,
}

impl Tree {
    fn new(source: &str) -> Self {
        Self {
            nodes: Vec::new(),
            roots: Vec::new(),
            headings: Vec::new(),
            ids: BlockIds::new(source),
            cells_left: MAX_TABLE_CELLS,
            oversized: false,
        }
    }

    fn node(&mut self, kind: &'static str, id: Option<String>, inline: Inline) -> usize {
        let id = id.unwrap_or_else(|| self.ids.generate());
        let node = Node {
            kind,
            id,
            inline,
            children_type: None,
            language: None,
            link: None,
            attributes: BTreeMap::new(),
            children: Vec::new(),
        };
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    fn text_node(&mut self, kind: &'static str, text: &str, id: Option<String>) -> usize {
        let chars: Vec<char> = text.chars().collect();
        let inline = InlineParser::new(&chars).parse(0, chars.len(), 0);
        self.node(kind, id, inline)
    }

    fn plain_node(&mut self, kind: &'static str, text: &str, id: Option<String>) -> usize {
        let mut inline = Inline::default();
        text.chars().for_each(|c| inline.push(c));
        self.node(kind, id, inline)
    }

    fn container(&mut self, items: Vec<usize>, list_type: &'static str, id: Option<String>) -> usize {
        let idx = self.node("Paragraph", id, Inline::default());
        self.nodes[idx].children_type = Some(list_type);
        self.nodes[idx].children = items;
        idx
    }

    fn parent(&self) -> Option<usize> {
        self.headings.last().map(|&(_, idx)| idx)
    }

    fn siblings(&mut self) -> &mut Vec<usize> {
        match self.parent() {
            Some(parent) => &mut self.nodes[parent].children,
            None => &mut self.roots,
        }
    }

    /// A heading holding list items directly stops doing so once other content follows: the
    /// items move into a container paragraph and the heading becomes a `Group` again.
    fn append(&mut self, idx: usize) {
        if let Some(parent) = self.parent()
            && let Some(list_type @ ("Unordered" | "Ordered")) = self.nodes[parent].children_type
        {
            let items = std::mem::take(&mut self.nodes[parent].children);
            let container = self.container(items, list_type, None);
            self.nodes[parent].children = vec![container];
            self.nodes[parent].children_type = Some("Group");
        }
        self.siblings().push(idx);
    }

    /// Where a list without a container id nests: the previous sibling when it is a childless
    /// text paragraph, or the enclosing heading when the list comes first under it.
    fn list_target(&mut self) -> Option<usize> {
        let parent = self.parent();
        if parent.is_some_and(|p| matches!(self.nodes[p].children_type, Some("Unordered" | "Ordered"))) {
            return None;
        }
        let Some(&prev) = self.siblings().last() else { return parent };
        let prev_node = &self.nodes[prev];
        let nests = prev_node.kind == "Paragraph"
            && !prev_node.inline.text.is_empty()
            && prev_node.children.is_empty()
            && prev_node.children_type.is_none();
        nests.then_some(prev)
    }

    fn add_token(&mut self, token: Token) {
        let idx = match token {
            Token::Heading { level, text, id } => {
                let idx = self.text_node("Heading", &text, id);
                self.nodes[idx].children_type = Some("Group");
                while self.headings.last().is_some_and(|&(open, _)| open >= level) {
                    self.headings.pop();
                }
                self.append(idx);
                self.headings.push((level, idx));
                return;
            }
            Token::Paragraph { text, id } => self.text_node("Paragraph", &text, id),
            Token::Code { language, text, id } => {
                let idx = self.plain_node("Code", &text, id);
                self.nodes[idx].language = Some(language).filter(|l| !l.is_empty());
                idx
            }
            Token::Math { text, id } => self.plain_node("Math", &text, id),
            Token::Image { alt, url, id } => {
                let idx = self.plain_node("Image", &alt, id);
                self.nodes[idx].link = Some(url);
                idx
            }
            Token::Table { lines, container } => self.table(&lines, container),
            Token::List { ordered, items, container } => {
                let list_type = if ordered { "Ordered" } else { "Unordered" };
                let items: Vec<usize> =
                    items.into_iter().map(|(text, id)| self.text_node("Paragraph", &text, id)).collect();
                if container.is_none()
                    && let Some(target) = self.list_target()
                {
                    self.nodes[target].children_type = Some(list_type);
                    self.nodes[target].children.extend(items);
                    return;
                }
                self.container(items, list_type, container)
            }
        };
        self.append(idx);
    }

    /// A GFM table: `Table` > (`TableColumn`..., `TableRow` > cell `Paragraph`s with `columnId`).
    fn table(&mut self, lines: &[String], container: Option<String>) -> usize {
        let rows: Vec<TableRow> = lines.iter().map(|line| split_table_row(line)).collect();
        let has_separator = rows.get(1).is_some_and(TableRow::is_separator);
        let (header, body) = if has_separator { (rows.first(), &rows[2..]) } else { (None, &rows[..]) };
        let body: Vec<&TableRow> = body.iter().filter(|r| !r.is_separator()).collect();
        let header_cells = header.map_or(&[][..], |h| &h.cells[..]);
        let columns = body.iter().map(|r| r.cells.len()).chain([header_cells.len()]).max().unwrap_or(0);
        let column_ids: Vec<String> = (0..columns)
            .map(|i| header_cells.get(i).and_then(|c| c.column.clone()).unwrap_or_else(|| self.ids.generate()))
            .collect();
        let mut children: Vec<usize> =
            column_ids.iter().map(|id| self.plain_node("TableColumn", "", Some(id.clone()))).collect();
        let header = header.filter(|h| h.cells.iter().any(|c| !c.text.is_empty()));
        let mut filled: Vec<(&TableRow, bool)> =
            header.into_iter().map(|h| (h, true)).chain(body.iter().map(|&r| (r, false))).collect();
        match self.cells_left.checked_sub(columns.saturating_mul(filled.len())) {
            Some(left) => self.cells_left = left,
            None => {
                self.oversized = true;
                filled.clear();
            }
        }
        for (row, is_header) in filled {
            let row_idx = self.plain_node("TableRow", "", row.id.clone());
            if is_header {
                self.nodes[row_idx].attributes.insert("isHeader".into(), Ipld::Bool(true));
            }
            for (i, column) in column_ids.iter().enumerate() {
                let text = row.cells.get(i).map_or(String::new(), |c| replace_br(&c.text));
                let cell = self.text_node("Paragraph", &text, None);
                self.nodes[cell].attributes.insert("columnId".into(), Ipld::String(column.clone()));
                self.nodes[row_idx].children.push(cell);
            }
            children.push(row_idx);
        }
        let table = self.plain_node("Table", "", container);
        self.nodes[table].children = children;
        table
    }

    fn to_proto(&self, idx: usize) -> proto::AgentPromptBlock {
        let node = &self.nodes[idx];
        let annotations = node.inline.annotations.iter().map(|a| {
            let mut map = BTreeMap::from([
                ("type".to_string(), Ipld::String(a.kind.to_string())),
                ("starts".to_string(), Ipld::List(vec![Ipld::Integer(a.start as i128)])),
                ("ends".to_string(), Ipld::List(vec![Ipld::Integer(a.end as i128)])),
            ]);
            if let Some(link) = &a.link {
                map.insert("link".into(), Ipld::String(link.clone()));
            }
            Ipld::Map(map)
        });
        let mut attributes = node.attributes.clone();
        if let Some(children_type) = node.children_type {
            attributes.insert("childrenType".into(), Ipld::String(children_type.into()));
        }
        if let Some(language) = &node.language {
            attributes.insert("language".into(), Ipld::String(language.clone()));
        }
        let mut extra = BTreeMap::from([
            ("text".to_string(), Value(Ipld::String(node.inline.text.clone()))),
            ("annotations".to_string(), Value(Ipld::List(annotations.collect()))),
            ("attributes".to_string(), Value(Ipld::Map(attributes))),
        ]);
        if let Some(link) = &node.link {
            extra.insert("link".into(), Value(Ipld::String(link.clone())));
        }
        let children: Vec<_> = node.children.iter().map(|&child| self.to_proto(child)).collect();
        proto::AgentPromptBlock {
            block: proto::AgentPromptBlockBlock { id: node.id.clone(), type_: node.kind.to_string(), extra },
            children: (!children.is_empty()).then_some(children),
        }
    }
}

#[derive(Debug)]
struct TableCell {
    text: String,
    column: Option<String>,
}

#[derive(Debug)]
struct TableRow {
    cells: Vec<TableCell>,
    id: Option<String>,
}

impl TableRow {
    fn is_separator(&self) -> bool {
        let dashes = |t: &str| {
            let t = t.strip_prefix(':').unwrap_or(t);
            let t = t.strip_suffix(':').unwrap_or(t);
            !t.is_empty() && t.chars().all(|c| c == '-')
        };
        !self.cells.is_empty() && self.cells.iter().all(|c| dashes(&c.text))
    }
}

/// Splits a table line into cells (`\|` is a literal pipe), reading the row id from an id
/// comment in any cell or after the last pipe, and column ids from `<!-- col:... -->` comments.
fn split_table_row(line: &str) -> TableRow {
    let (text, mut id) = strip_block_id(js_trim(line));
    let text = js_trim(&text);
    let mut raw_cells = Vec::new();
    let mut current = String::new();
    let mut chars = text.strip_prefix('|').unwrap_or(text).chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => current.push(chars.next().unwrap_or('|')),
            '|' => raw_cells.push(js_trim(&std::mem::take(&mut current)).to_string()),
            _ => current.push(c),
        }
    }
    if !js_trim(&current).is_empty() || raw_cells.is_empty() {
        raw_cells.push(js_trim(&current).to_string());
    }
    let cells = raw_cells
        .into_iter()
        .map(|mut text| {
            if let Some((range, row_id)) = find_comment(&text, "id:") {
                id = Some(row_id);
                text.replace_range(range, "");
            }
            let column = find_comment(&text, "col:").map(|(range, column)| {
                text.replace_range(range, "");
                column
            });
            TableCell { text: js_trim(&text).to_string(), column }
        })
        .collect();
    TableRow { cells, id }
}

/// Turns `<br>`, `<br/>`, `<BR />` into newlines.
fn replace_br(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find('<') {
        out.push_str(&rest[..at]);
        let tag = &rest[at + 1..];
        let after =
            tag.get(..2).filter(|b| b.eq_ignore_ascii_case("br")).map(|_| tag[2..].trim_start_matches(is_js_space));
        match after.map(|a| a.strip_prefix('/').unwrap_or(a)).and_then(|a| a.strip_prefix('>')) {
            Some(tail) => {
                out.push('\n');
                rest = tail;
            }
            None => {
                out.push('<');
                rest = tag;
            }
        }
    }
    out + rest
}

// ─── Rendering ──────────────────────────────────────────────────────────────────────────────────

fn field<'a>(block: &'a proto::AgentPromptBlockBlock, key: &str) -> Option<&'a Ipld> {
    block.extra.get(key).map(|value| &value.0)
}

fn attribute<'a>(block: &'a proto::AgentPromptBlockBlock, key: &str) -> Option<&'a Ipld> {
    match field(block, "attributes") {
        Some(Ipld::Map(map)) => map.get(key),
        _ => None,
    }
}

fn as_str(value: Option<&Ipld>) -> &str {
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

fn render_node(node: &proto::AgentPromptBlock, depth: usize) -> String {
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
fn apply_annotations(text: &str, annotations: Option<&Ipld>) -> String {
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

/// A table as GFM with identity comments: the table id on its own line, column ids in header
/// cells, row ids inside each row's last cell. Cells find their column by `columnId`.
fn render_table(node: &proto::AgentPromptBlock, depth: usize) -> String {
    let children = node.children.as_deref().unwrap_or_default();
    let columns: Vec<&str> = children.iter().filter(|c| c.block.type_ == "TableColumn").map(|c| &*c.block.id).collect();
    if columns.is_empty() {
        return String::new();
    }
    let rows: Vec<&proto::AgentPromptBlock> = children.iter().filter(|c| c.block.type_ == "TableRow").collect();
    let cells = |row: Option<&proto::AgentPromptBlock>| -> Vec<String> {
        // The first cell naming a column wins; cells naming no column are dropped.
        let mut by_column = BTreeMap::new();
        for cell in row.and_then(|r| r.children.as_deref()).unwrap_or_default() {
            let column = as_str(attribute(&cell.block, "columnId"));
            if !column.is_empty() {
                by_column.entry(column).or_insert(&cell.block);
            }
        }
        let render = |c: &&proto::AgentPromptBlockBlock| {
            let text = apply_annotations(as_str(field(c, "text")), field(c, "annotations"));
            text.replace('|', "\\|").replace('\n', "<br>")
        };
        columns.iter().map(|column| by_column.get(column).map(render).unwrap_or_default()).collect()
    };
    let header = rows.first().copied().filter(|r| attribute(&r.block, "isHeader") == Some(&Ipld::Bool(true)));
    let ind = indent(depth);
    let mut header_cells: Vec<String> = columns
        .iter()
        .zip(cells(header))
        .map(|(column, text)| format!("{text}{}<!-- col:{column} -->", if text.is_empty() { "" } else { " " }))
        .collect();
    if let (Some(header), Some(last)) = (header, header_cells.last_mut())
        && !header.block.id.is_empty()
    {
        *last = format!("{last} {}", id_comment(&header.block.id));
    }
    let mut lines =
        vec![format!("{ind}{}", id_comment(&node.block.id)), format!("{ind}| {} |", header_cells.join(" | "))];
    lines.push(format!("{ind}|{}|", vec![" --- "; columns.len()].join("|")));
    for row in rows.iter().skip(usize::from(header.is_some())) {
        let mut texts = cells(Some(row));
        if let Some(last) = texts.last_mut() {
            *last = format!("{last}{}{}", if last.is_empty() { "" } else { " " }, id_comment(&row.block.id));
        }
        lines.push(format!("{ind}| {} |", texts.join(" | ")));
    }
    lines.join("\n")
}

/// Removes `<!-- id:... -->` comments and the spaces or tabs before them (upstream's
/// `/[ \t]*<!-- id:[^>]+ -->/g`), in one pass.
fn strip_id_comments(s: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn normalize(input: &str) -> String {
        blocks_to_markdown(&markdown_to_blocks(input))
    }

    fn text_prompt(s: &str) -> proto::AgentDefinitionSystemPrompt {
        proto::AgentDefinitionSystemPrompt::String(s.to_string())
    }

    fn error(input: &proto::AgentDefinitionSystemPrompt, label: &str) -> String {
        normalize_prompt(input, label).expect_err("prompt should be rejected").message().to_string()
    }

    fn paragraph(
        id: &str,
        text: &str,
        children_type: Option<&str>,
        children: Vec<proto::AgentPromptBlock>,
    ) -> proto::AgentPromptBlock {
        let mut attributes = BTreeMap::new();
        if let Some(children_type) = children_type {
            attributes.insert("childrenType".to_string(), Ipld::String(children_type.to_string()));
        }
        let extra = BTreeMap::from([
            ("text".to_string(), Value(Ipld::String(text.to_string()))),
            ("attributes".to_string(), Value(Ipld::Map(attributes))),
        ]);
        let block = proto::AgentPromptBlockBlock { id: id.to_string(), type_: "Paragraph".to_string(), extra };
        proto::AgentPromptBlock { block, children: (!children.is_empty()).then_some(children) }
    }

    fn text_of(node: &proto::AgentPromptBlock) -> &str {
        as_str(field(&node.block, "text"))
    }

    fn attr_of<'a>(node: &'a proto::AgentPromptBlock, key: &str) -> &'a str {
        as_str(attribute(&node.block, key))
    }

    fn children_of(node: &proto::AgentPromptBlock) -> &[proto::AgentPromptBlock] {
        node.children.as_deref().unwrap_or_default()
    }

    /// Normalising twice changes nothing, and `expected` is the normal form of `input`.
    fn check_round_trip(input: &str, expected: &str) {
        let once = normalize(input);
        assert_eq!(once, expected, "normal form of {input:?}");
        assert_eq!(normalize(&once), once, "normalising {once:?} again");
    }

    #[test]
    fn empty_prompts_are_required() {
        for input in ["", "  \n\t ", "<!-- id:abc -->"] {
            assert_eq!(error(&text_prompt(input), "System prompt"), "System prompt is required");
        }
        assert_eq!(
            error(&proto::AgentDefinitionSystemPrompt::Array(vec![]), "Trigger prompt"),
            "Trigger prompt is required"
        );
        let blank = proto::AgentDefinitionSystemPrompt::Array(vec![paragraph("p1", "", None, vec![])]);
        assert_eq!(error(&blank, "System prompt"), "System prompt is required");
    }

    #[test]
    fn size_limit_is_64_kib() {
        let at_limit = "a".repeat(MAX_PROMPT_BYTES);
        assert_eq!(normalize_prompt(&text_prompt(&at_limit), "System prompt").map(|b| b.len()), Ok(1));
        // Surrounding white space is trimmed before the input is measured.
        assert!(normalize_prompt(&text_prompt(&format!("\n{at_limit}\n")), "System prompt").is_ok());
        let over = format!("{at_limit}b");
        assert_eq!(error(&text_prompt(&over), "System prompt"), "System prompt is too large");
        // The rendered markdown is measured too: content under a heading gains indentation.
        let indented = format!("# H\n\n{}", "a".repeat(MAX_PROMPT_BYTES - 5));
        assert_eq!(indented.len(), MAX_PROMPT_BYTES);
        assert_eq!(error(&text_prompt(&indented), "Trigger prompt"), "Trigger prompt is too large");
        let blocks = proto::AgentDefinitionSystemPrompt::Array(vec![paragraph("p1", &over, None, vec![])]);
        assert_eq!(error(&blocks, "System prompt"), "System prompt is too large");
    }

    #[test]
    fn invalid_blocks_are_rejected() {
        let empty_id = proto::AgentDefinitionSystemPrompt::Array(vec![paragraph("", "x", None, vec![])]);
        assert_eq!(error(&empty_id, "System prompt"), "System prompt blocks are invalid");
        let nested = paragraph("p1", "x", Some("Unordered"), vec![paragraph("p2", "y", None, vec![])]);
        let mut bad_child = nested.clone();
        if let Some(children) = bad_child.children.as_mut() {
            children[0].block.type_ = String::new();
        }
        let bad_child = proto::AgentDefinitionSystemPrompt::Array(vec![bad_child]);
        assert_eq!(error(&bad_child, "Trigger prompt"), "Trigger prompt blocks are invalid");
        // Valid blocks come back unchanged.
        let valid = proto::AgentDefinitionSystemPrompt::Array(vec![nested.clone()]);
        assert_eq!(normalize_prompt(&valid, "System prompt"), Ok(vec![nested]));
    }

    #[test]
    fn undecoded_values_get_upstream_messages() {
        let map = |pairs: Vec<(&str, Ipld)>| Ipld::Map(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
        let block = || map(vec![("id", Ipld::String("a".into())), ("type", Ipld::String("Paragraph".into()))]);
        let check = |value: Ipld, expected: &str| {
            let message = prompt_from_ipld(&value, "System prompt").expect_err("should fail").message().to_string();
            assert_eq!(message, expected);
        };
        check(Ipld::Integer(1), "System prompt must be blocks");
        check(Ipld::Null, "System prompt must be blocks");
        check(Ipld::List(vec![Ipld::String("x".into())]), "System prompt blocks are invalid");
        check(Ipld::List(vec![map(vec![("block", Ipld::List(vec![]))])]), "System prompt blocks are invalid");
        let no_type = map(vec![("block", map(vec![("id", Ipld::String("a".into()))]))]);
        check(Ipld::List(vec![no_type]), "System prompt blocks are invalid");
        let bad_children = map(vec![("block", block()), ("children", Ipld::String("x".into()))]);
        check(Ipld::List(vec![bad_children]), "System prompt block children are invalid");

        let null_children = map(vec![("block", block()), ("children", Ipld::Null), ("extra", Ipld::Bool(true))]);
        let parsed = prompt_from_ipld(&Ipld::List(vec![null_children]), "System prompt");
        let expected = proto::AgentPromptBlock {
            block: proto::AgentPromptBlockBlock { id: "a".into(), type_: "Paragraph".into(), extra: BTreeMap::new() },
            children: None,
        };
        assert_eq!(parsed, Ok(proto::AgentDefinitionSystemPrompt::Array(vec![expected])));
        let text = prompt_from_ipld(&Ipld::String("hi".into()), "System prompt");
        assert_eq!(text, Ok(text_prompt("hi")));
    }

    #[test]
    fn headings_nest_the_content_after_them() {
        let blocks = markdown_to_blocks("Intro\n\n# Title\n\nBody\n\n### Deep\n\nMore\n\n## Side\n\n# Next");
        assert_eq!(blocks.len(), 3);
        assert_eq!((blocks[0].block.type_.as_str(), text_of(&blocks[0])), ("Paragraph", "Intro"));
        let title = &blocks[1];
        assert_eq!(
            (title.block.type_.as_str(), text_of(title), attr_of(title, "childrenType")),
            ("Heading", "Title", "Group")
        );
        let under_title: Vec<&str> = children_of(title).iter().map(text_of).collect();
        assert_eq!(under_title, ["Body", "Deep", "Side"]);
        assert_eq!(text_of(&children_of(&children_of(title)[1])[0]), "More");
        // Levels are implied by depth: `###` under `#` renders as `##`.
        let expected = "Intro\n# Title\n\n  Body\n\n## Deep\n\n    More\n\n## Side\n# Next";
        check_round_trip("Intro\n\n# Title\n\nBody\n\n### Deep\n\nMore\n\n## Side\n\n# Next", expected);
    }

    #[test]
    fn paragraphs_join_lines_and_top_level_blocks_join_with_one_newline() {
        let blocks = markdown_to_blocks("one\n  two\n\nthree");
        let texts: Vec<&str> = blocks.iter().map(text_of).collect();
        assert_eq!(texts, ["one\ntwo", "three"]);
        check_round_trip("one\n  two\n\nthree", "one\ntwo\nthree");
        check_round_trip("#tag\nmore", "#tag\nmore");
        assert_eq!(markdown_to_blocks("#tag\nmore").len(), 2);
    }

    #[test]
    fn code_fences_keep_language_and_text() {
        let blocks = markdown_to_blocks(
            "Run:\n\n```rust <!-- id:code1 -->\nfn main() {\n    println!(\"*hi*\");\n}\n```\n\n```\nplain\n```",
        );
        let code = &blocks[1];
        assert_eq!(
            (code.block.id.as_str(), code.block.type_.as_str(), attr_of(code, "language")),
            ("code1", "Code", "rust")
        );
        assert_eq!(text_of(code), "fn main() {\n    println!(\"*hi*\");\n}");
        assert_eq!(attribute(&blocks[2].block, "language"), None);
        check_round_trip(
            "Run:\n\n```rust\nfn main() {\n    println!(\"*hi*\");\n}\n```\n\n```\nplain\n```",
            "Run:\n```rust\nfn main() {\n    println!(\"*hi*\");\n}\n```\n```\nplain\n```",
        );
        check_round_trip("$$\nx^2\n$$", "$$\nx^2\n$$");
    }

    #[test]
    fn lists_become_children_of_the_text_before_them() {
        let blocks = markdown_to_blocks("Steps:\n- one\n- two\n\nAfter:\n1. first\n2. second");
        assert_eq!(blocks.len(), 2);
        assert_eq!(attr_of(&blocks[0], "childrenType"), "Unordered");
        assert_eq!(children_of(&blocks[0]).iter().map(text_of).collect::<Vec<_>>(), ["one", "two"]);
        assert_eq!(attr_of(&blocks[1], "childrenType"), "Ordered");
        check_round_trip(
            "Steps:\n- one\n- two\n\nAfter:\n1. first\n2. second",
            "Steps:\n  - one\n  - two\nAfter:\n  1. first\n  1. second",
        );
        // Without text before it, a list gets an empty container paragraph. Upstream trims the
        // whole rendering, so the first item loses the indentation the others keep.
        let blocks = markdown_to_blocks("- a\n* b");
        assert_eq!((text_of(&blocks[0]), attr_of(&blocks[0], "childrenType")), ("", "Unordered"));
        check_round_trip("- a\n* b", "- a\n  - b");
        // A list first under a heading hangs off the heading until other content follows.
        let blocks = markdown_to_blocks("# H\n- a\n- b");
        assert_eq!(attr_of(&blocks[0], "childrenType"), "Unordered");
        let blocks = markdown_to_blocks("# H\n- a\n- b\n\nnext");
        assert_eq!(attr_of(&blocks[0], "childrenType"), "Group");
        let container = &children_of(&blocks[0])[0];
        assert_eq!(
            (text_of(container), attr_of(container, "childrenType"), children_of(container).len()),
            ("", "Unordered", 2)
        );
        check_round_trip("# H\n- a\n- b\n\nnext", "# H\n\n\n    - a\n    - b\n\n  next");
    }

    #[test]
    fn nested_lists_render_by_depth_and_parse_flat() {
        let inner = paragraph(
            "a",
            "a",
            Some("Ordered"),
            vec![paragraph("a1", "a1", None, vec![]), paragraph("a2", "a2", None, vec![])],
        );
        let plan = paragraph(
            "plan",
            "Plan",
            Some("Unordered"),
            vec![inner, paragraph("b", "b", Some("Blockquote"), vec![paragraph("q", "quoted", None, vec![])])],
        );
        let markdown = blocks_to_markdown(&[plan]);
        assert_eq!(markdown, "Plan\n  - a\n    1. a1\n    1. a2\n  - b\n    > quoted");
        // Like upstream, the parser reads indentation as nothing: nested items come back as
        // sibling lists (and a `>` line as paragraph text).
        let reparsed = markdown_to_blocks(&markdown);
        assert_eq!(children_of(&reparsed[0]).iter().map(text_of).collect::<Vec<_>>(), ["a"]);
        assert_eq!(reparsed.len(), 4);
        check_round_trip(&markdown, "Plan\n  - a\n\n  1. a1\n  1. a2\n\n  - b\n> quoted");
    }

    #[test]
    fn inline_formatting_becomes_annotations() {
        let blocks = markdown_to_blocks(
            "😀 **bold *it* x** and `c*o*de`, [site](https://x.y) <https://a.b> <hm://z6Mk/doc> \\*",
        );
        let block = &blocks[0].block;
        assert_eq!(as_str(field(block, "text")), "😀 bold it x and c*o*de, site https://a.b \u{fffc} *");
        let Some(Ipld::List(annotations)) = field(block, "annotations") else { panic!("annotations missing") };
        let spans: Vec<(String, i128, i128)> = annotations
            .iter()
            .map(|a| match a {
                Ipld::Map(m) => match (m.get("type"), m.get("starts"), m.get("ends")) {
                    (Some(Ipld::String(t)), Some(Ipld::List(s)), Some(Ipld::List(e))) => match (&s[0], &e[0]) {
                        (Ipld::Integer(s), Ipld::Integer(e)) => (t.clone(), *s, *e),
                        _ => panic!("bad offsets"),
                    },
                    _ => panic!("bad annotation"),
                },
                _ => panic!("bad annotation"),
            })
            .collect();
        // Offsets count UTF-16 units: the emoji is two.
        let expected = [
            ("Italic", 8, 10),
            ("Bold", 3, 12),
            ("Code", 17, 23),
            ("Link", 25, 29),
            ("Link", 30, 41),
            ("Embed", 42, 43),
        ];
        assert_eq!(spans, expected.map(|(t, s, e)| (t.to_string(), s, e)));
        assert_eq!(
            blocks_to_markdown(&blocks),
            "😀 **bold _it_ x** and `c*o*de`, [site](https://x.y) [https://a.b](https://a.b) <hm://z6Mk/doc> *"
        );
        // Annotations that open at one offset nest: the outer one opens first.
        check_round_trip("**[x](u)**", "**[x](u)**");
        check_round_trip("see ![alt](pic.png) inline", "see alt inline");
    }

    #[test]
    fn block_ids_are_kept_or_derived() {
        let blocks = markdown_to_blocks("<!-- id:list1 -->\n- a <!-- id:item1 -->\n\nHello <!-- id:p-1 -->\nworld");
        assert_eq!(blocks[0].block.id, "list1");
        assert_eq!(children_of(&blocks[0])[0].block.id, "item1");
        assert_eq!((blocks[1].block.id.as_str(), text_of(&blocks[1])), ("p-1", "Hello\nworld"));
        let input = "# A\n\nb\n\nc\n- d\n- e";
        assert_eq!(markdown_to_blocks(input), markdown_to_blocks(input));
        let mut ids = Vec::new();
        fn collect(nodes: &[proto::AgentPromptBlock], ids: &mut Vec<String>) {
            for node in nodes {
                ids.push(node.block.id.clone());
                collect(node.children.as_deref().unwrap_or_default(), ids);
            }
        }
        collect(&markdown_to_blocks(input), &mut ids);
        assert_eq!(ids.len(), 5);
        assert!(ids.iter().all(|id| id.len() == 8 && id.chars().all(is_id_char)));
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 5);
        assert_ne!(markdown_to_blocks("x")[0].block.id, markdown_to_blocks("y")[0].block.id);
    }

    #[test]
    fn front_matter_and_images() {
        check_round_trip("---\nname: Agent\n---\n\nBe brief.", "Be brief.");
        let blocks = markdown_to_blocks("![diagram](img/a.png) <!-- id:img1 -->\n![](ipfs://bafy)");
        assert_eq!(
            (blocks[0].block.id.as_str(), as_str(field(&blocks[0].block, "link"))),
            ("img1", "file://img/a.png")
        );
        assert_eq!(blocks_to_markdown(&blocks), "![diagram](file://img/a.png)\n![image](https://ipfs.io/ipfs/bafy)");
    }

    #[test]
    fn tables_keep_column_and_row_identity() {
        let input = "| Name | Age |\n| --- | :-: |\n| Ann \\| Bo | 3<br>4 |";
        let blocks = markdown_to_blocks(input);
        let table = &blocks[0];
        assert_eq!(table.block.type_, "Table");
        let kinds: Vec<&str> = children_of(table).iter().map(|c| c.block.type_.as_str()).collect();
        assert_eq!(kinds, ["TableColumn", "TableColumn", "TableRow", "TableRow"]);
        assert_eq!(attribute(&children_of(table)[2].block, "isHeader"), Some(&Ipld::Bool(true)));
        let body_cells: Vec<&str> = children_of(&children_of(table)[3]).iter().map(text_of).collect();
        assert_eq!(body_cells, ["Ann | Bo", "3\n4"]);
        let (c1, c2) = (&children_of(table)[0].block.id, &children_of(table)[1].block.id);
        let expected =
            format!("| Name <!-- col:{c1} --> | Age <!-- col:{c2} --> |\n| --- | --- |\n| Ann \\| Bo | 3<br>4 |");
        check_round_trip(input, &expected);
    }

    #[test]
    fn hostile_inputs_stay_cheap() {
        // Links nested thousands deep: past the depth cap the rest is plain text, not a stack overflow.
        let deep = format!("{}x{}", "[".repeat(5000), "](u)".repeat(5000));
        let blocks = normalize_prompt(&text_prompt(&deep), "System prompt").map(|b| b.len());
        assert_eq!(blocks, Ok(1));
        // A short table whose dense grid could never render within the limit.
        let dense = format!("{}\n{}", "|a".repeat(200), "|\n".repeat(200));
        assert_eq!(error(&text_prompt(&dense), "Trigger prompt"), "Trigger prompt is too large");
        let kinds: Vec<String> =
            children_of(&markdown_to_blocks(&dense)[0]).iter().map(|c| c.block.type_.clone()).collect();
        assert_eq!(kinds, vec!["TableColumn".to_string(); 200]);
        let child = |kind: &str, i: usize| proto::AgentPromptBlock {
            block: proto::AgentPromptBlockBlock {
                id: format!("{kind}{i}"),
                type_: kind.to_string(),
                extra: BTreeMap::new(),
            },
            children: None,
        };
        let mut table = child("Table", 0);
        table.children =
            Some((0..150).map(|i| child("TableColumn", i)).chain((0..150).map(|i| child("TableRow", i))).collect());
        let blocks = proto::AgentDefinitionSystemPrompt::Array(vec![paragraph("p", "x", None, vec![table])]);
        assert_eq!(error(&blocks, "System prompt"), "System prompt is too large");
    }

    #[test]
    fn other_block_types_render_as_placeholders() {
        let block = |type_: &str, pairs: Vec<(&str, Ipld)>| proto::AgentPromptBlock {
            block: proto::AgentPromptBlockBlock {
                id: format!("{type_}-id"),
                type_: type_.to_string(),
                extra: pairs.into_iter().map(|(k, v)| (k.to_string(), Value(v))).collect(),
            },
            children: None,
        };
        let link = |s: &str| ("link", Ipld::String(s.to_string()));
        let blocks = [
            block("Embed", vec![link("hm://z6Mk/doc")]),
            block("Button", vec![link("https://b"), ("text", Ipld::String("Go".into()))]),
            block("File", vec![link("ipfs://cid")]),
            block("Query", vec![]),
            block("Custom", vec![("text", Ipld::String("custom text".into()))]),
            block("Custom", vec![]),
        ];
        let expected = "> [Embed: hm://z6Mk/doc](hm://z6Mk/doc)\n[Go](https://b)\n[file](https://ipfs.io/ipfs/cid)\n<!-- Query block -->\ncustom text";
        assert_eq!(blocks_to_markdown(&blocks), expected);
    }
}
