//! GFM tables: lines split into rows and cells for the tree builder, and `Table` blocks rendered
//! back with the table, column and row id comments that let them round-trip.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated as proto;

use super::block::{apply_annotations, as_str, attribute, field};
use super::text::{find_comment, id_comment, indent, is_js_space, js_trim, strip_block_id};

#[derive(Debug)]
pub(super) struct TableCell {
    pub(super) text: String,
    pub(super) column: Option<String>,
}

#[derive(Debug)]
pub(super) struct TableRow {
    pub(super) cells: Vec<TableCell>,
    pub(super) id: Option<String>,
}

impl TableRow {
    pub(super) fn is_separator(&self) -> bool {
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
pub(super) fn split_table_row(line: &str) -> TableRow {
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
pub(super) fn replace_br(s: &str) -> String {
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

/// A table as GFM with identity comments: the table id on its own line, column ids in header
/// cells, row ids inside each row's last cell. Cells find their column by `columnId`.
pub(super) fn render_table(node: &proto::AgentPromptBlock, depth: usize) -> String {
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
