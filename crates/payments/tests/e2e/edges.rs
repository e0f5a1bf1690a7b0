//! Every retry reaches a final answer, at the edges: the longest keys, keys sent unquoted, a
//! request the handler refused before any effect, and the published policy. Effects are
//! counted in the ledger.

use idemdb_core::{EffectName, IdempotencyKey};
use serde_json::Value;

use crate::support::*;

/// The provider key the service derives for `key` (the core's documented rule).
fn provider_key(key: &str) -> String {
    let effect = EffectName::new("charge").unwrap();
    effect.provider_key(&IdempotencyKey::new(key).unwrap(), 1).unwrap().as_str().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_246_to_255_bytes_are_paid_once_and_replayed() {
    let server = Db::redb().start(&[]);
    let http = http();
    for len in [245, 246, 250, 255] {
        let key = format!("{len}-{}", "k".repeat(len - 4));
        assert_eq!(key.len(), len);
        let first = pay(&http, &server.url, "acme", &key, &payment("10.50")).await.unwrap();
        assert_eq!((first.status, first.replayed), (201, false), "{len}: {}", String::from_utf8_lossy(&first.body));
        let created: Value = serde_json::from_slice(&first.body).unwrap();
        let derived = provider_key(&key);
        assert!(derived.len() <= 255, "{len}: {derived}");
        assert_eq!(created["provider_key"], derived.as_str());
        let retry = pay(&http, &server.url, "acme", &key, &payment("10.50")).await.unwrap();
        assert_eq!((retry.status, retry.replayed, &retry.body), (201, true, &first.body), "{len}");
        let effects = effects(&http, &server.url, "acme").await;
        assert_eq!(effects.payments_of(&key), 1, "{len}");
        // Short forms are counted under the key, hashed ones under the provider key.
        let counted = if len <= 245 { key.clone() } else { derived };
        assert_eq!(effects.calls_of(&counted), 1, "{len}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_uuid_key_is_the_same_key_as_its_quoted_form() {
    let server = Db::redb().start(&[]);
    let http = http();
    let uuid = "8e03978e-40d5-43e8-bc93-6894a57f9324";
    let bare = pay_raw(&http, &server.url, "acme", uuid, &payment("10.50")).await;
    assert_eq!((bare.status, bare.replayed), (201, false), "{}", String::from_utf8_lossy(&bare.body));
    let quoted = pay_raw(&http, &server.url, "acme", &format!("\"{uuid}\""), &payment("10.50")).await;
    assert_eq!((quoted.status, quoted.replayed, &quoted.body), (201, true, &bare.body));
    let token = pay_raw(&http, &server.url, "acme", "order-77", &payment("10.50")).await;
    assert_eq!(token.status, 201);
    let effects = effects(&http, &server.url, "acme").await;
    assert_eq!((effects.payments_of(uuid), effects.calls_of(uuid)), (1, 1));
    assert_eq!((effects.payments_of("order-77"), effects.calls_of("order-77")), (1, 1));
    // A value that is no key still gets 400, with what to send.
    let spaced = pay_raw(&http, &server.url, "acme", "a b", &payment("10.50")).await;
    assert_eq!(spaced.status, 400);
    assert_eq!(spaced.problem.as_deref(), Some("urn:idemdb:problem:invalid-key"));
    let detail: Value = serde_json::from_slice(&spaced.body).unwrap();
    assert!(detail["detail"].as_str().unwrap().contains("send "), "{detail}");
    assert_eq!(effects_count(&http, &server.url).await, 2);
}

async fn effects_count(http: &reqwest::Client, url: &str) -> usize {
    effects(http, url, "acme").await.payments.values().sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_refused_before_any_effect_leaves_the_key_free_for_the_corrected_one() {
    let server = Db::redb().start(&[]);
    let http = http();
    let refused = pay(&http, &server.url, "acme", "fix-1", &payment("10.505")).await.unwrap();
    assert_eq!(refused.status, 400, "{}", String::from_utf8_lossy(&refused.body));
    assert_eq!(effects_count(&http, &server.url).await, 0);
    let fixed = pay(&http, &server.url, "acme", "fix-1", &payment("10.50")).await.unwrap();
    assert_eq!((fixed.status, fixed.replayed), (201, false), "{}", String::from_utf8_lossy(&fixed.body));
    // The corrected request is now the key's binding: its retry replays, the refused body is
    // a different request.
    let retry = pay(&http, &server.url, "acme", "fix-1", &payment("10.50")).await.unwrap();
    assert_eq!((retry.status, retry.replayed), (201, true));
    let again = pay(&http, &server.url, "acme", "fix-1", &payment("10.505")).await.unwrap();
    assert_eq!(again.status, 422);
    let effects = effects(&http, &server.url, "acme").await;
    assert_eq!((effects.payments_of("fix-1"), effects.calls_of("fix-1")), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_published_policy_lists_every_limit_the_layer_enforces() {
    let server = Db::redb().start(&[]);
    let response = http().get(format!("{}/v1/idempotency-policy", server.url)).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let policy: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(policy["key"]["bytes"]["max"], 255);
    assert!(policy["key"]["forms"].as_array().is_some_and(|forms| forms.len() == 3), "{policy}");
    assert!(policy["key"]["derived_keys"].as_str().is_some_and(|rule| rule.contains("blake3")), "{policy}");
    let operation = &policy["operations"][0];
    assert_eq!(operation["max_body_bytes"], 16 * 1024);
    assert!(operation["max_stored_response_bytes"].as_u64().is_some_and(|n| n > 0));
    assert!(operation["retry_after"]["max_seconds"].as_u64().is_some(), "{operation}");
    assert!(operation["fingerprint"]["caveats"].to_string().contains("2^53"), "{operation}");
}

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// `POST /v1/webhooks/provider` with `body` and the given signature headers.
async fn signed_webhook(url: &str, body: &str, id: &str, timestamp: u64, signature: &str) -> (u16, Value) {
    let request = http()
        .post(format!("{url}/v1/webhooks/provider"))
        .header("webhook-id", id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature);
    json_answer(request, body).await
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_secret_only_signed_webhooks_apply_and_redeliveries_signed_again_are_duplicates() {
    let server = Db::redb().start(&["--webhook-secret", SECRET]);
    let signer = idemdb_http::WebhookSigner::new(SECRET).unwrap();
    let body = r#"{"delivery_id":"evt_1","object_id":"ch_1","version":2,"state":"refunded"}"#;
    // Unsigned, and forged with another secret: refused, nothing recorded.
    let (status, answer) = webhook(&http(), &server.url, body).await;
    assert_eq!((status, answer["type"].as_str()), (401, Some("urn:payments-example:problem:invalid-signature")));
    let forger = idemdb_http::WebhookSigner::new("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD").unwrap();
    let ts = now_secs();
    assert_eq!(signed_webhook(&server.url, body, "evt_1", ts, &forger.sign("evt_1", ts, body.as_bytes())).await.0, 401);
    // A signature of another body, or an old timestamp: refused.
    let tampered = body.replace("refunded", "succeeded");
    assert_eq!(
        signed_webhook(&server.url, &tampered, "evt_1", ts, &signer.sign("evt_1", ts, body.as_bytes())).await.0,
        401
    );
    let old = ts - 3600;
    assert_eq!(
        signed_webhook(&server.url, body, "evt_1", old, &signer.sign("evt_1", old, body.as_bytes())).await.0,
        401
    );
    // Signed: applied. The id must be the body's delivery id.
    let (status, answer) =
        signed_webhook(&server.url, body, "evt_1", ts, &signer.sign("evt_1", ts, body.as_bytes())).await;
    assert_eq!((status, answer["outcome"].as_str()), (200, Some("applied")), "{answer}");
    assert_eq!(answer["object"]["version"], 2, "the first applied delivery is this one");
    let (status, _) = signed_webhook(&server.url, body, "evt_9", ts, &signer.sign("evt_9", ts, body.as_bytes())).await;
    assert_eq!(status, 400);
    // The sender's retry: the same id, signed again later: a duplicate, nothing changes.
    let later = ts + 60;
    let (status, answer) =
        signed_webhook(&server.url, body, "evt_1", later, &signer.sign("evt_1", later, body.as_bytes())).await;
    assert_eq!((status, answer["outcome"].as_str()), (200, Some("duplicate")), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_providers_public_key_only_its_ed25519_signed_webhooks_apply() {
    let signer = idemdb_http::WebhookSigner::ed25519_from_seed([21; 32]);
    let public = signer.public_key().unwrap();
    let server = Db::redb().start(&["--webhook-secret", &public]);
    let body = r#"{"delivery_id":"evt_a","object_id":"ch_1","version":2,"state":"refunded"}"#;
    let ts = now_secs();
    // An HMAC signature (any secret) and another key pair's signature: refused.
    let hmac = idemdb_http::WebhookSigner::new(SECRET).unwrap().sign("evt_a", ts, body.as_bytes());
    assert_eq!(signed_webhook(&server.url, body, "evt_a", ts, &hmac).await.0, 401);
    let other = idemdb_http::WebhookSigner::ed25519_from_seed([22; 32]).sign("evt_a", ts, body.as_bytes());
    assert_eq!(signed_webhook(&server.url, body, "evt_a", ts, &other).await.0, 401);
    // Signed with the provider's key: applied once; a redelivery signed again is a duplicate.
    let (status, answer) =
        signed_webhook(&server.url, body, "evt_a", ts, &signer.sign("evt_a", ts, body.as_bytes())).await;
    assert_eq!((status, answer["outcome"].as_str()), (200, Some("applied")), "{answer}");
    let later = ts + 30;
    let (status, answer) =
        signed_webhook(&server.url, body, "evt_a", later, &signer.sign("evt_a", later, body.as_bytes())).await;
    assert_eq!((status, answer["outcome"].as_str()), (200, Some("duplicate")), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_absurdly_ahead_is_refused_and_later_real_versions_still_apply() {
    let server = Db::redb().start(&[]);
    let http = http();
    let forged = format!(r#"{{"delivery_id":"evt_f","object_id":"ch_1","version":{},"state":"refunded"}}"#, 1u64 << 63);
    let (status, answer) = webhook(&http, &server.url, &forged).await;
    assert_eq!((status, answer["outcome"].as_str()), (200, Some("invalid_transition")), "{answer}");
    assert_eq!(answer["object"], Value::Null, "nothing applied");
    for version in [2, 3] {
        let body =
            format!(r#"{{"delivery_id":"evt_{version}","object_id":"ch_1","version":{version},"state":"s{version}"}}"#);
        let (status, answer) = webhook(&http, &server.url, &body).await;
        assert_eq!((status, answer["outcome"].as_str()), (200, Some("applied")), "{answer}");
        assert_eq!(answer["object"]["version"], version);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_of_the_service_is_a_problem() {
    let server = Db::redb().start(&[]);
    let http = http();
    let url = &server.url;
    let big = format!(r#"{{"delivery_id":"evt_1","object_id":"ch_1","version":2,"state":"{}"}}"#, "x".repeat(20_000));
    let requests = [
        (http.get(format!("{url}/v1/payments")), 405, "method-not-allowed"),
        (http.get(format!("{url}/no/such/path")), 404, "not-found"),
        (http.get(format!("{url}/v1/ledger")), 401, "unauthenticated"),
        (
            http.post(format!("{url}/v1/webhooks/provider")).header("content-type", "application/json").body(big),
            413,
            "payload-too-large",
        ),
    ];
    for (request, status, slug) in requests {
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), status, "{slug}");
        let media = response.headers().get("content-type").unwrap().to_str().unwrap().to_string();
        assert_eq!(media, "application/problem+json", "{slug}");
        let problem: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
        assert_eq!(problem["status"], status, "{problem}");
        assert_eq!(problem["type"], format!("urn:payments-example:problem:{slug}"), "{problem}");
        assert!(problem["detail"].as_str().is_some_and(|d| !d.is_empty()), "{problem}");
    }
    // Nothing reached the inbox: the object is unknown.
    let (_, answer) =
        webhook(&http, url, r#"{"delivery_id":"evt_2","object_id":"ch_1","version":1,"state":"s"}"#).await;
    assert_eq!(answer["outcome"], "applied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_its_headers_too_slowly_loses_the_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = Db::redb().start(&["--header-read-timeout-secs", "1"]);
    let mut slow = tokio::net::TcpStream::connect(server.url.trim_start_matches("http://")).await.unwrap();
    slow.write_all(b"POST /v1/payments HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    // Never finish the head. The server closes the connection (possibly after a 408); the
    // bound here only keeps a broken server from hanging the test.
    let mut buffer = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(20), slow.read_to_end(&mut buffer)).await;
    assert!(read.is_ok(), "the connection was still open after 20 s");
    // The server still serves everyone else.
    let reply = pay(&http(), &server.url, "acme", "after-slow", &payment("1.00")).await.unwrap();
    assert_eq!(reply.status, 201);
    assert_eq!(effects(&http(), &server.url, "acme").await.payments_of("after-slow"), 1);
}

/// The body read limit is a deadline, not a per-chunk timeout: a client that sends a byte every
/// 300 ms stayed connected for ever under a 1 s limit (every chunk came in time). Now the request
/// is answered 408 once the second is up, before anything is reserved, and nothing is charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_trickling_in_is_refused_at_its_deadline_and_charges_nothing() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = Db::redb().start(&["--body-read-timeout-secs", "1"]);
    let body = payment("1.00");
    let mut slow = tokio::net::TcpStream::connect(server.url.trim_start_matches("http://")).await.unwrap();
    let head = format!(
        "POST /v1/payments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer acme\r\nIdempotency-Key: \"trickle\"\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    // One byte every 300 ms: the whole body would take well over 10 s; every single wait is
    // far below the limit.
    let sender = tokio::spawn(async move {
        for byte in body.as_bytes() {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            if slow.write_all(&[*byte]).await.is_err() {
                break;
            }
        }
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(30), slow.read_to_end(&mut answer)).await;
        answer
    });
    let answer = String::from_utf8_lossy(&sender.await.unwrap()).into_owned();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive within"), "{answer}");
    assert_eq!(effects(&http(), &server.url, "acme").await.payments_of("trickle"), 0, "nothing was charged");
    // The key was never reserved: the same request, sent at once, runs once.
    let reply = pay(&http(), &server.url, "acme", "trickle", &payment("1.00")).await.unwrap();
    assert_eq!(reply.status, 201);
    assert_eq!(effects(&http(), &server.url, "acme").await.payments_of("trickle"), 1);
}

/// The value of the series `name{labels…}` in Prometheus text, 0 when absent.
fn series(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| line.starts_with(&format!("{name}{{")) || line.starts_with(&format!("{name} ")))
        .find(|line| labels.iter().all(|(k, v)| line.contains(&format!("{k}=\"{v}\""))))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_answers_and_settlements_in_prometheus_text() {
    let server = Db::redb().start(&["--reconcile-interval-secs", "1"]);
    let http = http();
    for key in ["m-1", "m-2"] {
        assert_eq!(pay(&http, &server.url, "acme", key, &payment("10.50")).await.unwrap().status, 201);
    }
    assert!(pay(&http, &server.url, "acme", "m-1", &payment("10.50")).await.unwrap().replayed);
    assert_eq!(pay(&http, &server.url, "acme", "m-1", &payment("99.00")).await.unwrap().status, 422);
    let response = http.get(format!("{}/metrics", server.url)).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/plain; version=0.0.4"));
    let text = response.text().await.unwrap();
    let op = ("operation", "create_payment");
    assert_eq!(series(&text, "idemdb_http_answers_total", &[op, ("answer", "acquired")]), 2.0, "{text}");
    assert_eq!(series(&text, "idemdb_http_answers_total", &[op, ("answer", "replay")]), 1.0, "{text}");
    assert_eq!(series(&text, "idemdb_http_answers_total", &[op, ("answer", "mismatch")]), 1.0, "{text}");
    assert_eq!(series(&text, "idemdb_http_settlements_total", &[op, ("outcome", "completed")]), 2.0, "{text}");
    assert!(text.contains("idemdb_http_store_call_seconds"), "{text}");
    // The reconciler's gauges appear after its first round (every second here).
    let mut rounds = String::new();
    for _ in 0..50 {
        rounds = http.get(format!("{}/metrics", server.url)).send().await.unwrap().text().await.unwrap();
        if rounds.contains("idemdb_reconciliation_queue_depth ") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(series(&rounds, "idemdb_reconciliation_queue_depth", &[]), 0.0, "{rounds}");
    assert!(rounds.contains("idemdb_reconciliation_queue_depth 0"), "nothing to reconcile: {rounds}");
    assert!(!text.contains("acme") && !text.contains("m-1"), "no tenant or key in the metrics: {text}");
    assert_eq!(effects_count(&http, &server.url).await, 2, "two payments, whatever was asked");
}
