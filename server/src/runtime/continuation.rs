//! `continue_session {reason, brief, title?}` (docs/runtime.md §5.10): the agent moves the
//! conversation to a new session of the same agent when this one has grown too long or its
//! subject changed.
//!
//! One write does the move: the new top-level session (the old one's model override and
//! thoroughness carried over), the brief as its first message (`meta.continuedFrom` naming the
//! call's `tool_call` event), the link between the two (`SessionInfo.continuedFrom` /
//! `continuedTo`) and a run that answers the brief there, in the queue of the run that moved it.
//! The moving pass ends after its tool batch, and its run's output (and so `MessageSession`'s
//! answer) names the new session as `continuedToSessionId`.
//!
//! Offered only to a run that is no delegated child (depth 0, no contract): a child's work
//! belongs to the task that delegated it. A run continues at most once.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use crate::db::Connection;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    MessageEvent, MessageEventRole, MessageEventType, SessionContinuationReason, SessionEvent, SessionEventMeta,
    SessionEventMetaContinuedFrom, SessionEventPayload,
};
use serde_json::{Value as Json, json};

use super::Turn;
use crate::bus::{ChangeReason, Event};
use crate::error::{ApiError, ApiResult};
use crate::model::ToolSpec;
use crate::runs::queue::{Changes, NewRun, Queue, enqueue};
use crate::sessions::events;
use crate::sessions::store::{self as session_store, NewContinuation, NewSession, TitleSource};

/// The verb's name.
pub(crate) const NAME: &str = "continue_session";

/// How far back in the moving session the call's own `tool_call` event is looked for (the
/// batch's calls are appended just before they run).
const CALL_EVENT_WINDOW: i64 = 256;

const DESCRIPTION: &str = "Move this conversation to a fresh session and carry on there. Use it when the \
     conversation has grown long enough to crowd your context, or the work turned to a different subject or \
     phase. brief is the first message of the new session and all it starts from: write down the goal, what \
     is done, what is decided, what is left and where your notes are (memory paths, document addresses). \
     reason says why (context_pressure, topic_change, phase_change, refocus, user_request, other); title \
     names the new session. This turn ends after the call; you answer the brief in the new session.";

static SCHEMA: LazyLock<Arc<Json>> = LazyLock::new(|| {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "reason": {
                "type": "string",
                "enum": ["context_pressure", "topic_change", "phase_change", "refocus", "user_request", "other"]
            },
            "brief": {"type": "string", "minLength": 1},
            "title": {"type": "string", "minLength": 1}
        },
        "required": ["reason", "brief"]
    })
    .into()
});

static VALIDATOR: LazyLock<jsonschema::Validator> =
    LazyLock::new(|| jsonschema::validator_for(&SCHEMA).expect("the continue_session schema is valid JSON Schema"));

/// The provider-facing spec.
pub(crate) fn spec() -> ToolSpec {
    ToolSpec { name: NAME.to_owned(), description: DESCRIPTION.to_owned(), parameters: SCHEMA.clone() }
}

/// Whether `turn` may continue its session: not a delegated child.
pub(crate) fn offered_to(turn: &Turn) -> bool {
    turn.depth == 0 && turn.contract.is_none()
}

/// What a continuation wrote, to announce after the commit.
struct Moved {
    session_id: String,
    continuation_id: String,
    title: String,
    events: Vec<SessionEvent>,
    changes: Changes,
}

/// Runs a `continue_session` call of `turn` with id `call_id`; errors are the texts the model
/// reads. On success the pass ends after the batch (`Turn::continued`).
pub(crate) async fn call(turn: &Turn, call_id: &str, arguments: &Json) -> Result<Json, String> {
    let arguments = super::tools::checked(NAME, &SCHEMA, &VALIDATOR, arguments.clone())?;
    let text = |key: &str| arguments.get(key).and_then(Json::as_str).map(str::trim).filter(|text| !text.is_empty());
    let reason: SessionContinuationReason =
        text("reason").and_then(|reason| reason.parse().ok()).ok_or("reason is not one of the listed reasons")?;
    let brief = text("brief").ok_or("brief is empty: write what the new session starts from")?.to_owned();
    let title = text("title").map(str::to_owned);
    // A turn asked to stop starts no more work.
    if turn.stop.reason().is_some() {
        return Err("This turn was stopped; the conversation was not continued.".to_owned());
    }
    let (run_id, session_id, agent_id, owner) =
        (turn.run_id.clone(), turn.session_id.clone(), turn.agent_id.clone(), turn.owner_id.clone());
    let (call_id, now, queue, max_attempts) =
        (call_id.to_owned(), turn.app.clock.now_ms(), turn.queue, turn.max_attempts);
    let moved = turn
        .app
        .db
        .write(move |conn| {
            let from = Leaving { run_id: &run_id, session_id: &session_id, agent_id: &agent_id, owner: &owner };
            continue_in_new_session(conn, &from, &call_id, reason, brief, title, queue, max_attempts, now)
        })
        .await
        .map_err(|error| super::tools::model_error(NAME, error))?;
    let Moved { session_id, continuation_id, title, events, changes } = moved;
    let app = &turn.app;
    app.runs.publish(changes);
    app.bus.publish(Event::SessionChanged { session_id: session_id.clone(), agent_id: turn.agent_id.clone() });
    app.bus.publish(Event::SessionChanged { session_id: turn.session_id.clone(), agent_id: turn.agent_id.clone() });
    app.bus.account_change(&turn.owner_id, ChangeReason::SessionCreated, Some(&turn.agent_id), Some(&session_id));
    events::announce(&app.bus, &turn.owner_id, &turn.agent_id, events);
    app.runs.notify();
    *super::lock(&turn.continued) = Some(session_id.clone());
    Ok(json!({
        "summary": format!("Continued in the new session \"{title}\"; this turn ends here and the work goes on there."),
        "status": "continued",
        "sessionId": session_id,
        "continuationId": continuation_id,
        "title": title,
    }))
}

/// The run and session a continuation leaves.
struct Leaving<'a> {
    run_id: &'a str,
    session_id: &'a str,
    agent_id: &'a str,
    owner: &'a str,
}

#[allow(clippy::too_many_arguments)]
fn continue_in_new_session(
    conn: &Connection,
    from: &Leaving<'_>,
    call_id: &str,
    reason: SessionContinuationReason,
    brief: String,
    title: Option<String>,
    queue: Queue,
    max_attempts: u32,
    now: i64,
) -> ApiResult<Moved> {
    if let Some(earlier) = session_store::continued_by_run(conn, from.run_id)? {
        return Err(ApiError::invalid(format!(
            "This turn already continued the conversation in session {earlier}; answer there."
        )));
    }
    let old = session_store::load_info(conn, from.session_id)?;
    let (events_tail, _) = events::tail(conn, from.session_id, 0, i64::MAX, CALL_EVENT_WINDOW)?;
    let call_event = events_tail
        .iter()
        .rev()
        .find(|event| matches!(&event.event, SessionEventPayload::ToolCallEvent(call) if call.id.as_str() == call_id));
    let continued_from = call_event.map(|event| SessionEventMetaContinuedFrom {
        extra: Default::default(),
        event_id: event.id.clone(),
        seq: event.seq,
        session_id: from.session_id.into(),
    });
    let title_source = if title.is_some() { TitleSource::Agent } else { TitleSource::System };
    let title = title.unwrap_or_else(|| super::message::run_title(&brief));
    let id = uuid::Uuid::now_v7().to_string();
    session_store::insert(
        conn,
        &NewSession {
            id: &id,
            owner_id: from.owner,
            agent_id: from.agent_id,
            title: Some(&title),
            title_source,
            model_override: old.model_override.as_ref(),
            thoroughness: old.thoroughness,
        },
        now,
    )?;
    let message = SessionEventPayload::MessageEvent(MessageEvent {
        extra: Default::default(),
        actor: None,
        attachments: None,
        blocks: None,
        client_message_id: None,
        content: brief,
        context_lines: None,
        meta: Some(SessionEventMeta { continued_from, ..Default::default() }),
        raw_markdown: None,
        role: MessageEventRole::User,
        tool_call_id: None,
        type_: MessageEventType::Message,
    });
    let event = events::append(conn, &id, message, now)?;
    let continuation_id = uuid::Uuid::now_v7().to_string();
    session_store::insert_continuation(
        conn,
        &NewContinuation {
            id: &continuation_id,
            from_session_id: from.session_id,
            to_session_id: &id,
            run_id: from.run_id,
            reason,
        },
        now,
    )?;
    let input = BTreeMap::from([
        ("kind".to_owned(), Ipld::String("session-message".into())),
        ("userEventIds".to_owned(), Ipld::List(vec![Ipld::String(event.id.to_string())])),
    ]);
    let run = NewRun {
        account_id: from.owner.to_owned(),
        agent_id: from.agent_id.to_owned(),
        session_id: id.clone(),
        origin: "agent",
        title: Some(title.clone()),
        input: Ipld::Map(input),
        queue,
        max_attempts,
        parent_run_id: None,
    };
    let mut changes = Changes::default();
    enqueue(conn, &run, now, &mut changes)?;
    session_store::touch(conn, from.session_id, now)?;
    Ok(Moved { session_id: id, continuation_id, title, events: vec![event], changes })
}
