//! Which sessions have a user verb executing right now.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::error::{ApiError, ApiResult};

/// The sessions where a user verb is executing right now (in memory: a crash clears it, and
/// nothing durable is left half-done by a verb that never logged). `MessageSession` refuses
/// while a session has one, so a turn never starts between a verb's work and its log entry.
#[derive(Debug, Default)]
pub struct InFlight {
    sessions: Mutex<HashMap<String, usize>>,
}

impl InFlight {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, usize>> {
        // A panic while counting cannot leave the map inconsistent: take it over.
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a verb on `session_id` until the guard drops.
    pub fn enter(&self, session_id: &str) -> InFlightGuard<'_> {
        *self.lock().entry(session_id.to_owned()).or_insert(0) += 1;
        InFlightGuard { in_flight: self, session_id: session_id.to_owned() }
    }

    /// 409 while a user verb executes on `session_id`.
    pub fn refuse_message(&self, session_id: &str) -> ApiResult<()> {
        if self.lock().get(session_id).is_some_and(|count| *count > 0) {
            return Err(ApiError::conflict(
                "A user tool action is still running in this thread; wait for it to finish",
            ));
        }
        Ok(())
    }
}

/// One user verb in flight.
#[derive(Debug)]
pub struct InFlightGuard<'a> {
    in_flight: &'a InFlight,
    session_id: String,
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        let mut sessions = self.in_flight.lock();
        if let Some(count) = sessions.get_mut(&self.session_id) {
            *count -= 1;
            if *count == 0 {
                sessions.remove(&self.session_id);
            }
        }
    }
}
