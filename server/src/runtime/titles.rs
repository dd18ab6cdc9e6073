//! Automatic session titles in progress: how many attempts each session had, and whether one is
//! running (`title` makes them).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Tries per session per process.
pub(crate) const MAX_ATTEMPTS: u8 = 3;

/// Attempts made, and whether one is running, per session.
#[derive(Debug, Default)]
pub struct Titler {
    attempts: Mutex<HashMap<String, (u8, bool)>>,
}

impl Titler {
    /// Takes a try for `session_id` if one is left and none is running.
    pub(crate) fn begin(&self, session_id: &str) -> bool {
        let mut attempts = self.attempts.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = attempts.entry(session_id.to_owned()).or_insert((0, false));
        if entry.1 || entry.0 >= MAX_ATTEMPTS {
            return false;
        }
        *entry = (entry.0 + 1, true);
        true
    }

    pub(crate) fn end(&self, session_id: &str) {
        let mut attempts = self.attempts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = attempts.get_mut(session_id) {
            entry.1 = false;
        }
    }
}
