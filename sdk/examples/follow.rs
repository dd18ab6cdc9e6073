//! Run with: `cargo run -p seed-agents-sdk --example follow -- --server URL --seed-hex HEX --key sessions/<id> [--after-seq N]`
//!
//! Follows one subscription key until interrupted, printing one JSON line per durable event,
//! `{"seq":N,"type":"…"}` (for `sessions/` keys: every event exactly once, in order, across
//! disconnections and server restarts), and one line `{"resumed":true,…}` after each reconnect.
//! Other frames (changes, partials) are not printed; refusals and disconnections go to stderr.
//! Scripts outside this repository run it: keep this interface.

use futures_util::StreamExt as _;
use seed_agents_sdk::{Client, Ed25519Signer, Event};

struct Args {
    server: String,
    seed: [u8; 32],
    key: String,
    after_seq: Option<i64>,
}

fn parse_args() -> Result<Args, String> {
    let usage = "usage: follow --server URL --seed-hex HEX --key KEY [--after-seq N]";
    let mut args = std::env::args().skip(1);
    let (mut server, mut seed, mut key, mut after_seq) = (None, None, None, None);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value; {usage}"))?;
        match flag.as_str() {
            "--server" => server = Some(value),
            "--seed-hex" => seed = Some(value),
            "--key" => key = Some(value),
            "--after-seq" => {
                after_seq = Some(value.parse::<i64>().map_err(|_| format!("--after-seq {value}: not a number"))?)
            }
            other => return Err(format!("unknown flag {other}; {usage}")),
        }
    }
    let seed = seed.ok_or(usage)?;
    let bytes: Vec<u8> = (0..seed.len())
        .step_by(2)
        .map(|at| seed.get(at..at + 2).and_then(|pair| u8::from_str_radix(pair, 16).ok()))
        .collect::<Option<_>>()
        .ok_or("--seed-hex must be 64 hex digits")?;
    let seed: [u8; 32] = bytes.try_into().map_err(|_| "--seed-hex must be 64 hex digits")?;
    Ok(Args { server: server.ok_or(usage)?, seed, key: key.ok_or(usage)?, after_seq })
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return std::process::ExitCode::from(2);
        }
    };
    let client = match Client::new(&args.server, Ed25519Signer::from_seed(&args.seed)) {
        Ok(client) => client,
        Err(error) => {
            eprintln!("{error}");
            return std::process::ExitCode::from(2);
        }
    };
    let mut subscription = client.subscribe(args.key);
    if let Some(after) = args.after_seq {
        subscription = subscription.after_seq(after);
    }
    let mut events = subscription.start();
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Append { event, .. }) => {
                let kind = seed_agents_sdk::protocol::wire::to_ipld(&event.event)
                    .ok()
                    .and_then(|value| match value {
                        ipld_core::ipld::Ipld::Map(mut fields) => match fields.remove("type") {
                            Some(ipld_core::ipld::Ipld::String(kind)) => Some(kind),
                            _ => None,
                        },
                        _ => None,
                    })
                    .unwrap_or_default();
                println!("{}", serde_json::json!({"seq": event.seq, "type": kind}));
            }
            Ok(Event::Resumed { refetch, partials_lost }) => {
                println!("{}", serde_json::json!({"resumed": true, "refetch": refetch, "partialsLost": partials_lost}));
            }
            Ok(Event::Error { key, message, code }) => eprintln!("refused {key:?}: {message} ({code:?})"),
            Ok(Event::Disconnected { reason }) => eprintln!("disconnected: {reason}"),
            Ok(_) => {}
            Err(error) => {
                eprintln!("{error}");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    std::process::ExitCode::SUCCESS
}
