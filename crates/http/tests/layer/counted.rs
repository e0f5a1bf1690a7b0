//! The layer's metrics: each answer and settlement counted once, under its operation.

use axum::body::Body;
use http::{Response, StatusCode};
use idemdb_http::Operation;
use idemdb_http::metrics::{ANSWERS, REFUSALS, SETTLEMENTS, STORE_SECONDS};
use metrics_exporter_prometheus::PrometheusBuilder;

use crate::support::*;

/// The value of the series `name{labels…}` in Prometheus text, 0 when absent.
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| line.starts_with(&format!("{name}{{")))
        .find(|line| labels.iter().all(|(k, v)| line.contains(&format!("{k}=\"{v}\""))))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

// A current-thread runtime: the request tasks run on this thread, where the recorder is.
#[tokio::test]
async fn answers_refusals_and_settlements_are_counted_by_operation() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);

    let (store, _) = store();
    let effects = Effects::default();
    let svc = service(layer(store.asynchronous(), Operation::named("pay")), created(effects.clone()));
    let body = r#"{"amount":1}"#;
    assert_eq!(send(&svc, post("/p", Some("m-1"), body)).await.status, StatusCode::CREATED);
    assert!(send(&svc, post("/p", Some("m-1"), body)).await.replayed());
    assert!(send(&svc, post("/p", Some("m-1"), body)).await.replayed());
    assert_eq!(send(&svc, post("/p", Some("m-1"), r#"{"amount":2}"#)).await.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(send(&svc, post("/p", None, body)).await.status, StatusCode::BAD_REQUEST);
    // A handler's 500 is stored (a definitive failure).
    let failing = service(layer(store.asynchronous(), Operation::named("pay")), |_| async {
        Response::builder().status(StatusCode::INTERNAL_SERVER_ERROR).body(Body::from("boom")).unwrap()
    });
    assert_eq!(send(&failing, post("/p", Some("m-2"), body)).await.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(effects.count(), 1);

    let text = handle.render();
    let answers = |answer| value(&text, ANSWERS, &[("operation", "pay"), ("answer", answer)]);
    assert_eq!(answers("acquired"), 2.0, "{text}");
    assert_eq!(answers("replay"), 2.0, "{text}");
    assert_eq!(answers("mismatch"), 1.0, "{text}");
    assert_eq!(value(&text, REFUSALS, &[("code", "IDEMDB_KEY_MISSING")]), 1.0, "{text}");
    let settled = |outcome| value(&text, SETTLEMENTS, &[("operation", "pay"), ("outcome", outcome)]);
    assert_eq!((settled("completed"), settled("failed"), settled("uncertain")), (1.0, 1.0, 0.0), "{text}");
    // Five reservations and two settlements went to the store, each timed.
    assert_eq!(value(&text, &format!("{STORE_SECONDS}_count"), &[("call", "reserve")]), 5.0, "{text}");
    assert_eq!(value(&text, &format!("{STORE_SECONDS}_count"), &[("call", "complete")]), 1.0, "{text}");
    assert!(!text.contains("acme"), "no tenant in any label: {text}");
}
