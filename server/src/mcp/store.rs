//! The `mcp_servers` table: an account's MCP servers by name, with the tools and status of their
//! last discovery.
//!
//! What the SQL relies on: `INSERT … ON CONFLICT (…) DO UPDATE SET … = excluded.…`, spelled the
//! same by both databases; the rest is plain SQL.

use crate::db::{Connection, OptionalExtension, params};
use seed_agents_protocol::Value;
use seed_agents_protocol::generated::{McpServerConfig, McpServerStatusState, McpServerTransport};
use serde::{Deserialize, Serialize};

use crate::db::Cbor;
use crate::error::{ApiError, ApiResult};

/// A tool as discovery found it on the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ServerTool {
    /// Its name on the server.
    pub name: String,
    /// The server's description of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its input schema (a JSON Schema object), kept as IPLD.
    pub input: Value,
}

/// A stored server.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ServerRow {
    /// The record id.
    pub id: String,
    /// Its name (unique per account).
    pub name: String,
    /// Its configuration (secret headers as secret names).
    pub config: McpServerConfig,
    /// The transport the last successful discovery used (the configured one when set).
    pub transport: Option<McpServerTransport>,
    /// The tools of the last successful discovery.
    pub tools: Vec<ServerTool>,
    /// The last status.
    pub state: McpServerStatusState,
    /// Why the last check failed.
    pub error: Option<String>,
    /// When it was last checked.
    pub checked_at: Option<i64>,
    /// Milliseconds since the epoch.
    pub created_at: i64,
    /// Milliseconds since the epoch.
    pub updated_at: i64,
}

const COLUMNS: &str = "id, name, config_cbor, transport, tools_cbor, state, error, checked_at, created_at, updated_at";

fn transport_of(text: Option<String>) -> Option<McpServerTransport> {
    match text.as_deref() {
        Some("http") => Some(McpServerTransport::Http),
        Some("sse") => Some(McpServerTransport::Sse),
        _ => None,
    }
}

fn transport_text(transport: Option<McpServerTransport>) -> Option<&'static str> {
    transport.map(|transport| match transport {
        McpServerTransport::Http => "http",
        McpServerTransport::Sse => "sse",
    })
}

fn state_of(text: &str) -> McpServerStatusState {
    match text {
        "ok" => McpServerStatusState::Ok,
        "error" => McpServerStatusState::Error,
        _ => McpServerStatusState::Unknown,
    }
}

fn state_text(state: McpServerStatusState) -> &'static str {
    match state {
        McpServerStatusState::Ok => "ok",
        McpServerStatusState::Error => "error",
        McpServerStatusState::Unknown => "unknown",
    }
}

fn row_from_sql(row: &crate::db::Row<'_>) -> crate::db::Result<ServerRow> {
    Ok(ServerRow {
        id: row.get(0)?,
        name: row.get(1)?,
        config: row.get::<_, Cbor<McpServerConfig>>(2)?.0,
        transport: transport_of(row.get(3)?),
        tools: row.get::<_, Cbor<Vec<ServerTool>>>(4)?.0,
        state: state_of(&row.get::<_, String>(5)?),
        error: row.get(6)?,
        checked_at: row.get(7)?,
        created_at: row.get(8)?,
        updated_at: row.get(9)?,
    })
}

/// Every server of `account_id`, by name.
pub(crate) fn load_all(conn: &Connection, account_id: &str) -> ApiResult<Vec<ServerRow>> {
    let mut statement =
        conn.prepare_cached(&format!("SELECT {COLUMNS} FROM mcp_servers WHERE account_id = ?1 ORDER BY name"))?;
    let rows = statement.query_map(params![account_id], row_from_sql)?;
    Ok(rows.collect::<crate::db::Result<Vec<_>>>()?)
}

/// The server `name` of `account_id`, when it exists.
pub(crate) fn load(conn: &Connection, account_id: &str, name: &str) -> ApiResult<Option<ServerRow>> {
    Ok(conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM mcp_servers WHERE account_id = ?1 AND name = ?2"))?
        .query_row(params![account_id, name], row_from_sql)
        .optional()?)
}

/// Creates or replaces the configuration of server `name` (a replaced record keeps its id,
/// creation time, tools and status; a new one starts `unknown` with no tools).
pub(crate) fn upsert_config(
    conn: &Connection,
    account_id: &str,
    name: &str,
    config: &McpServerConfig,
    now: i64,
) -> ApiResult<ServerRow> {
    let id = uuid::Uuid::now_v7().to_string();
    let no_tools: Vec<ServerTool> = Vec::new();
    conn.prepare_cached(
        "INSERT INTO mcp_servers (id, account_id, name, config_cbor, transport, tools_cbor, state, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, NULL, ?5, 'unknown', ?6, ?6)
         ON CONFLICT (account_id, name) DO UPDATE SET config_cbor = excluded.config_cbor, updated_at = excluded.updated_at",
    )?
    .execute(params![id, account_id, name, Cbor(config), Cbor(&no_tools), now])?;
    load(conn, account_id, name)?.ok_or_else(|| ApiError::internal("a saved MCP server is missing"))
}

/// What a discovery found.
#[derive(Debug, Clone)]
pub(crate) struct Discovery {
    /// `ok` or `error`.
    pub state: McpServerStatusState,
    /// Why it failed.
    pub error: Option<String>,
    /// The transport that answered (kept as before on failure).
    pub transport: Option<McpServerTransport>,
    /// The tools found (kept as before on failure).
    pub tools: Option<Vec<ServerTool>>,
    /// When it ran.
    pub checked_at: i64,
}

/// Records a discovery's outcome on server `name`; whether the server still exists.
pub(crate) fn record_discovery(conn: &Connection, account_id: &str, name: &str, found: &Discovery) -> ApiResult<bool> {
    let tools = found.tools.as_ref().map(Cbor);
    let updated = conn
        .prepare_cached(
            "UPDATE mcp_servers SET state = ?3, error = ?4, checked_at = ?5,
                 transport = COALESCE(?6, transport), tools_cbor = COALESCE(?7, tools_cbor)
             WHERE account_id = ?1 AND name = ?2",
        )?
        .execute(params![
            account_id,
            name,
            state_text(found.state),
            found.error,
            found.checked_at,
            transport_text(found.transport),
            tools
        ])?;
    Ok(updated > 0)
}

/// Deletes server `name`; whether there was one.
pub(crate) fn delete(conn: &Connection, account_id: &str, name: &str) -> ApiResult<bool> {
    let deleted = conn
        .prepare_cached("DELETE FROM mcp_servers WHERE account_id = ?1 AND name = ?2")?
        .execute(params![account_id, name])?;
    Ok(deleted > 0)
}
