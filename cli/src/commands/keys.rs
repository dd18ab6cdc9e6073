//! `keygen` and `whoami`: the key file and who it signs as.

use seed_agents_sdk::{Ed25519Signer, Signer as _};

use super::Context;
use crate::args::{Keygen, Whoami};
use crate::failure::{Class, Failure};
use crate::jq::Filter;
use crate::key;
use crate::output::{self, Output};

/// Creates a key, writes it, prints its account (the principal) on stdout.
pub fn keygen(context: &Context, args: Keygen) -> Result<(), Output> {
    let path = match args.out {
        Some(out) => out,
        None => key::path(context.key_file.as_deref())?,
    };
    let signer = Ed25519Signer::generate()
        .map_err(|error| Failure::new(Class::Local, format!("cannot draw a random key: {error}")))?;
    key::write(&path, &signer, args.force)?;
    eprintln!("seed-agents: wrote a new key to {}", path.display());
    output::line(&signer.principal().to_string())
}

/// Prints `{"account", "signer", "keyFile", "server"}` (or what `--jq` makes of it).
pub fn whoami(context: &Context, args: Whoami) -> Result<(), Output> {
    let jq = args.jq.as_deref().map(Filter::new).transpose()?;
    let path = key::path(context.key_file.as_deref())?;
    let signer = key::load(&path)?.principal();
    let account = context.account()?.unwrap_or(signer);
    let value = serde_json::json!({
        "account": account.to_string(),
        "signer": signer.to_string(),
        "keyFile": path.display().to_string(),
        "server": context.server,
    });
    match jq {
        Some(filter) => output::filtered(&value, &filter),
        None => output::json_pretty(&value),
    }
}
