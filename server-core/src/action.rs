//! From a verified action map to its typed action: what the server does to an action before its
//! handler runs.
//!
//! [`decode`] reads a few fields leniently, as upstream does ([`lenient`]), runs upstream's hand
//! checks of a few fields, refuses integers no union can read back, and decodes the map as the
//! action's generated type. The server's `dispatch` runs the compat upgrade for the caller's
//! protocol first, then [`decode`] for the routed action's type; [`decode_named`] does the same
//! for any action of the protocol by its name (what the `actions` fuzz target drives).
//!
//! Typed decoding refuses a map that does not fit the generated type, with a message such as
//! ``invalid type: string "x", expected a boolean``. Where upstream checks a field by hand and
//! clients may show its message, the same check runs here first on the generic value, with
//! upstream's text. Everything else falls back to `<field> is required` (a missing field) or
//! `Invalid <Action>: <reason>`. One check of our own comes first too: `integers_fit` refuses
//! integers below -2^63, which the protocol's unions cannot read back.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::action::{ActionType, ActionVisitor};
use seed_agents_protocol::{ActionInfo, AgentAction, wire};

use crate::error::{ApiError, ApiResult};

/// Decodes a verified action map as `A`, the type of the action named `name`: [`lenient`], the
/// hand checks with upstream's messages, then typed decoding (400 when the fields do not fit).
pub fn decode<A: serde::de::DeserializeOwned>(name: &str, mut action: Ipld) -> ApiResult<A> {
    if let Ipld::Map(fields) = &mut action {
        lenient_fields(name, fields);
        check(name, fields)?;
    }
    integers_fit(name, &action)?;
    wire::from_ipld(action).map_err(|error| match error {
        wire::WireError::Decode(reason) | wire::WireError::Encode(reason) => decode_error(name, &reason),
    })
}

/// Everything the server does to an action before its handler runs, for any action of the
/// protocol by its name: the compat upgrade from the client's `protocol`, then [`decode`] as the
/// named action's generated type (the value is dropped). A name the protocol does not know is
/// refused as [`unrouted`] refuses it.
pub fn decode_named(protocol: u32, name: &str, action: Ipld) -> ApiResult<()> {
    struct Decode<'a> {
        name: &'a str,
        action: Ipld,
    }
    impl ActionVisitor for Decode<'_> {
        type Output = ApiResult<()>;
        fn visit<A: ActionType>(self) -> ApiResult<()> {
            decode::<A>(self.name, self.action).map(drop)
        }
    }
    let action = seed_agents_compat::upgrade_action(protocol, name, action)?;
    AgentAction::visit(name, Decode { name, action }).unwrap_or_else(|| Err(unrouted(name)))
}

/// The answer to an action the server does not route: 501 for one the protocol knows (not
/// implemented yet), 400 `Unsupported action: <name>` for any other name.
pub fn unrouted(name: &str) -> ApiError {
    match ActionInfo::find(name) {
        Some(_) => ApiError::not_implemented(format!("{name} is not supported by this server yet")),
        None => ApiError::invalid(format!("Unsupported action: {name}")),
    }
}

/// What a field must hold.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// A byte string (present).
    Bytes,
    /// A boolean (present).
    Bool,
    /// One of these strings (present).
    OneOf(&'static [&'static str]),
    /// Absent, or an integer ≥ 0.
    OptionalNonNegative,
    /// An integer ≥ 0 (present).
    NonNegative,
    /// A string or a byte string (present).
    TextOrBytes,
}

/// (action, field, what it must hold, upstream's message).
const RULES: &[(&str, &str, Want, &str)] = &[
    ("SetSecret", "value", Want::Bytes, "Secret value is required"),
    (
        "InviteAgentCollaborator",
        "role",
        Want::OneOf(&["reader", "writer"]),
        "Collaborator role must be reader or writer",
    ),
    ("SetAgentPublicRead", "publicRead", Want::Bool, "publicRead must be a boolean"),
    ("SetAgentPublicChat", "publicChat", Want::Bool, "publicChat must be a boolean"),
    ("GetSession", "afterSeq", Want::OptionalNonNegative, "afterSeq must be a non-negative integer"),
    ("GetSession", "beforeSeq", Want::OptionalNonNegative, "beforeSeq must be a non-negative integer"),
    ("Subscribe", "afterSeq", Want::OptionalNonNegative, "afterSeq must be a non-negative integer"),
    ("GetRunJournal", "afterSeq", Want::OptionalNonNegative, "afterSeq must be a non-negative integer"),
    ("GetSessionEvent", "seq", Want::NonNegative, "seq must be a non-negative integer"),
    ("WriteAgentMemoryFile", "content", Want::TextOrBytes, "Memory file content must be a string or bytes"),
    ("InvokeSessionTool", "verb", Want::OneOf(&["read", "write", "call"]), "verb must be read, write, or call"),
];

/// Labels upstream uses for `<label> is required`.
const LABELS: &[(&str, &str)] = &[
    ("agentId", "Agent ID"),
    ("sessionId", "Session ID"),
    ("definition", "Agent definition"),
    ("provider", "Provider config"),
    ("accountId", "Collaborator account"),
    ("name", "Name"),
    ("capability", "Invalid capability bytes"),
];

/// Runs the hand checks for `action`.
fn check(action: &str, fields: &BTreeMap<String, Ipld>) -> ApiResult<()> {
    for (name, field, want, message) in RULES {
        if *name != action {
            continue;
        }
        let value = fields.get(*field);
        let fits = match (want, value) {
            (Want::Bytes, Some(Ipld::Bytes(_))) | (Want::Bool, Some(Ipld::Bool(_))) => true,
            (Want::OneOf(allowed), Some(Ipld::String(text))) => allowed.contains(&text.as_str()),
            (Want::OptionalNonNegative, None) => true,
            (Want::OptionalNonNegative | Want::NonNegative, Some(Ipld::Integer(n))) => *n >= 0,
            (Want::TextOrBytes, Some(Ipld::String(_) | Ipld::Bytes(_))) => true,
            _ => false,
        };
        if !fits {
            return Err(ApiError::invalid(*message));
        }
    }
    Ok(())
}

/// Fields upstream reads leniently with its `boundedInteger`: a non-integer number is floored, and
/// anything that is not a finite number counts as absent (the default applies).
const LENIENT_INTEGERS: &[(&str, &str)] = &[("ListRuns", "limit")];

/// What the server does to a few fields of the action named `name` before typed decoding, as
/// upstream reads them leniently: `LENIENT_INTEGERS` (`ListRuns.limit`: a fraction is floored, a
/// non-number dropped), and a trigger source's legacy singular `mentionedAccount` becomes
/// `mentionedAccounts` ([`legacy_mentions`]). [`decode`] applies it; the fuzz targets apply it
/// before they compare with the protocol's own decoding.
pub fn lenient(name: &str, action: &mut Ipld) {
    if let Ipld::Map(fields) = action {
        lenient_fields(name, fields);
    }
}

fn lenient_fields(action: &str, fields: &mut BTreeMap<String, Ipld>) {
    match action {
        "CreateAgentTrigger" => fields.get_mut("trigger").into_iter().for_each(legacy_mentions),
        "UpdateAgentTrigger" => fields.get_mut("patch").into_iter().for_each(legacy_mentions),
        _ => {}
    }
    for (name, field) in LENIENT_INTEGERS {
        if *name != action {
            continue;
        }
        match fields.get(*field) {
            None | Some(Ipld::Integer(_)) => {}
            Some(Ipld::Float(value)) if value.is_finite() => {
                // Saturating: a huge limit is clamped later anyway.
                let floored = value.floor().clamp(i64::MIN as f64, i64::MAX as f64) as i64;
                fields.insert((*field).to_owned(), Ipld::Integer(floored.into()));
            }
            Some(_) => {
                fields.remove(*field);
            }
        }
    }
}

/// Refuses an action holding, anywhere, an integer below `i64::MIN` (CBOR goes down to -2^64).
///
/// Typed decoding of the action itself takes one, into an open `Value`, but serde buffers the
/// members of a union (`AgentResponse`, `SessionEventPayload`, …) in a form without 128-bit
/// integers (serde issue 1682), so every response or event that later carried the stored value
/// would fail to decode: in the SDK, for every reader of a shared agent, and in the server's own
/// idempotent replays.
fn integers_fit(action: &str, value: &Ipld) -> ApiResult<()> {
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        match value {
            Ipld::Integer(n) if *n < i128::from(i64::MIN) => {
                return Err(ApiError::invalid(format!("Invalid {action}: integer {n} is below -2^63")));
            }
            Ipld::List(items) => pending.extend(items),
            Ipld::Map(entries) => pending.extend(entries.values()),
            _ => {}
        }
    }
    Ok(())
}

/// The 400 for a map that typed decoding refused.
fn decode_error(action: &str, reason: &str) -> ApiError {
    if let Some(field) = reason.strip_prefix("missing field `").and_then(|rest| rest.split('`').next()) {
        return match LABELS.iter().find(|(name, _)| *name == field) {
            Some((_, label)) if label.starts_with("Invalid") => ApiError::invalid(*label),
            Some((_, label)) => ApiError::invalid(format!("{label} is required")),
            None => ApiError::invalid(format!("{field} is required")),
        };
    }
    ApiError::invalid(format!("Invalid {action}: {reason}"))
}

/// Rewrites, anywhere in `value`, a `user-mention` source's legacy singular `mentionedAccount`
/// into `mentionedAccounts` (docs/protocol.md §E.1: the seed still accepts it on input). A
/// source that already has `mentionedAccounts` keeps it; the singular key is dropped either way.
/// Runs on the generic value, before typed decoding would refuse the source.
pub fn legacy_mentions(value: &mut Ipld) {
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        match value {
            Ipld::Map(fields) => {
                let is_mention = matches!(fields.get("type"), Some(Ipld::String(kind)) if kind == "user-mention");
                if is_mention
                    && let Some(single) = fields.remove("mentionedAccount")
                    && !fields.contains_key("mentionedAccounts")
                {
                    fields.insert("mentionedAccounts".to_owned(), Ipld::List(vec![single]));
                }
                pending.extend(fields.values_mut());
            }
            Ipld::List(items) => pending.extend(items.iter_mut()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn map(entries: &[(&str, Ipld)]) -> BTreeMap<String, Ipld> {
        entries.iter().map(|(key, value)| ((*key).to_owned(), value.clone())).collect()
    }

    fn action(name: &str, fields: &[(&str, Ipld)]) -> Ipld {
        let mut fields = map(fields);
        fields.insert("_".into(), Ipld::String(name.into()));
        fields.insert("ts".into(), Ipld::Integer(1));
        Ipld::Map(fields)
    }

    #[test]
    fn a_legacy_singular_mentioned_account_is_normalised() {
        use seed_agents_protocol::generated::{AgentTriggerSource, CreateAgentTrigger};
        let text = |value: &str| Ipld::String(value.into());
        let source = Ipld::Map(map(&[("type", text("user-mention")), ("mentionedAccount", text("z6MkAlice"))]));
        let trigger = Ipld::Map(map(&[("name", text("m")), ("prompt", text("p")), ("source", source)]));
        let create = action("CreateAgentTrigger", &[("agentId", text("a")), ("trigger", trigger)]);
        let decoded: CreateAgentTrigger = decode("CreateAgentTrigger", create).unwrap();
        let AgentTriggerSource::UserMentionSource(source) = decoded.trigger.source else { panic!("not a mention") };
        assert_eq!(source.mentioned_accounts, ["z6MkAlice"]);
        assert!(source.extra.is_empty(), "the singular key is gone: {:?}", source.extra);
        // A source with both keeps its list.
        let both = Ipld::Map(map(&[
            ("type", text("user-mention")),
            ("mentionedAccount", text("z6MkAlice")),
            ("mentionedAccounts", Ipld::List(vec![text("z6MkBob")])),
        ]));
        let trigger = Ipld::Map(map(&[("name", text("m")), ("source", both)]));
        let create = action("CreateAgentTrigger", &[("agentId", text("a")), ("trigger", trigger)]);
        let decoded: CreateAgentTrigger = decode("CreateAgentTrigger", create).unwrap();
        let AgentTriggerSource::UserMentionSource(source) = decoded.trigger.source else { panic!("not a mention") };
        assert_eq!(source.mentioned_accounts, ["z6MkBob"]);
    }

    #[test]
    fn decoding_by_name_answers_as_the_server_would() {
        let kind = |protocol, name, value| decode_named(protocol, name, value).unwrap_err().kind();
        assert!(decode_named(3, "ListAgents", action("ListAgents", &[])).is_ok());
        let missing = decode_named(3, "GetAgent", action("GetAgent", &[])).unwrap_err();
        assert_eq!((missing.kind(), missing.message()), (ErrorKind::Invalid, "Agent ID is required"));
        let flag = [("agentId", Ipld::String("a".into())), ("publicRead", Ipld::Integer(1))];
        assert_eq!(kind(3, "SetAgentPublicRead", action("SetAgentPublicRead", &flag)), ErrorKind::Invalid);
        // A WebSocket-only action decodes as its own type too, with upstream's checks.
        let subscribe = [("afterSeq", Ipld::Integer(-1))];
        let error = decode_named(3, "Subscribe", action("Subscribe", &subscribe)).unwrap_err();
        assert_eq!(error.message(), "afterSeq must be a non-negative integer");
        assert_eq!(kind(3, "Nope", action("Nope", &[])), ErrorKind::Invalid);
        // An integer no union can read back, deep in an open value.
        let metadata = Ipld::Map(map(&[("n", Ipld::Integer(i128::from(i64::MIN) - 1))]));
        let secret = [("name", Ipld::String("k".into())), ("value", Ipld::Bytes(vec![1])), ("metadata", metadata)];
        assert_eq!(kind(3, "SetSecret", action("SetSecret", &secret)), ErrorKind::Invalid);
        // The compat upgrade runs first.
        let combine = action("CombineAgentTriggers", &[]);
        assert_eq!(kind(2, "CombineAgentTriggers", combine), ErrorKind::UpdateRequired);
    }

    #[test]
    fn unrouted_actions_are_not_implemented_and_unknown_names_unsupported() {
        let browser = unrouted("ConnectSessionBrowser");
        assert_eq!(browser.kind(), ErrorKind::NotImplemented);
        assert_eq!(browser.message(), "ConnectSessionBrowser is not supported by this server yet");
        let unknown = unrouted("Nope");
        assert_eq!((unknown.kind(), unknown.message()), (ErrorKind::Invalid, "Unsupported action: Nope"));
    }

    #[test]
    fn hand_checks_use_upstream_messages() {
        let message = |action, fields| check(action, &fields).unwrap_err().message().to_owned();
        assert_eq!(message("SetSecret", map(&[("value", Ipld::String("x".into()))])), "Secret value is required");
        assert_eq!(message("SetSecret", map(&[])), "Secret value is required");
        assert!(check("SetSecret", &map(&[("value", Ipld::Bytes(vec![]))])).is_ok());
        for bad in ["owner", "chatter", "Reader", ""] {
            let role = map(&[("role", Ipld::String(bad.into()))]);
            assert_eq!(message("InviteAgentCollaborator", role), "Collaborator role must be reader or writer");
        }
        for good in ["reader", "writer"] {
            assert!(check("InviteAgentCollaborator", &map(&[("role", Ipld::String(good.into()))])).is_ok());
        }
        let flag = map(&[("publicRead", Ipld::Integer(1))]);
        assert_eq!(message("SetAgentPublicRead", flag), "publicRead must be a boolean");
        let seq = map(&[("afterSeq", Ipld::Integer(-1))]);
        assert_eq!(message("GetSession", seq), "afterSeq must be a non-negative integer");
        assert_eq!(
            message("GetSession", map(&[("afterSeq", Ipld::Float(1.5))])),
            "afterSeq must be a non-negative integer"
        );
        assert!(check("GetSession", &map(&[])).is_ok());
        let content = map(&[("content", Ipld::Integer(1))]);
        assert_eq!(message("WriteAgentMemoryFile", content), "Memory file content must be a string or bytes");
        assert!(check("WriteAgentMemoryFile", &map(&[("content", Ipld::Bytes(vec![1]))])).is_ok());
        assert!(check("ListAgents", &map(&[("anything", Ipld::Null)])).is_ok());
        let verb = map(&[("verb", Ipld::String("delegate".into()))]);
        assert_eq!(message("InvokeSessionTool", verb), "verb must be read, write, or call");
    }

    #[test]
    fn lenient_integers_are_floored_or_dropped() {
        let limit = |value: Ipld| {
            let mut fields = map(&[("limit", value), ("other", Ipld::Float(1.5))]);
            lenient_fields("ListRuns", &mut fields);
            assert_eq!(fields.get("other"), Some(&Ipld::Float(1.5)), "other fields are left alone");
            fields.get("limit").cloned()
        };
        assert_eq!(limit(Ipld::Float(7.9)), Some(Ipld::Integer(7)));
        assert_eq!(limit(Ipld::Float(-2.5)), Some(Ipld::Integer(-3)));
        assert_eq!(limit(Ipld::Integer(20)), Some(Ipld::Integer(20)));
        assert_eq!(limit(Ipld::String("20".into())), None);
        assert_eq!(limit(Ipld::Null), None);
        assert_eq!(limit(Ipld::Float(f64::INFINITY)), None);
        let mut untouched = map(&[("limit", Ipld::Float(2.5))]);
        lenient_fields("ListSessions", &mut untouched);
        assert_eq!(untouched.get("limit"), Some(&Ipld::Float(2.5)));
        let seq = |value| check("GetSessionEvent", &map(&[("seq", value)])).map_err(|error| error.message().to_owned());
        assert_eq!(seq(Ipld::Integer(-1)), Err("seq must be a non-negative integer".into()));
        assert_eq!(seq(Ipld::Float(1.5)), Err("seq must be a non-negative integer".into()));
        assert!(seq(Ipld::Integer(3)).is_ok());
        assert!(check("GetSessionEvent", &map(&[])).is_err(), "seq is required");
    }

    #[test]
    fn integers_below_i64_are_refused_at_any_depth() {
        let below = Ipld::Integer(i128::from(i64::MIN) - 1);
        let nested = Ipld::Map(map(&[("a", Ipld::List(vec![Ipld::Null, Ipld::Map(map(&[("b", below.clone())]))]))]));
        let error = integers_fit("SetSecret", &nested).unwrap_err();
        assert_eq!(error.message(), "Invalid SetSecret: integer -9223372036854775809 is below -2^63");
        assert_eq!(error.kind(), ErrorKind::Invalid);
        assert!(integers_fit("SetSecret", &below).is_err());
        let fits = [Ipld::Integer(i64::MIN.into()), Ipld::Integer(u64::MAX.into()), Ipld::Float(-1e30)];
        assert!(integers_fit("SetSecret", &Ipld::List(fits.to_vec())).is_ok());
    }

    #[test]
    fn missing_fields_are_named_with_upstream_labels() {
        assert_eq!(decode_error("GetAgent", "missing field `agentId`").message(), "Agent ID is required");
        assert_eq!(decode_error("X", "missing field `zeta`").message(), "zeta is required");
        assert_eq!(
            decode_error("X", "invalid type: integer `5`, expected a string").message(),
            "Invalid X: invalid type: integer `5`, expected a string"
        );
    }
}
