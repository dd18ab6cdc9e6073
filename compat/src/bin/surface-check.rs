//! `surface-check`: the breaking-change classifier over `snapshots/surface.json`.
//!
//! ```text
//! surface-check --base <old-surface.json> [--current snapshots/surface.json] [--protocol-md schema/PROTOCOL.md]
//! surface-check --base-rev <git rev>      [--current ...] [--protocol-md ...]
//! ```
//!
//! Prints every change (one line each, compatible ones too) and exits 1 when a breaking change
//! lands without a protocol bump and a changelog entry (see `seed_agents_compat::classify`).
//! `--base-rev` reads `snapshots/surface.json` at that git revision; when git cannot give it (the
//! first commit, a shallow clone, no snapshot yet at that revision, no git) it says so and exits 0.
//! Default paths are relative to the working directory (CI runs from the workspace root).
//! Exit codes: 0 passed (or nothing to compare), 1 the check failed, 2 bad arguments or input.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use seed_agents_compat::classify;
use serde_json::Value;

const SNAPSHOT: &str = "snapshots/surface.json";
const USAGE: &str = "usage: surface-check (--base <old-surface.json> | --base-rev <git rev>) \
                     [--current snapshots/surface.json] [--protocol-md schema/PROTOCOL.md]";

#[derive(Debug)]
enum Base {
    File(PathBuf),
    Rev(String),
}

#[derive(Debug)]
struct Args {
    base: Base,
    current: PathBuf,
    protocol_md: PathBuf,
}

fn parse_args() -> Result<Option<Args>, String> {
    let mut base = None;
    let mut current = PathBuf::from(SNAPSHOT);
    let mut protocol_md = PathBuf::from("schema/PROTOCOL.md");
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_owned(), Some(value.to_owned())),
            _ => (arg.clone(), None),
        };
        if flag == "--help" || flag == "-h" {
            return Ok(None);
        }
        let mut value = || inline.clone().or_else(|| args.next()).ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--base" | "--base-rev" if base.is_some() => return Err("give one of --base and --base-rev".into()),
            "--base" => base = Some(Base::File(value()?.into())),
            "--base-rev" => base = Some(Base::Rev(value()?)),
            "--current" => current = value()?.into(),
            "--protocol-md" => protocol_md = value()?.into(),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let base = base.ok_or("--base or --base-rev is required")?;
    Ok(Some(Args { base, current, protocol_md }))
}

/// The snapshot at `rev`, or `Err(notice)` when git cannot give it.
fn snapshot_at(rev: &str) -> Result<String, String> {
    let git = |args: &[&str]| Command::new("git").args(args).output();
    match git(&["rev-parse", "--git-dir"]) {
        Err(err) => return Err(format!("cannot run git ({err})")),
        Ok(out) if !out.status.success() => return Err("not inside a git repository".to_owned()),
        Ok(_) => {}
    }
    let commit = format!("{rev}^{{commit}}");
    match git(&["rev-parse", "--verify", "--quiet", &commit]) {
        Err(err) => return Err(format!("cannot run git ({err})")),
        Ok(out) if !out.status.success() => {
            return Err(format!("revision `{rev}` does not exist here (the first commit, or a shallow clone)"));
        }
        Ok(_) => {}
    }
    let spec = format!("{rev}:{SNAPSHOT}");
    match git(&["show", &spec]) {
        Err(err) => Err(format!("cannot run git ({err})")),
        Ok(out) if !out.status.success() => {
            let why = String::from_utf8_lossy(&out.stderr);
            let why = why.lines().next().unwrap_or("git show failed").trim().to_owned();
            Err(format!("no {SNAPSHOT} at `{rev}` ({why})"))
        }
        Ok(out) => String::from_utf8(out.stdout).map_err(|_| format!("{SNAPSHOT} at `{rev}` is not UTF-8")),
    }
}

fn read(path: &std::path::Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|err| format!("cannot read {}: {err}", path.display()))
}

fn json(text: &str, what: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|err| format!("{what} is not valid JSON: {err}"))
}

fn run() -> Result<ExitCode, String> {
    let Some(args) = parse_args().map_err(|err| format!("{err}\n{USAGE}"))? else {
        println!("{USAGE}");
        return Ok(ExitCode::SUCCESS);
    };
    let (base_text, base_name) = match &args.base {
        Base::File(path) => (read(path)?, path.display().to_string()),
        Base::Rev(rev) => match snapshot_at(rev) {
            Ok(text) => (text, format!("{SNAPSHOT} at {rev}")),
            Err(notice) => {
                println!("surface-check: nothing to compare against: {notice}; skipping");
                return Ok(ExitCode::SUCCESS);
            }
        },
    };
    let base = json(&base_text, &base_name)?;
    let current = json(&read(&args.current)?, &args.current.display().to_string())?;
    let protocol_md = read(&args.protocol_md)?;
    println!("surface-check: {base_name} -> {}", args.current.display());
    match classify::check(&base, &current, &protocol_md) {
        Ok(summary) => {
            print!("{summary}");
            Ok(ExitCode::SUCCESS)
        }
        Err(failure) => {
            print!("{failure}");
            Ok(ExitCode::FAILURE)
        }
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("surface-check: {err}");
            ExitCode::from(2)
        }
    }
}
