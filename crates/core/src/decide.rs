//! The decision: what a request with a given fingerprint meets in the store, as a pure function.

use crate::{
    ExpiredLease, Fingerprint, IdempotencyKey, Lease, OutcomeClass, Policy, Record, Reservation, Scope, ScopedKey,
    State, Timestamp, UncertainCause,
};

/// What [`decide`] returns: the answer and the record to write, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The answer, exactly as the storage adapter returns it.
    pub answer: Reservation,
    /// The record to store in the same transaction (`None`: leave storage unchanged).
    pub write: Option<Record>,
}

impl Decision {
    fn answer(answer: Reservation) -> Self {
        Decision { answer, write: None }
    }
}

/// The circumstances of a decision: the time, the operation's policy and the fence floor.
#[derive(Debug, Clone, Copy)]
pub struct DecisionContext<'p> {
    /// The caller's clock. If it is earlier than the record's last update (the clock went
    /// backwards) the record's time is used instead, so a TTL is never shortened and an
    /// expired lease is never revived.
    pub now: Timestamp,
    /// The operation's policy.
    pub policy: &'p Policy,
    /// The highest fence of any record the adapter has removed (0 if it never removes any):
    /// a fresh binding's fence is above it, so a lease of a removed binding never matches the
    /// fence of a later binding of the same key, however short the TTLs.
    pub fence_floor: u64,
}

impl<'p> DecisionContext<'p> {
    /// A decision at `now` under `policy`, with fence floor 0.
    pub fn new(now: Timestamp, policy: &'p Policy) -> Self {
        DecisionContext { now, policy, fence_floor: 0 }
    }

    /// The same context with a fence floor.
    #[must_use]
    pub fn with_fence_floor(self, fence_floor: u64) -> Self {
        DecisionContext { fence_floor, ..self }
    }
}

/// Decides what a request meets, with no I/O: read the record, call this, write
/// [`Decision::write`], commit — all in one write transaction.
///
/// * `existing`: the stored record for `(scope, key)`, if any. It is consumed: a replay
///   moves the stored body into the answer.
/// * `scope`, `key`: the identity, copied into the lease of an acquisition only.
/// * `fingerprint`: the request's fingerprint.
///
/// ```
/// use idemdb_core::{decide, DecisionContext, Fingerprint, IdempotencyKey, Policy, Reservation, Scope, Timestamp};
/// let (scope, key) = (Scope::new("acme", "pay")?, IdempotencyKey::new("k-1")?);
/// let policy = Policy::default();
/// let fp = Fingerprint::from_bytes([1; 32]);
/// let at = DecisionContext::new(Timestamp::from_millis(1_000), &policy);
/// let first = decide(None, &scope, &key, &fp, at);
/// let Reservation::Acquired(lease) = &first.answer else { panic!() };
/// assert_eq!((lease.fence(), lease.attempt()), (1_000, 1));
/// let stored = first.write.expect("a new reservation is written");
/// let again = decide(Some(stored), &scope, &key, &fp, at);
/// assert!(matches!(again.answer, Reservation::InProgress { .. }));
/// assert!(again.write.is_none());
///
/// // With a fence floor (the adapter removed a record with fence 41), a fresh binding's
/// // fence is above it.
/// let fresh = decide(None, &scope, &key, &fp, DecisionContext::new(Timestamp::from_millis(5), &policy).with_fence_floor(41));
/// assert_eq!(fresh.answer.fence(), 42);
/// # Ok::<(), idemdb_core::KeyError>(())
/// ```
pub fn decide(
    existing: Option<Record>,
    scope: &Scope,
    key: &IdempotencyKey,
    fingerprint: &Fingerprint,
    context: DecisionContext<'_>,
) -> Decision {
    let DecisionContext { now, policy, fence_floor } = context;
    let lease =
        |fence, expires_at, attempt| Lease::new(ScopedKey::new(scope.clone(), key.clone()), fence, expires_at, attempt);
    let Some(record) = existing else {
        return acquire_fresh(fence_floor, fingerprint, now, policy, lease);
    };
    let now = now.max(record.updated_at);
    if record.is_forgotten(now) {
        // Past its last expiry the key is unknown again; the fence keeps growing.
        return acquire_fresh(record.fence.max(fence_floor), fingerprint, now, policy, lease);
    }
    if record.fingerprint != *fingerprint {
        return Decision::answer(Reservation::Mismatch { stored: record.state.kind() });
    }
    match record.state {
        State::InProgress { lease_expires_at } if now < lease_expires_at => {
            Decision::answer(Reservation::InProgress { retry_after: lease_expires_at.saturating_since(now) })
        }
        State::InProgress { .. } => match policy.expired_lease() {
            ExpiredLease::Takeover => acquire_again(record, now, policy, lease),
            ExpiredLease::Uncertain => {
                let cause = UncertainCause::LeaseExpired;
                Decision {
                    answer: Reservation::NeedsReconciliation { cause },
                    write: Some(Record { state: State::Uncertain { cause }, updated_at: now, ..record }),
                }
            }
        },
        State::Completed { expires_at, result, .. } => Decision::answer(if now < expires_at {
            Reservation::Replay { outcome: OutcomeClass::Completed, body: result }
        } else {
            Reservation::Expired { outcome: OutcomeClass::Completed }
        }),
        State::Failed { expires_at, error, .. } => Decision::answer(if now < expires_at {
            Reservation::Replay { outcome: OutcomeClass::Failed, body: error }
        } else {
            Reservation::Expired { outcome: OutcomeClass::Failed }
        }),
        State::Released { .. } => acquire_again(record, now, policy, lease),
        State::Uncertain { cause } => Decision::answer(Reservation::NeedsReconciliation { cause }),
        State::Tombstone { outcome, .. } => Decision::answer(Reservation::Expired { outcome }),
    }
}

/// A fresh binding's fence is at least the current time in milliseconds, so a key that was
/// forgotten (record removed) and later reused never reissues a fence from its earlier life.
fn acquire_fresh(
    previous_fence: u64,
    fingerprint: &Fingerprint,
    now: Timestamp,
    policy: &Policy,
    lease: impl FnOnce(u64, Timestamp, u32) -> Lease,
) -> Decision {
    let fence = previous_fence.saturating_add(1).max(now.as_millis());
    let lease_expires_at = now.saturating_add(policy.lease_ttl());
    Decision {
        answer: Reservation::Acquired(lease(fence, lease_expires_at, 1)),
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

fn acquire_again(
    record: Record,
    now: Timestamp,
    policy: &Policy,
    lease: impl FnOnce(u64, Timestamp, u32) -> Lease,
) -> Decision {
    let fence = record.fence.saturating_add(1);
    let attempt = record.attempts.saturating_add(1);
    let lease_expires_at = now.saturating_add(policy.lease_ttl());
    Decision {
        answer: Reservation::Acquired(lease(fence, lease_expires_at, attempt)),
        write: Some(Record {
            state: State::InProgress { lease_expires_at },
            fence,
            attempts: attempt,
            updated_at: now,
            ..record
        }),
    }
}
