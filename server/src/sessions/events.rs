//! A session's durable events: appending one with the next `seq`, reading them back in order,
//! and announcing appends after their commit (ARCHITECTURE.md rule 5).
//!
//! Every feature that writes to a session's log (user verbs today, the runtime next) appends
//! through [`append`] inside its write transaction and, once that committed, calls
//! [`announce`]: the WebSocket hub delivers each event as an `append` frame and the account hears
//! a `session-event` change.

use std::sync::Arc;

use rusqlite::{Connection, params};
use seed_agents_protocol::generated::{SessionEvent, SessionEventPayload};
use seed_agents_protocol::wire;

use crate::bus::{Bus, ChangeReason, Event, SessionFrame};
use crate::error::{ApiError, ApiResult};

/// Appends `payload` to `session_id` with the next `seq` (inside the caller's write transaction,
/// so there is no gap and no duplicate) and returns the event as clients see it.
pub(crate) fn append(
    conn: &Connection,
    session_id: &str,
    payload: SessionEventPayload,
    now: i64,
) -> ApiResult<SessionEvent> {
    let seq: i64 = conn
        .prepare_cached("SELECT COALESCE(MAX(seq), 0) + 1 FROM session_events WHERE session_id = ?1")?
        .query_row(params![session_id], |row| row.get(0))?;
    let id = uuid::Uuid::now_v7().to_string();
    let bytes = wire::to_vec(&payload).map_err(ApiError::internal)?;
    conn.prepare_cached(
        "INSERT INTO session_events (id, session_id, seq, event_cbor, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![id, session_id, seq, bytes, now])?;
    Ok(SessionEvent {
        extra: Default::default(),
        created_at: now,
        event: payload,
        id: id.into(),
        seq,
        session_id: session_id.into(),
        truncated: None,
    })
}

/// Events of `session_id` with `after < seq < before`, oldest first; at most `limit` of them
/// (the oldest), or all with `None`.
pub(crate) fn after(
    conn: &Connection,
    session_id: &str,
    after: i64,
    before: i64,
    limit: Option<i64>,
) -> ApiResult<Vec<SessionEvent>> {
    let mut statement = conn.prepare_cached(
        "SELECT id, seq, event_cbor, created_at FROM session_events
         WHERE session_id = ?1 AND seq > ?2 AND seq < ?3 ORDER BY seq LIMIT +?4",
    )?;
    let rows = statement.query_map(params![session_id, after, before, limit.unwrap_or(-1)], raw_event)?;
    rows.map(|row| decode(session_id, row?)).collect()
}

/// The newest `limit` events of `session_id` with `after < seq < before`, oldest first, and
/// whether older ones remain in that range.
pub(crate) fn tail(
    conn: &Connection,
    session_id: &str,
    after: i64,
    before: i64,
    limit: i64,
) -> ApiResult<(Vec<SessionEvent>, bool)> {
    let mut statement = conn.prepare_cached(
        "SELECT id, seq, event_cbor, created_at FROM session_events
         WHERE session_id = ?1 AND seq > ?2 AND seq < ?3 ORDER BY seq DESC LIMIT +?4",
    )?;
    let rows = statement.query_map(params![session_id, after, before, limit + 1], raw_event)?;
    let mut events = rows.map(|row| decode(session_id, row?)).collect::<ApiResult<Vec<_>>>()?;
    let more = events.len() as i64 > limit;
    events.truncate(limit.max(0) as usize);
    events.reverse();
    Ok((events, more))
}

/// `(id, seq, event_cbor, created_at)` of a `session_events` row selected in that order.
type RawEvent = (String, i64, Vec<u8>, i64);

fn raw_event(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawEvent> {
    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
}

fn decode(session_id: &str, (id, seq, bytes, created_at): RawEvent) -> ApiResult<SessionEvent> {
    let event = wire::from_slice(&bytes).map_err(ApiError::internal)?;
    Ok(SessionEvent {
        extra: Default::default(),
        created_at,
        event,
        id: id.into(),
        seq,
        session_id: session_id.into(),
        truncated: None,
    })
}

/// After the commit that appended `events` to a session of `agent_id` (stored under `owner_id`):
/// each goes out as an append and the owner hears `session-event` once per event. An append is
/// not a session change (upstream sends none for it either: its clients refetch on every
/// `change`); status and title changes are announced where they happen.
pub(crate) fn announce(bus: &Bus, owner_id: &str, agent_id: &str, events: Vec<SessionEvent>) {
    for event in events {
        let session_id = event.session_id.clone();
        bus.to_session(&session_id, SessionFrame::Append(&event));
        bus.publish(Event::SessionAppended {
            owner_id: owner_id.to_owned(),
            agent_id: agent_id.to_owned(),
            event: Arc::new(event),
        });
        bus.account_change(owner_id, ChangeReason::SessionEvent, Some(agent_id), Some(&session_id));
    }
}
