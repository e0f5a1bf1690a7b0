//! The client's retry schedule. The rules — which answers are final, retried or need a
//! person, the defaults, backoff with full jitter, `Retry-After` — are the core's retry
//! contract ([`idemdb_core::classify_answer`] and its neighbours), shared with the npm package;
//! this file only holds the settings and reads `http` types.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, StatusCode, header};
use idemdb_core::{
    AnswerClass, DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_ATTEMPTS_PER_CALL, DEFAULT_ATTEMPTS_PER_INTENT, DEFAULT_BASE_DELAY,
    DEFAULT_MAX_DELAY, Timestamp, backoff_ceiling, backoff_delay, classify_answer,
};

/// How a client retries one intent.
///
/// ```
/// use std::time::Duration;
/// use idemdb_http::client::Retry;
/// let retry = Retry::default().max_attempts(8).attempts_per_intent(40).timeout(Duration::from_secs(5));
/// assert_eq!(retry.attempts(), 8);
/// assert_eq!(retry.intent_attempts(), 40);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    max_attempts: u32,
    per_intent: u32,
    base_delay: Duration,
    max_delay: Duration,
    timeout: Duration,
    max_pending: Duration,
}

/// [`Retry::max_pending`] by default: 7 days, well within a server's 30 days of replays (the
/// npm package's `retry.maxPendingMs`).
pub const DEFAULT_MAX_PENDING: Duration = Duration::from_secs(7 * 24 * 3600);

impl Default for Retry {
    /// The core's defaults: 5 attempts per call and 20 over the intent's life (across
    /// resumes); backoff from 250 ms doubling up to 30 s (also the cap on `Retry-After`), with
    /// full jitter; 15 s per attempt; 7 days pending at most ([`DEFAULT_MAX_PENDING`]).
    fn default() -> Self {
        Retry {
            max_attempts: DEFAULT_ATTEMPTS_PER_CALL,
            per_intent: DEFAULT_ATTEMPTS_PER_INTENT,
            base_delay: DEFAULT_BASE_DELAY,
            max_delay: DEFAULT_MAX_DELAY,
            timeout: DEFAULT_ATTEMPT_TIMEOUT,
            max_pending: DEFAULT_MAX_PENDING,
        }
    }
}

impl Retry {
    /// Attempts per call, the first included (at least 1). When they run out the intent stays
    /// pending and is resumed later.
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Attempts over the intent's life, counted across resumes (at least 1). When they run out
    /// the intent [needs attention](idemdb::IntentState::NeedsAttention) and is not resumed.
    /// Only sends that may have reached the server count: in an outage (connection refused,
    /// name not resolved) only the first refused send is charged.
    #[must_use]
    pub fn attempts_per_intent(mut self, attempts: u32) -> Self {
        self.per_intent = attempts.max(1);
        self
    }

    /// How long an intent that has been sent may stay without a final answer, from its
    /// creation in store time (default [`DEFAULT_MAX_PENDING`]); then it needs attention
    /// (`retries_exhausted`) instead of being sent again. A reopened intent is not timed again.
    #[must_use]
    pub fn max_pending(mut self, max: Duration) -> Self {
        self.max_pending = max;
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

    /// Attempts over the intent's life.
    pub fn intent_attempts(&self) -> u32 {
        self.per_intent
    }

    /// The per-attempt timeout.
    pub fn attempt_timeout(&self) -> Duration {
        self.timeout
    }

    /// How long a sent intent may stay pending.
    pub fn pending_limit(&self) -> Duration {
        self.max_pending
    }

    /// The ceiling of the backoff after attempt `attempt` (see [`idemdb_core::backoff_ceiling`]).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        backoff_ceiling(attempt, self.base_delay, self.max_delay)
    }

    /// A backoff delay after attempt `attempt`, with full jitter: uniform in `[0, ceiling)`.
    pub(crate) fn backoff(&self, attempt: u32, unit: f64) -> Duration {
        backoff_delay(attempt, unit, self.base_delay, self.max_delay)
    }

    /// The server's `Retry-After` (seconds or an HTTP date), capped at the maximum delay.
    pub(crate) fn retry_after(&self, headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
        let value = headers.get(header::RETRY_AFTER)?.to_str().ok()?;
        let now = now.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        let now = Timestamp::from_millis(u64::try_from(now.as_millis()).unwrap_or(u64::MAX));
        idemdb_core::retry_after(value, now, self.max_delay)
    }
}

/// Whether a status alone (not replayed, no problem type) is retried with the same key: 408,
/// 409, 429 and 5xx. The full rule reads the answer too: see [`idemdb_core::classify_answer`].
pub fn retryable(status: StatusCode) -> bool {
    classify_answer(status.as_u16(), false, None) == AnswerClass::Retry
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
        assert_eq!(with("soon"), None);
        assert_eq!(retry.retry_after(&HeaderMap::new(), now), None);
    }
}
