//! Refusals the service makes before any handler: a header section over its limits is a 431
//! problem; past hyper's own limits, and for what is not HTTP at all, hyper answers a bare
//! status line (the documented bound). And the start-up warning of unverified webhooks.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{Db, effects, http, payment};

/// `POST /v1/payments` with `extra` headers: the status, the content type and the body.
async fn pay_with_headers(url: &str, extra: &[(String, String)]) -> (u16, String, String) {
    let mut request = http()
        .post(format!("{url}/v1/payments"))
        .header("authorization", "Bearer acme")
        .header("idempotency-key", "\"big-1\"")
        .header("content-type", "application/json")
        .body(payment("10.50"));
    for (name, value) in extra {
        request = request.header(name, value);
    }
    let response = request.send().await.expect("an answer");
    let status = response.status().as_u16();
    let media = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    (status, media, response.text().await.unwrap_or_default())
}

/// Old code took a 20 KiB header section and 70 header fields (hyper's limits were ~400 KiB
/// and 100) and charged the payment; past hyper's limit its answer was a bare 431.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_over_the_service_limits_get_a_431_problem_and_run_nothing() {
    let db = Db::redb();
    let server = db.start(&[]);
    let large = vec![("x-pad".to_string(), "a".repeat(payments_example::MAX_HEADER_BYTES + 1024))];
    let many: Vec<(String, String)> =
        (0..payments_example::MAX_HEADERS + 6).map(|n| (format!("x-field-{n}"), "v".to_string())).collect();
    for (what, extra) in [("large", &large), ("many", &many)] {
        let (status, media, body) = pay_with_headers(&server.url, extra).await;
        assert_eq!((status, media.as_str()), (431, "application/problem+json"), "{what}: {body}");
        let problem: serde_json::Value = serde_json::from_str(&body).expect("problem JSON");
        assert_eq!(problem["type"], "urn:payments-example:problem:header-fields-too-large", "{what}");
    }
    assert!(effects(&http(), &server.url, "acme").await.payments.is_empty(), "nothing was charged");

    // The bound: past hyper's own limit, or a request line that is not HTTP, hyper answers by
    // itself, a status line without a body, and closes; the service never sees the request.
    let huge = vec![("x-pad".to_string(), "a".repeat(payments_example::HYPER_MAX_HEADER_BYTES + 1024))];
    let (status, media, _) = pay_with_headers(&server.url, &huge).await;
    assert_eq!((status, media.as_str()), (431, ""), "hyper's own answer");
    let mut stream = tokio::net::TcpStream::connect(server.url.trim_start_matches("http://")).await.unwrap();
    stream.write_all(b"NOT A REQUEST\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "hyper's own 400: {answer}");
}

/// Old code started without a word about unsigned webhooks being accepted.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_without_a_webhook_secret_warns_at_start_up() {
    let db = Db::redb();
    let (_, stderr) = db.start(&[]).stop();
    assert!(stderr.contains("webhooks are UNVERIFIED"), "{stderr}");
    let (_, stderr) = db.start(&["--webhook-secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]).stop();
    assert!(!stderr.contains("UNVERIFIED"), "no warning with a secret: {stderr}");
}
