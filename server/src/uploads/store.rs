//! The `uploads` table: one row per upload in progress (its target, declared size, the bytes
//! durably received, its staging file), read and written by the upload actions and the sweep.
//!
//! What the SQL relies on: `updated_at < ?1` read as a boolean column (in [`all`]; an integer in
//! SQLite, a boolean in PostgreSQL, both read as `bool`). Everything else is plain SQL.

use crate::db::{Connection, OptionalExtension, params};
use seed_agents_protocol::generated::FileUploadTarget;

use crate::db::Cbor;
use crate::error::ApiResult;

/// How many of `account_id`'s uploads were touched at or after `since` (not expired).
pub(crate) fn active_count(conn: &Connection, account_id: &str, since: i64) -> ApiResult<i64> {
    Ok(conn
        .prepare_cached("SELECT COUNT(*) FROM uploads WHERE account_id = ?1 AND updated_at >= ?2")?
        .query_row(params![account_id, since], |row| row.get(0))?)
}

/// How many uploads of any account were touched at or after `since` (`/metrics`).
pub(crate) fn in_flight(conn: &Connection, since: i64) -> ApiResult<i64> {
    Ok(conn
        .prepare_cached("SELECT COUNT(*) FROM uploads WHERE updated_at >= ?1")?
        .query_row([since], |row| row.get(0))?)
}

/// An upload to insert, nothing received yet.
#[derive(Debug)]
pub(crate) struct NewUpload<'a> {
    /// Its id.
    pub(crate) id: &'a str,
    /// The account uploading.
    pub(crate) account_id: &'a str,
    /// Where the file goes.
    pub(crate) target: &'a FileUploadTarget,
    /// Its declared size.
    pub(crate) size: i64,
    /// Its staging file, relative to the data directory.
    pub(crate) staging_path: &'a str,
}

/// Inserts `upload`.
pub(crate) fn insert(conn: &Connection, upload: &NewUpload<'_>, now: i64) -> ApiResult<()> {
    conn.prepare_cached(
        "INSERT INTO uploads (id, account_id, target_cbor, size, received, staging_path, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6, ?6)",
    )?
    .execute(params![upload.id, upload.account_id, Cbor(upload.target), upload.size, upload.staging_path, now])?;
    Ok(())
}

/// An upload's row as the actions read it.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// Where the file goes.
    pub(crate) target: FileUploadTarget,
    /// Its declared size.
    pub(crate) size: i64,
    /// The bytes durably received.
    pub(crate) received: i64,
}

/// Upload `id` of `account_id`, unless it was last touched before `cutoff` (expired).
pub(crate) fn load(conn: &Connection, id: &str, account_id: &str, cutoff: i64) -> ApiResult<Option<Row>> {
    Ok(conn
        .prepare_cached(
            "SELECT target_cbor, size, received FROM uploads
             WHERE id = ?1 AND account_id = ?2 AND updated_at >= ?3",
        )?
        .query_row(params![id, account_id, cutoff], |row| {
            Ok(Row { target: row.get::<_, Cbor<FileUploadTarget>>(0)?.0, size: row.get(1)?, received: row.get(2)? })
        })
        .optional()?)
}

/// Moves upload `id`'s `received` from `before` to `received`; false when it was no longer
/// `before`.
pub(crate) fn advance(conn: &Connection, id: &str, before: i64, received: i64, now: i64) -> ApiResult<bool> {
    Ok(conn
        .prepare_cached("UPDATE uploads SET received = ?2, updated_at = ?3 WHERE id = ?1 AND received = ?4")?
        .execute(params![id, received, now, before])?
        == 1)
}

/// Deletes upload `id`'s row.
pub(crate) fn delete(conn: &Connection, id: &str) -> ApiResult<()> {
    conn.prepare_cached("DELETE FROM uploads WHERE id = ?1")?.execute(params![id])?;
    Ok(())
}

/// Every upload's id, and whether it was last touched before `cutoff` (expired).
pub(crate) fn all(conn: &Connection, cutoff: i64) -> ApiResult<Vec<(String, bool)>> {
    let mut statement = conn.prepare_cached("SELECT id, updated_at < ?1 FROM uploads")?;
    let rows = statement.query_map(params![cutoff], |row| Ok((row.get(0)?, row.get(1)?)))?;
    Ok(rows.collect::<crate::db::Result<_>>()?)
}

/// Deletes upload `id`'s row if it is still expired (last touched before `cutoff`); how many
/// rows went (0 or 1).
pub(crate) fn delete_expired(conn: &Connection, id: &str, cutoff: i64) -> ApiResult<usize> {
    Ok(conn.prepare_cached("DELETE FROM uploads WHERE id = ?1 AND updated_at < ?2")?.execute(params![id, cutoff])?)
}
