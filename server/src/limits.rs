//! Per-account rate limits (server/README.md, "Rate limits"): a token bucket per account for
//! writes, for turns (`MessageSession`, `RetrySession`), for upload requests and for bytes of
//! file content, through `governor` (GCRA, keyed by account in a sharded map). Reads are never
//! limited. A refusal is [`ErrorKind::TooMany`] with code `rate_limited` and the seconds to wait,
//! decided before the action runs, so a refused request changed nothing and any client may send
//! it again after that wait.
//!
//! The buckets of accounts idle long enough to be full again are dropped by
//! [`RateLimits::forget_idle`], which the wiring runs every minute, so the maps hold only the
//! accounts active lately however many keys sign.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::Clock as _;
use governor::{DefaultKeyedRateLimiter, Quota};
use seed_agents_protocol::{ActionInfo, Effect};

use crate::config::Config;
use crate::error::{ApiError, ApiResult, ErrorKind};

/// The `code` of a rate-limit refusal.
pub(crate) const RATE_LIMITED: &str = seed_agents_protocol::codes::RATE_LIMITED;
/// The message of a rate-limit refusal.
pub(crate) const TOO_MANY_REQUESTS: &str = "Too many requests; try again later";
/// Bytes per cell of the file-content bucket (its counts are `u32`; KiB cells reach 4 TiB).
const BYTES_PER_CELL: u64 = 1024;

/// Which bucket an action draws on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bucket {
    /// Any write that is not a turn or an upload.
    Writes,
    /// `MessageSession`, `RetrySession`.
    Turns,
    /// The chunked upload actions and `UploadSessionAttachment`.
    Uploads,
    /// Bytes of file content.
    MemoryBytes,
}

impl Bucket {
    /// Every bucket, in the order of [`RateLimits::refused`].
    pub(crate) const ALL: [Self; 4] = [Self::Writes, Self::Turns, Self::Uploads, Self::MemoryBytes];

    /// The bucket's name (the `bucket` label of `/metrics`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Writes => "writes",
            Self::Turns => "turns",
            Self::Uploads => "uploads",
            Self::MemoryBytes => "memory_bytes",
        }
    }
}

/// The request bucket an action draws on (`None` for a read).
pub(crate) fn bucket_of(action: &str) -> Option<Bucket> {
    match action {
        "MessageSession" | "RetrySession" => Some(Bucket::Turns),
        "BeginFileUpload"
        | "AppendFileUploadChunk"
        | "CommitFileUpload"
        | "AbortFileUpload"
        | "UploadSessionAttachment" => Some(Bucket::Uploads),
        // An action this build does not know counts as a write (as for the replay guard).
        name => match ActionInfo::find(name).map_or(Effect::Write, |info| info.effect) {
            Effect::Read => None,
            Effect::Write => Some(Bucket::Writes),
        },
    }
}

/// Whether an action's body is file content that counts against the byte bucket.
fn carries_file_content(action: &str) -> bool {
    matches!(action, "WriteAgentMemoryFile" | "AppendFileUploadChunk" | "UploadSessionAttachment")
}

/// The buckets of every account; `None` where the flag says unlimited.
#[derive(Debug)]
pub(crate) struct RateLimits {
    writes: Option<DefaultKeyedRateLimiter<String>>,
    turns: Option<DefaultKeyedRateLimiter<String>>,
    uploads: Option<DefaultKeyedRateLimiter<String>>,
    memory_bytes: Option<DefaultKeyedRateLimiter<String>>,
    /// Refusals so far, per bucket (in [`Bucket::ALL`]'s order), for `/metrics`.
    refused: [crate::telemetry::Counter; 4],
}

/// A quota of `per_second` sustained with `burst` at once (`None`: unlimited).
fn per_second(per_second: u32, burst: u32) -> Option<Quota> {
    let rate = NonZeroU32::new(per_second)?;
    let burst = NonZeroU32::new(burst).unwrap_or(rate);
    Some(Quota::per_second(rate).allow_burst(burst))
}

/// A quota of `cells` per hour sustained with `burst` cells at once (`None`: unlimited).
fn per_hour(cells: u64, burst: u64) -> Option<Quota> {
    let cells = NonZeroU32::new(u32::try_from(cells).unwrap_or(u32::MAX))?;
    let period = Duration::from_secs(3600) / cells.get();
    let burst = NonZeroU32::new(u32::try_from(burst).unwrap_or(u32::MAX)).unwrap_or(cells);
    Some(Quota::with_period(period.max(Duration::from_nanos(1)))?.allow_burst(burst))
}

impl RateLimits {
    /// The buckets the configuration asks for.
    pub(crate) fn new(config: &Config) -> Self {
        let keyed = |quota: Option<Quota>| quota.map(DefaultKeyedRateLimiter::<String>::dashmap);
        // A bucket smaller than the largest body would refuse that body forever.
        let bytes_burst = config.rate_memory_bytes_burst.max(config.max_body_bytes as u64);
        Self {
            writes: keyed(per_second(config.rate_writes_per_second, config.rate_writes_burst)),
            turns: keyed(per_second(config.rate_turns_per_second, config.rate_turns_burst)),
            uploads: keyed(per_second(config.rate_uploads_per_second, config.rate_uploads_burst)),
            memory_bytes: keyed(per_hour(
                config.rate_memory_bytes_per_hour.div_ceil(BYTES_PER_CELL),
                bytes_burst.div_ceil(BYTES_PER_CELL),
            )),
            refused: Default::default(),
        }
    }

    /// Takes what `action` (with a body of `body_bytes`) costs `account` from its buckets, or
    /// refuses with how long to wait. A read costs nothing.
    pub(crate) fn check(&self, account: &str, action: &str, body_bytes: usize) -> ApiResult<()> {
        let Some(bucket) = bucket_of(action) else { return Ok(()) };
        let key = account.to_owned();
        if let Some(limiter) = self.limiter(bucket)
            && let Err(not_until) = limiter.check_key(&key)
        {
            return Err(self.refuse(bucket, not_until.wait_time_from(limiter.clock().now())));
        }
        if carries_file_content(action)
            && let Some(limiter) = &self.memory_bytes
        {
            let cells = (body_bytes as u64).div_ceil(BYTES_PER_CELL).max(1);
            let cells = NonZeroU32::new(u32::try_from(cells).unwrap_or(u32::MAX)).unwrap_or(NonZeroU32::MIN);
            match limiter.check_key_n(&key, cells) {
                Ok(Ok(())) => {}
                Ok(Err(not_until)) => {
                    return Err(self.refuse(Bucket::MemoryBytes, not_until.wait_time_from(limiter.clock().now())));
                }
                // Larger than the whole bucket (its burst is at least the largest body, so
                // only a body past `--max-body-bytes` could be, and that was refused before).
                Err(_) => return Err(ApiError::too_large("Request is larger than this account's byte allowance")),
            }
        }
        Ok(())
    }

    fn limiter(&self, bucket: Bucket) -> Option<&DefaultKeyedRateLimiter<String>> {
        match bucket {
            Bucket::Writes => self.writes.as_ref(),
            Bucket::Turns => self.turns.as_ref(),
            Bucket::Uploads => self.uploads.as_ref(),
            Bucket::MemoryBytes => self.memory_bytes.as_ref(),
        }
    }

    fn refuse(&self, bucket: Bucket, wait: Duration) -> ApiError {
        if let Some(at) = Bucket::ALL.iter().position(|each| *each == bucket) {
            self.refused[at].inc();
        }
        // Whole seconds, rounded up, at least one: `Retry-After` has no fractions.
        let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        ApiError::new(ErrorKind::TooMany, TOO_MANY_REQUESTS).with_code(RATE_LIMITED).with_retry_after(seconds.max(1))
    }

    /// Refusals so far, per bucket.
    pub(crate) fn refused(&self) -> impl Iterator<Item = (Bucket, u64)> + '_ {
        Bucket::ALL.into_iter().zip(self.refused.iter().map(crate::telemetry::Counter::get))
    }

    /// Drops the buckets of accounts idle long enough to be full again.
    pub(crate) fn forget_idle(&self) {
        for limiter in [&self.writes, &self.turns, &self.uploads, &self.memory_bytes].into_iter().flatten() {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(adjust: impl FnOnce(&mut Config)) -> RateLimits {
        let mut config = Config::new("unused", "127.0.0.1:0".parse().unwrap());
        adjust(&mut config);
        RateLimits::new(&config)
    }

    #[test]
    fn reads_cost_nothing_and_writes_are_refused_past_the_burst() {
        let limits = limits(|config| {
            config.rate_writes_per_second = 1;
            config.rate_writes_burst = 2;
        });
        for _ in 0..100 {
            limits.check("alice", "ListAgents", 100).unwrap();
        }
        limits.check("alice", "CreateAgent", 100).unwrap();
        limits.check("alice", "CreateAgent", 100).unwrap();
        let refused = limits.check("alice", "CreateAgent", 100).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::TooMany);
        assert_eq!(refused.code(), Some(RATE_LIMITED));
        assert_eq!(refused.retry_after(), Some(1));
        // Another account has its own bucket; turns have theirs.
        limits.check("bob", "CreateAgent", 100).unwrap();
        limits.check("alice", "MessageSession", 100).unwrap();
        assert_eq!(limits.refused().find(|(bucket, _)| *bucket == Bucket::Writes).unwrap().1, 1);
    }

    #[test]
    fn file_bytes_draw_on_their_own_bucket_and_zero_is_unlimited() {
        let limits = limits(|config| {
            config.rate_writes_per_second = 0;
            config.max_body_bytes = 4096;
            config.rate_memory_bytes_per_hour = 8192;
            config.rate_memory_bytes_burst = 8192;
        });
        limits.check("alice", "WriteAgentMemoryFile", 4096).unwrap();
        limits.check("alice", "AppendFileUploadChunk", 4096).unwrap();
        let refused = limits.check("alice", "UploadSessionAttachment", 10).unwrap_err();
        assert_eq!(refused.code(), Some(RATE_LIMITED));
        // A KiB comes back every 450 s at 8 KiB an hour.
        assert!((449..=451).contains(&refused.retry_after().unwrap()), "{refused:?}");
        for _ in 0..10_000 {
            limits.check("alice", "CreateAgent", 10).unwrap();
        }
    }

    #[test]
    fn unknown_actions_are_writes_and_turns_are_turns() {
        assert_eq!(bucket_of("Nope"), Some(Bucket::Writes));
        assert_eq!(bucket_of("GetSession"), None);
        assert_eq!(bucket_of("RetrySession"), Some(Bucket::Turns));
        assert_eq!(bucket_of("CommitFileUpload"), Some(Bucket::Uploads));
    }
}
