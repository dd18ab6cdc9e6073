//! The breaking-change classifier: one test per row of the table in `schema/PROTOCOL.md` ("What
//! counts as breaking"), for what clients read and for what they write, on small hand-written
//! surfaces in the format of `snapshots/surface.json`; then the verdict, and the real snapshot.

use seed_agents_compat::classify::{Change, Direction, Kind, changelog_has_protocol, check, classify, directions};
use serde_json::{Value, json};

fn field(ty: &str, required: bool) -> Value {
    json!({"type": ty, "required": required, "since": 1})
}

fn tag(name: &str) -> Value {
    field(&format!("\"{name}\""), true)
}

fn object(fields: Value) -> Value {
    json!({"fields": fields, "since": 1})
}

fn union(tag: &str, open: bool, members: &[&str]) -> Value {
    json!({"union": {"tag": tag, "open": open, "members": members}, "since": 1})
}

/// A small surface: clients write `Put` (inside `Envelope`) carrying an `Input`, and read
/// `PutResponse` carrying an `Output` and WebSocket frames (`WsEvent`); `Shared` is in both.
/// Every `In*` type is written only, every `Out*` type read only.
fn base() -> Value {
    json!({
        "format": 1,
        "protocol": 3,
        "minClientProtocol": 1,
        "actions": {
            "Put": {
                "effect": "write",
                "fields": {"_": tag("Put"), "input": field("Input", true), "shared": field("Shared", false)},
                "response": "PutResponse",
                "since": 1,
                "transport": "http"
            }
        },
        "responses": {
            "PutResponse": object(json!({
                "_": tag("PutResponse"),
                "output": field("Output", true),
                "shared": field("Shared", false)
            }))
        },
        "types": {
            "Envelope": object(json!({"action": field("AgentAction", true), "sig": field("Bytes", true)})),
            "AgentAction": union("_", false, &["Put"]),
            "AgentResponse": union("_", false, &["PutResponse"]),
            "WsEvent": union("_", false, &["PingFrame"]),
            "PingFrame": object(json!({"_": tag("ping"), "at": field("integer", true)})),
            "Bytes": {"alias": "bytes", "since": 1},
            "Input": object(json!({
                "name": field("string", true),
                "note": field("string", false),
                "kind": field("InKind", true),
                "level": field("\"high\" | \"low\"", false),
                "source": field("InSource", true)
            })),
            "Output": object(json!({
                "name": field("string", true),
                "note": field("string", false),
                "kind": field("OutKind", true),
                "level": field("\"high\" | \"low\"", false),
                "source": field("OutSource", true),
                "event": field("OpenSource", false)
            })),
            "InKind": {"alias": "\"a\" | \"b\"", "since": 1},
            "OutKind": {"alias": "\"a\" | \"b\"", "since": 1},
            "InSource": union("type", false, &["InA", "InB"]),
            "InA": object(json!({"type": tag("a"), "x": field("integer", true)})),
            "InB": object(json!({"type": tag("b")})),
            "OutSource": union("type", false, &["OutA", "OutB"]),
            "OutA": object(json!({"type": tag("a"), "x": field("integer", true)})),
            "OutB": object(json!({"type": tag("b")})),
            "OpenSource": union("type", true, &["OpenA"]),
            "OpenA": object(json!({"type": tag("a")})),
            "Shared": object(json!({"id": field("string", true), "label": field("string", false)}))
        }
    })
}

/// `base()` after `edit`.
fn edited(edit: impl FnOnce(&mut Value)) -> Value {
    let mut surface = base();
    edit(&mut surface);
    surface
}

fn def<'v>(surface: &'v mut Value, name: &str) -> &'v mut Value {
    for section in ["actions", "responses", "types"] {
        if surface[section].get(name).is_some() {
            return &mut surface[section][name];
        }
    }
    panic!("no definition {name}")
}

fn fields<'v>(surface: &'v mut Value, name: &str) -> &'v mut serde_json::Map<String, Value> {
    def(surface, name)["fields"].as_object_mut().unwrap()
}

fn members<'v>(surface: &'v mut Value, name: &str) -> &'v mut Vec<Value> {
    def(surface, name)["union"]["members"].as_array_mut().unwrap()
}

fn changes(current: &Value) -> Vec<Change> {
    classify(&base(), current).changes
}

/// The only change in `changes`, checked to be on `item` of `kind`.
fn only(changes: &[Change], item: &str, kind: Kind) -> Change {
    assert_eq!(changes.len(), 1, "expected one change, got {changes:#?}");
    let change = changes[0].clone();
    assert_eq!((change.item.as_str(), change.kind), (item, kind), "{change:#?}");
    change
}

fn assert_breaking(change: &Change, direction: Direction) {
    assert!(change.breaking, "expected breaking: {change}");
    assert_eq!(change.breaks, Some(direction), "{change}");
}

fn assert_compatible(change: &Change) {
    assert!(!change.breaking, "expected compatible: {change}");
    assert_eq!(change.breaks, None, "{change}");
}

// Reachability.

#[test]
fn directions_come_from_what_actions_envelope_responses_and_frames_reach() {
    let dirs = directions(&base());
    let of = |name: &str| dirs[name];
    for name in ["Put", "Envelope", "AgentAction", "Input", "InKind", "InSource", "InA", "InB"] {
        assert_eq!(of(name), Direction::Write, "{name}");
    }
    for name in ["PutResponse", "AgentResponse", "WsEvent", "PingFrame", "Output", "OutKind", "OutSource", "OpenA"] {
        assert_eq!(of(name), Direction::Read, "{name}");
    }
    assert_eq!(of("Shared"), Direction::Both);
    assert_eq!(of("Bytes"), Direction::Write);
}

#[test]
fn an_unreferenced_type_is_read_and_a_websocket_frame_takes_new_required_fields() {
    let current = edited(|s| {
        fields(s, "PingFrame").insert("seq".into(), field("integer", true));
        s["types"]["Hint"] = object(json!({"agentId": field("string", true)}));
    });
    let all = changes(&current);
    assert_eq!(all.len(), 2, "{all:#?}");
    let hint = all.iter().find(|c| c.item == "Hint").unwrap();
    assert_eq!((hint.kind, hint.direction), (Kind::TypeAdded, Direction::Read));
    assert_compatible(hint);
    let seq = all.iter().find(|c| c.item == "PingFrame.seq").unwrap();
    assert_eq!(seq.direction, Direction::Read);
    assert_compatible(seq);
}

// Row: new action or response type — compatible, compatible.

#[test]
fn row_new_response_type_is_compatible_for_reads() {
    let current = edited(|s| {
        s["responses"]["GetResponse"] = object(json!({"_": tag("GetResponse"), "output": field("Output", true)}));
        members(s, "AgentResponse").push(json!("GetResponse"));
    });
    let change = only(&changes(&current), "GetResponse", Kind::ResponseAdded);
    assert_eq!(change.direction, Direction::Read);
    assert_compatible(&change);
    assert!(check(&base(), &current, "").is_ok());
}

#[test]
fn row_new_action_is_compatible_for_writes() {
    let current = edited(|s| {
        s["actions"]["Poke"] = json!({
            "effect": "read",
            "fields": {"_": tag("Poke"), "input": field("Input", true)},
            "response": "PutResponse",
            "since": 3,
            "transport": "http"
        });
        members(s, "AgentAction").push(json!("Poke"));
    });
    let change = only(&changes(&current), "Poke", Kind::ActionAdded);
    assert_eq!(change.direction, Direction::Write);
    assert_compatible(&change);
    assert_eq!(change.detail, "new action (answered with PutResponse, read, since 3)");
    assert!(check(&base(), &current, "").is_ok());
}

// Row: new field (also inside one member of a union) — compatible; compatible only if optional.

#[test]
fn row_new_field_is_compatible_for_reads_required_or_not() {
    let current = edited(|s| {
        fields(s, "Output").insert("count".into(), field("integer", true));
        fields(s, "Output").insert("extra".into(), field("string", false));
        fields(s, "OutA").insert("y".into(), field("integer", true));
    });
    let all = changes(&current);
    assert_eq!(all.len(), 3, "{all:#?}");
    for change in &all {
        assert_eq!((change.kind, change.direction), (Kind::FieldAdded, Direction::Read));
        assert_compatible(change);
    }
}

#[test]
fn row_new_field_is_compatible_for_writes_only_if_optional() {
    let optional = edited(|s| {
        fields(s, "Input").insert("extra".into(), field("string", false));
    });
    assert_compatible(&only(&changes(&optional), "Input.extra", Kind::FieldAdded));
    let required = edited(|s| {
        fields(s, "Input").insert("count".into(), field("integer", true));
    });
    assert_breaking(&only(&changes(&required), "Input.count", Kind::FieldAdded), Direction::Write);
    let in_member = edited(|s| {
        fields(s, "InA").insert("y".into(), field("integer", true));
    });
    assert_breaking(&only(&changes(&in_member), "InA.y", Kind::FieldAdded), Direction::Write);
}

// Row: field removed — breaking, breaking.

#[test]
fn row_field_removed_breaks_reads() {
    let current = edited(|s| {
        fields(s, "Output").remove("note");
    });
    assert_breaking(&only(&changes(&current), "Output.note", Kind::FieldRemoved), Direction::Read);
}

#[test]
fn row_field_removed_breaks_writes() {
    let current = edited(|s| {
        fields(s, "Input").remove("note");
    });
    assert_breaking(&only(&changes(&current), "Input.note", Kind::FieldRemoved), Direction::Write);
}

// Row: field type changed — breaking, breaking.

#[test]
fn row_field_type_changed_breaks_reads() {
    let current = edited(|s| {
        fields(s, "Output").insert("name".into(), field("integer", true));
    });
    assert_breaking(&only(&changes(&current), "Output.name", Kind::FieldTypeChanged), Direction::Read);
    let widened = edited(|s| {
        fields(s, "Output").insert("level".into(), field("\"high\" | \"low\" | \"max\"", false));
    });
    assert_breaking(&only(&changes(&widened), "Output.level", Kind::ValueAdded), Direction::Read);
}

#[test]
fn row_field_type_changed_breaks_writes() {
    let current = edited(|s| {
        fields(s, "Input").insert("name".into(), field("string | null", true));
    });
    assert_breaking(&only(&changes(&current), "Input.name", Kind::FieldTypeChanged), Direction::Write);
    let narrowed = edited(|s| {
        fields(s, "Input").insert("level".into(), field("\"high\"", false));
    });
    assert_breaking(&only(&changes(&narrowed), "Input.level", Kind::ValueRemoved), Direction::Write);
}

#[test]
fn a_type_written_with_an_alias_name_is_the_same_wire_type() {
    let current = edited(|s| {
        s["types"]["Level"] = json!({"alias": "\"high\" | \"low\"", "since": 3});
        fields(s, "Input").insert("level".into(), field("Level", false));
        fields(s, "Output").insert("level".into(), field("Level", false));
    });
    let all = changes(&current);
    assert_eq!(all.len(), 3, "{all:#?}");
    assert!(all.iter().all(|c| !c.breaking), "{all:#?}");
    assert!(all.iter().any(|c| c.item == "Input.level" && c.kind == Kind::Restated));
    assert!(all.iter().any(|c| c.item == "Level" && c.kind == Kind::TypeAdded));
}

// Row: required field becomes optional — breaking for reads, compatible for writes.

#[test]
fn row_required_to_optional_breaks_reads() {
    let current = edited(|s| {
        fields(s, "Output").insert("name".into(), field("string", false));
    });
    assert_breaking(&only(&changes(&current), "Output.name", Kind::FieldBecameOptional), Direction::Read);
}

#[test]
fn row_required_to_optional_is_compatible_for_writes() {
    let current = edited(|s| {
        fields(s, "Input").insert("name".into(), field("string", false));
    });
    assert_compatible(&only(&changes(&current), "Input.name", Kind::FieldBecameOptional));
}

// Row: optional field becomes required — compatible for reads, breaking for writes.

#[test]
fn row_optional_to_required_is_compatible_for_reads() {
    let current = edited(|s| {
        fields(s, "Output").insert("note".into(), field("string", true));
    });
    assert_compatible(&only(&changes(&current), "Output.note", Kind::FieldBecameRequired));
}

#[test]
fn row_optional_to_required_breaks_writes() {
    let current = edited(|s| {
        fields(s, "Input").insert("note".into(), field("string", true));
    });
    assert_breaking(&only(&changes(&current), "Input.note", Kind::FieldBecameRequired), Direction::Write);
}

// Row: member added to a discriminated union — breaking for reads, compatible for writes.

#[test]
fn row_member_added_breaks_reads_even_when_the_union_is_open() {
    let closed = edited(|s| {
        members(s, "OutSource").push(json!("OpenA"));
    });
    assert_breaking(&only(&changes(&closed), "OutSource", Kind::MemberAdded), Direction::Read);
    let open = edited(|s| {
        s["types"]["OpenB"] = object(json!({"type": tag("b")}));
        members(s, "OpenSource").push(json!("OpenB"));
    });
    let all = changes(&open);
    assert_eq!(all.len(), 2, "{all:#?}");
    let added = all.iter().find(|c| c.kind == Kind::MemberAdded).unwrap();
    assert_eq!(added.item, "OpenSource");
    assert_breaking(added, Direction::Read);
    assert!(added.detail.contains("x-open"), "{added}");
    assert_compatible(all.iter().find(|c| c.kind == Kind::TypeAdded).unwrap());
}

#[test]
fn row_member_added_is_compatible_for_writes() {
    let current = edited(|s| {
        s["types"]["InC"] = object(json!({"type": tag("c")}));
        members(s, "InSource").push(json!("InC"));
    });
    let all = changes(&current);
    assert_eq!(all.len(), 2, "{all:#?}");
    let added = all.iter().find(|c| c.kind == Kind::MemberAdded).unwrap();
    assert_eq!((added.item.as_str(), added.direction), ("InSource", Direction::Write));
    assert_compatible(added);
    assert!(check(&base(), &current, "").is_ok());
}

// Row: member removed from a discriminated union — breaking, breaking.

#[test]
fn row_member_removed_breaks_reads() {
    let current = edited(|s| {
        members(s, "OutSource").retain(|m| m != "OutB");
    });
    assert_breaking(&only(&changes(&current), "OutSource", Kind::MemberRemoved), Direction::Read);
}

#[test]
fn row_member_removed_breaks_writes() {
    let current = edited(|s| {
        members(s, "InSource").retain(|m| m != "InB");
    });
    assert_breaking(&only(&changes(&current), "InSource", Kind::MemberRemoved), Direction::Write);
}

// Row: any other change to a named type (for example a string-literal union) — breaking, breaking.

#[test]
fn row_other_named_type_change_breaks_reads() {
    let value_added = edited(|s| {
        def(s, "OutKind")["alias"] = json!("\"a\" | \"b\" | \"c\"");
    });
    assert_breaking(&only(&changes(&value_added), "OutKind", Kind::ValueAdded), Direction::Read);
    let value_removed = edited(|s| {
        def(s, "OutKind")["alias"] = json!("\"a\"");
    });
    assert_breaking(&only(&changes(&value_removed), "OutKind", Kind::ValueRemoved), Direction::Read);
    let tag_changed = edited(|s| {
        def(s, "OutSource")["union"]["tag"] = json!("kind");
    });
    assert_breaking(&only(&changes(&tag_changed), "OutSource", Kind::UnionTagChanged), Direction::Read);
}

#[test]
fn row_other_named_type_change_breaks_writes() {
    let value_added = edited(|s| {
        def(s, "InKind")["alias"] = json!("\"a\" | \"b\" | \"c\"");
    });
    assert_breaking(&only(&changes(&value_added), "InKind", Kind::ValueAdded), Direction::Write);
    let alias_changed = edited(|s| {
        def(s, "InKind")["alias"] = json!("string");
    });
    assert_breaking(&only(&changes(&alias_changed), "InKind", Kind::AliasChanged), Direction::Write);
    let reshaped = edited(|s| {
        *def(s, "InKind") = object(json!({"value": field("string", true)}));
    });
    assert_breaking(&only(&changes(&reshaped), "InKind", Kind::ShapeChanged), Direction::Write);
    let opened = edited(|s| {
        def(s, "InSource")["union"]["open"] = json!(true);
    });
    assert_breaking(&only(&changes(&opened), "InSource", Kind::UnionOpenChanged), Direction::Write);
}

// Where the table is silent.

#[test]
fn a_type_used_both_ways_breaks_in_the_direction_the_rule_says() {
    let required = edited(|s| {
        fields(s, "Shared").insert("count".into(), field("integer", true));
    });
    let change = only(&changes(&required), "Shared.count", Kind::FieldAdded);
    assert_eq!(change.direction, Direction::Both);
    assert_breaking(&change, Direction::Write);
    assert!(change.to_string().contains("compatible for read"), "{change}");
    let loosened = edited(|s| {
        fields(s, "Shared").insert("id".into(), field("string", false));
    });
    assert_breaking(&only(&changes(&loosened), "Shared.id", Kind::FieldBecameOptional), Direction::Read);
    let removed = edited(|s| {
        fields(s, "Shared").remove("label");
    });
    assert_breaking(&only(&changes(&removed), "Shared.label", Kind::FieldRemoved), Direction::Both);
}

#[test]
fn removing_an_action_or_a_response_or_changing_an_answer_is_breaking() {
    let no_action = edited(|s| {
        s["actions"].as_object_mut().unwrap().remove("Put");
        members(s, "AgentAction").clear();
    });
    // Reported once, as the removal (not again as a member of the action union).
    assert_breaking(&only(&changes(&no_action), "Put", Kind::ActionRemoved), Direction::Write);
    let other_answer = edited(|s| {
        s["responses"]["PutAck"] = object(json!({"_": tag("PutAck")}));
        members(s, "AgentResponse").push(json!("PutAck"));
        def(s, "Put")["response"] = json!("PutAck");
    });
    let all = changes(&other_answer);
    assert_eq!(all.len(), 2, "{all:#?}");
    let changed = all.iter().find(|c| c.kind == Kind::ResponseOfActionChanged).unwrap();
    assert_eq!(changed.item, "Put");
    assert!(changed.breaking);
    let no_type = edited(|s| {
        s["types"].as_object_mut().unwrap().remove("OutKind");
        fields(s, "Output").insert("kind".into(), field("string", true));
    });
    let all = changes(&no_type);
    assert!(all.iter().any(|c| c.item == "OutKind" && c.kind == Kind::TypeRemoved && c.breaking), "{all:#?}");
    assert!(all.iter().any(|c| c.item == "Output.kind" && c.kind == Kind::FieldTypeChanged && c.breaking));
}

#[test]
fn order_and_since_alone_are_compatible() {
    let current = edited(|s| {
        members(s, "OutSource").reverse();
        def(s, "OutKind")["alias"] = json!("\"b\" | \"a\"");
        fields(s, "Output").get_mut("note").unwrap()["since"] = json!(2);
    });
    let all = changes(&current);
    assert_eq!(all.len(), 3, "{all:#?}");
    assert!(all.iter().all(|c| !c.breaking && matches!(c.kind, Kind::Reordered | Kind::SinceChanged)), "{all:#?}");
}

// Where the table is silent: an action's effect is server behaviour, not wire shape.

#[test]
fn an_effect_change_is_reported_but_compatible() {
    let to_read = edited(|s| def(s, "Put")["effect"] = json!("read"));
    let change = only(&changes(&to_read), "Put", Kind::EffectChanged);
    assert_compatible(&change);
    assert_eq!(change.direction, Direction::Write);
    assert!(change.detail.starts_with("effect write -> read (server behaviour"), "{change}");
    assert!(check(&base(), &to_read, "").is_ok());
    let back = classify(&to_read, &base()).changes;
    let change = only(&back, "Put", Kind::EffectChanged);
    assert!(change.detail.contains("refused as replays"), "{change}");
    assert!(!change.breaking);
}

#[test]
fn a_listing_that_starts_stating_effects_has_no_changes() {
    let unstated = edited(|s| drop(def(s, "Put").as_object_mut().unwrap().remove("effect")));
    assert_eq!(classify(&unstated, &base()).changes, vec![]);
    assert_eq!(classify(&base(), &unstated).changes, vec![]);
}

// The verdict.

fn changelog(versions: &[u64]) -> String {
    let mut md = "# Protocol versions\n\n## What counts as breaking\n\n### Protocol 9 is not here\n\n## Changelog\n\n"
        .to_owned();
    for v in versions {
        md.push_str(&format!("### Protocol {v}\n\n- Something.\n\n"));
    }
    md
}

fn breaking_edit(s: &mut Value) {
    fields(s, "Output").remove("note");
}

#[test]
fn a_breaking_change_without_a_bump_fails_naming_it_and_the_fix() {
    let current = edited(breaking_edit);
    let failure = check(&base(), &current, &changelog(&[3, 2, 1])).unwrap_err();
    let text = failure.to_string();
    assert!(text.contains("Output.note [breaks clients that read it]"), "{text}");
    assert!(text.contains("AGENTS_PROTOCOL_VERSION in schema/src/version.rs"), "{text}");
    assert!(text.contains("x-protocol in schema/json/envelope.json"), "{text}");
    assert!(text.contains("### Protocol 4"), "{text}");
    assert!(text.contains("shim in compat/"), "{text}");
}

#[test]
fn a_breaking_change_needs_the_bump_and_the_changelog_heading() {
    let bumped = edited(|s| {
        breaking_edit(s);
        s["protocol"] = json!(4);
    });
    let failure = check(&base(), &bumped, &changelog(&[3, 2, 1])).unwrap_err();
    assert_eq!(failure.problems.len(), 1, "{failure}");
    assert!(failure.problems[0].contains("no `### Protocol 4` heading"), "{failure}");
    let summary = check(&base(), &bumped, &changelog(&[4, 3, 2, 1])).unwrap();
    assert!(summary.report.has_breaking());
    // The heading alone, without the bump, is not enough.
    assert!(check(&base(), &edited(breaking_edit), &changelog(&[4, 3])).is_err());
}

#[test]
fn versions_never_go_down() {
    let lower = edited(|s| s["protocol"] = json!(2));
    let failure = check(&base(), &lower, &changelog(&[3])).unwrap_err();
    assert!(failure.problems.iter().any(|p| p.contains("protocol decreased from 3 to 2")), "{failure}");
    let base_with_min = edited(|s| s["minClientProtocol"] = json!(2));
    let failure = check(&base_with_min, &base(), &changelog(&[3])).unwrap_err();
    assert!(failure.problems.iter().any(|p| p.contains("minClientProtocol decreased from 2 to 1")), "{failure}");
    assert!(check(&base(), &base_with_min, "").is_ok(), "raising the minimum is fine");
}

#[test]
fn a_new_item_cannot_claim_a_version_from_the_future() {
    let current = edited(|s| {
        let mut f = field("string", false);
        f["since"] = json!(5);
        fields(s, "Output").insert("later".into(), f);
    });
    let failure = check(&base(), &current, "").unwrap_err();
    assert!(failure.problems[0].contains("Output.later has x-since 5"), "{failure}");
}

#[test]
fn changelog_headings_are_matched_exactly_and_only_in_the_changelog() {
    let md = changelog(&[30, 2]);
    assert!(changelog_has_protocol(&md, 30));
    assert!(changelog_has_protocol(&md, 2));
    assert!(!changelog_has_protocol(&md, 3), "30 is not 3");
    assert!(!changelog_has_protocol(&md, 9), "headings outside the changelog do not count");
    assert!(changelog_has_protocol("## Changelog\n### Protocol 2 (2026-09-09 upstream)\n", 2));
    assert!(!changelog_has_protocol("## Changelog\n```\n### Protocol 4\n```\n", 4));
}

// The real snapshot.

fn real(path: &str) -> String {
    std::fs::read_to_string(format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn real_surface() -> Value {
    serde_json::from_str(&real("snapshots/surface.json")).unwrap()
}

#[test]
fn identical_surfaces_have_no_changes() {
    let surface = real_surface();
    assert_eq!(classify(&surface, &surface).changes, vec![]);
    let summary = check(&surface, &surface, &real("schema/PROTOCOL.md")).unwrap();
    assert!(summary.report.changes.is_empty());
}

#[test]
fn every_real_action_states_its_effect() {
    let surface = real_surface();
    let actions = surface["actions"].as_object().unwrap();
    for (name, action) in actions {
        assert!(matches!(action["effect"].as_str(), Some("read" | "write")), "{name}: {}", action["effect"]);
    }
    assert_eq!(actions["ListAgents"]["effect"], "read");
    assert_eq!(actions["CreateAgent"]["effect"], "write");
}

#[test]
fn the_real_surface_knows_who_writes_and_reads_what() {
    let dirs = directions(&real_surface());
    for (name, direction) in [
        ("Envelope", Direction::Write),
        ("AgentAction", Direction::Write),
        ("CreateAgent", Direction::Write),
        ("AgentTriggerInput", Direction::Write),
        ("GetAgentResponse", Direction::Read),
        ("AgentResponse", Direction::Read),
        ("AgentWSEvent", Direction::Read),
        ("ChangeFrame", Direction::Read),
        ("AccountChangeHint", Direction::Read),
        ("SessionEventPayload", Direction::Read),
        ("AgentDefinition", Direction::Both),
        ("AgentTriggerSource", Direction::Both),
    ] {
        assert_eq!(dirs.get(name), Some(&direction), "{name}");
    }
}

#[test]
fn removing_a_real_response_field_fails_without_a_bump_and_passes_with_one() {
    let base = real_surface();
    let protocol_md = real("schema/PROTOCOL.md");
    let mut current = base.clone();
    let removed = current["responses"]["GetAgentResponse"]["fields"].as_object_mut().unwrap().remove("sessionCount");
    assert!(removed.is_some(), "the snapshot has GetAgentResponse.sessionCount");

    let failure = check(&base, &current, &protocol_md).unwrap_err();
    let change = only(&failure.report.changes, "GetAgentResponse.sessionCount", Kind::FieldRemoved);
    assert_breaking(&change, Direction::Read);
    let text = failure.to_string();
    assert!(text.contains("GetAgentResponse.sessionCount [breaks clients that read it]: field removed"), "{text}");

    let next = base["protocol"].as_u64().unwrap() + 1;
    current["protocol"] = json!(next);
    let failure = check(&base, &current, &protocol_md).unwrap_err();
    assert!(failure.to_string().contains(&format!("no `### Protocol {next}` heading")), "{failure}");

    let entry = format!("## Changelog\n\n### Protocol {next}\n\n- `GetAgentResponse` lost `sessionCount`.\n");
    let with_entry = protocol_md.replacen("## Changelog\n", &entry, 1);
    let summary = check(&base, &current, &with_entry).unwrap();
    assert_eq!(summary.report.breaking().count(), 1);
}

/// `surface-check --history` over a throwaway repository: a breaking change in a middle commit
/// fails the check even when a later commit is fine.
#[test]
fn history_catches_a_breaking_change_in_any_commit() {
    let repo = tempfile::tempdir().expect("temp dir");
    let git = |args: &[&str]| {
        let status = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"])
            .args(args)
            .current_dir(repo.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("git runs");
        assert!(status.success(), "git {args:?}");
    };
    let commit = |surface: &Value, md: &str, message: &str| {
        std::fs::create_dir_all(repo.path().join("snapshots")).expect("dir");
        std::fs::create_dir_all(repo.path().join("schema")).expect("dir");
        std::fs::write(repo.path().join("snapshots/surface.json"), surface.to_string()).expect("write");
        std::fs::write(repo.path().join("schema/PROTOCOL.md"), md).expect("write");
        git(&["add", "-A"]);
        git(&["commit", "-q", "-m", message]);
    };
    let run = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_surface-check"))
            .arg("--history")
            .current_dir(repo.path())
            .output()
            .expect("surface-check runs");
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    git(&["init", "-q"]);
    commit(&base(), &changelog(&[3]), "first");
    let compatible = edited(|s| {
        fields(s, "Output").insert("extra".into(), field("string", false));
    });
    commit(&compatible, &changelog(&[3]), "a compatible change");
    let (code, out) = run();
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("1 snapshot changes in history, every one classified ok"), "{out}");

    let mut broken = compatible.clone();
    breaking_edit(&mut broken);
    commit(&broken, &changelog(&[3]), "a breaking change without a bump");
    let mut later = broken.clone();
    fields(&mut later, "Output").insert("another".into(), field("string", false));
    commit(&later, &changelog(&[3]), "a later compatible change");
    let (code, out) = run();
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("FAILED (a breaking change without a bump)"), "{out}");
    assert!(out.contains("a later compatible change"), "every commit is checked: {out}");
}
