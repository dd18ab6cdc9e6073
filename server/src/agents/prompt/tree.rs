//! The block tree: tokens nested under their headings and lists in an arena of nodes, then
//! converted to Seed blocks.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::Value;
use seed_agents_protocol::generated as proto;

use super::MAX_TABLE_CELLS;
use super::ids::BlockIds;
use super::inline::{Inline, InlineParser};
use super::table::{TableRow, replace_br, split_table_row};
use super::token::{Token, strip_front_matter, tokenize};

/// Parses markdown into Seed block nodes (see the module docs for the dialect), and says whether
/// every table got all its cells.
///
/// Tables get one cell per row and column. Once the tables of a document hold more cells than a
/// prompt can render (at three bytes a cell), further tables keep their columns but lose their rows;
/// [`normalize_prompt`](super::normalize_prompt) rejects such a prompt as too large, as upstream
/// does after rendering it.
pub(super) fn parse_markdown(markdown: &str) -> (Vec<proto::AgentPromptBlock>, bool) {
    let mut tree = Tree::new(markdown);
    for token in tokenize(strip_front_matter(markdown)) {
        tree.add_token(token);
    }
    (tree.roots.iter().map(|&idx| tree.to_proto(idx)).collect(), !tree.oversized)
}

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
    /// Table cells still allowed, and whether a table went over (see [`parse_markdown`]).
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
            extra: Default::default(),
            block: proto::AgentPromptBlockBlock { id: node.id.clone(), type_: node.kind.to_string(), extra },
            children: (!children.is_empty()).then_some(children),
        }
    }
}
