//! Time as the core sees it: plain numbers handed in by the caller.
//!
//! The core never reads a clock. Every function that depends on time takes a [`Timestamp`]
//! argument, which keeps [`decide`](crate::decide) a pure function that tests can drive
//! through every boundary (before, at and after each expiry).

use core::fmt;
use core::time::Duration;

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch (UTC).
///
/// Stored as a `u64`; arithmetic saturates, so a TTL of [`Duration::MAX`] means "never".
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The epoch itself.
    pub const ZERO: Timestamp = Timestamp(0);
    /// The largest representable instant; used for "never expires".
    pub const MAX: Timestamp = Timestamp(u64::MAX);

    /// Builds a timestamp from milliseconds since the Unix epoch.
    pub const fn from_millis(millis: u64) -> Self {
        Timestamp(millis)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// `self + duration`, saturating at [`Timestamp::MAX`].
    pub fn saturating_add(self, duration: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(duration_millis(duration)))
    }

    /// The time from `earlier` to `self`, or zero when `earlier` is later.
    pub fn saturating_since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({}ms)", self.0)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// Whole milliseconds of a duration, saturating at `u64::MAX`.
pub(crate) fn duration_millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The two readings of time a decision is made at.
///
/// * `now`, the store time: it decides whether a lease is live, and it is the time a decision
///   writes into a record (creation, update, lease expiry, and the fence of a fresh binding).
/// * `retention`, at most `now`: it decides whether a record has *expired* (its body is no
///   longer replayed) or is *forgotten*. A storage adapter passes a retention time that
///   includes only time it has measured or confirmed, so a wall-clock jump alone never makes
///   a known key unknown (see `docs/design.md`, "Time").
///
/// A plain [`Timestamp`] converts into a decision time with both readings equal.
///
/// ```
/// use idemdb_core::{DecisionTime, Timestamp};
/// let at = DecisionTime::new(Timestamp::from_millis(10), Timestamp::from_millis(20));
/// assert_eq!(at.retention, Timestamp::from_millis(10), "never later than `now`");
/// assert_eq!(DecisionTime::from(Timestamp::from_millis(5)).retention, Timestamp::from_millis(5));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DecisionTime {
    /// Store time: leases, and the times written.
    pub now: Timestamp,
    /// Retention time (at most `now`): expiry and forgetting.
    pub retention: Timestamp,
}

impl DecisionTime {
    /// A decision time; `retention` is capped at `now`.
    pub fn new(now: Timestamp, retention: Timestamp) -> Self {
        DecisionTime { now, retention: retention.min(now) }
    }
}

impl From<Timestamp> for DecisionTime {
    fn from(now: Timestamp) -> Self {
        DecisionTime { now, retention: now }
    }
}
