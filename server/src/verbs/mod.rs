//! User verbs: `InvokeSessionTool` runs `read`, `write` or `call` as the user against a session's
//! shared log, and appends the call and its result as durable events stamped `actor: user`.
//!
//! Pre-checks fail the request, in upstream's order: the verb (while decoding), writer access to
//! the session's agent, then no agent turn holding the session (409). A failure while executing
//! the verb is itself part of the log and comes back in the response's `error` with HTTP 200. Both
//! events are appended in one write transaction after the verb ran, with gap-free per-session
//! `seq`, and published only after that commit (ARCHITECTURE.md rule 5).
//!
//! [`address`] parses addresses; each noun has its file: `memory` (`~/memory/…`), `agent`
//! (`~/self`), `attachment` (`attachment:<id>`), `thread` (`thread:<id>`), `tools`
//! (`~/tools…` and the `call` verb), `hypermedia` (`hm://…`, `activity:`), `web` (`http(s)://…`).

pub(crate) mod address;
mod agent;
mod attachment;
mod hypermedia;
pub(crate) mod in_flight;
mod ipfs;
mod memory;
mod publish;
mod run;
mod thread;
mod tools;
mod triggers;
mod web;

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::db::Connection;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    AgentDefinition, InvokeSessionTool, InvokeSessionToolResponse, InvokeSessionToolVerb, SessionActor,
    SessionEventPayload, ToolCallEvent, ToolCallEventType, ToolResultEvent, ToolResultEventType,
};
use seed_agents_protocol::{Value, wire};
use serde::Serialize;

use crate::access::{self, Need};
use crate::agents;
use crate::app::App;
use crate::bus::ChangeReason;
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::runs;
use crate::sessions::events;
use address::Address;

/// The largest text a verb returns inline (upstream's tool-result bound): 256 KiB.
pub(crate) const MAX_RESULT_BYTES: usize = 256 * 1024;

/// The refusal while an agent turn holds the session (upstream's words).
const AGENT_IS_WORKING: &str = "The agent is working in this thread right now; wait for its turn to finish";

/// What a verb runs against: the session, its agent, and who asked.
pub(crate) struct Context<'a> {
    app: &'a App,
    /// The session: none for a workflow a trigger started (docs/workflows.md §3), where only
    /// the session-bound addresses (`attachment:`) refuse.
    session_id: Option<String>,
    agent_id: String,
    owner_id: String,
    definition: AgentDefinition,
    /// `<stateDir>/memory`.
    memory_root: PathBuf,
    /// Images for the model to see with the result (`read attachment:`): present only when the
    /// caller is a model that takes images.
    model_images: Option<std::sync::Mutex<Vec<crate::model::Image>>>,
    /// Shown the live output tail of a running `execute` (a model pass's activity partials).
    output_tail: Option<OutputTail<'a>>,
}

/// Receives the live output tail of a running tool.
pub(crate) type OutputTail<'a> = Box<dyn Fn(String) + Send + Sync + 'a>;

impl<'a> Context<'a> {
    /// The context of the session's agent itself (a model pass or a workflow), rather than of a
    /// user; `session_id` is `None` for a workflow with no session up its chain.
    pub(crate) fn for_agent(
        app: &'a App,
        session_id: Option<&str>,
        agent_id: &str,
        owner_id: &str,
        definition: AgentDefinition,
        memory_root: PathBuf,
    ) -> Self {
        Self {
            app,
            session_id: session_id.map(str::to_owned),
            agent_id: agent_id.to_owned(),
            owner_id: owner_id.to_owned(),
            definition,
            memory_root,
            model_images: None,
            output_tail: None,
        }
    }

    /// Shows `tail` the live output of a running `execute`.
    pub(crate) fn showing_output(mut self, tail: OutputTail<'a>) -> Self {
        self.output_tail = Some(tail);
        self
    }

    /// Lets verbs show images to the model (it takes image input).
    pub(crate) fn showing_images(mut self) -> Self {
        self.model_images = Some(std::sync::Mutex::default());
        self
    }

    /// The images verbs showed the model, taken.
    pub(crate) fn take_images(&self) -> Vec<crate::model::Image> {
        let Some(images) = &self.model_images else { return Vec::new() };
        std::mem::take(&mut *images.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// The session the verb runs in, for what belongs to one (its attachments); a clear refusal
    /// for a workflow a trigger started, which has none.
    fn session(&self) -> ApiResult<&str> {
        self.session_id.as_deref().ok_or_else(|| {
            ApiError::invalid(
                "This workflow was started by a trigger and has no thread: attachments belong to a thread, so                  attachment: addresses cannot be used here",
            )
        })
    }

    /// Whether the caller is a model that takes images.
    fn takes_images(&self) -> bool {
        self.model_images.is_some()
    }

    /// Hands `image` to the model with the result (dropped when the caller takes no images).
    fn show_image(&self, image: crate::model::Image) {
        if let Some(images) = &self.model_images {
            images.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(image);
        }
    }
}

impl Context<'_> {
    /// Tells the owner's account the agent's memory changed (call after the change is on disk).
    fn memory_changed(&self) {
        self.app.bus.account_change(&self.owner_id, ChangeReason::AgentMemoryChanged, Some(&self.agent_id), None);
    }

    /// Tells the owner's account (and members) the agent's tools changed: `agent-memory-changed`
    /// as upstream's agent-side writes say, and `agent-tools-changed` for clients listing tools.
    fn tools_changed(&self) {
        self.memory_changed();
        crate::tools::changed(self.app, &self.owner_id, &self.agent_id);
    }
}

/// `InvokeSessionTool {sessionId, verb, input}` (writer on the session's agent).
pub(crate) async fn invoke_session_tool(
    app: &App,
    caller: &Caller,
    action: InvokeSessionTool,
) -> ApiResult<InvokeSessionToolResponse> {
    // The verb itself was checked while decoding (400 `verb must be read, write, or call`).
    let context = open(app, caller, &action.session_id).await?;
    let _in_flight = app.user_verbs.enter(&action.session_id);
    let outcome = match action.verb {
        InvokeSessionToolVerb::Read => read(&context, &action.input).await,
        InvokeSessionToolVerb::Write => write(&context, &action.input).await,
        InvokeSessionToolVerb::Call => call(&context, &action.input).await,
    };
    let (output, error) = match outcome {
        Ok(output) => (Some(output), None),
        // Our own fault is not the user's failed attempt: answer 500, append nothing.
        Err(error) if error.kind() == ErrorKind::Internal => return Err(error),
        Err(error) => (None, Some(error.message().to_owned())),
    };
    let verb = action.verb.to_string();
    let tool_call_id = format!("user-{}", uuid::Uuid::now_v7());
    let call_event = SessionEventPayload::ToolCallEvent(ToolCallEvent {
        extra: Default::default(),
        actor: Some(SessionActor::User),
        id: tool_call_id.clone().into(),
        input: action.input,
        meta: None,
        name: verb.clone(),
        type_: ToolCallEventType::ToolCall,
    });
    let result_event = SessionEventPayload::ToolResultEvent(ToolResultEvent {
        extra: Default::default(),
        actor: Some(SessionActor::User),
        error: error.clone(),
        meta: None,
        name: verb,
        output: output.clone(),
        tool_call_id: tool_call_id.into(),
        type_: ToolResultEventType::ToolResult,
    });
    let (account, session_id, now) = (caller.account_id.clone(), action.session_id.clone(), app.clock.now_ms());
    let (appended, agent_id, owner_id) = app
        .db
        .write(move |conn| {
            // Re-checked on the writer: the session may have gone since the verb started.
            let access = access::require_session(conn, &session_id, &account, Need::Write)?;
            // Checked again in the transaction that appends, so no event lands while a turn holds
            // the session (runs are written only on this writer, so none can start in between).
            // A turn that started while the verb ran makes this 409 too, and nothing is logged,
            // though a `write` verb's change is already on disk then. That window closes when
            // MessageSession refuses while a user verb is in flight (docs/runtime.md §4.8).
            refuse_during_agent_turn(conn, &session_id)?;
            let call = events::append(conn, &session_id, call_event, now)?;
            let result = events::append(conn, &session_id, result_event, now)?;
            crate::sessions::store::touch(conn, &session_id, now)?;
            Ok((vec![call, result], access.agent_id, access.owner_id))
        })
        .await?;
    let result_event_id = appended.last().map(|event| event.id.clone()).unwrap_or_else(|| "".into());
    events::announce(&app.bus, &owner_id, &agent_id, appended);
    Ok(InvokeSessionToolResponse {
        extra: Default::default(),
        error,
        output,
        result_event_id,
        session_id: action.session_id,
    })
}

/// Checks writer access and that no agent turn holds the session (before the verb runs, so a
/// refusal changes nothing), and loads what the verbs need.
async fn open<'a>(app: &'a App, caller: &Caller, session_id: &str) -> ApiResult<Context<'a>> {
    let (account, session) = (caller.account_id.clone(), session_id.to_owned());
    let (access, agent) = app
        .db
        .read(move |conn| {
            let access = access::require_session(conn, &session, &account, Need::Write)?;
            refuse_during_agent_turn(conn, &session)?;
            let agent = agents::store::load_info(conn, &access.agent_id, access.role)?;
            Ok((access, agent))
        })
        .await?;
    Ok(Context {
        app,
        session_id: Some(session_id.to_owned()),
        agent_id: access.agent_id,
        owner_id: access.owner_id,
        memory_root: PathBuf::from(&agent.state_dir).join(crate::memory::path::MEMORY_DIR),
        definition: agent.definition,
        model_images: None,
        output_tail: None,
    })
}

/// 409 while an agent run of the session is live in any state: queued, claimed, running, or
/// waiting on its children or a signal (the seed's rule).
fn refuse_during_agent_turn(conn: &Connection, session_id: &str) -> ApiResult<()> {
    if runs::session_has_live_turn(conn, session_id)? {
        return Err(ApiError::conflict(AGENT_IS_WORKING));
    }
    Ok(())
}

/// The verb's input fields (a non-map input reads as empty, as upstream treats it).
struct Input<'a> {
    fields: Option<&'a BTreeMap<String, Ipld>>,
}

impl<'a> Input<'a> {
    fn new(input: &'a Value) -> Self {
        match input.as_ipld() {
            Ipld::Map(fields) => Self { fields: Some(fields) },
            _ => Self { fields: None },
        }
    }

    fn get(&self, key: &str) -> Option<&'a Ipld> {
        self.fields.and_then(|fields| fields.get(key))
    }

    /// A string field, trimmed; `None` when absent, not a string, or blank.
    fn text(&self, key: &str) -> Option<&'a str> {
        match self.get(key) {
            Some(Ipld::String(text)) => Some(text.trim()).filter(|text| !text.is_empty()),
            _ => None,
        }
    }

    /// `options` when it is a map.
    fn options(&self) -> Option<&'a BTreeMap<String, Ipld>> {
        match self.get("options") {
            Some(Ipld::Map(options)) => Some(options),
            _ => None,
        }
    }

    /// [`Self::options`], refused with a 400 naming every key outside `allowed` (the writes of
    /// `target`, such as `write ~/memory/<path>`, reject options they do not understand).
    fn known_options(&self, target: &str, allowed: &[&str]) -> ApiResult<Option<&'a BTreeMap<String, Ipld>>> {
        let options = self.options();
        let unknown: Vec<String> = options
            .into_iter()
            .flat_map(BTreeMap::keys)
            .filter(|key| !allowed.contains(&key.as_str()))
            .map(|key| format!("\"{key}\""))
            .collect();
        if unknown.is_empty() {
            return Ok(options);
        }
        Err(ApiError::invalid(format!(
            "{target} does not understand option{} {}. Supported options: {}.",
            if unknown.len() == 1 { "" } else { "s" },
            unknown.join(", "),
            allowed.join(", ")
        )))
    }
}

/// `read {address, …}` by address.
pub(crate) async fn read(context: &Context<'_>, input: &Value) -> ApiResult<Value> {
    let input = Input::new(input);
    let raw = input.text("address").ok_or_else(|| ApiError::invalid("read requires an address"))?;
    match Address::parse(raw) {
        Address::Memory(path) => memory::read(context, path).await,
        Address::SelfSummary => agent::read(context).await,
        Address::Attachment(id) => attachment::read(context, id).await,
        Address::Thread(Some(id)) => thread::read(context, id).await,
        Address::Run(id) => run::read(context, id).await,
        Address::Thread(None) => thread::list(context, input.options()).await,
        Address::Tools(name) => tools::read(context, name.as_deref()).await,
        Address::Triggers(name) => triggers::read(context, name.as_deref()).await,
        Address::Hypermedia(address) => hypermedia::read(context, &address, json_options(&input)?.as_ref()).await,
        Address::Web(address) => web::read(context, &address, json_options(&input)?.as_ref()).await,
        Address::Activity => hypermedia::activity(context, json_options(&input)?.as_ref()).await,
        Address::Ipfs(address) => ipfs::read(context, &address, &input).await,
        Address::Unsupported(label) => Err(not_yet(&format!("{label} addresses are"))),
        Address::Unrecognized => Err(ApiError::invalid(format!(
            "Unrecognized address: {raw}. Supported here: ~/memory/…, ~/self, ~/tools/…, attachment:<id>, thread:<id>, run:<id>, hm://…, https://…, activity:, ipfs://<cid>."
        ))),
    }
}

/// `options` as JSON (an absent or non-map `options` is none).
fn json_options(input: &Input<'_>) -> ApiResult<Option<serde_json::Map<String, serde_json::Value>>> {
    let Some(options) = input.options() else { return Ok(None) };
    let value = wire::from_ipld::<serde_json::Value>(Ipld::Map(options.clone()))
        .map_err(|error| ApiError::invalid(format!("options are not JSON: {error}")))?;
    Ok(match value {
        serde_json::Value::Object(map) => Some(map),
        _ => None,
    })
}

/// `write {address, …}` by address.
pub(crate) async fn write(context: &Context<'_>, input: &Value) -> ApiResult<Value> {
    let fields = Input::new(input);
    let raw = fields.text("address").ok_or_else(|| ApiError::invalid("write requires an address"))?;
    match Address::parse(raw) {
        Address::Memory(path) => memory::write(context, path, &fields).await,
        Address::Tools(Some(name)) => tools::write(context, &name, &fields).await,
        Address::Hypermedia(address) => publish::write(context, &address, &fields).await,
        Address::Ipfs(_) => ipfs::write(context, &fields).await,
        Address::Triggers(Some(name)) => triggers::write(context, &name, &fields).await,
        _ => Err(ApiError::invalid(format!(
            "Unrecognized write address: {raw}. Supported here: ~/memory/…, ~/tools/<name>, ~/triggers/<name>, ipfs://, \
             hm://<account>/<path>."
        ))),
    }
}

/// `call {tool, input}` as the user: the same as the agent's ([`call_as_agent`]), except that a
/// user can never reach delegation.
async fn call(context: &Context<'_>, input: &Value) -> ApiResult<Value> {
    if Input::new(input).text("tool") == Some("delegate") {
        return Err(ApiError::invalid("Delegation is a conversational ask; message the agent instead"));
    }
    tools::call(context, input).await
}

/// `call {tool, input}` from a model pass: a miss is a successful result that shows what can be
/// called, so the model corrects itself instead of failing (docs/runtime.md §4.4).
pub(crate) async fn call_as_agent(context: &Context<'_>, input: &Value) -> ApiResult<Value> {
    tools::call(context, input).await
}

/// `call {tool, input}` from a workflow script (`ctx.call`): as a model pass's, except that a
/// tool it cannot call (404) or input that does not fit (400) is an error, not a listing.
pub(crate) async fn call_from_script(context: &Context<'_>, input: &Value) -> ApiResult<Value> {
    tools::call_with(context, input, tools::Misses::Refuse).await
}

/// An address form upstream serves and this server does not yet (an execution failure: 400).
fn not_yet(what: &str) -> ApiError {
    ApiError::invalid(format!("{what} not supported by this server yet"))
}

/// `serialize_with` for JSON inside a verb's output: serde writes JSON null as a unit, which the
/// IPLD serializer refuses, so the value goes through [`wire::json_to_ipld`].
fn json_field<S: serde::Serializer>(value: &serde_json::Value, serializer: S) -> Result<S::Ok, S::Error> {
    wire::json_to_ipld(value).serialize(serializer)
}

/// [`json_field`] for an optional field.
fn json_option<S: serde::Serializer>(value: &Option<serde_json::Value>, serializer: S) -> Result<S::Ok, S::Error> {
    value.as_ref().map(wire::json_to_ipld).serialize(serializer)
}

/// A verb's output record: `data`'s fields (it must serialize as a map) plus `summary`.
fn record(summary: String, data: &impl Serialize) -> ApiResult<Value> {
    let mut fields = match wire::to_ipld(data).map_err(ApiError::internal)? {
        Ipld::Map(fields) => fields,
        other => return Err(ApiError::internal(format!("a verb output is not a map: {other:?}"))),
    };
    fields.insert("summary".to_owned(), Ipld::String(summary));
    Ok(Value(Ipld::Map(fields)))
}

/// A memory file named by an option (`fromPath`): `~/memory/<path>`, as the model addresses
/// memory, or the bare `<path>`.
fn memory_file_option(raw: &str) -> ApiResult<crate::memory::path::MemoryPath> {
    crate::memory::path::MemoryPath::parse(raw.strip_prefix("~/memory/").unwrap_or(raw))
}

/// `n thing` or `n things`.
fn plural(count: usize, one: &str, many: &str) -> String {
    format!("{count} {}", if count == 1 { one } else { many })
}
