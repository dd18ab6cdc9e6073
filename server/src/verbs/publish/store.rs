//! The `agent_drafts` table: the drafts an agent keeps with `write hm://` `draft.*`, one row per
//! draft under the owner's account and the agent (rows go with the agent, by foreign key).
//!
//! Portable SQL; `edit` is a 0/1 integer.

use crate::db::{Connection, OptionalExtension, Row, params};

use crate::error::ApiResult;

/// A stored draft.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Draft {
    pub id: String,
    pub name: String,
    /// Markdown.
    pub content: String,
    /// JSON object text of the document metadata (scalar values).
    pub metadata_json: String,
    /// The `hm://` address it publishes at.
    pub target: String,
    /// Whether publishing updates the document at `target` (else creates it).
    pub edit: bool,
    /// `idle` or `published`.
    pub status: String,
    pub published_id: Option<String>,
    pub published_version: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

const COLUMNS: &str = "id, name, content, metadata_json, target, edit, status, published_id, published_version, \
                       created_at, updated_at";

fn draft(row: &Row<'_>) -> crate::db::Result<Draft> {
    Ok(Draft {
        id: row.get(0)?,
        name: row.get(1)?,
        content: row.get(2)?,
        metadata_json: row.get(3)?,
        target: row.get(4)?,
        edit: row.get::<_, i64>(5)? == 1,
        status: row.get(6)?,
        published_id: row.get(7)?,
        published_version: row.get(8)?,
        created_at: row.get(9)?,
        updated_at: row.get(10)?,
    })
}

/// Stores a new draft of the owner's agent.
pub(crate) fn insert(conn: &Connection, owner: &str, agent: &str, draft: &Draft) -> ApiResult<()> {
    conn.prepare_cached(
        "INSERT INTO agent_drafts (id, account_id, agent_id, name, content, metadata_json, target, edit, status, \
         published_id, published_version, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )?
    .execute(params![
        draft.id,
        owner,
        agent,
        draft.name,
        draft.content,
        draft.metadata_json,
        draft.target,
        i64::from(draft.edit),
        draft.status,
        draft.published_id,
        draft.published_version,
        draft.created_at,
        draft.updated_at
    ])?;
    Ok(())
}

/// The agent's draft `id`, if it has one.
pub(crate) fn get(conn: &Connection, owner: &str, agent: &str, id: &str) -> ApiResult<Option<Draft>> {
    let sql = format!("SELECT {COLUMNS} FROM agent_drafts WHERE account_id = ?1 AND agent_id = ?2 AND id = ?3");
    Ok(conn.prepare_cached(&sql)?.query_row(params![owner, agent, id], draft).optional()?)
}

/// The agent's drafts, most recently changed first, at most `limit`.
pub(crate) fn list(conn: &Connection, owner: &str, agent: &str, limit: u32) -> ApiResult<Vec<Draft>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM agent_drafts WHERE account_id = ?1 AND agent_id = ?2 \
         ORDER BY updated_at DESC, id DESC LIMIT ?3"
    );
    let mut statement = conn.prepare_cached(&sql)?;
    let rows = statement.query_map(params![owner, agent, limit], draft)?;
    Ok(rows.collect::<crate::db::Result<Vec<_>>>()?)
}

/// How many drafts the agent keeps.
pub(crate) fn count(conn: &Connection, owner: &str, agent: &str) -> ApiResult<u32> {
    Ok(conn
        .prepare_cached("SELECT COUNT(*) FROM agent_drafts WHERE account_id = ?1 AND agent_id = ?2")?
        .query_row(params![owner, agent], |row| row.get(0))?)
}

/// Replaces a draft's editable fields (name, content, metadata, target, edit, status and what it
/// was published as, `updated_at`); whether it was there.
pub(crate) fn update(conn: &Connection, owner: &str, agent: &str, draft: &Draft) -> ApiResult<bool> {
    let changed = conn
        .prepare_cached(
            "UPDATE agent_drafts SET name = ?4, content = ?5, metadata_json = ?6, target = ?7, edit = ?8, \
             status = ?9, published_id = ?10, published_version = ?11, updated_at = ?12 \
             WHERE account_id = ?1 AND agent_id = ?2 AND id = ?3",
        )?
        .execute(params![
            owner,
            agent,
            draft.id,
            draft.name,
            draft.content,
            draft.metadata_json,
            draft.target,
            i64::from(draft.edit),
            draft.status,
            draft.published_id,
            draft.published_version,
            draft.updated_at
        ])?;
    Ok(changed == 1)
}

/// Deletes the agent's draft `id`; whether it was there.
pub(crate) fn delete(conn: &Connection, owner: &str, agent: &str, id: &str) -> ApiResult<bool> {
    let deleted = conn
        .prepare_cached("DELETE FROM agent_drafts WHERE account_id = ?1 AND agent_id = ?2 AND id = ?3")?
        .execute(params![owner, agent, id])?;
    Ok(deleted == 1)
}
