//! `GET /metrics`: the service's metrics in Prometheus text.
//!
//! The service installs `metrics-exporter-prometheus` as the process's recorder of the
//! `metrics` facade ([`install`]), so this page shows the idempotency layer's series
//! ([`idemdb_http::metrics`]: answers by operation, refusals, lease takeovers, settlements,
//! store call latency) beside the reconciler's own:
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | [`RECONCILIATION_QUEUE`] | gauge | | entries the last round found in the reconciliation queue (at most the round's budget) |
//! | [`RECONCILIATION_LEFT`] | gauge | | of those, the entries no fact could decide (a person's queue) |
//! | [`RECONCILIATION_RESOLUTIONS`] | counter | `cause` | resolutions by cause: `confirmed` (the provider had charged), `not_found` (sent again), `released` (no charge was enqueued) |
//!
//! The page has no authentication: it carries counts by operation and cause, never a tenant
//! or a key. Serve it only where the scraper reaches it (a private port or network).

use std::sync::OnceLock;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::reconcile::Round;

/// Where the metrics are served.
pub const METRICS_PATH: &str = "/metrics";
/// Entries the last reconciliation round found.
pub const RECONCILIATION_QUEUE: &str = "payments_reconciliation_queue_depth";
/// Entries the last round left undecided.
pub const RECONCILIATION_LEFT: &str = "payments_reconciliation_left";
/// Resolutions by cause.
pub const RECONCILIATION_RESOLUTIONS: &str = "payments_reconciliation_resolutions_total";

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the Prometheus recorder for this process (once; later calls do nothing) and
/// describes the series.
///
/// # Errors
/// When another recorder was installed first.
pub fn install() -> Result<(), metrics::SetRecorderError<metrics_exporter_prometheus::PrometheusRecorder>> {
    if HANDLE.get().is_some() {
        return Ok(());
    }
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)?;
    let _ = HANDLE.set(handle);
    idemdb_http::metrics::describe();
    metrics::describe_gauge!(RECONCILIATION_QUEUE, "entries the last reconciliation round found");
    metrics::describe_gauge!(RECONCILIATION_LEFT, "entries the last round left for a person");
    metrics::describe_counter!(RECONCILIATION_RESOLUTIONS, "reconciler resolutions by cause");
    Ok(())
}

/// Records what a reconciliation round did.
pub(crate) fn round(found: usize, round: &Round) {
    metrics::gauge!(RECONCILIATION_QUEUE).set(found as f64);
    metrics::gauge!(RECONCILIATION_LEFT).set(round.left as f64);
    for (cause, count) in [("confirmed", round.confirmed), ("not_found", round.not_found), ("released", round.released)]
    {
        metrics::counter!(RECONCILIATION_RESOLUTIONS, "cause" => cause).increment(count as u64);
    }
}

/// `GET /metrics`.
pub(crate) async fn render() -> Response {
    match HANDLE.get() {
        Some(handle) => {
            ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], handle.render()).into_response()
        }
        None => crate::payment::problem(StatusCode::NOT_FOUND, "not-found", "metrics are not enabled in this process"),
    }
}
