//! `call <Action> [JSON | @FILE | -]`: the generic path, as `gh api` is for GitHub; with
//! `--list`, `--describe` or `--describe-response`, the protocol explained instead
//! ([`crate::describe`]).
//!
//! The JSON is checked against the embedded schema at every depth ([`crate::check`]): an unknown
//! key, a missing field or a wrong type is a usage error naming its path. It then becomes an IPLD
//! map, `_` names the action, and the map is decoded into this build's `AgentAction` before
//! anything is signed; a field the decoding would drop is refused too. The SDK signs and sends it
//! (`Client::send`), and the response is printed; a response whose result reports a failure
//! exits [`Class::ResultFailed`].

use std::io::{IsTerminal as _, Read as _};

use seed_agents_sdk::protocol::{ActionInfo, AgentAction, AgentResponse, generated::ACTIONS, wire};
use seed_agents_sdk::types::ProviderOAuthStatusResponseStatus;

use super::Context;
use crate::args::{Call, Format};
use crate::check;
use crate::describe;
use crate::failure::{Class, Failure};
use crate::jq::Filter;
use crate::json;
use crate::output::{self, Output};

/// Runs `call`.
pub async fn call(context: &Context, args: Call) -> Result<(), Output> {
    let jq = args.jq.as_deref().map(Filter::new).transpose()?;
    if args.list {
        let rows = describe::list();
        return explained(&rows, args.format, jq.as_ref(), describe::list_text);
    }
    let name = args.action.as_deref().unwrap_or_default();
    if args.describe || args.describe_response {
        let info = find(name)?;
        let target = if args.describe_response { info.response } else { info.name };
        let described = describe::describe(target)
            .ok_or_else(|| Failure::usage(format!("{target} is not in this build's schema")))?;
        return explained(&described, args.format, jq.as_ref(), describe::describe_text);
    }
    let value = secret_value(name, &args)?;
    let action = action(name, args.input.as_deref(), value)?;
    let client = context.client()?;
    let response = client.send(&action).await?;
    output::response(&response, args.format.unwrap_or(Format::Json), jq.as_ref())?;
    match failed_result(&response) {
        Some(why) => Err(Failure::new(Class::ResultFailed, format!("{} answered a failure: {why}", name)).into()),
        None => Ok(()),
    }
}

/// Prints an explanation: as text by default, as JSON with `--format json`/`jsonl` or through
/// `--jq`.
fn explained(
    value: &serde_json::Value,
    format: Option<Format>,
    jq: Option<&Filter>,
    text: fn(&serde_json::Value) -> String,
) -> Result<(), Output> {
    if let Some(filter) = jq {
        return output::filtered(value, filter);
    }
    match format {
        None => output::line(&text(value)),
        Some(Format::Json) => output::json_pretty(value),
        Some(Format::Jsonl) => match value.as_array() {
            Some(rows) => rows.iter().try_for_each(output::json_line),
            None => output::json_line(value),
        },
        Some(Format::Diag) => Err(Failure::usage("--format diag is for responses; use json or jsonl here").into()),
    }
}

/// Why a response that succeeded at the HTTP level reports that its result failed: a verb of
/// `InvokeSessionTool` that failed (`error`), or a provider sign-in that `failed`.
fn failed_result(response: &AgentResponse) -> Option<String> {
    match response {
        AgentResponse::InvokeSessionToolResponse(answer) => answer.error.clone(),
        AgentResponse::ProviderOAuthStatusResponse(answer)
            if answer.status == ProviderOAuthStatusResponseStatus::Failed =>
        {
            Some(answer.error.clone().unwrap_or_else(|| "the sign-in failed".to_owned()))
        }
        _ => None,
    }
}

/// The action named `name`, or a usage failure suggesting the nearest name.
fn find(name: &str) -> Result<&'static ActionInfo, Failure> {
    if let Some(info) = ActionInfo::find(name) {
        return Ok(info);
    }
    let hint = match check::nearest(name, ACTIONS.iter().filter(|info| info.http).map(|info| info.name)) {
        Some(near) => format!("did you mean {near}? "),
        None => String::new(),
    };
    Err(Failure::usage(format!("no action named {name}; {hint}`seed-agents call --list` lists them")))
}

/// `--value-file` / `--value-stdin`: SetSecret's value, read raw.
fn secret_value(name: &str, args: &Call) -> Result<Option<Vec<u8>>, Failure> {
    if args.value_file.is_none() && !args.value_stdin {
        return Ok(None);
    }
    if name != "SetSecret" {
        return Err(Failure::usage("--value-file and --value-stdin are for SetSecret only"));
    }
    if let Some(path) = &args.value_file {
        return std::fs::read(path)
            .map(Some)
            .map_err(|error| Failure::local(format!("cannot read {}: {error}", path.display())));
    }
    if args.input.as_deref() == Some("-") {
        return Err(Failure::usage("--value-stdin reads stdin: give the other fields inline or as @FILE"));
    }
    let mut value = Vec::new();
    std::io::stdin().read_to_end(&mut value).map_err(|error| Failure::local(format!("cannot read stdin: {error}")))?;
    if value.ends_with(b"\n") {
        value.pop();
        if value.ends_with(b"\r") {
            value.pop();
        }
    }
    Ok(Some(value))
}

/// The typed action named `name` with the fields `input` holds (and SetSecret's `value`, when
/// read from a file or stdin).
pub fn action(name: &str, input: Option<&str>, value: Option<Vec<u8>>) -> Result<AgentAction, Failure> {
    let info = find(name)?;
    if !info.http {
        return Err(Failure::usage(format!("{name} is sent over the WebSocket: use `seed-agents subscribe`")));
    }
    // Stdin is read for the input only when --value-stdin does not take it.
    let text = read_input(input, value.is_none())?;
    let mut fields: serde_json::Value =
        serde_json::from_str(&text).map_err(|error| Failure::usage(format!("the input is not JSON: {error}")))?;
    let Some(object) = fields.as_object_mut() else {
        return Err(Failure::usage("the input must be a JSON object of the action's fields"));
    };
    match object.get("_") {
        Some(serde_json::Value::String(named)) if named != name => {
            return Err(Failure::usage(format!("the input's \"_\" is {named}, not {name}")));
        }
        _ => {}
    }
    if object.contains_key("ts") {
        return Err(Failure::usage("leave \"ts\" out: it is the signing time, added when the action is signed"));
    }
    if let Some(value) = value {
        if object.contains_key("value") {
            return Err(Failure::usage(
                "the secret's value comes from --value-file or --value-stdin: leave \"value\" out",
            ));
        }
        object.insert("value".to_owned(), serde_json::json!({ json::BYTES_KEY: hex::encode(value) }));
    }
    object.insert("_".to_owned(), serde_json::Value::String(name.to_owned()));
    let problems = check::check(&fields, name);
    if !problems.is_empty() {
        let hint = if name == "SetSecret" && problems.iter().any(|problem| problem.starts_with("at .value:")) {
            "\n  (--value-file FILE or --value-stdin take the value raw)"
        } else {
            ""
        };
        let listed = problems.join("\n  ");
        return Err(Failure::usage(format!(
            "the input does not fit {name} (`seed-agents call {name} --describe` shows its fields):\n  {listed}{hint}"
        )));
    }
    let input = json::to_ipld(fields).map_err(Failure::usage)?;
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

/// The input text: `-` is stdin, `@FILE` is the file, anything else is the JSON; none is stdin
/// when `stdin_allowed` and it is not a terminal (empty means `{}`), else `{}`.
fn read_input(input: Option<&str>, stdin_allowed: bool) -> Result<String, Failure> {
    let from_stdin = || {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|error| Failure::local(format!("cannot read stdin: {error}")))?;
        Ok(text)
    };
    match input {
        None if stdin_allowed && !std::io::stdin().is_terminal() => {
            let text = from_stdin()?;
            Ok(if text.trim().is_empty() { "{}".to_owned() } else { text })
        }
        None => Ok("{}".to_owned()),
        Some("-") => from_stdin(),
        Some(text) => match text.strip_prefix('@') {
            Some(path) => {
                std::fs::read_to_string(path).map_err(|error| Failure::local(format!("cannot read {path}: {error}")))
            }
            None => Ok(text.to_owned()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipld_core::ipld::Ipld;

    #[test]
    fn inline_input_becomes_the_typed_action() {
        let typed = action("GetAgent", Some(r#"{"agentId": "a1"}"#), None).unwrap();
        assert_eq!(
            wire::to_ipld(&typed).unwrap(),
            json::to_ipld(serde_json::json!({"_": "GetAgent", "agentId": "a1"})).unwrap()
        );
        assert!(action("ListAgents", Some("{}"), None).is_ok());
    }

    #[test]
    fn bytes_fields_take_hex() {
        let typed = action("SetSecret", Some(r#"{"name": "k", "value": {"$bytes": "00ff"}}"#), None).unwrap();
        let Ipld::Map(map) = wire::to_ipld(&typed).unwrap() else { panic!("a map") };
        assert_eq!(map["value"], Ipld::Bytes(vec![0, 255]));
    }

    #[test]
    fn bad_input_is_a_usage_failure_naming_the_problem() {
        let failure = |name: &str, input: &str| {
            let failure = action(name, Some(input), None).unwrap_err();
            assert_eq!(failure.class, Class::Usage, "{}", failure.message);
            failure.message
        };
        assert!(failure("NoSuchAction", "{}").contains("--list"));
        assert!(failure("ListAgent", "{}").contains("did you mean ListAgents?"));
        assert!(failure("GetAgent", r#"{"agentId": 5}"#).contains("at .agentId: expected a string, got the number 5"));
        assert!(failure("SetSecret", r#"{"name": "k", "value": "v"}"#).contains("--value-file"));
        assert!(failure("Subscribe", "{}").contains("subscribe"));
        assert!(failure("GetAgent", "{not json").contains("not JSON"));
        assert!(failure("GetAgent", "[1]").contains("JSON object"));
        assert!(failure("GetAgent", "{}").contains("agentId"));
        assert!(failure("GetAgent", r#"{"agentId": "a", "agentid": "b"}"#).contains(".agentid"));
        assert!(failure("GetAgent", r#"{"agentId": "a", "ts": 1}"#).contains("ts"));
        assert!(failure("GetAgent", r#"{"_": "ListAgents", "agentId": "a"}"#).contains("ListAgents"));
    }
}
