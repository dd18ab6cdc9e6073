//! The activity monitor's durable progress, one row per (account, Hypermedia server) in
//! `activity_watermarks`: the keys of the feed events already handled, newest first, as CBOR
//! `{seenKeys: [..]}`, plus when it last polled, last succeeded, and the last error.
//!
//! Keys are merged into the stored list inside one write (never overwritten with a copy read
//! earlier), so two polls of one account racing each other cannot forget what the other saw.
//! Keying by server URL means a new Hypermedia server starts with a fresh baseline.

use rusqlite::{Connection, OptionalExtension as _, params};
use serde::{Deserialize, Serialize};
use seed_agents_protocol::wire;

use crate::db::Db;
use crate::error::{ApiError, ApiResult};

/// The stored cursor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Cursor {
    #[serde(rename = "seenKeys")]
    seen_keys: Vec<String>,
}

/// One account's watermark row, as read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Watermark {
    /// The keys already handled, newest first; `None` until a poll succeeded (no baseline yet).
    pub seen_keys: Option<Vec<String>>,
    /// When a poll last started.
    pub last_poll_at: Option<i64>,
    /// When a poll last succeeded.
    pub last_success_at: Option<i64>,
    /// Why the last poll failed (cleared by a success).
    pub last_error: Option<String>,
}

/// The row of `account` on `server` (all `None` when there is none).
pub async fn load(db: &Db, account: &str, server: &str) -> ApiResult<Watermark> {
    let (account, server) = (account.to_owned(), server.to_owned());
    db.read(move |conn| {
        let row = conn
            .prepare_cached(
                "SELECT cursor_cbor, last_poll_at, last_success_at, last_error FROM activity_watermarks
                 WHERE account_id = ?1 AND server_url = ?2",
            )?
            .query_row(params![account, server], |row| {
                Ok((row.get::<_, Option<Vec<u8>>>(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .optional()?;
        let Some((cursor, last_poll_at, last_success_at, last_error)) = row else { return Ok(Watermark::default()) };
        let seen_keys = cursor.map(|bytes| decode(&bytes)).transpose()?;
        Ok(Watermark { seen_keys, last_poll_at, last_success_at, last_error })
    })
    .await
}

/// Adds `keys` (newest last, as they were handled) to the front of the stored list, keeps the
/// newest `cap`, and records a success at `now`. Creates the row (the baseline) if needed.
pub async fn mark_seen(
    db: &Db,
    account: &str,
    server: &str,
    keys: Vec<String>,
    cap: usize,
    poll_at: i64,
    now: i64,
) -> ApiResult<()> {
    let (account, server) = (account.to_owned(), server.to_owned());
    db.write(move |conn| {
        let mut seen = stored(conn, &account, &server)?.unwrap_or_default();
        for key in keys {
            seen.retain(|known| *known != key);
            seen.insert(0, key);
        }
        seen.truncate(cap);
        let cursor = wire::to_vec(&Cursor { seen_keys: seen }).map_err(ApiError::internal)?;
        conn.prepare_cached(
            "INSERT INTO activity_watermarks (account_id, server_url, cursor_cbor, last_poll_at, last_success_at, last_error)
             VALUES (?1, ?2, ?3, ?4, ?5, NULL)
             ON CONFLICT (account_id, server_url) DO UPDATE SET cursor_cbor = excluded.cursor_cbor,
                 last_poll_at = excluded.last_poll_at, last_success_at = excluded.last_success_at, last_error = NULL",
        )?
        .execute(params![account, server, cursor, poll_at, now])?;
        Ok(())
    })
    .await
}

/// Records a failed poll. A row that did not exist is created without a cursor, so the next
/// successful poll still takes the baseline instead of replaying what the feed holds.
pub async fn record_error(db: &Db, account: &str, server: &str, poll_at: i64, message: String) -> ApiResult<()> {
    let (account, server) = (account.to_owned(), server.to_owned());
    db.write(move |conn| {
        conn.prepare_cached(
            "INSERT INTO activity_watermarks (account_id, server_url, cursor_cbor, last_poll_at, last_error)
             VALUES (?1, ?2, NULL, ?3, ?4)
             ON CONFLICT (account_id, server_url) DO UPDATE SET last_poll_at = excluded.last_poll_at,
                 last_error = excluded.last_error",
        )?
        .execute(params![account, server, poll_at, message])?;
        Ok(())
    })
    .await
}

fn stored(conn: &Connection, account: &str, server: &str) -> ApiResult<Option<Vec<String>>> {
    let cursor: Option<Option<Vec<u8>>> = conn
        .prepare_cached("SELECT cursor_cbor FROM activity_watermarks WHERE account_id = ?1 AND server_url = ?2")?
        .query_row(params![account, server], |row| row.get(0))
        .optional()?;
    cursor.flatten().map(|bytes| decode(&bytes)).transpose()
}

fn decode(bytes: &[u8]) -> ApiResult<Vec<String>> {
    wire::from_slice::<Cursor>(bytes).map(|cursor| cursor.seen_keys).map_err(ApiError::internal)
}
