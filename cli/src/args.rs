//! The command line as typed: flags, subcommands and their help (clap derive). Nothing here
//! talks to a server or reads a file.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use seed_agents_sdk::types::{AgentId, SessionId};

use crate::failure::EXIT_CODES;

/// The Seed Agents signed action API from a terminal.
///
/// Every call is signed with your Ed25519 key (see `keygen`) and sent to the server as canonical
/// DAG-CBOR; answers are printed as JSON on stdout, errors on stderr with an exit code per class.
#[derive(Debug, Parser)]
#[command(name = "seed-agents", version, after_help = EXIT_CODES)]
pub struct Cli {
    /// The server's base URL.
    #[arg(long, global = true, env = "SEED_AGENTS_SERVER", default_value = "http://127.0.0.1:3050")]
    pub server: String,

    /// The key file [default: seed-agents/key in the platform's config directory].
    #[arg(long, global = true, env = "SEED_AGENTS_KEY_FILE", value_name = "FILE")]
    pub key_file: Option<PathBuf>,

    /// Act for this account (a principal, `z6Mk…`) that authorized your key with RegisterSigner,
    /// instead of your key's own account.
    #[arg(long, global = true, env = "SEED_AGENTS_ACCOUNT", value_name = "PRINCIPAL")]
    pub account: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a new signing key (mode 0600) and print its account.
    #[command(after_help = "\
Examples:
  seed-agents keygen
  seed-agents keygen --out ./ci.key
  seed-agents keygen --out ./ci.key --force   # replaces the old key: it is lost")]
    Keygen(Keygen),

    /// Print the account and signer your key acts as (no server needed).
    #[command(after_help = "\
Examples:
  seed-agents whoami
  seed-agents --key-file ./ci.key whoami")]
    Whoami,

    /// Sign and send one action; print the response.
    #[command(after_help = "\
The input is a JSON object with the action's fields (no `_`, no `ts`: both are added), given
inline, as @FILE, or as - for stdin; none means {}. A byte string is {\"$bytes\": \"<hex>\"} in
input and output. Fields this build does not know are refused before anything is sent.

Examples:
  seed-agents call ListAgents
  seed-agents call GetAgent '{\"agentId\": \"0b6c…\"}'
  seed-agents call SetSecret '{\"name\": \"openai-key\", \"value\": {\"$bytes\": \"736b2d…\"}}'
  seed-agents call CreateAgent @agent.json --format diag
  echo '{\"agentId\": \"0b6c…\"}' | seed-agents call CreateSession -
  seed-agents call ListAgents --format jsonl
  seed-agents call ListAgents --jq '.agents[] | [.id, .definition.name] | @tsv'
  seed-agents call --list")]
    Call(Call),

    /// Follow a subscription key live: one JSON line per frame, resuming after drops.
    #[command(after_help = "\
Keys: sessions/<id>, agents/<id>, runs/<root run id>, account/<account>. Each line is an object
with a \"type\": subscribed, append (a durable session event, with its \"seq\"), runAppend,
partial, change, error, disconnected or resumed. Durable session events arrive once and in
order, across dropped connections; to resume after this command stopped, pass the last \"seq\"
it printed as --after-seq. It runs until interrupted, or exits 8 when the server refuses the key.

Examples:
  seed-agents subscribe sessions/0b6c…
  seed-agents subscribe sessions/0b6c… --after-seq 41
  seed-agents subscribe sessions/0b6c… --jq 'select(.type == \"append\") | .event.event.type'
  seed-agents subscribe account/$(seed-agents whoami | jq -r .account)")]
    Subscribe(Subscribe),

    /// Upload a file in signed chunks into an agent's memory or as a session attachment.
    #[command(after_help = "\
Shows a progress bar of acknowledged bytes on stderr when it is a terminal; prints the
CommitFileUploadResponse.

Examples:
  seed-agents upload report.pdf --agent 0b6c… --path docs/report.pdf
  seed-agents upload photo.png --session 7f2a… --mime-type image/png
  seed-agents upload big.bin --agent 0b6c… --path big.bin --progress plain 2>progress.log")]
    Upload(Upload),

    /// Check that the server answers (GET /api/health) and print what it offers.
    #[command(after_help = "\
Examples:
  seed-agents health
  seed-agents --server https://agents.example.com health")]
    Health,

    /// Print this tool's version and the protocol version it speaks.
    #[command(after_help = "\
Examples:
  seed-agents version")]
    Version,
}

/// `keygen`.
#[derive(Debug, Args)]
pub struct Keygen {
    /// Write the key here instead of the key file (--key-file or its default).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Replace an existing key file.
    #[arg(long)]
    pub force: bool,
}

/// `call`.
#[derive(Debug, Args)]
pub struct Call {
    /// The action's name, as on the wire (`ListAgents`, `CreateSession`, …).
    #[arg(required_unless_present = "list")]
    pub action: Option<String>,
    /// The action's fields: inline JSON, @FILE, or - for stdin.
    #[arg(value_name = "JSON | @FILE | -")]
    pub input: Option<String>,
    /// List every action with its response, effect and protocol version, then exit.
    #[arg(long, conflicts_with_all = ["action", "input"])]
    pub list: bool,
    /// How to print the response.
    #[arg(long, value_enum, default_value_t = Format::Json)]
    pub format: Format,
    /// Print what this jq filter makes of the JSON response instead: a line per result, strings
    /// without quotes.
    #[arg(long, value_name = "FILTER", conflicts_with = "format")]
    pub jq: Option<String>,
}

/// How a response is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Pretty-printed JSON.
    Json,
    /// JSON on one line.
    Jsonl,
    /// CBOR diagnostic notation (RFC 8949 §8) of the response's canonical DAG-CBOR.
    Diag,
}

/// `subscribe`.
#[derive(Debug, Args)]
pub struct Subscribe {
    /// The key: `sessions/<id>`, `agents/<id>`, `runs/<root>`, `account/<account>`.
    pub key: String,
    /// For sessions/ keys: replay only events after this seq.
    #[arg(long, value_name = "N")]
    pub after_seq: Option<i64>,
    /// Print what this jq filter makes of each frame instead (a line per result, strings raw).
    #[arg(long, value_name = "FILTER")]
    pub jq: Option<String>,
}

/// `upload`.
#[derive(Debug, Args)]
pub struct Upload {
    /// The file to upload.
    pub file: PathBuf,
    /// Into this agent's memory (with --path).
    #[arg(long, value_name = "ID", required_unless_present = "session", conflicts_with = "session", requires = "path")]
    pub agent: Option<AgentId>,
    /// The path in the agent's memory.
    #[arg(long, value_name = "P", requires = "agent")]
    pub path: Option<String>,
    /// As an attachment of this session.
    #[arg(long, value_name = "ID")]
    pub session: Option<SessionId>,
    /// The attachment's name [default: the file's name].
    #[arg(long, requires = "session")]
    pub name: Option<String>,
    /// The attachment's media type.
    #[arg(long, value_name = "TYPE", requires = "session")]
    pub mime_type: Option<String>,
    /// Progress: a bar on a terminal (auto), a line per acknowledged chunk (plain), or none.
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto)]
    pub progress: ProgressMode,
    /// How to print the response.
    #[arg(long, value_enum, default_value_t = Format::Json)]
    pub format: Format,
}

/// How upload progress is shown on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProgressMode {
    /// A progress bar when stderr is a terminal, nothing otherwise.
    Auto,
    /// One line per acknowledged chunk: `<received>/<size> bytes`.
    Plain,
    /// Nothing.
    None,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn the_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_command_has_examples() {
        let mut cli = Cli::command();
        for command in cli.get_subcommands_mut() {
            let help = command.render_long_help().to_string();
            assert!(help.contains("Examples:\n  seed-agents"), "{} has no examples", command.get_name());
        }
    }

    #[test]
    fn upload_needs_exactly_one_target() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["seed-agents", "upload", "f"], args].concat());
        assert!(parse(&["--agent", "a", "--path", "p"]).is_ok());
        assert!(parse(&["--session", "s"]).is_ok());
        assert!(parse(&[]).is_err());
        assert!(parse(&["--agent", "a"]).is_err());
        assert!(parse(&["--agent", "a", "--path", "p", "--session", "s"]).is_err());
        assert!(parse(&["--path", "p"]).is_err());
    }
}
