//! The server's clock, injectable so tests control time (timestamps, windows, expiry).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// Milliseconds since the Unix epoch: the system clock, or a manual one tests set.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    manual: Option<Arc<AtomicI64>>,
}

impl Clock {
    /// The system clock.
    pub fn system() -> Self {
        Self { manual: None }
    }

    /// A clock that reads `start_ms` until [`Clock::set`] or [`Clock::advance`] moves it.
    pub fn manual(start_ms: i64) -> Self {
        Self { manual: Some(Arc::new(AtomicI64::new(start_ms))) }
    }

    /// Now, in ms.
    pub fn now_ms(&self) -> i64 {
        match &self.manual {
            Some(now) => now.load(Ordering::SeqCst),
            None => system_now_ms(),
        }
    }

    /// Sets a manual clock (no effect on the system clock).
    pub fn set(&self, now_ms: i64) {
        if let Some(now) = &self.manual {
            now.store(now_ms, Ordering::SeqCst);
        }
    }

    /// Moves a manual clock forward (no effect on the system clock).
    pub fn advance(&self, ms: i64) {
        if let Some(now) = &self.manual {
            now.fetch_add(ms, Ordering::SeqCst);
        }
    }
}

fn system_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
}
