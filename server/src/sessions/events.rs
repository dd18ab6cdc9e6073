//! A session's durable events: appending one with the next `seq`, reading them back in order,
//! and announcing appends after their commit (ARCHITECTURE.md rule 5).
//!
//! Every feature that writes to a session's log (user verbs today, the runtime next) appends
//! through [`append`] inside its write transaction and, once that committed, calls
//! [`announce`]: the WebSocket hub delivers each event as an `append` frame and the account hears
//! a `session-event` change.

use std::sync::Arc;

use crate::db::Connection;
use seed_agents_protocol::generated::{SessionEvent, SessionEventPayload};

use super::store;
use crate::bus::{Bus, ChangeReason, Event, SessionFrame};
use crate::error::ApiResult;

/// Appends `payload` to `session_id` with the next `seq` (inside the caller's write transaction,
/// so there is no gap and no duplicate) and returns the event as clients see it.
pub(crate) fn append(
    conn: &Connection,
    session_id: &str,
    payload: SessionEventPayload,
    now: i64,
) -> ApiResult<SessionEvent> {
    let seq = store::next_seq(conn, session_id)?;
    let id = uuid::Uuid::now_v7().to_string();
    store::insert_event(conn, &id, session_id, seq, &payload, now)?;
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
    store::events_after(conn, session_id, after, before, limit.unwrap_or(i64::MAX))
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
    let mut events = store::events_before(conn, session_id, after, before, limit + 1)?;
    let more = events.len() as i64 > limit;
    events.truncate(limit.max(0) as usize);
    events.reverse();
    Ok((events, more))
}

/// After the commit that appended `events` to a session of `agent_id` (stored under `owner_id`):
/// each goes out as an append and the owner hears `session-event` once per event. An append is
/// not a session change (upstream sends none for it either: its clients refetch on every
/// `change`); status and title changes are announced where they happen.
pub(crate) fn announce(bus: &Bus, owner_id: &str, agent_id: &str, events: Vec<SessionEvent>) {
    for same_session in events.chunk_by(|a, b| a.session_id == b.session_id) {
        bus.to_session(&same_session[0].session_id, SessionFrame::Appends(same_session));
    }
    for event in events {
        let session_id = event.session_id.clone();
        bus.publish(Event::SessionAppended {
            owner_id: owner_id.to_owned(),
            agent_id: agent_id.to_owned(),
            event: Arc::new(event),
        });
        bus.account_change(owner_id, ChangeReason::SessionEvent, Some(agent_id), Some(&session_id));
    }
}
