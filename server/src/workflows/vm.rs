//! The script realm (docs/workflows.md): one QuickJS runtime per execution, on a thread of its
//! own, with no ambient authority. The only way out is `ctx`, whose calls queue requests the
//! [pump](super::pump) answers later.
//!
//! QuickJS is synchronous and its values are not `Send`, so the realm lives on a dedicated
//! `std::thread` that takes commands over a channel: [`Vm::start`] evaluates the prelude and the
//! source and calls the default export; [`Vm::deliver`] hands in a batch of answers. Each command
//! then runs the promise jobs until none is left and answers with a [`Slice`]: the effects the
//! script asked for meanwhile, its progress reports, and whether it ended. No JavaScript runs on
//! a tokio worker.
//!
//! Containment, per command: a memory limit for the runtime, a maximum stack size, and an
//! interrupt handler that stops the script once the command has run longer than its fuel or the
//! execution was stopped (canceled, or the [`Vm`] dropped). Dropping the [`Vm`] ends the thread; a
//! panic on it ends the channel, which the caller reads as [`Stop::EngineGone`].

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rquickjs::context::intrinsic;
use rquickjs::{CatchResultExt, Context, Ctx, Function, Runtime, Value};
use serde::Deserialize;
use serde_json::Value as Json;
use tokio::sync::oneshot;

use super::error::{WorkflowError, codes};
use super::source;

/// The realm's prelude: `ctx`, the pending-effect registry, the removal of `Date` and
/// `Math.random`.
const PRELUDE: &str = include_str!("prelude.js");

/// How much a realm may use.
#[derive(Debug, Clone, Copy)]
pub(crate) struct VmLimits {
    /// The longest one command may compute before the script is interrupted.
    pub fuel: Duration,
    /// The runtime's memory limit, in bytes.
    pub memory_bytes: usize,
    /// The script's maximum stack size, in bytes.
    pub stack_bytes: usize,
}

/// An effect the script asked for (`ctx.call`, `ctx.sleep`, …).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Request {
    /// The realm's id for the pending promise; the answer names it.
    pub call_id: u64,
    /// `tool`, `agent`, `sleep`, `wait`, `continueAsNew`, `now`, `log`, `step` or `plan`.
    pub op: String,
    /// The call's arguments as the prelude packed them.
    pub args: Json,
}

/// The answer to a [`Request`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Delivery {
    /// The request's `call_id`.
    pub call_id: u64,
    /// Whether the promise resolves (`true`) or rejects with an `EffectError` built from `value`.
    pub ok: bool,
    /// The value, or the rejection's `{code, message, …}`.
    pub value: Json,
}

/// What one command did.
#[derive(Debug, Default)]
pub(crate) struct Slice {
    /// The effects the script asked for, in the order it asked.
    pub requests: Vec<Request>,
    /// `ctx.progress` patches.
    pub progress: Vec<Json>,
    /// Set when the default export's promise settled.
    pub finished: Option<Finished>,
}

/// How the default export ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Finished {
    /// It returned this value.
    Returned(Json),
    /// It threw (or returned a value that is not JSON).
    Threw(WorkflowError),
}

/// Why the realm stopped before a command completed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Stop {
    /// The interrupt handler stopped the script: `stopped` when the execution was stopped from
    /// outside, otherwise the command ran out of fuel.
    Interrupted {
        /// Whether the stop flag was set.
        stopped: bool,
    },
    /// Evaluating the source or running a job failed outside the script's promise (a syntax
    /// error, an error thrown while the module's top level ran).
    Failed(WorkflowError),
    /// The realm's thread could not start, or ended without answering (a panic).
    EngineGone(String),
}

/// A realm on its own thread. Dropping it sets the stop flag and closes the channel, so the
/// thread ends as soon as its current command returns.
#[derive(Debug)]
pub(crate) struct Vm {
    commands: mpsc::Sender<Command>,
    stop: Arc<AtomicBool>,
    /// Never joined here (that would block the caller); tests take it to see the thread end.
    #[cfg_attr(not(test), allow(dead_code, reason = "only the tests join the realm's thread"))]
    thread: Option<std::thread::JoinHandle<()>>,
}

enum Command {
    Start {
        source: String,
        input: Json,
        run_id: String,
        reply: oneshot::Sender<Result<Slice, Stop>>,
    },
    Deliver {
        batch: Vec<Delivery>,
        reply: oneshot::Sender<Result<Slice, Stop>>,
    },
    #[cfg(test)]
    Panic,
}

impl Vm {
    /// Starts a realm's thread. Setting `stop` interrupts whatever the script is computing.
    pub(crate) fn spawn(limits: VmLimits, stop: Arc<AtomicBool>) -> Result<Self, Stop> {
        let (commands, inbox) = mpsc::channel();
        let thread_stop = stop.clone();
        let thread = std::thread::Builder::new()
            .name("workflow-vm".to_owned())
            // The script's stack limit plus room for the engine's and this thread's own frames.
            .stack_size(limits.stack_bytes + 4 * 1024 * 1024)
            .spawn(move || serve(limits, thread_stop, inbox))
            .map_err(|error| Stop::EngineGone(format!("the workflow engine's thread did not start: {error}")))?;
        Ok(Self { commands, stop, thread: Some(thread) })
    }

    /// Evaluates the prelude and `source` (the stored module, transformed here) and calls its
    /// default export with `input` and a `ctx` for `run_id`.
    pub(crate) async fn start(&self, source: &str, input: &Json, run_id: &str) -> Result<Slice, Stop> {
        let (source, input, run_id) = (source::transform(source), input.clone(), run_id.to_owned());
        self.ask(|reply| Command::Start { source, input, run_id, reply }).await
    }

    /// Settles the promises of `batch`, in order, and runs what they unblocked.
    pub(crate) async fn deliver(&self, batch: Vec<Delivery>) -> Result<Slice, Stop> {
        self.ask(|reply| Command::Deliver { batch, reply }).await
    }

    async fn ask(&self, command: impl FnOnce(oneshot::Sender<Result<Slice, Stop>>) -> Command) -> Result<Slice, Stop> {
        let (reply, answer) = oneshot::channel();
        self.commands.send(command(reply)).map_err(|_| gone())?;
        answer.await.unwrap_or_else(|_| Err(gone()))
    }

    #[cfg(test)]
    fn panic_for_test(&self) {
        let _ = self.commands.send(Command::Panic);
    }

    #[cfg(test)]
    fn take_thread(&mut self) -> std::thread::JoinHandle<()> {
        self.thread.take().expect("the thread is taken once")
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn gone() -> Stop {
    Stop::EngineGone("the workflow engine stopped without answering".to_owned())
}

/// The realm's thread: builds the realm, then answers commands until the channel closes.
fn serve(limits: VmLimits, stop: Arc<AtomicBool>, inbox: mpsc::Receiver<Command>) {
    let realm = Realm::new(limits, stop);
    while let Ok(command) = inbox.recv() {
        let (result, reply) = match command {
            Command::Start { source, input, run_id, reply } => {
                (realm.as_ref().map_err(Clone::clone).and_then(|realm| realm.start(&source, &input, &run_id)), reply)
            }
            Command::Deliver { batch, reply } => {
                (realm.as_ref().map_err(Clone::clone).and_then(|realm| realm.deliver(&batch)), reply)
            }
            #[cfg(test)]
            Command::Panic => panic!("a panic the tests asked for"),
        };
        // The pump may have gone (canceled); then nobody needs the answer.
        let _ = reply.send(result);
    }
}

/// What the natives collect during a command.
#[derive(Default)]
struct Outbox {
    requests: Vec<Request>,
    progress: Vec<Json>,
    finished: Option<Finished>,
}

/// A terminal error as the prelude's `describe` reports it.
#[derive(Deserialize)]
struct Described {
    code: String,
    message: String,
    #[serde(default)]
    stack: Option<String>,
    #[serde(default)]
    tool: Option<String>,
    #[serde(rename = "callSeq", default)]
    call_seq: Option<f64>,
    #[serde(default)]
    resource: bool,
}

impl From<Described> for WorkflowError {
    fn from(described: Described) -> Self {
        let code = if described.resource { codes::OUT_OF_MEMORY.to_owned() } else { described.code };
        WorkflowError {
            code,
            message: described.message,
            stack: described.stack,
            tool: described.tool,
            call_seq: described
                .call_seq
                .filter(|seq| seq.is_finite() && *seq >= 0.0 && seq.fract() == 0.0)
                .map(|seq| seq as u64),
        }
    }
}

/// The terminal error from the prelude's description of it, or a plain one when it is not one.
fn parse_described(json: &str) -> WorkflowError {
    serde_json::from_str::<Described>(json).map(WorkflowError::from).unwrap_or_else(|_| {
        WorkflowError::new(codes::WORKFLOW_ERROR, "the workflow failed with an error that could not be read")
    })
}

struct Realm {
    runtime: Runtime,
    context: Context,
    outbox: Rc<RefCell<Outbox>>,
    deadline: Rc<Cell<Instant>>,
    interrupted: Rc<Cell<bool>>,
    stop: Arc<AtomicBool>,
    fuel: Duration,
}

impl Realm {
    fn new(limits: VmLimits, stop: Arc<AtomicBool>) -> Result<Self, Stop> {
        let engine =
            |error: rquickjs::Error| Stop::EngineGone(format!("the workflow realm could not be built: {error}"));
        let runtime = Runtime::new().map_err(engine)?;
        runtime.set_memory_limit(limits.memory_bytes);
        runtime.set_max_stack_size(limits.stack_bytes);
        let deadline = Rc::new(Cell::new(Instant::now() + limits.fuel));
        let interrupted = Rc::new(Cell::new(false));
        {
            let (deadline, interrupted, stop) = (deadline.clone(), interrupted.clone(), stop.clone());
            runtime.set_interrupt_handler(Some(Box::new(move || {
                if stop.load(Ordering::Relaxed) || Instant::now() > deadline.get() {
                    interrupted.set(true);
                }
                interrupted.get()
            })));
        }
        // No Date, Performance or WeakRef (the clock and the collector's timing are not
        // replayable); the prelude puts a `Date` that says what to use instead.
        let context = Context::custom::<(
            intrinsic::Eval,
            intrinsic::RegExpCompiler,
            intrinsic::RegExp,
            intrinsic::Json,
            intrinsic::Proxy,
            intrinsic::MapSet,
            intrinsic::TypedArrays,
            intrinsic::Promise,
        )>(&runtime)
        .map_err(engine)?;
        Ok(Self { runtime, context, outbox: Rc::default(), deadline, interrupted, stop, fuel: limits.fuel })
    }

    fn start(&self, source: &str, input: &Json, run_id: &str) -> Result<Slice, Stop> {
        let input = input.to_string();
        self.slice(|ctx| {
            self.install_natives(ctx)?;
            eval(ctx, PRELUDE, "prelude.js")?;
            eval(ctx, source, "workflow.js")?;
            let kickoff: Function = ctx.globals().get("__kickoff")?;
            kickoff.call::<_, ()>((input, run_id))
        })
    }

    fn deliver(&self, batch: &[Delivery]) -> Result<Slice, Stop> {
        self.slice(|ctx| {
            let deliver: Function = ctx.globals().get("__deliver")?;
            for delivery in batch {
                deliver.call::<_, ()>((delivery.call_id as f64, delivery.ok, delivery.value.to_string()))?;
            }
            Ok(())
        })
    }

    fn install_natives(&self, ctx: &Ctx<'_>) -> rquickjs::Result<()> {
        let globals = ctx.globals();
        let outbox = self.outbox.clone();
        globals.set(
            "__host_enqueue",
            Function::new(ctx.clone(), move |op: String, id: f64, args: String| {
                let args = serde_json::from_str(&args).unwrap_or(Json::Null);
                outbox.borrow_mut().requests.push(Request { call_id: id as u64, op, args });
            })?,
        )?;
        let outbox = self.outbox.clone();
        globals.set(
            "__host_progress",
            Function::new(ctx.clone(), move |patch: String| {
                if let Ok(patch) = serde_json::from_str(&patch) {
                    outbox.borrow_mut().progress.push(patch);
                }
            })?,
        )?;
        let outbox = self.outbox.clone();
        globals.set(
            "__host_finish",
            Function::new(ctx.clone(), move |ok: bool, json: String| {
                let finished = if ok {
                    match serde_json::from_str(&json) {
                        Ok(value) => Finished::Returned(value),
                        Err(_) => Finished::Threw(WorkflowError::new(
                            codes::WORKFLOW_ERROR,
                            "the workflow's output could not be read as JSON",
                        )),
                    }
                } else {
                    Finished::Threw(parse_described(&json))
                };
                outbox.borrow_mut().finished.get_or_insert(finished);
            })?,
        )?;
        Ok(())
    }

    /// Runs `work` and then every pending job, with a fresh fuel allowance; collects what the
    /// natives saw.
    fn slice(&self, work: impl FnOnce(&Ctx<'_>) -> rquickjs::Result<()>) -> Result<Slice, Stop> {
        self.deadline.set(Instant::now() + self.fuel);
        self.interrupted.set(false);
        let worked = self.context.with(|ctx| work(&ctx).catch(&ctx).map_err(|caught| describe(&ctx, caught)));
        self.check_interrupt()?;
        worked.map_err(Stop::Failed)?;
        loop {
            match self.runtime.execute_pending_job() {
                Ok(true) => self.check_interrupt()?,
                Ok(false) => break,
                Err(job) => {
                    self.check_interrupt()?;
                    let error = job.0.with(|ctx| {
                        let caught = ctx.catch();
                        describe_value(&ctx, caught)
                    });
                    return Err(Stop::Failed(error));
                }
            }
        }
        let outbox = std::mem::take(&mut *self.outbox.borrow_mut());
        Ok(Slice { requests: outbox.requests, progress: outbox.progress, finished: outbox.finished })
    }

    fn check_interrupt(&self) -> Result<(), Stop> {
        if self.interrupted.get() {
            return Err(Stop::Interrupted { stopped: self.stop.load(Ordering::SeqCst) });
        }
        Ok(())
    }
}

fn eval(ctx: &Ctx<'_>, code: &str, filename: &str) -> rquickjs::Result<()> {
    let mut options = rquickjs::context::EvalOptions::default();
    options.global = true;
    options.strict = true;
    options.filename = Some(filename.to_owned());
    ctx.eval_with_options::<(), _>(code, options)
}

/// A caught error (a thrown value, or a failure of the bindings) as a terminal error.
fn describe<'js>(ctx: &Ctx<'js>, caught: rquickjs::CaughtError<'js>) -> WorkflowError {
    match caught {
        rquickjs::CaughtError::Exception(exception) => describe_value(ctx, exception.into_object().into_value()),
        rquickjs::CaughtError::Value(value) => describe_value(ctx, value),
        rquickjs::CaughtError::Error(error) => WorkflowError::new(codes::WORKFLOW_ERROR, error.to_string()),
    }
}

/// A thrown value as a terminal error, through the prelude's `describe` (which also says whether
/// it was the engine's own resource error).
fn describe_value<'js>(ctx: &Ctx<'js>, value: Value<'js>) -> WorkflowError {
    let described =
        ctx.globals().get::<_, Function>("__describe").and_then(|describe| describe.call::<_, String>((value,)));
    match described {
        Ok(json) => parse_described(&json),
        Err(_) => WorkflowError::new(codes::WORKFLOW_ERROR, "the workflow failed with an error that could not be read"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn limits(fuel: Duration) -> VmLimits {
        VmLimits { fuel, memory_bytes: 32 * 1024 * 1024, stack_bytes: 1024 * 1024 }
    }

    fn spawn(fuel: Duration) -> (Vm, Arc<AtomicBool>) {
        let stop = Arc::new(AtomicBool::new(false));
        let vm = Vm::spawn(limits(fuel), stop.clone()).expect("the realm's thread starts");
        (vm, stop)
    }

    const NOW_THEN_SPIN: &str = "export default async function (input, ctx) {\n  await ctx.now();\n  for (;;) {}\n}\n";

    #[tokio::test]
    async fn a_slice_reports_requests_and_a_delivery_settles_them() {
        let (vm, _stop) = spawn(Duration::from_secs(30));
        let source = "export default async function (input, ctx) {\n  const t = await ctx.now();\n  return {t, input, run: ctx.runId};\n}\n";
        let slice = vm.start(source, &json!({"x": 1}), "run-1").await.expect("it starts");
        assert_eq!(slice.requests, vec![Request { call_id: 1, op: "now".to_owned(), args: json!({}) }]);
        assert_eq!(slice.finished, None);
        let slice = vm.deliver(vec![Delivery { call_id: 1, ok: true, value: json!(42) }]).await.expect("it runs");
        assert!(slice.requests.is_empty());
        assert_eq!(slice.finished, Some(Finished::Returned(json!({"t": 42, "input": {"x": 1}, "run": "run-1"}))));
    }

    #[tokio::test]
    async fn the_stop_flag_interrupts_a_busy_script() {
        let (vm, stop) = spawn(Duration::from_secs(3600));
        let slice = vm.start(NOW_THEN_SPIN, &Json::Null, "run-1").await.expect("it starts");
        assert_eq!(slice.requests.len(), 1);
        let setter = tokio::spawn(async move {
            tokio::task::yield_now().await;
            stop.store(true, Ordering::SeqCst);
        });
        // Only the stop flag can end this slice: its fuel is an hour.
        let stopped = vm.deliver(vec![Delivery { call_id: 1, ok: true, value: json!(1) }]).await;
        assert_eq!(stopped.err(), Some(Stop::Interrupted { stopped: true }));
        setter.await.expect("the setter ran");
    }

    #[tokio::test]
    async fn dropping_the_handle_of_a_busy_realm_ends_its_thread() {
        let (mut vm, _stop) = spawn(Duration::from_secs(3600));
        let thread = vm.take_thread();
        vm.start(NOW_THEN_SPIN, &Json::Null, "run-1").await.expect("it starts");
        let busy = tokio::spawn(async move {
            let _ = vm.deliver(vec![Delivery { call_id: 1, ok: true, value: json!(1) }]).await;
        });
        tokio::task::yield_now().await;
        busy.abort();
        let _ = busy.await;
        tokio::task::spawn_blocking(move || thread.join()).await.expect("joined").expect("the thread ended cleanly");
    }

    #[tokio::test]
    async fn a_panic_on_the_realm_thread_is_an_answer_not_a_hang() {
        let (vm, _stop) = spawn(Duration::from_secs(30));
        vm.panic_for_test();
        let answer = vm.deliver(Vec::new()).await;
        assert!(matches!(answer, Err(Stop::EngineGone(_))), "{answer:?}");
    }

    #[tokio::test]
    async fn a_syntax_error_fails_with_its_location_in_the_stored_source() {
        let (vm, _stop) = spawn(Duration::from_secs(30));
        let source = "export default async function (input, ctx) {\n  return 1 +;\n}\n";
        let Err(Stop::Failed(error)) = vm.start(source, &Json::Null, "run-1").await else { panic!("a syntax error") };
        assert_eq!(error.code, codes::WORKFLOW_ERROR);
        assert!(error.stack.unwrap_or_default().contains("workflow.js:2"), "{}", error.message);
    }
}
