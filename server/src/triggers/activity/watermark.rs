//! The activity monitor's durable progress, one row per (account, Hypermedia server) in
//! `activity_watermarks`: a [`Cursor`] (the keys already handled, and an unfinished walk down a
//! backlog), plus when it last polled, last succeeded, and the last error. Keying by server URL
//! means a new Hypermedia server starts with a fresh baseline.

use rusqlite::{OptionalExtension as _, params};
use seed_agents_protocol::wire;
use serde::{Deserialize, Serialize};

use crate::db::Db;
use crate::error::{ApiError, ApiResult};

/// What the monitor remembers of an account's feed, stored as CBOR
/// `{seenKeys: [..], backlog?: {pageToken, until: [..]}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// Keys of the events handled at the top of the feed, newest first.
    #[serde(rename = "seenKeys")]
    pub seen_keys: Vec<String>,
    /// A walk down the feed that ran out of pages before it met handled events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog: Option<Backlog>,
}

/// Where the walk through a backlog goes on, and where it ends.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backlog {
    /// The page token to continue from.
    #[serde(rename = "pageToken")]
    pub page_token: String,
    /// Keys of the newest events handled before the backlog arrived: meeting one ends it.
    pub until: Vec<String>,
}

/// One account's watermark row, as read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Watermark {
    /// `None` until a poll succeeded (no baseline yet).
    pub cursor: Option<Cursor>,
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
        let cursor = cursor.map(|bytes| wire::from_slice::<Cursor>(&bytes)).transpose().map_err(ApiError::internal)?;
        Ok(Watermark { cursor, last_poll_at, last_success_at, last_error })
    })
    .await
}

/// Stores `cursor` after a successful poll that started at `poll_at` and ended at `now`.
pub async fn save(db: &Db, account: &str, server: &str, cursor: &Cursor, poll_at: i64, now: i64) -> ApiResult<()> {
    let (account, server) = (account.to_owned(), server.to_owned());
    let cursor = wire::to_vec(cursor).map_err(ApiError::internal)?;
    db.write(move |conn| {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_cursor_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("w.sqlite")).unwrap();
        assert_eq!(load(&db, "a", "s").await.unwrap(), Watermark::default());
        record_error(&db, "a", "s", 1, "down".into()).await.unwrap();
        let failed = load(&db, "a", "s").await.unwrap();
        assert_eq!((failed.cursor, failed.last_error.as_deref()), (None, Some("down")));
        let cursor = Cursor {
            seen_keys: vec!["k2".into(), "k1".into()],
            backlog: Some(Backlog { page_token: "t".into(), until: vec!["k0".into()] }),
        };
        save(&db, "a", "s", &cursor, 2, 3).await.unwrap();
        let saved = load(&db, "a", "s").await.unwrap();
        assert_eq!(
            saved,
            Watermark { cursor: Some(cursor), last_poll_at: Some(2), last_success_at: Some(3), last_error: None }
        );
        save(&db, "a", "s", &Cursor::default(), 4, 5).await.unwrap();
        assert_eq!(load(&db, "a", "s").await.unwrap().cursor, Some(Cursor::default()));
        assert_eq!(load(&db, "a", "other server").await.unwrap(), Watermark::default());
    }
}
