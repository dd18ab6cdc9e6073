//! `subscribe <key> [--after-seq N]`: the SDK's subscription as JSON lines on stdout.
//!
//! One line per [`Event`], each an object with a `type`. The SDK reconnects by itself and
//! delivers every durable session event once and in `seq` order; each lost connection, each failed
//! attempt to reconnect and each return is also said on stderr. A refusal of the key ends the command with exit code 8 after its
//! line is printed (no status comes with a WebSocket refusal, so it is one class); a first
//! connection that does not succeed within `--connect-timeout` ends it with 11.

use std::time::Duration;

use futures_util::StreamExt as _;
use ipld_core::ipld::Ipld;
use seed_agents_sdk::Event;
use seed_agents_sdk::protocol::wire;
use serde_json::{Value, json};

use super::Context;
use crate::args::Subscribe;
use crate::failure::{Class, Failure};
use crate::jq::Filter;
use crate::json;
use crate::output::{self, Output};

/// Runs `subscribe` until interrupted, a fatal error, the key is refused, or the first connection
/// times out.
pub async fn subscribe(context: &Context, args: Subscribe) -> Result<(), Output> {
    let jq = args.jq.as_deref().map(Filter::new).transpose()?;
    let client = context.client()?;
    let mut builder = client.subscribe(args.key.clone());
    if let Some(after) = args.after_seq {
        builder = builder.after_seq(after);
    }
    let mut events = builder.start();
    let deadline =
        (args.connect_timeout > 0).then(|| tokio::time::Instant::now() + Duration::from_secs(args.connect_timeout));
    let mut connected = false;
    let mut lost = false;
    let mut last_reason = String::from("no answer");
    loop {
        let next = match deadline.filter(|_| !connected) {
            Some(deadline) => match tokio::time::timeout_at(deadline, events.next()).await {
                Ok(next) => next,
                Err(_) => {
                    let reason = format!("no connection within {} s (last: {last_reason})", args.connect_timeout);
                    return Err(Failure::new(Class::Unreachable, reason).into());
                }
            },
            None => events.next().await,
        };
        let Some(event) = next else { return Ok(()) };
        let event = event?;
        match &event {
            Event::Subscribed { .. } | Event::Error { .. } => connected = true,
            Event::Disconnected { reason } if !connected => {
                eprintln!("seed-agents: cannot connect yet ({reason}); retrying");
                last_reason.clone_from(reason);
            }
            Event::Disconnected { reason } => {
                eprintln!("seed-agents: connection lost ({reason}); reconnecting");
                lost = true;
            }
            Event::Retrying { reason, retry_in } if !connected => {
                eprintln!("seed-agents: still cannot connect ({reason}); next attempt in {}", seconds(*retry_in));
                last_reason.clone_from(reason);
            }
            Event::Retrying { reason, retry_in } => {
                eprintln!("seed-agents: reconnect attempt failed ({reason}); next in {}", seconds(*retry_in));
            }
            Event::Resumed { .. } if lost => {
                eprintln!("seed-agents: reconnected");
                lost = false;
            }
            _ => {}
        }
        match &jq {
            Some(filter) => output::filtered(&frame(&event), filter)?,
            None => output::json_line(&frame(&event))?,
        }
        if let Event::Error { key, message, code } = &event
            && key.as_deref().is_none_or(|key| key == args.key)
        {
            let code = code.as_deref().map(|code| format!(" (code {code})")).unwrap_or_default();
            return Err(
                Failure::new(Class::Rejected, format!("the server refused {}: {message}{code}", args.key)).into()
            );
        }
    }
}

/// The JSON line for one event.
pub fn frame(event: &Event) -> Value {
    match event {
        Event::Subscribed { key, account_id } => json!({"type": "subscribed", "key": key, "accountId": account_id}),
        Event::Append { key, event } => json!({"type": "append", "key": key, "seq": event.seq, "event": typed(event)}),
        Event::RunAppend { key, run_id, seq, entry } => {
            json!({"type": "runAppend", "key": key, "runId": run_id, "seq": seq, "entry": json::from_ipld(entry.as_ipld())})
        }
        Event::Partial { key, partial_id, run_id, patch } => {
            json!({"type": "partial", "key": key, "partialId": partial_id, "runId": run_id, "patch": typed(patch)})
        }
        Event::Change { key, value } => {
            json!({"type": "change", "key": key, "value": json::from_ipld(value.as_ipld())})
        }
        Event::Error { key, message, code } => json!({"type": "error", "key": key, "message": message, "code": code}),
        Event::Disconnected { reason } => json!({"type": "disconnected", "reason": reason}),
        Event::Retrying { reason, retry_in } => {
            json!({"type": "retrying", "reason": reason, "retryInMs": retry_in.as_millis()})
        }
        Event::Resumed { refetch, partials_lost } => {
            json!({"type": "resumed", "refetch": refetch, "partialsLost": partials_lost})
        }
        // A kind of event this build does not know by name.
        other => json!({"type": "other", "event": format!("{other:?}")}),
    }
}

/// A delay as seconds with one decimal (`0.3 s`).
fn seconds(delay: Duration) -> String {
    format!("{:.1} s", delay.as_secs_f64())
}

/// A generated value as JSON (through its IPLD form, so bytes and integers keep their kind).
fn typed<T: serde::Serialize>(value: &T) -> Value {
    wire::to_ipld(value).map_or(Value::Null, |value: Ipld| json::from_ipld(&value))
}
