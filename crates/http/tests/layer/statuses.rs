//! One test per row of the status table in the crate docs, each counting the handler's runs.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use http::{Method, Request, StatusCode};
use idemdb::{IdempotencyKey, Reservation, Reserve, Scope, StateKind};
use idemdb_http::Operation;
use tokio::sync::Notify;

use crate::support::*;

const BODY: &str = r#"{"amount":"10.50","currency":"BRL"}"#;

#[tokio::test]
async fn uncovered_methods_and_optional_keys_pass_through_without_a_record() {
    let (store, _) = store();
    let effects = Effects::default();
    let svc = service(layer(store.asynchronous(), Operation::named("op")), created(effects.clone()));
    let get = Request::builder().method(Method::GET).uri("/things").body(Body::empty()).unwrap();
    assert_eq!(send(&svc, get).await.status, StatusCode::CREATED);

    let optional =
        service(layer(store.asynchronous(), Operation::named("op").key_optional()), created(effects.clone()));
    assert_eq!(send(&optional, post("/things", None, BODY)).await.status, StatusCode::CREATED);
    assert_eq!(send(&optional, post("/things", None, BODY)).await.status, StatusCode::CREATED);
    assert_eq!(effects.count(), 3, "nothing idempotent about requests without a key");
    assert!(store.list(&Default::default()).unwrap().records.is_empty(), "no record was made");
}

#[tokio::test]
async fn a_required_key_that_is_missing_is_400_key_missing() {
    let (store, _) = store();
    let effects = Effects::default();
    let svc = service(layer(store.asynchronous(), Operation::named("op")), created(effects.clone()));
    let answer = send(&svc, post("/things", None, BODY)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.problem(), "urn:idemdb:problem:key-missing");
    assert_eq!(answer.json()["code"], "IDEMDB_KEY_MISSING");
    assert_eq!(effects.count(), 0);
}

#[tokio::test]
async fn malformed_keys_are_400_invalid_key_and_never_reach_the_handler() {
    let (store, _) = store();
    let effects = Effects::default();
    let svc = service(layer(store.asynchronous(), Operation::named("op")), created(effects.clone()));
    let too_long = format!("\"{}\"", "k".repeat(256));
    let values: Vec<&[u8]> = vec![
        b"\"\"",                    // empty
        too_long.as_bytes(),        // 256 bytes
        "\"caf\u{e9}\"".as_bytes(), // non-ASCII
        b"\"a b\"",                 // a space: not a key byte
        b"a b",                     // unquoted, with a space
        b"\"unterminated",
    ];
    for value in values {
        let mut request = post("/things", None, BODY);
        request.headers_mut().insert("idempotency-key", http::HeaderValue::from_bytes(value).unwrap());
        let answer = send(&svc, request).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", String::from_utf8_lossy(value));
        assert_eq!(answer.problem(), "urn:idemdb:problem:invalid-key");
    }
    let mut twice = post("/things", Some("k-1"), BODY);
    twice.headers_mut().append("idempotency-key", http::HeaderValue::from_static("\"k-2\""));
    let answer = send(&svc, twice).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.problem(), "urn:idemdb:problem:invalid-key");
    // The longest valid key works.
    let longest = "k".repeat(255);
    assert_eq!(send(&svc, post("/things", Some(&longest), BODY)).await.status, StatusCode::CREATED);
    assert_eq!(effects.count(), 1);
}

#[tokio::test]
async fn a_string_a_token_and_a_bare_uuid_are_one_key_by_default_and_strict_takes_strings_only() {
    let (store, _) = store();
    let effects = Effects::default();
    let svc = service(layer(store.asynchronous(), Operation::named("op")), created(effects.clone()));
    let with_key = |value: &'static str| {
        let mut request = post("/things", None, BODY);
        request.headers_mut().insert("idempotency-key", http::HeaderValue::from_static(value));
        request
    };
    let uuid = "8e03978e-40d5-43e8-bc93-6894a57f9324";
    assert_eq!(send(&svc, with_key("8e03978e-40d5-43e8-bc93-6894a57f9324")).await.status, StatusCode::CREATED);
    assert!(send(&svc, post("/things", Some(uuid), BODY)).await.replayed(), "the quoted form is the same key");
    assert_eq!(send(&svc, with_key("k-1")).await.status, StatusCode::CREATED);
    assert!(send(&svc, post("/things", Some("k-1"), BODY)).await.replayed());
    assert!(send(&svc, with_key("  k-1 ")).await.replayed());
    assert_eq!(effects.count(), 2);

    let strict =
        service(layer(store.asynchronous(), Operation::named("strict").strict_keys()), created(effects.clone()));
    for value in ["k-1", "8e03978e-40d5-43e8-bc93-6894a57f9324"] {
        let answer = send(&strict, with_key(value)).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{value}");
        assert_eq!(answer.problem(), "urn:idemdb:problem:invalid-key");
        let detail = answer.json()["detail"].as_str().unwrap().to_string();
        assert!(detail.contains("send the key as a quoted string"), "{detail}");
    }
    assert_eq!(send(&strict, post("/things", Some("k-1"), BODY)).await.status, StatusCode::CREATED);
    assert_eq!(effects.count(), 3);
}

#[tokio::test]
async fn no_tenant_is_401_and_stores_nothing() {
    let (store, _) = store();
    let effects = Effects::default();
    let svc = service(layer(store.asynchronous(), Operation::named("op")), created(effects.clone()));
    let mut request = post("/things", Some("k-1"), BODY);
    request.headers_mut().remove("x-test-tenant");
    let answer = send(&svc, request).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert_eq!(answer.problem(), "urn:idemdb:problem:unauthenticated");
    let mut bad = post("/things", Some("k-1"), BODY);
    bad.headers_mut().insert("x-test-tenant", http::HeaderValue::from_static(""));
    assert_eq!(send(&svc, bad).await.status, StatusCode::UNAUTHORIZED);
    assert_eq!(effects.count(), 0);
    assert!(store.list(&Default::default()).unwrap().records.is_empty());
}

#[tokio::test]
async fn bodies_over_the_limit_are_413_declared_or_not() {
    let (store, _) = store();
    let effects = Effects::default();
    let svc = service(layer(store.asynchronous(), Operation::named("op").max_body_bytes(16)), created(effects.clone()));
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(32));
    let mut declared = post("/things", Some("k-1"), &big);
    declared.headers_mut().insert("content-length", big.len().into());
    let answer = send(&svc, declared).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer.problem(), "urn:idemdb:problem:too-large");
    // No Content-Length: the limit stops the read.
    let answer = send(&svc, post("/things", Some("k-1"), &big)).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    // At the limit it runs; the refusals stored nothing, so the same key is still free.
    let exact = r#"{"a":"0123456"}"#;
    assert!(exact.len() <= 16);
    assert_eq!(send(&svc, post("/things", Some("k-1"), exact)).await.status, StatusCode::CREATED);
    assert_eq!(effects.count(), 1);
}

#[tokio::test]
async fn json_without_a_canonical_form_is_400_invalid_request() {
    let (store, _) = store();
    let effects = Effects::default();
    let svc = service(layer(store.asynchronous(), Operation::named("op")), created(effects.clone()));
    for body in ["{not json", r#"{"a":1,"a":2}"#, ""] {
        let answer = send(&svc, post("/things", Some("k-1"), body)).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{body:?}");
        assert_eq!(answer.problem(), "urn:idemdb:problem:invalid-request");
    }
    assert_eq!(effects.count(), 0);
}

#[tokio::test]
async fn a_new_key_runs_once_and_a_retry_replays() {
    let (store, _) = store();
    let effects = Effects::default();
    let svc = service(layer(store.asynchronous(), Operation::named("op")), created(effects.clone()));
    let first = send(&svc, post("/things", Some("k-1"), BODY)).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert!(!first.replayed());
    // The same request re-serialised (other key order and spacing) is the same intent.
    let retry = send(&svc, post("/things", Some("k-1"), r#"{ "currency": "BRL", "amount": "10.50" }"#)).await;
    assert_eq!(retry.status, StatusCode::CREATED);
    assert!(retry.replayed());
    assert_eq!(retry.body, first.body);
    assert_eq!(effects.count(), 1);
    assert_eq!(record(&store, "op", "k-1").unwrap().state.kind(), StateKind::Completed);
}

/// The future of a gated handler.
type Gated = std::pin::Pin<Box<dyn std::future::Future<Output = http::Response<Body>> + Send>>;

/// A handler that signals `entered` when it starts and finishes only after `release`.
fn gated(
    effects: Effects,
) -> (impl Fn(Request<Body>) -> Gated + Clone + Send + Sync + 'static, Arc<Notify>, Arc<Notify>) {
    let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (signal, gate) = (entered.clone(), release.clone());
    let handler = move |request| {
        let (effects, signal, gate) = (effects.clone(), signal.clone(), gate.clone());
        Box::pin(async move {
            signal.notify_one();
            gate.notified().await;
            created(effects)(request).await
        }) as Gated
    };
    (handler, entered, release)
}

#[tokio::test]
async fn a_duplicate_while_the_first_runs_is_409_with_retry_after() {
    let (store, _) = store();
    let effects = Effects::default();
    let (handler, entered, release) = gated(effects.clone());
    let svc = service(layer(store.asynchronous(), Operation::named("op")), handler);
    let first = tokio::spawn({
        let svc = svc.clone();
        async move { send(&svc, post("/things", Some("k-1"), BODY)).await }
    });
    entered.notified().await;
    let duplicate = send(&svc, post("/things", Some("k-1"), BODY)).await;
    assert_eq!(duplicate.status, StatusCode::CONFLICT);
    assert_eq!(duplicate.problem(), "urn:idemdb:problem:in-progress");
    assert_eq!(duplicate.headers["retry-after"], "1", "the lease has a minute left; the default cap is 1 s");
    // A different request under the busy key is still a conflict of another kind.
    assert_eq!(
        send(&svc, post("/things", Some("k-1"), r#"{"amount":"1"}"#)).await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    release.notify_one();
    assert_eq!(first.await.unwrap().status, StatusCode::CREATED);
    assert!(send(&svc, post("/things", Some("k-1"), BODY)).await.replayed());
    assert_eq!(effects.count(), 1);
}

#[tokio::test]
async fn a_key_whose_holder_is_gone_gets_the_lease_s_remaining_time_as_retry_after() {
    let (store, clock) = store();
    let effects = Effects::default();
    let (handler, entered, release) = gated(effects.clone());
    // The first layer stands for a process that died holding the key: the second layer (the
    // restarted service over the same store) holds nothing.
    let before = service(layer(store.asynchronous(), Operation::named("op")), handler);
    let first = tokio::spawn({
        let svc = before.clone();
        async move { send(&svc, post("/things", Some("k-1"), BODY)).await }
    });
    entered.notified().await;
    let after = service(layer(store.asynchronous(), Operation::named("op")), created(effects.clone()));
    let refused = send(&after, post("/things", Some("k-1"), BODY)).await;
    assert_eq!(refused.problem(), "urn:idemdb:problem:in-progress");
    assert_eq!(refused.headers["retry-after"], "60", "nothing here will finish it before its lease ends");
    clock.advance(Duration::from_secs(20));
    assert_eq!(send(&after, post("/things", Some("k-1"), BODY)).await.headers["retry-after"], "40");
    // In a fleet the holder may be working in another instance: the cap applies.
    let fleet = service(layer(store.asynchronous(), Operation::named("op")).shared_store(), created(effects.clone()));
    assert_eq!(send(&fleet, post("/things", Some("k-1"), BODY)).await.headers["retry-after"], "1");
    // The layer that holds it caps its own duplicates.
    assert_eq!(send(&before, post("/things", Some("k-1"), BODY)).await.headers["retry-after"], "1");
    release.notify_one();
    assert_eq!(first.await.unwrap().status, StatusCode::CREATED);
    assert_eq!(effects.count(), 1, "no duplicate ran");
}

/// The process that reserved a key enqueued its effect and died while the effect was being
/// dispatched: the store holds the record until the claim expires **plus one lease** (the time
/// the next dispatch may take), but the answer comes with that next dispatch. Old code told the
/// restarted service's clients the whole 120 s; the answer came at about 60 s.
#[tokio::test]
async fn a_gone_holder_s_key_waiting_for_its_effect_gets_the_time_to_the_next_dispatch_as_retry_after() {
    let (store, clock) = store();
    let effects = Effects::default();
    let (handler, entered, release) = gated(effects.clone());
    let charge = idemdb::EffectName::new("charge").unwrap();
    let op = || Operation::named("op").enqueue_on_reserve(charge.clone(), 1, |_, _| Some(b"charge".to_vec()));
    let before = service(layer(store.asynchronous(), op()), handler);
    let first = tokio::spawn({
        let svc = before.clone();
        async move { send(&svc, post("/things", Some("k-1"), BODY)).await }
    });
    entered.notified().await;
    // The dispatcher claims the charge (its claim lasts one lease, 60 s): the record is held
    // until the claim has expired and a new dispatch has had a lease to finish, 120 s.
    assert_eq!(store.claim_effects(1).unwrap().len(), 1);
    let restarted = layer(store.asynchronous(), op());
    let after = service(restarted.clone(), created(effects.clone()));
    let refused = send(&after, post("/things", Some("k-1"), BODY)).await;
    assert_eq!(refused.problem(), "urn:idemdb:problem:in-progress");
    assert_eq!(refused.headers["retry-after"], "60", "the claim expires in 60 s and the next dispatch answers");
    clock.advance(Duration::from_secs(20));
    assert_eq!(send(&after, post("/things", Some("k-1"), BODY)).await.headers["retry-after"], "40");
    // The restarted service's dispatcher holds the key while it sends the effect again: the
    // answer is a dispatch away, so the cap applies.
    let scope = Scope::new("acme", "op").unwrap();
    let dispatching = restarted.held_keys().hold(store.key_hash(&scope, &IdempotencyKey::new("k-1").unwrap()));
    assert_eq!(send(&after, post("/things", Some("k-1"), BODY)).await.headers["retry-after"], "1");
    drop(dispatching);
    release.notify_one();
    assert_eq!(first.await.unwrap().status, StatusCode::CREATED);
    assert_eq!(effects.count(), 1, "no duplicate ran");
}

#[tokio::test]
async fn with_a_bounded_wait_the_duplicate_gets_the_first_response() {
    let (store, _) = store();
    let effects = Effects::default();
    let (handler, entered, release) = gated(effects.clone());
    let op = Operation::named("op").wait_for_first(Duration::from_secs(30));
    let svc = service(layer(store.asynchronous(), op), handler);
    let first = tokio::spawn({
        let svc = svc.clone();
        async move { send(&svc, post("/things", Some("k-1"), BODY)).await }
    });
    entered.notified().await;
    let duplicate = tokio::spawn({
        let svc = svc.clone();
        async move { send(&svc, post("/things", Some("k-1"), BODY)).await }
    });
    // The duplicate is waiting (it cannot have an answer before the first finishes).
    tokio::task::yield_now().await;
    assert!(!duplicate.is_finished());
    release.notify_one();
    let first = first.await.unwrap();
    let duplicate = duplicate.await.unwrap();
    assert!(duplicate.replayed(), "{duplicate:?}");
    assert_eq!(duplicate.body, first.body);
    assert_eq!(effects.count(), 1);
}

#[tokio::test]
async fn the_same_key_with_another_request_is_422_and_runs_nothing() {
    let (store, _) = store();
    let effects = Effects::default();
    let svc = service(layer(store.asynchronous(), Operation::named("op")), created(effects.clone()));
    assert_eq!(send(&svc, post("/things", Some("k-1"), BODY)).await.status, StatusCode::CREATED);
    let other = send(&svc, post("/things", Some("k-1"), r#"{"amount":"99.00","currency":"BRL"}"#)).await;
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(other.problem(), "urn:idemdb:problem:key-mismatch");
    // Another path is another request too.
    assert_eq!(send(&svc, post("/others", Some("k-1"), BODY)).await.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(effects.count(), 1);
}

#[tokio::test]
async fn an_expired_lease_makes_the_key_uncertain_and_refused_with_409() {
    let (store, clock) = store();
    let effects = Effects::default();
    let svc = service(layer(store.asynchronous(), Operation::named("op")), created(effects.clone()));
    // An attempt that took the lease and died without a word (a crashed process).
    let fp = Operation::named("op")
        .fingerprint(&Method::POST, "/things", &post("/things", None, BODY).headers().clone(), BODY.as_bytes())
        .unwrap();
    let scope = Scope::new("acme", "op").unwrap();
    let key = IdempotencyKey::new("k-1").unwrap();
    assert!(matches!(store.reserve(Reserve::new(&scope, &key, &fp)).unwrap(), Reservation::Acquired(_)));
    clock.advance(Duration::from_secs(61));
    for _ in 0..2 {
        let answer = send(&svc, post("/things", Some("k-1"), BODY)).await;
        assert_eq!(answer.status, StatusCode::CONFLICT);
        assert_eq!(answer.problem(), "urn:idemdb:problem:needs-reconciliation");
        assert!(answer.headers.get("retry-after").is_none(), "waiting does not help; reconciling does");
    }
    assert_eq!(effects.count(), 0);
    assert_eq!(record(&store, "op", "k-1").unwrap().state.kind(), StateKind::Uncertain);
}

#[tokio::test]
async fn a_purged_response_is_410_expired_and_never_runs_again() {
    let (store, clock) = store();
    let effects = Effects::default();
    let svc = service(layer(store.asynchronous(), Operation::named("op")), created(effects.clone()));
    assert_eq!(send(&svc, post("/things", Some("k-1"), BODY)).await.status, StatusCode::CREATED);
    clock.advance(Duration::from_secs(31 * 24 * 3600));
    store.purge_expired(100).unwrap();
    assert_eq!(record(&store, "op", "k-1").unwrap().state.kind(), StateKind::Tombstone);
    let answer = send(&svc, post("/things", Some("k-1"), BODY)).await;
    assert_eq!(answer.status, StatusCode::GONE);
    assert_eq!(answer.problem(), "urn:idemdb:problem:expired");
    assert_eq!(effects.count(), 1);
}

#[tokio::test]
async fn a_store_that_fails_is_503_with_retry_after_and_runs_nothing() {
    let (store, _) = store();
    let watched = Watched::new(store.clone());
    let effects = Effects::default();
    let svc = service(layer(watched.clone(), Operation::named("op")), created(effects.clone()));
    watched.down.store(true, Ordering::SeqCst);
    let answer = send(&svc, post("/things", Some("k-1"), BODY)).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.problem(), "urn:idemdb:problem:storage");
    assert_eq!(answer.headers["retry-after"], "1");
    assert_eq!(effects.count(), 0);
    watched.down.store(false, Ordering::SeqCst);
    assert_eq!(send(&svc, post("/things", Some("k-1"), BODY)).await.status, StatusCode::CREATED);
    assert_eq!(effects.count(), 1);
}

#[tokio::test]
async fn a_stored_result_that_is_not_a_response_is_500_corrupt() {
    let (store, _) = store();
    let effects = Effects::default();
    let svc = service(layer(store.asynchronous(), Operation::named("op")), created(effects.clone()));
    let request = post("/things", None, BODY);
    let fp = Operation::named("op").fingerprint(&Method::POST, "/things", request.headers(), BODY.as_bytes()).unwrap();
    let (scope, key) = (Scope::new("acme", "op").unwrap(), IdempotencyKey::new("k-1").unwrap());
    let Reservation::Acquired(lease) = store.reserve(Reserve::new(&scope, &key, &fp)).unwrap() else { panic!() };
    store.complete(&lease, b"raw bytes from elsewhere".to_vec()).unwrap();
    let answer = send(&svc, post("/things", Some("k-1"), BODY)).await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(answer.problem(), "urn:idemdb:problem:corrupt");
    assert_eq!(effects.count(), 0);
}

#[tokio::test]
async fn problem_types_can_live_under_the_service_own_base() {
    let (store, _) = store();
    let layer = layer(store.asynchronous(), Operation::named("op"))
        .problem_types(idemdb_http::ProblemTypes::base("https://api.example.com/problems/"));
    let svc = service(layer, created(Effects::default()));
    let answer = send(&svc, post("/things", None, BODY)).await;
    assert_eq!(answer.problem(), "https://api.example.com/problems/key-missing");
}
