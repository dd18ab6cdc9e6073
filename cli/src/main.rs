//! `seed-agents`: the Seed Agents signed action API from a terminal.
//!
//! # Layout
//!
//! - `args`: the command line (clap derive), with help and examples per command.
//! - `commands/`: one module per command over the SDK (`seed-agents-sdk`, the only crate of this
//!   workspace it uses): `keys` (keygen, whoami), `call`, `subscribe`, `upload`, `server`
//!   (health, version).
//! - `key`: the key file (hex seed, mode 0600, default in the platform's config directory).
//! - `jq`: `--jq FILTER` (jaq, a pure-Rust jq).
//! - `json`: JSON ⇄ IPLD, with `{"$bytes": "<hex>"}` for byte strings.
//! - `output`: responses as JSON, JSON lines or CBOR diagnostic notation on stdout.
//! - `failure`: one exit code per class of failure.
//!
//! `main` parses, runs the command on a single-threaded runtime, prints a failure on stderr
//! and exits with its class's code.

mod args;
mod commands;
mod failure;
mod jq;
mod json;
mod key;
mod output;

use std::process::ExitCode;

use clap::Parser as _;

use crate::output::Output;

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("seed-agents: cannot start the async runtime: {error}");
            return ExitCode::from(failure::Class::Local as u8);
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(()) | Err(Output::Closed) => ExitCode::SUCCESS,
        Err(Output::Failed(failure)) => {
            eprintln!("seed-agents: {}", failure.message);
            ExitCode::from(failure.exit_code())
        }
    }
}
