//! Our retry layer: which failed attempts are tried again, and after how long. Only failures
//! before an answer's body was read are retried (a connection that failed, or a non-2xx status);
//! once a stream started, its failure is the step's.

use std::time::{Duration, SystemTime};

use backon::BackoffBuilder as _;
use reqwest::header::HeaderMap;

/// How many quick retries a step gets, and how long it waits between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    /// Retries after the first attempt (2, as the vendor SDKs do).
    pub max_retries: u32,
    /// The first back-off (0.5 s); it doubles each time, with up to as much again as jitter.
    pub min_delay: Duration,
    /// The longest back-off (8 s), jitter included.
    pub max_delay: Duration,
    /// The longest wait a provider's `retry-after` can ask for (30 s).
    pub max_retry_after: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            max_retries: 2,
            min_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(30),
        }
    }
}

impl Retry {
    /// The back-off before each retry, in order; ends when the retries are spent.
    pub(crate) fn delays(&self) -> impl Iterator<Item = Duration> + use<> {
        let max_delay = self.max_delay;
        backon::ExponentialBuilder::default()
            .with_min_delay(self.min_delay)
            .with_max_delay(max_delay)
            .with_jitter()
            .with_max_times(self.max_retries as usize)
            .build()
            .map(move |delay| delay.min(max_delay))
    }

    /// The wait before the next retry: the provider's `retry-after` (capped) when it sent one,
    /// else the back-off.
    pub(crate) fn wait(&self, backoff: Duration, headers: Option<&HeaderMap>) -> Duration {
        headers
            .and_then(|headers| retry_after(headers, SystemTime::now()))
            .map_or(backoff, |asked| asked.min(self.max_retry_after))
    }
}

/// Whether a non-2xx answer is worth another attempt: 408, 409, 429 and 5xx, unless the provider
/// says otherwise with `x-should-retry`.
pub(crate) fn retryable_status(status: u16, headers: &HeaderMap) -> bool {
    match headers.get("x-should-retry").and_then(|value| value.to_str().ok()) {
        Some("true") => true,
        Some("false") => false,
        _ => matches!(status, 408 | 409 | 429) || status >= 500,
    }
}

/// The wait a provider asked for: `retry-after-ms` (milliseconds), or `retry-after` in seconds
/// or as an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok()).map(str::trim);
    let seconds = |text: &str, scale: f64| {
        text.parse::<f64>()
            .ok()
            .filter(|value| value.is_finite() && *value >= 0.0)
            .and_then(|value| Duration::try_from_secs_f64(value * scale).ok())
    };
    if let Some(wait) = header("retry-after-ms").and_then(|text| seconds(text, 0.001)) {
        return Some(wait);
    }
    let text = header("retry-after")?;
    seconds(text, 1.0).or_else(|| {
        let date = httpdate::parse_http_date(text).ok()?;
        Some(date.duration_since(now).unwrap_or(Duration::ZERO))
    })
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).expect("header value"));
        }
        map
    }

    #[test]
    fn statuses_worth_retrying() {
        let none = HeaderMap::new();
        for status in [408, 409, 429, 500, 502, 503, 529] {
            assert!(retryable_status(status, &none), "{status}");
        }
        for status in [400, 401, 403, 404, 422] {
            assert!(!retryable_status(status, &none), "{status}");
        }
        assert!(!retryable_status(500, &headers(&[("x-should-retry", "false")])));
        assert!(retryable_status(400, &headers(&[("x-should-retry", "true")])));
    }

    #[test]
    fn retry_after_in_every_form() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let wait = |pairs: &[(&'static str, &str)]| retry_after(&headers(pairs), now);
        assert_eq!(wait(&[("retry-after", "2")]), Some(Duration::from_secs(2)));
        assert_eq!(wait(&[("retry-after", "0.5")]), Some(Duration::from_millis(500)));
        assert_eq!(wait(&[("retry-after-ms", "250"), ("retry-after", "9")]), Some(Duration::from_millis(250)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(7));
        assert_eq!(wait(&[("retry-after", &later)]), Some(Duration::from_secs(7)));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(7));
        assert_eq!(wait(&[("retry-after", &earlier)]), Some(Duration::ZERO));
        assert_eq!(wait(&[("retry-after", "soon")]), None);
        assert_eq!(wait(&[("retry-after", "-1")]), None);
        assert_eq!(wait(&[]), None);
    }

    #[test]
    fn waits_are_bounded() {
        let retry = Retry::default();
        let delays: Vec<_> = retry.delays().collect();
        assert_eq!(delays.len(), 2);
        assert!(delays[0] >= Duration::from_millis(500) && delays[0] <= Duration::from_secs(1), "{delays:?}");
        assert!(delays[1] >= Duration::from_secs(1) && delays[1] <= Duration::from_secs(2), "{delays:?}");
        let many = Retry { max_retries: 10, ..Retry::default() };
        assert!(many.delays().all(|delay| delay <= Duration::from_secs(8)));
        let asked = headers(&[("retry-after", "3600")]);
        assert_eq!(retry.wait(Duration::from_secs(1), Some(&asked)), Duration::from_secs(30));
        assert_eq!(retry.wait(Duration::from_secs(1), None), Duration::from_secs(1));
    }
}
