//! The verdict: whether the changes between two surfaces may land as they are.

use std::fmt;

use serde_json::Value;

use super::{Report, classify};

/// The surface format this classifier reads (`format` in `snapshots/surface.json`).
const FORMAT: u64 = 1;

/// A passing check: the report, for printing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Every change found.
    pub report: Report,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.report)?;
        if self.report.has_breaking() {
            writeln!(f, "ok: the breaking changes come with a protocol bump and a changelog entry")
        } else if self.report.changes.is_empty() {
            writeln!(f, "ok: no changes to the surface")
        } else {
            writeln!(f, "ok: every change is compatible")
        }
    }
}

/// A failing check: the report and every problem found, each with its fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Every change found (boxed: the error side of a `Result` stays small).
    pub report: Box<Report>,
    /// What is wrong, in words.
    pub problems: Vec<String>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.report)?;
        writeln!(f, "FAILED: the surface change cannot land as it is:")?;
        for problem in &self.problems {
            let mut lines = problem.lines();
            if let Some(first) = lines.next() {
                writeln!(f, "- {first}")?;
            }
            for line in lines {
                writeln!(f, "  {line}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for Failure {}

/// Classifies the changes from `base` to `current` and decides whether they may land.
///
/// Fails when: a breaking change comes without `current.protocol > base.protocol` and a
/// `### Protocol <current.protocol>` heading in the changelog of `protocol_md` (the text of
/// `schema/PROTOCOL.md`); the protocol increased without that heading (a version with no entry);
/// `protocol` or `minClientProtocol` decreased; `minClientProtocol` exceeds `protocol`; a new item
/// claims an `x-since` newer than the current protocol; a surface lacks `protocol` or has an
/// unknown `format`.
pub fn check(base: &Value, current: &Value, protocol_md: &str) -> Result<Summary, Failure> {
    let report = classify(base, current);
    let mut problems = Vec::new();
    for (side, format) in [("base", report.base_format), ("current", report.current_format)] {
        if format != Some(FORMAT) {
            let found = format.map_or_else(|| "none".to_owned(), |f| f.to_string());
            problems.push(format!("the {side} surface has format {found}; this classifier reads format {FORMAT}"));
        }
    }
    let (Some(base_protocol), Some(protocol)) = (report.base_protocol, report.current_protocol) else {
        problems.push("a surface has no `protocol` number".to_owned());
        return Err(Failure { report: Box::new(report), problems });
    };
    let base_min = report.base_min_client_protocol.unwrap_or(1);
    let min = report.current_min_client_protocol.unwrap_or(1);
    let bump_fix = |to: u64| {
        format!(
            "fix: bump AGENTS_PROTOCOL_VERSION in schema/src/version.rs and x-protocol in schema/json/envelope.json \
             to {to}, mark what is new with x-since {to}, run `cargo run -p seed-agents-codegen`, add a \
             `### Protocol {to}` entry to the changelog in schema/PROTOCOL.md, and add a shim in compat/ that \
             serves older clients their shape"
        )
    };
    if protocol < base_protocol {
        problems.push(format!(
            "protocol decreased from {base_protocol} to {protocol}\n\
             fix: versions only go up; restore AGENTS_PROTOCOL_VERSION and x-protocol to at least {base_protocol}"
        ));
    }
    if min < base_min {
        problems.push(format!(
            "minClientProtocol decreased from {base_min} to {min}\n\
             fix: the minimum only goes up (the shims below it may be gone); restore MIN_CLIENT_PROTOCOL in \
             schema/src/version.rs and x-min-client-protocol in schema/json/envelope.json to at least {base_min}"
        ));
    }
    if min > protocol {
        problems.push(format!("minClientProtocol {min} is above protocol {protocol}"));
    }
    if report.has_breaking() && protocol <= base_protocol {
        let mut text = format!(
            "{} breaking change(s) without a protocol bump (protocol is still {protocol}):",
            report.breaking().count()
        );
        for change in report.breaking() {
            let breaks = change.breaks.unwrap_or(change.direction);
            text.push_str(&format!("\n  {} [breaks clients that {breaks} it]: {}", change.item, change.detail));
        }
        text.push('\n');
        text.push_str(&bump_fix(base_protocol + 1));
        text.push_str("; or turn the change into an additive one (a new optional field, action or response)");
        problems.push(text);
    }
    if protocol > base_protocol && !changelog_has_protocol(protocol_md, protocol) {
        let why =
            if report.has_breaking() { "the breaking changes above need" } else { "a new protocol version needs" };
        problems.push(format!(
            "no `### Protocol {protocol}` heading in the changelog of schema/PROTOCOL.md; {why} one\n\
             fix: add a `### Protocol {protocol}` entry under `## Changelog` saying what changed and what the shim \
             in compat/ does for older clients"
        ));
    }
    for (item, since) in &report.since_too_new {
        problems.push(format!(
            "{item} has x-since {since}, newer than protocol {protocol}\n\
             fix: set its x-since to the version it appears in ({protocol}, or bump the protocol)"
        ));
    }
    if problems.is_empty() { Ok(Summary { report }) } else { Err(Failure { report: Box::new(report), problems }) }
}

/// Whether the `## Changelog` section of `markdown` has a `### Protocol <version>` heading
/// (anything after the number, such as a date in parentheses, is allowed).
pub fn changelog_has_protocol(markdown: &str, version: u64) -> bool {
    let mut in_changelog = false;
    let mut fenced = false;
    for line in markdown.lines() {
        let line = line.trim_end();
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let level = line.chars().take_while(|c| *c == '#').count();
        if level == 0 || !line[level..].starts_with(' ') {
            continue;
        }
        let title = line[level..].trim();
        if level <= 2 {
            in_changelog = level == 2 && title.eq_ignore_ascii_case("changelog");
        } else if in_changelog && level == 3 {
            let Some(rest) = title.strip_prefix("Protocol ") else { continue };
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let boundary = rest[digits.len()..].chars().next().is_none_or(|c| !c.is_alphanumeric());
            if boundary && digits.parse() == Ok(version) {
                return true;
            }
        }
    }
    false
}
