//! The layer's metrics: each answer and settlement counted once, under its operation.

use axum::body::Body;
use http::{Response, StatusCode};
use idemdb_http::Operation;
use idemdb_http::metrics::{ANSWERS, REFUSALS, SETTLEMENTS, STORE_ERRORS, STORE_SECONDS};
use metrics_exporter_prometheus::PrometheusBuilder;

use crate::support::*;
use idemdb::Reserve;

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

/// A payment whose provider answer was lost: the outbox's report makes the record uncertain in
/// its own commit, then the handler marks it uncertain too. That is one uncertain settlement,
/// not a failed store call. Old code: `mark_uncertain` failed, and the lost answer counted as
/// `idemdb_http_store_errors_total{code="IDEMDB_WRONG_STATE"}` with no uncertain settlement.
#[tokio::test]
async fn a_lost_effect_answer_counts_as_an_uncertain_settlement_not_a_store_error() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);

    let (store, _) = store();
    let charge = idemdb::EffectName::new("charge").unwrap();
    let op = Operation::named("pay").enqueue_on_reserve(charge, 1, |_, _| Some(b"{}".to_vec()));
    let dispatcher = store.clone();
    let svc = service(layer(store.asynchronous(), op), move |request: http::Request<Body>| {
        let dispatcher = dispatcher.clone();
        async move {
            // The dispatcher sends the charge and loses the provider's answer.
            let claim = dispatcher.claim_effects(1).unwrap().pop().unwrap();
            dispatcher.report_effect(&claim, idemdb::EffectReport::Unknown { reason: "timeout".into() }).unwrap();
            let lease = request.extensions().get::<idemdb_http::LeaseHandle<idemdb::AsyncStore>>().cloned().unwrap();
            let marked = lease.mark_uncertain().await;
            let status = if marked.is_ok() { StatusCode::BAD_GATEWAY } else { StatusCode::INTERNAL_SERVER_ERROR };
            Response::builder().status(status).body(Body::from("provider-uncertain")).unwrap()
        }
    });
    let answer = send(&svc, post("/p", Some("lost-1"), r#"{"amount":1}"#)).await;
    assert_eq!(answer.status, StatusCode::BAD_GATEWAY, "the record being uncertain already is not an error");

    let text = handle.render();
    let settled = value(&text, SETTLEMENTS, &[("operation", "pay"), ("outcome", "uncertain")]);
    assert_eq!(settled, 1.0, "{text}");
    assert_eq!(value(&text, STORE_ERRORS, &[("code", "IDEMDB_WRONG_STATE")]), 0.0, "{text}");
}

/// The reconciler's queue depth is the queue's, not the round's budget. Old code: 64 for a
/// queue of 70.
#[tokio::test]
async fn the_queue_depth_gauge_reports_the_whole_queue_past_the_round_budget() {
    use idemdb_http::reconcile::{EffectDecision, EffectLookup, LEFT, QUEUE_DEPTH, Reconciler};

    struct NoLookup;
    impl EffectLookup<idemdb::AsyncStore> for NoLookup {
        async fn decide(&self, _: &idemdb::AsyncStore, _: &idemdb::OutboxItem) -> EffectDecision {
            EffectDecision::Undecided
        }
    }

    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    let (store, _) = store();
    let scope = idemdb::Scope::new("acme", "undeclared").unwrap();
    for n in 0..70 {
        let key = idemdb::IdempotencyKey::new(format!("k-{n}")).unwrap();
        let idemdb::Reservation::Acquired(lease) =
            store.reserve(Reserve::new(&scope, &key, &idemdb::Fingerprint::from_bytes([1; 32]))).unwrap()
        else {
            panic!("a new key is acquired")
        };
        store.fail(&lease, idemdb::Failure::Uncertain).unwrap();
    }
    let round = Reconciler::new(store.asynchronous(), NoLookup).round().await;
    assert_eq!((round.found, round.left), (70, 70));
    let text = handle.render();
    let gauge = |name: &str| text.lines().find_map(|line| line.strip_prefix(&format!("{name} "))?.parse::<f64>().ok());
    assert_eq!((gauge(QUEUE_DEPTH), gauge(LEFT)), (Some(70.0), Some(70.0)), "{text}");
}

/// With `metrics::publish` and `reconcile::publish`, every series exists at zero before the
/// first request: the layer's for each operation, and the reconciler's.
#[test]
fn every_series_is_published_at_zero_before_any_request() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        idemdb_http::metrics::publish(&["pay"]);
        idemdb_http::reconcile::publish();
    });
    let text = handle.render();
    for series in [
        r#"idemdb_http_answers_total{operation="pay",answer="acquired"} 0"#,
        r#"idemdb_http_answers_total{operation="pay",answer="needs_reconciliation"} 0"#,
        r#"idemdb_http_settlements_total{operation="pay",outcome="uncertain"} 0"#,
        r#"idemdb_http_lease_takeovers_total{operation="pay"} 0"#,
        r#"idemdb_http_refusals_total{code="IDEMDB_KEY_MISSING"} 0"#,
        r#"idemdb_http_store_errors_total{call="reserve",code="IDEMDB_STORAGE"} 0"#,
        r#"idemdb_reconciliation_queue_depth 0"#,
        r#"idemdb_reconciliation_resolutions_total{cause="confirmed"} 0"#,
    ] {
        assert!(text.lines().any(|line| line == series), "{series} missing: {text}");
    }
}
