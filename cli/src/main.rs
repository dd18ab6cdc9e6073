#![doc = include_str!("../README.md")]

mod args;
mod check;
mod commands;
mod describe;
mod failure;
mod jq;
mod json;
mod key;
mod output;
mod schema;

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
