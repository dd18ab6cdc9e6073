//! The `run_journal` table: a workflow run's journal entries in `seq` order (docs/workflows.md).
//! An entry is stored as the DAG-CBOR map it is on the wire (`RunJournalEntryInfo.entry`); the
//! workflow feature gives the maps their types, this store only keeps and pages them.

use crate::db::{Connection, OptionalExtension, params};
use ipld_core::ipld::Ipld;
use seed_agents_protocol::Value;
use seed_agents_protocol::generated::RunJournalEntryInfo;

use crate::db::{Cbor, Generic};

/// Appends `entry` to run `run_id`'s journal with the next `seq`; returns the entry as the
/// protocol shows it. Inside the caller's write transaction, so `seq` has no gap.
pub(crate) fn append_entry(
    conn: &Connection,
    run_id: &str,
    entry: Ipld,
    now_ms: i64,
) -> crate::db::Result<RunJournalEntryInfo> {
    let seq: i64 = conn
        .prepare_cached("SELECT COALESCE(MAX(seq), 0) + 1 FROM run_journal WHERE run_id = ?1")?
        .query_row(params![run_id], |row| row.get(0))?;
    let entry = Generic(entry);
    conn.prepare_cached("INSERT INTO run_journal (run_id, seq, entry_cbor, created_at) VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![run_id, seq, Cbor(&entry), now_ms])?;
    Ok(info(run_id, seq, entry.0, now_ms))
}

/// Run `run_id`'s entries with `seq > after_seq`, in order, at most `limit` (all with `None`).
pub(crate) fn journal_after(
    conn: &Connection,
    run_id: &str,
    after_seq: i64,
    limit: Option<i64>,
) -> crate::db::Result<Vec<RunJournalEntryInfo>> {
    conn.prepare_cached(
        "SELECT seq, entry_cbor, created_at FROM run_journal WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT +?3",
    )?
    .query_map(params![run_id, after_seq, limit.unwrap_or(i64::MAX)], |row| {
        let Cbor(Generic(entry)) = row.get::<_, Cbor<Generic>>(1)?;
        Ok(info(run_id, row.get(0)?, entry, row.get(2)?))
    })?
    .collect()
}

/// How many entries run `run_id`'s journal has and their stored size in bytes.
pub(crate) fn journal_size(conn: &Connection, run_id: &str) -> crate::db::Result<(i64, i64)> {
    conn.prepare_cached("SELECT COUNT(*), COALESCE(SUM(LENGTH(entry_cbor)), 0) FROM run_journal WHERE run_id = ?1")?
        .query_row(params![run_id], |row| Ok((row.get(0)?, row.get(1)?)))
}

fn info(run_id: &str, seq: i64, entry: Ipld, created_at: i64) -> RunJournalEntryInfo {
    let entry = match entry {
        Ipld::Map(fields) => fields.into_iter().map(|(key, value)| (key, Value(value))).collect(),
        // Every entry is written as a map; anything else is kept under one key, not dropped.
        other => [("value".to_owned(), Value(other))].into_iter().collect(),
    };
    RunJournalEntryInfo { extra: Default::default(), created_at, entry, run_id: run_id.into(), seq }
}

/// A workflow run's pinned script and where its effects act: `(source, nearest session)`, the
/// session being the closest one up its chain of parents (a script has none of its own).
pub(crate) fn workflow_source(conn: &Connection, run_id: &str) -> crate::db::Result<Option<(String, Option<String>)>> {
    let source: Option<Option<String>> = conn
        .prepare_cached("SELECT source_text FROM runs WHERE id = ?1 AND kind = 'workflow'")?
        .query_row(params![run_id], |row| row.get(0))
        .optional()?;
    let Some(Some(source)) = source else { return Ok(None) };
    let session = conn
        .prepare_cached(
            "WITH RECURSIVE up(id, parent, session, hops) AS (
               SELECT id, parent_run_id, session_id, 0 FROM runs WHERE id = ?1
               UNION ALL
               SELECT r.id, r.parent_run_id, r.session_id, up.hops + 1 FROM runs r JOIN up ON r.id = up.parent
                WHERE up.session IS NULL AND up.hops < 32)
             SELECT session FROM up WHERE session IS NOT NULL ORDER BY hops LIMIT 1",
        )?
        .query_row(params![run_id], |row| row.get(0))
        .optional()?;
    Ok(Some((source, session)))
}
