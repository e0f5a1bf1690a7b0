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
