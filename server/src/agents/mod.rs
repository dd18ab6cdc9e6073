//! Agents: create, list, read, update and delete, with their SQL.
//!
//! Agent rows live under the owner's account; collaborators act on them through [`access`].
//! The definition is stored normalised ([`definition`]): the system prompt as Seed blocks.

pub(crate) mod default_trigger;
pub(crate) mod definition;
pub(crate) mod prompt;
pub(crate) mod store;

use std::path::PathBuf;

use crate::db::Connection;
use seed_agents_protocol::generated::{
    AgentDefinition, CreateAgent, CreateAgentResponse, DeleteAgent, DeleteAgentResponse, GetAgent, GetAgentResponse,
    ListAgents, ListAgentsResponse, UpdateAgent,
};
use serde::Serialize;

use crate::access::{self, Need, Role};
use crate::app::App;
use crate::bus::{ChangeReason, Event};
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};
use crate::idempotency::{self, Key};
use definition::DefinitionContext;

/// `ListAgents {}`.
pub(crate) async fn list_agents(app: &App, caller: &Caller, _action: ListAgents) -> ApiResult<ListAgentsResponse> {
    let account = caller.account_id.clone();
    let agents = app.db.read(move |conn| store::visible_agents(conn, &account)).await?;
    Ok(ListAgentsResponse { extra: Default::default(), agents })
}

/// `GetAgent {agentId}` (reader): the agent and how many sessions it has.
pub(crate) async fn get_agent(app: &App, caller: &Caller, action: GetAgent) -> ApiResult<GetAgentResponse> {
    access::read(app, caller, action.agent_id, Need::Read, |conn, access| {
        agent_response(conn, &access.agent_id, access.role)
    })
    .await
}

fn agent_response(conn: &Connection, agent_id: &str, role: Role) -> ApiResult<GetAgentResponse> {
    let agent = store::load_info(conn, agent_id, role)?;
    let session_count = store::session_count(conn, agent_id)?;
    Ok(GetAgentResponse { extra: Default::default(), agent, session_count })
}

/// Looks up providers and signing keys in one account, for [`definition::normalize_definition`].
struct AccountLookups<'c> {
    conn: &'c Connection,
    account_id: &'c str,
}

impl DefinitionContext for AccountLookups<'_> {
    fn provider_type(&self, name: &str) -> ApiResult<Option<String>> {
        crate::providers::store::provider_type(self.conn, self.account_id, name)
    }

    fn is_signing_key(&self, secret_name: &str) -> ApiResult<bool> {
        let metadata = crate::secrets::store::load_metadata(self.conn, self.account_id, secret_name)?;
        Ok(metadata.flatten().is_some_and(|bytes| crate::secrets::is_signing_key_metadata(&bytes)))
    }
}

#[derive(Serialize)]
struct CreateAgentRequest<'a> {
    definition: &'a AgentDefinition,
}

/// `CreateAgent {definition, clientRequestId?}`: the caller becomes the owner.
pub(crate) async fn create_agent(app: &App, caller: &Caller, action: CreateAgent) -> ApiResult<CreateAgentResponse> {
    let key = Key::request(
        &caller.account_id,
        "CreateAgent",
        action.client_request_id.as_deref(),
        &CreateAgentRequest { definition: &action.definition },
    )?;
    let account = caller.account_id.clone();
    let agents_dir = app.config.agents_dir();
    let now = app.clock.now_ms();
    let (response, replayed) = app
        .db
        .write(move |conn| {
            idempotency::once(conn, key.as_ref(), now, || {
                let lookups = AccountLookups { conn, account_id: &account };
                let definition = definition::normalize_definition(&action.definition, &lookups)?;
                // A time-ordered UUID (v7): inserts append to the primary key's index instead of
                // touching a random page each.
                let id = uuid::Uuid::now_v7().to_string();
                // Built before any write; never fails the create (best effort).
                let trigger = default_trigger::build_or_skip(conn, &account, &id, &definition);
                let state_dir = agents_dir.join(&id);
                std::fs::create_dir_all(&state_dir).map_err(ApiError::internal)?;
                store::insert(conn, &id, &account, &definition, &state_dir, now)?;
                crate::mcp::project::sync_agent(conn, &account, &id, &definition, now)?;
                if let Some(trigger) = &trigger {
                    default_trigger::insert_or_skip(conn, &account, &id, trigger, now);
                }
                Ok(CreateAgentResponse { extra: Default::default(), agent_id: id.into() })
            })
        })
        .await?;
    if !replayed {
        app.bus.publish(Event::AgentChanged { agent_id: response.agent_id.to_string() });
        app.bus.account_change(&caller.account_id, ChangeReason::AgentCreated, Some(&response.agent_id), None);
    }
    Ok(response)
}

/// `UpdateAgent {agentId, definition}` (writer): replaces the definition, validated against the
/// owner's providers and keys; only the owner may change the signing-key grant set.
pub(crate) async fn update_agent(app: &App, caller: &Caller, action: UpdateAgent) -> ApiResult<GetAgentResponse> {
    let now = app.clock.now_ms();
    let agent_id = action.agent_id.to_string();
    let (response, owner, tools_changed) = access::write(app, caller, agent_id, Need::Write, move |conn, access| {
        let lookups = AccountLookups { conn, account_id: &access.owner_id };
        let definition = definition::normalize_definition(&action.definition, &lookups)?;
        if access.role != Role::Owner {
            let current = store::load_info(conn, &access.agent_id, access.role)?.definition;
            if definition::signing_key_set(&current) != definition::signing_key_set(&definition) {
                return Err(ApiError::forbidden("Only the agent owner can change signing accounts"));
            }
        }
        store::set_definition(conn, &access.agent_id, &definition, now)?;
        let tools_changed =
            crate::mcp::project::sync_agent(conn, &access.owner_id, &access.agent_id, &definition, now)?;
        Ok((agent_response(conn, &access.agent_id, access.role)?, access.owner_id, tools_changed))
    })
    .await?;
    app.bus.publish(Event::AgentChanged { agent_id: response.agent.id.to_string() });
    app.bus.account_change(&owner, ChangeReason::AgentUpdated, Some(&response.agent.id), None);
    if tools_changed {
        crate::tools::changed(app, &owner, &response.agent.id);
    }
    Ok(response)
}

/// `DeleteAgent {agentId}` (owner): cancels the agent's live runs with their descendants (an
/// executing one is asked to stop), then deletes the agent, its sessions, events, collaborators
/// and state directory; sub-sessions of other agents under its sessions become top-level, and its
/// runs stay, detached.
pub(crate) async fn delete_agent(app: &App, caller: &Caller, action: DeleteAgent) -> ApiResult<DeleteAgentResponse> {
    let (now, ending) = (app.clock.now_ms(), app.runs.ending());
    let deleted = access::write(app, caller, action.agent_id, Need::Own, move |conn, access| {
        // Live runs end first (executing ones are asked to stop after the commit).
        let mut changes = crate::runs::Changes::default();
        let canceled = crate::runs::cancel::cancel_agent(conn, &access.agent_id, now, &ending, &mut changes)?;
        let deleted = store::delete(conn, &access.agent_id)?;
        Ok((access.agent_id, deleted, (canceled, changes)))
    });
    let (agent_id, store::Deleted { state_dir, members, sessions }, canceled) = deleted.await?;
    let (canceled, changes) = canceled;
    app.runs.after_cancel(canceled, changes, None);
    remove_state_dir(PathBuf::from(state_dir)).await;
    crate::attachments::remove_for_sessions(app, sessions).await;
    app.bus.publish(Event::AgentChanged { agent_id: agent_id.clone() });
    app.bus.account_change(&caller.account_id, ChangeReason::AgentDeleted, Some(&agent_id), None);
    for member in members {
        app.bus.account_change(member, ChangeReason::AgentDeleted, Some(&agent_id), None);
    }
    Ok(DeleteAgentResponse { extra: Default::default(), agent_id: agent_id.into() })
}

async fn remove_state_dir(dir: PathBuf) {
    match tokio::fs::remove_dir_all(&dir).await {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            tracing::warn!(%error, dir = %dir.display(), "could not remove a deleted agent's state directory")
        }
    }
}
