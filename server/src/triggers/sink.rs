//! Where the monitors hand what they decided: a [`TriggerMatch`] (this trigger, this event, this
//! deterministic firing key) goes to a [`FiringSink`], which records the firing and starts its
//! work. The sink is idempotent by `(trigger_id, firing_key)`: a second call with the same pair
//! answers `Ok(false)` and changes nothing, so a monitor may hand the same match twice (a restart
//! between firing and saving its progress, two polls racing, a comment and its citation twin)
//! and the trigger still fires once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use seed_agents_protocol::Value;
use seed_agents_protocol::generated::AgentActivityCondition;

use crate::error::ApiError;

/// One decision to fire one trigger for one event (a feed event or a schedule occurrence).
#[derive(Debug, Clone, PartialEq)]
pub struct TriggerMatch {
    /// The trigger that fires.
    pub trigger_id: String,
    /// What makes this firing unique for the trigger: `schedule:<triggerId>:<scheduledAt>`, or
    /// the feed event's key with a citation collapsed onto its comment (`blob-<cid>`).
    pub firing_key: String,
    /// The event the run is told about, as an IPLD map (what `trigger_firings.activity_cbor`
    /// and `AgentSessionTriggerContext.activity` hold): the feed event as the Hypermedia server
    /// sent it, or `{type: 'schedule', scheduleKind, scheduledAt, firedAt, timezone?}`.
    pub activity: BTreeMap<String, Value>,
    /// A short human summary of the event (session titles, `activitySummary`).
    pub summary: String,
    /// For a compound `activity` source, the conditions the event matched (at least one);
    /// `None` for every other source.
    pub matched_conditions: Option<Vec<AgentActivityCondition>>,
    /// When the monitor decided to fire, in Unix ms (the server clock).
    pub fired_at_ms: i64,
}

/// Records a firing and starts what it does. Implementations must be idempotent by
/// `(trigger_id, firing_key)` (a unique index): `Ok(true)` when this call created the firing,
/// `Ok(false)` when it already existed. An `Err` means nothing was recorded; the monitor keeps
/// its progress where it was and tries again on a later tick.
pub trait FiringSink: Send + Sync + std::fmt::Debug {
    /// Fires `found` once.
    fn fire(&self, found: TriggerMatch) -> BoxFuture<'_, Result<bool, ApiError>>;
}

/// An in-memory sink that records each firing once by `(trigger_id, firing_key)` and counts the
/// calls: the monitors' tests use it, and it shows the contract a real sink keeps.
#[derive(Debug, Default, Clone)]
pub struct MemorySink {
    inner: Arc<Mutex<MemoryState>>,
}

#[derive(Debug, Default)]
struct MemoryState {
    fired: Vec<TriggerMatch>,
    calls: usize,
    failing: bool,
}

impl MemorySink {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every firing recorded (first call per key), in order.
    pub fn fired(&self) -> Vec<TriggerMatch> {
        self.lock().fired.clone()
    }

    /// `(trigger_id, firing_key)` of every firing recorded, in order.
    pub fn keys(&self) -> Vec<(String, String)> {
        self.lock().fired.iter().map(|found| (found.trigger_id.clone(), found.firing_key.clone())).collect()
    }

    /// How many times `fire` was called (duplicates included).
    pub fn calls(&self) -> usize {
        self.lock().calls
    }

    /// Makes every following call fail (`true`) or succeed again (`false`).
    pub fn set_failing(&self, failing: bool) {
        self.lock().failing = failing;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryState> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl FiringSink for MemorySink {
    fn fire(&self, found: TriggerMatch) -> BoxFuture<'_, Result<bool, ApiError>> {
        let outcome = {
            let mut state = self.lock();
            state.calls += 1;
            if state.failing {
                Err(ApiError::unavailable("the firing sink is failing"))
            } else if state
                .fired
                .iter()
                .any(|seen| seen.trigger_id == found.trigger_id && seen.firing_key == found.firing_key)
            {
                Ok(false)
            } else {
                state.fired.push(found);
                Ok(true)
            }
        };
        Box::pin(async move { outcome })
    }
}
