//! Signing identities as the `secrets` table keeps them: key secrets whose metadata marks them
//! (`kind: hm-account-key`) and holds their account id, label, icon and description.
//!
//! What the SQL relies on: `rowid` as the tie-break of a listing (SQLite's implicit one; on
//! PostgreSQL `secrets` has a `rowid` identity column, db/postgres/schema.sql).

use std::collections::BTreeMap;

use crate::db::{Connection, OptionalExtension, params};
use ipld_core::ipld::Ipld;
use seed_agents_protocol::wire;

use crate::error::{ApiError, ApiResult};
use crate::secrets::{self, SIGNING_KEY_KIND};

/// The account id of signing key `name` of `account_id`, when it is an identity with one.
pub(crate) fn identity_account(conn: &Connection, account_id: &str, name: &str) -> ApiResult<Option<String>> {
    let metadata = secrets::store::load_metadata(conn, account_id, name)?.flatten();
    Ok(identity_metadata(metadata.as_deref()).and_then(|mut metadata| match metadata.remove("accountId") {
        Some(Ipld::String(id)) => Some(id),
        _ => None,
    }))
}

/// The metadata of `account_id`'s key secret `name`, when it is a signing identity.
pub(super) fn stored_metadata(
    conn: &Connection,
    account_id: &str,
    name: &str,
) -> ApiResult<Option<BTreeMap<String, Ipld>>> {
    let metadata: Option<Option<Vec<u8>>> = conn
        .prepare_cached("SELECT metadata_cbor FROM secrets WHERE account_id = ?1 AND name = ?2")?
        .query_row(params![account_id, name], |row| row.get(0))
        .optional()?;
    Ok(metadata.and_then(|bytes| identity_metadata(bytes.as_deref())))
}

/// Replaces the metadata of `account_id`'s key secret `name`; whether there was one.
pub(super) fn store_metadata(
    conn: &Connection,
    account_id: &str,
    name: &str,
    metadata: BTreeMap<String, Ipld>,
    now_ms: i64,
) -> ApiResult<bool> {
    let metadata_cbor = wire::ipld_to_vec(&Ipld::Map(metadata)).map_err(ApiError::internal)?;
    let updated = conn
        .prepare_cached("UPDATE secrets SET metadata_cbor = ?3, updated_at = ?4 WHERE account_id = ?1 AND name = ?2")?
        .execute(params![account_id, name, metadata_cbor, now_ms])?;
    Ok(updated > 0)
}

/// A signing identity's key secret.
#[derive(Debug)]
pub(super) struct IdentityKey {
    /// The secret's id.
    pub(super) id: String,
    /// The sealed seed.
    pub(super) sealed: Vec<u8>,
    /// Its metadata (it marks a signing identity).
    pub(super) metadata: BTreeMap<String, Ipld>,
    /// When it was created.
    pub(super) created_at: i64,
}

/// `account_id`'s key secret `name`, when it is a signing identity.
pub(super) fn identity_key(conn: &Connection, account_id: &str, name: &str) -> ApiResult<Option<IdentityKey>> {
    type Raw = (String, Vec<u8>, Option<Vec<u8>>, i64);
    let row: Option<Raw> = conn
        .prepare_cached(
            "SELECT id, ciphertext, metadata_cbor, created_at FROM secrets WHERE account_id = ?1 AND name = ?2",
        )?
        .query_row(params![account_id, name], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))
        .optional()?;
    Ok(row.and_then(|(id, sealed, metadata, created_at)| {
        let metadata = identity_metadata(metadata.as_deref())?;
        Some(IdentityKey { id, sealed, metadata, created_at })
    }))
}

/// A signing identity as listed.
#[derive(Debug)]
pub(super) struct Listed {
    /// The secret's id.
    pub(super) id: String,
    /// The key's name.
    pub(super) name: String,
    /// Its metadata.
    pub(super) metadata: BTreeMap<String, Ipld>,
    /// When it was created.
    pub(super) created_at: i64,
    /// When it last changed.
    pub(super) updated_at: i64,
}

/// Every signing identity of `account_id`, newest first (secrets whose metadata does not mark
/// one are left out).
pub(super) fn identities(conn: &Connection, account_id: &str) -> ApiResult<Vec<Listed>> {
    type Raw = (String, String, Vec<u8>, i64, i64);
    let rows: Vec<Raw> = conn
        .prepare_cached(
            "SELECT id, name, metadata_cbor, created_at, updated_at FROM secrets
             WHERE account_id = ?1 AND metadata_cbor IS NOT NULL ORDER BY created_at DESC, rowid DESC",
        )?
        .query_map(params![account_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?)))?
        .collect::<crate::db::Result<_>>()?;
    Ok(rows
        .into_iter()
        .filter_map(|(id, name, metadata, created_at, updated_at)| {
            let metadata = identity_metadata(Some(&metadata))?;
            Some(Listed { id, name, metadata, created_at, updated_at })
        })
        .collect())
}

/// Stored metadata decoded as a map, when it marks a signing identity.
pub(super) fn identity_metadata(bytes: Option<&[u8]>) -> Option<BTreeMap<String, Ipld>> {
    let metadata = secrets::decode_metadata(bytes?)?;
    matches!(metadata.get("kind"), Some(Ipld::String(kind)) if kind == SIGNING_KEY_KIND).then_some(metadata)
}

/// A signing identity an agent may sign with, as its prompt names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Granted {
    /// The key secret's name (what `signingKeys` lists).
    pub key: String,
    /// The profile name (the identity's label), when it has one.
    pub label: Option<String>,
    /// The account it signs as: its public key id.
    pub account_id: String,
}

/// The signing identities among `keys` (names of `account_id`'s key secrets), in that order;
/// names that are not identities with an account id are left out.
pub(crate) fn granted(conn: &Connection, account_id: &str, keys: &[String]) -> ApiResult<Vec<Granted>> {
    let mut granted = Vec::with_capacity(keys.len());
    for key in keys {
        let Some(mut metadata) = stored_metadata(conn, account_id, key)? else { continue };
        let Some(Ipld::String(account)) = metadata.remove("accountId") else { continue };
        let label = match metadata.remove("label") {
            Some(Ipld::String(label)) if !label.trim().is_empty() => Some(label),
            _ => None,
        };
        granted.push(Granted { key: key.clone(), label, account_id: account });
    }
    Ok(granted)
}
