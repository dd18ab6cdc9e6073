//! The `action_idempotency` table: `(account, action, key)` → the request's canonical bytes and
//! the response it was answered. All portable SQL.

use crate::db::{Connection, OptionalExtension, params};
use seed_agents_protocol::AgentResponse;

use crate::db::Cbor;
use crate::error::ApiResult;

/// Where a key is stored: `(account, action, client key)`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Slot<'a> {
    /// The acting account.
    pub(super) account_id: &'a str,
    /// The action's name.
    pub(super) action: &'a str,
    /// The client's key.
    pub(super) id: &'a str,
}

/// The request bytes and the response stored under `slot`, when there are.
pub(super) fn load(conn: &Connection, slot: Slot<'_>) -> ApiResult<Option<(Vec<u8>, AgentResponse)>> {
    Ok(conn
        .prepare_cached(
            "SELECT request_cbor, response_cbor FROM action_idempotency
             WHERE account_id = ?1 AND action = ?2 AND client_request_id = ?3",
        )?
        .query_row(params![slot.account_id, slot.action, slot.id], |row| {
            Ok((row.get(0)?, row.get::<_, Cbor<AgentResponse>>(1)?.0))
        })
        .optional()?)
}

/// Stores `request` and `response` under `slot`.
pub(super) fn insert(
    conn: &Connection,
    slot: Slot<'_>,
    request: &[u8],
    response: &AgentResponse,
    now_ms: i64,
) -> ApiResult<()> {
    conn.prepare_cached(
        "INSERT INTO action_idempotency (account_id, action, client_request_id, request_cbor, response_cbor, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![slot.account_id, slot.action, slot.id, request, Cbor(response), now_ms])?;
    Ok(())
}

/// Replaces the response stored under `slot`.
pub(super) fn set_response(conn: &Connection, slot: Slot<'_>, response: &AgentResponse) -> ApiResult<()> {
    conn.prepare_cached(
        "UPDATE action_idempotency SET response_cbor = ?4
         WHERE account_id = ?1 AND action = ?2 AND client_request_id = ?3",
    )?
    .execute(params![slot.account_id, slot.action, slot.id, Cbor(response)])?;
    Ok(())
}
