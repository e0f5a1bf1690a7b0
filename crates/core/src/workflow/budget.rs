//! Retention by budget: the TTLs of an operation from the ways a retry can arrive late.
//!
//! Deleting a response early lets a late retry run again; keeping everything for ever costs
//! space and privacy. Retention is therefore the **sum** of every delay a true retry can
//! have — the client's retry window, the queue's redelivery, devices that were offline, a
//! support person replaying a request — and after the response is removed a tombstone is
//! kept where a duplicate would be expensive (money), or not where it is cheap.

use core::time::Duration;

use crate::Policy;

/// What a duplicate of this operation would cost, which decides whether a tombstone is kept
/// after the response expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DuplicateCost {
    /// A duplicate is expensive (a charge, a shipment): keep the tombstone this long after the
    /// response expires, so a very late retry is refused instead of run again.
    Expensive {
        /// How long the tombstone outlives the response.
        tombstone: Duration,
    },
    /// A duplicate is harmless: forget the key when the response expires.
    Cheap,
}

/// The delays a retry can have, summed into an operation's retention.
///
/// ```
/// use std::time::Duration;
/// use idemdb_core::{DuplicateCost, Policy, RetentionBudget};
/// const DAY: Duration = Duration::from_secs(24 * 3600);
/// let budget = RetentionBudget {
///     client_retry: DAY,
///     queue_redelivery: 14 * DAY,
///     offline_devices: 14 * DAY,
///     support_replay: 7 * DAY,
///     duplicates: DuplicateCost::Expensive { tombstone: 365 * DAY },
/// };
/// let policy = budget.apply(Policy::default());
/// assert_eq!(policy.response_ttl(), 36 * DAY);
/// assert_eq!(policy.tombstone_ttl(), 365 * DAY);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionBudget {
    /// How long a client keeps retrying (its backoff schedule, end to end).
    pub client_retry: Duration,
    /// How long a queue may hold a message before redelivering it.
    pub queue_redelivery: Duration,
    /// How long a device may stay offline and then replay what it had queued.
    pub offline_devices: Duration,
    /// How long after the fact support may replay a request by hand.
    pub support_replay: Duration,
    /// Whether a tombstone is kept, and for how long.
    pub duplicates: DuplicateCost,
}

impl RetentionBudget {
    /// The response TTL: the sum of the delays.
    pub fn response_ttl(&self) -> Duration {
        self.client_retry
            .saturating_add(self.queue_redelivery)
            .saturating_add(self.offline_devices)
            .saturating_add(self.support_replay)
    }

    /// The tombstone TTL.
    pub fn tombstone_ttl(&self) -> Duration {
        match self.duplicates {
            DuplicateCost::Expensive { tombstone } => tombstone,
            DuplicateCost::Cheap => Duration::ZERO,
        }
    }

    /// `policy` with the budget's response and tombstone TTLs.
    #[must_use]
    pub fn apply(&self, policy: Policy) -> Policy {
        policy.with_response_ttl(self.response_ttl()).with_tombstone_ttl(self.tombstone_ttl())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cheap_duplicates_keep_no_tombstone_and_sums_saturate() {
        let budget = RetentionBudget {
            client_retry: Duration::from_secs(60),
            queue_redelivery: Duration::from_secs(3600),
            offline_devices: Duration::ZERO,
            support_replay: Duration::from_secs(1),
            duplicates: DuplicateCost::Cheap,
        };
        assert_eq!(budget.response_ttl(), Duration::from_secs(3661));
        assert_eq!(budget.apply(Policy::default()).tombstone_ttl(), Duration::ZERO);
        let huge = RetentionBudget { client_retry: Duration::MAX, ..budget };
        assert_eq!(huge.response_ttl(), Duration::MAX);
    }
}
