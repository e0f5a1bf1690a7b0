//! The decision: what a request with a given fingerprint meets in the store, as a pure function.

use core::time::Duration;

use crate::{
    DecisionTime, ExpiredLease, Fingerprint, MAX_FENCE, OutcomeClass, Policy, Record, State, StateKind, Timestamp,
    TransitionError, UncertainCause,
};

/// What [`decide`] tells the caller to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// The caller holds a new lease and should execute the operation.
    Acquired {
        /// The lease's fence: only this fence may complete or fail the record.
        fence: u64,
        /// When the lease expires unless renewed.
        lease_expires_at: Timestamp,
        /// Which attempt this is (1 for the first).
        attempt: u32,
    },
    /// A true retry of a finished request: replay the stored body of this class.
    Replay {
        /// Completed or failed.
        outcome: OutcomeClass,
    },
    /// Another attempt holds a live lease; try again after `retry_after`.
    InProgress {
        /// Time left on the other attempt's lease.
        retry_after: Duration,
    },
    /// The key is bound to a different request: a conflict, never a replay or an execution.
    Mismatch {
        /// The state of the record the key is bound to.
        stored: StateKind,
    },
    /// An earlier attempt's external effect is unconfirmed; reconcile before any new effect.
    NeedsReconciliation {
        /// Why the record is uncertain.
        cause: UncertainCause,
    },
    /// The response was purged; only its tombstone remains. The request is never run again.
    Expired {
        /// The outcome the record reached.
        outcome: OutcomeClass,
    },
}

/// What [`decide`] returns: the verdict and the record to write, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The answer.
    pub verdict: Verdict,
    /// The record to store in the same transaction (`None`: leave storage unchanged).
    pub write: Option<Record>,
}

impl Decision {
    fn answer(verdict: Verdict) -> Self {
        Decision { verdict, write: None }
    }
}

/// Decides what a request meets, with no I/O: read the record, call this, write
/// [`Decision::write`], commit — all in one write transaction.
///
/// * `existing`: the stored record for `(scope, key)`, if any.
/// * `fingerprint`: the request's fingerprint.
/// * `at`: the caller's clock, a [`Timestamp`] or a [`DecisionTime`] (store time and retention
///   time). If store time is earlier than the record's last update (the clock went backwards)
///   the record's time is used instead, so a TTL is never shortened and an expired lease is
///   never revived. Expiry and forgetting are decided by the retention time.
///
/// ```
/// use idemdb_core::{decide, Fingerprint, Policy, Timestamp, Verdict};
/// let policy = Policy::default();
/// let fp = Fingerprint::from_bytes([1; 32]);
/// let now = Timestamp::from_millis(1_000);
/// let first = decide(None, &fp, now, &policy)?;
/// assert!(matches!(first.verdict, Verdict::Acquired { fence: 1_000, attempt: 1, .. }));
/// let stored = first.write.expect("a new reservation is written");
/// let again = decide(Some(&stored), &fp, now, &policy)?;
/// assert!(matches!(again.verdict, Verdict::InProgress { .. }));
/// assert!(again.write.is_none());
/// # Ok::<(), idemdb_core::TransitionError>(())
/// ```
///
/// # Errors
/// [`TransitionError::FenceExhausted`] when a new lease would need a fence above
/// [`MAX_FENCE`]: fences never repeat, so no lease is issued.
pub fn decide(
    existing: Option<&Record>,
    fingerprint: &Fingerprint,
    at: impl Into<DecisionTime>,
    policy: &Policy,
) -> Result<Decision, TransitionError> {
    decide_above(existing, fingerprint, at, policy, 0)
}

/// [`decide`] for a storage adapter that removes forgotten records: `fence_floor` is the
/// highest fence of any record it has removed, and a fresh binding's fence is above it. A lease
/// of a removed binding therefore never matches the fence of a later binding of the same key,
/// however short the TTLs.
///
/// ```
/// use idemdb_core::{decide_above, Fingerprint, Policy, Timestamp, Verdict};
/// let fp = Fingerprint::from_bytes([1; 32]);
/// let fresh = decide_above(None, &fp, Timestamp::from_millis(5), &Policy::default(), 41)?;
/// assert!(matches!(fresh.verdict, Verdict::Acquired { fence: 42, .. }));
/// # Ok::<(), idemdb_core::TransitionError>(())
/// ```
///
/// # Errors
/// As [`decide`].
pub fn decide_above(
    existing: Option<&Record>,
    fingerprint: &Fingerprint,
    at: impl Into<DecisionTime>,
    policy: &Policy,
    fence_floor: u64,
) -> Result<Decision, TransitionError> {
    let at = at.into();
    let Some(record) = existing else {
        return acquire_fresh(fence_floor, fingerprint, at.now, policy);
    };
    let now = at.now.max(record.updated_at);
    let retention = at.retention.min(now);
    if record.is_forgotten(retention) {
        // Past its last expiry the key is unknown again; the fence keeps growing.
        return acquire_fresh(record.fence.max(fence_floor), fingerprint, now, policy);
    }
    if record.fingerprint != *fingerprint {
        return Ok(Decision::answer(Verdict::Mismatch { stored: record.state.kind() }));
    }
    Ok(match &record.state {
        State::InProgress { lease_expires_at } if now < *lease_expires_at => {
            Decision::answer(Verdict::InProgress { retry_after: lease_expires_at.saturating_since(now) })
        }
        State::InProgress { .. } => match policy.expired_lease() {
            ExpiredLease::Takeover => acquire_again(record, now, policy)?,
            ExpiredLease::Uncertain => {
                let cause = UncertainCause::LeaseExpired;
                Decision {
                    verdict: Verdict::NeedsReconciliation { cause },
                    write: Some(Record { state: State::Uncertain { cause }, updated_at: now, ..record.clone() }),
                }
            }
        },
        State::Completed { expires_at, .. } => Decision::answer(if retention < *expires_at {
            Verdict::Replay { outcome: OutcomeClass::Completed }
        } else {
            Verdict::Expired { outcome: OutcomeClass::Completed }
        }),
        State::Failed { expires_at, .. } => Decision::answer(if retention < *expires_at {
            Verdict::Replay { outcome: OutcomeClass::Failed }
        } else {
            Verdict::Expired { outcome: OutcomeClass::Failed }
        }),
        State::Released { .. } => acquire_again(record, now, policy)?,
        State::Uncertain { cause } => Decision::answer(Verdict::NeedsReconciliation { cause: *cause }),
        State::Tombstone { outcome, .. } => Decision::answer(Verdict::Expired { outcome: *outcome }),
    })
}

/// The fence after `fence`, if one is left.
fn next_fence(fence: u64) -> Result<u64, TransitionError> {
    fence.checked_add(1).filter(|next| *next <= MAX_FENCE).ok_or(TransitionError::FenceExhausted { fence })
}

/// A fresh binding's fence is at least the current time in milliseconds, so a key that was
/// forgotten (record removed) and later reused never reissues a fence from its earlier life.
fn acquire_fresh(
    previous_fence: u64,
    fingerprint: &Fingerprint,
    now: Timestamp,
    policy: &Policy,
) -> Result<Decision, TransitionError> {
    let fence = next_fence(previous_fence)?.max(now.as_millis());
    if fence > MAX_FENCE {
        return Err(TransitionError::FenceExhausted { fence: previous_fence });
    }
    let lease_expires_at = now.saturating_add(policy.lease_ttl());
    Ok(Decision {
        verdict: Verdict::Acquired { fence, lease_expires_at, attempt: 1 },
        write: Some(Record {
            fingerprint: *fingerprint,
            state: State::InProgress { lease_expires_at },
            fence,
            attempts: 1,
            created_at: now,
            updated_at: now,
        }),
    })
}

fn acquire_again(record: &Record, now: Timestamp, policy: &Policy) -> Result<Decision, TransitionError> {
    let fence = next_fence(record.fence)?;
    let attempt = record.attempts.saturating_add(1);
    let lease_expires_at = now.saturating_add(policy.lease_ttl());
    Ok(Decision {
        verdict: Verdict::Acquired { fence, lease_expires_at, attempt },
        write: Some(Record {
            state: State::InProgress { lease_expires_at },
            fence,
            attempts: attempt,
            updated_at: now,
            ..record.clone()
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn released(fence: u64) -> Record {
        Record {
            fingerprint: Fingerprint::from_bytes([1; 32]),
            state: State::Released { forget_at: Timestamp::MAX },
            fence,
            attempts: 1,
            created_at: Timestamp::from_millis(10),
            updated_at: Timestamp::from_millis(10),
        }
    }

    #[test]
    fn a_lease_that_would_need_a_fence_above_the_largest_is_refused() {
        let (fp, at, policy) = (Fingerprint::from_bytes([1; 32]), Timestamp::from_millis(20), Policy::default());
        let last = decide(Some(&released(MAX_FENCE - 1)), &fp, at, &policy).expect("one fence is left");
        assert!(matches!(last.verdict, Verdict::Acquired { fence: MAX_FENCE, .. }));
        assert_eq!(
            decide(Some(&released(MAX_FENCE)), &fp, at, &policy),
            Err(TransitionError::FenceExhausted { fence: MAX_FENCE })
        );
        assert_eq!(
            decide_above(None, &fp, at, &policy, MAX_FENCE),
            Err(TransitionError::FenceExhausted { fence: MAX_FENCE })
        );
        assert_eq!(
            decide(None, &fp, Timestamp::MAX, &policy),
            Err(TransitionError::FenceExhausted { fence: 0 }),
            "a clock past 2^63 ms cannot stamp a fence"
        );
    }

    #[test]
    fn expiry_and_forgetting_follow_the_retention_time_and_leases_the_store_time() {
        let policy = Policy::default()
            .with_lease_ttl(core::time::Duration::from_millis(10))
            .with_response_ttl(core::time::Duration::from_millis(100))
            .with_tombstone_ttl(core::time::Duration::from_millis(100));
        let fp = Fingerprint::from_bytes([1; 32]);
        let t = |ms| Timestamp::from_millis(ms);
        let reserved = decide(None, &fp, t(0), &policy).expect("decide").write.expect("write");
        let done = crate::complete(&reserved, reserved.fence, b"r".to_vec(), t(0), &policy).expect("complete");
        // Store time a year ahead (an unconfirmed jump), retention time where it was.
        let ahead = DecisionTime::new(t(31_536_000_000), t(50));
        assert_eq!(
            decide(Some(&done), &fp, ahead, &policy).expect("decide").verdict,
            Verdict::Replay { outcome: OutcomeClass::Completed }
        );
        assert!(matches!(
            decide(Some(&done), &fp, DecisionTime::new(t(1_000), t(150)), &policy).expect("decide").verdict,
            Verdict::Expired { .. }
        ));
        assert!(matches!(
            decide(Some(&done), &fp, DecisionTime::new(t(1_000), t(200)), &policy).expect("decide").verdict,
            Verdict::Acquired { .. }
        ));
        // A lease is judged by store time.
        assert!(matches!(
            decide(Some(&reserved), &fp, DecisionTime::new(t(10), t(0)), &policy).expect("decide").verdict,
            Verdict::NeedsReconciliation { .. }
        ));
    }
}
