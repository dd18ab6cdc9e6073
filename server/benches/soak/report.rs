//! What the soak counts, in memory that does not grow with the run: per action a log-linear
//! latency histogram (fixed size), a count and the failures by kind; totals every worker adds
//! to, for the once-a-second sampler.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::op::Op;

/// A request that takes longer than this is a failure (`timeout`), so a stuck request cannot
/// hold a worker past the end of the run.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Why an action failed.
#[derive(Debug)]
pub enum Failure {
    /// The server answered with a status other than 200 (the SDK's `Api`/`Decode`/426 errors).
    Status(u16, String),
    /// No HTTP answer (connection refused or reset, …).
    Transport(String),
    /// A 200 whose content is wrong (a replay that made another session, a verb's `error`, …).
    Wrong(String),
    /// Anything else the SDK reports (signing, an upload's source).
    Other(String),
    /// No answer within [`TIMEOUT`].
    Timeout,
}

impl Failure {
    /// The row this failure is counted under: `HTTP 503`, `transport`, `wrong answer`, ….
    fn kind(&self) -> String {
        match self {
            Failure::Status(status, _) => format!("HTTP {status}"),
            Failure::Transport(_) => "transport".to_owned(),
            Failure::Wrong(_) => "wrong answer".to_owned(),
            Failure::Other(_) => "other".to_owned(),
            Failure::Timeout => format!("timeout ({} s)", TIMEOUT.as_secs()),
        }
    }

    fn message(&self) -> String {
        match self {
            Failure::Status(_, message)
            | Failure::Transport(message)
            | Failure::Wrong(message)
            | Failure::Other(message) => message.clone(),
            Failure::Timeout => "no answer".to_owned(),
        }
    }
}

impl From<seed_agents_sdk::Error> for Failure {
    fn from(error: seed_agents_sdk::Error) -> Self {
        match (error.status(), &error) {
            (Some(status), _) => Failure::Status(status, error.to_string()),
            (None, seed_agents_sdk::Error::Transport(_)) => Failure::Transport(error.to_string()),
            (None, _) => Failure::Other(error.to_string()),
        }
    }
}

/// Latencies in microseconds, in buckets 1/64 of a power of two wide (values below 64 µs
/// exact): a percentile is within 1.6 % of the true one, and the size is fixed (18 KiB).
#[derive(Clone)]
pub struct Histogram {
    buckets: Box<[u64]>,
    count: u64,
    max: u64,
}

/// Sub-buckets per power of two (6 bits of precision).
const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;
/// Values are clamped below 2^40 µs (12 days).
const TOP_BITS: u32 = 40;
const BUCKETS: usize = (SUB + (TOP_BITS - SUB_BITS) as u64 * SUB) as usize;

impl Histogram {
    pub fn new() -> Self {
        Histogram { buckets: vec![0; BUCKETS].into_boxed_slice(), count: 0, max: 0 }
    }

    fn index(value: u64) -> usize {
        let value = value.min((1 << TOP_BITS) - 1);
        if value < SUB {
            return value as usize;
        }
        let exponent = 63 - value.leading_zeros(); // >= SUB_BITS
        let shift = exponent - SUB_BITS;
        let mantissa = (value >> shift) - SUB; // 0..SUB
        (SUB + u64::from(shift) * SUB + mantissa) as usize
    }

    /// The middle of bucket `index`, in µs.
    fn middle(index: usize) -> f64 {
        let index = index as u64;
        if index < SUB {
            return index as f64;
        }
        let shift = (index - SUB) / SUB;
        let mantissa = (index - SUB) % SUB;
        let low = (SUB + mantissa) << shift;
        low as f64 + ((1u64 << shift) as f64 - 1.0) / 2.0
    }

    pub fn record(&mut self, elapsed: Duration) {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.buckets[Self::index(micros)] += 1;
        self.count += 1;
        self.max = self.max.max(micros);
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *mine += theirs;
        }
        self.count += other.count;
        self.max = self.max.max(other.max);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// The `q` quantile (0..=1) in milliseconds; NaN when empty.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.count == 0 {
            return f64::NAN;
        }
        let rank = ((self.count as f64 * q).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (index, count) in self.buckets.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return (Self::middle(index) / 1000.0).min(self.max_ms());
            }
        }
        self.max_ms()
    }

    pub fn max_ms(&self) -> f64 {
        self.max as f64 / 1000.0
    }
}

/// One action's figures.
#[derive(Clone)]
pub struct OpTally {
    /// Latencies of the answers that were right.
    pub ok: Histogram,
    /// Failures by kind: how many, and the first message.
    pub failures: BTreeMap<String, (u64, String)>,
}

impl OpTally {
    fn new() -> Self {
        OpTally { ok: Histogram::new(), failures: BTreeMap::new() }
    }

    pub fn errors(&self) -> u64 {
        self.failures.values().map(|(count, _)| count).sum()
    }

    fn merge(&mut self, other: &OpTally) {
        self.ok.merge(&other.ok);
        for (kind, (count, first)) in &other.failures {
            let entry = self.failures.entry(kind.clone()).or_insert_with(|| (0, first.clone()));
            entry.0 += count;
        }
    }
}

/// Every action's figures (indexed by [`Op::index`]).
#[derive(Clone)]
pub struct Tally {
    pub ops: Vec<OpTally>,
}

impl Tally {
    pub fn new() -> Self {
        Tally { ops: Op::ALL.iter().map(|_| OpTally::new()).collect() }
    }

    pub fn merge(&mut self, other: &Tally) {
        for (mine, theirs) in self.ops.iter_mut().zip(&other.ops) {
            mine.merge(theirs);
        }
    }
}

/// Totals across workers, read by the sampler while the run goes on.
#[derive(Default)]
pub struct Shared {
    /// HTTP requests sent (an upload counts each of its begin, chunks and commit).
    pub requests: AtomicU64,
    /// Actions that failed.
    pub errors: AtomicU64,
}

/// A worker's own figures, and the shared totals it adds to.
pub struct Recorder {
    shared: Arc<Shared>,
    pub tally: Tally,
}

impl Recorder {
    pub fn new(shared: Arc<Shared>) -> Self {
        Recorder { shared, tally: Tally::new() }
    }

    /// Runs `call` (one request) as `op`, counting its latency when it succeeds and its kind of
    /// failure when not; answers what it returned when it succeeded.
    pub async fn timed<T, E>(&mut self, op: Op, call: impl Future<Output = Result<T, E>>) -> Option<T>
    where
        Failure: From<E>,
    {
        let started = Instant::now();
        let outcome = match tokio::time::timeout(TIMEOUT, call).await {
            Ok(outcome) => outcome.map_err(Failure::from),
            Err(_) => Err(Failure::Timeout),
        };
        let elapsed = started.elapsed();
        self.shared.requests.fetch_add(1, Ordering::Relaxed);
        let tally = &mut self.tally.ops[op.index()];
        match outcome {
            Ok(value) => {
                tally.ok.record(elapsed);
                Some(value)
            }
            Err(failure) => {
                self.shared.errors.fetch_add(1, Ordering::Relaxed);
                let entry = tally.failures.entry(failure.kind()).or_insert_with(|| (0, failure.message()));
                entry.0 += 1;
                None
            }
        }
    }

    /// Counts `count` more HTTP requests made inside one timed action (an upload's chunks).
    pub fn count_requests(&mut self, count: u64) {
        self.shared.requests.fetch_add(count, Ordering::Relaxed);
    }
}
