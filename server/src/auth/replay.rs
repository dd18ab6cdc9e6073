//! The replay guard: refuses a byte-identical signed write envelope seen before within the
//! timestamp window (upstream has no such guard; a captured request could be replayed for five
//! minutes).
//!
//! Ed25519 signatures are deterministic, so the same signature means the same signed bytes. We
//! keep the first 8 bytes of each accepted signature (a false "replay" among a million remembered
//! ones has odds of about 1 in 2^44) until the envelope's `ts` leaves the window (`ts + window`);
//! after that the timestamp check refuses it anyway. Entries sit in a set plus a ring of
//! one-second buckets by expiry, so pruning drops whole buckets and an entry costs about 25
//! bytes. Memory is bounded: at most [`ReplayGuard::DEFAULT_CAPACITY`] entries; when full, an
//! entry from the soonest-expiring bucket is dropped first and the eviction is counted (a flood
//! of fresh signed requests can then shorten protection for the oldest envelopes, never refuse a
//! new one).
//!
//! Which envelopes reach the guard is decided in [`super::verify`] (see "Which envelopes are
//! guarded" there): over HTTP only writes, and of those only ones without `clientRequestId` /
//! `clientMessageId` (a retry of those is answered by idempotency replay instead); reads are
//! answered again, since replaying one changes nothing. Over WebSocket every envelope is guarded,
//! so a captured `Subscribe` cannot be replayed to take over its stream. Reads over HTTP therefore
//! take no room here.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use seed_agents_protocol::envelope::TIMESTAMP_WINDOW_MS;

/// Seconds of expiry the ring covers: an accepted envelope expires within two windows of now
/// (`ts` is at most one window ahead, and it is kept one window past `ts`), plus slack.
const RING_SECONDS: i64 = 2 * TIMESTAMP_WINDOW_MS / 1000 + 2;

/// Remembers recently accepted signatures.
#[derive(Debug)]
pub(crate) struct ReplayGuard {
    state: Mutex<State>,
    capacity: usize,
    evicted: AtomicU64,
}

#[derive(Debug)]
struct State {
    /// Signature prefixes remembered now.
    seen: HashSet<u64>,
    /// `ring[s % RING_SECONDS]`: the prefixes expiring during second `s`.
    ring: Vec<Vec<u64>>,
    /// Every second up to and including this one has been pruned.
    pruned_through: i64,
}

impl ReplayGuard {
    /// The default bound on remembered signatures: about 25 MiB when full, a minute of
    /// 17,000 req/s (see the module doc for what happens past it).
    pub(crate) const DEFAULT_CAPACITY: usize = 1 << 20;

    /// A guard remembering at most `capacity` signatures.
    pub(crate) fn new(capacity: usize) -> Self {
        let state = State {
            seen: HashSet::new(),
            ring: (0..RING_SECONDS).map(|_| Vec::new()).collect(),
            pruned_through: i64::MIN,
        };
        Self { state: Mutex::new(state), capacity: capacity.max(1), evicted: AtomicU64::new(0) }
    }

    /// Records `signature` as used until `expires_at_ms`; `false` when it was already recorded
    /// and has not expired at `now_ms` (a replay).
    pub(crate) fn check_and_record(&self, signature: &[u8; 64], expires_at_ms: i64, now_ms: i64) -> bool {
        let mut prefix = [0u8; 8];
        prefix.copy_from_slice(&signature[..8]);
        let key = u64::from_le_bytes(prefix);
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        state.prune(now_ms.div_euclid(1000) - 1);
        if state.seen.contains(&key) {
            return false;
        }
        while state.seen.len() >= self.capacity {
            if !state.evict_oldest(now_ms.div_euclid(1000)) {
                break;
            }
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
        // Clamp into the ring's reach; the caller already refused timestamps outside the window.
        let second =
            expires_at_ms.div_euclid(1000).clamp(now_ms.div_euclid(1000), now_ms.div_euclid(1000) + RING_SECONDS - 2);
        state.seen.insert(key);
        state.ring[second.rem_euclid(RING_SECONDS) as usize].push(key);
        true
    }

    /// How many signatures are remembered now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).seen.len()
    }

    /// How many entries were dropped before their expiry because the guard was full.
    #[cfg(test)]
    fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }
}

impl State {
    /// Forgets every prefix expiring in a second up to and including `through`.
    fn prune(&mut self, through: i64) {
        if through <= self.pruned_through {
            return;
        }
        // After a long idle spell every bucket may be due: visit each at most once.
        let from = self.pruned_through.saturating_add(1).max(through - RING_SECONDS + 1);
        for second in from..=through {
            let bucket = &mut self.ring[second.rem_euclid(RING_SECONDS) as usize];
            for key in bucket.drain(..) {
                self.seen.remove(&key);
            }
            if bucket.capacity() > 4096 {
                bucket.shrink_to(4096);
            }
        }
        self.pruned_through = through;
    }

    /// Drops one prefix from the bucket that expires soonest.
    fn evict_oldest(&mut self, now_second: i64) -> bool {
        for second in now_second..now_second + RING_SECONDS {
            let bucket = &mut self.ring[second.rem_euclid(RING_SECONDS) as usize];
            if let Some(key) = bucket.pop() {
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
        assert!(guard.check_and_record(&sig(1), 10_000, 0));
        assert!(!guard.check_and_record(&sig(1), 10_000, 5_000));
        assert!(!guard.check_and_record(&sig(1), 10_000, 10_999));
        assert!(guard.check_and_record(&sig(2), 10_000, 5_000));
        // Past the expiry second the entry is pruned (the timestamp check refuses such envelopes).
        assert!(guard.check_and_record(&sig(1), 50_000, 12_000));
        assert_eq!(guard.len(), 1);
    }

    #[test]
    fn a_long_idle_spell_prunes_everything_once() {
        let guard = ReplayGuard::new(16);
        for byte in 0..5 {
            assert!(guard.check_and_record(&sig(byte), 300_000, 0));
        }
        assert!(guard.check_and_record(&sig(9), 100_000_000, 99_000_000));
        assert_eq!(guard.len(), 1);
    }

    #[test]
    fn stays_bounded_and_counts_evictions() {
        let guard = ReplayGuard::new(3);
        for byte in 0..10u8 {
            assert!(guard.check_and_record(&sig(byte), 10_000 + 1000 * i64::from(byte), 0));
        }
        assert_eq!(guard.len(), 3);
        assert_eq!(guard.evicted(), 7);
        // The newest ones are still refused.
        assert!(!guard.check_and_record(&sig(9), 19_000, 1));
    }
}
