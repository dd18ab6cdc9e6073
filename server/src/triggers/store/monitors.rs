//! The monitors' reads and progress: enabled triggers with their sources, the schedule state, the
//! activity watermarks.

use super::*;

/// An enabled trigger as a monitor reads it. Sources this build cannot decode are left out: they
/// are not sources it could run.
#[derive(Debug, Clone)]
pub(crate) struct Enabled {
    /// The trigger.
    pub id: String,
    /// Its owner.
    pub account_id: String,
    /// When it was created.
    pub created_at: i64,
    /// Its source.
    pub source: AgentTriggerSource,
}

fn enabled(rows: Vec<(String, String, i64, Vec<u8>)>) -> Vec<Enabled> {
    rows.into_iter()
        .filter_map(|(id, account_id, created_at, source)| {
            let source = wire::from_slice(&source).ok()?;
            Some(Enabled { id, account_id, created_at, source })
        })
        .collect()
}

/// The enabled triggers of `account_id` not merged into another (the run-completed candidates).
pub(crate) fn enabled_unmerged(conn: &Connection, account_id: &str) -> ApiResult<Vec<Enabled>> {
    let rows = conn
        .prepare_cached(
            "SELECT id, account_id, created_at, source_cbor FROM agent_triggers
             WHERE account_id = ?1 AND enabled = 1 AND merged_into IS NULL",
        )?
        .query_map(params![account_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))?
        .collect::<crate::db::Result<_>>()?;
    Ok(enabled(rows))
}

/// Enabled triggers (one account's, when given), oldest first.
pub(crate) fn enabled_triggers(conn: &Connection, account_id: Option<&str>) -> ApiResult<Vec<Enabled>> {
    let rows = conn
        .prepare_cached(
            "SELECT id, account_id, created_at, source_cbor FROM agent_triggers
             WHERE enabled = 1 AND (CAST(?1 AS TEXT) IS NULL OR account_id = ?1) ORDER BY created_at, id",
        )?
        .query_map([account_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))?
        .collect::<crate::db::Result<_>>()?;
    Ok(enabled(rows))
}

/// An enabled trigger with the schedule monitor's progress on it.
#[derive(Debug, Clone)]
pub(crate) struct Scheduled {
    /// The trigger and its source.
    pub trigger: Enabled,
    /// The last occurrence fired.
    pub last_scheduled_at: Option<i64>,
    /// Why it last failed.
    pub last_error: Option<String>,
}

/// Every enabled trigger, oldest first, with the schedule monitor's progress.
pub(crate) fn enabled_with_schedule_state(conn: &Connection) -> ApiResult<Vec<Scheduled>> {
    type Raw = (String, String, i64, Vec<u8>, Option<i64>, Option<String>);
    let rows: Vec<Raw> = conn
        .prepare_cached(
            "SELECT t.id, t.account_id, t.created_at, t.source_cbor, s.last_scheduled_at, t.last_error
             FROM agent_triggers t LEFT JOIN trigger_schedule_state s ON s.trigger_id = t.id
             WHERE t.enabled = 1 ORDER BY t.created_at, t.id",
        )?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?)))?
        .collect::<crate::db::Result<_>>()?;
    Ok(rows
        .into_iter()
        .filter_map(|(id, account_id, created_at, source, last_scheduled_at, last_error)| {
            let source = wire::from_slice(&source).ok()?;
            let trigger = Enabled { id, account_id, created_at, source };
            Some(Scheduled { trigger, last_scheduled_at, last_error })
        })
        .collect())
}

/// Stamps each of `ids` checked at `now`.
pub(crate) fn mark_checked(conn: &Connection, ids: &[String], now: i64) -> ApiResult<()> {
    let mut statement = conn.prepare_cached("UPDATE agent_triggers SET last_checked_at = ?1 WHERE id = ?2")?;
    for id in ids {
        statement.execute(params![now, id])?;
    }
    Ok(())
}

/// Whether trigger `id` exists.
pub(crate) fn exists(conn: &Connection, id: &str) -> ApiResult<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM agent_triggers WHERE id = ?1")?
        .query_row(params![id], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Records schedule occurrence `scheduled_at` of trigger `id` fired (so it is never due again).
pub(crate) fn save_schedule_state(conn: &Connection, id: &str, scheduled_at: i64, now: i64) -> ApiResult<()> {
    conn.prepare_cached(
        "INSERT INTO trigger_schedule_state (trigger_id, last_scheduled_at, updated_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (trigger_id) DO UPDATE SET last_scheduled_at = excluded.last_scheduled_at,
                                                updated_at = excluded.updated_at",
    )?
    .execute(params![id, scheduled_at, now])?;
    Ok(())
}

/// Stamps scheduled trigger `id` fired at `now`, its error cleared, and disabled when `once`.
pub(crate) fn mark_schedule_fired(conn: &Connection, id: &str, once: bool, now: i64) -> ApiResult<()> {
    conn.prepare_cached(
        "UPDATE agent_triggers SET last_fired_at = ?2, last_error = NULL,
                enabled = CASE WHEN ?3 <> 0 THEN 0 ELSE enabled END
         WHERE id = ?1",
    )?
    .execute(params![id, now, once])?;
    Ok(())
}

/// Records why trigger `id` last failed.
pub(crate) fn set_last_error(conn: &Connection, id: &str, message: &str) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET last_error = ?2 WHERE id = ?1")?.execute(params![id, message])?;
    Ok(())
}

/// What the activity monitor remembers of an account's feed, stored as CBOR
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

/// The watermark of `account` on `server` (all `None` when there is none).
pub(crate) fn watermark(conn: &Connection, account: &str, server: &str) -> ApiResult<Watermark> {
    Ok(conn
        .prepare_cached(
            "SELECT cursor_cbor, last_poll_at, last_success_at, last_error FROM activity_watermarks
             WHERE account_id = ?1 AND server_url = ?2",
        )?
        .query_row(params![account, server], |row| {
            Ok(Watermark {
                cursor: row.get::<_, Option<Cbor<Cursor>>>(0)?.map(|Cbor(cursor)| cursor),
                last_poll_at: row.get(1)?,
                last_success_at: row.get(2)?,
                last_error: row.get(3)?,
            })
        })
        .optional()?
        .unwrap_or_default())
}

/// Stores `cursor` after a successful poll that started at `poll_at` and ended at `now`.
pub(crate) fn save_watermark(
    conn: &Connection,
    account: &str,
    server: &str,
    cursor: &Cursor,
    poll_at: i64,
    now: i64,
) -> ApiResult<()> {
    conn.prepare_cached(
        "INSERT INTO activity_watermarks (account_id, server_url, cursor_cbor, last_poll_at, last_success_at, last_error)
         VALUES (?1, ?2, ?3, ?4, ?5, NULL)
         ON CONFLICT (account_id, server_url) DO UPDATE SET cursor_cbor = excluded.cursor_cbor,
             last_poll_at = excluded.last_poll_at, last_success_at = excluded.last_success_at, last_error = NULL",
    )?
    .execute(params![account, server, Cbor(cursor), poll_at, now])?;
    Ok(())
}

/// Records a failed poll; a row that did not exist is created without a cursor.
pub(crate) fn record_watermark_error(
    conn: &Connection,
    account: &str,
    server: &str,
    poll_at: i64,
    message: &str,
) -> ApiResult<()> {
    conn.prepare_cached(
        "INSERT INTO activity_watermarks (account_id, server_url, cursor_cbor, last_poll_at, last_error)
         VALUES (?1, ?2, NULL, ?3, ?4)
         ON CONFLICT (account_id, server_url) DO UPDATE SET last_poll_at = excluded.last_poll_at,
             last_error = excluded.last_error",
    )?
    .execute(params![account, server, poll_at, message])?;
    Ok(())
}
