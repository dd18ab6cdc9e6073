//! Firing a trigger: the one entry point every source (schedules, webhooks, the activity feed,
//! run-completed chains) goes through (docs/protocol.md §E.3, §D.4).
//!
//! [`fire`] is idempotent by `(trigger, firing key)`: the firing row is inserted with
//! `ON CONFLICT DO NOTHING` against the unique index, so an event fires a trigger at most once
//! however often, and by however many monitors, it is offered. In the same write transaction
//! the firing opens a session (origin trigger), appends the trigger's prompt with the activity as
//! a user message stamped actor `trigger`, enqueues a background agent run whose
//! `trigger_firing_id` names the firing, and stamps the trigger's `lastFiredAt`. A crash before
//! the commit leaves nothing; after it, everything, and the run queue's boot sweep resumes the
//! run. Keys handled by a trigger later merged into this one count as handled here too.
//!
//! A trigger whose continuation is `wake` opens no session: in the same transaction as its
//! firing row, the signal is delivered like `SignalRun` (see `wake_in`) and the firing records
//! whether a run took it. A `script` or `tool` continuation opens no session either: in the same
//! transaction a root workflow run is queued (see `start_workflow`; a `tool` runs as a
//! one-call script the server writes, docs/workflows.md §4), and the run-completed monitor
//! records its end on the firing (`chain`), opening a thread when it failed and the
//! continuation asks for one (`open_failure_thread`).

use std::collections::BTreeMap;

use crate::db::Connection;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    AgentActivityCondition, AgentTriggerInfo, AgentTriggerInfoPrompt, MessageEvent, MessageEventRole, MessageEventType,
    SessionActor, SessionEvent, SessionEventPayload, TriggerContinuation, TriggerFailurePolicy, WakeContinuation,
};
use seed_agents_protocol::{Value, wire};

use super::store;
use crate::app::App;
use crate::bus::{ChangeReason, Event};
use crate::error::{ApiError, ApiResult};
use crate::runs::{
    self,
    queue::{Changes, NewRun, NewWorkflow, Queue},
};
use crate::sessions::events;

/// Executions a trigger's run may take before a retryable failure is final (background runs).
pub(crate) const MAX_ATTEMPTS: u32 = 3;
/// The longest activity key, in UTF-8 bytes.
pub(crate) const MAX_KEY_BYTES: usize = 1024;
/// The largest activity (canonical CBOR) a firing stores and hands to the run.
pub(crate) const MAX_ACTIVITY_BYTES: usize = 256 * 1024;
/// Firing status: the session is open and its run queued (or running); for a `script` or `tool`
/// continuation, its workflow run is queued (or running).
pub(crate) const STARTED: &str = "started";
/// The run input key of a `script` or `tool` continuation's failure policy, when it is `thread`.
pub(crate) const ON_FAILURE: &str = "onFailure";
/// Firing status of a `wake` continuation: the signal reached a parked run (`runId`), which
/// went back to the queue.
pub(crate) const DELIVERED: &str = "delivered";
/// Firing status of a `wake` continuation: no run took the signal (`error` says why).
pub(crate) const NO_LISTENER: &str = "no-listener";

/// What happened that fires the trigger.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Activity {
    /// One line for people (`TriggerFiringInfo.activitySummary`), at most a few hundred bytes.
    pub summary: String,
    /// The activity as an open map: what the run is shown and `triggerContext.activity` returns.
    pub value: BTreeMap<String, Value>,
    /// For a compound trigger, the conditions that matched.
    pub matched_conditions: Option<Vec<AgentActivityCondition>>,
    /// The firing whose run's completion caused this one (run-completed chains), for the loop
    /// guard and the chain's history.
    pub parent_firing_id: Option<String>,
}

/// What [`fire`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FireOutcome {
    /// The trigger fired: a firing row, a new session and a queued background run.
    Fired {
        /// The firing's id.
        firing_id: String,
        /// The session it opened.
        session_id: String,
        /// The run answering it.
        run_id: String,
    },
    /// The trigger's continuation is `wake`: the firing was recorded and its signal offered to a
    /// parked run (like `SignalRun`) instead of opening a session.
    Woke {
        /// The firing's id.
        firing_id: String,
        /// The run that took the signal and went back to the queue; `None` when none did (the
        /// firing's status is then `no-listener` and its `error` says why).
        run_id: Option<String>,
    },
    /// The trigger's continuation is `script` or `tool`: the firing was recorded and a root
    /// workflow run queued (no session).
    Started {
        /// The firing's id.
        firing_id: String,
        /// The workflow run answering it.
        run_id: String,
    },
    /// This key already fired this trigger (or a trigger merged into it): nothing was written.
    Duplicate,
    /// The trigger is gone, disabled or merged into another: nothing was written.
    Inactive,
}

/// Fires trigger `trigger_id` for the activity identified by `firing_key` (see the module docs).
///
/// Idempotent: the same `(trigger_id, firing_key)` fires once ever; later calls answer
/// [`FireOutcome::Duplicate`]. Errors are the database's (or a key or activity over its size);
/// nothing is written when one is returned. The run is started by the engine after the commit.
pub(crate) async fn fire(app: &App, trigger_id: &str, firing_key: &str, activity: Activity) -> ApiResult<FireOutcome> {
    let (trigger_id, firing_key, now) = (trigger_id.to_owned(), firing_key.to_owned(), app.clock.now_ms());
    let (outcome, published) = app
        .db
        .write(move |conn| {
            let mut published = Published::default();
            let outcome = fire_in(conn, &trigger_id, &firing_key, &activity, now, &mut published)?;
            Ok((outcome, published))
        })
        .await?;
    published.publish(app);
    if matches!(
        outcome,
        FireOutcome::Fired { .. } | FireOutcome::Started { .. } | FireOutcome::Woke { run_id: Some(_), .. }
    ) {
        app.runs.notify();
    }
    Ok(outcome)
}

/// What a firing changed, to publish after its commit.
#[derive(Debug, Default)]
pub(crate) struct Published {
    changes: Changes,
    appended: Vec<(String, String, SessionEvent)>,
    fired: Vec<(String, String, String)>,
    /// Triggers (as `(owner, agent)`) whose firings changed without opening a session.
    updated: Vec<(String, String)>,
    /// Firings recorded, per kind (`telemetry::FIRING_KINDS`: thread, wake, workflow).
    firings: [u64; crate::telemetry::FIRING_KINDS.len()],
}

impl Published {
    /// Publishes the run and session changes, the appended prompt, and the account changes
    /// (`session-created`, `trigger-updated`) to the owner and the agent's members.
    pub(crate) fn publish(self, app: &App) {
        for (owner, agent, event) in self.appended {
            events::announce(&app.bus, &owner, &agent, vec![event]);
        }
        for (owner, agent, session) in self.fired {
            app.bus.publish(Event::SessionChanged { session_id: session.clone(), agent_id: agent.clone() });
            app.bus.account_change(&owner, ChangeReason::SessionCreated, Some(&agent), Some(&session));
            app.bus.account_change(&owner, ChangeReason::TriggerUpdated, Some(&agent), None);
        }
        for (owner, agent) in self.updated {
            app.bus.account_change(&owner, ChangeReason::TriggerUpdated, Some(&agent), None);
        }
        app.runs.publish(self.changes);
        for (counter, fired) in app.telemetry.trigger_firings.iter().zip(self.firings) {
            counter.add(fired);
        }
    }
}

/// [`fire`] inside the caller's write transaction, noting what to publish in `published`.
pub(crate) fn fire_in(
    conn: &Connection,
    trigger_id: &str,
    firing_key: &str,
    activity: &Activity,
    now: i64,
    published: &mut Published,
) -> ApiResult<FireOutcome> {
    if firing_key.is_empty() || firing_key.len() > MAX_KEY_BYTES {
        return Err(ApiError::invalid("Activity key must be 1 to 1024 bytes"));
    }
    let Some(trigger) = store::load(conn, trigger_id)? else { return Ok(FireOutcome::Inactive) };
    if !trigger.enabled || trigger.merged_into.is_some() {
        return Ok(FireOutcome::Inactive);
    }
    if store::handled_by_merged(conn, trigger_id, firing_key)? {
        return Ok(FireOutcome::Duplicate);
    }
    let activity_bytes = wire::to_vec(&activity.value).map_err(ApiError::internal)?;
    if activity_bytes.len() > MAX_ACTIVITY_BYTES {
        return Err(ApiError::too_large("Trigger activity is too large"));
    }
    let firing_id = uuid::Uuid::now_v7().to_string();
    let firing = store::NewFiring {
        id: &firing_id,
        account_id: &trigger.account,
        trigger_id,
        activity_key: firing_key,
        activity_summary: &summary(&activity.summary),
        activity: &activity_bytes,
        source: &trigger.source,
        matched: activity.matched_conditions.as_ref(),
        parent_firing_id: activity.parent_firing_id.as_deref(),
        status: STARTED,
    };
    if !store::insert_firing(conn, &firing, now)? {
        return Ok(FireOutcome::Duplicate);
    }
    let workflow = match &trigger.continuation {
        Some(TriggerContinuation::WakeContinuation(wake)) => {
            let run_id = wake_in(conn, &trigger, wake, activity, &firing_id, now, published)?;
            published.firings[crate::telemetry::FIRED_WAKE] += 1;
            return Ok(FireOutcome::Woke { firing_id, run_id });
        }
        Some(TriggerContinuation::ScriptContinuation(script)) => {
            Some((script.script.clone(), script.input.as_ref(), script.on_failure))
        }
        Some(TriggerContinuation::ToolContinuation(tool)) => {
            Some((crate::workflows::source::one_call(&tool.tool), tool.input.as_ref(), tool.on_failure))
        }
        Some(TriggerContinuation::NewThreadContinuation(_)) | None => None,
    };
    if let Some((source, input, on_failure)) = workflow {
        let started = Started { source, input, on_failure };
        let run_id = start_workflow(conn, &trigger, &firing_id, started, activity, now, published)?;
        published.firings[crate::telemetry::FIRED_WORKFLOW] += 1;
        return Ok(FireOutcome::Started { firing_id, run_id });
    }
    let content = message_text(&prompt_of(&trigger), &trigger.name, activity);
    let (session_id, run_id) = open_thread(conn, &trigger, Some(&firing_id), content, now, published)?;
    store::set_firing_thread(conn, &firing_id, &session_id, &run_id)?;
    store::mark_fired(conn, trigger_id, now)?;
    published.fired.push((trigger.account.clone(), trigger.agent_id.to_string(), session_id.clone()));
    published.firings[crate::telemetry::FIRED_THREAD] += 1;
    Ok(FireOutcome::Fired { firing_id, session_id, run_id })
}

/// A `wake` continuation's firing: the signal goes, through [`runs::signal`], to the run the
/// continuation names or else to the first of the agent's runs parked on an event wait that
/// takes it, and the firing records the outcome (`delivered` with the run, or `no-listener` with
/// the reason). Only runs of the trigger's own agent are offered the signal: a member who may
/// edit this agent's triggers may not be able to see the owner's other agents' runs. As upstream
/// does, `lastFiredAt` moves (and `lastError` clears) only when the signal was delivered.
fn wake_in(
    conn: &Connection,
    trigger: &AgentTriggerInfo,
    wake: &WakeContinuation,
    activity: &Activity,
    firing_id: &str,
    now: i64,
    published: &mut Published,
) -> ApiResult<Option<String>> {
    let changes = &mut published.changes;
    // The continuation's payload, or else the activity that fired it (as upstream sends).
    let payload = match &wake.payload {
        Some(payload) => payload.0.clone(),
        None => wire::to_ipld(&activity.value).map_err(ApiError::internal)?,
    };
    let signal =
        runs::signal::Signal { name: &wake.signal, payload: Some(&payload), source: runs::signal::Source::Trigger };
    // The run that took the signal, or why none did.
    let outcome: Result<String, &str> = match &wake.run_id {
        Some(run_id) => {
            if !runs::store::of_account_agent(conn, run_id, &trigger.account, &trigger.agent_id)? {
                Err("Run not found")
            } else if runs::signal::deliver(conn, run_id, &signal, now, changes)? {
                Ok(run_id.to_string())
            } else {
                Err("The run is not waiting for this signal")
            }
        }
        None => runs::signal::deliver_to_listener(conn, &trigger.account, &trigger.agent_id, &signal, now, changes)?
            .ok_or("No parked run of this agent is waiting for this signal"),
    };
    let (status, woken, error) = match outcome {
        Ok(run_id) => (DELIVERED, Some(run_id), None),
        Err(why) => (NO_LISTENER, None, Some(why)),
    };
    store::set_firing_outcome(conn, firing_id, status, error, woken.as_deref(), now)?;
    if woken.is_some() {
        store::mark_fired(conn, &trigger.id, now)?;
    }
    published.updated.push((trigger.account.clone(), trigger.agent_id.to_string()));
    Ok(woken)
}

/// What a `script` or `tool` continuation runs.
struct Started<'a> {
    /// The script (for a `tool`, the one-call script the server writes).
    source: String,
    /// The continuation's `input`.
    input: Option<&'a Value>,
    /// What a failure does.
    on_failure: Option<TriggerFailurePolicy>,
}

/// A `script` or `tool` continuation's firing: a root workflow run of the trigger's agent
/// (origin `trigger`, no session, `trigger_firing_id` the firing) whose script receives
/// `{input, activity}`; the firing records the run and stays `started` until the run-completed
/// monitor records the run's end. A `thread` failure policy is copied onto the run, so an edit
/// of the trigger never changes what a queued run's failure does.
fn start_workflow(
    conn: &Connection,
    trigger: &AgentTriggerInfo,
    firing_id: &str,
    started: Started<'_>,
    activity: &Activity,
    now: i64,
    published: &mut Published,
) -> ApiResult<String> {
    let given = started.input.map_or(Ipld::Null, |input| input.0.clone());
    let activity_value = wire::to_ipld(&activity.value).map_err(ApiError::internal)?;
    let script_input =
        Ipld::Map(BTreeMap::from([("input".to_owned(), given), ("activity".to_owned(), activity_value)]));
    let mut fields = BTreeMap::from([
        ("input".to_owned(), script_input),
        ("triggerFiringId".to_owned(), Ipld::String(firing_id.to_owned())),
    ]);
    if started.on_failure == Some(TriggerFailurePolicy::Thread) {
        fields.insert(ON_FAILURE.to_owned(), Ipld::String(TriggerFailurePolicy::Thread.to_string()));
    }
    let run = NewWorkflow {
        account_id: trigger.account.clone(),
        agent_id: trigger.agent_id.to_string(),
        parent_run_id: None,
        parent_tool_call_id: None,
        origin: "trigger",
        title: trigger.name.clone(),
        source: started.source,
        input: Ipld::Map(fields),
    };
    let run_id = crate::runs::queue::enqueue_workflow(conn, &run, now, &mut published.changes)?;
    runs::store::set_trigger_firing(conn, &run_id, firing_id)?;
    // The run snapshot noted by `enqueue_workflow` predates the firing id; note it again.
    published.changes.run(conn, &run_id)?;
    store::set_firing_outcome(conn, firing_id, STARTED, None, Some(&run_id), now)?;
    store::mark_fired(conn, &trigger.id, now)?;
    published.updated.push((trigger.account.clone(), trigger.agent_id.to_string()));
    Ok(run_id)
}

/// How a `script` or `tool` continuation's run failed, for the thread its failure opens.
#[derive(Debug, Clone)]
pub(crate) struct Failure<'a> {
    /// The failed run.
    pub run_id: &'a str,
    /// Its error code, when it has one.
    pub code: Option<&'a str>,
    /// Its error message.
    pub message: &'a str,
}

/// Opens the thread a failed `script` or `tool` continuation asks for (`onFailure: 'thread'`),
/// in the caller's transaction (the one that records the failure on firing `firing_id`): a
/// session titled after the trigger, the trigger's prompt with the activity and a
/// `<trigger_failure>` note saying what failed and why (one user message, actor `trigger`), and a
/// background agent run. The firing's `sessionId` becomes the thread (its `runId` stays the
/// failed run); the thread's run does not answer the firing, so its end leaves the firing's
/// `failed` alone. Returns the session, or `None` when the trigger or firing is gone.
pub(crate) fn open_failure_thread(
    conn: &Connection,
    firing_id: &str,
    failure: &Failure<'_>,
    now: i64,
    published: &mut Published,
) -> ApiResult<Option<String>> {
    let Some(recorded) = store::firing_activity(conn, firing_id)? else { return Ok(None) };
    let Some(trigger) = store::load(conn, &recorded.trigger_id)? else { return Ok(None) };
    let what = match &trigger.continuation {
        Some(TriggerContinuation::ToolContinuation(tool)) => format!("call of the tool `{}`", tool.tool),
        _ => "workflow script".to_owned(),
    };
    let activity =
        Activity { summary: recorded.summary, value: recorded.value, matched_conditions: None, parent_firing_id: None };
    let reason = match failure.code {
        Some(code) => format!("{code}: {}", failure.message),
        None => failure.message.to_owned(),
    };
    let escape = crate::runtime::replay::escape;
    let content = format!(
        "{}\n\n<trigger_failure run=\"{}\">\nThe trigger's {what} failed, so this thread was started for you to deal \
         with it.\n{}\n</trigger_failure>",
        message_text(&prompt_of(&trigger), &trigger.name, &activity),
        escape(failure.run_id),
        escape(&reason)
    );
    let (session_id, _) = open_thread(conn, &trigger, None, content, now, published)?;
    store::set_firing_session(conn, firing_id, &session_id)?;
    published.fired.push((trigger.account.clone(), trigger.agent_id.to_string(), session_id.clone()));
    Ok(Some(session_id))
}

/// The trigger's prompt as markdown.
fn prompt_of(trigger: &AgentTriggerInfo) -> String {
    match &trigger.prompt {
        AgentTriggerInfoPrompt::String(text) => text.clone(),
        AgentTriggerInfoPrompt::Array(blocks) => crate::agents::prompt::blocks_to_markdown(blocks),
    }
}

/// The summary as stored: one line, at most 512 bytes (cut on a character boundary).
fn summary(summary: &str) -> String {
    let line = summary.lines().next().unwrap_or_default().trim();
    let mut end = line.len().min(512);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    if line.is_empty() { "Trigger fired".to_owned() } else { line[..end].to_owned() }
}

/// The new thread: a session titled after the trigger, the user message `content` (actor
/// `trigger`, with the prompt as its markdown), the run. With `firing_id`, the run answers that
/// firing (`trigger_firing_id`, so its end settles the firing).
fn open_thread(
    conn: &Connection,
    trigger: &AgentTriggerInfo,
    firing_id: Option<&str>,
    content: String,
    now: i64,
    published: &mut Published,
) -> ApiResult<(String, String)> {
    let session_id = uuid::Uuid::now_v7().to_string();
    let session = crate::sessions::store::NewSession {
        id: &session_id,
        owner_id: &trigger.account,
        agent_id: &trigger.agent_id,
        title: Some(&trigger.name),
        title_source: crate::sessions::store::TitleSource::System,
        model_override: None,
        thoroughness: None,
    };
    crate::sessions::store::insert(conn, &session, now)?;
    let payload = SessionEventPayload::MessageEvent(MessageEvent {
        extra: Default::default(),
        actor: Some(SessionActor::Trigger),
        attachments: None,
        blocks: None,
        client_message_id: None,
        content,
        context_lines: None,
        meta: None,
        raw_markdown: Some(prompt_of(trigger)),
        role: MessageEventRole::User,
        tool_call_id: None,
        type_: MessageEventType::Message,
    });
    let event = events::append(conn, &session_id, payload, now)?;
    let mut input = BTreeMap::from([
        ("kind".to_owned(), Ipld::String("session-message".to_owned())),
        ("userEventIds".to_owned(), Ipld::List(vec![Ipld::String(event.id.to_string())])),
        ("queuedBehindAnotherTurn".to_owned(), Ipld::Bool(false)),
    ]);
    if let Some(firing_id) = firing_id {
        input.insert("triggerFiringId".to_owned(), Ipld::String(firing_id.to_owned()));
    }
    if let Some(thread) = super::thread::Thread::of(trigger.continuation.as_ref()) {
        super::thread::store(&mut input, &thread);
    }
    let input = Ipld::Map(input);
    let run = NewRun {
        account_id: trigger.account.clone(),
        agent_id: trigger.agent_id.to_string(),
        session_id: session_id.clone(),
        origin: "trigger",
        title: Some(trigger.name.clone()),
        input,
        queue: Queue::Background,
        max_attempts: MAX_ATTEMPTS,
        parent_run_id: None,
    };
    let run_id = crate::runs::queue::enqueue(conn, &run, now, &mut published.changes)?;
    if let Some(firing_id) = firing_id {
        runs::store::set_trigger_firing(conn, &run_id, firing_id)?;
        // The run snapshot noted by `enqueue` predates the firing id; note it again.
        published.changes.run(conn, &run_id)?;
    }
    published.appended.push((trigger.account.clone(), trigger.agent_id.to_string(), event));
    Ok((session_id, run_id))
}

/// What the model reads: the prompt, then the activity as JSON inside a tagged block.
fn message_text(prompt: &str, trigger_name: &str, activity: &Activity) -> String {
    let json = serde_json::to_string_pretty(&activity.value).unwrap_or_else(|_| "{}".to_owned());
    let escape = crate::runtime::replay::escape;
    format!(
        "{prompt}\n\n<trigger_activity trigger=\"{}\">\n{}\n{}\n</trigger_activity>",
        escape(&trigger_name.replace('"', "'")),
        escape(&summary(&activity.summary)),
        escape(&json)
    )
}
