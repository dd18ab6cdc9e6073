//! Lambda tools: the program a Python lambda runs as in the code sandbox, and what its output
//! means (docs/sandbox.md, "Lambda tools").
//!
//! The program is the authored source followed by an entry point of ours: it decodes the input
//! from a string literal holding its JSON, calls `main(input)` (awaiting a coroutine), and prints
//! the JSON of the value after [`RESULT_MARKER`] on a line of its own, as the last thing on
//! stdout. What the lambda itself prints while it runs is captured in-process and printed first,
//! only its last [`LOG_TAIL_CHARS`] characters, so the result line always fits in the sandbox's
//! stdout cap however much the lambda logs.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value as Json;
use tokio::sync::mpsc;

use super::document::{Runtime as Language, ToolDocument};
use super::execute::{self, ChangedFile};
use crate::app::App;
use crate::error::{ApiError, ApiResult};
use crate::sandbox::{ExecRequest, Progress, Runtime};

/// How long a python lambda may run.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(60);

/// How long a TypeScript lambda may compute (it has no I/O to wait on).
pub(crate) const TYPESCRIPT_TIMEOUT: Duration = Duration::from_secs(10);

/// The error code of a lambda that ran and failed (non-zero exit, timeout, no or bad result).
pub(crate) const CODE_LAMBDA_FAILED: &str = "lambda-failed";

/// What starts the result line on stdout.
pub(crate) const RESULT_MARKER: &str = "__SEED_TOOL_RESULT__";

/// How much of what a lambda prints is kept, from its end, in characters.
pub(crate) const LOG_TAIL_CHARS: usize = 16 * 1024;

/// How many lines of a failed lambda's stderr (or, without any, its logs) its error shows.
const ERROR_LINES: usize = 8;

/// What a lambda answers (without `summary`, which the caller adds).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Output {
    /// The value `main` returned.
    pub result: Json,
    /// What it printed, when anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<String>,
    /// Memory files it added, changed or removed, when any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changed_files: Vec<ChangedFile>,
    /// How long it ran.
    pub duration_ms: u64,
}

/// Runs lambda `document` with `input` (already checked against its input schema) for
/// `account_id`, its memory folder `memory_root` as `/workspace`: the summary and output, or the
/// error the caller reads. A runtime that does not run here is a 400 naming it; an agent without
/// the `execute` grant (`executes`) a 403.
pub(crate) async fn run(
    app: &App,
    account_id: &str,
    memory_root: &Path,
    document: &ToolDocument,
    input: &Json,
    executes: bool,
    progress: Option<mpsc::Sender<Progress>>,
) -> ApiResult<(String, Output)> {
    let name = &document.name;
    let source = document.source.as_deref().unwrap_or_default();
    let python = document.runtime == Some(Language::Python);
    if python && !app.sandbox.availability().runtimes.contains(&Runtime::Python) {
        let why = app.sandbox.availability().reason.clone().unwrap_or_else(|| "python does not run here".to_owned());
        return Err(ApiError::invalid(format!(
            "Tool {name} is a python lambda, and python does not run on this server: {why}"
        ))
        .with_code("runtime-unavailable"));
    }
    if !executes {
        return Err(ApiError::forbidden(format!(
            "Tool {name} is a lambda, and lambdas run only for agents granted execute; this agent's tools do not \
             include it."
        )));
    }
    let (summary, output) = if python {
        run_python(app, account_id, memory_root, name, source, input, progress).await?
    } else {
        run_typescript(name, source, input).await?
    };
    fits_output(document, &output.result)?;
    Ok((summary, output))
}

/// A python lambda: its program run in the code sandbox with memory as `/workspace`.
async fn run_python(
    app: &App,
    account_id: &str,
    memory_root: &Path,
    name: &str,
    source: &str,
    input: &Json,
    progress: Option<mpsc::Sender<Progress>>,
) -> ApiResult<(String, Output)> {
    let request = ExecRequest {
        account_id: account_id.to_owned(),
        runtime: Runtime::Python,
        code: python_program(source, input),
        workspace: memory_root.to_path_buf(),
        timeout: TIMEOUT,
        progress,
    };
    let (outcome, changed_files) = execute::run_tracked(app, request).await?;
    let ran = Ran {
        stdout: &outcome.stdout,
        stdout_truncated: outcome.stdout_truncated,
        stderr: &outcome.stderr,
        exit_code: outcome.exit_code,
        timed_out: outcome.timed_out,
    };
    let finished = finish(&ran, TIMEOUT.as_secs()).map_err(|message| lambda_failed(name, message))?;
    let summary = format!("Ran {name} ({}ms{}).", outcome.duration_ms, execute::changed_note(&changed_files));
    let logs = Some(finished.logs).filter(|logs| !logs.is_empty());
    Ok((summary, Output { result: finished.result, logs, changed_files, duration_ms: outcome.duration_ms }))
}

/// An error when `result` does not fit the lambda's output schema.
fn fits_output(document: &ToolDocument, result: &Json) -> ApiResult<()> {
    let Some(schema) = &document.output else { return Ok(()) };
    let errors = super::schema::value_errors(schema, result);
    if errors.is_empty() {
        return Ok(());
    }
    let message = format!("Its result does not fit its output schema: {}", errors.join("; "));
    Err(lambda_failed(&document.name, message))
}

/// A TypeScript lambda: its types stripped, then run in a QuickJS realm on a blocking thread
/// (`tools::typescript`), with no access to memory or anything else.
async fn run_typescript(name: &str, source: &str, input: &Json) -> ApiResult<(String, Output)> {
    let code = super::typescript::strip_types(source).map_err(|message| lambda_failed(name, message))?;
    let input = input.to_string();
    let started = std::time::Instant::now();
    let ran = tokio::task::spawn_blocking(move || super::typescript::run(&code, &input, TYPESCRIPT_TIMEOUT))
        .await
        .map_err(ApiError::internal)?;
    let duration_ms = started.elapsed().as_millis() as u64;
    let returned = ran.map_err(|failed| {
        let logs = failed.logs.join("\n");
        let message =
            if logs.is_empty() { failed.message } else { format!("{}\nIt printed:\n{}", failed.message, tail(&logs)) };
        lambda_failed(name, message)
    })?;
    let result: Json = serde_json::from_str(&returned.json)
        .map_err(|error| lambda_failed(name, format!("Its result is not JSON: {error}")))?;
    let logs = Some(tail(&returned.logs.join("\n"))).filter(|logs| !logs.is_empty());
    let summary = format!("Ran {name} ({duration_ms}ms).");
    Ok((summary, Output { result, logs, changed_files: Vec::new(), duration_ms }))
}

/// The last [`LOG_TAIL_CHARS`] characters of `text`.
fn tail(text: &str) -> String {
    let count = text.chars().count();
    if count <= LOG_TAIL_CHARS {
        return text.to_owned();
    }
    let kept: String = text.chars().skip(count - LOG_TAIL_CHARS).collect();
    format!("[earlier output left out]\n{kept}")
}

fn lambda_failed(name: &str, message: String) -> ApiError {
    ApiError::invalid(format!("Tool {name} failed. {message}")).with_code(CODE_LAMBDA_FAILED)
}

/// The Python program for `source` called with `input`.
pub(crate) fn python_program(source: &str, input: &Json) -> String {
    // A JSON string literal is a valid Python string literal: the input's JSON, encoded as one.
    let literal = serde_json::to_string(&input.to_string()).unwrap_or_else(|_| "\"null\"".to_owned());
    format!(
        r#"{source}


def __seed_lambda_entry():
    import asyncio, contextlib, inspect, io, json, sys
    data = json.loads({literal})
    entry = globals().get("main")
    if not callable(entry):
        sys.stderr.write("The lambda defines no main(input) function.\n")
        sys.exit(2)
    logs = io.StringIO()

    def flush_logs():
        text = logs.getvalue()
        if len(text) > {LOG_TAIL_CHARS}:
            text = "[earlier output left out]\n" + text[-{LOG_TAIL_CHARS}:]
        sys.stdout.write(text)
        if text and not text.endswith("\n"):
            sys.stdout.write("\n")

    try:
        with contextlib.redirect_stdout(logs):
            value = entry(data)
            if inspect.isawaitable(value):
                async def settle(awaitable):
                    return await awaitable
                value = asyncio.run(settle(value))
    except BaseException:
        flush_logs()
        raise
    flush_logs()
    sys.stdout.write("{RESULT_MARKER}" + json.dumps(value) + "\n")
    sys.stdout.flush()


__seed_lambda_entry()
"#
    )
}

/// How a lambda's sandboxed run ended, as far as its result goes.
#[derive(Debug)]
pub(crate) struct Ran<'a> {
    /// Its stdout as captured.
    pub stdout: &'a str,
    /// Whether stdout was cut at the sandbox's cap.
    pub stdout_truncated: bool,
    /// Its stderr as captured.
    pub stderr: &'a str,
    /// The exit code, when it exited.
    pub exit_code: Option<i32>,
    /// Whether the wall-clock limit ended it.
    pub timed_out: bool,
}

/// A lambda's value and what it printed.
#[derive(Debug, PartialEq)]
pub(crate) struct Finished {
    /// The value `main` returned.
    pub result: Json,
    /// What it printed, without the result line (empty when it printed nothing).
    pub logs: String,
}

/// The result of a run, or the error the caller reads: a non-zero exit (with the last lines of
/// stderr, or of the logs when stderr is empty), a timeout, or no result line.
pub(crate) fn finish(ran: &Ran<'_>, timeout_secs: u64) -> Result<Finished, String> {
    let mut marker = None;
    let mut logs = Vec::new();
    for line in ran.stdout.lines() {
        match line.strip_prefix(RESULT_MARKER) {
            Some(json) => marker = Some(json),
            None => logs.push(line),
        }
    }
    let logs = logs.join("\n");
    if ran.timed_out {
        return Err(format!("The lambda did not finish within {timeout_secs} s and was stopped."));
    }
    if ran.exit_code != Some(0) {
        let source = if ran.stderr.trim().is_empty() { logs.as_str() } else { ran.stderr };
        let lines: Vec<&str> = source.lines().collect();
        let tail = lines[lines.len().saturating_sub(ERROR_LINES)..].join("\n");
        let how = match ran.exit_code {
            Some(code) => format!("exited with code {code}"),
            None => "was killed".to_owned(),
        };
        return Err(if tail.trim().is_empty() {
            format!("The lambda {how}.")
        } else {
            format!("The lambda {how}:\n{tail}")
        });
    }
    let Some(json) = marker else {
        return Err(if ran.stdout_truncated {
            "The lambda's output was cut off before its result; return large data instead of printing it.".to_owned()
        } else {
            "The lambda ended without a result.".to_owned()
        });
    };
    let result = serde_json::from_str(json).map_err(|error| format!("The lambda's result is not JSON: {error}"))?;
    Ok(Finished { result, logs })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ran(stdout: &str, stderr: &str, exit_code: Option<i32>) -> Ran<'static> {
        Ran {
            stdout: Box::leak(stdout.to_owned().into_boxed_str()),
            stdout_truncated: false,
            stderr: Box::leak(stderr.to_owned().into_boxed_str()),
            exit_code,
            timed_out: false,
        }
    }

    #[test]
    fn the_input_is_a_python_string_literal_of_its_json() {
        let program = python_program("def main(x):\n    return x", &json!({"q": "a \"quoted\"\nline ✓"}));
        assert!(program.starts_with("def main(x):\n    return x\n"));
        assert!(program.contains(r#"data = json.loads("{\"q\":\"a \\\"quoted\\\"\\nline ✓\"}")"#), "{program}");
        assert!(program.trim_end().ends_with("__seed_lambda_entry()"));
    }

    #[test]
    fn the_last_marker_line_is_the_result_and_the_rest_are_logs() {
        let out = format!("step 1\n{RESULT_MARKER}{{\"fake\":1}}\nstep 2\n{RESULT_MARKER}{{\"n\":2}}\n");
        let finished = finish(&ran(&out, "", Some(0)), 60).unwrap();
        assert_eq!(finished.result, json!({"n": 2}));
        assert_eq!(finished.logs, "step 1\nstep 2");
    }

    #[test]
    fn failures_name_how_the_lambda_ended() {
        let stderr = (1..=12).map(|n| format!("line {n}")).collect::<Vec<_>>().join("\n");
        let error = finish(&ran("", &stderr, Some(1)), 60).unwrap_err();
        assert!(error.starts_with("The lambda exited with code 1:\nline 5\n"), "{error}");
        assert!(error.ends_with("line 12"), "{error}");
        let error = finish(&ran("printed\n", "", Some(3)), 60).unwrap_err();
        assert_eq!(error, "The lambda exited with code 3:\nprinted");
        assert_eq!(finish(&ran("", "", None), 60).unwrap_err(), "The lambda was killed.");
        let timed_out = Ran { timed_out: true, ..ran("", "", None) };
        assert!(finish(&timed_out, 9).unwrap_err().contains("within 9 s"));
        assert_eq!(finish(&ran("just logs\n", "", Some(0)), 60).unwrap_err(), "The lambda ended without a result.");
        let cut = Ran { stdout_truncated: true, ..ran("x", "", Some(0)) };
        assert!(finish(&cut, 60).unwrap_err().contains("cut off"));
        let bad = format!("{RESULT_MARKER}{{nope\n");
        assert!(finish(&ran(&bad, "", Some(0)), 60).unwrap_err().contains("not JSON"));
    }
}
