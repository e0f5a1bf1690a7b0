//! The refusals of the layer's own answers: an in-progress, mismatched, unreconciled or
//! expired key, and a scope the request's tenant or operation cannot make, as problems.

use http::StatusCode;
use idemdb_core::{ErrorCode, IdentityPart, KeyError, Reservation};

use super::config::Operation;
use crate::problem::Problem;

/// The refusal of an answer that is neither an acquisition nor a replay. `holder_gone`: no
/// request of this layer holds the key and no other process can (see
/// [`IdempotencyLayer::shared_store`](super::IdempotencyLayer::shared_store)), so an attempt in progress belongs to a process that
/// died, and the wait is the lease's remaining time, not the operation's cap.
pub(super) fn refusal(reservation: &Reservation, operation: &Operation, holder_gone: bool) -> Problem {
    match reservation {
        Reservation::InProgress { retry_after } => Problem::new(
            ErrorCode::InProgress,
            StatusCode::CONFLICT,
            "a request with this Idempotency-Key is being processed; retry after the time given",
        )
        .retry_after(if holder_gone { *retry_after } else { (*retry_after).min(operation.retry_after) }),
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
