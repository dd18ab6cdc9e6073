//! The `agents` table: agent rows as the protocol shows them, and their inserts, updates and
//! deletes.
//!
//! What the SQL relies on: `public_read`/`public_chat` are 0/1 integers read as booleans; the
//! rest is plain SQL both databases take.

use std::path::Path;

use crate::db::{Connection, OptionalExtension, Row, params};
use seed_agents_protocol::generated::{AgentDefinition, AgentInfo, AgentInfoStatus};

use crate::access::Role;
use crate::db::Cbor;
use crate::error::{ApiError, ApiResult};

/// The columns [`info_from_row`] reads, in order.
pub(crate) const AGENT_COLUMNS: &str = "a.id, a.account_id, a.definition_cbor, a.state_dir, a.status, a.public_read, a.public_chat, a.created_at, a.updated_at";

/// An agent row as the protocol shows it, with the viewer's role.
pub(crate) fn info_from_row(row: &Row<'_>, role: Role) -> crate::db::Result<AgentInfo> {
    let Cbor(definition) = row.get::<_, Cbor<AgentDefinition>>(2)?;
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
    Ok(rows.collect::<crate::db::Result<Vec<_>>>()?)
}

/// The id and definition of every agent `account_id` owns, by id.
pub(crate) fn owned_definitions(conn: &Connection, account_id: &str) -> ApiResult<Vec<(String, AgentDefinition)>> {
    let mut statement =
        conn.prepare_cached("SELECT id, definition_cbor FROM agents WHERE account_id = ?1 ORDER BY id")?;
    let rows =
        statement.query_map(params![account_id], |row| Ok((row.get(0)?, row.get::<_, Cbor<AgentDefinition>>(1)?.0)))?;
    Ok(rows.collect::<crate::db::Result<Vec<_>>>()?)
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

/// What a run needs of its agent.
#[derive(Debug)]
pub(crate) struct Runnable {
    /// The agent's owner (where its rows are stored).
    pub(crate) owner_id: String,
    /// Its definition.
    pub(crate) definition: AgentDefinition,
    /// Its state directory.
    pub(crate) state_dir: String,
}

/// Agent `agent_id` as a run needs it, when it exists.
pub(crate) fn runnable(conn: &Connection, agent_id: &str) -> ApiResult<Option<Runnable>> {
    Ok(conn
        .prepare_cached("SELECT account_id, definition_cbor, state_dir FROM agents WHERE id = ?1")?
        .query_row(params![agent_id], |row| {
            Ok(Runnable {
                owner_id: row.get(0)?,
                definition: row.get::<_, Cbor<AgentDefinition>>(1)?.0,
                state_dir: row.get(2)?,
            })
        })
        .optional()?)
}

/// The id of every agent.
pub(crate) fn all_ids(conn: &Connection) -> ApiResult<std::collections::HashSet<String>> {
    let mut statement = conn.prepare_cached("SELECT id FROM agents")?;
    let rows = statement.query_map([], |row| row.get::<_, String>(0))?;
    Ok(rows.collect::<crate::db::Result<_>>()?)
}

/// Points every agent's state directory at `<agents_dir>/<id>` (a restore into another data
/// directory: the rows name the directory they were created in); how many rows changed.
pub(crate) fn relocate_state_dirs(conn: &Connection, agents_dir: &Path) -> ApiResult<usize> {
    let mut moved = 0;
    for id in all_ids(conn)? {
        let state_dir = agents_dir.join(&id);
        moved += conn
            .prepare_cached("UPDATE agents SET state_dir = ?2 WHERE id = ?1 AND state_dir IS DISTINCT FROM ?2")?
            .execute(params![id, state_dir.to_string_lossy()])?;
    }
    Ok(moved)
}

/// Agent `agent_id`'s state directory (an error when the agent does not exist).
pub(crate) fn state_dir(conn: &Connection, agent_id: &str) -> ApiResult<String> {
    Ok(conn
        .prepare_cached("SELECT state_dir FROM agents WHERE id = ?1")?
        .query_row(params![agent_id], |row| row.get(0))?)
}

/// The state directories of every agent `owner` owns (the storage quota walks their memory).
pub(crate) fn owned_state_dirs(conn: &Connection, owner: &str) -> ApiResult<Vec<String>> {
    let mut statement = conn.prepare_cached("SELECT state_dir FROM agents WHERE account_id = ?1")?;
    let dirs = statement.query_map(params![owner], |row| row.get(0))?.collect::<crate::db::Result<Vec<String>>>()?;
    Ok(dirs)
}

/// The owner of agent `agent_id` and its public read and chat flags, when it exists.
pub(crate) fn owner_and_flags(conn: &Connection, agent_id: &str) -> ApiResult<Option<(String, bool, bool)>> {
    Ok(conn
        .prepare_cached("SELECT account_id, public_read, public_chat FROM agents WHERE id = ?1")?
        .query_row(params![agent_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?)
}

/// Whether agent `agent_id` exists and belongs to `account_id`.
pub(crate) fn belongs_to(conn: &Connection, agent_id: &str, account_id: &str) -> ApiResult<bool> {
    Ok(conn
        .prepare_cached("SELECT id FROM agents WHERE id = ?1 AND account_id = ?2")?
        .query_row(params![agent_id, account_id], |_| Ok(()))
        .optional()?
        .is_some())
}

/// How many sessions an agent has (children included).
pub(crate) fn session_count(conn: &Connection, agent_id: &str) -> ApiResult<i64> {
    Ok(conn
        .prepare_cached("SELECT COUNT(*) FROM sessions WHERE agent_id = ?1")?
        .query_row(params![agent_id], |row| row.get(0))?)
}

/// Inserts agent `id` of `account` (creating the account row if needed), `idle`.
pub(crate) fn insert(
    conn: &Connection,
    id: &str,
    account: &str,
    definition: &AgentDefinition,
    state_dir: &Path,
    now: i64,
) -> ApiResult<()> {
    crate::db::ensure_account(conn, account, now)?;
    conn.prepare_cached(
        "INSERT INTO agents (id, account_id, definition_cbor, state_dir, status, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, 'idle', ?5, ?5)",
    )?
    .execute(params![id, account, Cbor(definition), state_dir.to_string_lossy(), now])?;
    Ok(())
}

/// Replaces agent `agent_id`'s definition.
pub(crate) fn set_definition(
    conn: &Connection,
    agent_id: &str,
    definition: &AgentDefinition,
    now: i64,
) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agents SET definition_cbor = ?2, updated_at = ?3 WHERE id = ?1")?.execute(params![
        agent_id,
        Cbor(definition),
        now
    ])?;
    Ok(())
}

/// What deleting an agent leaves for after the commit.
#[derive(Debug)]
pub(crate) struct Deleted {
    /// Its state directory.
    pub(crate) state_dir: String,
    /// Its collaborators' accounts.
    pub(crate) members: Vec<String>,
    /// Its sessions (their attachments' files go too).
    pub(crate) sessions: Vec<String>,
}

/// Deletes agent `agent_id`. Sessions, their events and collaborator rows go by foreign-key
/// cascade; children of the agent's sessions that belong to other agents are promoted by ON DELETE
/// SET NULL.
pub(crate) fn delete(conn: &Connection, agent_id: &str) -> ApiResult<Deleted> {
    let sessions = conn
        .prepare_cached("SELECT id FROM sessions WHERE agent_id = ?1")?
        .query_map(params![agent_id], |row| row.get::<_, String>(0))?
        .collect::<crate::db::Result<Vec<_>>>()?;
    let state_dir: String = conn
        .prepare_cached("SELECT state_dir FROM agents WHERE id = ?1")?
        .query_row(params![agent_id], |row| row.get(0))?;
    let members = conn
        .prepare_cached("SELECT account_id FROM agent_collaborators WHERE agent_id = ?1")?
        .query_map(params![agent_id], |row| row.get::<_, String>(0))?
        .collect::<crate::db::Result<Vec<_>>>()?;
    conn.prepare_cached("DELETE FROM agents WHERE id = ?1")?.execute(params![agent_id])?;
    Ok(Deleted { state_dir, members, sessions })
}
