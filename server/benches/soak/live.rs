//! Each worker's session is followed over a WebSocket (the SDK's subscription, signed by the
//! worker's writer collaborator): what it delivered is counted here, and its last `seq` is where
//! the worker's `GetSession` reads from.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use futures_util::StreamExt as _;
use seed_agents_sdk::Client;
use seed_agents_sdk::subscription::Event;

/// What one subscription has seen.
#[derive(Default)]
pub struct Live {
    last_seq: AtomicI64,
    pub appends: AtomicU64,
    /// Appends whose `seq` was not one past the last (the SDK promises none).
    pub out_of_order: AtomicU64,
    pub disconnects: AtomicU64,
    pub errors: AtomicU64,
    pub first_problem: Mutex<Option<String>>,
}

impl Live {
    /// The last `seq` delivered (0 before any).
    pub fn last_seq(&self) -> i64 {
        self.last_seq.load(Ordering::Relaxed)
    }

    fn problem(&self, what: String) {
        let mut first = self.first_problem.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        first.get_or_insert(what);
    }
}

/// Follows `sessions/<session_id>` until the returned task is aborted (which drops the
/// subscription and closes its socket).
pub fn follow(client: &Client, session_id: &str, live: Arc<Live>) -> tokio::task::JoinHandle<()> {
    let mut events = client.subscribe(format!("sessions/{session_id}")).start();
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Append { event, .. }) => {
                    let last = live.last_seq.swap(event.seq, Ordering::Relaxed);
                    live.appends.fetch_add(1, Ordering::Relaxed);
                    if event.seq != last + 1 {
                        live.out_of_order.fetch_add(1, Ordering::Relaxed);
                        live.problem(format!("seq {} after {last}", event.seq));
                    }
                }
                Ok(Event::Disconnected { reason }) => {
                    live.disconnects.fetch_add(1, Ordering::Relaxed);
                    live.problem(format!("disconnected: {reason}"));
                }
                Ok(Event::Error { message, code, .. }) => {
                    live.errors.fetch_add(1, Ordering::Relaxed);
                    live.problem(format!("error frame: {message} ({code:?})"));
                }
                Ok(_) => {}
                Err(error) => {
                    live.errors.fetch_add(1, Ordering::Relaxed);
                    live.problem(format!("subscription ended: {error}"));
                    return;
                }
            }
        }
    })
}
