//! Retention by budget: the TTLs of an operation from the ways a retry can arrive late.
//!
//! Deleting a response early lets a late retry run again; keeping everything for ever costs
//! space and privacy. Retention is therefore the **sum** of every delay a true retry can
//! have — the client's retry window, the queue's redelivery, devices that were offline, a
//! support person replaying a request — and after the response is removed a tombstone is
//! kept where a duplicate would be expensive (money), or not where it is cheap.

use core::time::Duration;

use crate::{Policy, PolicyError};

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
/// let policy = budget.apply(Policy::default())?;
/// assert_eq!(policy.response_ttl(), 36 * DAY);
/// assert_eq!(policy.tombstone_ttl(), 365 * DAY);
/// # Ok::<(), idemdb_core::PolicyError>(())
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
    ///
    /// # Errors
    /// [`PolicyError::ForgetsAtOnce`] for a budget whose delays and tombstone are all zero:
    /// the operation would forget a completed key at once, so its next retry would run again.
    /// (A policy built by hand may still choose zero TTLs; a budget says how late retries
    /// arrive, and none arrives at no delay at all.)
    pub fn apply(&self, policy: Policy) -> Result<Policy, PolicyError> {
        if self.response_ttl().is_zero() && self.tombstone_ttl().is_zero() {
            return Err(PolicyError::ForgetsAtOnce);
        }
        Ok(policy.with_response_ttl(self.response_ttl()).with_tombstone_ttl(self.tombstone_ttl()))
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
        assert_eq!(budget.apply(Policy::default()).unwrap().tombstone_ttl(), Duration::ZERO);
        let huge = RetentionBudget { client_retry: Duration::MAX, ..budget };
        assert_eq!(huge.response_ttl(), Duration::MAX);
    }

    #[test]
    fn a_budget_that_would_forget_a_completed_key_at_once_is_refused() {
        let zero = RetentionBudget {
            client_retry: Duration::ZERO,
            queue_redelivery: Duration::ZERO,
            offline_devices: Duration::ZERO,
            support_replay: Duration::ZERO,
            duplicates: DuplicateCost::Cheap,
        };
        assert_eq!(zero.apply(Policy::default()), Err(PolicyError::ForgetsAtOnce));
        let zero_tombstone =
            RetentionBudget { duplicates: DuplicateCost::Expensive { tombstone: Duration::ZERO }, ..zero };
        assert_eq!(zero_tombstone.apply(Policy::default()), Err(PolicyError::ForgetsAtOnce));
        // Any delay, or a tombstone alone, keeps the key.
        let tombstone =
            RetentionBudget { duplicates: DuplicateCost::Expensive { tombstone: Duration::from_secs(1) }, ..zero };
        assert_eq!(tombstone.apply(Policy::default()).unwrap().tombstone_ttl(), Duration::from_secs(1));
        let retry = RetentionBudget { client_retry: Duration::from_millis(1), ..zero };
        assert_eq!(retry.apply(Policy::default()).unwrap().response_ttl(), Duration::from_millis(1));
    }
}
