//! The client's retry schedule: which answers are retried, backoff with full jitter, and
//! `Retry-After`.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, StatusCode, header};

/// How a client retries one intent.
///
/// ```
/// use std::time::Duration;
/// use idemdb_http::client::Retry;
/// let retry = Retry::default().max_attempts(8).timeout(Duration::from_secs(5));
/// assert_eq!(retry.attempts(), 8);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    max_attempts: u32,
    base_delay: Duration,
    max_delay: Duration,
    timeout: Duration,
}

impl Default for Retry {
    /// 5 attempts per call; backoff from 250 ms doubling up to 30 s (also the cap on
    /// `Retry-After`), with full jitter; 15 s per attempt.
    fn default() -> Self {
        Retry {
            max_attempts: 5,
            base_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(30),
            timeout: Duration::from_secs(15),
        }
    }
}

impl Retry {
    /// Attempts per call, the first included (at least 1).
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// The first backoff delay; it doubles per attempt.
    #[must_use]
    pub fn base_delay(mut self, delay: Duration) -> Self {
        self.base_delay = delay;
        self
    }

    /// The largest delay, and the cap on a server's `Retry-After`.
    #[must_use]
    pub fn max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    /// The timeout of one attempt; a timeout is retried like a network error.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Attempts per call.
    pub fn attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The per-attempt timeout.
    pub fn attempt_timeout(&self) -> Duration {
        self.timeout
    }

    /// The ceiling of the backoff before attempt `attempt + 1`: `base × 2^(attempt-1)`, at most
    /// the maximum delay. The delay is drawn uniformly below it (full jitter).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(30);
        self.base_delay.saturating_mul(1 << doublings).min(self.max_delay)
    }

    /// A backoff delay after attempt `attempt`, with full jitter: uniform in `[0, ceiling)`.
    pub(crate) fn backoff(&self, attempt: u32, unit: f64) -> Duration {
        self.ceiling(attempt).mul_f64(unit.clamp(0.0, 1.0))
    }

    /// The server's `Retry-After` (seconds or an HTTP date), capped at the maximum delay.
    pub(crate) fn retry_after(&self, headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
        let value = headers.get(header::RETRY_AFTER)?.to_str().ok()?.trim();
        let wait = match value.parse::<u64>() {
            Ok(seconds) => Duration::from_secs(seconds),
            Err(_) => httpdate::parse_http_date(value).ok()?.duration_since(now).unwrap_or(Duration::ZERO),
        };
        Some(wait.min(self.max_delay))
    }
}

/// Whether a status is retried with the same key: the server may not have finished (409,
/// 5xx), timed out reading (408), or asks to come back (429). 422 is a conflict, never retried.
pub fn retryable(status: StatusCode) -> bool {
    status.is_server_error()
        || status == StatusCode::CONFLICT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retried_statuses_are_those_of_the_contract() {
        for status in [408, 409, 429, 500, 502, 503, 504] {
            assert!(retryable(StatusCode::from_u16(status).unwrap()), "{status}");
        }
        for status in [200, 201, 400, 401, 404, 410, 413, 422] {
            assert!(!retryable(StatusCode::from_u16(status).unwrap()), "{status}");
        }
    }

    #[test]
    fn backoff_doubles_to_the_cap_with_full_jitter() {
        let retry = Retry::default().base_delay(Duration::from_millis(100)).max_delay(Duration::from_secs(1));
        assert_eq!(retry.ceiling(1), Duration::from_millis(100));
        assert_eq!(retry.ceiling(2), Duration::from_millis(200));
        assert_eq!(retry.ceiling(4), Duration::from_millis(800));
        assert_eq!(retry.ceiling(5), Duration::from_secs(1));
        assert_eq!(retry.ceiling(u32::MAX), Duration::from_secs(1));
        assert_eq!(retry.backoff(3, 0.0), Duration::ZERO);
        assert_eq!(retry.backoff(3, 0.5), Duration::from_millis(200));
        assert_eq!(retry.backoff(3, 7.0), Duration::from_millis(400), "the unit is clamped");
    }

    #[test]
    fn retry_after_reads_seconds_and_dates_and_is_capped() {
        let retry = Retry::default().max_delay(Duration::from_secs(10));
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::RETRY_AFTER, value.parse().unwrap());
            retry.retry_after(&headers, now)
        };
        assert_eq!(with("3"), Some(Duration::from_secs(3)));
        assert_eq!(with("3600"), Some(Duration::from_secs(10)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(4));
        assert_eq!(with(&later), Some(Duration::from_secs(4)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(4));
        assert_eq!(with(&past), Some(Duration::ZERO));
        assert_eq!(with("soon"), None);
        assert_eq!(retry.retry_after(&HeaderMap::new(), now), None);
    }
}
