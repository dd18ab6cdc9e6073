//! One module per command; [`run`] dispatches. Each command gets the global flags as a
//! [`Context`], which makes the SDK client only for the commands that sign.

mod call;
mod keys;
mod server;
mod subscribe;
mod upload;

use std::path::PathBuf;

use seed_agents_sdk::{Client, Principal};

use crate::args::{Cli, Command};
use crate::failure::{Class, Failure};
use crate::key;
use crate::output::Output;

/// The global flags.
#[derive(Debug)]
pub struct Context {
    /// `--server`.
    pub server: String,
    /// `--key-file`, when given.
    pub key_file: Option<PathBuf>,
    /// `--account`, when given.
    pub account: Option<String>,
}

impl Context {
    /// The account to act for, when `--account` names one.
    fn account(&self) -> Result<Option<Principal>, Failure> {
        self.account
            .as_deref()
            .map(|text| text.parse::<Principal>().map_err(|error| Failure::usage(format!("--account {text}: {error}"))))
            .transpose()
    }

    /// An SDK client signing with the key file, for `--account` or the key's own account.
    fn client(&self) -> Result<Client, Failure> {
        let signer = key::load(&key::path(self.key_file.as_deref())?)?;
        let mut builder = Client::builder(&self.server, signer);
        if let Some(account) = self.account()? {
            builder = builder.account(account);
        }
        Ok(builder.build()?)
    }
}

/// Runs the command the line names. A server that cannot be reached is named, with how to name
/// another.
pub async fn run(cli: Cli) -> Result<(), Output> {
    let context = Context { server: cli.server, key_file: cli.key_file, account: cli.account };
    match command(&context, cli.command).await {
        Err(Output::Failed(mut failure)) if failure.class == Class::Unreachable => {
            failure.message = unreachable(&context.server, &failure.message);
            Err(Output::Failed(failure))
        }
        other => other,
    }
}

/// The message for a server that did not answer at `server`, because of `reason`.
pub fn unreachable(server: &str, reason: &str) -> String {
    format!(
        "cannot reach the server at {server}: {reason}\n  Is it running there? Name another with --server URL or SEED_AGENTS_SERVER=URL."
    )
}

async fn command(context: &Context, command: Command) -> Result<(), Output> {
    match command {
        Command::Keygen(args) => keys::keygen(context, args),
        Command::Whoami(args) => keys::whoami(context, args),
        Command::Call(args) => call::call(context, args).await,
        Command::Subscribe(args) => subscribe::subscribe(context, args).await,
        Command::Upload(args) => upload::upload(context, args).await,
        Command::Health => server::health(context).await,
        Command::Version => server::version(),
    }
}
