//! Transitions a lease holder or an operator makes: complete, fail, renew, reconcile.
//!
//! Like [`decide`](crate::decide), each is a pure function from the stored record to the
//! record to write; storage adapters run them inside one write transaction.

use crate::{OutcomeClass, Policy, Record, State, StateKind, Timestamp, UncertainCause};

/// How an attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// The operation failed for good (card declined): the body is replayed to retries, and a
    /// new try needs a new key.
    Definitive(Vec<u8>),
    /// The operation failed before any effect: the reservation is released and a retry of the
    /// same request may reserve again.
    Retryable,
    /// An external effect may have happened (timeout after sending): retries are refused until
    /// the record is reconciled.
    Uncertain,
}

/// How an operator or a reconciliation job resolves an uncertain record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resolution {
    /// The effect happened; store this result and replay it.
    Completed(Vec<u8>),
    /// The effect did not happen and will not: store this failure and replay it.
    Failed(Vec<u8>),
    /// The effect did not happen: release the key so the same request may run again.
    Released,
}

/// A transition was refused; the stored record is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransitionError {
    /// The lease's fence is not the record's current fence: a newer attempt took over.
    #[error("stale lease: fence {presented} is older than the record's fence {current}")]
    StaleFence {
        /// The fence presented.
        presented: u64,
        /// The record's fence.
        current: u64,
    },
    /// The record is not in a state that allows this transition.
    #[error("record is {state}; cannot {action}")]
    WrongState {
        /// The record's state.
        state: StateKind,
        /// What was attempted.
        action: &'static str,
    },
    /// The lease is still live: the attempt may still be running, so reconciling now could
    /// contradict it.
    #[error("lease is still live until {until}; reconcile after it expires")]
    LeaseLive {
        /// Lease end.
        until: Timestamp,
    },
    /// A new lease would need a fence above [`MAX_FENCE`](crate::MAX_FENCE): fences never
    /// repeat, so no lease is issued for this key.
    #[error("no fence above {fence} is left for this key (the largest is 2^63 - 1)")]
    FenceExhausted {
        /// The record's fence.
        fence: u64,
    },
    /// The body is over the operation's limit.
    #[error("result is {len} bytes; the limit is {max}")]
    ResultTooLarge {
        /// Body length.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// The record has an effect whose outcome is not settled (pending, being dispatched, or
    /// uncertain): settling the record by hand could contradict what the provider did. Resolve
    /// the effect with the provider's facts (confirmed, failed, not found), which settles the
    /// record with it.
    #[error("its effect `{effect}` is {state}: {}", settle_effect_first(*state))]
    EffectUnresolved {
        /// The effect.
        effect: crate::EffectName,
        /// Its state.
        state: crate::OutboxStateKind,
    },
}

/// What to do about an unresolved effect before its record can be settled.
fn settle_effect_first(state: crate::OutboxStateKind) -> &'static str {
    match state {
        crate::OutboxStateKind::Uncertain => {
            "resolve the effect with the provider's facts first (confirmed, failed or not_found); that settles the record"
        }
        _ => {
            "its dispatcher reports the outcome, which settles the record (a call that outlives its deadline is \
             reported unknown, then the provider is asked); resolve it then if no fact does"
        }
    }
}

impl TransitionError {
    /// The stable code: [`ErrorCode::StaleLease`](crate::ErrorCode::StaleLease),
    /// [`ErrorCode::WrongState`](crate::ErrorCode::WrongState),
    /// [`ErrorCode::LeaseLive`](crate::ErrorCode::LeaseLive),
    /// [`ErrorCode::FenceExhausted`](crate::ErrorCode::FenceExhausted) or
    /// [`ErrorCode::TooLarge`](crate::ErrorCode::TooLarge); an unresolved effect is
    /// [`ErrorCode::WrongState`](crate::ErrorCode::WrongState).
    pub fn code(&self) -> crate::ErrorCode {
        match self {
            TransitionError::StaleFence { .. } => crate::ErrorCode::StaleLease,
            TransitionError::WrongState { .. } => crate::ErrorCode::WrongState,
            TransitionError::LeaseLive { .. } => crate::ErrorCode::LeaseLive,
            TransitionError::FenceExhausted { .. } => crate::ErrorCode::FenceExhausted,
            TransitionError::ResultTooLarge { .. } => crate::ErrorCode::TooLarge,
            TransitionError::EffectUnresolved { .. } => crate::ErrorCode::WrongState,
        }
    }
}

crate::coded!(TransitionError);

/// The name of a [`Failure`], without its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// [`Failure::Definitive`].
    Definitive,
    /// [`Failure::Retryable`].
    Retryable,
    /// [`Failure::Uncertain`].
    Uncertain,
}

crate::names!(FailureKind, "failure", {
    Definitive => "definitive",
    Retryable => "retryable",
    Uncertain => "uncertain",
});

impl Failure {
    /// Which failure this is.
    pub fn kind(&self) -> FailureKind {
        match self {
            Failure::Definitive(_) => FailureKind::Definitive,
            Failure::Retryable => FailureKind::Retryable,
            Failure::Uncertain => FailureKind::Uncertain,
        }
    }

    /// The failure of kind `kind`; `body` is the stored failure of a definitive one (ignored
    /// otherwise).
    pub fn of_kind(kind: FailureKind, body: Vec<u8>) -> Failure {
        match kind {
            FailureKind::Definitive => Failure::Definitive(body),
            FailureKind::Retryable => Failure::Retryable,
            FailureKind::Uncertain => Failure::Uncertain,
        }
    }
}

/// The name of a [`Resolution`], without its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResolutionKind {
    /// [`Resolution::Completed`].
    Completed,
    /// [`Resolution::Failed`].
    Failed,
    /// [`Resolution::Released`].
    Released,
}

crate::names!(ResolutionKind, "resolution", {
    Completed => "completed",
    Failed => "failed",
    Released => "released",
});

/// Why a record or an effect was resolved: who decided, on what fact. The audit trail
/// records it with every resolution (the `correlation` of a `reconciled` or
/// `effect_resolved` event; see [`AuditEvent::cause`](crate::AuditEvent::cause)), so an
/// operator can tell a provider's answer from a person's decision afterwards.
///
/// ```
/// use idemdb_core::ResolutionCause;
/// assert_eq!(ResolutionCause::ProviderConfirmed.as_str(), "provider_confirmed");
/// assert_eq!("operator".parse::<ResolutionCause>(), Ok(ResolutionCause::Operator));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResolutionCause {
    /// A person decided (the admin API, the CLI).
    Operator,
    /// The provider, asked by the effect's provider key, has the effect.
    ProviderConfirmed,
    /// The provider says the effect failed.
    ProviderFailed,
    /// The provider has no effect under the provider key.
    ProviderNotFound,
    /// The operation declares its effects through the outbox and none was enqueued: the
    /// attempt provably had no effect, so its key was released.
    EffectFree,
    /// The application's own code decided (a library call with its own facts).
    Application,
}

crate::names!(ResolutionCause, "resolution cause", {
    Operator => "operator",
    ProviderConfirmed => "provider_confirmed",
    ProviderFailed => "provider_failed",
    ProviderNotFound => "provider_not_found",
    EffectFree => "effect_free",
    Application => "application",
});

impl Resolution {
    /// Which resolution this is.
    pub fn kind(&self) -> ResolutionKind {
        match self {
            Resolution::Completed(_) => ResolutionKind::Completed,
            Resolution::Failed(_) => ResolutionKind::Failed,
            Resolution::Released => ResolutionKind::Released,
        }
    }

    /// The resolution of kind `kind`; `body` is the stored result or failure (ignored for
    /// a release).
    pub fn of_kind(kind: ResolutionKind, body: Vec<u8>) -> Resolution {
        match kind {
            ResolutionKind::Completed => Resolution::Completed(body),
            ResolutionKind::Failed => Resolution::Failed(body),
            ResolutionKind::Released => Resolution::Released,
        }
    }
}

fn check_fence(record: &Record, fence: u64) -> Result<(), TransitionError> {
    if record.fence != fence {
        return Err(TransitionError::StaleFence { presented: fence, current: record.fence });
    }
    Ok(())
}

/// Checks that the holder of the lease with `fence` may still add to its attempt — enqueue an
/// outbox effect for it: the fence is the record's and the record is in progress (a lease that
/// ran out but that nobody has taken over still counts). A holder whose record was taken over
/// can add nothing, so an attempt found effect-free stays effect-free.
///
/// # Errors
/// [`TransitionError::StaleFence`], or [`TransitionError::WrongState`] naming `action`.
pub fn check_holder(record: &Record, fence: u64, action: &'static str) -> Result<(), TransitionError> {
    check_fence(record, fence)?;
    if !matches!(record.state, State::InProgress { .. }) {
        return Err(TransitionError::WrongState { state: record.state.kind(), action });
    }
    Ok(())
}

fn check_size(body: &[u8], policy: &Policy) -> Result<(), TransitionError> {
    if body.len() > policy.max_result_bytes() {
        return Err(TransitionError::ResultTooLarge { len: body.len(), max: policy.max_result_bytes() });
    }
    Ok(())
}

/// Whether the lease holder may still finish: the record is in progress, or became uncertain
/// only because its lease ran out (the holder's report is then the best evidence there is).
fn holder_may_finish(record: &Record) -> bool {
    matches!(record.state, State::InProgress { .. } | State::Uncertain { cause: UncertainCause::LeaseExpired })
}

fn finished(record: &Record, outcome: OutcomeClass, body: Vec<u8>, now: Timestamp, policy: &Policy) -> Record {
    let expires_at = now.saturating_add(policy.response_ttl());
    let forget_at = expires_at.saturating_add(policy.tombstone_ttl());
    let state = match outcome {
        OutcomeClass::Completed => State::Completed { result: body, expires_at, forget_at },
        OutcomeClass::Failed => State::Failed { error: body, expires_at, forget_at },
    };
    Record { state, updated_at: now, ..record.clone() }
}

fn released(record: &Record, now: Timestamp, policy: &Policy) -> Record {
    let forget_at = now.saturating_add(policy.response_ttl()).saturating_add(policy.tombstone_ttl());
    Record { state: State::Released { forget_at }, updated_at: now, ..record.clone() }
}

/// Completes the record with `result`, if `fence` is current.
///
/// # Errors
/// [`TransitionError::StaleFence`], [`TransitionError::WrongState`] (already finished),
/// [`TransitionError::ResultTooLarge`].
pub fn complete(
    record: &Record,
    fence: u64,
    result: Vec<u8>,
    now: Timestamp,
    policy: &Policy,
) -> Result<Record, TransitionError> {
    check_fence(record, fence)?;
    if !holder_may_finish(record) {
        return Err(TransitionError::WrongState { state: record.state.kind(), action: "complete" });
    }
    check_size(&result, policy)?;
    Ok(finished(record, OutcomeClass::Completed, result, now.max(record.updated_at), policy))
}

/// Records a failed attempt, if `fence` is current.
///
/// # Errors
/// [`TransitionError::StaleFence`], [`TransitionError::WrongState`] (already finished),
/// [`TransitionError::ResultTooLarge`].
pub fn fail(
    record: &Record,
    fence: u64,
    failure: Failure,
    now: Timestamp,
    policy: &Policy,
) -> Result<Record, TransitionError> {
    check_fence(record, fence)?;
    if !holder_may_finish(record) {
        return Err(TransitionError::WrongState { state: record.state.kind(), action: "fail" });
    }
    let now = now.max(record.updated_at);
    Ok(match failure {
        Failure::Definitive(body) => {
            check_size(&body, policy)?;
            finished(record, OutcomeClass::Failed, body, now, policy)
        }
        Failure::Retryable => released(record, now, policy),
        Failure::Uncertain => {
            Record { state: State::Uncertain { cause: UncertainCause::Reported }, updated_at: now, ..record.clone() }
        }
    })
}

/// Extends a live or expired lease that nobody else has taken over.
///
/// # Errors
/// [`TransitionError::StaleFence`], or [`TransitionError::WrongState`] when the record is not
/// in progress (a retry already marked it uncertain, or it finished).
pub fn renew(
    record: &Record,
    fence: u64,
    now: Timestamp,
    policy: &Policy,
) -> Result<(Record, Timestamp), TransitionError> {
    check_fence(record, fence)?;
    let State::InProgress { lease_expires_at } = record.state else {
        return Err(TransitionError::WrongState { state: record.state.kind(), action: "renew" });
    };
    let now = now.max(record.updated_at);
    // Renewal never shortens a lease, even if the clock went backwards.
    let lease_expires_at = now.saturating_add(policy.lease_ttl()).max(lease_expires_at);
    Ok((Record { state: State::InProgress { lease_expires_at }, updated_at: now, ..record.clone() }, lease_expires_at))
}

/// Resolves an uncertain record (or an in-progress one whose lease expired).
///
/// # Errors
/// [`TransitionError::LeaseLive`] while an attempt may still be running,
/// [`TransitionError::WrongState`] for a record that is not uncertain,
/// [`TransitionError::ResultTooLarge`].
pub fn reconcile(
    record: &Record,
    resolution: Resolution,
    now: Timestamp,
    policy: &Policy,
) -> Result<Record, TransitionError> {
    let now = now.max(record.updated_at);
    match record.state {
        State::Uncertain { .. } => {}
        State::InProgress { lease_expires_at } if now >= lease_expires_at => {}
        State::InProgress { lease_expires_at } => return Err(TransitionError::LeaseLive { until: lease_expires_at }),
        _ => return Err(TransitionError::WrongState { state: record.state.kind(), action: "reconcile" }),
    }
    Ok(match resolution {
        Resolution::Completed(body) => {
            check_size(&body, policy)?;
            finished(record, OutcomeClass::Completed, body, now, policy)
        }
        Resolution::Failed(body) => {
            check_size(&body, policy)?;
            finished(record, OutcomeClass::Failed, body, now, policy)
        }
        Resolution::Released => released(record, now, policy),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        Decision, DecisionContext, ExpiredLease, Fingerprint, IdempotencyKey, Policy, Reservation, Scope, decide,
    };
    use core::time::Duration;

    fn policy() -> Policy {
        Policy::default().with_lease_ttl(Duration::from_secs(10)).with_max_result_bytes(16)
    }

    /// Decides a request for the one key these tests use.
    fn decide_at(existing: Option<Record>, fingerprint: &Fingerprint, at: Timestamp, policy: &Policy) -> Decision {
        let scope = Scope::new("t", "op").unwrap();
        let key = IdempotencyKey::new("k").unwrap();
        decide(existing, &scope, &key, fingerprint, DecisionContext::new(at, policy)).unwrap()
    }

    fn reserved(at: u64) -> Record {
        decide_at(None, &Fingerprint::from_bytes([1; 32]), Timestamp::from_millis(at), &policy()).write.unwrap()
    }

    #[test]
    fn stale_fence_is_refused_everywhere() {
        let record = reserved(1_000);
        let stale = record.fence - 1;
        let at = Timestamp::from_millis(1_001);
        let expected = TransitionError::StaleFence { presented: stale, current: record.fence };
        assert_eq!(complete(&record, stale, vec![], at, &policy()), Err(expected.clone()));
        assert_eq!(fail(&record, stale, Failure::Retryable, at, &policy()), Err(expected.clone()));
        assert_eq!(renew(&record, stale, at, &policy()).map(|_| ()), Err(expected));
    }

    #[test]
    fn takeover_makes_the_old_lease_stale() {
        let takeover = policy().with_expired_lease(ExpiredLease::Takeover);
        let record = reserved(1_000);
        let old_fence = record.fence;
        let later = Timestamp::from_millis(20_000);
        let decision = decide_at(Some(record.clone()), &record.fingerprint, later, &takeover);
        let Reservation::Acquired(lease) = &decision.answer else { panic!("{decision:?}") };
        let (fence, attempt) = (lease.fence(), lease.attempt());
        assert_eq!((fence, attempt), (old_fence + 1, 2));
        let taken = decision.write.unwrap();
        assert!(matches!(
            complete(&taken, old_fence, vec![], later, &takeover),
            Err(TransitionError::StaleFence { .. })
        ));
        assert!(complete(&taken, fence, vec![], later, &takeover).is_ok());
    }

    #[test]
    fn finished_records_refuse_a_second_finish() {
        let record = reserved(1_000);
        let at = Timestamp::from_millis(1_001);
        let done = complete(&record, record.fence, b"ok".to_vec(), at, &policy()).unwrap();
        assert_eq!(
            complete(&done, done.fence, b"again".to_vec(), at, &policy()),
            Err(TransitionError::WrongState { state: crate::StateKind::Completed, action: "complete" })
        );
        assert!(matches!(
            fail(&done, done.fence, Failure::Uncertain, at, &policy()),
            Err(TransitionError::WrongState { .. })
        ));
        assert!(matches!(renew(&done, done.fence, at, &policy()), Err(TransitionError::WrongState { .. })));
    }

    #[test]
    fn result_limit_is_enforced() {
        let record = reserved(1_000);
        let at = Timestamp::from_millis(1_001);
        assert_eq!(
            complete(&record, record.fence, vec![0; 17], at, &policy()),
            Err(TransitionError::ResultTooLarge { len: 17, max: 16 })
        );
        assert!(complete(&record, record.fence, vec![0; 16], at, &policy()).is_ok());
        assert!(matches!(
            fail(&record, record.fence, Failure::Definitive(vec![0; 17]), at, &policy()),
            Err(TransitionError::ResultTooLarge { .. })
        ));
    }

    #[test]
    fn reconcile_waits_for_the_lease_and_only_touches_uncertain_records() {
        let record = reserved(1_000);
        let live = Timestamp::from_millis(5_000);
        assert_eq!(
            reconcile(&record, Resolution::Released, live, &policy()),
            Err(TransitionError::LeaseLive { until: Timestamp::from_millis(11_000) })
        );
        let expired = Timestamp::from_millis(11_000);
        let released = reconcile(&record, Resolution::Released, expired, &policy()).unwrap();
        assert_eq!(released.state.kind(), crate::StateKind::Released);
        assert!(matches!(
            reconcile(&released, Resolution::Completed(vec![]), expired, &policy()),
            Err(TransitionError::WrongState { .. })
        ));
        let uncertain = fail(&record, record.fence, Failure::Uncertain, live, &policy()).unwrap();
        let done = reconcile(&uncertain, Resolution::Completed(b"ch_1".to_vec()), live, &policy()).unwrap();
        assert!(matches!(done.state, State::Completed { ref result, .. } if result == b"ch_1"));
    }

    #[test]
    fn renewal_never_shortens_a_lease_when_the_clock_goes_back() {
        let record = reserved(100_000);
        let (renewed, until) = renew(&record, record.fence, Timestamp::from_millis(50_000), &policy()).unwrap();
        assert_eq!(until, Timestamp::from_millis(110_000));
        assert_eq!(renewed.updated_at, Timestamp::from_millis(100_000));
        let (_, later) = renew(&record, record.fence, Timestamp::from_millis(105_000), &policy()).unwrap();
        assert_eq!(later, Timestamp::from_millis(115_000));
    }

    #[test]
    fn lease_holder_may_complete_after_expiry_marked_it_uncertain() {
        let record = reserved(1_000);
        let expired = decide_at(Some(record.clone()), &record.fingerprint, Timestamp::from_millis(20_000), &policy());
        let uncertain = expired.write.unwrap();
        assert_eq!(uncertain.state, State::Uncertain { cause: UncertainCause::LeaseExpired });
        let done = complete(&uncertain, record.fence, b"late".to_vec(), Timestamp::from_millis(21_000), &policy());
        assert!(done.is_ok());
        // ...but a reported uncertainty needs an explicit reconcile.
        let reported =
            fail(&record, record.fence, Failure::Uncertain, Timestamp::from_millis(2_000), &policy()).unwrap();
        assert!(matches!(
            complete(&reported, record.fence, vec![], Timestamp::from_millis(3_000), &policy()),
            Err(TransitionError::WrongState { .. })
        ));
    }
}
