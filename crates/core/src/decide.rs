//! The decision: what a request with a given fingerprint meets in the store, as a pure function.

use core::time::Duration;

use crate::{ExpiredLease, Fingerprint, OutcomeClass, Policy, Record, State, StateKind, Timestamp, UncertainCause};

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
/// * `now`: the caller's clock. If it is earlier than the record's last update (the clock went
///   backwards) the record's time is used instead, so a TTL is never shortened and an expired
///   lease is never revived.
///
/// ```
/// use idemdb_core::{decide, Fingerprint, Policy, Timestamp, Verdict};
/// let policy = Policy::default();
/// let fp = Fingerprint::from_bytes([1; 32]);
/// let now = Timestamp::from_millis(1_000);
/// let first = decide(None, &fp, now, &policy);
/// assert!(matches!(first.verdict, Verdict::Acquired { fence: 1_000, attempt: 1, .. }));
/// let stored = first.write.expect("a new reservation is written");
/// let again = decide(Some(&stored), &fp, now, &policy);
/// assert!(matches!(again.verdict, Verdict::InProgress { .. }));
/// assert!(again.write.is_none());
/// ```
pub fn decide(existing: Option<&Record>, fingerprint: &Fingerprint, now: Timestamp, policy: &Policy) -> Decision {
    decide_above(existing, fingerprint, now, policy, 0)
}

/// [`decide`] for a storage adapter that removes forgotten records: `fence_floor` is the
/// highest fence of any record it has removed, and a fresh binding's fence is above it. A lease
/// of a removed binding therefore never matches the fence of a later binding of the same key,
/// however short the TTLs.
///
/// ```
/// use idemdb_core::{decide_above, Fingerprint, Policy, Timestamp, Verdict};
/// let fp = Fingerprint::from_bytes([1; 32]);
/// let fresh = decide_above(None, &fp, Timestamp::from_millis(5), &Policy::default(), 41);
/// assert!(matches!(fresh.verdict, Verdict::Acquired { fence: 42, .. }));
/// ```
pub fn decide_above(
    existing: Option<&Record>,
    fingerprint: &Fingerprint,
    now: Timestamp,
    policy: &Policy,
    fence_floor: u64,
) -> Decision {
    let Some(record) = existing else {
        return acquire_fresh(fence_floor, fingerprint, now, policy);
    };
    let now = now.max(record.updated_at);
    if record.is_forgotten(now) {
        // Past its last expiry the key is unknown again; the fence keeps growing.
        return acquire_fresh(record.fence.max(fence_floor), fingerprint, now, policy);
    }
    if record.fingerprint != *fingerprint {
        return Decision::answer(Verdict::Mismatch { stored: record.state.kind() });
    }
    match &record.state {
        State::InProgress { lease_expires_at } if now < *lease_expires_at => {
            Decision::answer(Verdict::InProgress { retry_after: lease_expires_at.saturating_since(now) })
        }
        State::InProgress { .. } => match policy.expired_lease() {
            ExpiredLease::Takeover => acquire_again(record, now, policy),
            ExpiredLease::Uncertain => {
                let cause = UncertainCause::LeaseExpired;
                Decision {
                    verdict: Verdict::NeedsReconciliation { cause },
                    write: Some(Record { state: State::Uncertain { cause }, updated_at: now, ..record.clone() }),
                }
            }
        },
        State::Completed { expires_at, .. } => Decision::answer(if now < *expires_at {
            Verdict::Replay { outcome: OutcomeClass::Completed }
        } else {
            Verdict::Expired { outcome: OutcomeClass::Completed }
        }),
        State::Failed { expires_at, .. } => Decision::answer(if now < *expires_at {
            Verdict::Replay { outcome: OutcomeClass::Failed }
        } else {
            Verdict::Expired { outcome: OutcomeClass::Failed }
        }),
        State::Released { .. } => acquire_again(record, now, policy),
        State::Uncertain { cause } => Decision::answer(Verdict::NeedsReconciliation { cause: *cause }),
        State::Tombstone { outcome, .. } => Decision::answer(Verdict::Expired { outcome: *outcome }),
    }
}

/// A fresh binding's fence is at least the current time in milliseconds, so a key that was
/// forgotten (record removed) and later reused never reissues a fence from its earlier life.
fn acquire_fresh(previous_fence: u64, fingerprint: &Fingerprint, now: Timestamp, policy: &Policy) -> Decision {
    let fence = previous_fence.saturating_add(1).max(now.as_millis());
    let lease_expires_at = now.saturating_add(policy.lease_ttl());
    Decision {
        verdict: Verdict::Acquired { fence, lease_expires_at, attempt: 1 },
        write: Some(Record {
            fingerprint: *fingerprint,
            state: State::InProgress { lease_expires_at },
            fence,
            attempts: 1,
            created_at: now,
            updated_at: now,
        }),
    }
}

fn acquire_again(record: &Record, now: Timestamp, policy: &Policy) -> Decision {
    let fence = record.fence.saturating_add(1);
    let attempt = record.attempts.saturating_add(1);
    let lease_expires_at = now.saturating_add(policy.lease_ttl());
    Decision {
        verdict: Verdict::Acquired { fence, lease_expires_at, attempt },
        write: Some(Record {
            state: State::InProgress { lease_expires_at },
            fence,
            attempts: attempt,
            updated_at: now,
            ..record.clone()
        }),
    }
}
