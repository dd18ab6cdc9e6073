//! Writing answers to stdout: a response in the chosen format, or one JSON line.
//!
//! A closed stdout (`seed-agents call … | head -1`) is not a failure: [`Output`] reports it as
//! `Closed`, and the command stops quietly with success, as ripgrep does.

use std::io::Write as _;

use ipld_core::ipld::Ipld;
use seed_agents_sdk::protocol::{AgentResponse, wire};

use crate::args::Format;
use crate::failure::{Class, Failure};
use crate::jq::Filter;
use crate::json;

/// Why printing stopped.
#[derive(Debug)]
pub enum Output {
    /// The reader went away (broken pipe): stop, successfully.
    Closed,
    /// A real failure.
    Failed(Failure),
}

impl From<Failure> for Output {
    fn from(failure: Failure) -> Self {
        Output::Failed(failure)
    }
}

impl From<seed_agents_sdk::Error> for Output {
    fn from(error: seed_agents_sdk::Error) -> Self {
        Output::Failed(error.into())
    }
}

/// Prints a response in `format`, or what `jq` makes of it.
pub fn response(response: &AgentResponse, format: Format, jq: Option<&Filter>) -> Result<(), Output> {
    let bad =
        |error: wire::WireError| Failure::new(Class::BadAnswer, format!("cannot re-encode the response: {error}"));
    if let Some(filter) = jq {
        let value = json::from_ipld(&wire::to_ipld(response).map_err(bad)?);
        return filtered(&value, filter);
    }
    match format {
        Format::Diag => {
            let bytes = wire::to_vec(response).map_err(bad)?;
            let text = wire::diagnostic(&bytes).map_err(bad)?;
            line(&text)
        }
        Format::Json | Format::Jsonl => {
            let value = wire::to_ipld(response).map_err(bad)?;
            value_as(&value, format)
        }
    }
}

/// Prints an IPLD value as JSON (pretty for `Json`, one line otherwise).
pub fn value_as(value: &Ipld, format: Format) -> Result<(), Output> {
    let value = json::from_ipld(value);
    let text =
        if format == Format::Json { serde_json::to_string_pretty(&value) } else { serde_json::to_string(&value) };
    line(&text.map_err(|error| Failure::local(format!("cannot write JSON: {error}")))?)
}

/// Prints each result of `filter` over `value` on its own line.
pub fn filtered(value: &serde_json::Value, filter: &Filter) -> Result<(), Output> {
    filter.run(&value.to_string())?.iter().try_for_each(|text| line(text))
}

/// Prints a JSON value on one line.
pub fn json_line(value: &serde_json::Value) -> Result<(), Output> {
    line(&value.to_string())
}

/// Prints a JSON value pretty.
pub fn json_pretty(value: &serde_json::Value) -> Result<(), Output> {
    line(&serde_json::to_string_pretty(value).map_err(|error| Failure::local(format!("cannot write JSON: {error}")))?)
}

/// Writes `text` and a newline to stdout and flushes (subscriptions print as frames arrive).
pub fn line(text: &str) -> Result<(), Output> {
    let mut out = std::io::stdout().lock();
    let written = out.write_all(text.as_bytes()).and_then(|()| out.write_all(b"\n")).and_then(|()| out.flush());
    match written {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Err(Output::Closed),
        Err(error) => Err(Output::Failed(Failure::local(format!("cannot write to stdout: {error}")))),
    }
}
