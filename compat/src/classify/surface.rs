//! The surface listing read back from JSON, and which definitions clients write and read.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::Value;

use super::{Direction, notation};

/// Which list of the surface a definition sits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Action,
    Response,
    Type,
}

impl Section {
    pub fn label(self) -> &'static str {
        match self {
            Section::Action => "action",
            Section::Response => "response",
            Section::Type => "named type",
        }
    }
}

/// One field of an object definition.
#[derive(Debug, Clone, Copy)]
pub struct Field<'a> {
    pub ty: &'a str,
    pub required: bool,
    pub since: u64,
}

/// What a definition is.
#[derive(Debug)]
pub enum Shape<'a> {
    /// An object: its fields and, when it also takes arbitrary keys, their type.
    Fields { fields: BTreeMap<&'a str, Field<'a>>, extra: Option<&'a str> },
    /// A discriminated union of named members.
    Union { tag: &'a str, open: bool, members: Vec<&'a str> },
    /// Another type under a name (string-literal unions, `bytes`, ...).
    Alias(&'a str),
}

impl Shape<'_> {
    pub fn label(&self) -> &'static str {
        match self {
            Shape::Fields { .. } => "object",
            Shape::Union { .. } => "discriminated union",
            Shape::Alias(_) => "alias",
        }
    }
}

/// One action, response or named type.
#[derive(Debug)]
pub struct Def<'a> {
    pub section: Section,
    pub since: u64,
    pub shape: Shape<'a>,
    /// Actions: the response they are answered with (`None` for none, as for `Subscribe`).
    pub response: Option<&'a str>,
    /// Actions: `http` or `websocket`.
    pub transport: Option<&'a str>,
    /// Actions: `read` or `write` (`None` in listings written before actions stated one).
    pub effect: Option<&'a str>,
}

/// A parsed `snapshots/surface.json`. Missing parts read as empty, so a partial fragment works.
#[derive(Debug)]
pub struct Surface<'a> {
    pub format: Option<u64>,
    pub protocol: Option<u64>,
    pub min_client_protocol: Option<u64>,
    pub defs: BTreeMap<&'a str, Def<'a>>,
}

impl<'a> Surface<'a> {
    pub fn parse(json: &'a Value) -> Self {
        let mut defs = BTreeMap::new();
        for (key, section) in [("types", Section::Type), ("responses", Section::Response), ("actions", Section::Action)]
        {
            let Some(entries) = json.get(key).and_then(Value::as_object) else { continue };
            for (name, entry) in entries {
                defs.insert(name.as_str(), parse_def(section, entry));
            }
        }
        Surface {
            format: json.get("format").and_then(Value::as_u64),
            protocol: json.get("protocol").and_then(Value::as_u64),
            min_client_protocol: json.get("minClientProtocol").and_then(Value::as_u64),
            defs,
        }
    }

    /// What the alias `name` stands for, when `name` is an alias.
    pub fn alias_of(&self, name: &str) -> Option<&'a str> {
        match self.defs.get(name).map(|d| &d.shape) {
            Some(Shape::Alias(target)) => Some(target),
            _ => None,
        }
    }

    /// Definitions `def` mentions: its field types, extra-field type, alias and union members.
    fn refs(&self, def: &Def<'a>) -> BTreeSet<&'a str> {
        let mut notations: Vec<&'a str> = Vec::new();
        let mut out = BTreeSet::new();
        match &def.shape {
            Shape::Fields { fields, extra } => {
                notations.extend(fields.values().map(|f| f.ty));
                notations.extend(extra.iter().copied());
            }
            Shape::Union { members, .. } => {
                out.extend(members.iter().copied().filter(|m| self.defs.contains_key(m)));
            }
            Shape::Alias(alias) => notations.push(alias),
        }
        for notation in notations {
            out.extend(notation::identifiers(notation).into_iter().filter(|n| self.defs.contains_key(n)));
        }
        out
    }

    /// How clients use every definition (see the module documentation of `classify`).
    pub fn directions(&self) -> BTreeMap<&'a str, Direction> {
        let edges: BTreeMap<&'a str, BTreeSet<&'a str>> =
            self.defs.iter().map(|(name, def)| (*name, self.refs(def))).collect();
        let referenced: BTreeSet<&'a str> =
            edges.iter().flat_map(|(name, refs)| refs.iter().filter(move |r| *r != name)).copied().collect();
        let mut write_roots = Vec::new();
        let mut read_roots = Vec::new();
        for (name, def) in &self.defs {
            match def.section {
                Section::Action => write_roots.push(*name),
                Section::Response => read_roots.push(*name),
                Section::Type if !referenced.contains(name) => {
                    let reach = closure(&edges, vec![*name]);
                    let has = |section| reach.iter().any(|n| self.defs.get(n).is_some_and(|d| d.section == section));
                    let (action, response) = (has(Section::Action), has(Section::Response));
                    if action {
                        write_roots.push(*name);
                    }
                    if response || !action {
                        read_roots.push(*name);
                    }
                }
                Section::Type => {}
            }
        }
        let written = closure(&edges, write_roots);
        let read = closure(&edges, read_roots);
        self.defs
            .keys()
            .map(|name| {
                let writes = written.contains(name);
                // A client sends nothing outside an envelope: what it does not write, it can only read.
                let reads = read.contains(name) || !writes;
                (*name, Direction::from_flags(reads, writes).unwrap_or(Direction::Read))
            })
            .collect()
    }
}

fn closure<'a>(edges: &BTreeMap<&'a str, BTreeSet<&'a str>>, seeds: Vec<&'a str>) -> BTreeSet<&'a str> {
    let mut seen: BTreeSet<&'a str> = seeds.iter().copied().collect();
    let mut queue: VecDeque<&'a str> = seeds.into();
    while let Some(name) = queue.pop_front() {
        for next in edges.get(name).into_iter().flatten() {
            if seen.insert(next) {
                queue.push_back(next);
            }
        }
    }
    seen
}

fn parse_def<'a>(section: Section, entry: &'a Value) -> Def<'a> {
    let since = entry.get("since").and_then(Value::as_u64).unwrap_or(1);
    let shape = if let Some(union) = entry.get("union") {
        Shape::Union {
            tag: union.get("tag").and_then(Value::as_str).unwrap_or(""),
            open: union.get("open").and_then(Value::as_bool).unwrap_or(false),
            members: union
                .get("members")
                .and_then(Value::as_array)
                .map(|m| m.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default(),
        }
    } else if let Some(alias) = entry.get("alias").and_then(Value::as_str) {
        Shape::Alias(alias)
    } else {
        let fields = entry
            .get("fields")
            .and_then(Value::as_object)
            .map(|fields| {
                fields
                    .iter()
                    .map(|(name, field)| {
                        let field = Field {
                            ty: field.get("type").and_then(Value::as_str).unwrap_or("value"),
                            required: field.get("required").and_then(Value::as_bool).unwrap_or(false),
                            since: field.get("since").and_then(Value::as_u64).unwrap_or(since),
                        };
                        (name.as_str(), field)
                    })
                    .collect()
            })
            .unwrap_or_default();
        Shape::Fields { fields, extra: entry.get("extraFields").and_then(Value::as_str) }
    };
    Def {
        section,
        since,
        shape,
        response: entry.get("response").and_then(Value::as_str).filter(|r| !r.is_empty()),
        transport: entry.get("transport").and_then(Value::as_str),
        effect: entry.get("effect").and_then(Value::as_str),
    }
}
