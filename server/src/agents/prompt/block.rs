//! Reading a rendered block: its fields and attributes as IPLD, and its inline annotations as
//! markdown markers (what `render` and `table` share).

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated as proto;

pub(super) fn field<'a>(block: &'a proto::AgentPromptBlockBlock, key: &str) -> Option<&'a Ipld> {
    block.extra.get(key).map(|value| &value.0)
}

pub(super) fn attribute<'a>(block: &'a proto::AgentPromptBlockBlock, key: &str) -> Option<&'a Ipld> {
    match field(block, "attributes") {
        Some(Ipld::Map(map)) => map.get(key),
        _ => None,
    }
}

pub(super) fn as_str(value: Option<&Ipld>) -> &str {
    match value {
        Some(Ipld::String(s)) => s,
        _ => "",
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
pub(super) fn apply_annotations(text: &str, annotations: Option<&Ipld>) -> String {
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
