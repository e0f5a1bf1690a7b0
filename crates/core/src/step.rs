//! A lease holder's steps as data, with the audit event each records.

use crate::{AuditKind, Failure, Lease, Policy, Record, State, Timestamp, TransitionError};

/// What a lease holder does to its record — complete, fail or renew — as data: every adapter
/// loads the record, applies the step, writes the result and records [`LeaseStep::audit_kind`],
/// so the rule for each step lives here once.
///
/// ```
/// use idemdb_core::{AuditKind, DecisionContext, Fingerprint, IdempotencyKey, LeaseStep, Policy, Reservation};
/// use idemdb_core::{Scope, StateKind, Timestamp, decide};
/// let (scope, key) = (Scope::new("acme", "pay").unwrap(), IdempotencyKey::new("k-1").unwrap());
/// let policy = Policy::default();
/// let now = Timestamp::from_millis(1_000);
/// let fresh = decide(None, &scope, &key, &Fingerprint::of_canonical_json(b"{}"), DecisionContext::new(now, &policy))
///     .unwrap();
/// let Reservation::Acquired(lease) = fresh.answer else { unreachable!() };
/// let step = LeaseStep::Complete(b"ok".to_vec());
/// assert_eq!(step.audit_kind(), AuditKind::Completed);
/// let done = step.apply(&fresh.write.unwrap(), &lease, now, &policy).unwrap();
/// assert_eq!(done.state.kind(), StateKind::Completed);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseStep {
    /// Store the attempt's result ([`complete`](crate::complete)).
    Complete(Vec<u8>),
    /// Record the attempt's failure ([`fail`](crate::fail)).
    Fail(Failure),
    /// Extend the lease ([`renew`](crate::renew)).
    Renew,
}

impl LeaseStep {
    /// The audit event the step records.
    pub fn audit_kind(&self) -> AuditKind {
        match self {
            LeaseStep::Complete(_) => AuditKind::Completed,
            LeaseStep::Fail(_) => AuditKind::Failed,
            LeaseStep::Renew => AuditKind::Renewed,
        }
    }

    /// The record after the step, taken by `lease`'s holder at `now` under `policy`.
    ///
    /// # Errors
    /// As [`complete`](crate::complete), [`fail`](crate::fail) and [`renew`](crate::renew).
    pub fn apply(
        self,
        record: &Record,
        lease: &Lease,
        now: Timestamp,
        policy: &Policy,
    ) -> Result<Record, TransitionError> {
        let fence = lease.fence();
        match self {
            LeaseStep::Complete(result) => crate::complete(record, fence, result, now, policy),
            LeaseStep::Fail(failure) => crate::fail(record, fence, failure, now, policy),
            LeaseStep::Renew => crate::renew(record, fence, now, policy).map(|(record, _)| record),
        }
    }
}

impl Lease {
    /// This lease as `record` (its record after a renewal) now holds it: the new expiry while
    /// in progress, this lease's own otherwise.
    pub fn renewed_by(&self, record: &Record) -> Lease {
        match record.state {
            State::InProgress { lease_expires_at } => self.renewed(lease_expires_at),
            _ => self.clone(),
        }
    }
}
