//! The activity monitor's durable progress, one row per (account, Hypermedia server) in
//! `activity_watermarks`: a [`Cursor`] (the keys already handled, and an unfinished walk down a
//! backlog), plus when it last polled, last succeeded, and the last error. Keying by server URL
//! means a new Hypermedia server starts with a fresh baseline.

use crate::db::Db;
use crate::error::ApiResult;
use crate::triggers::store;
pub use crate::triggers::store::{Backlog, Cursor, Watermark};

/// The row of `account` on `server` (all `None` when there is none).
pub async fn load(db: &Db, account: &str, server: &str) -> ApiResult<Watermark> {
    let (account, server) = (account.to_owned(), server.to_owned());
    db.read(move |conn| store::watermark(conn, &account, &server)).await
}

/// Stores `cursor` after a successful poll that started at `poll_at` and ended at `now`.
pub async fn save(db: &Db, account: &str, server: &str, cursor: &Cursor, poll_at: i64, now: i64) -> ApiResult<()> {
    let (account, server, cursor) = (account.to_owned(), server.to_owned(), cursor.clone());
    db.write(move |conn| store::save_watermark(conn, &account, &server, &cursor, poll_at, now)).await
}

/// Records a failed poll. A row that did not exist is created without a cursor, so the next
/// successful poll still takes the baseline instead of replaying what the feed holds.
pub async fn record_error(db: &Db, account: &str, server: &str, poll_at: i64, message: String) -> ApiResult<()> {
    let (account, server) = (account.to_owned(), server.to_owned());
    db.write(move |conn| store::record_watermark_error(conn, &account, &server, poll_at, &message)).await
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
