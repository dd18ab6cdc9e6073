//! The `model_providers` table: an account's provider records, stored as canonical CBOR under
//! `(account_id, name)`.
//!
//! What the SQL relies on: `INSERT … ON CONFLICT (…) DO UPDATE … RETURNING`, spelled the same
//! by both databases; the rest is plain SQL.

use crate::db::{Connection, OptionalExtension, params};
use seed_agents_protocol::generated::ModelProviderConfig;

use crate::db::Cbor;
use crate::error::ApiResult;

/// A stored provider record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProviderRow {
    /// The record id.
    pub id: String,
    /// The provider name (unique per account).
    pub name: String,
    /// The provider type as stored.
    pub type_: String,
    /// The decoded config.
    pub config: ModelProviderConfig,
    /// Milliseconds since the epoch.
    pub created_at: i64,
    /// Milliseconds since the epoch.
    pub updated_at: i64,
}

const PROVIDER_COLUMNS: &str = "id, name, type, config_cbor, created_at, updated_at";

fn row_from_sql(row: &crate::db::Row<'_>) -> crate::db::Result<ProviderRow> {
    Ok(ProviderRow {
        id: row.get(0)?,
        name: row.get(1)?,
        type_: row.get(2)?,
        config: row.get::<_, Cbor<ModelProviderConfig>>(3)?.0,
        created_at: row.get(4)?,
        updated_at: row.get(5)?,
    })
}

/// Every provider of `account_id`, most recently updated first (ties by name).
pub(crate) fn load_all(conn: &Connection, account_id: &str) -> ApiResult<Vec<ProviderRow>> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {PROVIDER_COLUMNS} FROM model_providers WHERE account_id = ?1 ORDER BY updated_at DESC, name ASC"
    ))?;
    let rows = statement.query_map(params![account_id], row_from_sql)?;
    Ok(rows.collect::<crate::db::Result<Vec<_>>>()?)
}

/// The provider `name` of `account_id`, when it exists.
pub(crate) fn load(conn: &Connection, account_id: &str, name: &str) -> ApiResult<Option<ProviderRow>> {
    Ok(conn
        .prepare_cached(&format!("SELECT {PROVIDER_COLUMNS} FROM model_providers WHERE account_id = ?1 AND name = ?2"))?
        .query_row(params![account_id, name], row_from_sql)
        .optional()?)
}

/// A provider's id, name and stored type (its config unread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProviderBrief {
    /// The record id.
    pub id: String,
    /// The provider name.
    pub name: String,
    /// The provider type as stored.
    pub type_: String,
}

/// The id, name and type of provider `name` of `account_id`, when it exists.
pub(crate) fn brief(conn: &Connection, account_id: &str, name: &str) -> ApiResult<Option<ProviderBrief>> {
    Ok(conn
        .prepare_cached("SELECT id, name, type FROM model_providers WHERE account_id = ?1 AND name = ?2")?
        .query_row(params![account_id, name], |row| {
            Ok(ProviderBrief { id: row.get(0)?, name: row.get(1)?, type_: row.get(2)? })
        })
        .optional()?)
}

/// The config of provider `name` of `account_id`, when it exists.
pub(crate) fn load_config(conn: &Connection, account_id: &str, name: &str) -> ApiResult<Option<ModelProviderConfig>> {
    Ok(conn
        .prepare_cached("SELECT config_cbor FROM model_providers WHERE account_id = ?1 AND name = ?2")?
        .query_row(params![account_id, name], |row| row.get::<_, Cbor<ModelProviderConfig>>(0))
        .optional()?
        .map(|Cbor(config)| config))
}

/// The stored type of provider `name` of `account_id`, when it exists.
pub(crate) fn provider_type(conn: &Connection, account_id: &str, name: &str) -> ApiResult<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT type FROM model_providers WHERE account_id = ?1 AND name = ?2")?
        .query_row(params![account_id, name], |row| row.get(0))
        .optional()?)
}

/// Deletes provider `name` of `account_id`.
pub(crate) fn delete(conn: &Connection, account_id: &str, name: &str) -> ApiResult<()> {
    conn.prepare_cached("DELETE FROM model_providers WHERE account_id = ?1 AND name = ?2")?
        .execute(params![account_id, name])?;
    Ok(())
}

/// Inserts or replaces provider `name`, keeping an existing record's id and creation time, and
/// registers the account when it is new.
pub(crate) fn upsert(
    conn: &Connection,
    account_id: &str,
    name: &str,
    config: &ModelProviderConfig,
    now: i64,
) -> ApiResult<ProviderRow> {
    crate::db::ensure_account(conn, account_id, now)?;
    // On a conflict the row keeps its id and creation time, and RETURNING reports them.
    let (id, created_at): (String, i64) = conn
        .prepare_cached(
            "INSERT INTO model_providers (id, account_id, name, type, config_cbor, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)
             ON CONFLICT (account_id, name) DO UPDATE SET
               type = excluded.type,
               config_cbor = excluded.config_cbor,
               updated_at = excluded.updated_at
             RETURNING id, created_at",
        )?
        .query_row(
            params![uuid::Uuid::new_v4().to_string(), account_id, name, config.type_, Cbor(config), now],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
    Ok(ProviderRow {
        id,
        name: name.to_owned(),
        type_: config.type_.clone(),
        config: config.clone(),
        created_at,
        updated_at: now,
    })
}
