//! The `tool_documents` table: one row per (owner account, agent, name).
//!
//! What the SQL relies on: `INSERT … ON CONFLICT (…) DO UPDATE SET … = excluded.… [WHERE …]`
//! (spelled the same by both databases) and a 0/1 integer `enabled`; the rest is plain SQL.

use std::sync::LazyLock;

use crate::db::{Connection, OptionalExtension, params};

use super::document::{Kind, ToolDocument};
use super::registry::Callable;
use crate::error::{ApiError, ApiResult};

/// A stored document.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub document: ToolDocument,
    pub cid: String,
    pub enabled: bool,
    pub created_at: i64,
    pub updated_at: i64,
}

/// Every builtin document of this build with its CID and bytes (computed once).
static BUILTINS: LazyLock<Vec<(ToolDocument, String, Vec<u8>)>> = LazyLock::new(|| {
    Callable::ALL
        .into_iter()
        .filter_map(|callable| {
            let document = ToolDocument::builtin(callable);
            match document.encode() {
                Ok((cid, bytes)) => Some((document, cid, bytes)),
                Err(error) => {
                    tracing::error!(tool = callable.name(), error = %error.message(), "a builtin tool document does not encode");
                    None
                }
            }
        })
        .collect()
});

/// Whether any builtin row of the agent is missing or has another CID than this build's.
pub(crate) fn builtins_stale(conn: &Connection, owner: &str, agent: &str) -> ApiResult<bool> {
    let mut statement =
        conn.prepare_cached("SELECT cid FROM tool_documents WHERE account_id = ?1 AND agent_id = ?2 AND name = ?3")?;
    for (document, cid, _) in BUILTINS.iter() {
        let stored: Option<String> =
            statement.query_row(params![owner, agent, document.name], |row| row.get(0)).optional()?;
        if stored.as_deref() != Some(cid.as_str()) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Writes the builtin rows whose CID differs from this build's (new rows keep `enabled` 1).
pub(crate) fn ensure_builtins(conn: &Connection, owner: &str, agent: &str, now: i64) -> ApiResult<()> {
    let mut select =
        conn.prepare_cached("SELECT cid FROM tool_documents WHERE account_id = ?1 AND agent_id = ?2 AND name = ?3")?;
    let mut upsert = conn.prepare_cached(
        "INSERT INTO tool_documents (account_id, agent_id, name, kind, cid, doc_cbor, enabled, created_at, updated_at)
         VALUES (?1, ?2, ?3, 'builtin', ?4, ?5, 1, ?6, ?6)
         ON CONFLICT (account_id, agent_id, name) DO UPDATE SET
             kind = excluded.kind, cid = excluded.cid, doc_cbor = excluded.doc_cbor, updated_at = excluded.updated_at",
    )?;
    for (document, cid, bytes) in BUILTINS.iter() {
        let stored: Option<String> =
            select.query_row(params![owner, agent, document.name], |row| row.get(0)).optional()?;
        if stored.as_deref() != Some(cid.as_str()) {
            upsert.execute(params![owner, agent, document.name, cid, bytes, now])?;
        }
    }
    Ok(())
}

/// Every document of the agent, by name.
pub(crate) fn list(conn: &Connection, owner: &str, agent: &str) -> ApiResult<Vec<Stored>> {
    let mut statement = conn.prepare_cached(
        "SELECT doc_cbor, cid, enabled, created_at, updated_at FROM tool_documents
         WHERE account_id = ?1 AND agent_id = ?2 ORDER BY name",
    )?;
    let rows = statement.query_map(params![owner, agent], raw)?.collect::<Result<Vec<_>, _>>()?;
    rows.into_iter().map(stored).collect()
}

/// The document called `name`.
pub(crate) fn get(conn: &Connection, owner: &str, agent: &str, name: &str) -> ApiResult<Option<Stored>> {
    let row = conn
        .prepare_cached(
            "SELECT doc_cbor, cid, enabled, created_at, updated_at FROM tool_documents
             WHERE account_id = ?1 AND agent_id = ?2 AND name = ?3",
        )?
        .query_row(params![owner, agent, name], raw)
        .optional()?;
    row.map(stored).transpose()
}

/// Creates or replaces the lambda `document` (a replaced row keeps its `created_at`).
pub(crate) fn put_lambda(
    conn: &Connection,
    owner: &str,
    agent: &str,
    document: &ToolDocument,
    now: i64,
) -> ApiResult<()> {
    if document.kind != Kind::Lambda {
        return Err(ApiError::internal("only lambda documents are authored"));
    }
    let (cid, bytes) = document.encode()?;
    conn.prepare_cached(
        "INSERT INTO tool_documents (account_id, agent_id, name, kind, cid, doc_cbor, enabled, created_at, updated_at)
         VALUES (?1, ?2, ?3, 'lambda', ?4, ?5, 1, ?6, ?6)
         ON CONFLICT (account_id, agent_id, name) DO UPDATE SET
             kind = excluded.kind, cid = excluded.cid, doc_cbor = excluded.doc_cbor, updated_at = excluded.updated_at",
    )?
    .execute(params![owner, agent, document.name, cid, bytes, now])?;
    Ok(())
}

/// Creates or replaces the MCP tool `document` (a replaced row keeps its `created_at` and
/// `enabled`); refuses to replace a builtin or lambda of the same name.
pub(crate) fn put_mcp(conn: &Connection, owner: &str, agent: &str, document: &ToolDocument, now: i64) -> ApiResult<()> {
    if document.kind != Kind::Mcp {
        return Err(ApiError::internal("only MCP documents are projected"));
    }
    let (cid, bytes) = document.encode()?;
    conn.prepare_cached(
        "INSERT INTO tool_documents (account_id, agent_id, name, kind, cid, doc_cbor, enabled, created_at, updated_at)
         VALUES (?1, ?2, ?3, 'mcp', ?4, ?5, 1, ?6, ?6)
         ON CONFLICT (account_id, agent_id, name) DO UPDATE SET
             cid = excluded.cid, doc_cbor = excluded.doc_cbor, updated_at = excluded.updated_at
         WHERE tool_documents.kind = 'mcp'",
    )?
    .execute(params![owner, agent, document.name, cid, bytes, now])?;
    Ok(())
}

/// Every MCP document of the agent, by name.
pub(crate) fn list_mcp(conn: &Connection, owner: &str, agent: &str) -> ApiResult<Vec<Stored>> {
    let mut statement = conn.prepare_cached(
        "SELECT doc_cbor, cid, enabled, created_at, updated_at FROM tool_documents
         WHERE account_id = ?1 AND agent_id = ?2 AND kind = 'mcp' ORDER BY name",
    )?;
    let rows = statement.query_map(params![owner, agent], raw)?.collect::<Result<Vec<_>, _>>()?;
    rows.into_iter().map(stored).collect()
}

/// Sets a row's `created_at` (a rename keeps the original's).
pub(crate) fn set_created_at(
    conn: &Connection,
    owner: &str,
    agent: &str,
    name: &str,
    created_at: i64,
) -> ApiResult<()> {
    conn.prepare_cached(
        "UPDATE tool_documents SET created_at = ?4 WHERE account_id = ?1 AND agent_id = ?2 AND name = ?3",
    )?
    .execute(params![owner, agent, name, created_at])?;
    Ok(())
}

/// Deletes the row called `name`; whether there was one.
pub(crate) fn delete(conn: &Connection, owner: &str, agent: &str, name: &str) -> ApiResult<bool> {
    let deleted = conn
        .prepare_cached("DELETE FROM tool_documents WHERE account_id = ?1 AND agent_id = ?2 AND name = ?3")?
        .execute(params![owner, agent, name])?;
    Ok(deleted > 0)
}

type Raw = (Vec<u8>, String, bool, i64, i64);

fn raw(row: &crate::db::Row<'_>) -> crate::db::Result<Raw> {
    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?))
}

fn stored((bytes, cid, enabled, created_at, updated_at): Raw) -> ApiResult<Stored> {
    Ok(Stored { document: ToolDocument::decode(&bytes)?, cid, enabled, created_at, updated_at })
}
