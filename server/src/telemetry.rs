//! What the server counts for `/metrics` (server/README.md, "Metrics"): counters and histograms
//! as plain atomics, so recording one on the request path is a few relaxed atomic adds and never
//! a lock. `http::metrics` reads them (and the gauges it computes at scrape time) and writes the
//! Prometheus text format.
//!
//! Every label value is from a closed set known at build time (an action name of the protocol, an
//! HTTP status, an error kind): no account, agent or session id is ever a label.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A monotonic count.
#[derive(Debug, Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    /// Adds one.
    pub(crate) fn inc(&self) {
        self.add(1);
    }

    /// Adds `n`.
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The count now.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Upper bounds (seconds) of the latency histograms: 1 ms to 60 s.
pub(crate) const LATENCY_BUCKETS: &[f64] =
    &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// Upper bounds of the writer's batch sizes (writes per commit; the writer takes at most 256).
pub(crate) const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// A histogram over fixed bucket bounds: one atomic per bucket (not cumulative; the encoder sums
/// them), a count and a sum kept in millionths of the unit (microseconds for seconds).
#[derive(Debug)]
pub(crate) struct Histogram {
    bounds: &'static [f64],
    /// One per bound, plus the `+Inf` bucket.
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    sum_micros: AtomicU64,
}

/// What a [`Histogram`] holds at one moment, in the shape `prometheus-client` encodes (it sums
/// the buckets itself).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HistogramSnapshot {
    /// The sum of the observed values.
    pub sum: f64,
    /// How many were observed.
    pub count: u64,
    /// `(upper bound, count in this bucket alone)` per bound, the `+Inf` bucket last with
    /// `f64::MAX` as its bound.
    pub buckets: Vec<(f64, u64)>,
}

impl Histogram {
    /// An empty histogram over `bounds` (ascending).
    pub(crate) fn new(bounds: &'static [f64]) -> Self {
        let buckets = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        Self { bounds, buckets, count: AtomicU64::new(0), sum_micros: AtomicU64::new(0) }
    }

    /// Records one value.
    pub(crate) fn observe(&self, value: f64) {
        let at = self.bounds.iter().position(|bound| value <= *bound).unwrap_or(self.bounds.len());
        self.buckets[at].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add((value.max(0.0) * 1e6) as u64, Ordering::Relaxed);
    }

    /// Records a duration in seconds.
    pub(crate) fn observe_duration(&self, elapsed: Duration) {
        self.observe(elapsed.as_secs_f64());
    }

    /// How many values were recorded.
    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The buckets, the count and the sum. The atomics are read one by one, so a value recorded
    /// meanwhile may show in a bucket and not yet in the count; the count is taken as the sum of
    /// the buckets, so the two always agree.
    pub(crate) fn snapshot(&self) -> HistogramSnapshot {
        let buckets: Vec<(f64, u64)> = self
            .buckets
            .iter()
            .enumerate()
            .map(|(index, bucket)| {
                (self.bounds.get(index).copied().unwrap_or(f64::MAX), bucket.load(Ordering::Relaxed))
            })
            .collect();
        let count = buckets.iter().map(|(_, count)| count).sum();
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        HistogramSnapshot { sum, count, buckets }
    }
}

/// What the request path, the runtime and the triggers count (the store-backed gauges are read
/// at scrape time instead, and the database writer, the model client and the WebSockets keep
/// their own counts beside their state).
#[derive(Debug)]
pub(crate) struct Telemetry {
    /// Agent run executions (a turn, until it ends, parks or is stopped), in seconds.
    pub turns: Histogram,
    /// Trigger firings recorded, by what they started.
    pub trigger_firings: [Counter; FIRING_KINDS.len()],
}

/// What a trigger firing started: a new thread, a wake-up of a parked run, a workflow run.
pub(crate) const FIRING_KINDS: [&str; 3] = ["thread", "wake", "workflow"];
/// Where each kind sits in [`FIRING_KINDS`] (and in `Telemetry::trigger_firings`).
pub(crate) const FIRED_THREAD: usize = 0;
/// See [`FIRED_THREAD`].
pub(crate) const FIRED_WAKE: usize = 1;
/// See [`FIRED_THREAD`].
pub(crate) const FIRED_WORKFLOW: usize = 2;

impl Default for Telemetry {
    fn default() -> Self {
        Self { turns: Histogram::new(LATENCY_BUCKETS), trigger_firings: Default::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_count_apart_with_inf_last() {
        let histogram = Histogram::new(&[1.0, 2.0]);
        for value in [0.5, 1.0, 1.5, 3.0, 9.0] {
            histogram.observe(value);
        }
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.count, 5);
        assert_eq!(snapshot.buckets, vec![(1.0, 2), (2.0, 1), (f64::MAX, 2)]);
        assert!((snapshot.sum - 15.0).abs() < 1e-6);
    }
}
