//! The `secrets` table: sealed values under `(account_id, name)` with their metadata; the values
//! are sealed before they reach this module and opened after they leave it.
//!
//! What the SQL relies on: `INSERT … ON CONFLICT (…) DO UPDATE … RETURNING`, spelled the same
//! by both databases; the rest is plain SQL.

use crate::db::{Connection, OptionalExtension, params};

use super::crypto::Sealed;
use crate::error::ApiResult;

/// The id and timestamps of a stored secret row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredRow {
    pub(crate) id: String,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
}

/// Inserts or replaces the secret `name` of `account_id`, keeping an existing row's id and
/// creation time. Registers the account when it is new.
pub(crate) fn upsert(
    conn: &Connection,
    account_id: &str,
    name: &str,
    ciphertext: &[u8],
    metadata_cbor: Option<&[u8]>,
    now: i64,
) -> ApiResult<StoredRow> {
    crate::db::ensure_account(conn, account_id, now)?;
    // On a conflict the row keeps its id and creation time, and RETURNING reports them.
    let (id, created_at): (String, i64) = conn
        .prepare_cached(
            "INSERT INTO secrets (id, account_id, name, ciphertext, metadata_cbor, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)
             ON CONFLICT (account_id, name) DO UPDATE SET
               ciphertext = excluded.ciphertext,
               metadata_cbor = excluded.metadata_cbor,
               updated_at = excluded.updated_at
             RETURNING id, created_at",
        )?
        .query_row(
            params![uuid::Uuid::new_v4().to_string(), account_id, name, ciphertext, metadata_cbor, now],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
    Ok(StoredRow { id, created_at, updated_at: now })
}

/// The stored metadata of secret `name`: `None` when the secret does not exist, `Some(None)` when
/// it exists without metadata.
pub(crate) fn load_metadata(conn: &Connection, account_id: &str, name: &str) -> ApiResult<Option<Option<Vec<u8>>>> {
    Ok(conn
        .prepare_cached("SELECT metadata_cbor FROM secrets WHERE account_id = ?1 AND name = ?2")?
        .query_row(params![account_id, name], |row| row.get(0))
        .optional()?)
}

/// The sealed (still encrypted) value of secret `name` of `account_id`, for callers that open it
/// with `SecretKey::open` outside the database thread; `None` when there is no such secret.
pub(crate) fn load_sealed(conn: &Connection, account_id: &str, name: &str) -> ApiResult<Option<Vec<u8>>> {
    Ok(conn
        .prepare_cached("SELECT ciphertext FROM secrets WHERE account_id = ?1 AND name = ?2")?
        .query_row(params![account_id, name], |row| row.get(0))
        .optional()?)
}

/// Inserts a new secret (a name already taken is an error, never an overwrite); its id.
/// Registers the account when it is new.
pub(crate) fn insert(
    conn: &Connection,
    account_id: &str,
    name: &str,
    ciphertext: &[u8],
    metadata_cbor: &[u8],
    now: i64,
) -> ApiResult<String> {
    let id = uuid::Uuid::new_v4().to_string();
    crate::db::ensure_account(conn, account_id, now)?;
    conn.prepare_cached(
        "INSERT INTO secrets (id, account_id, name, ciphertext, metadata_cbor, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
    )?
    .execute(params![id, account_id, name, ciphertext, metadata_cbor, now])?;
    Ok(id)
}

/// Deletes secret `name` of `account_id`; whether it existed.
pub(crate) fn delete_secret(conn: &Connection, account_id: &str, name: &str) -> ApiResult<bool> {
    let deleted = conn
        .prepare_cached("DELETE FROM secrets WHERE account_id = ?1 AND name = ?2")?
        .execute(params![account_id, name])?;
    Ok(deleted > 0)
}

/// A sealed value and the metadata CBOR beside it.
pub(crate) type SealedWithMetadata = (Vec<u8>, Option<Vec<u8>>);

/// The sealed value and the metadata of secret `name`; `None` when there is no such secret.
pub(crate) fn load_sealed_and_metadata(
    conn: &Connection,
    account_id: &str,
    name: &str,
) -> ApiResult<Option<SealedWithMetadata>> {
    Ok(conn
        .prepare_cached("SELECT ciphertext, metadata_cbor FROM secrets WHERE account_id = ?1 AND name = ?2")?
        .query_row(params![account_id, name], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?)
}

/// Replaces the value and metadata of secret `name` only while its sealed value is still
/// `expected` (a compare-and-set: a sign-in or another refresh that wrote first wins); whether it
/// was replaced.
pub(crate) fn replace_if_unchanged(
    conn: &Connection,
    account_id: &str,
    name: &str,
    expected: &[u8],
    ciphertext: &[u8],
    metadata_cbor: Option<&[u8]>,
    now: i64,
) -> ApiResult<bool> {
    let changed = conn
        .prepare_cached(
            "UPDATE secrets SET ciphertext = ?4, metadata_cbor = ?5, updated_at = ?6
             WHERE account_id = ?1 AND name = ?2 AND ciphertext = ?3",
        )?
        .execute(params![account_id, name, expected, ciphertext, metadata_cbor, now])?;
    Ok(changed > 0)
}

/// Replaces the metadata of secret `name` while its sealed value is still `expected`; whether it
/// was replaced.
pub(crate) fn set_metadata_if_unchanged(
    conn: &Connection,
    account_id: &str,
    name: &str,
    expected: &[u8],
    metadata_cbor: &[u8],
    now: i64,
) -> ApiResult<bool> {
    let changed = conn
        .prepare_cached(
            "UPDATE secrets SET metadata_cbor = ?4, updated_at = ?5
             WHERE account_id = ?1 AND name = ?2 AND ciphertext = ?3",
        )?
        .execute(params![account_id, name, expected, metadata_cbor, now])?;
    Ok(changed > 0)
}

/// Every stored secret, sealed, in id order.
pub(crate) fn all_sealed(conn: &Connection) -> ApiResult<Vec<Sealed<String>>> {
    let mut statement = conn.prepare_cached("SELECT id, account_id, name, ciphertext FROM secrets ORDER BY id")?;
    let rows = statement.query_map([], |row| {
        Ok(Sealed { at: row.get(0)?, account_id: row.get(1)?, name: row.get(2)?, sealed: row.get(3)? })
    })?;
    Ok(rows.collect::<crate::db::Result<_>>()?)
}

/// Replaces the sealed value of secret row `id` (key rotation: the same plaintext under another
/// key; `updated_at` stays, since the secret did not change).
pub(crate) fn set_sealed(conn: &Connection, id: &str, sealed: &[u8]) -> ApiResult<()> {
    conn.prepare_cached("UPDATE secrets SET ciphertext = ?2 WHERE id = ?1")?.execute(params![id, sealed])?;
    Ok(())
}
