//! TypeScript lambdas (docs/sandbox.md, "Lambda tools"): the source's types stripped by oxc, then
//! the module evaluated in a fresh QuickJS realm of its own and its default export (or `main`)
//! called with the input.
//!
//! The realm has no file, network or process access at all, so it needs no sandbox process: a
//! lambda computes on its input and returns a value. It is bounded by [`MEMORY_BYTES`], a stack
//! of [`STACK_BYTES`] and a wall-clock deadline checked by QuickJS's interrupt handler; it runs on
//! a blocking thread, never a runtime worker. `console.log` and its siblings are captured as the
//! lambda's logs (the last [`super::lambda::LOG_TAIL_CHARS`] characters).

use std::cell::{Cell, RefCell};
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use oxc::allocator::Allocator;
use oxc::codegen::Codegen;
use oxc::parser::Parser;
use oxc::semantic::SemanticBuilder;
use oxc::span::SourceType;
use oxc::transformer::{TransformOptions, Transformer};
use rquickjs::{CatchResultExt as _, CaughtError, Context, Ctx, Function, Module, Object, Runtime, Value};

/// The realm's heap.
const MEMORY_BYTES: usize = 64 * 1024 * 1024;
/// The realm's stack.
const STACK_BYTES: usize = 1024 * 1024;

/// Routes `console` to the host; everything printed is one line per call, its arguments joined.
const PRELUDE: &str = r#"
(() => {
  const show = (value) => {
    if (typeof value === "string") return value;
    try { const json = JSON.stringify(value); return json === undefined ? String(value) : json; }
    catch (_) { return String(value); }
  };
  const log = (...values) => __lambda_log(values.map(show).join(" "));
  globalThis.console = { log, info: log, warn: log, error: log, debug: log };
})();
"#;

/// `source` (an ES module in TypeScript) as JavaScript, or what the parser or transformer said
/// was wrong with it.
pub(crate) fn strip_types(source: &str) -> Result<String, String> {
    let allocator = Allocator::default();
    let parsed = Parser::new(&allocator, source, SourceType::ts().with_module(true)).parse();
    if let Some(error) = parsed.diagnostics.first() {
        return Err(format!("The lambda's TypeScript does not parse: {error}"));
    }
    let mut program = parsed.program;
    let scoping = SemanticBuilder::new().build(&program).semantic.into_scoping();
    let options = TransformOptions::default();
    let transformed =
        Transformer::new(&allocator, Path::new("lambda.ts"), &options).build_with_scoping(scoping, &mut program);
    if let Some(error) = transformed.diagnostics.first() {
        return Err(format!("The lambda's TypeScript could not be transformed: {error}"));
    }
    Ok(Codegen::new().build(&program).code)
}

/// What a run of the module produced: the JSON of the value, and what it printed.
#[derive(Debug, PartialEq)]
pub(crate) struct Returned {
    /// The JSON text of the value (`null` for `undefined`).
    pub json: String,
    /// What `console` printed, a line per call.
    pub logs: Vec<String>,
}

/// Why a run did not return a value: the error the caller reads, and what was printed before.
#[derive(Debug, PartialEq)]
pub(crate) struct Failed {
    /// What went wrong.
    pub message: String,
    /// What `console` printed before it did.
    pub logs: Vec<String>,
}

/// Evaluates module `code` (JavaScript) and calls its default export, or its `main` export, with
/// the value of `input_json`, awaiting a promise; within `timeout`. Blocking: call it on a
/// blocking thread.
pub(crate) fn run(code: &str, input_json: &str, timeout: Duration) -> Result<Returned, Failed> {
    let logs = Rc::new(RefCell::new(Vec::new()));
    let failed = |message: String, logs: &Rc<RefCell<Vec<String>>>| Failed { message, logs: logs.take() };
    let runtime =
        Runtime::new().map_err(|error| failed(format!("The lambda realm could not start: {error}"), &logs))?;
    runtime.set_memory_limit(MEMORY_BYTES);
    runtime.set_max_stack_size(STACK_BYTES);
    let deadline = Instant::now() + timeout;
    let interrupted = Rc::new(Cell::new(false));
    {
        let interrupted = interrupted.clone();
        runtime.set_interrupt_handler(Some(Box::new(move || {
            if Instant::now() > deadline {
                interrupted.set(true);
            }
            interrupted.get()
        })));
    }
    let context =
        Context::full(&runtime).map_err(|error| failed(format!("The lambda realm could not start: {error}"), &logs))?;
    let outcome = context.with(|ctx| call(&ctx, code, input_json, &logs));
    if interrupted.get() {
        let seconds = timeout.as_secs_f64();
        return Err(failed(format!("The lambda did not finish within {seconds} s and was stopped."), &logs));
    }
    match outcome {
        Ok(json) => Ok(Returned { json, logs: logs.take() }),
        Err(message) => Err(failed(message, &logs)),
    }
}

fn call(ctx: &Ctx<'_>, code: &str, input_json: &str, logs: &Rc<RefCell<Vec<String>>>) -> Result<String, String> {
    let sink = logs.clone();
    let log = Function::new(ctx.clone(), move |line: String| sink.borrow_mut().push(line))
        .map_err(|error| error.to_string())?;
    ctx.globals().set("__lambda_log", log).map_err(|error| error.to_string())?;
    ctx.eval::<(), _>(PRELUDE).catch(ctx).map_err(|caught| describe(&caught))?;
    let declared = Module::declare(ctx.clone(), "lambda.js", code).catch(ctx).map_err(|caught| describe(&caught))?;
    let (module, evaluated) = declared.eval().catch(ctx).map_err(|caught| describe(&caught))?;
    evaluated.finish::<()>().catch(ctx).map_err(|caught| describe(&caught))?;
    let exports: Object = module.namespace().map_err(|error| error.to_string())?;
    let entry = ["default", "main"]
        .into_iter()
        .find_map(|name| exports.get::<_, Function>(name).ok())
        .ok_or_else(|| "The lambda exports no default function or main(input).".to_owned())?;
    let input = ctx.json_parse(input_json).catch(ctx).map_err(|caught| describe(&caught))?;
    let value: Value = entry.call((input,)).catch(ctx).map_err(|caught| describe(&caught))?;
    let value = match value.as_promise() {
        Some(promise) => promise.finish::<Value>().catch(ctx).map_err(|caught| describe(&caught))?,
        None => value,
    };
    let json = ctx.json_stringify(value).catch(ctx).map_err(|caught| describe(&caught))?;
    json.map(|text| text.to_string().map_err(|error| error.to_string())).unwrap_or_else(|| Ok("null".to_owned()))
}

/// A caught JavaScript error as one message: the thrown error's message and stack, or the
/// thrown value.
fn describe(caught: &CaughtError<'_>) -> String {
    match caught {
        CaughtError::Exception(exception) => {
            let message = exception.message().unwrap_or_default();
            match exception.stack().filter(|stack| !stack.trim().is_empty()) {
                Some(stack) => format!("{message}\n{}", stack.trim_end()),
                None => message,
            }
        }
        CaughtError::Value(value) => match value.as_string().and_then(|text| text.to_string().ok()) {
            Some(text) => format!("Uncaught {text}"),
            None => "The lambda threw a value that is not an error".to_owned(),
        },
        CaughtError::Error(rquickjs::Error::WouldBlock) => {
            "The lambda awaits something that never settles (there are no timers or I/O here).".to_owned()
        }
        CaughtError::Error(error) => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(source: &str, input: &str) -> Result<Returned, Failed> {
        let code = strip_types(source).map_err(|message| Failed { message, logs: Vec::new() })?;
        run(&code, input, Duration::from_secs(2))
    }

    #[test]
    fn types_are_stripped_and_the_default_export_runs() {
        let source = "interface In { n: number }\ntype Out = { square: number };\n\
                      export default function (input: In): Out {\n  console.log('squaring', input.n, {a: 1});\n  \
                      return { square: (input.n as number) ** 2 };\n}\n";
        let returned = ran(source, r#"{"n": 12}"#).unwrap();
        assert_eq!(returned.json, r#"{"square":144}"#);
        assert_eq!(returned.logs, ["squaring 12 {\"a\":1}"]);
    }

    #[test]
    fn main_and_async_exports_are_awaited() {
        let source = "export async function main(input: { xs: number[] }) {\n  \
                      const sum = await Promise.resolve(input.xs.reduce((a, b) => a + b, 0));\n  return sum;\n}\n";
        assert_eq!(ran(source, r#"{"xs": [1, 2, 3]}"#).unwrap().json, "6");
        assert_eq!(ran("export default () => undefined", "{}").unwrap().json, "null");
    }

    #[test]
    fn failures_say_what_went_wrong() {
        let thrown = ran("export default () => { console.log('before'); throw new Error('no luck'); }", "{}");
        let thrown = thrown.unwrap_err();
        assert!(thrown.message.starts_with("no luck"), "{}", thrown.message);
        assert_eq!(thrown.logs, ["before"]);
        let syntax = ran("export default (input: number => 1", "{}").unwrap_err();
        assert!(syntax.message.starts_with("The lambda's TypeScript does not parse"), "{}", syntax.message);
        let none = ran("export const x = 1;", "{}").unwrap_err();
        assert_eq!(none.message, "The lambda exports no default function or main(input).");
        let never = ran("export default () => new Promise(() => {})", "{}").unwrap_err();
        assert!(never.message.contains("never settles"), "{}", never.message);
    }

    #[test]
    fn a_busy_loop_and_a_memory_bomb_are_stopped() {
        let looped = ran("export default () => { while (true) {} }", "{}").unwrap_err();
        assert!(looped.message.contains("did not finish within 2 s"), "{}", looped.message);
        let bomb = ran("export default () => { const a = []; while (true) a.push('x'.repeat(1 << 20)); }", "{}");
        assert!(bomb.unwrap_err().message.contains("out of memory"), "a memory bomb fails");
    }
}
