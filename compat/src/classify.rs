//! The breaking-change classifier: compares the surface listing of a base revision
//! (`snapshots/surface.json`, written by `codegen/src/surface.rs`) with the current one, applies
//! the table of `schema/PROTOCOL.md` ("What counts as breaking") to every difference, separately
//! for what clients write and what they read, and ([`check`]) fails when a breaking change lands
//! without a protocol bump and a changelog entry. `surface-check` (`src/bin/surface-check.rs`)
//! runs it in CI over every commit that changed the surface (`--history`).
//!
//! # Who writes and who reads a definition
//!
//! "Client reads are responses; client writes are actions and the envelope." The classifier
//! works this out from the surface data alone, by walking references: a definition refers to every
//! definition named in its field types (the short notation, string literals skipped), its
//! extra-field type, its alias and its union members.
//!
//! - **Written** (Write): everything reachable from an action, or from a named type that nothing
//!   references and that reaches an action (a wrapper of what clients send: the `Envelope`, the
//!   `AgentAction` union).
//! - **Read** (Read): everything reachable from a response, or from a named type that nothing
//!   references and that does not reach an action (the `AgentResponse` union, the WebSocket frame
//!   union `AgentWSEvent`, a change-frame value such as `AccountChangeHint`). A client sends
//!   nothing outside an envelope, so a definition it does not write can only be read: anything
//!   else that is not written also counts as read.
//! - Both, when both hold (for example `AgentDefinition`, sent in `CreateAgent` and read back in
//!   `AgentInfo`). A definition's direction is taken from the base and the current surface
//!   together (conservative: a type counts as written if either side has clients write it).
//!
//! An action's `response` is not a reference: the response is read, the action written.
//!
//! # The table, row by row
//!
//! Every change is judged for reads and for writes; it is breaking when it breaks a direction in
//! which clients use the item ([`Change::breaks`]).
//!
//! | Row of PROTOCOL.md | [`Kind`] | reads | writes |
//! |---|---|---|---|
//! | New action or response type | [`Kind::ActionAdded`], [`Kind::ResponseAdded`] | compatible | compatible |
//! | New field (also in a union member) | [`Kind::FieldAdded`] | compatible | breaking if required |
//! | Field removed | [`Kind::FieldRemoved`] | breaking | breaking |
//! | Field type changed | [`Kind::FieldTypeChanged`], [`Kind::ValueAdded`], [`Kind::ValueRemoved`] | breaking | breaking |
//! | Required field becomes optional | [`Kind::FieldBecameOptional`] | breaking | compatible |
//! | Optional field becomes required | [`Kind::FieldBecameRequired`] | compatible | breaking |
//! | Member added to a discriminated union | [`Kind::MemberAdded`] | breaking | compatible |
//! | Member removed from a discriminated union | [`Kind::MemberRemoved`] | breaking | breaking |
//! | Any other change to a named type | [`Kind::ValueAdded`], [`Kind::ValueRemoved`], [`Kind::AliasChanged`], [`Kind::ShapeChanged`], [`Kind::ExtraFieldsChanged`], [`Kind::UnionTagChanged`], [`Kind::UnionOpenChanged`] | breaking | breaking |
//!
//! A union member added is breaking for reads even when the union is `x-open` (`"open": true`
//! in the surface): PROTOCOL.md says so explicitly, since the table covers every released client,
//! not only ours. A field whose type is a union of string literals reports each value that came or
//! went ([`Kind::ValueAdded`], [`Kind::ValueRemoved`]); that is a field type change, breaking both
//! ways. A field whose type and requiredness both change yields one change for each.
//!
//! # Where the table is silent (conservative choices)
//!
//! - **Action, response or named type removed** ([`Kind::ActionRemoved`], [`Kind::ResponseRemoved`],
//!   [`Kind::TypeRemoved`]): breaking in every direction it was used in (a removed action is a
//!   member removed from the action union).
//! - **An action answered with a different response** ([`Kind::ResponseOfActionChanged`]) or sent
//!   over a different transport ([`Kind::TransportChanged`]): breaking both ways.
//! - **New named type** ([`Kind::TypeAdded`]): compatible by itself; the fields and union members
//!   that start using it are classified on their own (a renamed type therefore shows as field
//!   types changed).
//! - **A definition moving between actions, responses and types** ([`Kind::SectionChanged`]), or
//!   changing between object, union and alias ([`Kind::ShapeChanged`]): breaking both ways.
//! - **Extra fields** (`extraFields`, an object's `additionalProperties` type) added, removed or
//!   changed: any other change to a named type, breaking both ways.
//! - **Union tag or `open` flag changed**: any other change to a named type, breaking both ways
//!   (the flag only changes our generated types, but the table applies "even where our own
//!   generated types would cope").
//! - **An inline object type** (`{a: T; b?: U}`) is compared as a whole: any difference is a
//!   field type change, breaking both ways.
//! - **Only the order** of union members or literal values changed ([`Kind::Reordered`]), or only
//!   an `x-since` ([`Kind::SinceChanged`]): not a wire change, compatible.
//! - **An action's effect changed** (`"effect"`, the schema's `x-effect`: `read` or `write`;
//!   [`Kind::EffectChanged`]): compatible, but reported. The effect is server behaviour, not wire
//!   shape: every client sends and reads the same bytes as before. What changes is how the server
//!   treats a byte-identical envelope (a write is refused as a replay, a read answered again), so
//!   the report names it for the reviewer. A listing that states no effect (written before actions
//!   stated one) is not compared: gaining the key is not a change of any action, and a new action
//!   shows its effect in the "new action" line.
//! - **A key this classifier does not know** on an action, response or type: ignored, so the
//!   listing can grow new per-definition facts without a format change.
//! - **A type written differently** that means the same on the wire ([`Kind::Restated`]): before
//!   two field types (or aliases) are compared, every alias name in them is replaced by what it
//!   stands for, each side with its own aliases; when they then read the same, only the writing
//!   changed (`"deep" | "quick" | null` -> `Thoroughness | null` with
//!   `Thoroughness = "deep" | "quick"`), compatible. Named object types and unions are not
//!   expanded: replacing one with an inline shape, or the reverse, is a field type change.
//! - The action and response unions (a union whose members are all actions, or all responses):
//!   a member that is a new action or response is covered by "New action or response type" and is
//!   not reported again; one removed with its definition is reported once, as the removal.

mod check;
mod notation;
mod surface;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;

pub use check::{Failure, Summary, changelog_has_protocol, check};
use surface::{Def, Section, Shape, Surface};

/// How clients use an item: they write it (actions, the envelope), read it (responses, frames),
/// or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    /// Clients read it.
    Read,
    /// Clients write it.
    Write,
    /// Clients read and write it.
    Both,
}

impl Direction {
    /// Whether clients read it.
    pub fn reads(self) -> bool {
        matches!(self, Direction::Read | Direction::Both)
    }

    /// Whether clients write it.
    pub fn writes(self) -> bool {
        matches!(self, Direction::Write | Direction::Both)
    }

    /// The direction with these flags; `None` for neither.
    pub fn from_flags(reads: bool, writes: bool) -> Option<Self> {
        match (reads, writes) {
            (true, true) => Some(Direction::Both),
            (true, false) => Some(Direction::Read),
            (false, true) => Some(Direction::Write),
            (false, false) => None,
        }
    }

    /// Both directions' uses together.
    pub fn union(self, other: Self) -> Self {
        Direction::from_flags(self.reads() || other.reads(), self.writes() || other.writes()).unwrap_or(self)
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::Read => "read",
            Direction::Write => "write",
            Direction::Both => "read+write",
        })
    }
}

/// What changed. The module documentation maps each kind to its row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A new action.
    ActionAdded,
    /// A new response type.
    ResponseAdded,
    /// A new named type.
    TypeAdded,
    /// An action is gone.
    ActionRemoved,
    /// A response type is gone.
    ResponseRemoved,
    /// A named type is gone.
    TypeRemoved,
    /// A definition moved between actions, responses and named types.
    SectionChanged,
    /// A definition changed between object, union and alias.
    ShapeChanged,
    /// An action is answered with another response.
    ResponseOfActionChanged,
    /// An action moved between HTTP and WebSocket.
    TransportChanged,
    /// A new field.
    FieldAdded,
    /// A field is gone.
    FieldRemoved,
    /// A field's type changed.
    FieldTypeChanged,
    /// A required field became optional.
    FieldBecameOptional,
    /// An optional field became required.
    FieldBecameRequired,
    /// An object's extra-field type (`additionalProperties`) appeared, went or changed.
    ExtraFieldsChanged,
    /// A member added to a discriminated union.
    MemberAdded,
    /// A member removed from a discriminated union.
    MemberRemoved,
    /// A discriminated union is told apart by another property.
    UnionTagChanged,
    /// A union's `x-open` changed.
    UnionOpenChanged,
    /// A value added to a string-literal union (a named alias, or a field's type).
    ValueAdded,
    /// A value removed from a string-literal union (a named alias, or a field's type).
    ValueRemoved,
    /// An alias now stands for another type.
    AliasChanged,
    /// Only the order of union members or literal values changed.
    Reordered,
    /// A type is written differently but means the same on the wire (an alias's name instead of
    /// what it stands for, or the other way round).
    Restated,
    /// Only an `x-since` changed.
    SinceChanged,
    /// An action's effect (`read` or `write`) changed: server behaviour, not wire shape.
    EffectChanged,
}

impl Kind {
    /// Whether the change breaks `(reads, writes)`. `required` is the new field's requiredness
    /// (only [`Kind::FieldAdded`] looks at it).
    pub fn rule(self, required: bool) -> (bool, bool) {
        match self {
            Kind::ActionAdded
            | Kind::ResponseAdded
            | Kind::TypeAdded
            | Kind::Reordered
            | Kind::Restated
            | Kind::SinceChanged
            | Kind::EffectChanged => (false, false),
            Kind::FieldAdded => (false, required),
            Kind::FieldBecameOptional | Kind::MemberAdded => (true, false),
            Kind::FieldBecameRequired => (false, true),
            Kind::ActionRemoved
            | Kind::ResponseRemoved
            | Kind::TypeRemoved
            | Kind::SectionChanged
            | Kind::ShapeChanged
            | Kind::ResponseOfActionChanged
            | Kind::TransportChanged
            | Kind::FieldRemoved
            | Kind::FieldTypeChanged
            | Kind::ExtraFieldsChanged
            | Kind::MemberRemoved
            | Kind::UnionTagChanged
            | Kind::UnionOpenChanged
            | Kind::ValueAdded
            | Kind::ValueRemoved
            | Kind::AliasChanged => (true, true),
        }
    }
}

/// One difference between the two surfaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// `Name` or `Name.field`.
    pub item: String,
    /// What changed.
    pub kind: Kind,
    /// How clients use the item.
    pub direction: Direction,
    /// Whether it breaks an older client in a direction it uses the item in.
    pub breaking: bool,
    /// The directions it breaks (`None` when compatible).
    pub breaks: Option<Direction>,
    /// What changed, in words.
    pub detail: String,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = match self.breaks {
            None => format!("compatible ({})", self.direction),
            Some(breaks) if breaks == self.direction => format!("BREAKING   ({breaks})"),
            Some(breaks) => {
                let fine = if breaks.reads() { "write" } else { "read" };
                format!("BREAKING   ({breaks}; compatible for {fine})")
            }
        };
        write!(f, "{verdict} {}: {}", self.item, self.detail)
    }
}

/// Every difference between two surfaces, with the version numbers on both sides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// `format` of the base surface.
    pub base_format: Option<u64>,
    /// `format` of the current surface.
    pub current_format: Option<u64>,
    /// `protocol` of the base surface.
    pub base_protocol: Option<u64>,
    /// `protocol` of the current surface.
    pub current_protocol: Option<u64>,
    /// `minClientProtocol` of the base surface.
    pub base_min_client_protocol: Option<u64>,
    /// `minClientProtocol` of the current surface.
    pub current_min_client_protocol: Option<u64>,
    /// The changes, by item name.
    pub changes: Vec<Change>,
    /// New actions, responses, types and fields whose `since` is newer than the current protocol.
    pub since_too_new: Vec<(String, u64)>,
}

impl Report {
    /// The breaking changes.
    pub fn breaking(&self) -> impl Iterator<Item = &Change> {
        self.changes.iter().filter(|c| c.breaking)
    }

    /// Whether any change is breaking.
    pub fn has_breaking(&self) -> bool {
        self.breaking().next().is_some()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = |v: Option<u64>| v.map_or_else(|| "?".to_owned(), |v| v.to_string());
        let arrow = |a: Option<u64>, b: Option<u64>| {
            if a == b { n(a) } else { format!("{} -> {}", n(a), n(b)) }
        };
        writeln!(
            f,
            "surface: protocol {}, minClientProtocol {}; {} change(s), {} breaking",
            arrow(self.base_protocol, self.current_protocol),
            arrow(self.base_min_client_protocol, self.current_min_client_protocol),
            self.changes.len(),
            self.breaking().count(),
        )?;
        for change in &self.changes {
            writeln!(f, "  {change}")?;
        }
        Ok(())
    }
}

/// How clients use every definition of `surface` (see the module documentation).
pub fn directions(surface: &Value) -> BTreeMap<String, Direction> {
    Surface::parse(surface).directions().into_iter().map(|(name, dir)| (name.to_owned(), dir)).collect()
}

/// Compares the base surface with the current one and classifies every difference.
pub fn classify(base: &Value, current: &Value) -> Report {
    let old = Surface::parse(base);
    let new = Surface::parse(current);
    let mut diff =
        Diff { old_dirs: old.directions(), new_dirs: new.directions(), old: &old, new: &new, changes: vec![] };
    let names: BTreeSet<&str> = old.defs.keys().chain(new.defs.keys()).copied().collect();
    for name in names {
        match (old.defs.get(name), new.defs.get(name)) {
            (None, Some(def)) => diff.added(name, def),
            (Some(def), None) => diff.removed(name, def),
            (Some(before), Some(after)) => diff.changed(name, before, after),
            (None, None) => {}
        }
    }
    let since_too_new = match new.protocol {
        Some(protocol) => diff.since_too_new(protocol),
        None => vec![],
    };
    Report {
        base_format: old.format,
        current_format: new.format,
        base_protocol: old.protocol,
        current_protocol: new.protocol,
        base_min_client_protocol: old.min_client_protocol,
        current_min_client_protocol: new.min_client_protocol,
        changes: diff.changes,
        since_too_new,
    }
}

struct Diff<'s, 'a> {
    old: &'s Surface<'a>,
    new: &'s Surface<'a>,
    old_dirs: BTreeMap<&'a str, Direction>,
    new_dirs: BTreeMap<&'a str, Direction>,
    changes: Vec<Change>,
}

impl<'a> Diff<'_, 'a> {
    fn push(&mut self, item: String, kind: Kind, direction: Direction, required: bool, detail: String) {
        let (reads, writes) = kind.rule(required);
        let breaks = Direction::from_flags(reads && direction.reads(), writes && direction.writes());
        self.changes.push(Change { item, kind, direction, breaking: breaks.is_some(), breaks, detail });
    }

    fn dir_old(&self, name: &str) -> Direction {
        self.old_dirs.get(name).copied().unwrap_or(Direction::Read)
    }

    fn dir_new(&self, name: &str) -> Direction {
        self.new_dirs.get(name).copied().unwrap_or(Direction::Read)
    }

    fn dir_both(&self, name: &str) -> Direction {
        self.dir_old(name).union(self.dir_new(name))
    }

    fn added(&mut self, name: &str, def: &Def<'a>) {
        let direction = self.dir_new(name);
        let (kind, detail) = match def.section {
            Section::Action => {
                let answer = def.response.map_or_else(|| "no response".to_owned(), |r| format!("answered with {r}"));
                let effect = def.effect.map(|e| format!(", {e}")).unwrap_or_default();
                (Kind::ActionAdded, format!("new action ({answer}{effect}, since {})", def.since))
            }
            Section::Response => (Kind::ResponseAdded, format!("new response type (since {})", def.since)),
            Section::Type => (
                Kind::TypeAdded,
                format!(
                    "new named type ({}, since {}); its uses are classified where they appear",
                    def.shape.label(),
                    def.since
                ),
            ),
        };
        self.push(name.to_owned(), kind, direction, false, detail);
    }

    fn removed(&mut self, name: &str, def: &Def<'a>) {
        let direction = self.dir_old(name);
        let kind = match def.section {
            Section::Action => Kind::ActionRemoved,
            Section::Response => Kind::ResponseRemoved,
            Section::Type => Kind::TypeRemoved,
        };
        self.push(name.to_owned(), kind, direction, false, format!("{} removed", def.section.label()));
    }

    fn changed(&mut self, name: &str, before: &Def<'a>, after: &Def<'a>) {
        let direction = self.dir_both(name);
        if before.section != after.section {
            let detail = format!("moved from {} to {}", before.section.label(), after.section.label());
            self.push(name.to_owned(), Kind::SectionChanged, direction, false, detail);
            return;
        }
        if before.since != after.since {
            let detail = format!("x-since {} -> {}", before.since, after.since);
            self.push(name.to_owned(), Kind::SinceChanged, direction, false, detail);
        }
        if before.response != after.response {
            let show = |r: Option<&str>| r.unwrap_or("(none)").to_owned();
            let detail = format!("answered with {} instead of {}", show(after.response), show(before.response));
            // The client writes the action and reads what comes back.
            self.push(name.to_owned(), Kind::ResponseOfActionChanged, Direction::Both, false, detail);
        }
        if before.transport != after.transport {
            let show = |t: Option<&str>| t.unwrap_or("(none)").to_owned();
            let detail = format!("transport {} -> {}", show(before.transport), show(after.transport));
            self.push(name.to_owned(), Kind::TransportChanged, direction, false, detail);
        }
        if let (Some(old_effect), Some(new_effect)) = (before.effect, after.effect)
            && old_effect != new_effect
        {
            let detail = format!(
                "effect {old_effect} -> {new_effect} (server behaviour, not wire shape: byte-identical envelopes \
                 are {} now)",
                if new_effect == "read" { "answered again" } else { "refused as replays" }
            );
            self.push(name.to_owned(), Kind::EffectChanged, direction, false, detail);
        }
        match (&before.shape, &after.shape) {
            (Shape::Fields { fields: old, extra: old_extra }, Shape::Fields { fields: new, extra: new_extra }) => {
                self.fields(name, direction, old, new);
                if old_extra != new_extra {
                    let show = |e: &Option<&str>| e.map_or_else(|| "none".to_owned(), |e| format!("`{e}`"));
                    let detail = format!("extra fields {} -> {}", show(old_extra), show(new_extra));
                    self.push(name.to_owned(), Kind::ExtraFieldsChanged, direction, false, detail);
                }
            }
            (
                Shape::Union { tag: old_tag, open: old_open, members: old_members },
                Shape::Union { tag: new_tag, open: new_open, members: new_members },
            ) => {
                if old_tag != new_tag {
                    let detail = format!("union tag `{old_tag}` -> `{new_tag}`");
                    self.push(name.to_owned(), Kind::UnionTagChanged, direction, false, detail);
                }
                if old_open != new_open {
                    let detail = format!("x-open {old_open} -> {new_open}");
                    self.push(name.to_owned(), Kind::UnionOpenChanged, direction, false, detail);
                }
                self.members(name, direction, (old_members, *new_open, new_tag), new_members);
            }
            (Shape::Alias(old), Shape::Alias(new)) => {
                if old != new {
                    self.type_change(name.to_owned(), direction, old, new, Kind::AliasChanged);
                }
            }
            (old, new) => {
                let detail = format!("{} -> {}", old.label(), new.label());
                self.push(name.to_owned(), Kind::ShapeChanged, direction, false, detail);
            }
        }
    }

    fn fields(
        &mut self,
        name: &str,
        direction: Direction,
        old: &BTreeMap<&'a str, surface::Field<'a>>,
        new: &BTreeMap<&'a str, surface::Field<'a>>,
    ) {
        let keys: BTreeSet<&str> = old.keys().chain(new.keys()).copied().collect();
        for key in keys {
            let item = format!("{name}.{key}");
            let need = |required: bool| if required { "required" } else { "optional" };
            match (old.get(key), new.get(key)) {
                (None, Some(f)) => {
                    let detail = format!("field added ({} `{}`, since {})", need(f.required), f.ty, f.since);
                    self.push(item, Kind::FieldAdded, direction, f.required, detail);
                }
                (Some(f), None) => {
                    let detail = format!("field removed (was {} `{}`)", need(f.required), f.ty);
                    self.push(item, Kind::FieldRemoved, direction, false, detail);
                }
                (Some(before), Some(after)) => {
                    if before.ty != after.ty {
                        self.type_change(item.clone(), direction, before.ty, after.ty, Kind::FieldTypeChanged);
                    }
                    match (before.required, after.required) {
                        (true, false) => self.push(
                            item.clone(),
                            Kind::FieldBecameOptional,
                            direction,
                            false,
                            "required -> optional".into(),
                        ),
                        (false, true) => self.push(
                            item.clone(),
                            Kind::FieldBecameRequired,
                            direction,
                            false,
                            "optional -> required".into(),
                        ),
                        _ => {}
                    }
                    if before.since != after.since {
                        let detail = format!("x-since {} -> {}", before.since, after.since);
                        self.push(item, Kind::SinceChanged, direction, false, detail);
                    }
                }
                (None, None) => {}
            }
        }
    }

    /// A type notation changed. Names of aliases are expanded first (each side with its own
    /// aliases): when both sides then read the same, only the writing changed. Otherwise, when both
    /// are unions of string literals, each value that came or went is one change; else the whole.
    fn type_change(&mut self, item: String, direction: Direction, old: &str, new: &str, whole: Kind) {
        let old_wire = notation::expand(old, &|n| self.old.alias_of(n));
        let new_wire = notation::expand(new, &|n| self.new.alias_of(n));
        if old_wire == new_wire {
            let detail = format!("written `{old}` -> `{new}`, the same wire type `{new_wire}`");
            self.push(item, Kind::Restated, direction, false, detail);
            return;
        }
        let (Some(old_values), Some(new_values)) =
            (notation::string_literals(&old_wire), notation::string_literals(&new_wire))
        else {
            let what = if whole == Kind::AliasChanged { "alias" } else { "type" };
            self.push(item, whole, direction, false, format!("{what} `{old}` -> `{new}`"));
            return;
        };
        let old_set: BTreeSet<&String> = old_values.iter().collect();
        let new_set: BTreeSet<&String> = new_values.iter().collect();
        if old_set == new_set {
            self.push(item, Kind::Reordered, direction, false, format!("values reordered: `{old}` -> `{new}`"));
            return;
        }
        for value in new_set.difference(&old_set) {
            let detail = format!("value {} added (was `{old_wire}`)", Value::from(value.as_str()));
            self.push(item.clone(), Kind::ValueAdded, direction, false, detail);
        }
        for value in old_set.difference(&new_set) {
            let detail = format!("value {} removed (now `{new_wire}`)", Value::from(value.as_str()));
            self.push(item.clone(), Kind::ValueRemoved, direction, false, detail);
        }
    }

    fn members(
        &mut self,
        name: &str,
        direction: Direction,
        (old, open, tag): (&[&'a str], bool, &str),
        new: &[&'a str],
    ) {
        let old_set: BTreeSet<&str> = old.iter().copied().collect();
        let new_set: BTreeSet<&str> = new.iter().copied().collect();
        let old_catalogue = catalogue(self.old, old);
        let new_catalogue = catalogue(self.new, new);
        let openness = if open { ", x-open: still breaking for reads" } else { "" };
        for member in new_set.difference(&old_set) {
            let fresh = !self.old.defs.contains_key(member);
            let covered =
                fresh && new_catalogue.is_some_and(|s| self.new.defs.get(member).is_some_and(|d| d.section == s));
            if !covered {
                let detail = format!("member `{member}` added (tag `{tag}`{openness})");
                self.push(name.to_owned(), Kind::MemberAdded, direction, false, detail);
            }
        }
        for member in old_set.difference(&new_set) {
            let gone = !self.new.defs.contains_key(member);
            let covered =
                gone && old_catalogue.is_some_and(|s| self.old.defs.get(member).is_some_and(|d| d.section == s));
            if !covered {
                let detail = format!("member `{member}` removed");
                self.push(name.to_owned(), Kind::MemberRemoved, direction, false, detail);
            }
        }
        if old_set == new_set && old != new {
            let detail = format!("members reordered: {} -> {}", old.join(", "), new.join(", "));
            self.push(name.to_owned(), Kind::Reordered, direction, false, detail);
        }
    }

    /// New definitions and fields whose `since` is newer than `protocol`.
    fn since_too_new(&self, protocol: u64) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        for (name, def) in &self.new.defs {
            let old = self.old.defs.get(name);
            if old.is_none() && def.since > protocol {
                out.push(((*name).to_owned(), def.since));
            }
            let Shape::Fields { fields, .. } = &def.shape else { continue };
            let old_fields = match old.map(|d| &d.shape) {
                Some(Shape::Fields { fields, .. }) => Some(fields),
                _ => None,
            };
            for (field, info) in fields {
                let fresh = old_fields.is_none_or(|f| !f.contains_key(field));
                if fresh && info.since > protocol && def.since <= protocol {
                    out.push((format!("{name}.{field}"), info.since));
                }
            }
        }
        out
    }
}

/// The section every member of a union belongs to, when they all belong to one that is not
/// named types: the action union or the response union.
fn catalogue(surface: &Surface<'_>, members: &[&str]) -> Option<Section> {
    let mut sections = members.iter().map(|m| surface.defs.get(m).map(|d| d.section));
    let first = sections.next()??;
    (first != Section::Type && sections.all(|s| s == Some(first))).then_some(first)
}
