//! `call <Action> [JSON | @FILE | -]`: the generic path, as `gh api` is for GitHub.
//!
//! The JSON becomes an IPLD map, `_` names the action, and the map is decoded into this build's
//! `AgentAction` before anything is signed: a missing field or a wrong type is a usage error, and
//! so is a field the decoding would drop (a typo, or a field this build does not know), named by
//! its path. The SDK signs and sends it (`Client::send`), and the response is printed.

use std::io::Read as _;

use ipld_core::ipld::Ipld;
use seed_agents_sdk::protocol::{ActionInfo, AgentAction, generated::ACTIONS, wire};

use super::Context;
use crate::args::{Call, Format};
use crate::failure::Failure;
use crate::jq::Filter;
use crate::json;
use crate::output::{self, Output};

/// Runs `call`.
pub async fn call(context: &Context, args: Call) -> Result<(), Output> {
    if args.list {
        return list(args.format);
    }
    let name = args.action.as_deref().unwrap_or_default();
    let action = action(name, args.input.as_deref())?;
    let jq = args.jq.as_deref().map(Filter::new).transpose()?;
    let client = context.client()?;
    let response = client.send(&action).await?;
    output::response(&response, args.format, jq.as_ref())
}

/// The typed action named `name` with the fields `input` holds.
pub fn action(name: &str, input: Option<&str>) -> Result<AgentAction, Failure> {
    let info = ActionInfo::find(name)
        .ok_or_else(|| Failure::usage(format!("no action named {name}; `seed-agents call --list` lists them")))?;
    if !info.http {
        return Err(Failure::usage(format!("{name} is sent over the WebSocket: use `seed-agents subscribe`")));
    }
    let text = read_input(input)?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|error| Failure::usage(format!("the input is not JSON: {error}")))?;
    let Ipld::Map(mut fields) = json::to_ipld(value).map_err(Failure::usage)? else {
        return Err(Failure::usage("the input must be a JSON object of the action's fields"));
    };
    match fields.get("_") {
        Some(Ipld::String(named)) if named != name => {
            return Err(Failure::usage(format!("the input's \"_\" is {named}, not {name}")));
        }
        _ => {}
    }
    if fields.contains_key("ts") {
        return Err(Failure::usage("leave \"ts\" out: it is the signing time, added when the action is signed"));
    }
    fields.insert("_".to_owned(), Ipld::String(name.to_owned()));
    let input = Ipld::Map(fields);
    let action: AgentAction = wire::from_ipld(input.clone())
        .map_err(|error| Failure::usage(format!("the input does not fit {name}: {error}")))?;
    let typed = wire::to_ipld(&action).map_err(|error| Failure::usage(format!("cannot encode {name}: {error}")))?;
    let dropped = json::dropped_fields(&input, &typed);
    if !dropped.is_empty() {
        return Err(Failure::usage(format!(
            "{name} has no field {} in this build (protocol {}); check the spelling",
            dropped.join(", "),
            seed_agents_sdk::protocol::AGENTS_PROTOCOL_VERSION
        )));
    }
    Ok(action)
}

/// The input text: none is `{}`, `-` is stdin, `@FILE` is the file, anything else is the JSON.
fn read_input(input: Option<&str>) -> Result<String, Failure> {
    match input {
        None => Ok("{}".to_owned()),
        Some("-") => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|error| Failure::local(format!("cannot read stdin: {error}")))?;
            Ok(text)
        }
        Some(text) => match text.strip_prefix('@') {
            Some(path) => {
                std::fs::read_to_string(path).map_err(|error| Failure::local(format!("cannot read {path}: {error}")))
            }
            None => Ok(text.to_owned()),
        },
    }
}

/// Prints the action table: one object per action (`--format jsonl` one per line).
fn list(format: Format) -> Result<(), Output> {
    let rows: Vec<serde_json::Value> = ACTIONS
        .iter()
        .filter(|info| info.http)
        .map(|info| {
            serde_json::json!({
                "action": info.name,
                "response": info.response,
                "effect": info.effect.as_str(),
                "since": info.since,
            })
        })
        .collect();
    match format {
        Format::Jsonl => rows.iter().try_for_each(output::json_line),
        Format::Json | Format::Diag => output::json_pretty(&serde_json::Value::Array(rows)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::Class;

    #[test]
    fn inline_input_becomes_the_typed_action() {
        let typed = action("GetAgent", Some(r#"{"agentId": "a1"}"#)).unwrap();
        assert_eq!(
            wire::to_ipld(&typed).unwrap(),
            json::to_ipld(serde_json::json!({"_": "GetAgent", "agentId": "a1"})).unwrap()
        );
        assert!(action("ListAgents", None).is_ok());
    }

    #[test]
    fn bytes_fields_take_hex() {
        let typed = action("SetSecret", Some(r#"{"name": "k", "value": {"$bytes": "00ff"}}"#)).unwrap();
        let Ipld::Map(map) = wire::to_ipld(&typed).unwrap() else { panic!("a map") };
        assert_eq!(map["value"], Ipld::Bytes(vec![0, 255]));
    }

    #[test]
    fn bad_input_is_a_usage_failure_naming_the_problem() {
        let failure = |name: &str, input: &str| {
            let failure = action(name, Some(input)).unwrap_err();
            assert_eq!(failure.class, Class::Usage, "{}", failure.message);
            failure.message
        };
        assert!(failure("NoSuchAction", "{}").contains("--list"));
        assert!(failure("Subscribe", "{}").contains("subscribe"));
        assert!(failure("GetAgent", "{not json").contains("not JSON"));
        assert!(failure("GetAgent", "[1]").contains("JSON object"));
        assert!(failure("GetAgent", "{}").contains("agentId"));
        assert!(failure("GetAgent", r#"{"agentId": "a", "agentid": "b"}"#).contains(".agentid"));
        assert!(failure("GetAgent", r#"{"agentId": "a", "ts": 1}"#).contains("ts"));
        assert!(failure("GetAgent", r#"{"_": "ListAgents", "agentId": "a"}"#).contains("ListAgents"));
    }
}
