//! Requests answered, by action and status, with their latency (`/metrics`): kept by the edge
//! as it answers, read by the scrape (`metrics`).

use std::collections::HashMap;

use crate::error::ErrorKind;
use crate::telemetry::{Counter, Histogram, HistogramSnapshot, LATENCY_BUCKETS};

/// The label of a request whose action is not one of the protocol's (or was never read).
const OTHER_ACTION: &str = "other";

/// Requests by action and status, and their latency by action: one counter per pair and one
/// histogram per action, allocated up front, so recording is a map lookup and atomic adds.
#[derive(Debug)]
pub(crate) struct RequestStats {
    /// Action name -> index; the index one past the last is [`OTHER_ACTION`].
    actions: HashMap<&'static str, usize>,
    names: Vec<&'static str>,
    /// Every status `/api/message` can answer, `200` first.
    statuses: Vec<u16>,
    /// `names.len() × statuses.len()`, row by action.
    counts: Box<[Counter]>,
    /// One per action name.
    latency: Box<[Histogram]>,
}

impl Default for RequestStats {
    fn default() -> Self {
        let mut names: Vec<&'static str> =
            seed_agents_protocol::generated::ACTIONS.iter().map(|info| info.name).collect();
        names.push(OTHER_ACTION);
        let actions = names.iter().enumerate().map(|(index, name)| (*name, index)).collect();
        let mut statuses = vec![200];
        for kind in ErrorKind::ALL {
            let status = super::status::status(kind).as_u16();
            if !statuses.contains(&status) {
                statuses.push(status);
            }
        }
        let counts = (0..names.len() * statuses.len()).map(|_| Counter::default()).collect();
        let latency = names.iter().map(|_| Histogram::new(LATENCY_BUCKETS)).collect();
        Self { actions, names, statuses, counts, latency }
    }
}

impl RequestStats {
    /// Records one answered request.
    pub(crate) fn record(&self, action: Option<&str>, status: u16, elapsed: std::time::Duration) {
        let other = self.names.len() - 1;
        let row = action.and_then(|name| self.actions.get(name).copied()).unwrap_or(other);
        // A status outside the list (none today) is counted as a 500.
        let column = self
            .statuses
            .iter()
            .position(|each| *each == status)
            .unwrap_or_else(|| self.statuses.iter().position(|each| *each == 500).unwrap_or(0));
        self.counts[row * self.statuses.len() + column].inc();
        self.latency[row].observe_duration(elapsed);
    }

    /// `(action, status, count)` for every pair answered at least once.
    pub(crate) fn counts(&self) -> impl Iterator<Item = (&'static str, u16, u64)> + '_ {
        let width = self.statuses.len();
        self.counts.iter().enumerate().filter_map(move |(at, counter)| {
            let count = counter.get();
            (count > 0).then(|| (self.names[at / width], self.statuses[at % width], count))
        })
    }

    /// `(action, latency)` for every action answered at least once.
    pub(crate) fn latencies(&self) -> impl Iterator<Item = (&'static str, HistogramSnapshot)> + '_ {
        self.names
            .iter()
            .zip(self.latency.iter())
            .filter(|(_, histogram)| histogram.count() > 0)
            .map(|(name, histogram)| (*name, histogram.snapshot()))
    }
}
