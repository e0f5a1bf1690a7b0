//! The stored record and its states, exactly as in the design's state table.

use serde::{Deserialize, Serialize};

use crate::{Fingerprint, Timestamp};

/// The largest fence a record may hold: 2^63 − 1.
///
/// A fresh binding's fence is at least the store time in milliseconds, and each lease of the
/// binding adds one, so real fences stay near 2^41 for centuries; a fence far above that comes
/// only from a damaged or forged record. Keeping fences below 2^63 leaves room to refuse, with
/// [`TransitionError::FenceExhausted`](crate::TransitionError::FenceExhausted), a lease that
/// would need a larger one, instead of handing out a fence twice.
pub const MAX_FENCE: u64 = (1 << 63) - 1;

/// The final outcome a record reached, kept in its tombstone after the body is purged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OutcomeClass {
    /// The operation completed and its result was stored.
    Completed,
    /// The operation failed definitively (for example, the card was declined).
    Failed,
}

crate::names!(OutcomeClass, "outcome", { Completed => "completed", Failed => "failed" });

/// Why a record is uncertain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UncertainCause {
    /// A retry found the lease expired while the record was still in progress.
    LeaseExpired,
    /// The lease holder reported that an external effect may have happened
    /// (for example, a provider call timed out).
    Reported,
}

crate::names!(UncertainCause, "uncertain cause", { LeaseExpired => "lease_expired", Reported => "reported" });

/// Where a record is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum State {
    /// An attempt holds the lease until `lease_expires_at`.
    InProgress {
        /// End of the lease (exclusive).
        lease_expires_at: Timestamp,
    },
    /// Finished with a result, replayed byte for byte until `expires_at`.
    Completed {
        /// The stored result.
        #[serde(with = "serde_bytes")]
        result: Vec<u8>,
        /// When the result stops being replayed and becomes a tombstone.
        expires_at: Timestamp,
        /// When the tombstone is forgotten.
        forget_at: Timestamp,
    },
    /// Failed definitively; the failure is replayed until `expires_at`.
    Failed {
        /// The stored failure body.
        #[serde(with = "serde_bytes")]
        error: Vec<u8>,
        /// When the failure stops being replayed and becomes a tombstone.
        expires_at: Timestamp,
        /// When the tombstone is forgotten.
        forget_at: Timestamp,
    },
    /// Failed before any effect; a retry of the same request may reserve again.
    Released {
        /// When the record is forgotten.
        forget_at: Timestamp,
    },
    /// The outcome of an external effect is unknown: retries are refused until reconciled.
    Uncertain {
        /// Why.
        cause: UncertainCause,
    },
    /// The body was purged; only the outcome class is kept, so a late retry is refused.
    Tombstone {
        /// The outcome the record reached.
        outcome: OutcomeClass,
        /// When the tombstone is forgotten.
        forget_at: Timestamp,
    },
}

/// The name of a state, without its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum StateKind {
    /// [`State::InProgress`].
    InProgress,
    /// [`State::Completed`].
    Completed,
    /// [`State::Failed`].
    Failed,
    /// [`State::Released`].
    Released,
    /// [`State::Uncertain`].
    Uncertain,
    /// [`State::Tombstone`].
    Tombstone,
}

crate::names!(StateKind, "state", {
    InProgress => "in_progress",
    Completed => "completed",
    Failed => "failed",
    Released => "released",
    Uncertain => "uncertain",
    Tombstone => "tombstone",
});

impl State {
    /// The state's name.
    pub fn kind(&self) -> StateKind {
        match self {
            State::InProgress { .. } => StateKind::InProgress,
            State::Completed { .. } => StateKind::Completed,
            State::Failed { .. } => StateKind::Failed,
            State::Released { .. } => StateKind::Released,
            State::Uncertain { .. } => StateKind::Uncertain,
            State::Tombstone { .. } => StateKind::Tombstone,
        }
    }
}

/// One `(scope, key)` record: what was asked (fingerprint), where it is (state), and its
/// bookkeeping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Fingerprint of the request the key is bound to.
    pub fingerprint: Fingerprint,
    /// The state.
    pub state: State,
    /// Fence of the newest lease issued for this key. It only grows: a takeover adds one, and
    /// a fresh binding starts at the store time in milliseconds (or one above the previous
    /// fence), so a stale lease never matches a newer record, even after the key was
    /// forgotten and reused.
    pub fence: u64,
    /// Number of leases issued since the key was bound to this fingerprint.
    pub attempts: u32,
    /// When the key was bound.
    pub created_at: Timestamp,
    /// When the record last changed.
    pub updated_at: Timestamp,
}

/// A record breaks a rule every record the engine writes keeps (see [`Record::validate`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// `attempts` is zero: a record exists because a lease was issued.
    #[error("`attempts` is 0; a record has at least one attempt")]
    NoAttempts,
    /// The fence is zero or above [`MAX_FENCE`].
    #[error("`fence` {fence} is outside 1..={max}")]
    FenceOutOfRange {
        /// The fence found.
        fence: u64,
        /// [`MAX_FENCE`].
        max: u64,
    },
    /// The record was updated before it was created.
    #[error("`updated_at` {updated_at} is before `created_at` {created_at}")]
    UpdatedBeforeCreated {
        /// `created_at`.
        created_at: Timestamp,
        /// `updated_at`.
        updated_at: Timestamp,
    },
    /// An expiry instant lies before the record's last update: the engine counts every TTL
    /// from the time it writes the record.
    #[error("`{field}` {at} is before `updated_at` {updated_at}")]
    BeforeUpdate {
        /// Which instant (`lease_expires_at`, `expires_at` or `forget_at`).
        field: &'static str,
        /// Its value.
        at: Timestamp,
        /// `updated_at`.
        updated_at: Timestamp,
    },
    /// The stored body stops being replayed after the record is forgotten.
    #[error("`expires_at` {expires_at} is after `forget_at` {forget_at}")]
    ExpiresAfterForget {
        /// `expires_at`.
        expires_at: Timestamp,
        /// `forget_at`.
        forget_at: Timestamp,
    },
    /// The stored result or failure body is over the limit.
    #[error("the payload is {len} bytes; the limit is {max}")]
    BodyTooLarge {
        /// Body length.
        len: usize,
        /// The limit.
        max: usize,
    },
}

/// What retention asks of a record at a given time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retention {
    /// Nothing is due.
    Keep,
    /// The body expired: replace the record with this tombstone.
    Tombstone(Record),
    /// The record is past its last expiry: remove it.
    Forget,
}

impl Record {
    /// Checks the rules every record the engine writes keeps: at least one attempt, a fence in
    /// `1..=MAX_FENCE`, `created_at <= updated_at`, every expiry instant at or after
    /// `updated_at`, `expires_at <= forget_at`, and a body of at most `max_body` bytes. The
    /// store checks every record it writes, an import checks every record it reads, and
    /// `verify` reports stored records that break a rule; it is one function for all of them.
    ///
    /// ```
    /// use idemdb_core::{Fingerprint, Record, RecordError, State, Timestamp};
    /// let t = Timestamp::from_millis(1_000);
    /// let record = Record {
    ///     fingerprint: Fingerprint::from_bytes([1; 32]),
    ///     state: State::Released { forget_at: t },
    ///     fence: 1_000,
    ///     attempts: 0,
    ///     created_at: t,
    ///     updated_at: t,
    /// };
    /// assert_eq!(record.validate(1024), Err(RecordError::NoAttempts));
    /// assert!(Record { attempts: 1, ..record }.validate(1024).is_ok());
    /// ```
    ///
    /// # Errors
    /// The first rule the record breaks.
    pub fn validate(&self, max_body: usize) -> Result<(), RecordError> {
        if self.attempts == 0 {
            return Err(RecordError::NoAttempts);
        }
        if self.fence == 0 || self.fence > MAX_FENCE {
            return Err(RecordError::FenceOutOfRange { fence: self.fence, max: MAX_FENCE });
        }
        if self.updated_at < self.created_at {
            return Err(RecordError::UpdatedBeforeCreated { created_at: self.created_at, updated_at: self.updated_at });
        }
        let not_before_update = |field: &'static str, at: Timestamp| {
            if at < self.updated_at {
                return Err(RecordError::BeforeUpdate { field, at, updated_at: self.updated_at });
            }
            Ok(())
        };
        match &self.state {
            State::InProgress { lease_expires_at } => not_before_update("lease_expires_at", *lease_expires_at),
            State::Completed { result: body, expires_at, forget_at }
            | State::Failed { error: body, expires_at, forget_at } => {
                not_before_update("expires_at", *expires_at)?;
                if expires_at > forget_at {
                    return Err(RecordError::ExpiresAfterForget { expires_at: *expires_at, forget_at: *forget_at });
                }
                if body.len() > max_body {
                    return Err(RecordError::BodyTooLarge { len: body.len(), max: max_body });
                }
                Ok(())
            }
            State::Released { forget_at } | State::Tombstone { forget_at, .. } => {
                not_before_update("forget_at", *forget_at)
            }
            State::Uncertain { .. } => Ok(()),
        }
    }

    /// The next instant at which retention changes this record, if any. In-progress and
    /// uncertain records never expire on their own: they wait for an attempt or a reconcile.
    pub fn due_at(&self) -> Option<Timestamp> {
        match &self.state {
            State::Completed { expires_at, .. } | State::Failed { expires_at, .. } => Some(*expires_at),
            State::Released { forget_at } | State::Tombstone { forget_at, .. } => Some(*forget_at),
            State::InProgress { .. } | State::Uncertain { .. } => None,
        }
    }

    /// Whether the record is forgotten at `now` (behaves as if absent).
    pub fn is_forgotten(&self, now: Timestamp) -> bool {
        match &self.state {
            State::Completed { forget_at, .. }
            | State::Failed { forget_at, .. }
            | State::Released { forget_at }
            | State::Tombstone { forget_at, .. } => now >= *forget_at,
            State::InProgress { .. } | State::Uncertain { .. } => false,
        }
    }

    /// What retention asks of the record at `now`.
    ///
    /// A record is only ever turned into a tombstone or forgotten at or after the instants it
    /// stored when it was written, so a known key never becomes unknown early.
    pub fn retention(&self, now: Timestamp) -> Retention {
        if self.is_forgotten(now) {
            return Retention::Forget;
        }
        let (outcome, expires_at, forget_at) = match &self.state {
            State::Completed { expires_at, forget_at, .. } => (OutcomeClass::Completed, *expires_at, *forget_at),
            State::Failed { expires_at, forget_at, .. } => (OutcomeClass::Failed, *expires_at, *forget_at),
            _ => return Retention::Keep,
        };
        if now < expires_at {
            return Retention::Keep;
        }
        Retention::Tombstone(Record {
            state: State::Tombstone { outcome, forget_at },
            updated_at: self.updated_at.max(now),
            ..self.clone()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completed(expires: u64, forget: u64) -> Record {
        Record {
            fingerprint: Fingerprint::from_bytes([0; 32]),
            state: State::Completed {
                result: b"r".to_vec(),
                expires_at: Timestamp::from_millis(expires),
                forget_at: Timestamp::from_millis(forget),
            },
            fence: 1,
            attempts: 1,
            created_at: Timestamp::ZERO,
            updated_at: Timestamp::ZERO,
        }
    }

    #[test]
    fn retention_steps_happen_at_their_instants_and_not_before() {
        let record = completed(100, 1_000);
        assert_eq!(record.retention(Timestamp::from_millis(99)), Retention::Keep);
        let Retention::Tombstone(tombstone) = record.retention(Timestamp::from_millis(100)) else { panic!() };
        assert_eq!(
            tombstone.state,
            State::Tombstone { outcome: OutcomeClass::Completed, forget_at: Timestamp::from_millis(1_000) }
        );
        assert_eq!(tombstone.due_at(), Some(Timestamp::from_millis(1_000)));
        assert_eq!(tombstone.retention(Timestamp::from_millis(999)), Retention::Keep);
        assert_eq!(tombstone.retention(Timestamp::from_millis(1_000)), Retention::Forget);
        assert_eq!(record.retention(Timestamp::from_millis(5_000)), Retention::Forget);
    }

    #[test]
    fn validation_names_the_first_rule_a_record_breaks() {
        let good = completed(100, 1_000);
        assert_eq!(good.validate(1), Ok(()));
        let cases = [
            (Record { attempts: 0, ..good.clone() }, RecordError::NoAttempts),
            (Record { fence: 0, ..good.clone() }, RecordError::FenceOutOfRange { fence: 0, max: MAX_FENCE }),
            (
                Record { fence: MAX_FENCE + 1, ..good.clone() },
                RecordError::FenceOutOfRange { fence: MAX_FENCE + 1, max: MAX_FENCE },
            ),
            (
                Record { created_at: Timestamp::from_millis(5), ..good.clone() },
                RecordError::UpdatedBeforeCreated {
                    created_at: Timestamp::from_millis(5),
                    updated_at: Timestamp::ZERO,
                },
            ),
            (
                Record { updated_at: Timestamp::from_millis(101), ..good.clone() },
                RecordError::BeforeUpdate {
                    field: "expires_at",
                    at: Timestamp::from_millis(100),
                    updated_at: Timestamp::from_millis(101),
                },
            ),
            (
                completed(1_000, 100),
                RecordError::ExpiresAfterForget {
                    expires_at: Timestamp::from_millis(1_000),
                    forget_at: Timestamp::from_millis(100),
                },
            ),
        ];
        for (record, error) in cases {
            assert_eq!(record.validate(1), Err(error));
        }
        assert_eq!(good.validate(0), Err(RecordError::BodyTooLarge { len: 1, max: 0 }));
        let lease = Record { state: State::InProgress { lease_expires_at: Timestamp::ZERO }, ..good.clone() };
        assert_eq!(lease.validate(0), Ok(()));
        let early = Record { updated_at: Timestamp::from_millis(1), ..lease };
        assert!(matches!(early.validate(0), Err(RecordError::BeforeUpdate { field: "lease_expires_at", .. })));
    }

    #[test]
    fn state_names_round_trip() {
        for kind in StateKind::ALL {
            assert_eq!(kind.as_str().parse::<StateKind>(), Ok(*kind));
        }
        assert!("nope".parse::<StateKind>().is_err());
        assert_eq!(OutcomeClass::Failed.to_string(), "failed");
        assert_eq!("lease_expired".parse::<UncertainCause>(), Ok(UncertainCause::LeaseExpired));
    }
}
