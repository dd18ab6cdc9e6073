//! The trigger actions (docs/protocol.md §C.4): `ListAgentTriggers`, `GetAgentTrigger`,
//! `CreateAgentTrigger`, `UpdateAgentTrigger`, `DeleteAgentTrigger`, `CombineAgentTriggers`.
//!
//! Input is normalised (`validate`) before the write transaction; the transaction checks access,
//! the idempotency key or the caller's `expectedUpdatedAt`, then writes. A trigger's `updatedAt`
//! strictly increases on every change, so two edits in one millisecond still tell apart.

use std::sync::Arc;

use crate::db::Connection;
use seed_agents_protocol::generated::{
    ActivitySource, AgentDefinitionSystemPrompt, AgentTriggerInfo, AgentTriggerInfoPrompt, AgentTriggerInput,
    AgentTriggerInputPrompt, AgentTriggerPatchPrompt, AgentTriggerSource, CombineAgentTriggers, CreateAgentTrigger,
    CreateAgentTriggerResponse, DeleteAgentTrigger, DeleteAgentTriggerResponse, GetAgentTrigger,
    GetAgentTriggerResponse, ListAgentTriggers, ListAgentTriggersResponse, UpdateAgentTrigger,
    UpdateAgentTriggerResponse,
};
use seed_agents_protocol::version::AGENTS_PROTOCOL_VERSION;
use seed_agents_protocol::wire;
use serde::Serialize;

use super::store::{self, NOT_FOUND};
use super::validate::{self, Normalized};
use super::webhook;
use crate::access::{self, Need};
use crate::app::App;
use crate::bus::ChangeReason;
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};
use crate::idempotency::Key;

/// The 409 for a stale `expectedUpdatedAt`.
pub(crate) const STALE: &str = "Agent trigger was changed since it was read; reload it and try again";
/// The 400 for editing a trigger merged into another.
pub(crate) const MERGED: &str = "This trigger was combined into another and cannot be edited or enabled";

fn new_condition_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

fn prompt_input(prompt: Option<AgentTriggerInputPrompt>) -> Option<AgentDefinitionSystemPrompt> {
    prompt.map(|prompt| match prompt {
        AgentTriggerInputPrompt::Array(blocks) => AgentDefinitionSystemPrompt::Array(blocks),
        AgentTriggerInputPrompt::String(text) => AgentDefinitionSystemPrompt::String(text),
    })
}

/// Normalises a `CreateAgentTrigger` input (see [`validate`]).
pub(crate) fn normalize_input(input: &AgentTriggerInput) -> ApiResult<Normalized> {
    Ok(Normalized {
        name: validate::name(&input.name)?,
        enabled: input.enabled.unwrap_or(true),
        source: validate::source(input.source.clone(), &mut new_condition_id)?,
        prompt: validate::prompt(prompt_input(input.prompt.clone()))?,
        continuation: validate::continuation(input.continuation.clone())?,
    })
}

/// Inserts a new trigger for `agent_id` (stored under `owner_id`); returns its id and, for a
/// webhook source, its freshly minted secret.
pub(crate) fn insert(
    app: &App,
    conn: &Connection,
    owner_id: &str,
    agent_id: &str,
    trigger: &Normalized,
    now: i64,
) -> ApiResult<(String, Option<String>)> {
    let id = insert_row(conn, owner_id, agent_id, trigger, now)?;
    let secret = match trigger.source {
        AgentTriggerSource::WebhookSource(_) => Some(webhook::rotate_secret(app, conn, owner_id, &id)?),
        _ => None,
    };
    Ok((id, secret))
}

/// Inserts the trigger's row (without minting a webhook secret); returns its id.
pub(crate) fn insert_row(
    conn: &Connection,
    owner_id: &str,
    agent_id: &str,
    trigger: &Normalized,
    now: i64,
) -> ApiResult<String> {
    let id = uuid::Uuid::now_v7().to_string();
    store::insert(conn, &id, owner_id, agent_id, trigger, now)?;
    Ok(id)
}

/// `ListAgentTriggers {agentId}` (reader): the agent's triggers, most recently updated first.
pub(crate) async fn list_agent_triggers(
    app: &App,
    caller: &Caller,
    action: ListAgentTriggers,
) -> ApiResult<ListAgentTriggersResponse> {
    let account = caller.account_id.clone();
    app.db
        .read(move |conn| {
            let access = access::require(conn, &action.agent_id, &account, Need::Read)?;
            Ok(ListAgentTriggersResponse { extra: Default::default(), triggers: store::list(conn, &access.agent_id)? })
        })
        .await
}

/// `GetAgentTrigger {triggerId}` (reader): the trigger, its newest firings and the sessions they
/// opened. The webhook secret is never shown again after create or rotation.
pub(crate) async fn get_agent_trigger(
    app: &App,
    caller: &Caller,
    action: GetAgentTrigger,
) -> ApiResult<GetAgentTriggerResponse> {
    let account = caller.account_id.clone();
    app.db
        .read(move |conn| {
            let (trigger, _) = store::require(conn, &action.trigger_id, &account, Need::Read)?;
            let firings = store::firings(conn, &trigger.id)?;
            let mut sessions = Vec::new();
            for session_id in store::session_ids(conn, &trigger.id)? {
                sessions.push(crate::sessions::store::load_info(conn, &session_id)?);
            }
            store::attribute(conn, &mut sessions)?;
            Ok(GetAgentTriggerResponse { extra: Default::default(), firings, sessions, trigger, webhook_secret: None })
        })
        .await
}

#[derive(Serialize)]
struct CreateRequest<'a> {
    #[serde(rename = "agentId")]
    agent_id: &'a str,
    trigger: &'a AgentTriggerInput,
}

/// `CreateAgentTrigger {agentId, trigger, clientRequestId?}` (writer). A webhook source's secret
/// is in this answer only; a replayed `clientRequestId` answers the trigger without it (the
/// secret is never stored in the clear), and the caller rotates it if it lost the first answer.
pub(crate) async fn create_agent_trigger(
    app: &Arc<App>,
    caller: &Caller,
    action: CreateAgentTrigger,
) -> ApiResult<CreateAgentTriggerResponse> {
    let key = Key::request(
        &caller.account_id,
        "CreateAgentTrigger",
        action.client_request_id.as_deref(),
        &CreateRequest { agent_id: &action.agent_id, trigger: &action.trigger },
    )?;
    let now = app.clock.now_ms();
    let writer = Arc::clone(app);
    let (response, announce) = access::write(app, caller, action.agent_id.clone(), Need::Write, move |conn, access| {
        if let Some(key) = &key
            && let Some(previous) = key.replay::<CreateAgentTriggerResponse>(conn)?
        {
            return Ok((previous, None));
        }
        let trigger = normalize_input(&action.trigger)?;
        let (id, secret) = insert(&writer, conn, &access.owner_id, &access.agent_id, &trigger, now)?;
        let info = store::load(conn, &id)?.ok_or_else(|| ApiError::internal("created trigger vanished"))?;
        let stored = CreateAgentTriggerResponse { extra: Default::default(), trigger: info, webhook_secret: None };
        if let Some(key) = &key {
            key.store(conn, &stored, now)?;
        }
        Ok((CreateAgentTriggerResponse { webhook_secret: secret, ..stored }, Some((access.owner_id, access.agent_id))))
    })
    .await?;
    if let Some((owner, agent)) = announce {
        app.bus.account_change(owner, ChangeReason::TriggerCreated, Some(&agent), None);
    }
    Ok(response)
}

/// Refuses, before any write, what a client below protocol 3 could not read back: a compound
/// trigger (the compat crate's own refusal for that response).
fn refuse_for_old_client(caller: &Caller, trigger: &AgentTriggerInfo) -> ApiResult<()> {
    if caller.protocol >= AGENTS_PROTOCOL_VERSION {
        return Ok(());
    }
    let probe =
        UpdateAgentTriggerResponse { extra: Default::default(), trigger: trigger.clone(), webhook_secret: None };
    let value = wire::to_ipld(&seed_agents_protocol::Response::into_response(probe)).map_err(ApiError::internal)?;
    seed_agents_compat::downgrade_response(caller.protocol, value, &seed_agents_compat::Legacy::default())?;
    Ok(())
}

/// The next `updatedAt`: now, or one past the last when the clock has not moved.
fn next_updated_at(previous: i64, now: i64) -> i64 {
    now.max(previous.saturating_add(1))
}

/// `UpdateAgentTrigger {triggerId, patch, expectedUpdatedAt?}` (writer): changes only the patch's
/// fields. Giving a webhook source (again) mints a new secret, answered once in `webhookSecret`;
/// the old one stops working at once.
pub(crate) async fn update_agent_trigger(
    app: &Arc<App>,
    caller: &Caller,
    action: UpdateAgentTrigger,
) -> ApiResult<UpdateAgentTriggerResponse> {
    let patch = &action.patch;
    if patch.name.is_none()
        && patch.enabled.is_none()
        && patch.source.is_none()
        && patch.prompt.is_none()
        && patch.continuation.is_none()
    {
        return Err(ApiError::invalid("Agent trigger patch is empty"));
    }
    let name = patch.name.as_deref().map(validate::name).transpose()?;
    let source = patch.source.clone().map(|source| validate::source(source, &mut new_condition_id)).transpose()?;
    let prompt = match patch.prompt.clone() {
        None => None,
        Some(prompt) => Some(validate::prompt(Some(match prompt {
            AgentTriggerPatchPrompt::Array(blocks) => AgentDefinitionSystemPrompt::Array(blocks),
            AgentTriggerPatchPrompt::String(text) => AgentDefinitionSystemPrompt::String(text),
        }))?),
    };
    let continuation = match patch.continuation.clone() {
        None => None,
        Some(continuation) => Some(validate::continuation(Some(continuation))?),
    };
    let (account, now, enabled) = (caller.account_id.clone(), app.clock.now_ms(), patch.enabled);
    let caller = caller.clone();
    let writer = Arc::clone(app);
    let (response, owner, agent) = app
        .db
        .write(move |conn| {
            let (trigger, access) = store::require(conn, &action.trigger_id, &account, Need::Write)?;
            refuse_for_old_client(&caller, &trigger)?;
            if trigger.merged_into.is_some() {
                return Err(ApiError::invalid(MERGED));
            }
            if action.expected_updated_at.is_some_and(|expected| expected != trigger.updated_at) {
                return Err(ApiError::conflict(STALE));
            }
            let updated_at = next_updated_at(trigger.updated_at, now);
            let id = trigger.id.as_str();
            if let Some(name) = &name {
                store::set_name(conn, id, name)?;
            }
            if let Some(enabled) = enabled {
                store::set_enabled(conn, id, enabled)?;
            }
            if let Some(prompt) = &prompt {
                store::set_prompt(conn, id, prompt)?;
            }
            if let Some(continuation) = &continuation {
                store::set_continuation(conn, id, continuation.as_ref())?;
            }
            let mut secret = None;
            if let Some(source) = &source {
                store::set_source(conn, id, source)?;
                match source {
                    AgentTriggerSource::WebhookSource(_) => {
                        secret = Some(webhook::rotate_secret(&writer, conn, &access.owner_id, id)?);
                    }
                    _ => store::set_webhook_secret(conn, id, None)?,
                }
            }
            store::set_updated_at(conn, id, updated_at)?;
            let trigger = store::load(conn, &trigger.id)?.ok_or_else(|| ApiError::not_found(NOT_FOUND))?;
            let response = UpdateAgentTriggerResponse { extra: Default::default(), trigger, webhook_secret: secret };
            Ok((response, access.owner_id, access.agent_id))
        })
        .await?;
    app.bus.account_change(owner, ChangeReason::TriggerUpdated, Some(&agent), None);
    Ok(response)
}

/// `DeleteAgentTrigger {triggerId}` (writer): deletes the trigger and its firings; sessions and
/// runs they started stay (their attribution goes with the firings).
pub(crate) async fn delete_agent_trigger(
    app: &App,
    caller: &Caller,
    action: DeleteAgentTrigger,
) -> ApiResult<DeleteAgentTriggerResponse> {
    let account = caller.account_id.clone();
    let (owner, agent, trigger_id) = app
        .db
        .write(move |conn| {
            let (trigger, access) = store::require(conn, &action.trigger_id, &account, Need::Write)?;
            store::delete(conn, &trigger.id)?;
            Ok((access.owner_id, access.agent_id, trigger.id))
        })
        .await?;
    app.bus.account_change(owner, ChangeReason::TriggerDeleted, Some(&agent), None);
    Ok(DeleteAgentTriggerResponse { extra: Default::default(), trigger_id })
}

/// `CombineAgentTriggers` (writer, protocol 3): see the schema. The survivor keeps its name and
/// enabled state and gains the other's conditions (one copy of each distinct source; a clashing
/// id is renamed); the other is disabled and marked `mergedInto`.
pub(crate) async fn combine_agent_triggers(
    app: &App,
    caller: &Caller,
    action: CombineAgentTriggers,
) -> ApiResult<UpdateAgentTriggerResponse> {
    if action.trigger_id == action.other_trigger_id {
        return Err(ApiError::invalid("A trigger cannot be combined with itself"));
    }
    let (account, now) = (caller.account_id.clone(), app.clock.now_ms());
    let (response, owner, agent) = app
        .db
        .write(move |conn| {
            let (survivor, access) = store::require(conn, &action.trigger_id, &account, Need::Write)?;
            let (other, _) = store::require(conn, &action.other_trigger_id, &account, Need::Write)?;
            if survivor.agent_id != other.agent_id {
                return Err(ApiError::invalid("Only triggers of the same agent can be combined"));
            }
            if survivor.merged_into.is_some() || other.merged_into.is_some() {
                return Err(ApiError::invalid(MERGED));
            }
            if survivor.updated_at != action.expected_updated_at || other.updated_at != action.other_expected_updated_at
            {
                return Err(ApiError::conflict(STALE));
            }
            let (AgentTriggerSource::ActivitySource(first), AgentTriggerSource::ActivitySource(second)) =
                (&survivor.source, &other.source)
            else {
                return Err(ApiError::invalid("Only activity triggers can be combined"));
            };
            let source = AgentTriggerSource::ActivitySource(union(first, second)?);
            store::set_source(conn, &survivor.id, &source)?;
            if action.use_other_action == Some(true) {
                copy_action(conn, &other, &survivor.id)?;
            }
            store::set_updated_at(conn, &survivor.id, next_updated_at(survivor.updated_at, now))?;
            store::merge_into(conn, &other.id, &survivor.id, next_updated_at(other.updated_at, now))?;
            let trigger = store::load(conn, &survivor.id)?.ok_or_else(|| ApiError::not_found(NOT_FOUND))?;
            let response = UpdateAgentTriggerResponse { extra: Default::default(), trigger, webhook_secret: None };
            Ok((response, access.owner_id, access.agent_id))
        })
        .await?;
    app.bus.account_change(owner, ChangeReason::TriggerUpdated, Some(&agent), None);
    Ok(response)
}

/// The survivor's conditions, then each of the other's whose source is not already there.
fn union(first: &ActivitySource, second: &ActivitySource) -> ApiResult<ActivitySource> {
    let mut conditions = first.conditions.clone();
    for condition in &second.conditions {
        if conditions.iter().any(|kept| kept.source == condition.source) {
            continue;
        }
        let mut condition = condition.clone();
        while conditions.iter().any(|kept| kept.id == condition.id) {
            condition.id = new_condition_id();
        }
        conditions.push(condition);
    }
    if conditions.len() > validate::MAX_CONDITIONS {
        return Err(ApiError::invalid(format!("A trigger can have at most {} conditions", validate::MAX_CONDITIONS)));
    }
    Ok(ActivitySource { extra: Default::default(), conditions })
}

fn copy_action(conn: &Connection, from: &AgentTriggerInfo, to: &str) -> ApiResult<()> {
    let (markdown, blocks) = match &from.prompt {
        AgentTriggerInfoPrompt::String(text) => (text.clone(), None),
        AgentTriggerInfoPrompt::Array(blocks) => (crate::agents::prompt::blocks_to_markdown(blocks), Some(blocks)),
    };
    store::set_action(conn, to, &markdown, blocks, from.continuation.as_ref())
}

/// Replaces every field of trigger `trigger_id` (not a webhook source: its secret is minted
/// only by the signed actions) with `trigger`; `updatedAt` moves past `previous_updated_at`.
pub(crate) fn replace(
    conn: &Connection,
    trigger_id: &str,
    trigger: &Normalized,
    previous_updated_at: i64,
    now: i64,
) -> ApiResult<()> {
    store::replace(conn, trigger_id, trigger, next_updated_at(previous_updated_at, now))
}
