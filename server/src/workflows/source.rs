//! A workflow's source (docs/workflows.md): one module, `export default async function (input,
//! ctx) { … }`, at most [`MAX_SOURCE_BYTES`]. [`lint`] turns what a replay could not reproduce
//! into authoring-time errors that say what to use instead; [`transform`] makes the default
//! export a global the realm's kickoff calls, keeping every line where it was so a stack trace
//! points into the stored source.
//!
//! Both work on the text with patterns, not a parser: a banned name inside a string or a comment
//! is reported too (the realm removes those names anyway; the lint only brings the failure
//! forward).

use std::sync::LazyLock;

use regex::Regex;

/// The largest source a workflow may have, in UTF-8 bytes.
pub(crate) const MAX_SOURCE_BYTES: usize = 256 * 1024;

/// The global the transformed default export is assigned to (declared by the realm's prelude).
pub(crate) const MAIN_GLOBAL: &str = "__workflow_main";

/// What a workflow may not use, and what to use instead.
static BANNED: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    [
        (r"\bMath\.random\b", "Math.random is not available: pass randomness in as workflow input"),
        (r"\bDate\b", "Date is not available: use `await ctx.now()` for the current time"),
        (
            r"\bsetTimeout\b|\bsetInterval\b",
            "timers are not available: use `await ctx.sleep(ms)`, which is durable across restarts",
        ),
        (r"\bfetch\s*\(", "fetch is not available: use `await ctx.call(tool, input)` with a web tool"),
        (r"\bXMLHttpRequest\b", "XMLHttpRequest is not available: use `ctx.call` with a web tool"),
        (r"\beval\s*\(", "eval is not available in workflows"),
        (r"\brequire\s*\(", "require is not available: a workflow imports nothing, everything comes from ctx"),
        (r"\bimport\s*\(|(?m)^\s*import\s", "imports are not available: a workflow is one self-contained module"),
        (r"\bprocess\.", "process is not available in workflows"),
        (r"\bglobalThis\b", "globalThis is not available in workflows"),
    ]
    .into_iter()
    .map(|(pattern, message)| (Regex::new(pattern).expect("a valid built-in pattern"), message))
    .collect()
});

/// `export default`, with any whitespace (newlines included) between the two words.
static EXPORT_DEFAULT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\bexport\s+default\b").expect("a valid built-in pattern"));

/// What is wrong with `source`, one message per problem; empty when it may run.
pub(crate) fn lint(source: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if source.len() > MAX_SOURCE_BYTES {
        errors.push(format!("the source is {} bytes; the limit is {MAX_SOURCE_BYTES}", source.len()));
    }
    for (pattern, message) in BANNED.iter() {
        if pattern.is_match(source) {
            errors.push((*message).to_owned());
        }
    }
    if EXPORT_DEFAULT.find_iter(source).count() != 1 {
        errors.push("the module must have exactly one `export default async function (input, ctx) { … }`".to_owned());
    }
    errors
}

/// [`lint`] as an answer: a 400 `Workflow source rejected:` with one line per problem.
pub(crate) fn check(source: &str) -> crate::error::ApiResult<()> {
    let problems = lint(source);
    if problems.is_empty() {
        return Ok(());
    }
    Err(crate::error::ApiError::invalid(format!("Workflow source rejected:\n- {}", problems.join("\n- "))))
}

/// The script a trigger's `tool` continuation runs (docs/workflows.md §4): one `ctx.call` of
/// `tool` (JSON-encoded, so any name stays a string literal) with the continuation's input (`{}`
/// when it has none), whose result is the run's output. It goes through the same executor and
/// journal as any workflow; `RunInfo.sourceText` shows it.
pub(crate) fn one_call(tool: &str) -> String {
    let name = serde_json::Value::String(tool.to_owned()).to_string();
    format!(
        "export default async function (input, ctx) {{\n  return await ctx.call({name}, input.input ?? {{}});\n}}\n"
    )
}

/// `source` with its first `export default` replaced by an assignment to [`MAIN_GLOBAL`], and
/// the newlines that stood between the two words kept, so every line keeps its number.
pub(crate) fn transform(source: &str) -> String {
    let Some(found) = EXPORT_DEFAULT.find(source) else { return source.to_owned() };
    let newlines = found.as_str().matches('\n').count();
    let mut out = String::with_capacity(source.len() + MAIN_GLOBAL.len());
    out.push_str(&source[..found.start()]);
    out.push_str(MAIN_GLOBAL);
    out.push_str(" =");
    out.extend(std::iter::repeat_n('\n', newlines));
    out.push_str(&source[found.end()..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_continuation_runs_one_call_whatever_its_name() {
        let script = one_call("write");
        assert!(lint(&script).is_empty(), "{:?}", lint(&script));
        assert!(script.contains(r#"ctx.call("write", input.input ?? {})"#), "{script}");
        let odd = one_call("a\"b\\c\n`${x}`");
        assert!(odd.contains(r#"ctx.call("a\"b\\c\n`${x}`", "#), "{odd}");
        assert_eq!(odd.lines().count(), 3, "the name cannot add a line");
    }

    const GOOD: &str = "export default async function (input, ctx) {\n  return await ctx.now();\n}\n";

    #[test]
    fn a_plain_workflow_passes() {
        assert_eq!(lint(GOOD), Vec::<String>::new());
    }

    #[test]
    fn each_ambient_name_is_reported_with_what_to_use_instead() {
        let cases = [
            ("const t = Date.now();", "ctx.now()"),
            ("new Date()", "ctx.now()"),
            ("const r = Math.random();", "randomness in as workflow input"),
            ("setTimeout(() => {}, 5)", "ctx.sleep(ms)"),
            ("setInterval(f, 5)", "ctx.sleep(ms)"),
            ("await fetch ('https://x')", "ctx.call(tool, input)"),
            ("new XMLHttpRequest()", "ctx.call"),
            ("eval('1')", "eval is not available"),
            ("require('fs')", "require is not available"),
            ("import fs from 'fs';", "imports are not available"),
            ("await import('fs')", "imports are not available"),
            ("process.exit(1)", "process is not available"),
            ("globalThis.x = 1", "globalThis is not available"),
        ];
        for (line, expected) in cases {
            let source = format!("{GOOD}{line}\n");
            let errors = lint(&source);
            assert_eq!(errors.len(), 1, "{line}: {errors:?}");
            assert!(errors[0].contains(expected), "{line}: {errors:?}");
        }
    }

    #[test]
    fn names_that_merely_contain_a_banned_one_pass() {
        let source = format!("{GOOD}const Dates = 1; const updated = 2; myfetch(); const evaluate = 3;\n");
        assert_eq!(lint(&source), Vec::<String>::new());
    }

    #[test]
    fn exactly_one_default_export() {
        let none = "async function main(input, ctx) {}\n";
        let two = format!("{GOOD}export default 1;\n");
        for source in [none, two.as_str()] {
            let errors = lint(source);
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(errors[0].contains("exactly one `export default"), "{errors:?}");
        }
    }

    #[test]
    fn oversized_source_is_reported() {
        let source = format!("{GOOD}//{}\n", "x".repeat(MAX_SOURCE_BYTES));
        let errors = lint(&source);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("the limit is 262144"), "{errors:?}");
    }

    #[test]
    fn transform_assigns_the_default_export_and_keeps_line_numbers() {
        assert_eq!(
            transform("// a\nexport default async function (input, ctx) {}\n"),
            "// a\n__workflow_main = async function (input, ctx) {}\n"
        );
        let split = "export\n  default\n async (input, ctx) => 1\nthrow 1\n";
        let out = transform(split);
        assert_eq!(out, "__workflow_main =\n\n async (input, ctx) => 1\nthrow 1\n");
        assert_eq!(out.lines().count(), split.lines().count());
    }
}
