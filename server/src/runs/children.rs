//! Delegated children and the parents waiting for them (docs/runtime.md §5.1, §5.5, §5.7).
//!
//! A child run answers one tool call of its parent (`runs.parent_tool_call_id`; a later run on
//! the child's session inherits the link through `sessions.run_id`). Everything here runs inside
//! the write transaction that ends the child (finish, tree cancellation) or parks the parent, so
//! a crash never separates a child's end from its delivery:
//!
//! - [`finalized`]: a run ended. Its session's `running` plan steps close when nothing else is
//!   live there; a child that succeeded settles its parent's plan step when every run attached to
//!   it succeeded (`resolvedBy: 'runtime'`); the parent's `tool_result` is appended once, as data
//!   (`succeeded`/`canceled`/`failed`); a late success gets a notice in the child's own log
//!   instead; the call leaves the parent's wait set, and an empty set requeues the parent.
//! - [`park`]: the race closer on every transition to waiting: calls already answered leave the
//!   wait set first; when none remain the run is requeued instead of parked.
//! - [`boot_reconcile`]: at boot, replays deliveries for finished children of waiting parents.
//! - [`pending_calls`] and [`live_child_calls`]: which calls of a session still wait for a child
//!   (replayed with a "still running" result, never repaired as interrupted).

use std::collections::{BTreeMap, HashSet};

use crate::db::Connection;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::Value;
use seed_agents_protocol::generated::{
    MessageEvent, MessageEventRole, MessageEventType, RunInfoKind, RunStatus, SessionActor, SessionEventPayload,
    ToolResultEvent, ToolResultEventType,
};

use super::hooks::RunHooks;
use super::queue::{Changes, sync_session_status};
use super::store::{self, Delivery};
use super::wait::Wait;
use crate::error::ApiResult;
use crate::sessions::events;
use crate::sessions::store as session_store;

/// The tool name a child's result is recorded under in its parent's log.
pub(crate) const DELEGATE: &str = "delegate";

/// What a child that succeeded after its parent's call was already answered reads in its log.
pub const LATE_RESULT: &str = "Result accepted, but the task that delegated this one had already stopped waiting for \
                               it — nothing was delivered upstream.";

fn text_field(value: &Ipld, key: &str) -> Option<String> {
    match value {
        Ipld::Map(fields) => match fields.get(key) {
            Some(Ipld::String(text)) => Some(text.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// The parent call a run answers: its own link, or (for a later run on a child's session) the
/// link of the run that spawned the session. `(parent run, parent tool call)`.
fn link_of(conn: &Connection, run: &Delivery) -> ApiResult<Option<(String, String)>> {
    if let (Some(parent), Some(call)) = (&run.parent_run_id, &run.parent_tool_call_id) {
        return Ok(Some((parent.clone(), call.clone())));
    }
    let Some(session_id) = &run.session_id else { return Ok(None) };
    let spawning = session_store::spawning_run(conn, session_id)?;
    let Some(spawning) = spawning.filter(|spawning| *spawning != run.id) else { return Ok(None) };
    let Some(spawning) = store::delivery(conn, &spawning)? else { return Ok(None) };
    Ok(match (spawning.parent_run_id, spawning.parent_tool_call_id) {
        (Some(parent), Some(call)) => Some((parent, call)),
        _ => None,
    })
}

/// Whether session `session_id` holds an agent `tool_result` for call `call_id`.
pub(crate) fn has_result(conn: &Connection, session_id: &str, call_id: &str) -> ApiResult<bool> {
    Ok(answered(conn, session_id)?.contains(call_id))
}

/// The call ids of a session's agent `tool_result`s.
fn answered(conn: &Connection, session_id: &str) -> ApiResult<HashSet<String>> {
    Ok(events::after(conn, session_id, 0, i64::MAX, None)?
        .into_iter()
        .filter_map(|event| match event.event {
            SessionEventPayload::ToolResultEvent(result) if result.actor != Some(SessionActor::User) => {
                Some(result.tool_call_id.into_string())
            }
            _ => None,
        })
        .collect())
}

/// The calls of session `session_id` a child still works on: calls of its runs' live children
/// (queued, claimed, running or waiting) that have no result yet.
pub(crate) fn live_child_calls(conn: &Connection, session_id: &str) -> ApiResult<HashSet<String>> {
    Ok(store::live_child_calls(conn, session_id)?.into_iter().collect())
}

/// The calls of run `run_id` whose children are still live, oldest first (a parent that was
/// executing when the server died parks on them again instead of answering without them).
pub(crate) fn live_children_of(conn: &Connection, run_id: &str) -> ApiResult<Vec<String>> {
    Ok(store::live_children_of(conn, run_id)?)
}

/// Pending calls as the replay shows them: every call a `waiting` run of the session is parked
/// on, and every call a live child still works on.
pub(crate) fn pending_calls(conn: &Connection, session_id: &str) -> ApiResult<HashSet<String>> {
    let mut pending = live_child_calls(conn, session_id)?;
    for wait in store::session_waits(conn, session_id)? {
        if let Wait::Children { tool_call_ids } = wait {
            pending.extend(tool_call_ids);
        }
    }
    Ok(pending)
}

/// Run `run_id` ended (succeeded, failed or canceled): see the module docs.
pub(crate) fn finalized(
    conn: &Connection,
    hooks: &dyn RunHooks,
    run_id: &str,
    now_ms: i64,
    changes: &mut Changes,
) -> ApiResult<()> {
    // An agent run or a workflow run (a script child answers its parent's `delegate` call the
    // same way; it has no session of its own to settle).
    let Some(run) = store::delivery(conn, run_id)? else { return Ok(()) };
    if let (Some(session_id), Some(agent_id)) = (&run.session_id, &run.agent_id)
        && matches!(run.status, RunStatus::Succeeded | RunStatus::Failed)
        && !store::session_has_live_run(conn, session_id)?
        && hooks.session_quiet(conn, session_id, run.status == RunStatus::Succeeded, now_ms)?
    {
        changes.session(session_id, agent_id);
    }
    let Some((parent_id, call_id)) = link_of(conn, &run)? else { return Ok(()) };
    if run.status == RunStatus::Succeeded {
        settle_plan_step(conn, hooks, &run, &parent_id, now_ms, changes)?;
    }
    deliver(conn, &run, &parent_id, &call_id, now_ms, changes)
}

/// `input.planStepId` of a run.
fn plan_step_of(run: &Delivery) -> Option<String> {
    text_field(&run.input, "planStepId")
}

/// Settles the parent's plan step when every run of the tree attached to it (spawned from the
/// parent's session) succeeded.
fn settle_plan_step(
    conn: &Connection,
    hooks: &dyn RunHooks,
    child: &Delivery,
    parent_id: &str,
    now_ms: i64,
    changes: &mut Changes,
) -> ApiResult<()> {
    let Some(step_id) = plan_step_of(child) else { return Ok(()) };
    let Some(parent) = store::delivery(conn, parent_id)? else { return Ok(()) };
    let (Some(session_id), Some(agent_id)) = (&parent.session_id, &parent.agent_id) else { return Ok(()) };
    let attached: Vec<RunStatus> = store::tree_members(conn, &parent.root_run_id)?
        .iter()
        .filter(|member| {
            member.parent_run_id.is_some()
                && member.parent_session_id.as_deref() == Some(session_id.as_str())
                && text_field(&member.input, "planStepId").as_deref() == Some(step_id.as_str())
        })
        .map(|member| member.status)
        .collect();
    if attached.is_empty() || attached.iter().any(|status| *status != RunStatus::Succeeded) {
        return Ok(());
    }
    if hooks.step_done(conn, session_id, &step_id, now_ms)? {
        changes.session(session_id, agent_id);
    }
    Ok(())
}

/// The result a parent's call receives for a child that ended: always data, never an error.
fn result_of(child: &Delivery) -> Ipld {
    let mut fields = BTreeMap::new();
    fields.insert("runId".to_owned(), Ipld::String(child.id.clone()));
    if let Some(session_id) = &child.session_id {
        fields.insert("sessionId".to_owned(), Ipld::String(session_id.clone()));
    }
    match child.status {
        RunStatus::Succeeded => {
            fields.insert("status".to_owned(), Ipld::String("succeeded".into()));
            fields.insert("output".to_owned(), child.output.clone());
        }
        RunStatus::Canceled => {
            fields.insert("status".to_owned(), Ipld::String("canceled".into()));
        }
        _ => {
            let error = &child.error;
            let code = text_field(error, "code").unwrap_or_else(|| "run-failed".into());
            let message = text_field(error, "message").unwrap_or_else(|| "Sub-session failed".into());
            fields.insert("status".to_owned(), Ipld::String("failed".into()));
            fields.insert(
                "error".to_owned(),
                Ipld::Map(BTreeMap::from([
                    ("code".to_owned(), Ipld::String(code)),
                    ("message".to_owned(), Ipld::String(message)),
                ])),
            );
        }
    }
    Ipld::Map(fields)
}

/// Appends the parent's result once (a late success notes itself in the child's log instead),
/// then takes the call out of the parent's wait set.
fn deliver(
    conn: &Connection,
    child: &Delivery,
    parent_id: &str,
    call_id: &str,
    now_ms: i64,
    changes: &mut Changes,
) -> ApiResult<()> {
    let Some(parent) = store::delivery(conn, parent_id)? else { return Ok(()) };
    if parent.kind == RunInfoKind::Workflow {
        // A workflow reads its child's end itself, on the resume this requeue starts.
        return wake_workflow(conn, parent_id, call_id, now_ms, changes);
    }
    let (Some(session_id), Some(agent_id)) = (&parent.session_id, &parent.agent_id) else { return Ok(()) };
    if !has_result(conn, session_id, call_id)? {
        let output = Value(result_of(child));
        let payload = SessionEventPayload::ToolResultEvent(ToolResultEvent {
            extra: Default::default(),
            actor: None,
            error: None,
            meta: None,
            name: DELEGATE.to_owned(),
            output: Some(output),
            tool_call_id: call_id.into(),
            type_: ToolResultEventType::ToolResult,
        });
        append(conn, session_id, &parent.account_id, agent_id, payload, now_ms, changes)?;
    } else if child.status == RunStatus::Succeeded
        && let (Some(child_session), Some(child_agent)) = (&child.session_id, &child.agent_id)
    {
        let payload = SessionEventPayload::MessageEvent(MessageEvent {
            extra: Default::default(),
            actor: Some(SessionActor::System),
            attachments: None,
            blocks: None,
            client_message_id: None,
            content: LATE_RESULT.to_owned(),
            context_lines: None,
            meta: None,
            raw_markdown: None,
            role: MessageEventRole::User,
            tool_call_id: None,
            type_: MessageEventType::Message,
        });
        append(conn, child_session, &child.account_id, child_agent, payload, now_ms, changes)?;
    }
    resolve_wait(conn, parent_id, call_id, now_ms, changes)
}

fn append(
    conn: &Connection,
    session_id: &str,
    owner: &str,
    agent_id: &str,
    payload: SessionEventPayload,
    now_ms: i64,
    changes: &mut Changes,
) -> ApiResult<()> {
    let event = events::append(conn, session_id, payload, now_ms)?;
    session_store::touch(conn, session_id, now_ms)?;
    changes.event(owner, agent_id, event);
    Ok(())
}

fn wait_of(conn: &Connection, run_id: &str) -> ApiResult<Option<Vec<String>>> {
    match store::parked_wait(conn, run_id)? {
        Some(Wait::Children { tool_call_ids }) => Ok(Some(tool_call_ids)),
        _ => Ok(None),
    }
}

/// Takes `call_id` out of waiting run `run_id`'s set; an empty set requeues the run.
fn resolve_wait(conn: &Connection, run_id: &str, call_id: &str, now_ms: i64, changes: &mut Changes) -> ApiResult<()> {
    let Some(mut ids) = wait_of(conn, run_id)? else { return Ok(()) };
    let before = ids.len();
    ids.retain(|id| id != call_id);
    if ids.len() == before {
        return Ok(());
    }
    store_wait(conn, run_id, ids, now_ms, changes)
}

/// Stores a shrunken wait set, or requeues the run when it is empty (its queue position is its
/// `created_at`, unchanged; resuming is not a new execution, so `attempt` stays).
fn store_wait(conn: &Connection, run_id: &str, ids: Vec<String>, now_ms: i64, changes: &mut Changes) -> ApiResult<()> {
    if ids.is_empty() {
        store::resume_parked(conn, run_id, now_ms)?;
        changes.wake();
    } else {
        store::set_parked_wait(conn, run_id, &Wait::Children { tool_call_ids: ids }, now_ms)?;
    }
    changes.run(conn, run_id)?;
    if let Some(session_id) = store::session_of(conn, run_id)? {
        sync_session_status(conn, &session_id, now_ms, changes)?;
    }
    Ok(())
}

/// Requeues workflow run `run_id` when it is parked on the child answering `call_id`: a workflow
/// resumes as soon as any child it awaits has ended, and its replay parks again on the rest
/// (docs/workflows.md §3).
fn wake_workflow(conn: &Connection, run_id: &str, call_id: &str, now_ms: i64, changes: &mut Changes) -> ApiResult<()> {
    match wait_of(conn, run_id)? {
        Some(ids) if ids.iter().any(|id| id == call_id) => store_wait(conn, run_id, Vec::new(), now_ms, changes),
        _ => Ok(()),
    }
}

/// The race closer after run `run_id` parked on children: calls already answered leave its wait
/// set; with none left it is requeued. Whether it stays parked. A workflow (no session) is
/// requeued when any child it waits on has already ended.
pub(crate) fn park(conn: &Connection, run_id: &str, now_ms: i64, changes: &mut Changes) -> ApiResult<bool> {
    let Some(ids) = wait_of(conn, run_id)? else { return Ok(false) };
    let Some(session_id) = store::session_of(conn, run_id)? else {
        let ended = store::ended_child_calls(conn, run_id)?;
        if ids.iter().any(|id| ended.contains(id)) {
            store_wait(conn, run_id, Vec::new(), now_ms, changes)?;
            return Ok(false);
        }
        return Ok(true);
    };
    let answered = answered(conn, &session_id)?;
    let open: Vec<String> = ids.iter().filter(|id| !answered.contains(*id)).cloned().collect();
    if open.len() == ids.len() {
        return Ok(true);
    }
    let parked = !open.is_empty();
    store_wait(conn, run_id, open, now_ms, changes)?;
    Ok(parked)
}

/// At boot: every run waiting on children gets the results of children that already ended
/// delivered (a result lost with a transaction that never committed cannot exist, but a wait
/// written by an older build may lag), then the park race closer. Returns how many runs were
/// requeued.
pub(crate) fn boot_reconcile(conn: &Connection, now_ms: i64, changes: &mut Changes) -> ApiResult<usize> {
    let waiting = store::parked_without_timer(conn)?;
    let mut requeued = 0;
    for run_id in waiting {
        let Some(ids) = wait_of(conn, &run_id)? else { continue };
        for child_id in store::ended_children(conn, &run_id)? {
            let Some(child) = store::delivery(conn, &child_id)? else { continue };
            if let Some(call_id) = child.parent_tool_call_id.clone()
                && ids.contains(&call_id)
            {
                deliver(conn, &child, &run_id, &call_id, now_ms, changes)?;
            }
        }
        if !park(conn, &run_id, now_ms, changes)? {
            requeued += 1;
        }
    }
    Ok(requeued)
}

#[cfg(test)]
mod tests {
    use crate::db::params;
    use seed_agents_protocol::wire;

    use super::*;
    use crate::db::migrated_in_memory;

    /// Parent `p` (session `ps`) waiting on calls `c1` and `c2`; child `k` (session `ks`)
    /// answering `c1` with `status`.
    fn db(child_status: &str) -> Connection {
        let conn = migrated_in_memory();
        conn.execute_batch(
            "INSERT INTO agents (id, account_id, definition_cbor, state_dir, status, created_at, updated_at)
                 VALUES ('a', 'owner', x'a0', '/tmp/a', 'active', 1, 1);
             INSERT INTO sessions (id, account_id, agent_id, title_source, status, created_at, updated_at)
                 VALUES ('ps', 'owner', 'a', 'system', 'idle', 1, 1), ('ks', 'owner', 'a', 'system', 'idle', 1, 1);",
        )
        .unwrap();
        let wait = wire::to_vec(&Wait::Children { tool_call_ids: vec!["c1".into(), "c2".into()] }).unwrap();
        let output = wire::to_vec(&serde_json::json!({"text": "hi"})).unwrap();
        conn.execute(
            "INSERT INTO runs (id, account_id, root_run_id, kind, origin, agent_id, session_id, input_cbor, status,
                               wait_cbor, created_at, updated_at)
             VALUES ('p', 'owner', 'p', 'agent', 'user', 'a', 'ps', x'a0', 'waiting', ?1, 1, 1)",
            params![wait],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO runs (id, account_id, root_run_id, parent_run_id, parent_tool_call_id, depth, kind, origin,
                               agent_id, session_id, input_cbor, output_cbor, status, created_at, updated_at)
             VALUES ('k', 'owner', 'p', 'p', 'c1', 1, 'agent', 'agent', 'a', 'ks', x'a0', ?2, ?1, 2, 2)",
            params![child_status, output],
        )
        .unwrap();
        conn
    }

    fn status(conn: &Connection, run: &str) -> String {
        conn.query_row("SELECT status FROM runs WHERE id = ?1", params![run], |row| row.get(0)).unwrap()
    }

    fn results(conn: &Connection, session: &str) -> usize {
        events::after(conn, session, 0, i64::MAX, None)
            .unwrap()
            .iter()
            .filter(|event| matches!(event.event, SessionEventPayload::ToolResultEvent(_)))
            .count()
    }

    #[test]
    fn a_finished_child_is_delivered_once_and_the_last_one_requeues_its_parent() {
        let conn = db("succeeded");
        let mut changes = Changes::default();
        finalized(&conn, &crate::server::Consumers, "k", 5, &mut changes).unwrap();
        finalized(&conn, &crate::server::Consumers, "k", 6, &mut changes).unwrap();
        assert_eq!(results(&conn, "ps"), 1, "delivered once");
        assert_eq!(wait_of(&conn, "p").unwrap(), Some(vec!["c2".to_owned()]));
        let notices = events::after(&conn, "ks", 0, i64::MAX, None).unwrap();
        assert_eq!(notices.len(), 1, "the second delivery was late: noted in the child");
        // The race closer: `c2` answered by the time the parent parks again: it is requeued.
        let payload = SessionEventPayload::ToolResultEvent(ToolResultEvent {
            extra: Default::default(),
            actor: None,
            error: None,
            meta: None,
            name: DELEGATE.into(),
            output: None,
            tool_call_id: "c2".into(),
            type_: ToolResultEventType::ToolResult,
        });
        events::append(&conn, "ps", payload, 7).unwrap();
        assert!(!park(&conn, "p", 8, &mut changes).unwrap());
        assert_eq!(status(&conn, "p"), "queued");
        assert!(!changes.is_empty());
    }

    #[test]
    fn boot_replays_a_finished_child_into_its_waiting_parent() {
        let conn = db("failed");
        let mut changes = Changes::default();
        assert_eq!(boot_reconcile(&conn, 5, &mut changes).unwrap(), 0, "c2 still pending");
        assert_eq!(results(&conn, "ps"), 1);
        assert_eq!(wait_of(&conn, "p").unwrap(), Some(vec!["c2".to_owned()]));
        boot_reconcile(&conn, 6, &mut changes).unwrap();
        assert_eq!(results(&conn, "ps"), 1, "a second boot delivers nothing again");
        let SessionEventPayload::ToolResultEvent(result) =
            &events::after(&conn, "ps", 0, i64::MAX, None).unwrap()[0].event
        else {
            panic!()
        };
        let output = serde_json::to_value(result.output.as_ref().unwrap()).unwrap();
        assert_eq!(output["status"], "failed");
        assert_eq!(output["error"], serde_json::json!({"code": "run-failed", "message": "Sub-session failed"}));
    }
}
