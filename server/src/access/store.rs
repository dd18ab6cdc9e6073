//! What deciding a role reads: an agent's owner and public flags with the caller's accepted
//! membership, and the agent a session or a run belongs to.
//!
//! These statements read other features' tables (`agents`, `agent_collaborators`, `sessions`,
//! `runs`) because access sits below every feature (ARCHITECTURE.md rule 9: decided in one
//! place) and may not call their stores. All portable SQL.

use crate::db::{Connection, OptionalExtension, params};

use crate::error::ApiResult;

/// What a caller's role on an agent is decided from.
#[derive(Debug)]
pub(super) struct Standing {
    /// The agent's owner.
    pub(super) owner_id: String,
    /// Whether every signed account may read it.
    pub(super) public_read: bool,
    /// Whether public readers may chat too.
    pub(super) public_chat: bool,
    /// The caller's accepted membership role (`writer`, `reader`), as stored.
    pub(super) member_role: Option<String>,
}

/// The standing of `account_id` on agent `agent_id`, when the agent exists.
pub(super) fn standing(conn: &Connection, agent_id: &str, account_id: &str) -> ApiResult<Option<Standing>> {
    Ok(conn
        .prepare_cached(
            "SELECT a.account_id, a.public_read, a.public_chat, c.role
             FROM agents a
             LEFT JOIN agent_collaborators c
               ON c.agent_id = a.id AND c.account_id = ?2 AND c.status = 'accepted'
             WHERE a.id = ?1",
        )?
        .query_row(params![agent_id, account_id], |row| {
            Ok(Standing {
                owner_id: row.get(0)?,
                public_read: row.get(1)?,
                public_chat: row.get(2)?,
                member_role: row.get(3)?,
            })
        })
        .optional()?)
}

/// The agent of session `session_id` and the standing of `account_id` on it, when the session
/// and its agent exist (what [`standing`] reads, with the session's agent, in one statement).
pub(super) fn session_standing(
    conn: &Connection,
    session_id: &str,
    account_id: &str,
) -> ApiResult<Option<(String, Standing)>> {
    Ok(conn
        .prepare_cached(
            "SELECT s.agent_id, a.account_id, a.public_read, a.public_chat, c.role
             FROM sessions s
             JOIN agents a ON a.id = s.agent_id
             LEFT JOIN agent_collaborators c
               ON c.agent_id = a.id AND c.account_id = ?2 AND c.status = 'accepted'
             WHERE s.id = ?1",
        )?
        .query_row(params![session_id, account_id], |row| {
            let standing = Standing {
                owner_id: row.get(1)?,
                public_read: row.get(2)?,
                public_chat: row.get(3)?,
                member_role: row.get(4)?,
            };
            Ok((row.get(0)?, standing))
        })
        .optional()?)
}

/// The agent of run `run_id`, when the run exists and still has one.
pub(super) fn agent_of_run(conn: &Connection, run_id: &str) -> ApiResult<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT agent_id FROM runs WHERE id = ?1")?
        .query_row(params![run_id], |row| row.get::<_, Option<String>>(0))
        .optional()?
        .flatten())
}
