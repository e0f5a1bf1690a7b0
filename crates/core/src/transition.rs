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
    /// The body is over the operation's limit.
    #[error("result is {len} bytes; the limit is {max}")]
    ResultTooLarge {
        /// Body length.
        len: usize,
        /// Limit.
        max: usize,
    },
}

fn check_fence(record: &Record, fence: u64) -> Result<(), TransitionError> {
    if record.fence != fence {
        return Err(TransitionError::StaleFence { presented: fence, current: record.fence });
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
    matches!(
        record.state,
        State::InProgress { .. } | State::Uncertain { cause: UncertainCause::LeaseExpired }
    )
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
pub fn complete(record: &Record, fence: u64, result: Vec<u8>, now: Timestamp, policy: &Policy) -> Result<Record, TransitionError> {
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
pub fn fail(record: &Record, fence: u64, failure: Failure, now: Timestamp, policy: &Policy) -> Result<Record, TransitionError> {
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
        Failure::Uncertain => Record {
            state: State::Uncertain { cause: UncertainCause::Reported },
            updated_at: now,
            ..record.clone()
        },
    })
}

/// Extends a live or expired lease that nobody else has taken over.
///
/// # Errors
/// [`TransitionError::StaleFence`], or [`TransitionError::WrongState`] when the record is not
/// in progress (a retry already marked it uncertain, or it finished).
pub fn renew(record: &Record, fence: u64, now: Timestamp, policy: &Policy) -> Result<(Record, Timestamp), TransitionError> {
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
pub fn reconcile(record: &Record, resolution: Resolution, now: Timestamp, policy: &Policy) -> Result<Record, TransitionError> {
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
