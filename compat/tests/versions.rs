//! Snapshots (insta) of every action, response and WebSocket frame as each supported protocol
//! sees it, in `snapshots/payloads/v<N>/` for N from `MIN_CLIENT_PROTOCOL` to
//! `AGENTS_PROTOCOL_VERSION`. A change to a shim, to the schema or to the encoder shows up as a
//! snapshot diff for review.
//!
//! The examples are built from the schema (`seed_agents_test_support::schema::example`: every
//! property filled, unions showing their first member), decoded into their generated type, and
//! taken where the server takes them for a client of protocol N:
//!
//! - an action (`action-<Name>`) through `compat::upgrade_action`: the map the server goes on
//!   with, or the refusal. Every action is shown for every protocol, also one newer than that
//!   protocol: what such a client gets for it is the shims' decision (`CombineAgentTriggers` is
//!   refused below protocol 3).
//! - a response (`response-<Name>`) through `compat::downgrade_response`, with the `Legacy` facts
//!   `compat::needs` asks for (one example `SessionInfo`), or through `compat::downgrade_error`
//!   for `Error`, the server's path for error bodies. A refusal is recorded as the error body the
//!   client gets instead. Responses newer than the protocol are left out.
//! - a frame (`frame-<Name>`) through `compat::downgrade_frame`, as the JSON text the socket sends.
//!
//! CBOR is recorded as hex plus diagnostic notation (for the current protocol, the bytes the
//! server sends), a refusal with a first line `refused: HTTP <status>`; the snapshot header names
//! the protocol. The example of a trigger source is always the compound `activity` member, and
//! mostly with an empty condition list (it sits deeper than the builder fills lists), so variants
//! (`<name>-<variant>`) show the rest: `-simple` with a single source instead, `-compound` and
//! `-mixed` with two real conditions. Each protocol's `index` lists what differs from the current
//! protocol.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::LazyLock;

use ipld_core::ipld::Ipld;
use seed_agents_compat::{self as compat, AGENTS_PROTOCOL_VERSION, Legacy, MIN_CLIENT_PROTOCOL, Refusal};
use seed_agents_protocol::generated::{AgentWsEvent, Error as ErrorBody, SessionInfo};
use seed_agents_protocol::{AgentAction, AgentResponse, wire};
use serde_json::Value as Json;

use seed_agents_test_support::schema::{self as common, example};

type Defs = BTreeMap<String, Json>;

/// What a client of one protocol sends or receives in one case.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    /// The action as the server accepts it, or the response as the client receives it.
    Cbor(Vec<u8>),
    /// A compat refusal: the HTTP status and the error body in the client's shape.
    Refused(u16, Vec<u8>),
    /// A WebSocket frame (JSON text).
    Json(String),
}

/// How a protocol's view compares with the current protocol's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Same,
    Differs,
    Refused,
}

/// One payload, or a variant of one, as each protocol sees it.
#[derive(Debug)]
struct Case {
    /// `action-<Name>`, `response-<Name>` or `frame-<Name>`, then `-<variant>` for a variant.
    name: String,
    /// For the snapshot header.
    about: String,
    /// The protocol the payload appeared in (`x-since`).
    since: u32,
    variant: bool,
    /// By protocol; absent where the case is left out.
    seen: BTreeMap<u32, Seen>,
}

impl Case {
    fn outcome(&self, protocol: u32) -> Option<Outcome> {
        Some(match self.seen.get(&protocol)? {
            Seen::Refused(..) => Outcome::Refused,
            seen if Some(seen) == self.seen.get(&AGENTS_PROTOCOL_VERSION) => Outcome::Same,
            _ => Outcome::Differs,
        })
    }
}

/// A variant of an example: its name suffix and what it changes.
type Variant = Option<(&'static str, &'static str)>;

fn protocols() -> std::ops::RangeInclusive<u32> {
    MIN_CLIENT_PROTOCOL..=AGENTS_PROTOCOL_VERSION
}

static CASES: LazyLock<Vec<Case>> = LazyLock::new(|| {
    let defs = common::defs();
    let session = typed::<SessionInfo>(example_of(&defs, "SessionInfo"));
    let mut cases = Vec::new();
    for (name, schema) in &defs {
        match schema.get("x-kind").and_then(Json::as_str) {
            Some("action") => cases.push(action_case(name, None, since(schema), example_of(&defs, name))),
            Some("response") => {
                cases.push(response_case(name, None, since(schema), example_of(&defs, name), &session));
            }
            _ => {}
        }
    }
    for frame in defs["AgentWSEvent"]["oneOf"].as_array().expect("frame union") {
        let name = common::ref_target(frame).expect("a frame $ref");
        cases.push(frame_case(name, None, since(&defs[name]), example_of(&defs, name)));
    }
    cases.extend(variant_cases(&defs, &session));
    cases
});

fn since(schema: &Json) -> u32 {
    schema.get("x-since").and_then(Json::as_u64).map_or(1, |since| u32::try_from(since).expect("x-since"))
}

fn example_of(defs: &Defs, name: &str) -> Ipld {
    example::example(defs, &defs[name], name, 0)
}

fn typed<T: serde::de::DeserializeOwned>(generic: Ipld) -> T {
    wire::from_ipld(generic.clone()).unwrap_or_else(|e| panic!("{generic:?}: {e}"))
}

fn encode(value: &Ipld) -> Vec<u8> {
    wire::ipld_to_vec(value).expect("encode")
}

impl Case {
    /// `how` says what the payload went through, for the snapshot header.
    fn new(kind: &str, name: &str, variant: Variant, since: u32, seen: BTreeMap<u32, Seen>, how: &str) -> Case {
        let (suffix, what) = match variant {
            Some((suffix, what)) => (format!("-{suffix}"), format!("; variant: {what}")),
            None => (String::new(), String::new()),
        };
        Case {
            name: format!("{kind}-{name}{suffix}"),
            about: format!("{name} {how}{what}"),
            since,
            variant: variant.is_some(),
            seen,
        }
    }
}

fn action_case(name: &str, variant: Variant, since: u32, generic: Ipld) -> Case {
    let action: AgentAction = typed(generic);
    let sent = wire::to_ipld(&action).expect("action value");
    let mut seen = BTreeMap::new();
    for protocol in protocols() {
        let view = match compat::upgrade_action(protocol, name, sent.clone()) {
            Ok(upgraded) => {
                // The server decodes the upgraded map into the current type next.
                let _: AgentAction = typed(upgraded.clone());
                Seen::Cbor(encode(&upgraded))
            }
            Err(refusal) => refused(protocol, refusal),
        };
        seen.insert(protocol, view);
    }
    let direct = wire::to_vec(&action).expect("encode");
    assert_eq!(seen.get(&AGENTS_PROTOCOL_VERSION), Some(&Seen::Cbor(direct)), "{name}");
    Case::new("action", name, variant, since, seen, "as sent, after compat::upgrade_action")
}

fn response_case(name: &str, variant: Variant, since: u32, generic: Ipld, session: &SessionInfo) -> Case {
    let response: AgentResponse = typed(generic);
    let value = wire::to_ipld(&response).expect("response value");
    let mut seen = BTreeMap::new();
    for protocol in protocols().filter(|protocol| *protocol >= since) {
        let view = if name == "Error" {
            Seen::Cbor(encode(&compat::downgrade_error(protocol, value.clone())))
        } else {
            let mut legacy = Legacy::default();
            if compat::needs(protocol, name).agent_sessions {
                legacy.agent_sessions = Some(vec![session.clone()]);
            }
            match compat::downgrade_response(protocol, value.clone(), &legacy) {
                Ok(downgraded) => Seen::Cbor(encode(&downgraded)),
                Err(refusal) => refused(protocol, refusal),
            }
        };
        seen.insert(protocol, view);
    }
    // The server encodes a current response straight from its type: the same bytes.
    let direct = wire::to_vec(&response).expect("encode");
    assert_eq!(seen.get(&AGENTS_PROTOCOL_VERSION), Some(&Seen::Cbor(direct)), "{name}");
    let how = if name == "Error" { "compat::downgrade_error" } else { "compat::downgrade_response" };
    Case::new("response", name, variant, since, seen, &format!("as received, after {how}"))
}

/// The error body a refused client receives (what the server's error response writes).
fn refused(protocol: u32, refusal: Refusal) -> Seen {
    let body = AgentResponse::Error(ErrorBody::new(refusal.message).code(refusal.code));
    let body = compat::downgrade_error(protocol, wire::to_ipld(&body).expect("error value"));
    Seen::Refused(refusal.status, encode(&body))
}

fn frame_case(name: &str, variant: Variant, since: u32, generic: Ipld) -> Case {
    let frame: AgentWsEvent = typed(generic);
    let seen = protocols()
        .filter(|protocol| *protocol >= since)
        .map(|protocol| {
            let json = serde_json::to_string_pretty(&compat::downgrade_frame(protocol, frame.clone())).expect("json");
            (protocol, Seen::Json(json))
        })
        .collect();
    Case::new("frame", name, variant, since, seen, "as received, after compat::downgrade_frame (JSON text)")
}

const SIMPLE: Variant = Some(("simple", "every compound trigger source replaced by a single source"));
const COMPOUND: Variant = Some(("compound", "compound trigger sources of two conditions, the second one matched"));
const MIXED: Variant =
    Some(("mixed", "one trigger with a compound source of two conditions, one with a single source"));
const TOO_OLD: Variant = Some(("protocol_too_old", "code protocol_too_old"));

/// The trigger sources the variants put in place of the examples' compound ones.
struct Sources {
    /// A single (user mention) source.
    single: Ipld,
    /// A compound source of two conditions.
    compound: Ipld,
    /// `matchedConditions` naming the compound source's second condition.
    matched: Ipld,
}

impl Sources {
    fn new(defs: &Defs) -> Sources {
        let single = example_of(defs, "UserMentionSource");
        let condition = |id: &str, source: Ipld| {
            Ipld::Map(BTreeMap::from([("id".to_owned(), Ipld::String(id.into())), ("source".to_owned(), source)]))
        };
        let first = condition("condition-1", example_of(defs, "CommentReplySource"));
        let second = condition("condition-2", single.clone());
        let mut compound = example_of(defs, "ActivitySource");
        set(&mut compound, "conditions", Ipld::List(vec![first, second.clone()]));
        Sources { single, compound, matched: Ipld::List(vec![second]) }
    }

    fn simple(&self, value: Ipld) -> Ipld {
        with_sources(value, &self.single, None)
    }

    fn two(&self, value: Ipld) -> Ipld {
        with_sources(value, &self.compound, Some(&self.matched))
    }
}

/// The cases the plain examples cannot show (see the module documentation).
fn variant_cases(defs: &Defs, session: &SessionInfo) -> Vec<Case> {
    let sources = Sources::new(defs);
    let since = |name: &str| since(&defs[name]);
    let mut cases = Vec::new();
    for name in ["CreateAgentTrigger", "UpdateAgentTrigger"] {
        cases.push(action_case(name, SIMPLE, since(name), sources.simple(example_of(defs, name))));
    }
    let name = "GetAgentTriggerResponse";
    cases.push(response_case(name, SIMPLE, since(name), sources.simple(example_of(defs, name)), session));

    let name = "ListAgentTriggersResponse";
    let mut list = example_of(defs, name);
    let Some(Ipld::List(triggers)) = field(&mut list, "triggers") else { panic!("{name}: triggers") };
    let (mut compound, mut single) = (sources.two(triggers[0].clone()), sources.simple(triggers[0].clone()));
    set(&mut compound, "id", Ipld::String("compound-trigger".into()));
    set(&mut single, "id", Ipld::String("single-source-trigger".into()));
    *triggers = vec![compound, single];
    cases.push(response_case(name, MIXED, since(name), list, session));

    let name = "GetSessionResponse";
    cases.push(response_case(name, COMPOUND, since(name), sources.two(example_of(defs, name)), session));
    // Protocol 1 `GetAgentResponse.sessions` come from the legacy facts, not from the response.
    let name = "GetAgentResponse";
    let legacy = typed::<SessionInfo>(sources.two(example_of(defs, "SessionInfo")));
    cases.push(response_case(name, COMPOUND, since(name), example_of(defs, name), &legacy));
    let name = "ChangeFrame";
    let mut change = example_of(defs, name);
    set(&mut change, "key", Ipld::String("sessions/id".into()));
    set(&mut change, "value", sources.two(example_of(defs, "SessionInfo")));
    cases.push(frame_case(name, COMPOUND, since(name), change));

    let mut error = example_of(defs, "Error");
    set(&mut error, "code", Ipld::String(compat::PROTOCOL_TOO_OLD.into()));
    cases.push(response_case("Error", TOO_OLD, since("Error"), error, session));
    cases
}

fn field<'a>(value: &'a mut Ipld, key: &str) -> Option<&'a mut Ipld> {
    match value {
        Ipld::Map(map) => map.get_mut(key),
        _ => None,
    }
}

fn set(value: &mut Ipld, key: &str, new: Ipld) {
    let Ipld::Map(map) = value else { panic!("{key}: not in a map") };
    map.insert(key.to_owned(), new);
}

/// `value` with every compound (`activity`) trigger source replaced by `source`, and, when
/// `matched` is given, every `matchedConditions` beside such a source replaced by it.
fn with_sources(mut value: Ipld, source: &Ipld, matched: Option<&Ipld>) -> Ipld {
    fn go(value: &mut Ipld, source: &Ipld, matched: Option<&Ipld>) {
        match value {
            Ipld::Map(map) => {
                let activity = Ipld::String("activity".into());
                if matches!(map.get("source"), Some(Ipld::Map(old)) if old.get("type") == Some(&activity)) {
                    map.insert("source".to_owned(), source.clone());
                    if let (Some(matched), Some(old)) = (matched, map.get_mut("matchedConditions")) {
                        *old = matched.clone();
                    }
                }
                map.values_mut().for_each(|child| go(child, source, matched));
            }
            Ipld::List(items) => items.iter_mut().for_each(|item| go(item, source, matched)),
            _ => {}
        }
    }
    go(&mut value, source, matched);
    value
}

fn render(seen: &Seen) -> String {
    match seen {
        Seen::Cbor(bytes) => render_cbor(bytes),
        Seen::Refused(status, bytes) => format!("refused: HTTP {status}\n\n{}", render_cbor(bytes)),
        Seen::Json(text) => format!("{text}\n"),
    }
}

fn render_cbor(bytes: &[u8]) -> String {
    let hex = hex::encode(bytes);
    let lines: Vec<&str> =
        hex.as_bytes().chunks(64).map(|chunk| std::str::from_utf8(chunk).unwrap_or_default()).collect();
    format!(
        "hex ({} bytes):\n{}\n\ndiagnostic:\n{}\n",
        bytes.len(),
        lines.join("\n"),
        wire::diagnostic(bytes).expect("diagnostic")
    )
}

fn settings(protocol: u32, description: String) -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(format!("../../snapshots/payloads/v{protocol}"));
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    settings.set_description(description);
    settings
}

/// Snapshots every case whose name starts with `kind-`; returns how many plain (not variant)
/// payloads there are.
fn snapshot_kind(kind: &str) -> usize {
    let cases: Vec<&Case> = CASES.iter().filter(|case| case.name.starts_with(&format!("{kind}-"))).collect();
    for case in &cases {
        for (protocol, seen) in &case.seen {
            settings(*protocol, format!("protocol {protocol}: {}", case.about)).bind(|| {
                insta::assert_snapshot!(case.name.clone(), render(seen));
            });
        }
    }
    cases.iter().filter(|case| !case.variant).count()
}

#[test]
fn every_action_as_each_protocol_sends_it() {
    assert!(snapshot_kind("action") >= 74);
}

#[test]
fn every_response_as_each_protocol_receives_it() {
    assert!(snapshot_kind("response") >= 68);
}

#[test]
fn every_frame_as_each_protocol_receives_it() {
    assert!(snapshot_kind("frame") >= 6);
}

/// Per protocol: every case that is not as in the current protocol.
fn index(protocol: u32) -> String {
    let current = AGENTS_PROTOCOL_VERSION;
    let mut counts = BTreeMap::new();
    let mut lines = Vec::new();
    for case in CASES.iter() {
        let outcome = case.outcome(protocol);
        *counts.entry(format!("{outcome:?}")).or_insert(0) += 1;
        let status = match outcome {
            Some(Outcome::Same) => continue,
            Some(Outcome::Differs) => format!("differs from protocol {current}"),
            Some(Outcome::Refused) => "refused".to_owned(),
            None => "left out".to_owned(),
        };
        let newer = if case.since > protocol { format!(" (new in protocol {})", case.since) } else { String::new() };
        lines.push(format!("{}: {status}{newer}", case.name));
    }
    lines.sort_by(|a, b| a.split(':').next().cmp(&b.split(':').next()));
    let count = |key: &str| counts.get(key).copied().unwrap_or(0);
    format!(
        "protocol {protocol} (current {current}): {} cases; {} as in protocol {current}, {} differ, {} refused, {} left out\n\n{}\n",
        CASES.len(),
        count("Some(Same)"),
        count("Some(Differs)"),
        count("Some(Refused)"),
        count("None"),
        lines.join("\n")
    )
}

#[test]
fn each_protocol_has_an_index_of_what_differs() {
    for protocol in protocols() {
        let about = format!("protocol {protocol}: the snapshots that are not as in the current protocol");
        settings(protocol, about).bind(|| insta::assert_snapshot!("index", index(protocol)));
    }
}

fn seen_map(protocol: u32, name: &str) -> BTreeMap<String, Ipld> {
    let case = CASES.iter().find(|case| case.name == name).unwrap_or_else(|| panic!("no case {name}"));
    match &case.seen[&protocol] {
        Seen::Cbor(bytes) | Seen::Refused(_, bytes) => match wire::decode_ipld(bytes).expect("cbor") {
            Ipld::Map(map) => map,
            other => panic!("{name}: {other:?}"),
        },
        Seen::Json(text) => panic!("{name}: a frame, {text}"),
    }
}

/// Each shim's effect shows in some snapshot: a guard that the examples keep exercising them.
#[test]
fn every_shim_shows_in_a_snapshot() {
    use Outcome::{Differs, Refused, Same};
    let expected = [
        // 3 → 2: compound trigger sources.
        (2, "action-CombineAgentTriggers", Refused),
        (2, "action-CreateAgentTrigger", Refused),
        (2, "action-CreateAgentTrigger-simple", Same),
        (2, "action-UpdateAgentTrigger", Refused),
        (2, "action-UpdateAgentTrigger-simple", Same),
        (2, "response-GetAgentTriggerResponse", Refused),
        (2, "response-GetAgentTriggerResponse-simple", Same),
        (2, "response-ListAgentTriggersResponse-mixed", Differs),
        (2, "response-GetSessionResponse-compound", Differs),
        (2, "frame-ChangeFrame-compound", Differs),
        // 2 → 1: GetAgent sessions, error codes.
        (2, "response-GetAgentResponse", Same),
        (1, "response-GetAgentResponse", Differs),
        (2, "response-Error", Same),
        (1, "response-Error", Differs),
        (1, "response-Error-protocol_too_old", Same),
        (1, "frame-ErrorFrame", Differs),
    ];
    for (protocol, name, outcome) in expected.into_iter().filter(|(protocol, ..)| protocols().contains(protocol)) {
        let case = CASES.iter().find(|case| case.name == name).unwrap_or_else(|| panic!("no case {name}"));
        assert_eq!(case.outcome(protocol), Some(outcome), "{name} for protocol {protocol}");
    }
    if protocols().contains(&1) {
        let get_agent = seen_map(1, "response-GetAgentResponse");
        assert!(matches!(&get_agent["sessions"], Ipld::List(sessions) if sessions.len() == 1));
        assert!(!get_agent.contains_key("sessionCount"));
        assert!(!seen_map(1, "response-Error").contains_key("code"));
        assert!(!seen_map(1, "action-CombineAgentTriggers").contains_key("code"));
    }
    let combine = seen_map(2, "action-CombineAgentTriggers");
    assert_eq!(combine["code"], Ipld::String(compat::UPDATE_REQUIRED.into()));
    let list = seen_map(2, "response-ListAgentTriggersResponse-mixed");
    let Ipld::List(triggers) = &list["triggers"] else { panic!("triggers") };
    let ids: Vec<&Ipld> =
        triggers.iter().filter_map(|t| if let Ipld::Map(t) = t { t.get("id") } else { None }).collect();
    assert_eq!(ids, [&Ipld::String("single-source-trigger".into())]);
}

/// Every file under `snapshots/payloads/` belongs to a supported protocol and a current case, so
/// a removed action or a retired protocol leaves no snapshot behind. (Missing snapshots are
/// insta's to report: with `CI` set it fails instead of writing them.)
#[test]
fn no_snapshot_file_is_left_over() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../snapshots/payloads");
    let names = |dir: &Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries.map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned()).collect()
            })
            .unwrap_or_default()
    };
    let folders: BTreeSet<String> = protocols().map(|protocol| format!("v{protocol}")).collect();
    let strays: Vec<String> = names(&root).difference(&folders).cloned().collect();
    assert!(
        strays.is_empty(),
        "snapshots/payloads holds one folder per supported protocol; {} left over, first {:?}",
        strays.len(),
        strays.first()
    );
    for protocol in protocols() {
        let expected: BTreeSet<String> = CASES
            .iter()
            .filter(|case| case.seen.contains_key(&protocol))
            .map(|case| format!("{}.snap", case.name))
            .chain(["index.snap".to_owned()])
            .collect();
        let left_over: Vec<String> = names(&root.join(format!("v{protocol}")))
            .into_iter()
            .filter(|name| name.ends_with(".snap") && !expected.contains(name))
            .collect();
        assert!(left_over.is_empty(), "snapshots/payloads/v{protocol}: no case writes {left_over:?}; delete them");
    }
}
