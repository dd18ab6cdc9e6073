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
  seed-agents whoami --jq .account
  seed-agents --key-file ./ci.key whoami")]
    Whoami(Whoami),

    /// Sign and send one action; print the response. --list and --describe explain the actions.
    #[command(after_help = "\
The input is a JSON object with the action's fields (no `_`, no `ts`: both are added), given
inline, as @FILE, or as - for stdin; with no input argument, stdin is read when it is not a
terminal, and none means {}. A byte string is {\"$bytes\": \"<hex>\"} in input and output. The
input is checked against the schema at every depth before anything is signed: an unknown or
missing field or a wrong type is refused (exit 2), naming its path.

A response whose result reports a failure (InvokeSessionTool with an `error`, a `failed`
GetProviderOAuthStatus) is printed and exits 13.

Examples:
  seed-agents call --list
  seed-agents call --list --jq '.[] | select(.effect == \"read\") | .action'
  seed-agents call SetModelProvider --describe
  seed-agents call ListAgents
  seed-agents call GetAgent '{\"agentId\": \"0b6c…\"}'
  seed-agents call SetSecret '{\"name\": \"openai-key\"}' --value-file key.txt
  seed-agents call CreateAgent @agent.json --format diag
  echo '{\"agentId\": \"0b6c…\"}' | seed-agents call CreateSession
  seed-agents call ListAgents --format jsonl
  seed-agents call ListAgents --jq '.agents[] | [.id, .definition.name] | @tsv'")]
    Call(Call),

    /// Follow a subscription key live: one JSON line per frame, resuming after drops.
    #[command(after_help = "\
Keys: sessions/<id>, agents/<id>, runs/<root run id>, account/<account>. Each line is an object
with a \"type\": subscribed, append (a durable session event, with its \"seq\"), runAppend,
partial, change, error, disconnected, retrying or resumed. Durable session events arrive once and in
order, across dropped connections; to resume after this command stopped, pass the last \"seq\"
it printed as --after-seq. Each lost connection, failed attempt to reconnect and return is
reported on stderr. It runs until interrupted; it exits 8 when the server refuses the key, and
11 when the first connection does not succeed within --connect-timeout.

Examples:
  seed-agents subscribe sessions/7f2a…
  seed-agents subscribe sessions/7f2a… --after-seq 1
  seed-agents subscribe sessions/7f2a… --jq 'select(.type == \"append\") | .event.event.type'
  seed-agents subscribe account/$(seed-agents whoami --jq .account) --connect-timeout 30")]
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
  seed-agents --server http://127.0.0.1:3050 health")]
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

/// `whoami`.
#[derive(Debug, Args)]
pub struct Whoami {
    /// Print what this jq filter makes of the JSON instead (strings without quotes).
    #[arg(long, value_name = "FILTER")]
    pub jq: Option<String>,
}

/// `call`.
#[derive(Debug, Args)]
pub struct Call {
    /// The action's name, as on the wire (`ListAgents`, `CreateSession`, …).
    #[arg(required_unless_present = "list")]
    pub action: Option<String>,
    /// The action's fields: inline JSON, @FILE, or - for stdin [default: stdin when it is not a
    /// terminal, else {}].
    #[arg(value_name = "JSON | @FILE | -")]
    pub input: Option<String>,
    /// List every action (name, effect, first line of its description), then exit; with
    /// --format json or --jq, as JSON with its response and protocol version.
    #[arg(long, conflicts_with_all = ["action", "input"])]
    pub list: bool,
    /// Explain the action instead of sending it: its fields (types, required, descriptions,
    /// nested types expanded) and a skeleton of the input to fill in.
    #[arg(long, conflicts_with_all = ["input", "describe_response", "value_file", "value_stdin"])]
    pub describe: bool,
    /// Explain the action's response instead of sending it: its fields.
    #[arg(long, conflicts_with_all = ["input", "value_file", "value_stdin"])]
    pub describe_response: bool,
    /// SetSecret: the secret's value is this file's bytes (instead of the input's `value`).
    #[arg(long, value_name = "FILE", conflicts_with = "value_stdin")]
    pub value_file: Option<PathBuf>,
    /// SetSecret: the secret's value is read from stdin, without one trailing newline.
    #[arg(long)]
    pub value_stdin: bool,
    /// How to print the response [default: json; for --list and --describe, text].
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Print what this jq filter makes of the JSON response instead: a line per result, strings
    /// without quotes. jq's formats are there: @tsv, @csv, @json, @text, @sh, @base64, @uri.
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
    /// Give up (exit 11) when the first connection has not succeeded after this many seconds; 0
    /// waits forever. Later outages are always waited out.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub connect_timeout: u64,
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
