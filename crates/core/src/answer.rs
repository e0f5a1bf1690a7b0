//! What a reservation answers: the [`Reservation`] every storage adapter returns as the core
//! decided it, and the [`Lease`] an acquired reservation carries.

use core::time::Duration;

use crate::{IdempotencyKey, OutcomeClass, Scope, ScopedKey, StateKind, Timestamp, UncertainCause};

/// The right of one attempt to execute an operation, until [`Lease::expires_at`].
///
/// Only the lease with the record's current fence may complete or fail it: after a takeover
/// (or a reconcile), an older lease is refused with a stale-fence error. Applications get
/// leases from a reservation; storage adapters build them with [`Lease::new`] (a lease made up
/// by hand can do no harm: its fence is checked against the record in every transition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    scoped: ScopedKey,
    fence: u64,
    expires_at: Timestamp,
    attempt: u32,
}

impl Lease {
    /// A lease on `scoped` with `fence`, live until `expires_at`, for attempt number `attempt`.
    pub fn new(scoped: ScopedKey, fence: u64, expires_at: Timestamp, attempt: u32) -> Self {
        Lease { scoped, fence, expires_at, attempt }
    }

    /// The scope.
    pub fn scope(&self) -> &Scope {
        &self.scoped.scope
    }

    /// The idempotency key.
    pub fn key(&self) -> &IdempotencyKey {
        &self.scoped.key
    }

    /// The scope and key together.
    pub fn scoped_key(&self) -> &ScopedKey {
        &self.scoped
    }

    /// The fence number.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// When the lease expires unless renewed.
    pub fn expires_at(&self) -> Timestamp {
        self.expires_at
    }

    /// Which attempt this is (1 for the first).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The same lease with a new expiry (after a renewal).
    pub fn renewed(&self, expires_at: Timestamp) -> Lease {
        Lease { expires_at, ..self.clone() }
    }
}

/// The answer to a reservation: what a request with a given fingerprint meets.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reservation {
    /// The caller holds the lease: execute, then complete or fail it.
    Acquired(Lease),
    /// A true retry of a finished request: here is the stored body, byte for byte.
    Replay {
        /// Completed, or failed definitively.
        outcome: OutcomeClass,
        /// The stored result or failure body.
        body: Vec<u8>,
    },
    /// Another attempt holds a live lease.
    InProgress {
        /// Time left on that lease.
        retry_after: Duration,
    },
    /// The key is bound to a different request (conflict; HTTP 422).
    Mismatch {
        /// The state of the record the key is bound to.
        stored: StateKind,
    },
    /// An earlier attempt's outcome is unknown; reconcile before any new effect.
    NeedsReconciliation {
        /// Why.
        cause: UncertainCause,
    },
    /// The response was purged; only the tombstone remains. Never executed again.
    Expired {
        /// The outcome the record reached.
        outcome: OutcomeClass,
    },
}

/// The name of a [`Reservation`] answer, without its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReservationKind {
    /// [`Reservation::Acquired`].
    Acquired,
    /// [`Reservation::Replay`].
    Replay,
    /// [`Reservation::InProgress`].
    InProgress,
    /// [`Reservation::Mismatch`].
    Mismatch,
    /// [`Reservation::NeedsReconciliation`].
    NeedsReconciliation,
    /// [`Reservation::Expired`].
    Expired,
}

crate::names!(ReservationKind, "reservation answer", {
    Acquired => "acquired",
    Replay => "replay",
    InProgress => "in_progress",
    Mismatch => "mismatch",
    NeedsReconciliation => "needs_reconciliation",
    Expired => "expired",
});

impl Reservation {
    /// The lease, if one was acquired.
    pub fn lease(&self) -> Option<&Lease> {
        match self {
            Reservation::Acquired(lease) => Some(lease),
            _ => None,
        }
    }

    /// Which answer this is.
    pub fn kind(&self) -> ReservationKind {
        match self {
            Reservation::Acquired(_) => ReservationKind::Acquired,
            Reservation::Replay { .. } => ReservationKind::Replay,
            Reservation::InProgress { .. } => ReservationKind::InProgress,
            Reservation::Mismatch { .. } => ReservationKind::Mismatch,
            Reservation::NeedsReconciliation { .. } => ReservationKind::NeedsReconciliation,
            Reservation::Expired { .. } => ReservationKind::Expired,
        }
    }

    /// The answer's stable name (`acquired`, `replay`, `in_progress`, ...).
    pub fn name(&self) -> &'static str {
        self.kind().as_str()
    }

    /// The fence the answer involves: the lease's for an acquisition, 0 otherwise.
    pub fn fence(&self) -> u64 {
        self.lease().map_or(0, Lease::fence)
    }
}
