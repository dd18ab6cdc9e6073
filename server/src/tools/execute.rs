//! The `execute` callable (docs/runtime.md §4.5, docs/sandbox.md): `{runtime, code,
//! timeout_secs?}` run in the code sandbox with the agent's memory as `/workspace`.
//!
//! The timeout is `timeout_secs` (60 by default) clamped to 1–300 seconds. A program that exits
//! non-zero, or is stopped at its timeout, is a successful call with `success: false`; only a
//! sandbox that could not start (`Could not start the code sandbox: …`) or could not be read
//! (`Code execution failed: …`) is an error. `changedFiles` compares the memory folder's files
//! (path, size, modification time) before and after the run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::Value as Json;
use tokio::sync::mpsc;

use super::fields;
use crate::app::App;
use crate::error::{ApiError, ApiResult};
use crate::sandbox::{ExecOutcome, ExecRequest, Progress, Runtime, SandboxErrorCode};

/// The timeout when the call names none.
pub(crate) const DEFAULT_TIMEOUT_SECS: f64 = 60.0;
/// The longest timeout a call may ask for.
pub(crate) const MAX_TIMEOUT_SECS: f64 = 300.0;
/// Files looked at in the before/after comparison (a folder with more lists the first ones).
const MAX_SNAPSHOT_FILES: usize = 20_000;

/// One changed memory file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ChangedFile {
    pub path: String,
    /// `added`, `modified` or `removed`.
    pub change: &'static str,
}

/// The output (without `summary`, which the caller adds).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Output {
    pub exit_code: i32,
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
    pub truncated: bool,
    pub duration_ms: u64,
    pub timed_out: bool,
    pub changed_files: Vec<ChangedFile>,
}

/// Runs `input` for `account_id` in `memory_root`, reporting the live output tail to `progress`:
/// its summary and output.
pub(crate) async fn run(
    app: &App,
    account_id: &str,
    memory_root: &Path,
    input: &Json,
    progress: Option<mpsc::Sender<Progress>>,
) -> ApiResult<(String, Output)> {
    let input = fields(input);
    let offered = &app.sandbox.availability().runtimes;
    let runtime = input.get("runtime").and_then(Json::as_str).and_then(Runtime::named).filter(|r| offered.contains(r));
    let Some(runtime) = runtime else {
        let names: Vec<&str> = offered.iter().map(|runtime| runtime.name()).collect();
        return Err(ApiError::invalid(format!("Runtime must be one of: {}", names.join(", "))));
    };
    let code = input.get("code").and_then(Json::as_str).unwrap_or_default();
    if code.trim().is_empty() {
        return Err(ApiError::invalid("Code is required"));
    }
    let seconds = input
        .get("timeout_secs")
        .and_then(Json::as_f64)
        .filter(|seconds| seconds.is_finite())
        .unwrap_or(DEFAULT_TIMEOUT_SECS)
        .clamp(1.0, MAX_TIMEOUT_SECS);
    let timeout = Duration::from_secs_f64(seconds);
    let request = ExecRequest {
        account_id: account_id.to_owned(),
        runtime,
        code: code.to_owned(),
        workspace: memory_root.to_path_buf(),
        timeout,
        progress,
    };
    let (outcome, changed_files) = run_tracked(app, request).await?;
    let mut stderr = outcome.stderr;
    if outcome.timed_out {
        let note = format!("[stopped after the {}s timeout]", seconds.round());
        stderr = if stderr.is_empty() { note } else { format!("{stderr}\n{note}") };
    }
    let exit_code = match (outcome.timed_out, outcome.exit_code, outcome.signal) {
        (false, Some(code), _) => code,
        (false, None, Some(signal)) => 128 + signal,
        _ => -1,
    };
    let success = exit_code == 0 && !outcome.timed_out;
    let ended =
        if outcome.timed_out { format!("timed out after {}s", seconds.round()) } else { format!("exit {exit_code}") };
    let changed = changed_note(&changed_files);
    let summary = format!("Ran {} code ({ended}, {}ms{changed}).", runtime.name(), outcome.duration_ms);
    let output = Output {
        exit_code,
        success,
        stdout: outcome.stdout,
        stderr,
        truncated: outcome.stdout_truncated || outcome.stderr_truncated,
        duration_ms: outcome.duration_ms,
        timed_out: outcome.timed_out,
        changed_files,
    };
    Ok((summary, output))
}

/// Runs `request` in the sandbox, with the files of its workspace that it added, changed or
/// removed; a sandbox that could not start or be read is an error (lambda tools run this way too).
pub(crate) async fn run_tracked(app: &App, request: ExecRequest) -> ApiResult<(ExecOutcome, Vec<ChangedFile>)> {
    let root = request.workspace.clone();
    let before = snapshot(root.clone()).await?;
    let outcome = app.sandbox.run(request).await.map_err(|error| {
        let code = error.code.as_str();
        match error.code {
            SandboxErrorCode::Unavailable => {
                ApiError::unavailable(format!("Code execution is not available on this server: {}", error.message))
            }
            SandboxErrorCode::RuntimeUnavailable => ApiError::invalid(error.message),
            SandboxErrorCode::Start => {
                ApiError::upstream(format!("Could not start the code sandbox: {}", error.message))
            }
            SandboxErrorCode::Failed => ApiError::upstream(format!("Code execution failed: {}", error.message)),
        }
        .with_code(code)
    })?;
    let after = snapshot(root).await?;
    Ok((outcome, diff(&before, &after)))
}

/// How many memory files a run changed, for its summary: `, 1 memory file changed`, `, N memory
/// files changed`, or nothing.
pub(crate) fn changed_note(changed: &[ChangedFile]) -> String {
    match changed.len() {
        0 => String::new(),
        1 => ", 1 memory file changed".to_owned(),
        count => format!(", {count} memory files changed"),
    }
}

/// A file's size and modification time.
type Stamp = (u64, Option<SystemTime>);

/// The regular files under `root` (symlinks and other kinds skipped, never followed), by path.
async fn snapshot(root: PathBuf) -> ApiResult<BTreeMap<String, Stamp>> {
    tokio::task::spawn_blocking(move || {
        let mut files = BTreeMap::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                if files.len() >= MAX_SNAPSHOT_FILES {
                    return files;
                }
                let Ok(meta) = entry.metadata() else { continue };
                let path = entry.path();
                if meta.is_dir() {
                    stack.push(path);
                } else if meta.is_file() {
                    let Ok(relative) = path.strip_prefix(&root) else { continue };
                    let relative = relative.to_string_lossy().replace('\\', "/");
                    files.insert(relative, (meta.len(), meta.modified().ok()));
                }
            }
        }
        files
    })
    .await
    .map_err(ApiError::internal)
}

/// What changed between two snapshots, by path.
fn diff(before: &BTreeMap<String, Stamp>, after: &BTreeMap<String, Stamp>) -> Vec<ChangedFile> {
    let mut changes: Vec<ChangedFile> = after
        .iter()
        .filter_map(|(path, stamp)| match before.get(path) {
            None => Some(ChangedFile { path: path.clone(), change: "added" }),
            Some(previous) if previous != stamp => Some(ChangedFile { path: path.clone(), change: "modified" }),
            Some(_) => None,
        })
        .chain(
            before
                .keys()
                .filter(|path| !after.contains_key(*path))
                .map(|path| ChangedFile { path: path.clone(), change: "removed" }),
        )
        .collect();
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_diff_names_added_modified_and_removed_files() {
        let at = |secs: u64| Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs));
        let before =
            BTreeMap::from([("a".to_owned(), (1, at(1))), ("b".to_owned(), (1, at(1))), ("c".to_owned(), (1, at(1)))]);
        let after = BTreeMap::from([
            ("a".to_owned(), (1, at(1))),
            ("b".to_owned(), (1, at(2))),
            ("d/e".to_owned(), (5, at(3))),
        ]);
        let changes = diff(&before, &after);
        let named: Vec<(&str, &str)> = changes.iter().map(|change| (change.path.as_str(), change.change)).collect();
        assert_eq!(named, [("b", "modified"), ("c", "removed"), ("d/e", "added")]);
    }
}
