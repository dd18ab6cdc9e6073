//! One model pass (docs/runtime.md §1.2–§1.8, §3): the log replayed into a conversation, then
//! model steps until the model stops calling tools.
//!
//! Per step, in this order: the reply streams out as `appendPartial` patches (never stored);
//! its text becomes a durable assistant message (`done` is sent just before); each tool call
//! becomes a durable `tool_call` in call order (`plan` calls leave no trace), the calls run
//! concurrently, and each `tool_result` is appended as it completes; the results go back to the
//! model in call order with the next request.
//!
//! Stop: a stream in flight is dropped and what it streamed is kept as the assistant message
//! (`Stopped.` when the pass said nothing at all); running tools finish and are recorded, then
//! no further request is made. A provider failure discards the unfinished step's text; the run
//! engine turns the failure into the durable `error` event.

use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use seed_agents_protocol::generated::{
    AgentRunActivity, AgentRunActivityPhase, AgentRunUsage, MessageEvent, MessageEventRole, MessageEventType,
    PartialPatch, SessionEventMeta, SessionEventMetaTurn, SessionEventPayload, ToolCallEvent, ToolCallEventType,
    ToolResultEvent, ToolResultEventType,
};
use seed_agents_protocol::{Value, wire};
use serde_json::Value as Json;

use super::tools::{self, Tool};
use super::{MAX_TOKENS, Turn, continuation, delegate, plan, prompt, replay};
use crate::bus::SessionFrame;
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::model::{self, Message, ModelRequest, StreamEvent, ToolCall, ToolResult, Usage};
use crate::runs::engine::{FailureCode, RunFailure, StopReason};
use crate::sessions::events;

/// The most model steps one pass may take before it is stopped as runaway.
pub(crate) const MAX_STEPS: u32 = 100;

/// How a pass ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// The model stopped calling tools; its last durable message (or `""`).
    Answered {
        /// The last assistant message appended by the pass, or `""`.
        assistant_event_id: String,
    },
    /// The run was asked to stop; the message that keeps what was said.
    Stopped {
        /// The message appended at the stop (or the last one before it), or `""`.
        assistant_event_id: String,
    },
    /// The provider failed (or the server did).
    Failed(RunFailure),
    /// The step's tool batch spawned awaited children (in `Turn::park`): the pass ends by design.
    Parked,
}

/// What the request's read found.
enum Read {
    /// The prompt, the replayed conversation and the callables the agent promoted.
    Ready {
        system: String,
        messages: Vec<Message>,
        promoted: Vec<crate::tools::registry::Callable>,
        mcp: Vec<crate::model::ToolSpec>,
    },
    /// The plan was settled under an earlier run: retire it first.
    Retire,
    /// Agent calls have no result (a crash interrupted them): answer them first.
    Repair,
}

/// The streaming state of the assistant message being written.
struct Partial {
    id: String,
    responding: bool,
}

impl Partial {
    fn new() -> Self {
        Self { id: uuid::Uuid::new_v4().to_string(), responding: false }
    }
}

fn activity(phase: AgentRunActivityPhase) -> AgentRunActivity {
    AgentRunActivity {
        extra: Default::default(),
        detail: None,
        output_tail: None,
        phase,
        tool_call_id: None,
        tool_name: None,
    }
}

fn usage_info(usage: &Usage) -> AgentRunUsage {
    let count = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
    AgentRunUsage {
        extra: Default::default(),
        cache_read: count(usage.cache_read),
        cache_write: count(usage.cache_write),
        input: count(usage.input),
        output: count(usage.output),
        total: count(usage.total),
    }
}

fn provider_failure(error: &model::ModelError) -> RunFailure {
    // Every provider failure is the provider's, seen through us: retryable where the run allows
    // retries (docs/runtime.md §2.8).
    RunFailure::provider(error.message.clone(), true)
}

/// A turn that could not start: the owner must sign in again (`sign-in-required`), the provider
/// (or its sign-in service) failed, or the agent cannot run as configured.
pub(super) fn prepare_failure(error: &ApiError) -> RunFailure {
    let code = if error.code() == Some(crate::providers::subscription::CODE_SIGN_IN_REQUIRED) {
        FailureCode::SignInRequired
    } else if error.kind() == ErrorKind::Upstream {
        FailureCode::ProviderError
    } else {
        FailureCode::ConfigError
    };
    RunFailure::from_error(code, error)
}

/// A subscription endpoint with a token refreshed when `endpoint`'s expires within the margin,
/// or when `refused` (the backend answered 401 to it); `None` when nothing changed.
async fn refresh_subscription(
    turn: &Turn,
    endpoint: &model::Endpoint,
    refused: bool,
) -> Result<Option<model::Endpoint>, RunFailure> {
    let Some(secret) = &turn.subscription else { return Ok(None) };
    let current = endpoint.api_key.as_ref().map(|key| key.as_str());
    let refused = if refused { current } else { None };
    let access = crate::providers::subscription::access(&turn.app, &turn.owner_id, secret, refused)
        .await
        .map_err(|error| prepare_failure(&error))?;
    if current == Some(access.token.as_str()) {
        return Ok(None);
    }
    let fresh = crate::model::subscription_endpoint(
        endpoint.base_url.clone(),
        access.token,
        &access.account_id,
        endpoint.model.clone(),
    )
    .map_err(|error| RunFailure::provider(error.message, false))?;
    Ok(Some(fresh))
}

/// How often a long pass looks at its subscription token's expiry again.
const SUBSCRIPTION_RECHECK: Duration = Duration::from_secs(60);

fn server_failure(error: &ApiError) -> RunFailure {
    RunFailure {
        retryable: error.kind() == ErrorKind::Unavailable,
        ..RunFailure::from_error(FailureCode::Internal, error)
    }
}

impl Turn {
    /// Sends one partial patch to the subscribers of `sessions/<id>`.
    fn partial(&self, partial: &Partial, patch: PartialPatch) {
        self.app.bus.to_session(&self.session_id, SessionFrame::Partial { partial_id: &partial.id, patch: &patch });
    }

    fn activity(&self, partial: &Partial, activity: AgentRunActivity) {
        self.partial(partial, PartialPatch { activity: Some(activity), ..Default::default() });
    }

    /// The request of the pass's first step: prompt, replayed log, tools.
    async fn request(&self) -> ApiResult<ModelRequest> {
        self.request_after(false).await
    }

    /// [`Self::request`]; `repaired` once interrupted calls were answered for it.
    async fn request_after(&self, repaired: bool) -> ApiResult<ModelRequest> {
        let (session_id, run_id, agent_id, owner_id) =
            (self.session_id.clone(), self.run_id.clone(), self.agent_id.clone(), self.owner_id.clone());
        let (definition, memory_root, now) =
            (self.definition.clone(), self.memory_root.clone(), self.app.clock.now_ms());
        let queued_behind = self.queued_behind.clone();
        let resumed = self.resumed;
        let granted = crate::tools::granted(&self.app, &self.definition);
        // Everything is read on a reader: the writer is taken only to retire a plan settled
        // under an earlier run, which happens once per plan, or to answer calls a crash
        // interrupted (found in the log read here).
        let read_run = run_id.clone();
        let read = self
            .app
            .db
            .read(move |conn| {
                let plan = plan::load(conn, &session_id)?;
                if plan.as_ref().is_some_and(|plan| plan::retirable(plan, &read_run)) {
                    return Ok(Read::Retire);
                }
                let log = events::after(conn, &session_id, 0, i64::MAX, None)?;
                let pending = if replay::has_unanswered_calls(&log) {
                    let pending = crate::runs::children::pending_calls(conn, &session_id)?;
                    if !repaired && !super::dangling_in(&log, &pending).is_empty() {
                        return Ok(Read::Repair);
                    }
                    pending
                } else {
                    Default::default()
                };
                let inputs = prompt::Inputs {
                    definition: &definition,
                    owner_id: &owner_id,
                    agent_id: &agent_id,
                    memory_root: &memory_root,
                    now_ms: now,
                    callables: &granted,
                };
                let system = prompt::system(conn, &inputs)?;
                let tail = replay::Tail {
                    queued_behind: queued_behind.as_deref(),
                    plan: plan.as_ref(),
                    pending: Some(&pending),
                    resumed,
                };
                let promoted = tools::promoted(&log, &granted);
                let mut mcp = crate::mcp::offered(conn, &owner_id, &agent_id, &definition)?;
                // The agent's lambdas that run here, after its MCP tools (docs/sandbox.md).
                mcp.extend(crate::tools::offered_lambdas(conn, &owner_id, &agent_id, &granted)?);
                Ok(Read::Ready { system, messages: replay::conversation(&log, &tail), promoted, mcp })
            })
            .await?;
        let (system, messages, promoted, mcp) = match read {
            Read::Ready { system, messages, promoted, mcp } => (system, messages, promoted, mcp),
            Read::Retire => {
                let session_id = self.session_id.clone();
                self.app.db.write(move |conn| plan::current(conn, &session_id, &run_id, now).map(drop)).await?;
                self.session_updated();
                return Box::pin(self.request_after(repaired)).await;
            }
            Read::Repair => {
                self.repair().await?;
                return Box::pin(self.request_after(true)).await;
            }
        };
        let mut offered = tools::offered(&promoted);
        // The granted MCP servers' tools and the lambdas after the promoted callables, before the
        // verbs.
        offered.splice(promoted.len()..promoted.len(), mcp);
        // `delegate` after `call`, while a child may still be spawned (a leaf at its depth budget
        // does not see it); `return_result` last, for a typed child.
        if self.depth < delegate::MAX_DEPTH {
            let at = offered.iter().position(|spec| spec.name == Tool::Call.name()).map_or(offered.len(), |i| i + 1);
            offered.insert(at, delegate::delegate_spec());
        }
        // `continue_session` after `status`, for a run that is no delegated child.
        if continuation::offered_to(self) {
            offered.push(continuation::spec());
        }
        if let Some(schema) = self.contract.as_ref().and_then(|spec| spec.output.as_ref()) {
            offered.push(delegate::return_result_spec(schema));
        }
        Ok(ModelRequest {
            system,
            messages,
            tools: offered,
            reasoning: self.reasoning.clone(),
            max_tokens: MAX_TOKENS,
            model_defaults: self.model_defaults.clone(),
        })
    }

    /// Appends the assistant message of a step (after `done`), returning its id.
    async fn say(&self, partial: &Partial, text: String, meta: SessionEventMeta) -> ApiResult<String> {
        self.say_with_usage(partial, text, meta, None, super::Answer::Keep).await
    }

    /// [`Self::say`], adding the step's usage to the run in the same write.
    async fn say_with_usage(
        &self,
        partial: &Partial,
        text: String,
        meta: SessionEventMeta,
        usage: Option<&Usage>,
        answer: super::Answer,
    ) -> ApiResult<String> {
        self.partial(partial, PartialPatch { done: Some(true), ..Default::default() });
        self.append_with_usage(
            SessionEventPayload::MessageEvent(MessageEvent {
                extra: Default::default(),
                actor: None,
                attachments: None,
                blocks: None,
                client_message_id: None,
                content: text,
                context_lines: None,
                meta: Some(meta),
                raw_markdown: None,
                role: MessageEventRole::Assistant,
                tool_call_id: None,
                type_: MessageEventType::Message,
            }),
            usage,
            answer,
        )
        .await
    }

    fn meta(&self, usage: Option<&Usage>, duration_ms: i64, turn: Option<SessionEventMetaTurn>) -> SessionEventMeta {
        SessionEventMeta {
            model: Some(self.endpoint.model.clone()),
            provider: Some(self.endpoint.provider_type.clone()),
            usage: usage.map(usage_info),
            duration_ms: Some(duration_ms),
            turn,
            ..Default::default()
        }
    }
}

/// Runs one pass of `turn`.
pub(crate) async fn run(turn: &Turn) -> Ended {
    match pass(turn).await {
        Ok(ended) => ended,
        Err(error) => Ended::Failed(server_failure(&error)),
    }
}

async fn pass(turn: &Turn) -> ApiResult<Ended> {
    let mut partial = Partial::new();
    turn.partial(
        &partial,
        PartialPatch {
            activity: Some(activity(AgentRunActivityPhase::Starting)),
            usage: Some(usage_info(&Usage::default())),
            ..Default::default()
        },
    );
    match turn.stop.reason() {
        None => {}
        Some(StopReason::Shutdown) => return Ok(Ended::Stopped { assistant_event_id: String::new() }),
        Some(_) => {
            let id = turn.say(&partial, "Stopped.".to_owned(), turn.meta(None, 0, None)).await?;
            return Ok(Ended::Stopped { assistant_event_id: id });
        }
    }
    let mut request = turn.request().await?;
    let client = &turn.app.model;
    let mut endpoint = turn.endpoint.clone();
    // A subscription token that expires within the margin is refreshed before each step (a
    // pass can outlive one); `providers::subscription` leaves a fresh one alone.
    let mut token_checked_at = Instant::now();
    let mut pass_usage = Usage::default();
    let mut last_said = String::new();
    let mut said_anything = false;
    let mut since = Instant::now();
    for step_index in 1..=MAX_STEPS {
        if turn.subscription.is_some() && token_checked_at.elapsed() >= SUBSCRIPTION_RECHECK {
            token_checked_at = Instant::now();
            match refresh_subscription(turn, &endpoint, false).await {
                Ok(fresh) => endpoint = fresh.unwrap_or(endpoint),
                Err(failure) => return Ok(Ended::Failed(failure)),
            }
        }
        let step_started = Instant::now();
        let mut streamed = String::new();
        let mut first_token: Option<Instant> = None;
        let mut refreshed_after_401 = false;
        let outcome = loop {
            let outcome = {
                let mut sink = |event: StreamEvent| match event {
                    StreamEvent::TextDelta(delta) => {
                        first_token.get_or_insert_with(Instant::now);
                        if !partial.responding {
                            partial.responding = true;
                            turn.activity(&partial, activity(AgentRunActivityPhase::Responding));
                        }
                        streamed.push_str(&delta);
                        turn.partial(&partial, PartialPatch { text_delta: Some(delta), ..Default::default() });
                    }
                    StreamEvent::ToolCallStarted { .. } => {
                        first_token.get_or_insert_with(Instant::now);
                    }
                    StreamEvent::ReasoningDelta(_) => {}
                };
                let step = client.step(&endpoint, &request, &mut sink);
                tokio::select! {
                    result = step => Some(result),
                    _ = turn.stop.stopped() => None,
                }
            };
            // A subscription backend that refuses the token (before any of the answer) gets one
            // refreshed token, once.
            let refused = matches!(&outcome, Some(Err(error)) if error.status == Some(401));
            if refused && turn.subscription.is_some() && streamed.is_empty() {
                if refreshed_after_401 {
                    let failure = RunFailure::from_error(
                        FailureCode::SignInRequired,
                        &ApiError::unauthorized(crate::providers::subscription::SIGN_IN_EXPIRED),
                    );
                    return Ok(Ended::Failed(failure));
                }
                refreshed_after_401 = true;
                match refresh_subscription(turn, &endpoint, true).await {
                    Ok(fresh) => endpoint = fresh.unwrap_or(endpoint),
                    Err(failure) => return Ok(Ended::Failed(failure)),
                }
                continue;
            }
            break outcome;
        };
        let step = match outcome {
            None if turn.stop.reason() == Some(StopReason::Shutdown) => {
                // The server is stopping: the boot sweep runs this turn again, from the log.
                return Ok(Ended::Stopped { assistant_event_id: last_said });
            }
            None => {
                // Stopped mid-stream: keep what was said.
                let text = if !streamed.trim().is_empty() {
                    streamed
                } else if said_anything {
                    return Ok(Ended::Stopped { assistant_event_id: last_said });
                } else {
                    "Stopped.".to_owned()
                };
                let duration = since.elapsed().as_millis() as i64;
                let id = turn.say(&partial, text, turn.meta(None, duration, None)).await?;
                return Ok(Ended::Stopped { assistant_event_id: id });
            }
            Some(Err(error)) => {
                tracing::debug!(run = %turn.run_id, kind = ?error.kind, status = ?error.status, "provider step failed");
                return Ok(Ended::Failed(provider_failure(&error)));
            }
            Some(Ok(step)) => step,
        };
        pass_usage += step.usage;
        turn.partial(
            &partial,
            PartialPatch {
                usage: Some(usage_info(&pass_usage)),
                activity: Some(activity(AgentRunActivityPhase::Thinking)),
                ..Default::default()
            },
        );
        let text = if streamed.trim().is_empty() { step.text.clone() } else { streamed };
        if !text.trim().is_empty() {
            let step_ms = step_started.elapsed().as_millis() as i64;
            let turn_meta = SessionEventMetaTurn {
                extra: Default::default(),
                index: Some(i64::from(step_index)),
                ttft_ms: first_token.map(|at| at.duration_since(step_started).as_millis() as i64),
                turn_ms: Some(step_ms),
            };
            let duration = since.elapsed().as_millis() as i64;
            last_said = turn
                .say_with_usage(
                    &partial,
                    text.clone(),
                    turn.meta(Some(&step.usage), duration, Some(turn_meta)),
                    Some(&step.usage),
                    // A step without calls ends the pass: its text is the pass's answer.
                    if step.tool_calls.is_empty() { super::Answer::Set } else { super::Answer::Keep },
                )
                .await?;
            said_anything = true;
            since = Instant::now();
            partial = Partial::new();
        } else {
            turn.add_usage(&step.usage).await?;
        }
        if step.tool_calls.is_empty() {
            if !said_anything {
                return Ok(Ended::Failed(RunFailure::provider("The model ended its turn without a reply", true)));
            }
            return Ok(Ended::Answered { assistant_event_id: last_said });
        }
        let results = run_tools(turn, &partial, &step.tool_calls, &request.tools).await?;
        request.messages.push(Message::Assistant { text, tool_calls: step.tool_calls, thinking: step.thinking });
        request.messages.push(Message::ToolResults(results));
        if turn.stop.reason().is_none() {
            // Awaited children end the pass by design; a typed result (or its last refusal) ends
            // the turn after the batch, with no further request.
            if !super::lock(&turn.park).is_empty() {
                return Ok(Ended::Parked);
            }
            let typed = super::lock(&turn.typed);
            if typed.delivered.is_some() || typed.rejected {
                return Ok(Ended::Answered { assistant_event_id: last_said });
            }
            // The conversation moved to another session: the turn ends there.
            if super::lock(&turn.continued).is_some() {
                return Ok(Ended::Answered { assistant_event_id: last_said });
            }
        }
        if let Some(reason) = turn.stop.reason() {
            let assistant_event_id = if said_anything || reason == StopReason::Shutdown {
                last_said
            } else {
                turn.say(&partial, "Stopped.".to_owned(), turn.meta(None, since.elapsed().as_millis() as i64, None))
                    .await?
            };
            return Ok(Ended::Stopped { assistant_event_id });
        }
    }
    Ok(Ended::Failed(RunFailure {
        code: FailureCode::StepLimit,
        message: format!("The model took more than {MAX_STEPS} steps in one turn; stopped it"),
        retryable: false,
        kind: ErrorKind::Upstream,
    }))
}

/// Records the step's calls, runs them concurrently, records each result as it completes, and
/// returns the results in call order.
async fn run_tools(
    turn: &Turn,
    partial: &Partial,
    calls: &[ToolCall],
    offered: &[crate::model::ToolSpec],
) -> ApiResult<Vec<ToolResult>> {
    for call in calls {
        if call.name == Tool::Plan.name() {
            continue;
        }
        let input = Value(wire::json_to_ipld(&call.arguments));
        turn.append(SessionEventPayload::ToolCallEvent(ToolCallEvent {
            extra: Default::default(),
            actor: None,
            id: call.id.clone().into(),
            input,
            meta: None,
            name: call.name.clone(),
            type_: ToolCallEventType::ToolCall,
        }))
        .await?;
    }
    let mut running: FuturesUnordered<_> = calls
        .iter()
        .enumerate()
        .map(|(index, call)| async move {
            let started = Instant::now();
            if call.name != Tool::Plan.name() {
                turn.activity(
                    partial,
                    AgentRunActivity {
                        extra: Default::default(),
                        detail: detail(&call.arguments),
                        output_tail: None,
                        phase: AgentRunActivityPhase::Tool,
                        tool_call_id: Some(call.id.clone().into()),
                        tool_name: Some(call.name.clone()),
                    },
                );
            }
            let outcome = execute(turn, partial, call, offered).await;
            (index, outcome, started.elapsed().as_millis() as i64)
        })
        .collect();
    let mut results: Vec<Option<ToolResult>> = vec![None; calls.len()];
    while let Some((index, outcome, duration)) = running.next().await {
        let call = &calls[index];
        // An awaited child's result is appended when the child ends, not now.
        let parked = call.name == delegate::NAME && super::lock(&turn.park).contains(&call.id);
        let (text, images, is_error, output, error) = match outcome {
            Ok((output, images)) => {
                let text = replay::bound(&serde_json::to_string(&output).unwrap_or_else(|_| "{}".to_owned()));
                (text, images, false, Some(output), None)
            }
            Err(message) => (replay::bound(&message), Vec::new(), true, None, Some(message)),
        };
        if call.name != Tool::Plan.name() && !parked {
            let output = output.map(|output| Value(wire::json_to_ipld(&output)));
            turn.append(SessionEventPayload::ToolResultEvent(ToolResultEvent {
                extra: Default::default(),
                actor: None,
                error,
                meta: Some(SessionEventMeta { duration_ms: Some(duration), ..Default::default() }),
                name: call.name.clone(),
                output,
                tool_call_id: call.id.clone().into(),
                type_: ToolResultEventType::ToolResult,
            }))
            .await?;
            turn.activity(partial, activity(AgentRunActivityPhase::Thinking));
        }
        results[index] = Some(ToolResult { call_id: call.id.clone(), name: call.name.clone(), text, images, is_error });
    }
    Ok(results.into_iter().flatten().collect())
}

/// The first string among a few telling input keys, shown beside the tool's activity.
fn detail(arguments: &Json) -> Option<String> {
    ["id", "url", "query", "path", "command", "name", "title", "address", "tool"]
        .iter()
        .find_map(|key| arguments.get(key).and_then(Json::as_str))
        .map(|text| text.chars().take(200).collect())
}

/// Runs one call: its output and any images for the model, or the error text the model reads. A
/// callable promoted in this pass (in `offered`) runs as `call {tool, input}`.
async fn execute(
    turn: &Turn,
    partial: &Partial,
    call: &ToolCall,
    offered: &[crate::model::ToolSpec],
) -> Result<(Json, Vec<crate::model::Image>), String> {
    let is_offered = |name: &str| offered.iter().any(|spec| spec.name == name);
    if call.name == delegate::NAME && is_offered(delegate::NAME) {
        return match delegate::call(turn, &call.id, &call.arguments).await {
            Ok((output, awaited)) => {
                if awaited {
                    super::lock(&turn.park).push(call.id.clone());
                }
                Ok((output, Vec::new()))
            }
            Err(error) => Err(tools::model_error(&call.name, error)),
        };
    }
    if call.name == continuation::NAME && is_offered(continuation::NAME) {
        return continuation::call(turn, &call.id, &call.arguments).await.map(|output| (output, Vec::new()));
    }
    if call.name == delegate::RETURN_RESULT
        && let Some(schema) = turn.contract.as_ref().and_then(|spec| spec.output.as_ref())
    {
        return delegate::return_result(&turn.typed, schema, &call.arguments).map(|output| (output, Vec::new()));
    }
    let Some(tool) = Tool::named(&call.name) else {
        let promoted = crate::tools::registry::Callable::named(&call.name)
            .filter(|callable| offered.iter().any(|spec| spec.name == callable.name()));
        if let Some(callable) = promoted {
            let arguments = tools::check_callable(callable, call.arguments.clone())?;
            let input = serde_json::json!({"tool": callable.name(), "input": arguments});
            return run_verb(turn, Tool::Call, &input, Some((partial, call))).await;
        }
        // What else is offered is a granted MCP server's tool or a lambda: checked here against
        // its schema, run as `call`.
        let Some(spec) = offered.iter().find(|spec| spec.name == call.name) else {
            return Err(tools::unknown(&call.name));
        };
        let errors = crate::mcp::input_errors(&spec.parameters, &call.arguments);
        if !errors.is_empty() {
            return Err(format!("Validation failed for tool \"{}\":\n  - {}", call.name, errors.join("\n  - ")));
        }
        let input = serde_json::json!({"tool": call.name, "input": call.arguments});
        return run_verb(turn, Tool::Call, &input, Some((partial, call))).await;
    };
    let arguments = tools::check(tool, call.arguments.clone())?;
    let result = match tool {
        Tool::Plan => plan::apply(turn, &arguments).await,
        Tool::Status => plan::status(turn, &arguments).await,
        Tool::Read | Tool::Write | Tool::Call => return run_verb(turn, tool, &arguments, Some((partial, call))).await,
    };
    result.map(|output| (output, Vec::new())).map_err(|error| tools::model_error(&call.name, error))
}

/// Runs `read`, `write` or `call` as the agent, with the images it showed a model that takes them;
/// a running tool's live output (`execute`) goes out as the call's activity (`live`).
async fn run_verb(
    turn: &Turn,
    tool: Tool,
    arguments: &Json,
    live: Option<(&Partial, &ToolCall)>,
) -> Result<(Json, Vec<crate::model::Image>), String> {
    let input = Value(wire::json_to_ipld(arguments));
    let context = crate::verbs::Context::for_agent(
        &turn.app,
        Some(&turn.session_id),
        &turn.agent_id,
        &turn.owner_id,
        turn.definition.clone(),
        turn.memory_root.clone(),
    );
    let context = if crate::model::accepts_images(&turn.endpoint.model) { context.showing_images() } else { context };
    let context = match live {
        Some((partial, call)) => context.showing_output(Box::new(move |tail: String| {
            turn.activity(
                partial,
                AgentRunActivity {
                    extra: Default::default(),
                    detail: detail(&call.arguments),
                    output_tail: Some(tail),
                    phase: AgentRunActivityPhase::Tool,
                    tool_call_id: Some(call.id.clone().into()),
                    tool_name: Some(call.name.clone()),
                },
            );
        })),
        None => context,
    };
    let output = match tool {
        Tool::Read => crate::verbs::read(&context, &input).await,
        Tool::Write => crate::verbs::write(&context, &input).await,
        _ => crate::verbs::call_as_agent(&context, &input).await,
    };
    output
        .map(|value| (serde_json::to_value(&value).unwrap_or(Json::Null), context.take_images()))
        .map_err(|error| tools::model_error(tool.name(), error))
}
