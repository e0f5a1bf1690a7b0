//! `GET /metrics` scraped as Prometheus would: every series from the start, the store latency
//! as a histogram with buckets, and a lost provider answer counted as an uncertain settlement.

use crate::support::{Db, http, pay};

const LOST: &str = r#"{"amount":"20.00","currency":"BRL","destination":"acct_lost"}"#;
const PAID: &str = r#"{"amount":"10.50","currency":"BRL","destination":"acct_x"}"#;

async fn scrape(http: &reqwest::Client, url: &str) -> String {
    let response = http.get(format!("{url}/metrics")).send().await.expect("scrape");
    assert_eq!(response.status(), 200);
    response.text().await.expect("text")
}

/// The value of the series whose line starts with `series` (name and labels), if listed.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Old code: an empty page before the first request; `quantile=` lines (a summary) for the
/// latency; the lost answer as `store_errors_total{code="IDEMDB_WRONG_STATE"} 1` and no
/// uncertain settlement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_is_published_from_the_start_latency_has_buckets_and_a_lost_answer_is_uncertain() {
    let db = Db::redb();
    let server = db.start(&["--provider-lose-responses-to", "acct_lost", "--reconcile-interval-secs", "3600"]);
    let http = http();

    let first = scrape(&http, &server.url).await;
    for series in [
        r#"idemdb_http_answers_total{operation="create_payment",answer="acquired"}"#,
        r#"idemdb_http_settlements_total{operation="create_payment",outcome="uncertain"}"#,
        r#"idemdb_http_refusals_total{code="IDEMDB_KEY_MISSING"}"#,
        r#"idemdb_http_store_errors_total{call="complete",code="IDEMDB_STORAGE"}"#,
        "idemdb_reconciliation_queue_depth",
        r#"idemdb_reconciliation_resolutions_total{cause="confirmed"}"#,
    ] {
        assert_eq!(value(&first, series), Some(0.0), "{series} at zero before any request: {first}");
    }

    assert_eq!(pay(&http, &server.url, "acme", "m-1", PAID).await.unwrap().status, 201);
    assert_eq!(pay(&http, &server.url, "acme", "m-lost", LOST).await.unwrap().status, 502);
    let text = scrape(&http, &server.url).await;
    // A histogram: cumulative buckets, a sum and a count, which add up across instances.
    let reserves = value(&text, r#"idemdb_http_store_call_seconds_count{call="reserve"}"#);
    assert_eq!(reserves, Some(2.0), "{text}");
    assert_eq!(value(&text, r#"idemdb_http_store_call_seconds_bucket{call="reserve",le="+Inf"}"#), Some(2.0), "{text}");
    assert!(value(&text, r#"idemdb_http_store_call_seconds_bucket{call="reserve",le="0.001"}"#).is_some(), "{text}");
    assert!(value(&text, r#"idemdb_http_store_call_seconds_sum{call="reserve"}"#).is_some(), "{text}");
    assert!(!text.contains("quantile="), "not a summary: {text}");
    // The lost answer: one uncertain record, no store error.
    let uncertain = r#"idemdb_http_settlements_total{operation="create_payment",outcome="uncertain"}"#;
    assert_eq!(value(&text, uncertain), Some(1.0), "{text}");
    assert_eq!(value(&text, r#"idemdb_http_store_errors_total{call="fail",code="IDEMDB_WRONG_STATE"}"#), Some(0.0));
    assert!(!text.contains("acme"), "no tenant in any label: {text}");
}
