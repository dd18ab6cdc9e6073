//! Agents: create, list, read, update and delete, with their SQL.
//!
//! Agent rows live under the owner's account; collaborators act on them through [`access`].
//! The definition is stored normalised ([`definition`]): the system prompt as Seed blocks.

pub(crate) mod default_trigger;
pub(crate) mod definition;
pub(crate) mod prompt;

use std::path::PathBuf;

use rusqlite::{Connection, OptionalExtension, Row, params};
use seed_agents_protocol::generated::{
    AgentDefinition, AgentInfo, AgentInfoStatus, CreateAgent, CreateAgentResponse, DeleteAgent, DeleteAgentResponse,
    GetAgent, GetAgentResponse, ListAgents, ListAgentsResponse, UpdateAgent,
};
use seed_agents_protocol::wire;
use serde::Serialize;

use crate::access::{self, Need, Role};
use crate::app::App;
use crate::bus::{ChangeReason, Event};
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};
use crate::idempotency::{self, Key};
use definition::DefinitionContext;

/// The columns [`info_from_row`] reads, in order.
pub(crate) const AGENT_COLUMNS: &str = "a.id, a.account_id, a.definition_cbor, a.state_dir, a.status, a.public_read, a.public_chat, a.created_at, a.updated_at";

/// An agent row as the protocol shows it, with the viewer's role.
pub(crate) fn info_from_row(row: &Row<'_>, role: Role) -> rusqlite::Result<AgentInfo> {
    let definition: Vec<u8> = row.get(2)?;
    let definition: AgentDefinition = wire::from_slice(&definition)
        .map_err(|error| rusqlite::Error::FromSqlConversionFailure(2, rusqlite::types::Type::Blob, Box::new(error)))?;
    let status: String = row.get(4)?;
    Ok(AgentInfo {
        extra: Default::default(),
        access_role: Some(role.wire()),
        account: row.get(1)?,
        activity: None,
        created_at: row.get(7)?,
        definition,
        id: row.get::<_, String>(0)?.into(),
        public_chat: Some(row.get(6)?),
        public_read: Some(row.get(5)?),
        state_dir: row.get(3)?,
        status: match status.as_str() {
            "running" => AgentInfoStatus::Running,
            "stopped" => AgentInfoStatus::Stopped,
            "error" => AgentInfoStatus::Error,
            _ => AgentInfoStatus::Idle,
        },
        updated_at: row.get(8)?,
    })
}

/// One agent as `role` sees it; 404 `Agent not found` when missing.
pub(crate) fn load_info(conn: &Connection, agent_id: &str, role: Role) -> ApiResult<AgentInfo> {
    conn.prepare_cached(&format!("SELECT {AGENT_COLUMNS} FROM agents a WHERE a.id = ?1"))?
        .query_row(params![agent_id], |row| info_from_row(row, role))
        .optional()?
        .ok_or_else(|| ApiError::not_found("Agent not found"))
}

/// The agents `account_id` owns or has accepted, newest update first, with its role on each.
pub(crate) fn visible_agents(conn: &Connection, account_id: &str) -> ApiResult<Vec<AgentInfo>> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {AGENT_COLUMNS}, 'owner' FROM agents a WHERE a.account_id = ?1
         UNION ALL
         SELECT {AGENT_COLUMNS}, c.role FROM agent_collaborators c JOIN agents a ON a.id = c.agent_id
         WHERE c.account_id = ?1 AND c.status = 'accepted' AND a.account_id <> ?1
         ORDER BY 9 DESC, 1 DESC"
    ))?;
    let rows = statement.query_map(params![account_id], |row| {
        let member: String = row.get(9)?;
        let (public_read, public_chat): (bool, bool) = (row.get(5)?, row.get(6)?);
        info_from_row(row, member_role(&member, public_read, public_chat))
    })?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// The effective role of a member (`owner`, `writer`, `reader`), lifted by public chat.
pub(crate) fn member_role(member: &str, public_read: bool, public_chat: bool) -> Role {
    let role = match member {
        "owner" => Role::Owner,
        "writer" => Role::Writer,
        _ => Role::Reader,
    };
    if public_read && public_chat { role.max(Role::Chatter) } else { role }
}

/// `ListAgents {}`.
pub(crate) async fn list_agents(app: &App, caller: &Caller, _action: ListAgents) -> ApiResult<ListAgentsResponse> {
    let account = caller.account_id.clone();
    let agents = app.db.read(move |conn| visible_agents(conn, &account)).await?;
    Ok(ListAgentsResponse { extra: Default::default(), agents })
}

/// `GetAgent {agentId}` (reader): the agent and how many sessions it has.
pub(crate) async fn get_agent(app: &App, caller: &Caller, action: GetAgent) -> ApiResult<GetAgentResponse> {
    let account = caller.account_id.clone();
    app.db
        .read(move |conn| {
            let access = access::require(conn, &action.agent_id, &account, Need::Read)?;
            agent_response(conn, &access.agent_id, access.role)
        })
        .await
}

fn agent_response(conn: &Connection, agent_id: &str, role: Role) -> ApiResult<GetAgentResponse> {
    let agent = load_info(conn, agent_id, role)?;
    let session_count = session_count(conn, agent_id)?;
    Ok(GetAgentResponse { extra: Default::default(), agent, session_count })
}

/// How many sessions an agent has (children included).
pub(crate) fn session_count(conn: &Connection, agent_id: &str) -> ApiResult<i64> {
    Ok(conn
        .prepare_cached("SELECT COUNT(*) FROM sessions WHERE agent_id = ?1")?
        .query_row(params![agent_id], |row| row.get(0))?)
}

/// Looks up providers and signing keys in one account, for [`definition::normalize_definition`].
struct AccountLookups<'c> {
    conn: &'c Connection,
    account_id: &'c str,
}

impl DefinitionContext for AccountLookups<'_> {
    fn provider_type(&self, name: &str) -> ApiResult<Option<String>> {
        Ok(self
            .conn
            .prepare_cached("SELECT type FROM model_providers WHERE account_id = ?1 AND name = ?2")?
            .query_row(params![self.account_id, name], |row| row.get(0))
            .optional()?)
    }

    fn is_signing_key(&self, secret_name: &str) -> ApiResult<bool> {
        let metadata: Option<Option<Vec<u8>>> = self
            .conn
            .prepare_cached("SELECT metadata_cbor FROM secrets WHERE account_id = ?1 AND name = ?2")?
            .query_row(params![self.account_id, secret_name], |row| row.get(0))
            .optional()?;
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
                insert_agent(conn, &id, &account, &definition, &state_dir, now)?;
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

fn insert_agent(
    conn: &Connection,
    id: &str,
    account: &str,
    definition: &AgentDefinition,
    state_dir: &std::path::Path,
    now: i64,
) -> ApiResult<()> {
    let definition = wire::to_vec(definition).map_err(ApiError::internal)?;
    crate::db::ensure_account(conn, account, now)?;
    conn.prepare_cached(
        "INSERT INTO agents (id, account_id, definition_cbor, state_dir, status, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, 'idle', ?5, ?5)",
    )?
    .execute(params![id, account, definition, state_dir.to_string_lossy(), now])?;
    Ok(())
}

/// `UpdateAgent {agentId, definition}` (writer): replaces the definition, validated against the
/// owner's providers and keys; only the owner may change the signing-key grant set.
pub(crate) async fn update_agent(app: &App, caller: &Caller, action: UpdateAgent) -> ApiResult<GetAgentResponse> {
    let account = caller.account_id.clone();
    let now = app.clock.now_ms();
    let (response, owner) = app
        .db
        .write(move |conn| {
            let access = access::require(conn, &action.agent_id, &account, Need::Write)?;
            let lookups = AccountLookups { conn, account_id: &access.owner_id };
            let definition = definition::normalize_definition(&action.definition, &lookups)?;
            if access.role != Role::Owner {
                let current = load_info(conn, &access.agent_id, access.role)?.definition;
                if definition::signing_key_set(&current) != definition::signing_key_set(&definition) {
                    return Err(ApiError::forbidden("Only the agent owner can change signing accounts"));
                }
            }
            let bytes = wire::to_vec(&definition).map_err(ApiError::internal)?;
            conn.prepare_cached("UPDATE agents SET definition_cbor = ?2, updated_at = ?3 WHERE id = ?1")?
                .execute(params![access.agent_id, bytes, now])?;
            Ok((agent_response(conn, &access.agent_id, access.role)?, access.owner_id))
        })
        .await?;
    app.bus.publish(Event::AgentChanged { agent_id: response.agent.id.to_string() });
    app.bus.account_change(owner, ChangeReason::AgentUpdated, Some(&response.agent.id), None);
    Ok(response)
}

/// `DeleteAgent {agentId}` (owner): cancels the agent's live runs with their descendants (an
/// executing one is asked to stop), then deletes the agent, its sessions, events, collaborators
/// and state directory; sub-sessions of other agents under its sessions become top-level, and its
/// runs stay, detached.
pub(crate) async fn delete_agent(app: &App, caller: &Caller, action: DeleteAgent) -> ApiResult<DeleteAgentResponse> {
    let (account, now, ending) = (caller.account_id.clone(), app.clock.now_ms(), app.runs.ending());
    let (agent_id, state_dir, members, sessions, canceled) = app
        .db
        .write(move |conn| {
            let access = access::require(conn, &action.agent_id, &account, Need::Own)?;
            // Live runs end first (executing ones are asked to stop after the commit).
            let mut changes = crate::runs::Changes::default();
            let canceled = crate::runs::cancel::cancel_agent(conn, &access.agent_id, now, &ending, &mut changes)?;
            let sessions = conn
                .prepare_cached("SELECT id FROM sessions WHERE agent_id = ?1")?
                .query_map(params![access.agent_id], |row| row.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let state_dir: String = conn
                .prepare_cached("SELECT state_dir FROM agents WHERE id = ?1")?
                .query_row(params![access.agent_id], |row| row.get(0))?;
            let members = conn
                .prepare_cached("SELECT account_id FROM agent_collaborators WHERE agent_id = ?1")?
                .query_map(params![access.agent_id], |row| row.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            // Sessions, their events and collaborator rows go by foreign-key cascade; children of
            // the agent's sessions that belong to other agents are promoted by ON DELETE SET NULL.
            conn.prepare_cached("DELETE FROM agents WHERE id = ?1")?.execute(params![access.agent_id])?;
            Ok((access.agent_id, PathBuf::from(state_dir), members, sessions, (canceled, changes)))
        })
        .await?;
    let (canceled, changes) = canceled;
    app.runs.after_cancel(canceled, changes, None);
    remove_state_dir(state_dir).await;
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
