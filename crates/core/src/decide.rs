//! The decision: what a request with a given fingerprint meets in the store, as a pure function.

use crate::{
    AuditKind, DecisionTime, ExpiredLease, Fingerprint, IdempotencyKey, Lease, MAX_FENCE, OutcomeClass, Policy, Record,
    Reservation, Scope, ScopedKey, State, Timestamp, TransitionError, UncertainCause,
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

    /// The kind of audit event this decision records.
    pub fn audit_kind(&self) -> AuditKind {
        AuditKind::from(self.answer.kind())
    }

    /// The answer, when the decision changes nothing (a replay, in progress, a mismatch, an
    /// expired or uncertain key): an adapter that decided it from a read snapshot returns it
    /// without a write transaction, buffering only its audit event. `None` when there is a
    /// record to write: the adapter then decides again inside a write transaction.
    ///
    /// ```
    /// use idemdb_core::{AuditKind, DecisionContext, Fingerprint, IdempotencyKey, Policy, Scope, Timestamp, decide};
    /// let (scope, key) = (Scope::new("acme", "pay").unwrap(), IdempotencyKey::new("k-1").unwrap());
    /// let fingerprint = Fingerprint::of_canonical_json(b"{}");
    /// let policy = Policy::default();
    /// let context = DecisionContext::new(Timestamp::from_millis(1_000), &policy);
    /// // A new key writes its record: nothing to answer from a snapshot.
    /// let fresh = decide(None, &scope, &key, &fingerprint, context).unwrap();
    /// let record = fresh.write.clone().unwrap();
    /// assert!(fresh.unchanged().is_none());
    /// // The same request while the first still runs changes nothing.
    /// let again = decide(Some(record), &scope, &key, &fingerprint, context).unwrap();
    /// assert_eq!(again.audit_kind(), AuditKind::InProgress);
    /// assert!(again.unchanged().is_some());
    /// ```
    pub fn unchanged(self) -> Option<Reservation> {
        match self.write {
            None => Some(self.answer),
            Some(_) => None,
        }
    }
}

/// The circumstances of a decision: the time, the operation's policy and the fence floor.
#[derive(Debug, Clone, Copy)]
pub struct DecisionContext<'p> {
    /// Store time: it decides whether a lease is live, and it is the time a decision writes.
    /// If it is earlier than the record's last update (the clock went backwards) the record's
    /// time is used instead, so a TTL is never shortened and an expired lease is never revived.
    pub now: Timestamp,
    /// Retention time (at most `now`): it decides whether a record has expired or is
    /// forgotten. An adapter passes only time it has measured or confirmed, so a wall-clock
    /// jump alone never makes a known key unknown (see [`DecisionTime`]).
    pub retention: Timestamp,
    /// The operation's policy.
    pub policy: &'p Policy,
    /// The highest fence of any record the adapter has removed (0 if it never removes any):
    /// a fresh binding's fence is above it, so a lease of a removed binding never matches the
    /// fence of a later binding of the same key, however short the TTLs.
    pub fence_floor: u64,
    /// Whether the adapter has confirmed, in the deciding transaction, that no outbox effect
    /// was ever enqueued for the key. It matters only under
    /// [`ExpiredLease::TakeoverIfNoEffect`], for a record whose lease has expired (ask
    /// [`needs_effect_census`] first, so the lookup is made only then); `false` when not looked.
    pub no_effect_enqueued: bool,
}

impl<'p> DecisionContext<'p> {
    /// A decision at `now` (store and retention time alike) under `policy`, with fence
    /// floor 0.
    pub fn new(now: Timestamp, policy: &'p Policy) -> Self {
        DecisionContext { now, retention: now, policy, fence_floor: 0, no_effect_enqueued: false }
    }

    /// A decision at the two readings of `time` under `policy`, with fence floor 0.
    pub fn at(time: DecisionTime, policy: &'p Policy) -> Self {
        DecisionContext {
            now: time.now,
            retention: time.retention.min(time.now),
            policy,
            fence_floor: 0,
            no_effect_enqueued: false,
        }
    }

    /// The same context with a fence floor.
    #[must_use]
    pub fn with_fence_floor(self, fence_floor: u64) -> Self {
        DecisionContext { fence_floor, ..self }
    }

    /// The same context, saying whether the adapter found no outbox effect for the key (see
    /// [`DecisionContext::no_effect_enqueued`]).
    #[must_use]
    pub fn with_no_effect_enqueued(self, no_effect_enqueued: bool) -> Self {
        DecisionContext { no_effect_enqueued, ..self }
    }
}

/// Whether [`decide`] needs to know if an outbox effect was ever enqueued for the key of
/// `existing`: only when its operation's rule is [`ExpiredLease::TakeoverIfNoEffect`] and the
/// record is in progress with an expired lease. An adapter asks this first and looks up the
/// outbox (in the same transaction) only when it says yes, so no other reservation pays for
/// the lookup.
pub fn needs_effect_census(existing: Option<&Record>, context: &DecisionContext<'_>) -> bool {
    let Some(record) = existing else { return false };
    let now = context.now.max(record.updated_at);
    context.policy.expired_lease() == ExpiredLease::TakeoverIfNoEffect
        && matches!(record.state, State::InProgress { lease_expires_at } if now >= lease_expires_at)
        && !record.is_forgotten(context.retention.min(now))
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
/// let first = decide(None, &scope, &key, &fp, at)?;
/// let Reservation::Acquired(lease) = &first.answer else { panic!() };
/// assert_eq!((lease.fence(), lease.attempt()), (1_000, 1));
/// let stored = first.write.expect("a new reservation is written");
/// let again = decide(Some(stored), &scope, &key, &fp, at)?;
/// assert!(matches!(again.answer, Reservation::InProgress { .. }));
/// assert!(again.write.is_none());
///
/// // With a fence floor (the adapter removed a record with fence 41), a fresh binding's
/// // fence is above it.
/// let fresh = decide(None, &scope, &key, &fp, DecisionContext::new(Timestamp::from_millis(5), &policy).with_fence_floor(41))?;
/// assert_eq!(fresh.answer.fence(), 42);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`TransitionError::FenceExhausted`] when a new lease would need a fence above
/// [`MAX_FENCE`]: fences never repeat, so no lease is issued.
pub fn decide(
    existing: Option<Record>,
    scope: &Scope,
    key: &IdempotencyKey,
    fingerprint: &Fingerprint,
    context: DecisionContext<'_>,
) -> Result<Decision, TransitionError> {
    let DecisionContext { now, retention, policy, fence_floor, no_effect_enqueued } = context;
    let lease =
        |fence, expires_at, attempt| Lease::new(ScopedKey::new(scope.clone(), key.clone()), fence, expires_at, attempt);
    let Some(record) = existing else {
        return acquire_fresh(fence_floor, fingerprint, now, policy, lease);
    };
    let now = now.max(record.updated_at);
    let retention = retention.min(now);
    if record.is_forgotten(retention) {
        // Past its last expiry the key is unknown again; the fence keeps growing.
        return acquire_fresh(record.fence.max(fence_floor), fingerprint, now, policy, lease);
    }
    if record.fingerprint != *fingerprint {
        if let State::Released { .. } = record.state {
            // Released before any effect: the key is bound to no request, so any request may
            // take it (Stripe's rule: a request refused before any effect leaves no binding).
            return acquire_again(Record { fingerprint: *fingerprint, ..record }, now, policy, lease);
        }
        return Ok(Decision::answer(Reservation::Mismatch { stored: record.state.kind() }));
    }
    Ok(match record.state {
        State::InProgress { lease_expires_at } if now < lease_expires_at => {
            Decision::answer(Reservation::InProgress { retry_after: lease_expires_at.saturating_since(now) })
        }
        State::InProgress { .. } => match policy.expired_lease() {
            ExpiredLease::Takeover => acquire_again(record, now, policy, lease)?,
            // The attempt that died enqueued no effect: it had none, so it can run again.
            ExpiredLease::TakeoverIfNoEffect if no_effect_enqueued => acquire_again(record, now, policy, lease)?,
            ExpiredLease::Uncertain | ExpiredLease::TakeoverIfNoEffect => {
                let cause = UncertainCause::LeaseExpired;
                Decision {
                    answer: Reservation::NeedsReconciliation { cause },
                    write: Some(Record { state: State::Uncertain { cause }, updated_at: now, ..record }),
                }
            }
        },
        State::Completed { expires_at, result, .. } => Decision::answer(if retention < expires_at {
            Reservation::Replay { outcome: OutcomeClass::Completed, body: result }
        } else {
            Reservation::Expired { outcome: OutcomeClass::Completed }
        }),
        State::Failed { expires_at, error, .. } => Decision::answer(if retention < expires_at {
            Reservation::Replay { outcome: OutcomeClass::Failed, body: error }
        } else {
            Reservation::Expired { outcome: OutcomeClass::Failed }
        }),
        State::Released { .. } => acquire_again(record, now, policy, lease)?,
        State::Uncertain { cause } => Decision::answer(Reservation::NeedsReconciliation { cause }),
        State::Tombstone { outcome, .. } => Decision::answer(Reservation::Expired { outcome }),
    })
}

/// The fence after `fence`, if one is left.
pub(crate) fn next_fence(fence: u64) -> Result<u64, TransitionError> {
    fence.checked_add(1).filter(|next| *next <= MAX_FENCE).ok_or(TransitionError::FenceExhausted { fence })
}

/// A fresh binding's fence: above `previous` and at least the time in milliseconds.
pub(crate) fn fresh_fence(previous: u64, now: Timestamp) -> Result<u64, TransitionError> {
    let fence = next_fence(previous)?.max(now.as_millis());
    if fence > MAX_FENCE {
        return Err(TransitionError::FenceExhausted { fence: previous });
    }
    Ok(fence)
}

/// A fresh binding's fence is at least the current time in milliseconds, so a key that was
/// forgotten (record removed) and later reused never reissues a fence from its earlier life.
fn acquire_fresh(
    previous_fence: u64,
    fingerprint: &Fingerprint,
    now: Timestamp,
    policy: &Policy,
    lease: impl FnOnce(u64, Timestamp, u32) -> Lease,
) -> Result<Decision, TransitionError> {
    let fence = fresh_fence(previous_fence, now)?;
    let lease_expires_at = now.saturating_add(policy.lease_ttl());
    Ok(Decision {
        answer: Reservation::Acquired(lease(fence, lease_expires_at, 1)),
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

fn acquire_again(
    record: Record,
    now: Timestamp,
    policy: &Policy,
    lease: impl FnOnce(u64, Timestamp, u32) -> Lease,
) -> Result<Decision, TransitionError> {
    let fence = next_fence(record.fence)?;
    let attempt = record.attempts.saturating_add(1);
    let lease_expires_at = now.saturating_add(policy.lease_ttl());
    Ok(Decision {
        answer: Reservation::Acquired(lease(fence, lease_expires_at, attempt)),
        write: Some(Record {
            state: State::InProgress { lease_expires_at },
            fence,
            attempts: attempt,
            updated_at: now,
            ..record
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

    fn ids() -> (Scope, IdempotencyKey) {
        (Scope::new("t", "op").unwrap(), IdempotencyKey::new("k").unwrap())
    }

    #[test]
    fn a_lease_that_would_need_a_fence_above_the_largest_is_refused() {
        let (scope, key) = ids();
        let (fp, policy) = (Fingerprint::from_bytes([1; 32]), Policy::default());
        let at = DecisionContext::new(Timestamp::from_millis(20), &policy);
        let last = decide(Some(released(MAX_FENCE - 1)), &scope, &key, &fp, at).expect("one fence is left");
        assert_eq!(last.answer.fence(), MAX_FENCE);
        assert_eq!(
            decide(Some(released(MAX_FENCE)), &scope, &key, &fp, at),
            Err(TransitionError::FenceExhausted { fence: MAX_FENCE })
        );
        assert_eq!(
            decide(None, &scope, &key, &fp, at.with_fence_floor(MAX_FENCE)),
            Err(TransitionError::FenceExhausted { fence: MAX_FENCE })
        );
        assert_eq!(
            decide(None, &scope, &key, &fp, DecisionContext::new(Timestamp::MAX, &policy)),
            Err(TransitionError::FenceExhausted { fence: 0 }),
            "a clock past 2^63 ms cannot stamp a fence"
        );
    }

    #[test]
    fn expiry_and_forgetting_follow_the_retention_time_and_leases_the_store_time() {
        let (scope, key) = ids();
        let policy = Policy::default()
            .with_lease_ttl(core::time::Duration::from_millis(10))
            .with_response_ttl(core::time::Duration::from_millis(100))
            .with_tombstone_ttl(core::time::Duration::from_millis(100));
        let fp = Fingerprint::from_bytes([1; 32]);
        let t = |ms| Timestamp::from_millis(ms);
        let at = |now, retention| DecisionContext::at(DecisionTime::new(t(now), t(retention)), &policy);
        let reserved = decide(None, &scope, &key, &fp, at(0, 0)).expect("decide").write.expect("write");
        let done = crate::complete(&reserved, reserved.fence, b"r".to_vec(), t(0), &policy).expect("complete");
        // Store time a year ahead (an unconfirmed jump), retention time where it was.
        let ahead = decide(Some(done.clone()), &scope, &key, &fp, at(31_536_000_000, 50)).expect("decide");
        assert_eq!(ahead.answer, Reservation::Replay { outcome: OutcomeClass::Completed, body: b"r".to_vec() });
        let expired = decide(Some(done.clone()), &scope, &key, &fp, at(1_000, 150)).expect("decide");
        assert!(matches!(expired.answer, Reservation::Expired { .. }));
        let forgotten = decide(Some(done), &scope, &key, &fp, at(1_000, 200)).expect("decide");
        assert!(matches!(forgotten.answer, Reservation::Acquired(_)));
        // A lease is judged by store time.
        let lease = decide(Some(reserved), &scope, &key, &fp, at(10, 0)).expect("decide");
        assert!(matches!(lease.answer, Reservation::NeedsReconciliation { .. }));
    }

    #[test]
    fn an_expired_attempt_with_no_effect_enqueued_is_taken_over_and_one_with_an_effect_is_uncertain() {
        let (scope, key) = ids();
        let fp = Fingerprint::from_bytes([1; 32]);
        let policy = Policy::default()
            .with_lease_ttl(core::time::Duration::from_millis(10))
            .with_expired_lease(ExpiredLease::TakeoverIfNoEffect);
        let first =
            decide(None, &scope, &key, &fp, DecisionContext::new(Timestamp::from_millis(100), &policy)).unwrap();
        let stored = first.write.unwrap();
        let (live, expired) = (
            DecisionContext::new(Timestamp::from_millis(105), &policy),
            DecisionContext::new(Timestamp::from_millis(110), &policy),
        );
        // Asked only for an expired lease under this rule, never for a live one or another rule.
        assert!(!needs_effect_census(Some(&stored), &live));
        assert!(needs_effect_census(Some(&stored), &expired));
        assert!(!needs_effect_census(None, &expired));
        let other = Policy::default().with_lease_ttl(core::time::Duration::from_millis(10));
        assert!(!needs_effect_census(Some(&stored), &DecisionContext::new(Timestamp::from_millis(110), &other)));
        // A live lease stays in progress whatever the census says.
        let still = decide(Some(stored.clone()), &scope, &key, &fp, live.with_no_effect_enqueued(true)).unwrap();
        assert!(matches!(still.answer, Reservation::InProgress { .. }));
        // No effect: a second attempt, above the first fence.
        let again = decide(Some(stored.clone()), &scope, &key, &fp, expired.with_no_effect_enqueued(true)).unwrap();
        let Reservation::Acquired(lease) = &again.answer else { panic!("{:?}", again.answer) };
        assert_eq!((lease.attempt(), lease.fence()), (2, stored.fence + 1));
        // An effect (or no census): uncertain, never run again.
        let doubt = decide(Some(stored.clone()), &scope, &key, &fp, expired).unwrap();
        assert_eq!(doubt.answer, Reservation::NeedsReconciliation { cause: UncertainCause::LeaseExpired });
        assert!(matches!(doubt.write.unwrap().state, State::Uncertain { cause: UncertainCause::LeaseExpired }));
        // Another request's fingerprint is still a mismatch.
        let other_fp = Fingerprint::from_bytes([2; 32]);
        let mismatch = decide(Some(stored), &scope, &key, &other_fp, expired.with_no_effect_enqueued(true)).unwrap();
        assert!(matches!(mismatch.answer, Reservation::Mismatch { .. }));
    }

    #[test]
    fn only_the_current_holder_of_an_attempt_in_progress_may_add_to_it() {
        let (scope, key) = ids();
        let fp = Fingerprint::from_bytes([1; 32]);
        let policy = Policy::default();
        let stored = decide(None, &scope, &key, &fp, DecisionContext::new(Timestamp::from_millis(100), &policy))
            .unwrap()
            .write
            .unwrap();
        assert_eq!(crate::check_holder(&stored, stored.fence, "enqueue"), Ok(()));
        assert!(matches!(
            crate::check_holder(&stored, stored.fence - 1, "enqueue"),
            Err(TransitionError::StaleFence { .. })
        ));
        let done =
            crate::complete(&stored, stored.fence, b"ok".to_vec(), Timestamp::from_millis(101), &policy).unwrap();
        assert!(matches!(crate::check_holder(&done, done.fence, "enqueue"), Err(TransitionError::WrongState { .. })));
    }
}
