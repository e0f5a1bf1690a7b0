//! [`Refusal`]: the part of a storage adapter's error that the rules decide.
//!
//! An operation on a store fails for one of two reasons: the storage below failed (a disk, a
//! connection, a commit whose outcome is unknown), or the rules refused the request (no record,
//! a stale fence, an effect already reported, a key that is not one). The first kind is each
//! adapter's own; the second is the same on every backend, so it is one type here and every
//! adapter's error carries it as one variant (`Error::Refused` in `idemdb` and in
//! `idemdb-postgres`). A caller that is generic over the backend matches on it once.

use crate::{ErrorCode, InboxRefusal, JobRefusal, KeyError, OutboxRefusal, RecordError, RowError, TransitionError};

/// Why a store refused an operation: the same refusal, with the same [`ErrorCode`], on every
/// backend. Nothing stored was changed.
///
/// ```
/// use idemdb_core::{ErrorCode, Refusal, TransitionError};
///
/// let stale = TransitionError::StaleFence { presented: 1, current: 2 };
/// let refusal = Refusal::from(stale.clone());
/// assert_eq!(refusal.code(), ErrorCode::StaleLease);
/// assert_eq!(refusal.transition(), Some(&stale));
/// assert_eq!(Refusal::NotFound.code(), ErrorCode::NotFound);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// No record exists for the key.
    #[error("no record for this key")]
    NotFound,
    /// The transition was refused (stale fence, wrong state, live lease, result too large).
    #[error(transparent)]
    Transition(#[from] TransitionError),
    /// A key, scope or correlation id was invalid.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The outbox rules refused the change (a stale claim, a provider key past its window,
    /// another payload for the same effect).
    #[error(transparent)]
    Outbox(#[from] OutboxRefusal),
    /// The inbox refused the delivery (its id was seen with another payload).
    #[error(transparent)]
    Inbox(#[from] InboxRefusal),
    /// The job rules refused the change (a stale lease, a step already done).
    #[error(transparent)]
    Job(#[from] JobRefusal),
    /// A row of a [`BusinessWrite`](crate::BusinessWrite) was refused by the row limits.
    #[error(transparent)]
    Row(#[from] RowError),
    /// A record to write breaks a rule every record keeps (an import of a record the engine
    /// would never write).
    #[error("invalid record: {0}")]
    InvalidRecord(#[from] RecordError),
}

impl Refusal {
    /// The stable code of this refusal (see [`ErrorCode`]).
    pub fn code(&self) -> ErrorCode {
        match self {
            Refusal::NotFound => ErrorCode::NotFound,
            Refusal::Transition(transition) => transition.code(),
            Refusal::Key(key) => key.code(),
            Refusal::Outbox(outbox) => outbox.code(),
            Refusal::Inbox(inbox) => inbox.code(),
            Refusal::Job(job) => job.code(),
            Refusal::Row(row) => row.code(),
            Refusal::InvalidRecord(_) => ErrorCode::InvalidArgument,
        }
    }

    /// The refused transition, when the refusal is one.
    pub fn transition(&self) -> Option<&TransitionError> {
        match self {
            Refusal::Transition(transition) => Some(transition),
            _ => None,
        }
    }
}

crate::coded!(Refusal);

/// Implements `From<Refusal>` and `From<R>` for every refusal `R` of the core for an adapter's
/// error type whose variant `$variant` carries a [`Refusal`], so `?` turns any of them into the
/// adapter's error.
#[macro_export]
#[doc(hidden)]
macro_rules! refused_from {
    ($error:ty, $variant:path) => {
        impl From<$crate::Refusal> for $error {
            fn from(refusal: $crate::Refusal) -> Self {
                $variant(refusal)
            }
        }
        $crate::refused_from!(@each $error, $variant, $crate::TransitionError, $crate::KeyError,
            $crate::OutboxRefusal, $crate::InboxRefusal, $crate::JobRefusal, $crate::RowError,
            $crate::RecordError);
    };
    (@each $error:ty, $variant:path, $($from:ty),+) => {$(
        impl From<$from> for $error {
            fn from(refusal: $from) -> Self {
                $variant($crate::Refusal::from(refusal))
            }
        }
    )+};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_keeps_the_code_of_what_it_carries() {
        let stale = TransitionError::StaleFence { presented: 1, current: 2 };
        let cases = [
            (Refusal::from(stale.clone()), ErrorCode::StaleLease),
            (Refusal::from(OutboxRefusal::NotFound), OutboxRefusal::NotFound.code()),
            (Refusal::from(JobRefusal::NotFound), JobRefusal::NotFound.code()),
            (Refusal::NotFound, ErrorCode::NotFound),
        ];
        for (refusal, code) in cases {
            assert_eq!(refusal.code(), code, "{refusal}");
        }
        assert_eq!(Refusal::from(stale.clone()).to_string(), stale.to_string());
        assert_eq!(Refusal::NotFound.transition(), None);
    }
}
