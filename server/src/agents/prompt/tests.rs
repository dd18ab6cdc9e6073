//! Tests of prompt normalisation, parsing and rendering.

use std::collections::BTreeMap;

use super::block::{as_str, attribute, field};
use super::text::is_id_char;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::Value;

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
    proto::AgentPromptBlock { extra: Default::default(), block, children: (!children.is_empty()).then_some(children) }
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
    let blocks =
        markdown_to_blocks("😀 **bold *it* x** and `c*o*de`, [site](https://x.y) <https://a.b> <hm://z6Mk/doc> \\*");
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
    let expected =
        [("Italic", 8, 10), ("Bold", 3, 12), ("Code", 17, 23), ("Link", 25, 29), ("Link", 30, 41), ("Embed", 42, 43)];
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
    assert_eq!((blocks[0].block.id.as_str(), as_str(field(&blocks[0].block, "link"))), ("img1", "file://img/a.png"));
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
        extra: Default::default(),
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
        extra: Default::default(),
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
