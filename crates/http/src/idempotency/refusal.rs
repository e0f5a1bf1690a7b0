//! The refusals of the layer's own answers: an in-progress, mismatched, unreconciled or
//! expired key, and a scope the request's tenant or operation cannot make, as problems.

use std::time::Duration;

use http::StatusCode;
use idemdb_core::{ErrorCode, IdentityPart, KeyError, Reservation};

use super::config::Operation;
use crate::problem::Problem;

/// The refusal of an answer that is neither an acquisition nor a replay. `gone_holder`: the
/// operation's lease TTL when nothing in this process holds the key and no other process can
/// (see [`IdempotencyLayer::shared_store`](super::IdempotencyLayer::shared_store)), so an
/// attempt in progress belongs to a process that died: the wait is then when the store lets
/// the key's work run again ([`wait_for_gone_holder`]), not the operation's cap.
pub(super) fn refusal(reservation: &Reservation, operation: &Operation, gone_holder: Option<Duration>) -> Problem {
    match reservation {
        Reservation::InProgress { retry_after } => Problem::new(
            ErrorCode::InProgress,
            StatusCode::CONFLICT,
            "a request with this Idempotency-Key is being processed; retry after the time given",
        )
        .retry_after(match gone_holder {
            Some(lease_ttl) => wait_for_gone_holder(*retry_after, lease_ttl),
            None => (*retry_after).min(operation.retry_after),
        }),
        Reservation::Mismatch { .. } => Problem::new(
            ErrorCode::KeyMismatch,
            StatusCode::UNPROCESSABLE_ENTITY,
            "this Idempotency-Key was used for a different request; a new request needs a new key",
        ),
        Reservation::NeedsReconciliation { cause } => Problem::new(
            ErrorCode::NeedsReconciliation,
            StatusCode::CONFLICT,
            format!(
                "the outcome of the request with this Idempotency-Key is unknown ({cause}); it is not run again \
                 until it has been reconciled"
            ),
        ),
        Reservation::Expired { outcome } => Problem::new(
            ErrorCode::Expired,
            StatusCode::GONE,
            format!(
                "the request with this Idempotency-Key was processed ({outcome}) and its response has expired; it is \
                 never run again"
            ),
        ),
        _ => Problem::new(ErrorCode::Internal, StatusCode::INTERNAL_SERVER_ERROR, "unexpected reservation answer"),
    }
}

/// How long a duplicate of a key whose holder died waits, from the time its record's lease has
/// left. A record whose effect waits in the outbox is held until that effect's next dispatch
/// **plus one lease** (the time the dispatch may take; the core's `record_after`), so a lease
/// longer than one TTL ends one TTL after the dispatch that brings the answer: the wait is
/// the time to that dispatch. Otherwise the key's work runs again when the lease ends (a
/// takeover, or the reconciler's decision), and the wait is the whole remaining time.
fn wait_for_gone_holder(remaining: Duration, lease_ttl: Duration) -> Duration {
    match remaining.checked_sub(lease_ttl) {
        Some(until_dispatch) if !until_dispatch.is_zero() => until_dispatch,
        _ => remaining,
    }
}

/// A scope the tenant or operation name could not make.
pub(super) fn scope_problem(error: &KeyError) -> Problem {
    match error {
        KeyError::Empty { part: IdentityPart::Tenant }
        | KeyError::TooLong { part: IdentityPart::Tenant, .. }
        | KeyError::InvalidByte { part: IdentityPart::Tenant, .. } => {
            Problem::new(ErrorCode::Unauthenticated, StatusCode::UNAUTHORIZED, format!("the request's {error}"))
        }
        _ => Problem::new(ErrorCode::InvalidRequest, StatusCode::BAD_REQUEST, format!("the request's {error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gone_holder_s_record_held_for_its_effect_is_waited_for_until_the_effect_s_next_dispatch() {
        let ttl = Duration::from_secs(60);
        // Held past one lease: the effect's dispatch is due in 59 s and brings the answer.
        assert_eq!(wait_for_gone_holder(Duration::from_secs(119), ttl), Duration::from_secs(59));
        // Within one lease: the key's work runs again when the lease ends.
        assert_eq!(wait_for_gone_holder(Duration::from_secs(40), ttl), Duration::from_secs(40));
        assert_eq!(wait_for_gone_holder(ttl, ttl), ttl);
    }
}
