//! `surface-check`: the breaking-change classifier over `snapshots/surface.json`.
//!
//! ```text
//! surface-check --base <old-surface.json> [--current snapshots/surface.json] [--protocol-md schema/PROTOCOL.md]
//! surface-check --base-rev <git rev>      [--current ...] [--protocol-md ...]
//! surface-check --history
//! ```
//!
//! Prints every change (one line each, compatible ones too) and exits 1 when a breaking change
//! lands without a protocol bump and a changelog entry (see `seed_agents_compat::classify`).
//! `--base-rev` reads `snapshots/surface.json` at that git revision; when git cannot give it (the
//! first commit, a shallow clone, no snapshot yet at that revision, no git) it says so and exits 0.
//! `--history` checks every commit that changed `snapshots/surface.json` against its parent, with
//! that commit's `schema/PROTOCOL.md`: a breaking change in any commit of a push is caught, not
//! only in the last one (commits whose parent git cannot give, as in a shallow clone, are skipped
//! with a notice).
//! Default paths are relative to the working directory (CI runs from the workspace root).
//! Exit codes: 0 passed (or nothing to compare), 1 the check failed, 2 bad arguments or input.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use seed_agents_compat::classify;
use serde_json::Value;

const SNAPSHOT: &str = "snapshots/surface.json";
const PROTOCOL_MD: &str = "schema/PROTOCOL.md";
const USAGE: &str = "usage: surface-check (--base <old-surface.json> | --base-rev <git rev>) \
                     [--current snapshots/surface.json] [--protocol-md schema/PROTOCOL.md]\n       \
                     surface-check --history";

#[derive(Debug)]
enum Base {
    File(PathBuf),
    Rev(String),
    /// Every commit that changed the snapshot, against its parent.
    History,
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
    let mut protocol_md = PathBuf::from(PROTOCOL_MD);
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
            "--base" | "--base-rev" | "--history" if base.is_some() => {
                return Err("give one of --base, --base-rev and --history".into());
            }
            "--history" if inline.is_some() => return Err("--history takes no value".into()),
            "--history" => base = Some(Base::History),
            "--base" => base = Some(Base::File(value()?.into())),
            "--base-rev" => base = Some(Base::Rev(value()?)),
            "--current" => current = value()?.into(),
            "--protocol-md" => protocol_md = value()?.into(),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let base = base.ok_or("--base, --base-rev or --history is required")?;
    Ok(Some(Args { base, current, protocol_md }))
}

/// The snapshot at `rev`, or `Err(notice)` when git cannot give it.
fn snapshot_at(rev: &str) -> Result<String, String> {
    file_at(rev, SNAPSHOT)
}

fn git(args: &[&str]) -> std::io::Result<std::process::Output> {
    Command::new("git").args(args).output()
}

/// The file at `path` in `rev`, or `Err(notice)` when git cannot give it (no git, no such
/// revision, no such file).
fn file_at(rev: &str, path: &str) -> Result<String, String> {
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
    show(rev, path)
}

/// `git show <rev>:<path>`, for a revision known to exist.
fn show(rev: &str, path: &str) -> Result<String, String> {
    let spec = format!("{rev}:{path}");
    match git(&["show", &spec]) {
        Err(err) => Err(format!("cannot run git ({err})")),
        Ok(out) if !out.status.success() => {
            let why = String::from_utf8_lossy(&out.stderr);
            let why = why.lines().next().unwrap_or("git show failed").trim().to_owned();
            Err(format!("no {path} at `{rev}` ({why})"))
        }
        Ok(out) => String::from_utf8(out.stdout).map_err(|_| format!("{path} at `{rev}` is not UTF-8")),
    }
}

/// `--history`: each commit that changed the snapshot, oldest first, against its parent.
fn history() -> Result<ExitCode, String> {
    let log = match git(&["log", "--reverse", "--format=%H %s", "--", SNAPSHOT]) {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        Ok(_) | Err(_) => {
            println!("surface-check: no git history here; skipping");
            return Ok(ExitCode::SUCCESS);
        }
    };
    let (mut checked, mut failed) = (0, Vec::new());
    for line in log.lines() {
        let (commit, subject) = line.split_once(' ').unwrap_or((line, ""));
        let short = commit.get(..10).unwrap_or(commit);
        let parent = format!("{commit}^");
        let base = match snapshot_at(&parent) {
            Ok(text) => text,
            Err(notice) => {
                println!("surface-check: {short}: nothing to compare against: {notice}; skipping");
                continue;
            }
        };
        let base = json(&base, &format!("{SNAPSHOT} at {short}^"))?;
        // `commit` came from git log, so only its files are looked up.
        let current = json(&show(commit, SNAPSHOT)?, &format!("{SNAPSHOT} at {short}"))?;
        let protocol_md = show(commit, PROTOCOL_MD)?;
        checked += 1;
        match classify::check(&base, &current, &protocol_md) {
            Ok(_) => println!("surface-check: {short} ok ({subject:.60})"),
            Err(failure) => {
                println!("surface-check: {short} FAILED ({subject:.60})");
                print!("{failure}");
                failed.push(short.to_owned());
            }
        }
    }
    if failed.is_empty() {
        println!("surface-check: {checked} snapshot changes in history, every one classified ok");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("surface-check: breaking changes without a protocol bump in {}", failed.join(", "));
        Ok(ExitCode::FAILURE)
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
        Base::History => return history(),
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
