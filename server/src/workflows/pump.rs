//! The host pump (docs/workflows.md): runs one execution of a workflow to an [`Outcome`],
//! answering each effect the script asks for from the journal when an earlier execution settled
//! it, and otherwise journaling it and carrying it out through the [`Host`].
//!
//! The journal's entries are grouped by `callSeq` (one group per `ctx` call) and the groups filed
//! under their effect's content key ([`effect_key`]), first in first out per key: a resumed
//! script asks for the same effects with the same arguments, though after `ctx.parallel` not
//! necessarily in the same order. A group with its settling entry (a `result`, `fired`, `event`,
//! or the entry itself for `now`, `log`, `step`, `plan`) is replayed; one without is carried on
//! live: a tool call journaled without a result runs again (whether it took effect is unknowable),
//! an agent child journaled with its `childRunId` is awaited instead of spawned again, a timer or
//! a wait keeps its journaled deadline and wait id.
//!
//! Every entry is appended (and the append awaited) before the script sees what it records.
//! Effects in flight are futures in one `FuturesUnordered`; the pump delivers their answers to
//! the realm in batches. A sleep shorter than [`Limits::park_after`] stays resident; a longer one,
//! or an unanswered wait, parks the execution once nothing else is in flight.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use seed_agents_protocol::generated::{RunPlan, RunPlanStep, RunPlanStepStatus};
use serde_json::{Map, Value as Json, json};

pub(crate) use super::error::{WorkflowError, codes};
use super::host::{EventWait, Host, HostError};
use super::journal::{Body, CallOp, EffectError, Entry, ResultStatus, StepPhase};
use super::vm::{Delivery, Finished, Request, Slice, Stop, Vm, VmLimits};

/// What one execution may use.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    /// The longest the script may compute between two host round trips.
    pub fuel: Duration,
    /// The realm's memory limit, in bytes.
    pub memory_bytes: usize,
    /// The script's maximum stack size, in bytes.
    pub stack_bytes: usize,
    /// Sleeps at least this long park the run instead of holding the realm resident.
    pub park_after: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            fuel: Duration::from_secs(2),
            memory_bytes: 64 * 1024 * 1024,
            stack_bytes: 1024 * 1024,
            park_after: Duration::from_secs(60),
        }
    }
}

/// How an execution ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// The default export returned this value.
    Succeeded(Json),
    /// The script failed, or was stopped by a limit.
    Failed(WorkflowError),
    /// The run was asked to end.
    Canceled,
    /// Nothing can happen until the run is woken (a long timer, an unanswered wait); the next
    /// execution replays the journal.
    Parked(Park),
    /// `ctx.continueAsNew(state)`: this run is done; a successor carries `state` on.
    ContinuedAsNew(Json),
    /// The server failed (a journal write, a child's wait); the run engine decides on a retry.
    HostFailed(HostError),
}

/// What a parked run waits for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Park {
    /// The earliest long timer.
    Timer {
        /// When to wake it, Unix epoch milliseconds.
        wake_at: i64,
    },
    /// Agent children it awaits, and nothing else in flight: the run frees its execution slot
    /// and resumes when any of them ends (its replay parks again on the rest).
    Children {
        /// The `callSeq` of each awaited child's `call` entry.
        call_seqs: Vec<u64>,
    },
    /// An event wait (the first the script registered; every wait it registered can wake it).
    Event {
        /// The wait.
        wait_id: String,
        /// When the run should wake anyway: the wait's timeout or an earlier parked timer.
        timeout_at: Option<i64>,
        /// What it waits for, in words.
        label: Option<String>,
        /// The signal name that answers it, when a signal can ([`answer_signal_for`]).
        answer_with: Option<String>,
    },
}

/// How long a run whose only effects in flight are agent children waits for one of them to
/// answer before it parks on them.
pub(crate) const CHILD_PARK_GRACE: Duration = Duration::from_millis(250);

/// The signal an open wait is answered with when it names no criteria.
pub(crate) const DEFAULT_ANSWER_SIGNAL: &str = "answer";

/// The signal name that answers a wait with criteria `matcher`, when a signal can: the signal
/// it names; [`DEFAULT_ANSWER_SIGNAL`] when it names nothing; none when it watches activity
/// (`eventType`, `resource`, `author`) or names a signal that is not a string.
pub(crate) fn answer_signal_for(matcher: &Json) -> Option<String> {
    let Some(criteria) = matcher.as_object() else { return Some(DEFAULT_ANSWER_SIGNAL.to_owned()) };
    match criteria.get("signal") {
        Some(Json::String(signal)) if !signal.is_empty() => return Some(signal.clone()),
        Some(_) => return None,
        None => {}
    }
    let watches_activity = ["eventType", "resource", "author"].iter().any(|field| criteria.contains_key(*field));
    (!watches_activity).then(|| DEFAULT_ANSWER_SIGNAL.to_owned())
}

/// An effect's content key: what a replay matches its journal groups by.
pub(crate) fn effect_key(op: &str, args: &Json) -> String {
    let canonical = |field: &str| canonical_json(args.get(field).unwrap_or(&Json::Null));
    match op {
        "tool" => format!("tool|{}|{}", text(&args["tool"]), canonical("input")),
        "agent" => format!("agent|{}", canonical("spec")),
        "sleep" => format!("sleep|{}", number_text(sleep_ms(args))),
        "wait" => format!("wait|{}", canonical("match")),
        "now" => "now".to_owned(),
        "log" => format!("log|{}|{}", text(&args["level"]), text(&args["message"])),
        "step" => format!("step|{}|{}", text(&args["stepId"]), text(&args["phase"])),
        "plan" => format!("plan|{}", canonical("plan")),
        "continueAsNew" => "continueAsNew".to_owned(),
        other => format!("op|{other}"),
    }
}

/// `value` serialized with every object's keys sorted, so equal values give equal text
/// whatever order their properties were written in.
pub(crate) fn canonical_json(value: &Json) -> String {
    fn write(value: &Json, out: &mut String) {
        match value {
            Json::Object(map) => {
                let mut fields: Vec<(&String, &Json)> = map.iter().collect();
                fields.sort_by(|a, b| a.0.cmp(b.0));
                out.push('{');
                for (index, (key, value)) in fields.into_iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    out.push_str(&Json::String(key.clone()).to_string());
                    out.push(':');
                    write(value, out);
                }
                out.push('}');
            }
            Json::Array(items) => {
                out.push('[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// A script value as text the way `String(value)` would say it (strings bare, absent empty).
fn text(value: &Json) -> String {
    match value {
        Json::Null => String::new(),
        Json::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// A non-negative millisecond count as JavaScript prints it.
fn number_text(ms: f64) -> String {
    if ms.fract() == 0.0 && ms < 9_007_199_254_740_992.0 { format!("{}", ms as u64) } else { ms.to_string() }
}

/// `ctx.sleep`'s milliseconds: a non-negative number, 0 when it is none.
fn sleep_ms(args: &Json) -> f64 {
    args["ms"].as_f64().filter(|ms| ms.is_finite() && *ms > 0.0).unwrap_or(0.0)
}

/// Runs (or resumes, by replaying `journal`) one execution of the workflow `source` for run
/// `run_id` to its outcome.
pub(crate) async fn run(
    host: Arc<dyn Host>,
    run_id: &str,
    source: &str,
    input: Json,
    journal: Vec<Entry>,
    limits: &Limits,
) -> Outcome {
    if host.canceled() {
        return Outcome::Canceled;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut pump = Pump::new(&*host, run_id, journal, limits);
    let vm_limits = VmLimits { fuel: limits.fuel, memory_bytes: limits.memory_bytes, stack_bytes: limits.stack_bytes };
    let vm = match Vm::spawn(vm_limits, stop.clone()) {
        Ok(vm) => vm,
        Err(stopped) => return pump.stopped(stopped),
    };
    let cancellation = host.cancellation();
    tokio::select! {
        biased;
        () = cancellation => {
            // Interrupts the script if it is computing; dropping `vm` ends its thread.
            stop.store(true, Ordering::SeqCst);
            Outcome::Canceled
        }
        outcome = pump.drive(&vm, source, input) => outcome,
    }
}

type InFlight<'a> = BoxFuture<'a, Result<Delivery, HostError>>;

/// One execution's state on the tokio side.
struct Pump<'a> {
    host: &'a dyn Host,
    run_id: &'a str,
    park_after_ms: i64,
    fuel: Duration,
    /// Journaled groups not yet replayed, by content key, oldest first.
    groups: HashMap<String, VecDeque<Vec<Entry>>>,
    /// The highest `callSeq` used so far.
    last_seq: u64,
    deliveries: Vec<Delivery>,
    in_flight: FuturesUnordered<InFlight<'a>>,
    /// The in-flight effects that wait on an agent child: their realm call id and `callSeq`.
    child_calls: HashMap<u64, u64>,
    finished: Option<Finished>,
    continuation: Option<Json>,
    timer: Option<i64>,
    event: Option<Park>,
    plan: RunPlan,
}

impl<'a> Pump<'a> {
    fn new(host: &'a dyn Host, run_id: &'a str, journal: Vec<Entry>, limits: &Limits) -> Self {
        let mut by_seq: BTreeMap<u64, Vec<Entry>> = BTreeMap::new();
        for entry in journal {
            by_seq.entry(entry.call_seq).or_default().push(entry);
        }
        let last_seq = by_seq.keys().next_back().copied().unwrap_or(0);
        let mut groups: HashMap<String, VecDeque<Vec<Entry>>> = HashMap::new();
        for group in by_seq.into_values() {
            if let Some(key) = group.iter().find_map(|entry| entry.key.clone()) {
                groups.entry(key).or_default().push_back(group);
            }
        }
        Self {
            host,
            run_id,
            park_after_ms: i64::try_from(limits.park_after.as_millis()).unwrap_or(i64::MAX),
            fuel: limits.fuel,
            groups,
            last_seq,
            deliveries: Vec::new(),
            in_flight: FuturesUnordered::new(),
            child_calls: HashMap::new(),
            finished: None,
            continuation: None,
            timer: None,
            event: None,
            plan: RunPlan::new(Vec::new()),
        }
    }

    async fn drive(&mut self, vm: &Vm, source: &str, input: Json) -> Outcome {
        let mut slice = vm.start(source, &input, self.run_id).await;
        loop {
            let current = match slice {
                Ok(current) => current,
                Err(stopped) => return self.stopped(stopped),
            };
            if let Err(error) = self.take(current).await {
                return Outcome::HostFailed(error);
            }
            // Polled every turn, so a script that keeps asking for immediate answers (`ctx.now`
            // in a loop) does not starve what is in flight.
            if let Err(error) = self.collect_ready() {
                return Outcome::HostFailed(error);
            }
            // Once the default export settled nothing delivered can change the outcome; what a
            // floating promise still has in flight is dropped with the pump.
            if let Some(finished) = self.finished.take() {
                return self.finish(finished);
            }
            if !self.deliveries.is_empty() {
                slice = vm.deliver(std::mem::take(&mut self.deliveries)).await;
                continue;
            }
            if self.host.canceled() {
                return Outcome::Canceled;
            }
            if self.in_flight.is_empty() {
                return self.rest();
            }
            let next = if self.only_children_in_flight() {
                // Children that already ended answer within the grace (a read); running ones
                // would hold an execution slot for as long as they run, so the run parks on them.
                match tokio::time::timeout(CHILD_PARK_GRACE, self.in_flight.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        let mut call_seqs: Vec<u64> = self.child_calls.values().copied().collect();
                        call_seqs.sort_unstable();
                        return Outcome::Parked(Park::Children { call_seqs });
                    }
                }
            } else {
                self.in_flight.next().await
            };
            match next {
                Some(Ok(delivery)) => {
                    self.child_calls.remove(&delivery.call_id);
                    self.deliveries.push(delivery);
                }
                Some(Err(error)) => return Outcome::HostFailed(error),
                None => {}
            }
            // Whatever else finished meanwhile goes in the same batch.
            if let Err(error) = self.collect_ready() {
                return Outcome::HostFailed(error);
            }
            slice = vm.deliver(std::mem::take(&mut self.deliveries)).await;
        }
    }

    /// Moves the answers of the effects that are done to the next batch, without waiting.
    fn collect_ready(&mut self) -> Result<(), HostError> {
        while let Some(Some(ready)) = self.in_flight.next().now_or_never() {
            let delivery = ready?;
            self.child_calls.remove(&delivery.call_id);
            self.deliveries.push(delivery);
        }
        Ok(())
    }

    /// Whether everything in flight waits on an agent child, with no timer, wait or successor
    /// pending beside it (those keep the run resident, as before it awaited the children).
    fn only_children_in_flight(&self) -> bool {
        !self.child_calls.is_empty()
            && self.in_flight.len() == self.child_calls.len()
            && self.timer.is_none()
            && self.event.is_none()
            && self.continuation.is_none()
    }

    /// Nothing in flight and nothing to deliver: continue as new, park, or deadlock.
    fn rest(&mut self) -> Outcome {
        if let Some(state) = self.continuation.take() {
            return Outcome::ContinuedAsNew(state);
        }
        if let Some(Park::Event { wait_id, timeout_at, label, answer_with }) = self.event.take() {
            // A long sleep alongside the wait: whichever comes first wakes the run.
            let timeout_at = match (timeout_at, self.timer) {
                (Some(timeout), Some(timer)) => Some(timeout.min(timer)),
                (timeout, timer) => timeout.or(timer),
            };
            return Outcome::Parked(Park::Event { wait_id, timeout_at, label, answer_with });
        }
        if let Some(wake_at) = self.timer {
            return Outcome::Parked(Park::Timer { wake_at });
        }
        Outcome::Failed(WorkflowError::new(
            codes::DEADLOCK,
            "the workflow awaits something that can never resolve (a promise outside ctx)",
        ))
    }

    fn finish(&self, finished: Finished) -> Outcome {
        match finished {
            Finished::Returned(value) => {
                let leftovers: usize = self.groups.values().map(VecDeque::len).sum();
                if leftovers > 0 {
                    // The resumed script asked for fewer or other effects than the journal holds;
                    // content-keyed matching makes that harmless, but worth knowing.
                    tracing::warn!(run_id = self.run_id, leftovers, "workflow finished with unreplayed journal groups");
                }
                Outcome::Succeeded(value)
            }
            Finished::Threw(error) => Outcome::Failed(error),
        }
    }

    fn stopped(&self, stopped: Stop) -> Outcome {
        match stopped {
            Stop::Interrupted { stopped: true } => Outcome::Canceled,
            Stop::Interrupted { stopped: false } if self.host.canceled() => Outcome::Canceled,
            Stop::Interrupted { stopped: false } => Outcome::Failed(WorkflowError::new(
                codes::FUEL_EXHAUSTED,
                format!("the workflow computed for more than {} ms without waiting on ctx", self.fuel.as_millis()),
            )),
            Stop::Failed(error) => Outcome::Failed(error),
            Stop::EngineGone(message) => Outcome::HostFailed(HostError { message, retryable: false }),
        }
    }

    /// Takes in what a slice produced: progress goes out, requests are handled in order.
    async fn take(&mut self, slice: Slice) -> Result<(), HostError> {
        for patch in slice.progress {
            if patch.is_object() {
                self.host.progress(patch);
            }
        }
        for request in slice.requests {
            self.handle(request).await?;
        }
        if self.finished.is_none() {
            self.finished = slice.finished;
        }
        Ok(())
    }

    fn next_seq(&mut self) -> u64 {
        self.last_seq += 1;
        self.last_seq
    }

    /// The host's append of an entry (a future that holds the host, not the pump).
    fn append(&self, call_seq: u64, key: Option<&str>, body: Body) -> BoxFuture<'a, Result<(), HostError>> {
        self.host.append(Entry { call_seq, key: key.map(str::to_owned), body })
    }

    fn resolve(&mut self, call_id: u64, value: Json) {
        self.deliveries.push(Delivery { call_id, ok: true, value });
    }

    async fn handle(&mut self, request: Request) -> Result<(), HostError> {
        let Request { call_id, op, args } = request;
        let effect = match op.as_str() {
            "tool" => Effect::Tool,
            "agent" => Effect::Agent,
            "sleep" => Effect::Sleep,
            "wait" => Effect::Wait,
            "now" => Effect::Now,
            "log" => Effect::Log,
            "step" => Effect::Step,
            "plan" => Effect::Plan,
            "continueAsNew" => {
                // Nothing is journaled or delivered: the call never resolves, this run ends here.
                self.continuation.get_or_insert_with(|| args.get("state").cloned().unwrap_or(Json::Null));
                return Ok(());
            }
            other => {
                let message = format!("ctx has no operation `{other}`");
                let value = json!({"code": codes::UNKNOWN_OP, "message": message});
                self.deliveries.push(Delivery { call_id, ok: false, value });
                return Ok(());
            }
        };
        let key = effect_key(&op, &args);
        let journaled = self.groups.get_mut(&key).and_then(VecDeque::pop_front).unwrap_or_default();
        let call_seq = journaled.first().map(|entry| entry.call_seq).unwrap_or_else(|| self.next_seq());
        let replay = Replay(journaled);
        match effect {
            Effect::Tool => self.tool(call_id, call_seq, &key, &args, &replay).await,
            Effect::Agent => self.agent(call_id, call_seq, &key, &args, &replay).await,
            Effect::Sleep => self.sleep(call_id, call_seq, &key, &args, &replay).await,
            Effect::Wait => self.wait(call_id, call_seq, &key, &args, &replay).await,
            Effect::Now => {
                let value = match replay.now() {
                    Some(value) => value,
                    None => {
                        let value = self.host.now_ms();
                        self.append(call_seq, Some(&key), Body::Now { value }).await?;
                        value
                    }
                };
                self.resolve(call_id, json!(value));
                Ok(())
            }
            Effect::Log => {
                if !replay.has(|body| matches!(body, Body::Log { .. })) {
                    let level = args["level"]
                        .as_str()
                        .filter(|level| matches!(*level, "debug" | "info" | "warn" | "error"))
                        .unwrap_or("info");
                    let data = args.get("data").filter(|data| !data.is_null()).cloned();
                    let body = Body::Log { level: level.to_owned(), message: text(&args["message"]), data };
                    self.append(call_seq, Some(&key), body).await?;
                }
                self.resolve(call_id, Json::Null);
                Ok(())
            }
            Effect::Step => {
                let phase = if args["phase"].as_str() == Some("end") { StepPhase::End } else { StepPhase::Start };
                let step_id = args["stepId"].as_str().map_or_else(|| format!("step-{call_seq}"), str::to_owned);
                let label = text(&args["label"]);
                let ok = args["ok"].as_bool();
                if !replay.has(|body| matches!(body, Body::Step { phase: journaled, .. } if *journaled == phase)) {
                    let body = Body::Step { step_id: step_id.clone(), label: label.clone(), phase, ok };
                    self.append(call_seq, Some(&key), body).await?;
                }
                self.apply_step(&step_id, &label, phase, ok);
                self.resolve(call_id, Json::Null);
                Ok(())
            }
            Effect::Plan => {
                let plan = normalize_plan(&args["plan"]);
                let plan_json = serde_json::to_value(&plan).unwrap_or(Json::Null);
                if !replay.has(|body| matches!(body, Body::Plan { .. })) {
                    self.append(call_seq, Some(&key), Body::Plan { plan: plan_json.clone() }).await?;
                }
                self.plan = plan;
                self.host.update_plan(plan_json);
                self.resolve(call_id, Json::Null);
                Ok(())
            }
        }
    }

    async fn tool(
        &mut self,
        call_id: u64,
        call_seq: u64,
        key: &str,
        args: &Json,
        replay: &Replay,
    ) -> Result<(), HostError> {
        let tool = text(&args["tool"]);
        if let Some((status, output, error)) = replay.result() {
            let delivery = match status {
                ResultStatus::Succeeded => Delivery { call_id, ok: true, value: output.unwrap_or(Json::Null) },
                ResultStatus::Failed => Delivery { call_id, ok: false, value: rejection(error, call_seq, Some(&tool)) },
            };
            self.deliveries.push(delivery);
            return Ok(());
        }
        let input = args.get("input").cloned().unwrap_or(Json::Null);
        let description = args["opts"]["description"].as_str().map(str::to_owned);
        if replay.call().is_none() {
            let body = Body::Call {
                op: CallOp::Tool,
                tool: Some(tool.clone()),
                input: input.clone(),
                child_run_id: None,
                description: description.clone(),
            };
            self.append(call_seq, Some(key), body).await?;
        }
        // A call journaled without its result was interrupted mid-way: it runs again.
        let host = self.host;
        self.in_flight.push(Box::pin(async move {
            let (body, delivery) = match host.call_tool(tool.clone(), input, description).await {
                Ok(output) => (
                    Body::Result { status: ResultStatus::Succeeded, output: Some(output.clone()), error: None },
                    Delivery { call_id, ok: true, value: output },
                ),
                Err(error) => {
                    let value = rejection(Some(error.clone()), call_seq, Some(&tool));
                    (
                        Body::Result { status: ResultStatus::Failed, output: None, error: Some(error) },
                        Delivery { call_id, ok: false, value },
                    )
                }
            };
            host.append(Entry { call_seq, key: None, body }).await?;
            Ok(delivery)
        }));
        Ok(())
    }

    async fn agent(
        &mut self,
        call_id: u64,
        call_seq: u64,
        key: &str,
        args: &Json,
        replay: &Replay,
    ) -> Result<(), HostError> {
        if let Some((status, output, error)) = replay.result() {
            let delivery = match status {
                ResultStatus::Succeeded => Delivery { call_id, ok: true, value: output.unwrap_or(Json::Null) },
                ResultStatus::Failed => Delivery { call_id, ok: false, value: rejection(error, call_seq, None) },
            };
            self.deliveries.push(delivery);
            return Ok(());
        }
        let child_run_id = match replay.child_run_id() {
            // Spawned before an interruption: reconnect instead of spawning again.
            Some(child_run_id) => child_run_id,
            None => {
                let spec = args.get("spec").cloned().unwrap_or(Json::Null);
                let step = args["step"].as_str().map(str::to_owned);
                match self.host.spawn_agent(call_seq, spec.clone(), step).await {
                    Ok(spawned) => {
                        let body = Body::Call {
                            op: CallOp::Agent,
                            tool: None,
                            input: spec,
                            child_run_id: Some(spawned.child_run_id.clone()),
                            description: None,
                        };
                        self.append(call_seq, Some(key), body).await?;
                        spawned.child_run_id
                    }
                    Err(error) => {
                        if replay.call().is_none() {
                            let body = Body::Call {
                                op: CallOp::Agent,
                                tool: None,
                                input: spec,
                                child_run_id: None,
                                description: None,
                            };
                            self.append(call_seq, Some(key), body).await?;
                        }
                        let value = rejection(Some(error.clone()), call_seq, None);
                        let body = Body::Result { status: ResultStatus::Failed, output: None, error: Some(error) };
                        self.append(call_seq, None, body).await?;
                        self.deliveries.push(Delivery { call_id, ok: false, value });
                        return Ok(());
                    }
                }
            }
        };
        let host = self.host;
        self.child_calls.insert(call_id, call_seq);
        self.in_flight.push(Box::pin(async move {
            let resolution = host.await_child(child_run_id).await?;
            // The whole resolution is the value: `ctx.delegate` unwraps it in the realm.
            let output = serde_json::to_value(&resolution).unwrap_or(Json::Null);
            let body = Body::Result { status: ResultStatus::Succeeded, output: Some(output.clone()), error: None };
            host.append(Entry { call_seq, key: None, body }).await?;
            Ok(Delivery { call_id, ok: true, value: output })
        }));
        Ok(())
    }

    async fn sleep(
        &mut self,
        call_id: u64,
        call_seq: u64,
        key: &str,
        args: &Json,
        replay: &Replay,
    ) -> Result<(), HostError> {
        if replay.has(|body| matches!(body, Body::Fired)) {
            self.resolve(call_id, Json::Null);
            return Ok(());
        }
        let wake_at = match replay.timer() {
            Some(wake_at) => wake_at,
            None => {
                let ms = sleep_ms(args).ceil();
                let wake_at =
                    self.host.now_ms().saturating_add(if ms >= i64::MAX as f64 { i64::MAX } else { ms as i64 });
                self.append(call_seq, Some(key), Body::Timer { wake_at }).await?;
                wake_at
            }
        };
        let remaining = wake_at.saturating_sub(self.host.now_ms());
        if remaining <= 0 {
            self.append(call_seq, None, Body::Fired).await?;
            self.resolve(call_id, Json::Null);
        } else if remaining >= self.park_after_ms {
            // Parked: the replay after the wake fires it. Parallel sleeps keep the earliest.
            self.timer = Some(self.timer.map_or(wake_at, |earlier| earlier.min(wake_at)));
        } else {
            let host = self.host;
            self.in_flight.push(Box::pin(async move {
                host.sleep(remaining.unsigned_abs()).await;
                host.append(Entry { call_seq, key: None, body: Body::Fired }).await?;
                Ok(Delivery { call_id, ok: true, value: Json::Null })
            }));
        }
        Ok(())
    }

    async fn wait(
        &mut self,
        call_id: u64,
        call_seq: u64,
        key: &str,
        args: &Json,
        replay: &Replay,
    ) -> Result<(), HostError> {
        let matcher = match args.get("match") {
            Some(matcher) if !matcher.is_null() => matcher.clone(),
            _ => Json::Object(Map::new()),
        };
        let label = args["opts"]["label"].as_str().map(str::to_owned);
        let (wait_id, timeout_at) = match replay.wait() {
            Some(journaled) => journaled,
            None => {
                // Minted once and journaled: every replay registers the same wait again.
                let wait_id = uuid::Uuid::now_v7().to_string();
                let timeout_at =
                    args["opts"]["timeoutMs"].as_f64().filter(|ms| ms.is_finite() && *ms > 0.0).map(|ms| {
                        self.host.now_ms().saturating_add(if ms >= i64::MAX as f64 {
                            i64::MAX
                        } else {
                            ms.ceil() as i64
                        })
                    });
                let body =
                    Body::Wait { wait_id: wait_id.clone(), matcher: matcher.clone(), timeout_at, label: label.clone() };
                self.append(call_seq, Some(key), body).await?;
                (wait_id, timeout_at)
            }
        };
        if let Some(delivery) = replay.event() {
            // Delivered, or timed out (no delivery): both settled.
            self.resolve(call_id, delivery.unwrap_or(Json::Null));
            return Ok(());
        }
        if timeout_at.is_some_and(|timeout_at| self.host.now_ms() >= timeout_at) {
            self.append(call_seq, None, Body::Event { wait_id, delivery: None }).await?;
            self.resolve(call_id, Json::Null);
            return Ok(());
        }
        self.host.register_wait(EventWait { wait_id: wait_id.clone(), matcher: matcher.clone(), timeout_at }).await?;
        // Every wait registers; the run parks on the first.
        if self.event.is_none() {
            let label = label.or_else(|| replay.wait_label());
            self.event = Some(Park::Event { wait_id, timeout_at, label, answer_with: answer_signal_for(&matcher) });
        }
        Ok(())
    }

    /// A `ctx.step` boundary on the plan: it matches the step it started (or a declared one with
    /// the same label still open), else it adds one.
    fn apply_step(&mut self, step_id: &str, label: &str, phase: StepPhase, ok: Option<bool>) {
        let open = |step: &RunPlanStep| matches!(step.status, RunPlanStepStatus::Pending | RunPlanStepStatus::Running);
        let at = self
            .plan
            .steps
            .iter()
            .position(|step| step.id == step_id)
            .or_else(|| self.plan.steps.iter().position(|step| step.label == label && open(step)));
        match (phase, at) {
            (StepPhase::Start, Some(at)) => self.plan.steps[at].status = RunPlanStepStatus::Running,
            (StepPhase::Start, None) => self.plan.steps.push(RunPlanStep {
                extra: Default::default(),
                id: step_id.to_owned(),
                label: label.to_owned(),
                resolved_by: None,
                status: RunPlanStepStatus::Running,
            }),
            (StepPhase::End, Some(at)) => {
                self.plan.steps[at].status =
                    if ok == Some(false) { RunPlanStepStatus::Failed } else { RunPlanStepStatus::Done };
            }
            (StepPhase::End, None) => return,
        }
        self.host.update_plan(serde_json::to_value(&self.plan).unwrap_or(Json::Null));
    }
}

/// The rejection a failed effect delivers: its error, and the call's identity.
fn rejection(error: Option<EffectError>, call_seq: u64, tool: Option<&str>) -> Json {
    let error = error.unwrap_or_else(|| EffectError {
        code: "tool-error".to_owned(),
        message: "the call failed".to_owned(),
        retryable: None,
    });
    let mut value = json!({
        "code": error.code,
        "message": error.message,
        "retryable": error.retryable.unwrap_or(false),
        "callSeq": call_seq,
    });
    if let Some(tool) = tool {
        value["tool"] = Json::String(tool.to_owned());
    }
    value
}

/// The most steps a plan keeps, and the longest title or label, in characters.
const MAX_PLAN_STEPS: usize = 100;
const MAX_PLAN_TEXT_CHARS: usize = 200;

/// `ctx.plan`'s argument as a plan: steps as objects or bare labels, bounded; an unknown status
/// is `pending`; a missing id is the step's position.
fn normalize_plan(raw: &Json) -> RunPlan {
    let bounded = |text: &str| text.chars().take(MAX_PLAN_TEXT_CHARS).collect::<String>();
    let steps: Vec<RunPlanStep> = raw["steps"]
        .as_array()
        .map(|steps| {
            steps
                .iter()
                .filter(|step| step.is_object() || step.is_string())
                .take(MAX_PLAN_STEPS)
                .enumerate()
                .map(|(index, step)| {
                    let (id, label, status) = match step {
                        Json::String(label) => (None, Some(label.as_str()), None),
                        _ => (step["id"].as_str(), step["label"].as_str(), step["status"].as_str()),
                    };
                    RunPlanStep {
                        extra: Default::default(),
                        id: id.filter(|id| !id.is_empty()).map_or_else(|| format!("step-{}", index + 1), str::to_owned),
                        label: label.map_or_else(|| format!("Step {}", index + 1), bounded),
                        resolved_by: None,
                        status: status.and_then(|status| status.parse().ok()).unwrap_or(RunPlanStepStatus::Pending),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let mut plan = RunPlan::new(steps);
    plan.title = raw["title"].as_str().filter(|title| !title.is_empty()).map(bounded);
    plan
}

/// The `ctx` operations that are journaled.
#[derive(Debug, Clone, Copy)]
enum Effect {
    Tool,
    Agent,
    Sleep,
    Wait,
    Now,
    Log,
    Step,
    Plan,
}

/// A journaled group being replayed (empty when the effect is new).
struct Replay(Vec<Entry>);

impl Replay {
    fn has(&self, matches: impl Fn(&Body) -> bool) -> bool {
        self.0.iter().any(|entry| matches(&entry.body))
    }

    fn call(&self) -> Option<&Entry> {
        self.0.iter().find(|entry| matches!(entry.body, Body::Call { .. }))
    }

    fn child_run_id(&self) -> Option<String> {
        self.0.iter().find_map(|entry| match &entry.body {
            Body::Call { child_run_id: Some(child), .. } => Some(child.clone()),
            _ => None,
        })
    }

    fn result(&self) -> Option<(ResultStatus, Option<Json>, Option<EffectError>)> {
        self.0.iter().find_map(|entry| match &entry.body {
            Body::Result { status, output, error } => Some((*status, output.clone(), error.clone())),
            _ => None,
        })
    }

    fn timer(&self) -> Option<i64> {
        self.0.iter().find_map(|entry| match entry.body {
            Body::Timer { wake_at } => Some(wake_at),
            _ => None,
        })
    }

    fn wait(&self) -> Option<(String, Option<i64>)> {
        self.0.iter().find_map(|entry| match &entry.body {
            Body::Wait { wait_id, timeout_at, .. } => Some((wait_id.clone(), *timeout_at)),
            _ => None,
        })
    }

    fn wait_label(&self) -> Option<String> {
        self.0.iter().find_map(|entry| match &entry.body {
            Body::Wait { label, .. } => label.clone(),
            _ => None,
        })
    }

    fn event(&self) -> Option<Option<Json>> {
        self.0.iter().find_map(|entry| match &entry.body {
            Body::Event { delivery, .. } => Some(delivery.clone()),
            _ => None,
        })
    }

    fn now(&self) -> Option<i64> {
        self.0.iter().find_map(|entry| match entry.body {
            Body::Now { value } => Some(value),
            _ => None,
        })
    }
}
