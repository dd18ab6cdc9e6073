//! The pump and the realm together, against a fake [`Host`]: an in-memory journal that a second
//! [`run`] replays (a resume), a clock the tests move, tools that count their calls.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Value as Json, json};
use tokio::sync::{Notify, watch};

use super::host::{ChildResolution, EventWait, Host, HostError, Spawned};
use super::journal::{Body, CallOp, EffectError, Entry};
use super::pump::{Limits, Outcome, Park, codes, effect_key, run};

const T0: i64 = 1_700_000_000_000;

/// The server as the tests play it.
struct Fake {
    journal: Mutex<Vec<Entry>>,
    clock: AtomicI64,
    /// What `flip` answers.
    flip: &'static str,
    tool_calls: Mutex<Vec<(String, Json)>>,
    spawned: Mutex<Vec<(Json, Option<String>)>>,
    awaited: Mutex<Vec<String>>,
    /// How a child ends, by brief (default: succeeded with `{done: brief}`).
    children: Mutex<HashMap<String, ChildResolution>>,
    sleeps: Mutex<Vec<u64>>,
    waits: Mutex<Vec<EventWait>>,
    plans: Mutex<Vec<Json>>,
    progress: Mutex<Vec<Json>>,
    cancel: watch::Sender<bool>,
    /// Appends after this many fail.
    appends_allowed: AtomicUsize,
    /// Notified when a `log` entry is appended.
    logged: Notify,
}

impl Fake {
    fn new() -> Arc<Self> {
        Self::with(Vec::new(), "heads")
    }

    /// A host that resumes `journal` (a copy of an earlier execution's).
    fn with(journal: Vec<Entry>, flip: &'static str) -> Arc<Self> {
        Arc::new(Self {
            journal: Mutex::new(journal),
            clock: AtomicI64::new(T0),
            flip,
            tool_calls: Mutex::default(),
            spawned: Mutex::default(),
            awaited: Mutex::default(),
            children: Mutex::default(),
            sleeps: Mutex::default(),
            waits: Mutex::default(),
            plans: Mutex::default(),
            progress: Mutex::default(),
            cancel: watch::channel(false).0,
            appends_allowed: AtomicUsize::new(usize::MAX),
            logged: Notify::new(),
        })
    }

    fn resume(&self, flip: &'static str) -> Arc<Self> {
        let next = Self::with(self.entries(), flip);
        next.clock.store(self.clock.load(Ordering::SeqCst), Ordering::SeqCst);
        next
    }

    fn entries(&self) -> Vec<Entry> {
        self.journal.lock().unwrap().clone()
    }

    fn calls(&self) -> Vec<String> {
        self.tool_calls.lock().unwrap().iter().map(|(tool, _)| tool.clone()).collect()
    }

    fn advance(&self, ms: i64) {
        self.clock.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Host for Fake {
    fn now_ms(&self) -> i64 {
        self.clock.load(Ordering::SeqCst)
    }

    fn append(&self, entry: Entry) -> BoxFuture<'_, Result<(), HostError>> {
        Box::pin(async move {
            let allowed = self.appends_allowed.load(Ordering::SeqCst);
            if allowed == 0 {
                return Err(HostError { message: "the journal is gone".to_owned(), retryable: true });
            }
            self.appends_allowed.store(allowed.saturating_sub(1), Ordering::SeqCst);
            let log = matches!(entry.body, Body::Log { .. });
            self.journal.lock().unwrap().push(entry);
            if log {
                self.logged.notify_one();
            }
            Ok(())
        })
    }

    fn call_tool(
        &self,
        tool: String,
        input: Json,
        _description: Option<String>,
    ) -> BoxFuture<'_, Result<Json, EffectError>> {
        Box::pin(async move {
            self.tool_calls.lock().unwrap().push((tool.clone(), input.clone()));
            match tool.as_str() {
                "echo" => Ok(input),
                "flip" => Ok(json!(self.flip)),
                "slow" => {
                    // Finishes after `turns` scheduler turns, so parallel calls end out of order.
                    for _ in 0..input["turns"].as_u64().unwrap_or(0) {
                        tokio::task::yield_now().await;
                    }
                    Ok(input)
                }
                "block" => std::future::pending().await,
                _ => Err(EffectError {
                    code: "tool-error".to_owned(),
                    message: format!("{tool} failed"),
                    retryable: None,
                }),
            }
        })
    }

    fn spawn_agent(
        &self,
        _call_seq: u64,
        spec: Json,
        step: Option<String>,
    ) -> BoxFuture<'_, Result<Spawned, EffectError>> {
        Box::pin(async move {
            let mut spawned = self.spawned.lock().unwrap();
            spawned.push((spec.clone(), step));
            if spec["brief"] == "unspawnable" {
                return Err(EffectError { code: "not-granted".to_owned(), message: "no".to_owned(), retryable: None });
            }
            Ok(Spawned { child_run_id: format!("child-{}:{}", spawned.len(), text(&spec["brief"])), session_id: None })
        })
    }

    fn await_child(&self, child_run_id: String) -> BoxFuture<'_, Result<ChildResolution, HostError>> {
        Box::pin(async move {
            self.awaited.lock().unwrap().push(child_run_id.clone());
            let brief = child_run_id.split_once(':').map(|(_, brief)| brief.to_owned()).unwrap_or_default();
            let configured = self.children.lock().unwrap().get(&brief).cloned();
            Ok(configured.unwrap_or(ChildResolution {
                status: "succeeded",
                output: Some(json!({"done": brief})),
                error: None,
                session_id: Some("session-1".to_owned()),
            }))
        })
    }

    fn sleep(&self, ms: u64) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.sleeps.lock().unwrap().push(ms);
            tokio::task::yield_now().await;
            self.advance(i64::try_from(ms).unwrap());
        })
    }

    fn register_wait(&self, wait: EventWait) -> BoxFuture<'_, Result<(), HostError>> {
        Box::pin(async move {
            self.waits.lock().unwrap().push(wait);
            Ok(())
        })
    }

    fn update_plan(&self, plan: Json) {
        self.plans.lock().unwrap().push(plan);
    }

    fn progress(&self, patch: Json) {
        self.progress.lock().unwrap().push(patch);
    }

    fn canceled(&self) -> bool {
        *self.cancel.borrow()
    }

    fn cancellation(&self) -> BoxFuture<'_, ()> {
        let mut canceled = self.cancel.subscribe();
        Box::pin(async move {
            let _ = canceled.wait_for(|canceled| *canceled).await;
        })
    }
}

fn text(value: &Json) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

fn quick() -> Limits {
    Limits { fuel: Duration::from_secs(30), ..Limits::default() }
}

async fn go(host: &Arc<Fake>, source: &str, input: Json) -> Outcome {
    go_with(host, source, input, &quick()).await
}

async fn go_with(host: &Arc<Fake>, source: &str, input: Json, limits: &Limits) -> Outcome {
    let journal = host.entries();
    run(host.clone(), "run-1", source, input, journal, limits).await
}

fn failed(outcome: Outcome) -> super::pump::WorkflowError {
    match outcome {
        Outcome::Failed(error) => error,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn the_run_future_is_send() {
    fn send<T: Send>(_: &T) {}
    let host: Arc<dyn Host> = Fake::new();
    let limits = Limits::default();
    let future = run(host, "run-1", "", Json::Null, Vec::new(), &limits);
    send(&future);
}

#[tokio::test]
async fn a_workflow_returns_what_its_default_export_returns() {
    let host = Fake::new();
    let source = "export default async function (input, ctx) {\n  const echoed = await ctx.call('echo', {n: input.n + 1});\n  return {echoed, run: ctx.runId, minutes: ctx.minutes(2), hours: ctx.hours(1)};\n}\n";
    let outcome = go(&host, source, json!({"n": 1})).await;
    assert_eq!(
        outcome,
        Outcome::Succeeded(json!({"echoed": {"n": 2}, "run": "run-1", "minutes": 120000, "hours": 3600000}))
    );
    let entries = host.entries();
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!(entries[0].key.as_deref(), Some(r#"tool|echo|{"n":2}"#));
    assert!(matches!(entries[0].body, Body::Call { op: CallOp::Tool, .. }));
    assert!(matches!(entries[1].body, Body::Result { .. }));
    assert_eq!((entries[0].call_seq, entries[1].call_seq, entries[1].key.as_ref()), (1, 1, None));
}

const BRANCHING: &str = r#"export default async function (input, ctx) {
  const side = await ctx.call('flip', {});
  if (side === 'heads') return await ctx.call('echo', {path: 'heads'});
  return await ctx.call('echo', {path: 'tails'});
}
"#;

#[tokio::test]
async fn a_replay_takes_the_path_the_journaled_results_chose() {
    let first = Fake::new();
    assert_eq!(go(&first, BRANCHING, Json::Null).await, Outcome::Succeeded(json!({"path": "heads"})));
    // The resumed host would answer `tails` now; the journal still says `heads`.
    let second = first.resume("tails");
    assert_eq!(go(&second, BRANCHING, Json::Null).await, Outcome::Succeeded(json!({"path": "heads"})));
    assert_eq!(second.calls(), Vec::<String>::new());
    assert_eq!(second.entries(), first.entries(), "a full replay appends nothing");
}

#[tokio::test]
async fn fifty_parallel_calls_complete_and_their_replay_runs_none() {
    // Ten distinct inputs, five calls each: the same key five times, finishing out of order.
    let source = r#"export default async function (input, ctx) {
  const thunks = [];
  for (let i = 0; i < 50; i++) thunks.push(() => ctx.call('slow', {turns: (i * 7) % 10, k: i % 10}));
  const results = await ctx.parallel(thunks);
  return results.map((r) => r.k);
}
"#;
    let expected = Outcome::Succeeded(Json::Array((0..50).map(|i| json!(i % 10)).collect()));
    let first = Fake::new();
    assert_eq!(go(&first, source, Json::Null).await, expected);
    assert_eq!(first.calls().len(), 50);
    assert_eq!(first.entries().len(), 100);
    let second = first.resume("heads");
    assert_eq!(go(&second, source, Json::Null).await, expected);
    assert_eq!(second.calls().len(), 0);
    assert_eq!(second.entries().len(), 100);
}

#[tokio::test]
async fn keys_do_not_depend_on_property_order() {
    let first = Fake::new();
    let written =
        "export default async function (input, ctx) {\n  return await ctx.call('echo', {b: 1, a: {d: 2, c: 3}});\n}\n";
    assert_eq!(go(&first, written, Json::Null).await, Outcome::Succeeded(json!({"a": {"c": 3, "d": 2}, "b": 1})));
    let reordered =
        "export default async function (input, ctx) {\n  return await ctx.call('echo', {a: {c: 3, d: 2}, b: 1});\n}\n";
    let second = first.resume("heads");
    assert_eq!(go(&second, reordered, Json::Null).await, Outcome::Succeeded(json!({"a": {"c": 3, "d": 2}, "b": 1})));
    assert_eq!(second.calls(), Vec::<String>::new());
    assert_eq!(effect_key("tool", &json!({"tool": "t", "input": {"b": 1, "a": 2}})), r#"tool|t|{"a":2,"b":1}"#);
}

#[tokio::test]
async fn a_tool_call_journaled_without_its_result_runs_again_once() {
    let first = Fake::new();
    let source = "export default async function (input, ctx) {\n  await ctx.call('echo', {a: 1});\n  return await ctx.call('echo', {b: 2});\n}\n";
    assert_eq!(go(&first, source, Json::Null).await, Outcome::Succeeded(json!({"b": 2})));
    // The execution died after journaling the second call, before its result.
    let mut journal = first.entries();
    journal.truncate(3);
    let second = Fake::with(journal, "heads");
    assert_eq!(go(&second, source, Json::Null).await, Outcome::Succeeded(json!({"b": 2})));
    assert_eq!(second.calls(), vec!["echo".to_owned()]);
    assert_eq!(second.entries(), first.entries(), "no second `call` entry");
}

#[tokio::test]
async fn an_uncaught_tool_failure_names_the_call_and_replays_the_same() {
    let source = "export default async function (input, ctx) {\n  await ctx.call('echo', {});\n  await ctx.call('broken', {x: 1});\n}\n";
    let first = Fake::new();
    let error = failed(go(&first, source, Json::Null).await);
    assert_eq!((error.code.as_str(), error.tool.as_deref(), error.call_seq), ("tool-error", Some("broken"), Some(2)));
    assert_eq!(error.message, "broken failed");
    let second = first.resume("heads");
    assert_eq!(failed(go(&second, source, Json::Null).await), error);
    assert_eq!(second.calls(), Vec::<String>::new());
}

#[tokio::test]
async fn a_caught_tool_failure_is_the_scripts_to_handle() {
    let source = "export default async function (input, ctx) {\n  try { await ctx.call('broken', {}); } catch (e) { return [e.code, e.tool, e.callSeq, e.name, e instanceof Error]; }\n}\n";
    let outcome = go(&Fake::new(), source, Json::Null).await;
    assert_eq!(outcome, Outcome::Succeeded(json!(["tool-error", "broken", 1, "EffectError", true])));
}

#[tokio::test]
async fn delegate_resolves_the_childs_output_and_a_failed_child_rejects() {
    let host = Fake::new();
    host.children.lock().unwrap().insert(
        "bad".to_owned(),
        ChildResolution {
            status: "failed",
            output: None,
            error: Some(EffectError {
                code: "model-error".to_owned(),
                message: "it broke".to_owned(),
                retryable: None,
            }),
            session_id: None,
        },
    );
    let source = r#"export default async function (input, ctx) {
  const good = await ctx.step('research', () => ctx.delegate({brief: 'good'}));
  let bad;
  try { await ctx.agent({brief: 'bad'}); } catch (e) { bad = [e.code, e.message]; }
  let unspawnable;
  try { await ctx.delegate({brief: 'unspawnable'}); } catch (e) { unspawnable = e.code; }
  return {good, bad, unspawnable};
}
"#;
    let outcome = go(&host, source, Json::Null).await;
    assert_eq!(
        outcome,
        Outcome::Succeeded(
            json!({"good": {"done": "good"}, "bad": ["model-error", "it broke"], "unspawnable": "not-granted"})
        )
    );
    let spawned = host.spawned.lock().unwrap().clone();
    assert_eq!(spawned[0], (json!({"brief": "good"}), Some("research".to_owned())));
    assert_eq!(spawned[1], (json!({"brief": "bad"}), None));
    let replay = host.resume("heads");
    assert_eq!(go(&replay, source, Json::Null).await, outcome);
    assert!(replay.spawned.lock().unwrap().is_empty());
    assert!(replay.awaited.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_child_journaled_without_its_result_is_awaited_not_spawned_again() {
    let spec = json!({"brief": "long"});
    let key = effect_key("agent", &json!({"spec": spec}));
    let call = Body::Call {
        op: CallOp::Agent,
        tool: None,
        input: spec,
        child_run_id: Some("child-7:long".to_owned()),
        description: None,
    };
    let host = Fake::with(vec![Entry { call_seq: 1, key: Some(key), body: call }], "heads");
    let source = "export default async function (input, ctx) {\n  return await ctx.delegate({brief: 'long'});\n}\n";
    assert_eq!(go(&host, source, Json::Null).await, Outcome::Succeeded(json!({"done": "long"})));
    assert!(host.spawned.lock().unwrap().is_empty());
    assert_eq!(*host.awaited.lock().unwrap(), vec!["child-7:long".to_owned()]);
    assert!(matches!(host.entries()[1].body, Body::Result { .. }));
}

#[tokio::test]
async fn a_short_sleep_stays_resident() {
    let host = Fake::new();
    let source =
        "export default async function (input, ctx) {\n  await ctx.sleep(1500);\n  return await ctx.now();\n}\n";
    assert_eq!(go(&host, source, Json::Null).await, Outcome::Succeeded(json!(T0 + 1500)));
    assert_eq!(*host.sleeps.lock().unwrap(), vec![1500]);
    let kinds: Vec<&str> = host
        .entries()
        .iter()
        .map(|entry| match entry.body {
            Body::Timer { .. } => "timer",
            Body::Fired => "fired",
            Body::Now { .. } => "now",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["timer", "fired", "now"]);
}

#[tokio::test]
async fn a_long_sleep_parks_and_the_resume_does_not_redo_the_work_before_it() {
    let source = r#"export default async function (input, ctx) {
  await ctx.call('echo', {before: true});
  await ctx.sleep(ctx.hours(1));
  return await ctx.call('echo', {after: true});
}
"#;
    let first = Fake::new();
    assert_eq!(go(&first, source, Json::Null).await, Outcome::Parked(Park::Timer { wake_at: T0 + 3_600_000 }));
    // Too early: it parks again on the same deadline.
    first.advance(1000);
    let early = first.resume("heads");
    assert_eq!(go(&early, source, Json::Null).await, Outcome::Parked(Park::Timer { wake_at: T0 + 3_600_000 }));
    assert_eq!(early.calls(), Vec::<String>::new());
    let woken = early.resume("heads");
    woken.advance(3_600_000);
    assert_eq!(go(&woken, source, Json::Null).await, Outcome::Succeeded(json!({"after": true})));
    assert_eq!(woken.calls(), vec!["echo".to_owned()]);
}

#[tokio::test]
async fn parallel_long_sleeps_park_on_the_earliest() {
    let source = "export default async function (input, ctx) {\n  await ctx.parallel([() => ctx.sleep(ctx.hours(2)), () => ctx.sleep(ctx.minutes(5)), () => ctx.sleep(ctx.hours(1))]);\n}\n";
    assert_eq!(go(&Fake::new(), source, Json::Null).await, Outcome::Parked(Park::Timer { wake_at: T0 + 300_000 }));
}

#[tokio::test]
async fn a_wait_parks_and_the_resume_gets_the_delivery() {
    let source = r#"export default async function (input, ctx) {
  const answer = await ctx.waitForEvent({}, {label: 'the go-ahead', timeoutMs: ctx.hours(1)});
  return {answer};
}
"#;
    let first = Fake::new();
    let Outcome::Parked(Park::Event { wait_id, timeout_at, label, answer_with }) = go(&first, source, Json::Null).await
    else {
        panic!("it parks on the wait")
    };
    assert_eq!(
        (timeout_at, label.as_deref(), answer_with.as_deref()),
        (Some(T0 + 3_600_000), Some("the go-ahead"), Some("answer"))
    );
    assert_eq!(first.waits.lock().unwrap()[0].wait_id, wait_id);
    // Parked again before anything arrived: the same wait is registered again.
    let again = first.resume("heads");
    assert!(matches!(go(&again, source, Json::Null).await, Outcome::Parked(Park::Event { .. })));
    assert_eq!(again.waits.lock().unwrap()[0].wait_id, wait_id);
    // The server journals the delivery, then resumes the run.
    let mut journal = again.entries();
    journal.push(Entry { call_seq: 1, key: None, body: Body::Event { wait_id, delivery: Some(json!({"ok": true})) } });
    let resumed = Fake::with(journal, "heads");
    assert_eq!(go(&resumed, source, Json::Null).await, Outcome::Succeeded(json!({"answer": {"ok": true}})));
    assert!(resumed.waits.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_wait_past_its_timeout_resolves_null_and_journals_an_empty_event() {
    let source = "export default async function (input, ctx) {\n  return {answer: await ctx.waitForEvent({signal: 'approve'}, {timeoutMs: 1000})};\n}\n";
    let first = Fake::new();
    let Outcome::Parked(Park::Event { answer_with, .. }) = go(&first, source, Json::Null).await else {
        panic!("it parks on the wait")
    };
    assert_eq!(answer_with.as_deref(), Some("approve"));
    let later = first.resume("heads");
    later.advance(1000);
    assert_eq!(go(&later, source, Json::Null).await, Outcome::Succeeded(json!({"answer": null})));
    let last = later.entries().pop().unwrap();
    assert!(matches!(last.body, Body::Event { delivery: None, .. }), "{last:?}");
}

#[tokio::test]
async fn a_wait_and_a_long_sleep_park_on_whichever_comes_first() {
    let source = "export default async function (input, ctx) {\n  await Promise.race([ctx.waitForEvent({eventType: 'comment'}), ctx.sleep(ctx.hours(1))]);\n}\n";
    let Outcome::Parked(Park::Event { timeout_at, answer_with, .. }) = go(&Fake::new(), source, Json::Null).await
    else {
        panic!("it parks on the wait")
    };
    assert_eq!((timeout_at, answer_with), (Some(T0 + 3_600_000), None));
}

#[tokio::test]
async fn now_and_log_are_journaled_once_and_replayed() {
    let source = "export default async function (input, ctx) {\n  const t = await ctx.now();\n  await ctx.log('warn', 'at', {t});\n  await ctx.log('loud', 'odd level');\n  return t;\n}\n";
    let first = Fake::new();
    assert_eq!(go(&first, source, Json::Null).await, Outcome::Succeeded(json!(T0)));
    let entries = first.entries();
    assert_eq!(entries.len(), 3);
    assert!(matches!(&entries[1].body, Body::Log { level, data: Some(_), .. } if level == "warn"));
    assert!(matches!(&entries[2].body, Body::Log { level, data: None, .. } if level == "info"));
    let second = first.resume("heads");
    second.advance(60_000);
    assert_eq!(go(&second, source, Json::Null).await, Outcome::Succeeded(json!(T0)));
    assert_eq!(second.entries(), entries);
}

#[tokio::test]
async fn steps_and_plans_reach_the_host_and_the_journal() {
    let host = Fake::new();
    let source = r#"export default async function (input, ctx) {
  await ctx.plan({title: 'Work', steps: ['Fetch', {id: 'w', label: 'Write', status: 'bogus'}]});
  ctx.progress({fraction: 0.5, label: 'halfway'});
  const n = await ctx.step('Fetch', async () => 7);
  try { await ctx.step('Fails', async () => { throw new Error('no'); }); } catch (e) {}
  return n;
}
"#;
    assert_eq!(go(&host, source, Json::Null).await, Outcome::Succeeded(json!(7)));
    let last = host.plans.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        last,
        json!({"title": "Work", "steps": [
            {"id": "step-1", "label": "Fetch", "status": "done"},
            {"id": "w", "label": "Write", "status": "pending"},
            {"id": "step-2", "label": "Fails", "status": "failed"},
        ]})
    );
    assert_eq!(*host.progress.lock().unwrap(), vec![json!({"fraction": 0.5, "label": "halfway"})]);
    let steps = host.entries().iter().filter(|entry| matches!(entry.body, Body::Step { .. })).count();
    assert_eq!(steps, 4);
    // The replay rebuilds the same plan for the card without journaling anything.
    let replay = host.resume("heads");
    assert_eq!(go(&replay, source, Json::Null).await, Outcome::Succeeded(json!(7)));
    assert_eq!(replay.plans.lock().unwrap().last().cloned().unwrap(), last);
    assert_eq!(replay.entries(), host.entries());
}

#[tokio::test]
async fn continue_as_new_ends_the_run_with_its_state() {
    let source = "export default async function (input, ctx) {\n  await ctx.call('echo', {});\n  await ctx.continueAsNew({cursor: input.cursor + 1});\n  await ctx.call('echo', {never: true});\n}\n";
    let host = Fake::new();
    assert_eq!(go(&host, source, json!({"cursor": 1})).await, Outcome::ContinuedAsNew(json!({"cursor": 2})));
    assert_eq!(host.calls().len(), 1);
}

#[tokio::test]
async fn a_floating_loop_of_ctx_calls_does_not_outlive_the_default_export() {
    let source = "export default async function (input, ctx) {\n  (async () => { for (;;) await ctx.now(); })();\n  await ctx.call('echo', {});\n  return 'done';\n}\n";
    assert_eq!(go(&Fake::new(), source, Json::Null).await, Outcome::Succeeded(json!("done")));
}

#[tokio::test]
async fn awaiting_a_promise_outside_ctx_is_a_deadlock() {
    let source = "export default async function (input, ctx) {\n  await new Promise(() => {});\n}\n";
    assert_eq!(failed(go(&Fake::new(), source, Json::Null).await).code, codes::DEADLOCK);
}

#[tokio::test]
async fn no_ambient_clock_randomness_timers_or_network() {
    for (body, expected) in
        [("Date.now()", "ctx.now()"), ("new Date()", "ctx.now()"), ("Math.random()", "workflow input")]
    {
        let source = format!("export default async function (input, ctx) {{\n  return {body};\n}}\n");
        let error = failed(go(&Fake::new(), &source, Json::Null).await);
        assert_eq!(error.code, codes::WORKFLOW_ERROR);
        assert!(error.message.contains(expected), "{body}: {}", error.message);
    }
    let source = "export default async function (input, ctx) {\n  return [typeof setTimeout, typeof setInterval, typeof fetch, typeof XMLHttpRequest, typeof require, typeof process, typeof performance, typeof WeakRef, typeof __host_enqueue];\n}\n";
    let undefined = Json::Array(vec![json!("undefined"); 9]);
    assert_eq!(go(&Fake::new(), source, Json::Null).await, Outcome::Succeeded(undefined));
}

#[tokio::test]
async fn a_thrown_error_keeps_its_line_in_the_stored_source() {
    let source = "// line 1\nexport default async function (input, ctx) {\n  await ctx.now();\n  throw new Error('on line four');\n}\n";
    let error = failed(go(&Fake::new(), source, Json::Null).await);
    assert_eq!((error.code.as_str(), error.message.as_str()), (codes::WORKFLOW_ERROR, "on line four"));
    assert!(error.stack.as_deref().unwrap_or_default().contains("workflow.js:4"), "{:?}", error.stack);
}

#[tokio::test]
async fn an_output_that_is_not_json_fails() {
    let source = "export default async function (input, ctx) {\n  return {big: 1n};\n}\n";
    assert_eq!(failed(go(&Fake::new(), source, Json::Null).await).code, codes::WORKFLOW_ERROR);
}

fn tight() -> Limits {
    Limits { fuel: Duration::from_millis(200), memory_bytes: 16 * 1024 * 1024, ..Limits::default() }
}

#[tokio::test]
async fn an_endless_loop_runs_out_of_fuel() {
    for source in [
        "export default async function (input, ctx) {\n  await ctx.now();\n  while (true) {}\n}\n",
        "while (true) {}\nexport default async function (input, ctx) {}\n",
        "export default async function (input, ctx) {\n  for (;;) { try { while (true) {} } catch (e) {} }\n}\n",
    ] {
        let error = failed(go_with(&Fake::new(), source, Json::Null, &tight()).await);
        assert_eq!(error.code, codes::FUEL_EXHAUSTED, "{source}");
    }
}

#[tokio::test]
async fn a_memory_bomb_fails_out_of_memory() {
    for bomb in ["new Array(1e6)", "new Array(1e6).fill(0)", "{s: 'x'.repeat(1 << 20) + a.length}"] {
        let source =
            format!("export default async function (input, ctx) {{\n  let a = [];\n  for (;;) a.push({bomb});\n}}\n");
        // Fuel for a minute: on a loaded machine 200 ms may run out before 16 MiB do, and only
        // the memory limit is under test here.
        let limits = Limits { fuel: Duration::from_secs(60), ..tight() };
        let error = failed(go_with(&Fake::new(), &source, Json::Null, &limits).await);
        assert_eq!(error.code, codes::OUT_OF_MEMORY, "{bomb}: {error:?}");
    }
}

#[tokio::test]
async fn deep_recursion_fails_with_a_clear_error() {
    let source = "function down(n) { return down(n + 1) + 1; }\nexport default async function (input, ctx) {\n  return down(0);\n}\n";
    // Only the stack limit is under test: fuel enough for a loaded machine.
    let limits = Limits { fuel: Duration::from_secs(60), ..tight() };
    let error = failed(go_with(&Fake::new(), source, Json::Null, &limits).await);
    assert_eq!(error.code, codes::WORKFLOW_ERROR);
    assert!(error.message.contains("stack"), "{error:?}");
}

#[tokio::test]
async fn cancel_interrupts_a_busy_script() {
    let host = Fake::new();
    let source =
        "export default async function (input, ctx) {\n  await ctx.log('info', 'spinning');\n  for (;;) {}\n}\n";
    // Fuel of an hour: only the cancel can end this.
    let limits = Limits { fuel: Duration::from_secs(3600), ..Limits::default() };
    let running = tokio::spawn({
        let host = host.clone();
        async move { go_with(&host, source, Json::Null, &limits).await }
    });
    host.logged.notified().await;
    host.cancel.send_replace(true);
    assert_eq!(running.await.unwrap(), Outcome::Canceled);
}

#[tokio::test]
async fn cancel_ends_the_pump_while_an_effect_is_in_flight() {
    let host = Fake::new();
    let source = "export default async function (input, ctx) {\n  await ctx.log('info', 'calling');\n  await ctx.call('block', {});\n}\n";
    let running = tokio::spawn({
        let host = host.clone();
        async move { go(&host, source, Json::Null).await }
    });
    host.logged.notified().await;
    host.cancel.send_replace(true);
    assert_eq!(running.await.unwrap(), Outcome::Canceled);
    let canceled_first = Fake::new();
    canceled_first.cancel.send_replace(true);
    assert_eq!(go(&canceled_first, source, Json::Null).await, Outcome::Canceled);
}

#[tokio::test]
async fn a_failed_journal_write_fails_the_host_not_the_script() {
    let host = Fake::new();
    host.appends_allowed.store(1, Ordering::SeqCst);
    let source = "export default async function (input, ctx) {\n  await ctx.call('echo', {});\n  return 1;\n}\n";
    let outcome = go(&host, source, Json::Null).await;
    assert_eq!(outcome, Outcome::HostFailed(HostError { message: "the journal is gone".to_owned(), retryable: true }));
    assert_eq!(host.calls().len(), 1, "the call ran; its result could not be journaled");
}

#[test]
fn the_signal_that_answers_a_wait() {
    use super::pump::answer_signal_for;
    assert_eq!(answer_signal_for(&json!({})).as_deref(), Some("answer"));
    assert_eq!(answer_signal_for(&json!(null)).as_deref(), Some("answer"));
    assert_eq!(answer_signal_for(&json!({"signal": "approve"})).as_deref(), Some("approve"));
    assert_eq!(answer_signal_for(&json!({"signal": 3})), None);
    assert_eq!(answer_signal_for(&json!({"eventType": "comment"})), None);
    assert_eq!(answer_signal_for(&json!({"resource": "hm://x"})), None);
    assert_eq!(answer_signal_for(&json!({"author": "z6Mk"})), None);
}
