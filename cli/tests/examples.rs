//! Every example a person reads runs here against the real server binary: each line under
//! "Examples:" in every command's `--help`, each `seed-agents` line of the shell blocks of
//! `cli/README.md` and of the top-level README, and the "First ten minutes" of `cli/README.md`
//! as one script, its model turn answered by a scripted OpenAI on loopback.
//!
//! Examples are shell lines and run through `sh` (so Unix only), with the placeholders a reader
//! replaces filled in: `0b6c…` (an agent id) and `7f2a…` (a session id) in help texts, `$AGENT`
//! and `$SESSION` in the READMEs, and the default server URL replaced by the test server's.
//! A `subscribe` example runs until interrupted: it must print a first line, then it is stopped.
#![cfg(unix)]

mod support;

use std::io::{BufRead as _, BufReader};
use std::path::Path;

use seed_agents_test_support::provider::{Fallback, Provider};
use serde_json::json;
use support::{Cli, Server};

/// The server URL the examples name, replaced by the test server's.
const DEFAULT_URL: &str = "http://127.0.0.1:3050";

/// The lines under "Examples:" of `help` (continuations joined, comments kept: `sh` drops them).
fn help_examples(help: &str) -> Vec<String> {
    let Some((_, examples)) = help.split_once("Examples:\n") else { return Vec::new() };
    examples.lines().take_while(|line| line.starts_with("  ")).map(|line| line.trim().to_owned()).collect()
}

/// The fenced `sh` blocks of a Markdown file, each as its lines with `\` continuations joined.
fn shell_blocks(markdown: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    let mut pending = String::new();
    for line in markdown.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(Vec::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(lines), text) => {
                if let Some(head) = text.strip_suffix('\\') {
                    pending.push_str(head);
                } else {
                    pending.push_str(text);
                    lines.push(std::mem::take(&mut pending));
                }
            }
            (None, _) => {}
        }
    }
    blocks
}

/// The shell lines that call the tool (not `cargo …`, `export …`, comments or blank lines).
fn tool_lines(block: &[String]) -> Vec<String> {
    block
        .iter()
        .filter(|line| line.contains("seed-agents ") && !line.starts_with("cargo ") && !line.starts_with("export "))
        .filter(|line| !line.trim_start().starts_with('#'))
        .cloned()
        .collect()
}

/// A home directory with a working directory of the files the examples name.
struct Place {
    home: tempfile::TempDir,
}

impl Place {
    fn new() -> Place {
        let home = tempfile::tempdir().expect("temp dir");
        let files: [(&str, &[u8]); 6] = [
            ("provider.json", br#"{"name": "main", "provider": {"type": "openai", "secretRefs": {"apiKey": "openai-key"}}}"#),
            (
                "agent.json",
                br#"{"definition": {"name": "from-file", "model": "gpt-4.1", "modelProvider": "main", "systemPrompt": "Hi."}}"#,
            ),
            ("key.txt", b"sk-from-a-file\n"),
            ("notes.pdf", b"%PDF-1.4 not really"),
            ("report.pdf", b"%PDF-1.4 a report"),
            ("photo.png", b"\x89PNG not really"),
        ];
        for (name, content) in files {
            std::fs::write(home.path().join(name), content).expect("example file");
        }
        std::fs::write(home.path().join("big.bin"), vec![7u8; 100_000]).expect("big.bin");
        Place { home }
    }

    fn path(&self) -> &Path {
        self.home.path()
    }

    /// `line` in `sh`, against `server`, with `vars` in the environment.
    fn shell(&self, server: &Server, line: &str, vars: &[(&str, &str)]) -> Cli {
        let line = line.replace(DEFAULT_URL, &server.url);
        let mut cli = Cli::shell(self.path(), &line).env("SEED_AGENTS_SERVER", &server.url);
        for (name, value) in vars {
            cli = cli.env(name, value);
        }
        cli
    }

    /// Runs one example line: it must succeed; a `subscribe` must print a line, then is stopped.
    fn run(&self, server: &Server, line: &str, vars: &[(&str, &str)]) -> String {
        if line.contains("seed-agents subscribe") {
            let mut child = self.shell(server, &format!("exec {line}"), vars).spawn(std::iter::empty::<&str>());
            let first = BufReader::new(child.stdout.take().expect("stdout")).lines().next();
            let _ = child.kill();
            let waited = child.wait_with_output().expect("wait");
            let stderr = String::from_utf8_lossy(&waited.stderr).into_owned();
            let first = first.and_then(Result::ok).unwrap_or_else(|| panic!("{line}: no output; stderr: {stderr}"));
            return first;
        }
        let run = self.shell(server, line, vars).run(std::iter::empty::<&str>());
        assert_eq!(run.code(), 0, "{line}\nstdout: {}\nstderr: {}", run.stdout(), run.stderr());
        run.stdout()
    }
}

/// The account's first agent, with a session holding an event.
fn agent_and_session(server: &Server, place: &Place) -> (String, String) {
    let agents = place.run(server, "seed-agents call ListAgents --jq '.agents[0].id // empty'", &[]);
    let agent = match agents.trim() {
        "" => {
            let input = r#"{"definition": {"name": "examples", "model": "gpt-4.1", "modelProvider": "main", "systemPrompt": "Hi."}}"#;
            place.run(server, &format!("seed-agents call CreateAgent '{input}' --jq .agentId"), &[]).trim().to_owned()
        }
        id => id.to_owned(),
    };
    let session = place
        .run(server, &format!("seed-agents call CreateSession '{{\"agentId\": \"{agent}\"}}' --jq .sessionId"), &[])
        .trim()
        .to_owned();
    let write = json!({"sessionId": session, "verb": "write", "input": {"address": "~/memory/a.md", "content": "a"}});
    place.run(server, &format!("seed-agents call InvokeSessionTool '{write}'"), &[]);
    (agent, session)
}

fn help_of(subcommand: &str) -> String {
    let home = tempfile::tempdir().expect("temp dir");
    let run = Cli::new(home.path()).run([subcommand, "--help"]);
    run.expect_code(0);
    run.stdout()
}

#[test]
fn every_help_example_runs() {
    let server = Server::start();
    let subcommands = ["keygen", "whoami", "call", "subscribe", "upload", "health", "version"];

    // keygen's examples make keys: a home of their own, without one.
    let fresh = Place::new();
    let keygen = help_examples(&help_of("keygen"));
    assert_eq!(keygen.len(), 3, "{keygen:?}");
    for line in &keygen {
        fresh.run(&server, line, &[]);
    }

    let place = Place::new();
    place.run(&server, "seed-agents keygen", &[]);
    place.run(&server, "seed-agents keygen --out ./ci.key", &[]);
    place.run(&server, r#"seed-agents call SetSecret '{"name": "openai-key", "value": {"$bytes": "00"}}'"#, &[]);
    place.run(&server, "seed-agents call SetModelProvider @provider.json", &[]);
    let (agent, session) = agent_and_session(&server, &place);
    let mut ran = keygen.len();
    for subcommand in subcommands.iter().filter(|name| **name != "keygen") {
        let examples = help_examples(&help_of(subcommand));
        assert!(!examples.is_empty(), "{subcommand} has examples");
        for line in examples {
            let line = line.replace("0b6c…", &agent).replace("7f2a…", &session);
            assert!(!line.contains('…'), "an unfilled placeholder in {line}");
            place.run(&server, &line, &[]);
            ran += 1;
        }
    }
    assert!(ran >= 25, "{ran} examples");
    // The top-level help shows every command, and the exit codes.
    assert!(help_of("--help").contains("Exit codes:"));
}

/// The shell blocks of `cli/README.md` other than the first ten minutes, and the top-level
/// README's, line by line, each README in a home of its own.
#[test]
fn every_readme_example_runs() {
    let server = Server::start();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cli_readme = std::fs::read_to_string(root.join("README.md")).expect("cli/README.md");
    let top_readme = std::fs::read_to_string(root.join("../README.md")).expect("README.md");
    let cli_blocks = shell_blocks(&cli_readme);
    assert_eq!(cli_blocks.len(), 2, "the quick start and the first ten minutes");
    let mut sources = vec![("cli/README.md", tool_lines(&cli_blocks[0]))];
    sources.extend(shell_blocks(&top_readme).iter().map(|block| ("README.md", tool_lines(block))));
    assert!(sources.iter().filter(|(name, _)| *name == "README.md").any(|(_, lines)| !lines.is_empty()));
    for (source, lines) in sources {
        let place = Place::new();
        let mut ids: Option<(String, String)> = None;
        for line in lines {
            if (line.contains("$AGENT") || line.contains("$SESSION")) && ids.is_none() {
                place.run(&server, "seed-agents call SetModelProvider @provider.json", &[]);
                ids = Some(agent_and_session(&server, &place));
            }
            let (agent, session) = ids.clone().unwrap_or_default();
            let out = place.run(&server, &line, &[("AGENT", &agent), ("SESSION", &session)]);
            assert!(!out.is_empty() || line.contains("ListAgents"), "{source}: {line} printed nothing");
        }
    }
}

#[test]
fn the_first_ten_minutes_work_with_only_the_binaries() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let openai = runtime.block_on(Provider::start());
    openai.set_fallback(Fallback::Echo);
    let server = Server::start_with(&[format!("--provider-url=openai={}", openai.openai_base())]);

    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).expect("README");
    let section = readme.split_once("## First ten minutes").expect("the section").1;
    let script = &shell_blocks(section)[0];
    // The live subscription runs in the background into a file; the rest as written.
    let script: Vec<String> = script
        .iter()
        .map(|line| match line.starts_with("seed-agents subscribe") {
            true => format!("{line} > events.txt 2> events.err & echo $! > events.pid"),
            false => line.clone(),
        })
        .collect();
    let place = Place::new();
    let run = place
        .shell(&server, &format!("set -e\n{}", script.join("\n")), &[("OPENAI_API_KEY", "sk-readme")])
        .run(std::iter::empty::<&str>());
    assert_eq!(run.code(), 0, "stdout: {}\nstderr: {}", run.stdout(), run.stderr());
    let stdout = run.stdout();
    assert!(stdout.contains("\"status\": \"ok\""), "health: {stdout}");
    assert!(stdout.contains("SetModelProvider: a write action"), "describe: {stdout}");
    assert!(stdout.contains("\"_\": \"MessageSessionResponse\""), "{stdout}");
    assert!(stdout.contains("\"_\": \"CommitFileUploadResponse\""), "{stdout}");
    assert!(stdout.trim_end().ends_with("Remember: be kind."), "read back: {stdout}");

    // The model was asked (the turn, and a title for the session) with the key given on stdin.
    let asked = openai.requests();
    assert!(!asked.is_empty());
    assert!(asked.iter().all(|request| request.header("authorization") == "Bearer sk-readme"));

    // The subscription printed the user's message and the answer, in order; then it is stopped.
    let events = place.path().join("events.txt");
    let lines = support::wait_for_lines(&events, 2);
    assert_eq!(lines[..2], ["1\tmessage", "2\tmessage"], "{lines:?}");
    let pid = std::fs::read_to_string(place.path().join("events.pid")).expect("pid");
    let killed = std::process::Command::new("kill").arg(pid.trim()).status().expect("kill");
    assert!(killed.success());

    // The typo example shows what it says.
    let typo = readme.split_once("```text\n$ ").expect("the typo example").1;
    let (command, rest) = typo.split_once('\n').expect("a command line");
    let shown = rest.split_once("```").expect("its end").0;
    let refused = place.shell(&server, command, &[]).run(std::iter::empty::<&str>());
    assert_eq!(refused.code(), 2);
    assert_eq!(refused.stderr(), shown);
}
