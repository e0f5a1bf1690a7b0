//! `GET /metrics`: the service's metrics in Prometheus text.
//!
//! The service installs `metrics-exporter-prometheus` as the process's recorder of the
//! `metrics` facade ([`install`]), so this page shows the idempotency layer's series
//! ([`idemdb_http::metrics`]: answers by operation, refusals, lease takeovers, settlements,
//! store call latency) and the reconciler's ([`idemdb_http::reconcile`]: queue depth, entries
//! left for a person, resolutions by cause). Every series is there from the start, at zero,
//! and the store call latency is a histogram with buckets
//! ([`STORE_SECONDS_BUCKETS`](idemdb_http::metrics::STORE_SECONDS_BUCKETS)).
//!
//! The page has no authentication: it carries counts by operation and cause, never a tenant
//! or a key. Serve it only where the scraper reaches it (a private port or network).

use std::sync::OnceLock;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Where the metrics are served.
pub const METRICS_PATH: &str = "/metrics";
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
    let builder = PrometheusBuilder::new();
    // The store latency as a histogram with buckets (`_bucket`, `_sum`, `_count`): a summary's
    // quantiles cannot be added up across instances. Buckets for a known name never fail.
    let latency = Matcher::Full(idemdb_http::metrics::STORE_SECONDS.to_string());
    let builder = match builder.set_buckets_for_metric(latency, idemdb_http::metrics::STORE_SECONDS_BUCKETS) {
        Ok(with_buckets) => with_buckets,
        Err(_) => PrometheusBuilder::new(),
    };
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)?;
    let _ = HANDLE.set(handle);
    idemdb_http::metrics::describe();
    idemdb_http::reconcile::describe();
    // Every series at zero from the start: a scrape before the first request has them all.
    idemdb_http::metrics::publish(&[crate::payment_operation_name()]);
    idemdb_http::reconcile::publish();
    Ok(())
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
