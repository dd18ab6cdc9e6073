//! The `account_authorizations` table: which signers may act for an account, and the
//! capability that says so.
//!
//! What the SQL relies on: `INSERT … ON CONFLICT (…) DO UPDATE SET … = excluded.…`, spelled the
//! same by both databases.

use crate::db::{Connection, OptionalExtension, params};

use crate::error::ApiResult;

/// Whether `signer` is an agent or owner signer of `account_id`.
pub(super) fn may_act(conn: &Connection, account_id: &str, signer: &str) -> ApiResult<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT 1 FROM account_authorizations
             WHERE account_id = ?1 AND signer = ?2 AND role IN ('AGENT', 'OWNER')",
        )?
        .query_row(params![account_id, signer], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Records `signer` as an agent signer of `account_id`, under `capability` (replacing what was
/// recorded for the pair).
pub(super) fn authorize_agent(
    conn: &Connection,
    account_id: &str,
    signer: &str,
    capability: &[u8],
    now: i64,
) -> ApiResult<()> {
    conn.prepare_cached(
        "INSERT INTO account_authorizations (account_id, signer, role, capability, created_at, updated_at)
         VALUES (?1, ?2, 'AGENT', ?3, ?4, ?4)
         ON CONFLICT (account_id, signer) DO UPDATE
         SET role = 'AGENT', capability = excluded.capability, updated_at = excluded.updated_at",
    )?
    .execute(params![account_id, signer, capability, now])?;
    Ok(())
}
