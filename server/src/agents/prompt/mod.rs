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
//!
//! The code is split by noun: `token` cuts markdown into block tokens, `inline` parses inline
//! formatting into annotations, `tree` nests the tokens into blocks with ids from `ids`, `render`
//! turns blocks back into markdown (reading them through `block`), `table` splits GFM table rows
//! into cells and renders `Table` blocks, and `text` holds the white-space and id-comment helpers
//! they share. This file keeps the public API and the validation.

mod block;
mod ids;
mod inline;
mod render;
mod table;
mod text;
mod token;
mod tree;

use seed_agents_protocol::generated as proto;

use crate::error::{ApiError, ApiResult};
use render::{render_node, strip_id_comments};
use text::js_trim;
use tree::parse_markdown;

/// The largest prompt, in UTF-8 bytes: of the trimmed markdown input and of the rendered blocks.
pub(crate) const MAX_PROMPT_BYTES: usize = 64 * 1024;

/// Every table cell renders as at least three bytes (`| ` ... ` |`), so a prompt whose tables
/// hold more cells than this is too large whatever the cells say.
const MAX_TABLE_CELLS: usize = MAX_PROMPT_BYTES / 3;

/// Normalises a prompt given as markdown text or blocks into blocks.
///
/// `label` names the field in error messages (`System prompt`, `Trigger prompt`): `<label> is
/// required` when the rendered markdown is empty, `<label> is too large` over [`MAX_PROMPT_BYTES`]
/// and `<label> blocks are invalid` when a block has an empty `id` or `type`. Blocks are returned
/// as given (unknown fields kept); text is parsed with [`parse_markdown`] after trimming.
pub(crate) fn normalize_prompt(
    input: &proto::AgentDefinitionSystemPrompt,
    label: &str,
) -> ApiResult<Vec<proto::AgentPromptBlock>> {
    let blocks = match input {
        proto::AgentDefinitionSystemPrompt::String(text) => {
            let text = js_trim(text);
            if text.is_empty() {
                return Err(ApiError::invalid(format!("{label} is required")));
            }
            if text.len() > MAX_PROMPT_BYTES {
                return Err(ApiError::invalid(format!("{label} is too large")));
            }
            let (blocks, fits) = parse_markdown(text);
            if !fits {
                return Err(ApiError::invalid(format!("{label} is too large")));
            }
            blocks
        }
        proto::AgentDefinitionSystemPrompt::Array(nodes) => {
            nodes.iter().try_for_each(|node| check_node(node, label))?;
            // Rendering dense tables costs rows x columns: refuse the hopeless ones first.
            if table_cells(nodes) > MAX_TABLE_CELLS {
                return Err(ApiError::invalid(format!("{label} is too large")));
            }
            nodes.clone()
        }
    };
    let markdown = blocks_to_markdown(&blocks);
    if markdown.is_empty() {
        return Err(ApiError::invalid(format!("{label} is required")));
    }
    if markdown.len() > MAX_PROMPT_BYTES {
        return Err(ApiError::invalid(format!("{label} is too large")));
    }
    Ok(blocks)
}

/// The blocks of `markdown` ([`parse_markdown`] without its table report).
#[cfg(test)]
pub(crate) fn markdown_to_blocks(markdown: &str) -> Vec<proto::AgentPromptBlock> {
    parse_markdown(markdown).0
}

/// Renders blocks as markdown, without block id comments and trimmed.
pub(crate) fn blocks_to_markdown(blocks: &[proto::AgentPromptBlock]) -> String {
    let parts: Vec<String> = blocks.iter().map(|node| render_node(node, 0)).filter(|md| !md.is_empty()).collect();
    js_trim(&strip_id_comments(&parts.join("\n"))).to_string()
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
        return Err(ApiError::invalid(format!("{label} blocks are invalid")));
    }
    node.children.iter().flatten().try_for_each(|child| check_node(child, label))
}

#[cfg(test)]
mod tests;
