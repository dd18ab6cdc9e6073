//! Protocol 3 → 2: compound (`activity`) trigger sources and `CombineAgentTriggers`.
//!
//! Changelog entry served (schema/PROTOCOL.md, protocol 3): trigger sources gained the `activity`
//! member, holding 1 to 32 conditions, and `CombineAgentTriggers` arrived. A protocol 2 client
//! cannot represent such a rule, and an incomplete rule shown or saved back would be wrong, so:
//!
//! - it may not send a compound source or `CombineAgentTriggers` (426 `update_required`);
//! - reading, creating or updating one trigger whose source is compound answers 426
//!   `update_required` instead of the trigger;
//! - trigger lists leave compound triggers out (single-source triggers stay fully usable);
//! - a session's trigger attribution (`startedByTrigger`, `triggerContext`), which is display only,
//!   shows the condition that matched (else the first) as a simple source.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::AgentWsEvent;

use crate::Refusal;
use crate::walk::{each_map, tag};

const COMBINE: &str = "Combining triggers needs a newer version of the app. Update the app to continue.";
const COMPOUND_INPUT: &str =
    "Triggers with several conditions need a newer version of the app. Update the app to continue.";
const COMPOUND_TRIGGER: &str =
    "This trigger has several conditions, which this version of the app cannot show. Update the app to see or edit it.";

fn is_compound(source: Option<&Ipld>) -> bool {
    matches!(source, Some(Ipld::Map(source)) if tag(source, "type") == Some("activity"))
}

fn field<'a>(map: &'a BTreeMap<String, Ipld>, key: &str) -> Option<&'a BTreeMap<String, Ipld>> {
    match map.get(key) {
        Some(Ipld::Map(inner)) => Some(inner),
        _ => None,
    }
}

/// Refuses what a protocol 2 client cannot mean.
pub fn upgrade_action(name: &str, action: Ipld) -> Result<Ipld, Refusal> {
    let Ipld::Map(map) = &action else { return Ok(action) };
    let compound = match name {
        "CombineAgentTriggers" => return Err(Refusal::update_required(COMBINE)),
        "CreateAgentTrigger" => field(map, "trigger").is_some_and(|trigger| is_compound(trigger.get("source"))),
        "UpdateAgentTrigger" => field(map, "patch").is_some_and(|patch| is_compound(patch.get("source"))),
        _ => false,
    };
    if compound {
        return Err(Refusal::update_required(COMPOUND_INPUT));
    }
    Ok(action)
}

/// Rewrites a response for a protocol 2 client.
pub fn downgrade_response(response: Ipld) -> Result<Ipld, Refusal> {
    let Ipld::Map(mut map) = response else { return Ok(response) };
    match tag(&map, "_") {
        Some("GetAgentTriggerResponse" | "CreateAgentTriggerResponse" | "UpdateAgentTriggerResponse")
            if field(&map, "trigger").is_some_and(|trigger| is_compound(trigger.get("source"))) =>
        {
            return Err(Refusal::update_required(COMPOUND_TRIGGER));
        }
        Some("ListAgentTriggersResponse") => {
            if let Some(Ipld::List(triggers)) = map.get_mut("triggers") {
                triggers.retain(|trigger| !matches!(trigger, Ipld::Map(t) if is_compound(t.get("source"))));
            }
        }
        _ => {}
    }
    let mut response = Ipld::Map(map);
    simplify_attributions(&mut response);
    Ok(response)
}

/// Rewrites a WebSocket frame for a protocol 2 client (session attributions in change frames).
pub fn downgrade_frame(frame: AgentWsEvent) -> AgentWsEvent {
    match frame {
        AgentWsEvent::ChangeFrame(mut frame) => {
            let mut value = frame.value.into_ipld();
            simplify_attributions(&mut value);
            frame.value = value.into();
            AgentWsEvent::ChangeFrame(frame)
        }
        other => other,
    }
}

/// Replaces compound sources in `startedByTrigger` / `triggerContext` maps with one simple source.
pub fn simplify_attributions(value: &mut Ipld) {
    each_map(value, &mut |key, map| {
        if !matches!(key, Some("startedByTrigger" | "triggerContext")) || !is_compound(map.get("source")) {
            return;
        }
        let matched = match map.get("matchedConditions") {
            Some(Ipld::List(conditions)) => conditions.first().cloned(),
            _ => None,
        };
        let first = match map.get("source") {
            Some(Ipld::Map(source)) => match source.get("conditions") {
                Some(Ipld::List(conditions)) => conditions.first().cloned(),
                _ => None,
            },
            _ => None,
        };
        let simple = matched.or(first).and_then(|condition| match condition {
            Ipld::Map(mut condition) => condition.remove("source"),
            _ => None,
        });
        if let Some(simple) = simple {
            map.insert("source".to_owned(), simple);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: Vec<(&str, Ipld)>) -> Ipld {
        Ipld::Map(entries.into_iter().map(|(key, value)| (key.to_owned(), value)).collect())
    }

    fn text(value: &str) -> Ipld {
        Ipld::String(value.into())
    }

    fn mention(account: &str) -> Ipld {
        map(vec![("type", text("user-mention")), ("mentionedAccounts", Ipld::List(vec![text(account)]))])
    }

    fn compound() -> Ipld {
        let condition = |id: &str, account: &str| map(vec![("id", text(id)), ("source", mention(account))]);
        map(vec![
            ("type", text("activity")),
            ("conditions", Ipld::List(vec![condition("c1", "a"), condition("c2", "b")])),
        ])
    }

    fn trigger(id: &str, source: Ipld) -> Ipld {
        map(vec![("id", text(id)), ("source", source)])
    }

    #[test]
    fn compound_inputs_and_combining_are_refused() {
        let combine = map(vec![("_", text("CombineAgentTriggers"))]);
        assert_eq!(upgrade_action("CombineAgentTriggers", combine).unwrap_err().code, "update_required");
        let create = map(vec![("_", text("CreateAgentTrigger")), ("trigger", map(vec![("source", compound())]))]);
        assert_eq!(upgrade_action("CreateAgentTrigger", create).unwrap_err().status, 426);
        let patch = map(vec![("_", text("UpdateAgentTrigger")), ("patch", map(vec![("source", compound())]))]);
        assert!(upgrade_action("UpdateAgentTrigger", patch).is_err());
        let simple = map(vec![("_", text("CreateAgentTrigger")), ("trigger", map(vec![("source", mention("a"))]))]);
        assert_eq!(upgrade_action("CreateAgentTrigger", simple.clone()).unwrap(), simple);
    }

    #[test]
    fn one_compound_trigger_is_refused_and_lists_leave_them_out() {
        let get = map(vec![("_", text("GetAgentTriggerResponse")), ("trigger", trigger("t1", compound()))]);
        assert_eq!(downgrade_response(get).unwrap_err().code, "update_required");
        let simple = map(vec![("_", text("GetAgentTriggerResponse")), ("trigger", trigger("t2", mention("a")))]);
        assert_eq!(downgrade_response(simple.clone()).unwrap(), simple);
        let list = map(vec![
            ("_", text("ListAgentTriggersResponse")),
            ("triggers", Ipld::List(vec![trigger("t1", compound()), trigger("t2", mention("a"))])),
        ]);
        let expected = map(vec![
            ("_", text("ListAgentTriggersResponse")),
            ("triggers", Ipld::List(vec![trigger("t2", mention("a"))])),
        ]);
        assert_eq!(downgrade_response(list).unwrap(), expected);
    }

    #[test]
    fn attributions_show_the_matched_condition_as_a_simple_source() {
        let matched = Ipld::List(vec![map(vec![("id", text("c2")), ("source", mention("b"))])]);
        let summary = map(vec![("source", compound()), ("matchedConditions", matched.clone())]);
        let session = map(vec![("id", text("s")), ("startedByTrigger", summary)]);
        let response = map(vec![("_", text("ListSessionsResponse")), ("sessions", Ipld::List(vec![session]))]);
        let out = downgrade_response(response).unwrap();
        let expected_summary = map(vec![("source", mention("b")), ("matchedConditions", matched)]);
        let expected_session = map(vec![("id", text("s")), ("startedByTrigger", expected_summary)]);
        let expected = map(vec![("_", text("ListSessionsResponse")), ("sessions", Ipld::List(vec![expected_session]))]);
        assert_eq!(out, expected);
        // Without matched conditions, the first condition stands in.
        let context =
            map(vec![("_", text("GetSessionResponse")), ("triggerContext", map(vec![("source", compound())]))]);
        let out = downgrade_response(context).unwrap();
        let expected =
            map(vec![("_", text("GetSessionResponse")), ("triggerContext", map(vec![("source", mention("a"))]))]);
        assert_eq!(out, expected);
    }

    #[test]
    fn change_frames_are_simplified_too() {
        let session = map(vec![("startedByTrigger", map(vec![("source", compound())]))]);
        let frame = AgentWsEvent::ChangeFrame(seed_agents_protocol::generated::ChangeFrame::new("sessions/s", session));
        let AgentWsEvent::ChangeFrame(out) = downgrade_frame(frame) else { panic!("still a change frame") };
        assert_eq!(out.value.into_ipld(), map(vec![("startedByTrigger", map(vec![("source", mention("a"))]))]));
    }
}
