//! What the layer counts and times, through the [`metrics`] facade.
//!
//! The layer records into whatever recorder the application installed (Prometheus,
//! OpenTelemetry, StatsD, … — the facade's exporters); with none installed every call is a
//! no-op that costs a few nanoseconds. The facade is used rather than OpenTelemetry's API
//! because it is to metrics what `tracing` is to logs: a library names what it measures, the
//! application alone picks the exporter and pays for it, and the exporters are small crates
//! (the payments example uses `metrics-exporter-prometheus` and serves `GET /metrics`);
//! OpenTelemetry users bridge it with an exporter crate.
//!
//! Labels are bounded: the operation's name (from the application's configuration) and the
//! answer or outcome (from the core's names). Never a tenant, a key or anything a client
//! sends, so no client can grow a series set.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | [`ANSWERS`] | counter | `operation`, `answer` | reservation answers: `acquired` (reservations), `replay`, `in_progress`, `mismatch` (conflicts), `needs_reconciliation`, `expired` |
//! | [`REFUSALS`] | counter | `code` | requests refused before a reservation (bad key, no tenant, body too large, non-canonical body, store unreachable), by error code |
//! | [`TAKEOVERS`] | counter | `operation` | acquired reservations that took over an expired lease (attempt 2 or later) |
//! | [`SETTLEMENTS`] | counter | `operation`, `outcome` | how reserved requests ended: `completed`, `failed` (a stored 4xx/5xx), `released`, `uncertain` (records marked uncertain by the layer) |
//! | [`STORE_SECONDS`] | histogram | `call` | seconds per store call as the layer awaits it (`reserve`, `complete`, `fail`): the commit latency requests see |
//! | [`STORE_ERRORS`] | counter | `call`, `code` | store calls that failed, by error code |
//!
//! [`describe`] registers the descriptions and units with the installed recorder (call it
//! once after installing one; optional). [`publish`] registers every series at zero, so the first scrape, before any request, already has them: a
//! `rate()` or an alert on a series that does not exist yet says nothing.
//!
//! [`STORE_SECONDS`] is a histogram: give the exporter [`STORE_SECONDS_BUCKETS`] so it is
//! rendered with buckets (Prometheus: `_bucket{le=…}`, `_sum`, `_count`) rather than as a
//! summary, whose quantiles cannot be added up across the instances of a fleet.
//!
//! A record the handler marks uncertain counts as a settlement `uncertain` once, whoever
//! marked it first: a payment whose provider answer was lost is made uncertain by the outbox's
//! report, and the handler's own mark then finds it so (not a store error).

use std::future::Future;
use std::time::Instant;

use idemdb_core::{Coded, ErrorCode, Reservation, ReservationKind};

/// Reservation answers, by operation and answer.
pub const ANSWERS: &str = "idemdb_http_answers_total";
/// Requests refused before a reservation, by error code.
pub const REFUSALS: &str = "idemdb_http_refusals_total";
/// Reservations that took over an expired lease, by operation.
pub const TAKEOVERS: &str = "idemdb_http_lease_takeovers_total";
/// How reserved requests ended, by operation and outcome.
pub const SETTLEMENTS: &str = "idemdb_http_settlements_total";
/// Seconds per store call, by call.
pub const STORE_SECONDS: &str = "idemdb_http_store_call_seconds";
/// Store calls that failed, by call and error code.
pub const STORE_ERRORS: &str = "idemdb_http_store_errors_total";

/// The buckets of [`STORE_SECONDS`], in seconds: from a local commit (under a millisecond) to
/// a database across a network under load (ten seconds).
pub const STORE_SECONDS_BUCKETS: &[f64] =
    &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The store calls the layer times.
const CALLS: [&str; 3] = ["reserve", "complete", "fail"];

/// The codes a store call fails with that [`publish`] shows at zero: storage trouble, an
/// unknown commit outcome, a busy or unreachable store, and the refusals of a record that
/// moved on (another attempt took over, or it was settled).
const STORE_ERROR_CODES: [ErrorCode; 7] = [
    ErrorCode::Storage,
    ErrorCode::CommitUnknown,
    ErrorCode::StoreBusy,
    ErrorCode::Unavailable,
    ErrorCode::Closed,
    ErrorCode::StaleLease,
    ErrorCode::WrongState,
];

/// The codes the layer refuses a request with before a reservation, besides a failed store.
const REFUSAL_CODES: [ErrorCode; 5] = [
    ErrorCode::KeyMissing,
    ErrorCode::InvalidKey,
    ErrorCode::Unauthenticated,
    ErrorCode::TooLarge,
    ErrorCode::InvalidRequest,
];

/// Registers the descriptions and units of the layer's metrics with the installed recorder.
pub fn describe() {
    metrics::describe_counter!(ANSWERS, "reservation answers by operation and answer");
    metrics::describe_counter!(REFUSALS, "requests refused before a reservation, by error code");
    metrics::describe_counter!(TAKEOVERS, "reservations that took over an expired lease");
    metrics::describe_counter!(SETTLEMENTS, "how reserved requests ended, by operation and outcome");
    metrics::describe_histogram!(STORE_SECONDS, metrics::Unit::Seconds, "store call latency as the layer sees it");
    metrics::describe_counter!(STORE_ERRORS, "failed store calls, by call and error code");
}

/// Registers every series of the layer at zero: for each of `operations` its answers (every
/// [`ReservationKind`]), takeovers and settlements (every outcome); the refusals by code;
/// and per store call its latency histogram and errors by code. Idempotent: a series that has
/// counted keeps its count.
pub fn publish(operations: &[&str]) {
    for operation in operations {
        for kind in ReservationKind::ALL {
            metrics::counter!(ANSWERS, "operation" => operation.to_string(), "answer" => kind.as_str()).increment(0);
        }
        metrics::counter!(TAKEOVERS, "operation" => operation.to_string()).increment(0);
        for settlement in Settlement::ALL {
            metrics::counter!(SETTLEMENTS, "operation" => operation.to_string(), "outcome" => settlement.name())
                .increment(0);
        }
    }
    for code in REFUSAL_CODES.iter().chain(&STORE_ERROR_CODES) {
        metrics::counter!(REFUSALS, "code" => code.as_str()).increment(0);
    }
    for call in CALLS {
        // Registered, not recorded: the histogram has no sample yet.
        let _ = metrics::histogram!(STORE_SECONDS, "call" => call);
        for code in STORE_ERROR_CODES {
            metrics::counter!(STORE_ERRORS, "call" => call, "code" => code.as_str()).increment(0);
        }
    }
}

/// How a reserved request ended, as [`SETTLEMENTS`] labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settlement {
    Completed,
    Failed,
    Released,
    Uncertain,
}

impl Settlement {
    const ALL: [Settlement; 4] =
        [Settlement::Completed, Settlement::Failed, Settlement::Released, Settlement::Uncertain];

    fn name(self) -> &'static str {
        match self {
            Settlement::Completed => "completed",
            Settlement::Failed => "failed",
            Settlement::Released => "released",
            Settlement::Uncertain => "uncertain",
        }
    }
}

pub(crate) fn answer(operation: &str, reservation: &Reservation) {
    metrics::counter!(ANSWERS, "operation" => operation.to_string(), "answer" => reservation.kind().as_str())
        .increment(1);
    if let Reservation::Acquired(lease) = reservation
        && lease.attempt() > 1
    {
        metrics::counter!(TAKEOVERS, "operation" => operation.to_string()).increment(1);
    }
}

pub(crate) fn refused(code: idemdb_core::ErrorCode) {
    metrics::counter!(REFUSALS, "code" => code.as_str()).increment(1);
}

pub(crate) fn settled(operation: &str, settlement: Settlement) {
    metrics::counter!(SETTLEMENTS, "operation" => operation.to_string(), "outcome" => settlement.name()).increment(1);
}

/// Awaits a store call, recording its time and, when it fails, its error code.
pub(crate) async fn timed<T, E: Coded>(call: &'static str, future: impl Future<Output = Result<T, E>>) -> Result<T, E> {
    let result = timed_only(call, future).await;
    if let Err(error) = &result {
        store_error(call, error.code());
    }
    result
}

/// Awaits a store call, recording its time only: the caller decides whether a failure is a
/// store error ([`store_error`]).
pub(crate) async fn timed_only<T, E>(call: &'static str, future: impl Future<Output = Result<T, E>>) -> Result<T, E> {
    let started = Instant::now();
    let result = future.await;
    metrics::histogram!(STORE_SECONDS, "call" => call).record(started.elapsed().as_secs_f64());
    result
}

/// Counts a failed store call.
pub(crate) fn store_error(call: &'static str, code: ErrorCode) {
    metrics::counter!(STORE_ERRORS, "call" => call, "code" => code.as_str()).increment(1);
}
