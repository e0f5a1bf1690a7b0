//! The running example over real HTTP: retries, concurrency, conflicts, SIGKILL and the Rust
//! client through a lossy proxy. Effects are counted in the ledger (payments and provider
//! calls), not only in the answers.

use std::time::Duration;

use idemdb::{Scope, Store};
use idemdb_http::client::{IdempotentClient, IntentRequest, Retry};

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_retries_replay_the_first_answer_and_make_one_effect() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let http = http();
    let first = pay(&http, &server.url, "acme", "seq-1", &payment("10.50")).await.unwrap();
    assert_eq!((first.status, first.replayed), (201, false));
    let created: serde_json::Value = serde_json::from_slice(&first.body).unwrap();
    assert_eq!(created["idempotency_key"], "seq-1");
    assert_eq!(created["provider_key"], "seq-1:charge-v1");
    for body in [payment("10.50"), r#"{"destination":"acct_x","currency":"brl","amount":"10.5"}"#.to_string()] {
        let retry = pay(&http, &server.url, "acme", "seq-1", &body).await.unwrap();
        assert_eq!((retry.status, retry.replayed), (201, true));
        assert_eq!(retry.body, first.body, "byte for byte");
    }
    let effects = effects(&http, &server.url, "acme").await;
    assert_eq!(effects.payments_of("seq-1"), 1);
    assert_eq!(effects.calls_of("seq-1"), 1);
    // Another tenant with the same key is another payment.
    let globex = pay(&http, &server.url, "globex", "seq-1", &payment("10.50")).await.unwrap();
    assert_eq!((globex.status, globex.replayed), (201, false));
    assert_eq!(effects_of(&http, &server.url, "globex", "seq-1").await, (1, 1));
    assert_eq!(effects_of(&http, &server.url, "acme", "seq-1").await, (1, 1));
}

async fn effects_of(http: &reqwest::Client, url: &str, tenant: &str, key: &str) -> (usize, u64) {
    let effects = effects(http, url, tenant).await;
    (effects.payments_of(key), effects.calls_of(key))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_concurrent_requests_with_one_key_make_one_201_and_one_effect() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--provider-latency-ms", "300"]);
    let http = http();
    let requests: Vec<_> = (0..32)
        .map(|_| {
            let (http, url) = (http.clone(), server.url.clone());
            tokio::spawn(async move { pay(&http, &url, "acme", "burst-1", &payment("10.50")).await })
        })
        .collect();
    let mut replies = Vec::new();
    for request in requests {
        replies.push(request.await.unwrap().unwrap());
    }
    let fresh = replies.iter().filter(|r| r.status == 201 && !r.replayed).count();
    assert_eq!(fresh, 1, "{replies:?}");
    for reply in &replies {
        let replay = reply.status == 201 && reply.replayed;
        let in_progress = reply.status == 409 && reply.problem.as_deref() == Some("urn:idemdb:problem:in-progress");
        assert!(reply.status == 201 || in_progress || replay, "{reply:?}");
    }
    assert_eq!(effects_of(&http, &server.url, "acme", "burst-1").await, (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_with_another_amount_is_422_and_no_effect() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let http = http();
    assert_eq!(pay(&http, &server.url, "acme", "amt-1", &payment("10.50")).await.unwrap().status, 201);
    let other = pay(&http, &server.url, "acme", "amt-1", &payment("99.00")).await.unwrap();
    assert_eq!(other.status, 422);
    assert_eq!(other.problem.as_deref(), Some("urn:idemdb:problem:key-mismatch"));
    let effects = effects(&http, &server.url, "acme").await;
    assert_eq!((effects.payments_of("amt-1"), effects.calls_of("amt-1")), (1, 1));
    assert_eq!(effects.payments.len(), 1, "the 99.00 payment was never made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_requests_then_restart_leaves_each_key_one_effect_or_an_uncertain_answer() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--provider-latency-ms", "150", "--lease-ttl-secs", "1"];
    let server = Server::start(dir.path(), &args);
    let http = http();
    let keys: Vec<String> = (0..24).map(|i| format!("crash-{i}")).collect();
    let mut requests = Vec::new();
    for key in &keys {
        let (http, url, key) = (http.clone(), server.url.clone(), key.clone());
        requests.push(tokio::spawn(async move { pay(&http, &url, "acme", &key, &payment("10.50")).await }));
    }
    // Kill once some payments are done and others are still running.
    loop {
        if !effects(&http, &server.url, "acme").await.payments.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.kill();
    for request in requests {
        let _ = request.await.unwrap();
    }
    let server = Server::start(dir.path(), &args);
    // Let every lease of the killed process run out: its attempts' outcomes are unknown.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (mut replayed, mut uncertain, mut fresh) = (0, 0, 0);
    for key in &keys {
        let reply = pay(&http, &server.url, "acme", key, &payment("10.50")).await.unwrap();
        let effects = effects(&http, &server.url, "acme").await;
        let (payments, calls) = (effects.payments_of(key), effects.calls_of(key));
        assert!(payments <= 1 && calls <= 1, "{key}: {payments} payments, {calls} provider calls");
        match (reply.status, reply.replayed) {
            (201, true) => {
                replayed += 1;
                assert_eq!((payments, calls), (1, 1), "{key}");
            }
            (201, false) => {
                fresh += 1;
                assert_eq!((payments, calls), (1, 1), "{key}");
            }
            (409, _) => {
                uncertain += 1;
                assert_eq!(reply.problem.as_deref(), Some("urn:idemdb:problem:needs-reconciliation"), "{key}");
                assert_eq!(payments, 0, "{key}: an uncertain key has no payment row");
            }
            other => panic!("{key}: unexpected answer {other:?} {reply:?}"),
        }
    }
    assert!(replayed >= 1, "some payments finished before the kill");
    eprintln!("after the kill: {replayed} replayed, {uncertain} uncertain, {fresh} run fresh");
    assert_eq!(replayed + uncertain + fresh, keys.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_through_a_proxy_that_loses_responses_makes_one_effect_per_intent() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let proxy = Proxy::start(&server.url).await;
    let http = http();
    let retry = Retry::default().base_delay(Duration::from_millis(10)).max_delay(Duration::from_millis(50));
    let client_file = dir.path().join("app-intents.idemdb");
    let transport = |_: &idemdb::Intent| {
        let mut headers = http::HeaderMap::new();
        headers.insert("authorization", http::HeaderValue::from_static("Bearer acme"));
        headers
    };
    let scope = Scope::new("me", "create_payment").unwrap();
    let url = format!("{}/v1/payments", proxy.url);
    let mut keys = Vec::new();
    {
        let client = IdempotentClient::new(Store::open(&client_file).unwrap(), http.clone())
            .retry(retry)
            .transport_headers(transport);
        proxy.mode.store(DROP_EVERY_OTHER_RESPONSE, std::sync::atomic::Ordering::SeqCst);
        for n in 0..6 {
            let body = serde_json::json!({"amount": format!("{n}.50"), "currency": "BRL", "destination": "acct_x"});
            let answer = client.send(&scope, IntentRequest::post(&url).json(body)).await.unwrap();
            assert_eq!(answer.status, 201);
            assert!(answer.replayed(), "the first answer was lost; the retry got the replay");
            keys.push(answer.key.as_str().to_string());
        }
        assert!(proxy.dropped.load(std::sync::atomic::Ordering::SeqCst) >= 6);

        // The server becomes unreachable: the intent stays pending when retries run out.
        proxy.mode.store(REFUSE, std::sync::atomic::Ordering::SeqCst);
        let body = serde_json::json!({"amount": "7.00", "currency": "BRL", "destination": "acct_x"});
        let error = client.send(&scope, IntentRequest::post(&url).json(body)).await.unwrap_err();
        assert!(error.is_retries_exhausted(), "{error}");
        assert_eq!(client.store().pending_intents().unwrap().len(), 1);
    }
    // The app starts again (a new process would open the same file): resume what is pending.
    proxy.mode.store(DROP_EVERY_OTHER_RESPONSE, std::sync::atomic::Ordering::SeqCst);
    let client = IdempotentClient::new(Store::open(&client_file).unwrap(), http.clone())
        .retry(retry)
        .transport_headers(transport);
    let resumed = client.resume_pending().await.unwrap();
    assert_eq!(resumed.len(), 1);
    let answer = resumed.into_iter().next().unwrap().result.unwrap();
    assert_eq!(answer.status, 201);
    keys.push(answer.key.as_str().to_string());
    assert!(client.store().pending_intents().unwrap().is_empty());

    let effects = effects(&http, &server.url, "acme").await;
    for key in &keys {
        assert_eq!((effects.payments_of(key), effects.calls_of(key)), (1, 1), "{key}");
    }
    assert_eq!(effects.payments.len(), keys.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_422_reaches_the_client_as_a_conflict_and_is_not_retried() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let http = http();
    assert_eq!(pay(&http, &server.url, "acme", "taken", &payment("1.00")).await.unwrap().status, 201);
    let client = IdempotentClient::new(Store::in_memory().unwrap(), http.clone()).transport_headers(|_| {
        let mut headers = http::HeaderMap::new();
        headers.insert("authorization", http::HeaderValue::from_static("Bearer acme"));
        headers
    });
    let scope = Scope::new("me", "create_payment").unwrap();
    let key = idemdb::IdempotencyKey::new("taken").unwrap();
    let request = IntentRequest::post(format!("{}/v1/payments", server.url))
        .json(serde_json::json!({"amount": "2.00", "currency": "BRL", "destination": "acct_x"}));
    let error = client.send_with_key(&scope, &key, request).await.unwrap_err();
    assert!(error.is_conflict(), "{error}");
    assert_eq!(error.answer().unwrap().status, 422);
    let intent = client.store().intent(&scope, &key).unwrap().unwrap();
    assert_eq!(intent.attempts, 1, "never retried");
    assert_eq!(effects_of(&http, &server.url, "acme", "taken").await, (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_expiry_policy_is_published() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--lease-ttl-secs", "7"]);
    let response = http().get(format!("{}/v1/idempotency-policy", server.url)).send().await.unwrap();
    let policy: serde_json::Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    let operation = &policy["operations"][0];
    assert_eq!(operation["path"], "/v1/payments");
    assert_eq!(operation["lease_ttl_seconds"], 7);
    assert_eq!(operation["response_ttl_seconds"], 30 * 24 * 3600);
    assert_eq!(operation["tombstone_ttl_seconds"], 365 * 24 * 3600);
}
