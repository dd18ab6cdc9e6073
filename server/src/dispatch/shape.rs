//! Upstream's messages for fields whose wrong type typed decoding would otherwise report in
//! serde's words.
//!
//! Typed decoding refuses a map that does not fit the generated type, with a message such as
//! ``invalid type: string "x", expected a boolean``. Where upstream checks a field by hand and
//! clients may show its message, the same check runs here first on the generic value, with
//! upstream's text. Everything else falls back to `<field> is required` (a missing field) or
//! `Invalid <Action>: <reason>`. One check of our own comes first too: [`integers_fit`] refuses
//! integers below -2^63, which the protocol's unions cannot read back.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;

use crate::error::{ApiError, ApiResult};

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
pub(super) fn check(action: &str, fields: &BTreeMap<String, Ipld>) -> ApiResult<()> {
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

/// Applies [`LENIENT_INTEGERS`] to `action`'s fields before typed decoding, and turns a trigger
/// source's legacy singular `mentionedAccount` into `mentionedAccounts`.
pub(super) fn lenient(action: &str, fields: &mut BTreeMap<String, Ipld>) {
    match action {
        "CreateAgentTrigger" => {
            fields.get_mut("trigger").into_iter().for_each(crate::triggers::validate::legacy_mentions)
        }
        "UpdateAgentTrigger" => {
            fields.get_mut("patch").into_iter().for_each(crate::triggers::validate::legacy_mentions)
        }
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
pub(super) fn integers_fit(action: &str, value: &Ipld) -> ApiResult<()> {
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
pub(super) fn decode_error(action: &str, reason: &str) -> ApiError {
    if let Some(field) = reason.strip_prefix("missing field `").and_then(|rest| rest.split('`').next()) {
        return match LABELS.iter().find(|(name, _)| *name == field) {
            Some((_, label)) if label.starts_with("Invalid") => ApiError::invalid(*label),
            Some((_, label)) => ApiError::invalid(format!("{label} is required")),
            None => ApiError::invalid(format!("{field} is required")),
        };
    }
    ApiError::invalid(format!("Invalid {action}: {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, Ipld)]) -> BTreeMap<String, Ipld> {
        entries.iter().map(|(key, value)| ((*key).to_owned(), value.clone())).collect()
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
            lenient("ListRuns", &mut fields);
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
        lenient("ListSessions", &mut untouched);
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
        assert_eq!(error.kind(), crate::error::ErrorKind::Invalid);
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
