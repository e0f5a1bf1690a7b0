//! `Retry-After` of a payment in progress after a restart: the time until its answer can
//! come, not a lease more.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{Server, effects, http, payment};

const TOKEN: &str = "operator-secret-0123456789";

/// `POST /v1/payments`: the status, the problem type and `Retry-After` in seconds.
async fn pay_reading_retry_after(http: &reqwest::Client, url: &str, key: &str) -> (u16, Option<String>, Option<u64>) {
    let response = http
        .post(format!("{url}/v1/payments"))
        .header("authorization", "Bearer acme")
        .header("idempotency-key", format!("\"{key}\""))
        .header("content-type", "application/json")
        .body(payment("10.50"))
        .send()
        .await
        .expect("payment");
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").and_then(|v| v.to_str().ok()?.parse().ok());
    let body: Value = serde_json::from_slice(&response.bytes().await.expect("body")).unwrap_or(Value::Null);
    (status, body["type"].as_str().map(str::to_string), retry_after)
}

/// Waits until the admin API lists one charge being dispatched.
async fn until_dispatching(http: &reqwest::Client, url: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let response = http
            .get(format!("{url}/v1/admin/effects?state=dispatching"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("admin");
        let listed: Value = serde_json::from_slice(&response.bytes().await.expect("body")).expect("JSON");
        if listed["items"].as_array().is_some_and(|items| items.len() == 1) {
            return;
        }
        assert!(Instant::now() < deadline, "the charge was never claimed: {listed}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The process dies while its charge is at the provider. The store holds the payment's record
/// until the dispatch claim has expired plus one lease (the time the next dispatch may take),
/// but the restarted service's dispatcher sends the charge again as soon as the claim expires,
/// and that dispatch brings the answer. Old code: told 8 s (two leases), answered after 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_retry_after_is_the_real_wait_for_a_payment_whose_charge_was_at_the_provider() {
    let dir = tempfile::tempdir().unwrap();
    let lease = ["--lease-ttl-secs", "4", "--reconcile-interval-secs", "3600", "--admin-token", TOKEN];
    let slow = [&lease[..], &["--provider-latency-ms", "600000"]].concat();
    let first = Server::start(dir.path(), &slow);
    let http = http();
    let hung = tokio::spawn({
        let (http, url) = (http.clone(), first.url.clone());
        async move { pay_reading_retry_after(&http, &url, "slow-1").await }
    });
    until_dispatching(&http, &first.url).await;
    first.kill();
    let _ = hung.await;

    let server = Server::start(dir.path(), &lease);
    let asked = Instant::now();
    let (status, problem, told) = pay_reading_retry_after(&http, &server.url, "slow-1").await;
    assert_eq!((status, problem.as_deref()), (409, Some("urn:idemdb:problem:in-progress")));
    let told = told.expect("a 409 in progress says when to come back");
    let answered = loop {
        let (status, _, _) = pay_reading_retry_after(&http, &server.url, "slow-1").await;
        if status == 201 {
            break asked.elapsed();
        }
        assert!(asked.elapsed() < Duration::from_secs(30), "no answer within 30 s: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Retry-After is whole seconds, rounded up: at most a second over the real wait.
    let real = answered.as_secs_f64();
    assert!((told as f64) <= real + 1.0, "told {told} s, answered after {real:.2} s");
    assert!(real <= told as f64 + 1.0, "told {told} s, answered only after {real:.2} s");
    let effects = effects(&http, &server.url, "acme").await;
    assert_eq!((effects.payments_of("slow-1"), effects.charges_of("slow-1").len()), (1, 1), "one payment, one charge");
}
