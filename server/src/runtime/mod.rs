//! The agent runtime: what a claimed agent run does (docs/runtime.md §1).
//!
//! [`AgentExecutor`] is the run engine's executor for agent runs. One execution:
//!
//! 1. **prepare** (`Turn::prepare`): the agent, its provider and key, the model; a problem
//!    here is a configuration error (not retried);
//! 2. **passes** ([`pass`]): one model pass replays the log into a provider conversation, streams
//!    the reply (partials on the bus), makes each step durable, runs the step's tools and loops
//!    until the model stops;
//!    (repair first: an agent tool call with no result, because the server died while it ran, gets
//!    an error result saying so, so the log is whole again);
//! 3. **obligations**: a pass that ends with open plan steps gets a system continuation (at most
//!    [`MAX_CONTINUATIONS`]); past that, a visible notice, and the run succeeds owing them
//!    (`unmetObligations`).
//!
//! Invariants: every durable event is appended through `sessions::events` on the writer and
//! announced after its commit; partials are never stored; nothing here decides by parsing an
//! error's text; a stopped turn keeps what it streamed.

pub(crate) mod continuation;
pub(crate) mod delegate;
pub(crate) mod message;
pub(crate) mod pass;
pub(crate) mod plan;
pub(crate) mod prompt;
pub(crate) mod replay;
pub(crate) mod title;
pub(crate) mod titles;
pub(crate) mod tools;

use std::path::PathBuf;
use std::sync::{Arc, Weak};

use futures_util::future::BoxFuture;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    AgentDefinition, MessageEvent, MessageEventRole, MessageEventType, ModelProviderConfigAuthMode, SessionActor,
    SessionEventPayload, ToolResultEvent, ToolResultEventType,
};
use seed_agents_protocol::wire;

use crate::app::App;
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::model::vendors::ProviderType;
use crate::model::{self, Endpoint};
use crate::providers::models::SealedKey;
use crate::runs::engine::{Claimed, Executor, FailureCode, Outcome, RunFailure, StopSignal, Wait};
use crate::sessions::events;

/// System continuations per execution before a run ends owing its plan.
pub(crate) const MAX_CONTINUATIONS: u32 = 3;
/// The `max_tokens` of every model request.
pub(crate) const MAX_TOKENS: u32 = 16_384;

/// The error text of a tool call the server never saw finish.
pub const INTERRUPTED: &str = "Interrupted by a service restart before this tool finished; whether its side effects \
                               happened is unknown. Verify state before retrying.";

/// Runs agent runs (installed into the run engine at startup).
#[derive(Debug, Default)]
pub(crate) struct AgentExecutor {
    /// The app runs execute in (weak: the app holds the engine that holds this executor).
    app: Weak<App>,
}

impl AgentExecutor {
    /// The executor of `app`'s agent runs.
    pub(crate) fn new(app: &Arc<App>) -> Self {
        Self { app: Arc::downgrade(app) }
    }
}

impl Executor for AgentExecutor {
    fn execute(&self, run: Claimed, stop: StopSignal) -> BoxFuture<'static, Outcome> {
        let app = self.app.upgrade();
        Box::pin(async move {
            match app {
                Some(app) => {
                    let started = std::time::Instant::now();
                    let outcome = execute(app.clone(), run, stop).await;
                    app.telemetry.turns.observe_duration(started.elapsed());
                    outcome
                }
                // The server is gone; the next start's boot sweep resumes the run.
                None => Outcome::Canceled(Ipld::Null),
            }
        })
    }
}

/// Everything a pass needs, loaded once per execution.
pub(crate) struct Turn {
    /// The server.
    pub app: Arc<App>,
    /// The run being executed.
    pub run_id: String,
    /// The session it answers in.
    pub session_id: String,
    /// The session's agent.
    pub agent_id: String,
    /// The agent's owner (where its rows live).
    pub owner_id: String,
    /// The agent's definition.
    pub definition: AgentDefinition,
    /// `<stateDir>/memory`.
    pub memory_root: PathBuf,
    /// Where the model is (the pass refreshes a subscription's token in its own copy).
    pub endpoint: Endpoint,
    /// The OAuth secret of a subscription provider, whose token a pass refreshes.
    pub subscription: Option<String>,
    /// The reasoning level to ask for, if any.
    pub reasoning: Option<String>,
    /// The provider record's `modelDefaults`.
    pub model_defaults: Option<serde_json::Map<String, serde_json::Value>>,
    /// The user messages this run answers when it was queued behind another turn.
    pub queued_behind: Option<Vec<String>>,
    /// Asks the run to end.
    pub stop: StopSignal,
    /// The contract of a delegated child (its own spec, or the one its session inherited).
    pub contract: Option<delegate::Spec>,
    /// The run's depth in its tree (`delegate` is offered while a child may still be spawned).
    pub depth: i64,
    /// Whether the run already had children answer it (a parent resumed after parking).
    pub resumed: bool,
    /// The calls of its children still working when the execution started (read with the rest).
    pub live_children: Vec<String>,
    /// The final answer an earlier execution of the run recorded before the server died between
    /// it and the run's end: this execution ends from it without asking the model again.
    pub answered: Option<String>,
    /// Awaited `delegate` calls of the current pass: the pass ends after its tool batch and the
    /// run parks on them.
    pub park: std::sync::Mutex<Vec<String>>,
    /// `return_result` state of a typed child's execution.
    pub typed: std::sync::Mutex<delegate::Typed>,
    /// The session this execution continued the conversation in (`continue_session`).
    pub continued: std::sync::Mutex<Option<String>>,
    /// The run's queue (a continuation's run waits in the same one).
    pub queue: crate::runs::queue::Queue,
    /// Executions the run allows (a continuation's run allows as many).
    pub max_attempts: u32,
}

impl std::fmt::Debug for Turn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turn").field("run_id", &self.run_id).field("session_id", &self.session_id).finish()
    }
}

async fn execute(app: Arc<App>, run: Claimed, stop: StopSignal) -> Outcome {
    let turn = match Turn::prepare(app, &run, stop).await {
        Ok(turn) => turn,
        // The server's own trouble (a read that failed) is not the agent's configuration.
        Err(error) if matches!(error.kind(), ErrorKind::Internal | ErrorKind::Unavailable) => {
            return Outcome::Failed(RunFailure::from_error(FailureCode::Internal, &error));
        }
        Err(error) => return Outcome::Failed(pass::prepare_failure(&error)),
    };
    // A parent that was executing when the server died parks on its live children again rather
    // than answering without them.
    if !turn.live_children.is_empty() {
        return Outcome::Parked(Wait::Children { tool_call_ids: turn.live_children.clone() });
    }
    title::start(&turn);
    let mut continuations = 0;
    // An answer an earlier execution recorded stands: the post-pass checks below run on it.
    let mut recorded = turn.answered.clone();
    loop {
        let ended = match recorded.take() {
            Some(assistant_event_id) => pass::Ended::Answered { assistant_event_id },
            None => pass::run(&turn).await,
        };
        let assistant_event_id = match ended {
            pass::Ended::Stopped { assistant_event_id } => {
                return Outcome::Canceled(output(&assistant_event_id, &[]));
            }
            pass::Ended::Failed(failure) => return Outcome::Failed(failure),
            pass::Ended::Answered { assistant_event_id } => assistant_event_id,
            pass::Ended::Parked => {
                let parked = std::mem::take(&mut *lock(&turn.park));
                let session_id = turn.session_id.clone();
                let open = turn
                    .app
                    .db
                    .read(move |conn| {
                        let answered: Vec<bool> = parked
                            .iter()
                            .map(|id| crate::runs::children::has_result(conn, &session_id, id))
                            .collect::<ApiResult<_>>()?;
                        Ok(parked.into_iter().zip(answered).filter(|(_, done)| !done).map(|(id, _)| id).collect())
                    })
                    .await;
                match open {
                    // Every child already answered: go on at once.
                    Ok(open) if Vec::<String>::is_empty(&open) => {
                        continuations = 0;
                        continue;
                    }
                    Ok(open) => return Outcome::Parked(Wait::Children { tool_call_ids: open }),
                    Err(error) => return Outcome::Failed(RunFailure::from_error(FailureCode::Internal, &error)),
                }
            }
        };
        // The conversation moved on: open plan steps went with it, nothing is owed here.
        if let Some(continued_to) = lock(&turn.continued).clone() {
            let mut output = output(&assistant_event_id, &[]);
            if let Ipld::Map(fields) = &mut output {
                fields.insert("continuedToSessionId".to_owned(), Ipld::String(continued_to));
            }
            return Outcome::Succeeded(output);
        }
        let typed = std::mem::take(&mut *lock(&turn.typed));
        if let Some(payload) = typed.delivered {
            return Outcome::Succeeded(wire::json_to_ipld(&payload));
        }
        if typed.rejected {
            return Outcome::Failed(RunFailure {
                code: FailureCode::OutputSchema,
                message: "Sub-session could not produce a schema-valid result".into(),
                retryable: false,
                kind: ErrorKind::Invalid,
            });
        }
        // Keep the failures counted across passes of this execution.
        lock(&turn.typed).failures = typed.failures;
        let owes_result = turn.contract.as_ref().is_some_and(|spec| spec.output.is_some());
        let (session_id, run_id) = (turn.session_id.clone(), turn.run_id.clone());
        let read = turn
            .app
            .db
            .read(move |conn| {
                let plan = plan::load(conn, &session_id)?;
                let children = !crate::runs::children::live_children_of(conn, &run_id)?.is_empty();
                Ok((plan, children))
            })
            .await;
        let open = match read {
            // Steps left open while children work on them are not abandoned.
            Ok((_, true)) => Vec::new(),
            Ok((plan, false)) => plan::open_steps(plan.as_ref()),
            Err(error) => return Outcome::Failed(RunFailure::from_error(FailureCode::Internal, &error)),
        };
        if open.is_empty() && !owes_result {
            return turn.answered(&assistant_event_id, &[]).await;
        }
        let mut lines = String::new();
        if owes_result {
            lines.push_str(
                "\n- You have not delivered the result yet. Call return_result now with a payload that fits the \
                 required schema; that is how this task completes.",
            );
        }
        let bullets: String = open.iter().map(|label| format!("\n  - {label}")).collect();
        if !open.is_empty() {
            lines.push_str(&format!("\n- Plan steps not finished:{bullets}"));
        }
        if continuations < MAX_CONTINUATIONS {
            continuations += 1;
            let text = format!(
                "This turn is ending with work you committed to still open:{lines}\nContinue them now, or set honest \
                 final statuses (failed or skipped) with the plan tool. Finish the work or say plainly why you cannot."
            );
            if let Err(error) = turn.append_system(text).await {
                return Outcome::Failed(RunFailure::from_error(FailureCode::Internal, &error));
            }
            continue;
        }
        let mut notice = String::from("This run ended with work still open:");
        if owes_result {
            notice.push_str("\n- No result was delivered to the task that delegated this one.");
        }
        if !open.is_empty() {
            notice.push_str(&format!("\n- Unfinished plan steps:{bullets}"));
        }
        notice.push_str("\nNothing was completed on the agent's behalf; ask it again to continue.");
        if let Err(error) = turn.append_system(notice).await {
            return Outcome::Failed(RunFailure::from_error(FailureCode::Internal, &error));
        }
        if owes_result {
            return Outcome::Failed(RunFailure {
                code: FailureCode::OutputSchema,
                message: "Sub-session ended without delivering a valid return_result".into(),
                retryable: false,
                kind: ErrorKind::Invalid,
            });
        }
        return turn.answered(&assistant_event_id, &open).await;
    }
}

/// What an append does to the run's recorded answer (docs/runtime.md §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Leaves it as it is.
    Keep,
    /// Records the appended event as the answer of the run's last pass.
    Set,
    /// Clears it: the turn goes on.
    Clear,
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Turn {
    /// A run that answered: `{assistantEventId}` for a turn, `{text}` (the last assistant
    /// message) for a delegated child; with `unmetObligations` when it owes plan steps.
    async fn answered(&self, assistant_event_id: &str, open: &[String]) -> Outcome {
        let mut output = output(assistant_event_id, open);
        if self.contract.is_none() {
            return Outcome::Succeeded(output);
        }
        let (session_id, id) = (self.session_id.clone(), assistant_event_id.to_owned());
        let text = self
            .app
            .db
            .read(move |conn| {
                Ok(events::after(conn, &session_id, 0, i64::MAX, None)?.into_iter().rev().find_map(|event| match event
                    .event
                {
                    SessionEventPayload::MessageEvent(message)
                        if message.role == MessageEventRole::Assistant && (id.is_empty() || event.id == id) =>
                    {
                        Some(message.content)
                    }
                    _ => None,
                }))
            })
            .await;
        let text = match text {
            Ok(text) => text.unwrap_or_default(),
            Err(error) => return Outcome::Failed(RunFailure::from_error(FailureCode::Internal, &error)),
        };
        if let Ipld::Map(fields) = &mut output {
            fields.remove("assistantEventId");
            fields.insert("text".to_owned(), Ipld::String(text));
        }
        Outcome::Succeeded(output)
    }
}

/// A run's output: `{assistantEventId, unmetObligations?}`.
fn output(assistant_event_id: &str, open_steps: &[String]) -> Ipld {
    let mut fields = std::collections::BTreeMap::new();
    fields.insert("assistantEventId".to_owned(), Ipld::String(assistant_event_id.to_owned()));
    if !open_steps.is_empty() {
        let steps = open_steps.iter().map(|label| Ipld::String(label.clone())).collect();
        let obligation = Ipld::Map(
            [("kind".to_owned(), Ipld::String("plan".to_owned())), ("steps".to_owned(), Ipld::List(steps))]
                .into_iter()
                .collect(),
        );
        fields.insert("unmetObligations".to_owned(), Ipld::List(vec![obligation]));
    }
    Ipld::Map(fields)
}

/// The agent tool calls of a session that have no result, oldest first: `(call id, tool name)`.
///
/// Calls a child still works on (or a parked run waits on) are pending, not dangling.
fn dangling_calls(conn: &crate::db::Connection, session_id: &str) -> ApiResult<Vec<(String, String)>> {
    let all = events::after(conn, session_id, 0, i64::MAX, None)?;
    // A call without any result has no agent result either: nothing dangles.
    if !replay::has_unanswered_calls(&all) {
        return Ok(Vec::new());
    }
    let pending = crate::runs::children::pending_calls(conn, session_id)?;
    Ok(dangling_in(&all, &pending))
}

/// [`dangling_calls`] of a log already read, given the session's pending calls.
fn dangling_in(
    all: &[seed_agents_protocol::generated::SessionEvent],
    pending: &std::collections::HashSet<String>,
) -> Vec<(String, String)> {
    let answered: std::collections::HashSet<&str> = all
        .iter()
        .filter_map(|event| match &event.event {
            SessionEventPayload::ToolResultEvent(result) => Some(result.tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    all.iter()
        .filter_map(|event| match &event.event {
            SessionEventPayload::ToolCallEvent(call)
                if call.actor != Some(SessionActor::User)
                    && !answered.contains(call.id.as_str())
                    && !pending.contains(call.id.as_str()) =>
            {
                Some((call.id.to_string(), call.name.clone()))
            }
            _ => None,
        })
        .collect()
}

/// What the database says about a run's agent and model.
struct Loaded {
    owner_id: String,
    definition: AgentDefinition,
    state_dir: String,
    provider_type: ProviderType,
    base_url: String,
    model: String,
    reasoning: Option<String>,
    model_defaults: Option<serde_json::Map<String, serde_json::Value>>,
    sealed_key: Option<SealedKey>,
    /// The OAuth secret of a subscription provider (then `sealed_key` is `None`).
    subscription: Option<String>,
}

impl Turn {
    /// Loads the agent and resolves its model (docs/runtime.md §1.3): the session's override
    /// replaces the agent's provider, model and reasoning level when its provider still exists.
    async fn prepare(app: Arc<App>, run: &Claimed, stop: StopSignal) -> ApiResult<Self> {
        // The claim only hands agent runs with a session to this executor.
        let session_id = run.session_id.clone().ok_or_else(|| ApiError::internal("An agent run has no session"))?;
        let agent_id = run.agent_id.clone();
        let turn_session = session_id.clone();
        let overrides = app.config.provider_urls.clone();
        let (run_id, input) = (run.id.clone(), run.input.clone());
        // One read for everything an execution starts from.
        let (loaded, contract, thread, depth, resumed, live_children, answered) = app
            .db
            .read(move |conn| {
                let loaded = load(conn, &agent_id, &session_id, &overrides)?;
                let contract = delegate::contract(conn, &run_id, &input, &session_id)?;
                let thread = crate::triggers::thread::of_run(conn, &input, &session_id)?;
                let (depth, children) = crate::runs::store::depth_and_children(conn, &run_id)?.unwrap_or((0, false));
                let live = if children { crate::runs::children::live_children_of(conn, &run_id)? } else { Vec::new() };
                let answered = crate::runs::store::answered(conn, &run_id)?;
                Ok((loaded, contract, thread, depth, children, live, answered))
            })
            .await?;
        let endpoint = match &loaded.subscription {
            Some(secret) => {
                let access = crate::providers::subscription::access(&app, &loaded.owner_id, secret, None).await?;
                model::subscription_endpoint(loaded.base_url, access.token, &access.account_id, loaded.model)
                    .map_err(|error| ApiError::invalid(error.message))?
            }
            None => {
                let api_key = loaded.sealed_key.map(|key| key.open_text(&app, loaded.provider_type)).transpose()?;
                let provider = loaded.provider_type.as_str();
                model::endpoint_for(provider, loaded.base_url, api_key, loaded.model)
                    .map_err(|error| ApiError::invalid(error.message))?
            }
        };
        let queued_behind = queued_behind(&run.input);
        let mut definition = loaded.definition;
        if let Some(spec) = &contract {
            spec.apply(&mut definition);
        }
        // A trigger's new thread: its own instructions and tools, for every run in its session.
        if let Some(thread) = &thread {
            thread.apply(&mut definition);
        }
        Ok(Self {
            memory_root: PathBuf::from(&loaded.state_dir).join(crate::memory::path::MEMORY_DIR),
            app,
            run_id: run.id.clone(),
            session_id: turn_session,
            agent_id: run.agent_id.clone(),
            owner_id: loaded.owner_id,
            definition,
            contract,
            depth,
            resumed,
            live_children,
            answered,
            park: Default::default(),
            typed: Default::default(),
            continued: Default::default(),
            queue: run.queue,
            max_attempts: run.max_attempts,
            endpoint,
            subscription: loaded.subscription,
            reasoning: loaded.reasoning,
            model_defaults: loaded.model_defaults,
            queued_behind,
            stop,
        })
    }

    /// Appends an error result for every agent tool call of the session that has none.
    ///
    /// The pass's request finds them in the log it reads anyway ([`dangling_in`]), so almost
    /// every execution never holds the writer for this; when it does, the writer scans again (the
    /// log may have moved since) and appends the results.
    async fn repair(&self) -> ApiResult<()> {
        let (session_id, now) = (self.session_id.clone(), self.app.clock.now_ms());
        let appended = self
            .app
            .db
            .write(move |conn| {
                let mut appended = Vec::new();
                for (id, name) in dangling_calls(conn, &session_id)? {
                    let result = SessionEventPayload::ToolResultEvent(ToolResultEvent {
                        extra: Default::default(),
                        actor: None,
                        error: Some(INTERRUPTED.to_owned()),
                        meta: None,
                        name,
                        output: None,
                        tool_call_id: id.into(),
                        type_: ToolResultEventType::ToolResult,
                    });
                    appended.push(events::append(conn, &session_id, result, now)?);
                }
                Ok(appended)
            })
            .await?;
        events::announce(&self.app.bus, &self.owner_id, &self.agent_id, appended);
        Ok(())
    }

    /// Appends a user message from the system (continuations, notices).
    async fn append_system(&self, text: String) -> ApiResult<String> {
        let payload = SessionEventPayload::MessageEvent(MessageEvent {
            extra: Default::default(),
            actor: Some(SessionActor::System),
            attachments: None,
            blocks: None,
            client_message_id: None,
            content: text,
            context_lines: None,
            meta: None,
            raw_markdown: None,
            role: MessageEventRole::User,
            tool_call_id: None,
            type_: MessageEventType::Message,
        });
        // The turn goes on past the answer it recorded: a crash from here re-asks the model.
        self.append_with_usage(payload, None, Answer::Clear).await
    }

    /// Appends one durable event, announces it, and returns its id.
    pub(crate) async fn append(&self, payload: SessionEventPayload) -> ApiResult<String> {
        self.append_with_usage(payload, None, Answer::Keep).await
    }

    /// [`Self::append`], adding a step's usage to the run in the same transaction, and recording
    /// or clearing the run's answer there as `answer` says.
    pub(crate) async fn append_with_usage(
        &self,
        payload: SessionEventPayload,
        usage: Option<&model::Usage>,
        answer: Answer,
    ) -> ApiResult<String> {
        let (session_id, now) = (self.session_id.clone(), self.app.clock.now_ms());
        let (run_id, usage) = (self.run_id.clone(), usage.map(run_usage));
        let event = self
            .app
            .db
            .write(move |conn| {
                if let Some(usage) = &usage {
                    crate::runs::add_usage(conn, &run_id, usage)?;
                }
                let event = events::append(conn, &session_id, payload, now)?;
                match answer {
                    Answer::Keep => {}
                    Answer::Set => crate::runs::store::set_answered(conn, &run_id, Some(event.id.as_str()))?,
                    Answer::Clear => crate::runs::store::set_answered(conn, &run_id, None)?,
                }
                crate::sessions::store::touch(conn, &session_id, now)?;
                Ok(event)
            })
            .await?;
        let id = event.id.to_string();
        events::announce(&self.app.bus, &self.owner_id, &self.agent_id, vec![event]);
        Ok(id)
    }
}

impl Turn {
    /// Adds a step's usage to the run's total (accumulated, never overwritten: a run that
    /// continues or is retried keeps what its earlier passes used).
    pub(crate) async fn add_usage(&self, usage: &model::Usage) -> ApiResult<()> {
        let usage = run_usage(usage);
        let run_id = self.run_id.clone();
        self.app.db.write(move |conn| crate::runs::add_usage(conn, &run_id, &usage)).await
    }
}

/// A step's token counts as the run row keeps them.
fn run_usage(usage: &model::Usage) -> crate::runs::Usage {
    let count = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
    crate::runs::Usage {
        input: count(usage.input),
        output: count(usage.output),
        cache_read: count(usage.cache_read),
        cache_write: count(usage.cache_write),
        total: count(usage.total),
    }
}

/// `input.userEventIds` when `input.queuedBehindAnotherTurn` is true.
fn queued_behind(input: &Ipld) -> Option<Vec<String>> {
    let Ipld::Map(fields) = input else { return None };
    if fields.get("queuedBehindAnotherTurn") != Some(&Ipld::Bool(true)) {
        return None;
    }
    match fields.get("userEventIds") {
        Some(Ipld::List(ids)) => Some(
            ids.iter()
                .filter_map(|id| match id {
                    Ipld::String(id) => Some(id.clone()),
                    _ => None,
                })
                .collect(),
        ),
        _ => None,
    }
}

fn load(
    conn: &crate::db::Connection,
    agent_id: &str,
    session_id: &str,
    overrides: &[crate::model::vendors::ProviderUrl],
) -> ApiResult<Loaded> {
    let crate::agents::store::Runnable { owner_id, definition, state_dir } =
        crate::agents::store::runnable(conn, agent_id)?.ok_or_else(|| ApiError::not_found("Agent not found"))?;
    let session_override = crate::sessions::store::model_override(conn, session_id)?
        .ok_or_else(|| ApiError::not_found("Session not found"))?;
    // The override applies only while its provider still exists; it replaces the level too.
    let mut chosen = (definition.model_provider.clone(), definition.model.clone(), definition.reasoning_level);
    let mut provider = None;
    if let Some(session_override) = session_override
        && let Some(row) = crate::providers::store::load(conn, &owner_id, &session_override.provider)?
    {
        chosen = (session_override.provider, session_override.model, session_override.reasoning_level);
        provider = Some(row);
    }
    let provider = match provider {
        Some(row) => row,
        None => crate::providers::store::load(conn, &owner_id, &chosen.0)?
            .ok_or_else(|| ApiError::invalid(crate::providers::PROVIDER_NOT_FOUND))?,
    };
    let provider_type = ProviderType::require(&provider.config.type_)?;
    let (sealed_key, base_url, subscription) =
        if provider.config.auth_mode == Some(ModelProviderConfigAuthMode::Subscription) {
            // Signed in with a subscription: the type's subscription backend, with the OAuth
            // secret's tokens (docs/runtime.md §1.3).
            let secret = crate::providers::oauth_secret_name(&provider.config)
                .ok_or_else(|| {
                    ApiError::unauthorized(crate::providers::subscription::SIGN_IN_EXPIRED)
                        .with_code(crate::providers::subscription::CODE_SIGN_IN_REQUIRED)
                })?
                .to_owned();
            (None, crate::model::vendors::subscription_base_url(provider_type, overrides)?, Some(secret))
        } else {
            let sealed_key = SealedKey::load(conn, &owner_id, provider_type, &provider.config)?;
            (sealed_key, provider_type.resolve_base_url_with(&provider.config, overrides)?, None)
        };
    let model_defaults = provider.config.model_defaults.as_ref().map(|defaults| {
        defaults
            .iter()
            .filter_map(|(key, value)| serde_json::to_value(value).ok().map(|value| (key.clone(), value)))
            .collect()
    });
    Ok(Loaded {
        owner_id,
        definition,
        state_dir,
        provider_type,
        base_url,
        model: chosen.1,
        reasoning: chosen.2.map(|level| level.to_string()),
        model_defaults,
        sealed_key,
        subscription,
    })
}
