//! The `agent_collaborators` rows of an agent and the public flags of its row.
//!
//! What the SQL relies on: `INSERT … ON CONFLICT (…) DO UPDATE … RETURNING` (spelled the same by
//! both databases), a bound boolean compared as `?2 <> 0`, and 0/1 integer flags.

use crate::db::{Connection, OptionalExtension, Row, params};
use seed_agents_protocol::generated::{AgentCollaboratorInfo, AgentCollaboratorRole, AgentDefinition, AgentInviteInfo};

use crate::db::{Cbor, Text};
use crate::error::{ApiError, ApiResult};

/// An agent's public access flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PublicFlags {
    pub(super) read: bool,
    pub(super) chat: bool,
}

/// What the collaborator list needs of the agent row.
#[derive(Debug)]
pub(super) struct AgentSummary {
    pub(super) created_at: i64,
    pub(super) updated_at: i64,
    pub(super) flags: PublicFlags,
}

/// The agent row's timestamps and flags; 404 `Agent not found` when it is missing.
pub(super) fn agent_summary(conn: &Connection, agent_id: &str) -> ApiResult<AgentSummary> {
    conn.prepare_cached("SELECT created_at, updated_at, public_read, public_chat FROM agents WHERE id = ?1")?
        .query_row(params![agent_id], |row| {
            Ok(AgentSummary {
                created_at: row.get(0)?,
                updated_at: row.get(1)?,
                flags: PublicFlags { read: row.get(2)?, chat: row.get(3)? },
            })
        })
        .optional()?
        .ok_or_else(|| ApiError::not_found("Agent not found"))
}

/// The columns [`collaborator_from_row`] reads, in order.
const COLLABORATOR_COLUMNS: &str = "account_id, role, status, created_at, updated_at";

fn collaborator_from_row(row: &Row<'_>) -> crate::db::Result<AgentCollaboratorInfo> {
    Ok(AgentCollaboratorInfo {
        extra: Default::default(),
        account_id: row.get::<_, String>(0)?.into(),
        role: super::access_role(row.get::<_, Text<_>>(1)?.0),
        status: row.get::<_, Text<_>>(2)?.0,
        created_at: row.get(3)?,
        updated_at: row.get(4)?,
    })
}

/// The agent's accepted collaborators: `(account, role)`, the role as stored.
pub(crate) fn accepted(conn: &Connection, agent_id: &str) -> ApiResult<Vec<(String, String)>> {
    let mut statement = conn.prepare_cached(
        "SELECT account_id, role FROM agent_collaborators WHERE agent_id = ?1 AND status = 'accepted'",
    )?;
    let rows = statement.query_map(params![agent_id], |row| Ok((row.get(0)?, row.get(1)?)))?;
    Ok(rows.collect::<crate::db::Result<_>>()?)
}

/// The agent's accepted collaborators by when they joined: `(account, role)`, the role as stored.
pub(crate) fn accepted_by_joining(conn: &Connection, agent_id: &str) -> ApiResult<Vec<(String, String)>> {
    let mut statement = conn.prepare_cached(
        "SELECT account_id, role FROM agent_collaborators WHERE agent_id = ?1 AND status = 'accepted'
         ORDER BY created_at, account_id",
    )?;
    let rows = statement.query_map(params![agent_id], |row| Ok((row.get(0)?, row.get(1)?)))?;
    Ok(rows.collect::<crate::db::Result<_>>()?)
}

/// The agent's members, accepted first then newest update first; pending ones only when asked.
pub(super) fn members(conn: &Connection, agent_id: &str, with_pending: bool) -> ApiResult<Vec<AgentCollaboratorInfo>> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {COLLABORATOR_COLUMNS} FROM agent_collaborators
         WHERE agent_id = ?1 AND (?2 <> 0 OR status = 'accepted')
         ORDER BY status, updated_at DESC, account_id"
    ))?;
    let rows = statement.query_map(params![agent_id, with_pending], collaborator_from_row)?;
    Ok(rows.collect::<crate::db::Result<Vec<_>>>()?)
}

/// The pending invitations of `account_id`, newest update first.
pub(super) fn pending_invites(conn: &Connection, account_id: &str) -> ApiResult<Vec<AgentInviteInfo>> {
    let mut statement = conn.prepare_cached(
        "SELECT c.agent_id, a.account_id, a.definition_cbor, c.role, c.created_at, c.updated_at
         FROM agent_collaborators c JOIN agents a ON a.id = c.agent_id
         WHERE c.account_id = ?1 AND c.status = 'pending'
         ORDER BY c.updated_at DESC, c.agent_id",
    )?;
    let rows = statement.query_map(params![account_id], |row| {
        Ok(AgentInviteInfo {
            extra: Default::default(),
            agent_id: row.get::<_, String>(0)?.into(),
            owner_account_id: row.get::<_, String>(1)?.into(),
            agent_name: row.get::<_, Cbor<AgentDefinition>>(2)?.0.name,
            role: row.get::<_, Text<_>>(3)?.0,
            created_at: row.get(4)?,
            updated_at: row.get(5)?,
        })
    })?;
    Ok(rows.collect::<crate::db::Result<Vec<_>>>()?)
}

/// Creates a pending invitation, or updates the role of an existing row; returns the row.
pub(super) fn upsert_invite(
    conn: &Connection,
    agent_id: &str,
    account_id: &str,
    role: AgentCollaboratorRole,
    now: i64,
) -> ApiResult<AgentCollaboratorInfo> {
    crate::db::ensure_account(conn, account_id, now)?;
    // The status expression keeps an accepted member accepted; anything else is pending.
    Ok(conn
        .prepare_cached(&format!(
            "INSERT INTO agent_collaborators (agent_id, account_id, role, status, created_at, updated_at)
             VALUES (?1, ?2, ?3, 'pending', ?4, ?4)
             ON CONFLICT (agent_id, account_id) DO UPDATE SET
               role = excluded.role,
               status = CASE WHEN agent_collaborators.status = 'accepted' THEN 'accepted' ELSE 'pending' END,
               updated_at = excluded.updated_at
             RETURNING {COLLABORATOR_COLUMNS}"
        ))?
        .query_row(params![agent_id, account_id, role.to_string(), now], collaborator_from_row)?)
}

/// Removes `account_id`'s membership or pending invitation of `agent_id`; whether there was one.
pub(super) fn remove(conn: &Connection, agent_id: &str, account_id: &str) -> ApiResult<bool> {
    let removed = conn
        .prepare_cached("DELETE FROM agent_collaborators WHERE agent_id = ?1 AND account_id = ?2")?
        .execute(params![agent_id, account_id])?;
    Ok(removed > 0)
}

/// The owner of the agent on which `account_id` has a pending invitation; 404
/// `Agent invitation not found` otherwise.
pub(super) fn pending_invite_owner(conn: &Connection, agent_id: &str, account_id: &str) -> ApiResult<String> {
    conn.prepare_cached(
        "SELECT a.account_id FROM agent_collaborators c JOIN agents a ON a.id = c.agent_id
         WHERE c.agent_id = ?1 AND c.account_id = ?2 AND c.status = 'pending'",
    )?
    .query_row(params![agent_id, account_id], |row| row.get(0))
    .optional()?
    .ok_or_else(|| ApiError::not_found("Agent invitation not found"))
}

/// Accepts `account_id`'s pending invitation of `agent_id`.
pub(super) fn accept(conn: &Connection, agent_id: &str, account_id: &str, now: i64) -> ApiResult<()> {
    conn.prepare_cached(
        "UPDATE agent_collaborators SET status = 'accepted', accepted_at = ?3, updated_at = ?3
         WHERE agent_id = ?1 AND account_id = ?2 AND status = 'pending'",
    )?
    .execute(params![agent_id, account_id, now])?;
    Ok(())
}

/// Deletes `account_id`'s pending invitation of `agent_id`.
pub(super) fn decline(conn: &Connection, agent_id: &str, account_id: &str) -> ApiResult<()> {
    conn.prepare_cached(
        "DELETE FROM agent_collaborators WHERE agent_id = ?1 AND account_id = ?2 AND status = 'pending'",
    )?
    .execute(params![agent_id, account_id])?;
    Ok(())
}

/// Sets an agent's public flags.
pub(super) fn set_public_flags(conn: &Connection, agent_id: &str, flags: PublicFlags, now: i64) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agents SET public_read = ?2, public_chat = ?3, updated_at = ?4 WHERE id = ?1")?
        .execute(params![agent_id, flags.read, flags.chat, now])?;
    Ok(())
}
