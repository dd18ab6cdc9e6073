//! The replay guard: refuses a byte-identical signed envelope seen before within the timestamp
//! window (upstream has no such guard; a captured request could be replayed for five minutes).
//!
//! Ed25519 signatures are deterministic, so the same signature means the same signed bytes. We
//! keep the first 16 bytes of each accepted signature until the envelope's `ts` leaves the
//! window (`ts + window`); after that the timestamp check refuses it anyway. Memory is bounded:
//! at most [`ReplayGuard::DEFAULT_CAPACITY`] entries (about 60 bytes each); when full, the entry
//! closest to expiry is dropped first and the eviction is counted (a flood of fresh signed
//! requests can then shorten protection for the oldest envelopes, never refuse a new one).
//!
//! Actions carrying `clientRequestId` / `clientMessageId` are not guarded here: a retry of those
//! is answered by idempotency replay instead.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Remembers recently accepted signatures.
#[derive(Debug)]
pub struct ReplayGuard {
    state: Mutex<State>,
    capacity: usize,
    evicted: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    /// Signature prefix → expiry (ms).
    seen: HashMap<u128, i64>,
    /// Expiry order, for pruning; may hold stale entries for prefixes already removed.
    expiries: BinaryHeap<Reverse<(i64, u128)>>,
}

impl ReplayGuard {
    /// The default bound on remembered signatures (about 60 MiB at most; a minute of 17,000 req/s).
    pub const DEFAULT_CAPACITY: usize = 1 << 20;

    /// A guard remembering at most `capacity` signatures.
    pub fn new(capacity: usize) -> Self {
        Self { state: Mutex::new(State::default()), capacity: capacity.max(1), evicted: AtomicU64::new(0) }
    }

    /// Records `signature` as used until `expires_at_ms`; `false` when it was already recorded
    /// and has not expired at `now_ms` (a replay).
    pub fn check_and_record(&self, signature: &[u8; 64], expires_at_ms: i64, now_ms: i64) -> bool {
        let mut prefix = [0u8; 16];
        prefix.copy_from_slice(&signature[..16]);
        let key = u128::from_le_bytes(prefix);
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        state.prune(now_ms);
        if let Some(expiry) = state.seen.get(&key)
            && *expiry >= now_ms
        {
            return false;
        }
        while state.seen.len() >= self.capacity {
            if !state.evict_one() {
                break;
            }
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
        state.seen.insert(key, expires_at_ms);
        state.expiries.push(Reverse((expires_at_ms, key)));
        true
    }

    /// How many signatures are remembered now.
    pub fn len(&self) -> usize {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).seen.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many entries were dropped before their expiry because the guard was full.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }
}

impl State {
    fn prune(&mut self, now_ms: i64) {
        while let Some(Reverse((expiry, key))) = self.expiries.peek().copied() {
            if expiry >= now_ms {
                break;
            }
            self.expiries.pop();
            if self.seen.get(&key) == Some(&expiry) {
                self.seen.remove(&key);
            }
        }
    }

    fn evict_one(&mut self) -> bool {
        while let Some(Reverse((expiry, key))) = self.expiries.pop() {
            if self.seen.get(&key) == Some(&expiry) {
                self.seen.remove(&key);
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(byte: u8) -> [u8; 64] {
        [byte; 64]
    }

    #[test]
    fn refuses_a_repeat_within_its_window_and_forgets_it_after() {
        let guard = ReplayGuard::new(16);
        assert!(guard.check_and_record(&sig(1), 1_000, 0));
        assert!(!guard.check_and_record(&sig(1), 1_000, 500));
        assert!(!guard.check_and_record(&sig(1), 1_000, 1_000));
        assert!(guard.check_and_record(&sig(2), 1_000, 500));
        // Past the expiry the entry is pruned (the timestamp check refuses such envelopes).
        assert!(guard.check_and_record(&sig(1), 5_000, 1_001));
        assert_eq!(guard.len(), 1);
    }

    #[test]
    fn stays_bounded_and_counts_evictions() {
        let guard = ReplayGuard::new(3);
        for byte in 0..10u8 {
            assert!(guard.check_and_record(&sig(byte), 10_000 + i64::from(byte), 0));
        }
        assert_eq!(guard.len(), 3);
        assert_eq!(guard.evicted(), 7);
        // The newest ones are still refused.
        assert!(!guard.check_and_record(&sig(9), 10_009, 1));
    }
}
