//! The running example over real HTTP: retries, concurrency, conflicts, SIGKILL and the Rust
//! client through a lossy proxy. Effects are counted in the ledger (payments and provider
//! calls), not only in the answers.

use std::time::Duration;

use idemdb::{Scope, Store};
use idemdb_http::client::{IdempotentClient, IntentRequest, Retry};

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_retries_replay_the_first_answer_and_make_one_effect() {
    sequential_retries(&Db::redb()).await;
}

pub async fn sequential_retries(db: &Db) {
    let server = db.start(&[]);
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

pub async fn effects_of(http: &reqwest::Client, url: &str, tenant: &str, key: &str) -> (usize, u64) {
    let effects = effects(http, url, tenant).await;
    (effects.payments_of(key), effects.calls_of(key))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_concurrent_requests_with_one_key_make_one_201_and_one_effect() {
    thirty_two_concurrent_requests(&Db::redb()).await;
}

pub async fn thirty_two_concurrent_requests(db: &Db) {
    let server = db.start(&["--provider-latency-ms", "300"]);
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
    another_amount(&Db::redb()).await;
}

pub async fn another_amount(db: &Db) {
    let server = db.start(&[]);
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
async fn sigkill_mid_requests_then_restart_gives_every_key_one_effect_and_a_201_without_an_operator() {
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
    // Let every lease and every dispatch claim of the killed process run out (1 s): the new
    // process's dispatcher sends what was in flight again, with the same provider key, and the
    // attempts that never reached the outbox are provably effect-free (the payment's policy is
    // `takeover-if-no-effect`), so their retries run. No key needs an operator.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (mut replayed, mut fresh, mut resent) = (0, 0, 0);
    for key in &keys {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let reply = loop {
            let reply = pay(&http, &server.url, "acme", key, &payment("10.50")).await.unwrap();
            // In progress: a retry that took over is running. Needs reconciliation: the attempt
            // had enqueued its charge, which the new dispatcher is settling.
            let waiting = matches!(
                reply.problem.as_deref(),
                Some("urn:idemdb:problem:in-progress" | "urn:idemdb:problem:needs-reconciliation")
            );
            if !waiting || std::time::Instant::now() > deadline {
                break reply;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let effects = effects(&http, &server.url, "acme").await;
        let (payments, charges, calls) = (effects.payments_of(key), effects.charges_of(key), effects.calls_of(key));
        assert!(payments <= 1 && charges.len() <= 1, "{key}: {payments} payments, {charges:?} charges");
        match (reply.status, reply.replayed) {
            (201, replay) => {
                if replay {
                    replayed += 1
                } else {
                    fresh += 1
                }
                assert_eq!(payments, 1, "{key}");
                assert_eq!(effects.payment_charges_of(key), charges, "{key}: the payment row names the one charge");
                // A dispatch whose answer the kill lost is sent again with the same provider
                // key: the provider is asked twice and charges once.
                assert!((1..=2).contains(&calls), "{key}: {calls} provider calls");
                resent += usize::from(calls == 2);
            }
            other => panic!("{key}: no final 201 without an operator: {other:?} {reply:?}"),
        }
    }
    assert!(replayed >= 1, "some payments finished before the kill, or after it through the outbox");
    eprintln!("after the kill: {replayed} replayed, {fresh} run fresh, {resent} sent twice");
    assert_eq!(replayed + fresh, keys.len());
    let queue = reconciliation(&http, &server.url, "acme").await;
    assert!(queue.is_empty(), "nothing waits for an operator: {queue:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_died_right_after_the_reservation_left_its_charge_in_the_outbox_for_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let http = http();
    let body = r#"{"amount":"7.00","currency":"BRL","destination":"acct_doomed"}"#;
    // The first process aborts with the key reserved: its charge went into the outbox in the
    // same commit, so there is no window with a record in progress and nothing enqueued.
    let doomed = Server::start(dir.path(), &["--lease-ttl-secs", "1", "--crash-after-reserve-to", "acct_doomed"]);
    assert!(pay(&http, &doomed.url, "acme", "window-1", body).await.is_err(), "the process died mid-request");
    drop(doomed);
    // The next process dispatches the charge it finds in the outbox, which completes the
    // record: the retry replays that payment (it never runs the handler again).
    let server = Server::start(dir.path(), &["--lease-ttl-secs", "1"]);
    let mut retry = pay(&http, &server.url, "acme", "window-1", body).await.unwrap();
    for _ in 0..50 {
        if retry.status == 201 {
            break;
        }
        assert_eq!(retry.problem.as_deref(), Some("urn:idemdb:problem:in-progress"), "{retry:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        retry = pay(&http, &server.url, "acme", "window-1", body).await.unwrap();
    }
    assert_eq!((retry.status, retry.replayed), (201, true), "{retry:?}");
    let again = pay(&http, &server.url, "acme", "window-1", body).await.unwrap();
    assert_eq!((again.status, again.replayed, &again.body), (201, true, &retry.body));
    let effects = effects(&http, &server.url, "acme").await;
    assert_eq!((effects.payments_of("window-1"), effects.charges_of("window-1").len()), (1, 1));
    assert_eq!(effects.calls_of("window-1"), 1, "one provider call");
    assert!(reconciliation(&http, &server.url, "acme").await.is_empty(), "no operator needed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_provider_answer_waits_in_the_reconciliation_queue_and_is_never_charged_again() {
    lost_provider_answer(&Db::redb()).await;
}

pub async fn lost_provider_answer(db: &Db) {
    // The reconciler is held off here (one round an hour) so the queue can be looked at.
    let faults = ["--provider-lose-responses-to", "acct_lost", "--reconcile-interval-secs", "3600"];
    let server = db.start(&faults);
    let http = http();
    let lost = r#"{"amount":"20.00","currency":"BRL","destination":"acct_lost"}"#;
    let first = pay(&http, &server.url, "acme", "lost-1", lost).await.unwrap();
    assert_eq!(
        (first.status, first.problem.as_deref()),
        (502, Some("urn:payments-example:problem:provider-uncertain"))
    );
    assert_eq!(pay(&http, &server.url, "acme", "ok-1", &payment("1.00")).await.unwrap().status, 201);
    // A retry is refused, never charged: the provider did charge once, and was asked once.
    for _ in 0..3 {
        let retry = pay(&http, &server.url, "acme", "lost-1", lost).await.unwrap();
        assert_eq!(retry.status, 409);
        assert_eq!(retry.problem.as_deref(), Some("urn:idemdb:problem:needs-reconciliation"));
    }
    // Several dispatcher rounds later, still one call.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let effects = effects(&http, &server.url, "acme").await;
    assert_eq!(
        (effects.payments_of("lost-1"), effects.charges_of("lost-1").len(), effects.calls_of("lost-1")),
        (0, 1, 1)
    );
    assert_eq!((effects.payments_of("ok-1"), effects.calls_of("ok-1")), (1, 1));

    let queue = reconciliation(&http, &server.url, "acme").await;
    assert_eq!(queue.len(), 1, "the record follows its effect and is listed once, as the effect: {queue:?}");
    let entry = &queue[0];
    assert_eq!(entry["kind"], "effect");
    assert_eq!(entry["idempotency_key"], "lost-1");
    assert_eq!(entry["provider_key"], "lost-1:charge-v1");
    assert_eq!(entry["effect"], "charge");
    assert_eq!((entry["state"].as_str(), entry["cause"].as_str()), (Some("uncertain"), Some("reported")));
    assert_eq!(entry["dispatches"], 1);
    assert!(entry["last_reason"].as_str().unwrap().contains("connection closed"), "{entry}");
    assert!(entry["since_ms"].as_u64().unwrap() >= entry["first_sent_at_ms"].as_u64().unwrap());
    // Another tenant sees none of it; no bearer, no queue.
    assert!(reconciliation(&http, &server.url, "globex").await.is_empty());
    let anonymous = http.get(format!("{}/v1/reconciliation", server.url)).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);

    // After a restart the item is still uncertain and still not sent again.
    drop(server);
    let server = db.start(&faults);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(reconciliation(&http, &server.url, "acme").await.len(), 1);
    assert_eq!(effects_of(&http, &server.url, "acme", "lost-1").await, (0, 1));

    // With the reconciler running, the provider's lookup by provider key decides it: the charge
    // was made, so the payment row is written and the key completes with its 201 — no person,
    // no second charge.
    drop(server);
    let server = db.start(&["--provider-lose-responses-to", "acct_lost", "--reconcile-interval-secs", "1"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !reconciliation(&http, &server.url, "acme").await.is_empty() {
        assert!(std::time::Instant::now() < deadline, "the reconciler decided the lost answer");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let retry = pay(&http, &server.url, "acme", "lost-1", lost).await.unwrap();
    assert_eq!((retry.status, retry.replayed), (201, true), "{retry:?}");
    let paid: serde_json::Value = serde_json::from_slice(&retry.body).unwrap();
    assert_eq!(paid["provider_key"], "lost-1:charge-v1");
    let after = crate::support::effects(&http, &server.url, "acme").await;
    assert_eq!(
        (after.payments_of("lost-1"), after.charges_of("lost-1").len(), after.calls_of("lost-1")),
        (1, 1, 1),
        "one payment row, one charge, one provider call"
    );
    assert_eq!(after.payment_charges_of("lost-1"), after.charges_of("lost-1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_dedupe_delivery_ids_and_apply_only_newer_versions_of_an_object() {
    webhooks(&Db::redb()).await;
}

pub async fn webhooks(db: &Db) {
    let server = db.start(&[]);
    let http = http();
    let event = |id: &str, version: u64, state: &str| {
        format!(r#"{{"delivery_id":"{id}","object_id":"ch_1","version":{version},"state":"{state}"}}"#)
    };
    let object = |answer: &serde_json::Value| {
        let o = &answer["object"];
        (
            o["version"].as_u64().unwrap(),
            o["state"].as_str().unwrap().to_string(),
            o["applied_delivery_id"].as_str().unwrap().to_string(),
        )
    };

    let (status, v2) = webhook(&http, &server.url, &event("evt_2", 2, "succeeded")).await;
    assert_eq!((status, v2["outcome"].as_str()), (200, Some("applied")), "{v2}");
    assert_eq!(object(&v2), (2, "succeeded".into(), "evt_2".into()));
    // The same delivery again, spelled differently: the earlier outcome, nothing changes.
    let respelled = r#"{ "state": "succeeded", "version": 2, "object_id": "ch_1", "delivery_id": "evt_2" }"#;
    let (status, again) = webhook(&http, &server.url, respelled).await;
    assert_eq!(
        (status, again["outcome"].as_str(), again["earlier"]["outcome"].as_str()),
        (200, Some("duplicate"), Some("applied"))
    );
    assert_eq!(object(&again), (2, "succeeded".into(), "evt_2".into()));
    // An older version under another delivery id, arriving late: recorded, not applied.
    let (status, old) = webhook(&http, &server.url, &event("evt_1", 1, "pending")).await;
    assert_eq!((status, old["outcome"].as_str(), old["current_version"].as_u64()), (200, Some("stale"), Some(2)));
    assert_eq!(object(&old), (2, "succeeded".into(), "evt_2".into()));
    // The same version under another id is not newer either.
    let (_, same) = webhook(&http, &server.url, &event("evt_2b", 2, "refunded")).await;
    assert_eq!(same["outcome"], "stale");
    // A newer one applies.
    let (_, v3) = webhook(&http, &server.url, &event("evt_3", 3, "refunded")).await;
    assert_eq!(v3["outcome"], "applied");
    assert_eq!(object(&v3), (3, "refunded".into(), "evt_3".into()));
    // A redelivery of the stale one still says what it said first.
    let (_, old_again) = webhook(&http, &server.url, &event("evt_1", 1, "pending")).await;
    assert_eq!(
        (old_again["outcome"].as_str(), old_again["earlier"]["outcome"].as_str()),
        (Some("duplicate"), Some("stale"))
    );
    assert_eq!(old_again["earlier"]["current_version"], 2);
    // The same delivery id with another body is refused, and changes nothing.
    let (status, mismatch) = webhook(&http, &server.url, &event("evt_2", 9, "disputed")).await;
    assert_eq!((status, mismatch["type"].as_str()), (422, Some("urn:payments-example:problem:delivery-mismatch")));
    // Bad bodies: typed 400s; an oversized one: 413.
    for bad in [
        "not json",
        r#"{"delivery_id":"evt_4","object_id":"ch_1","state":"x"}"#,
        r#"{"delivery_id":"","object_id":"ch_1","version":4,"state":"x"}"#,
    ] {
        let (status, problem) = webhook(&http, &server.url, bad).await;
        assert_eq!(
            (status, problem["type"].as_str()),
            (400, Some("urn:payments-example:problem:invalid-webhook")),
            "{bad}"
        );
    }
    let huge = format!(
        r#"{{"delivery_id":"evt_5","object_id":"ch_1","version":5,"state":"x","pad":"{}"}}"#,
        "a".repeat(20_000)
    );
    assert_eq!(webhook(&http, &server.url, &huge).await.0, 413);

    // Deliveries and objects are durable: after a restart, a redelivery is still a duplicate.
    drop(server);
    let server = db.start(&[]);
    let (_, after) = webhook(&http, &server.url, &event("evt_3", 3, "refunded")).await;
    assert_eq!((after["outcome"].as_str(), after["earlier"]["outcome"].as_str()), (Some("duplicate"), Some("applied")));
    assert_eq!(object(&after), (3, "refunded".into(), "evt_3".into()));
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
    published_policy(&Db::redb()).await;
}

pub async fn published_policy(db: &Db) {
    let server = db.start(&["--lease-ttl-secs", "7"]);
    let response = http().get(format!("{}/v1/idempotency-policy", server.url)).send().await.unwrap();
    let policy: serde_json::Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    let operation = &policy["operations"][0];
    assert_eq!(operation["path"], "/v1/payments");
    assert_eq!(operation["lease_ttl_seconds"], 7);
    assert_eq!(operation["response_ttl_seconds"], 30 * 24 * 3600);
    assert_eq!(operation["tombstone_ttl_seconds"], 365 * 24 * 3600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconciler_releases_an_uncertain_payment_that_never_enqueued_its_charge() {
    use idemdb::{ExpiredLease, Failure, Fingerprint, IdempotencyKey, Policy, Reservation, Reserve};
    use payments_example::{Provider, RedbBackend, payment_operation_name, router};
    let dir = tempfile::tempdir().unwrap();
    let policy = Policy::default().with_expired_lease(ExpiredLease::TakeoverIfNoEffect);
    let store = Store::builder().policy(payment_operation_name(), policy).open(dir.path().join("s.idemdb")).unwrap();
    let provider = Provider::open(&dir.path().join("provider.redb"), Duration::ZERO).unwrap();
    let (_router, dispatcher) = router(RedbBackend::new(store.clone()), provider).unwrap();
    let scope = Scope::new("acme", payment_operation_name()).unwrap();
    let (key, fp) = (IdempotencyKey::new("gave-up").unwrap(), Fingerprint::from_bytes([7; 32]));
    // The handler could not tell whether its charge was enqueued and marked the key uncertain;
    // in fact nothing reached the outbox.
    let Reservation::Acquired(lease) = store.reserve(Reserve::new(&scope, &key, &fp)).unwrap() else {
        panic!("a new key")
    };
    store.fail(&lease, Failure::Uncertain).unwrap();
    assert!(matches!(store.reserve(Reserve::new(&scope, &key, &fp)).unwrap(), Reservation::NeedsReconciliation { .. }));
    let round = dispatcher.reconciler().round().await;
    assert_eq!((round.released, round.confirmed, round.not_found, round.left), (1, 0, 0, 0));
    let Reservation::Acquired(again) = store.reserve(Reserve::new(&scope, &key, &fp)).unwrap() else {
        panic!("the retry runs")
    };
    assert_eq!(again.attempt(), 2);
    // Nothing is left to decide.
    assert_eq!(dispatcher.reconciler().round().await, idemdb_http::reconcile::Round::default());
}

/// Pays `key` through `router` in this process; the status.
async fn pay_in_process(router: &axum::Router, key: &str) -> u16 {
    use tower::ServiceExt;
    let request = axum::http::Request::post(payments_example::PAYMENTS_PATH)
        .header("authorization", "Bearer acme")
        .header("idempotency-key", format!("\"{key}\""))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(payment("10.00")))
        .unwrap();
    router.clone().oneshot(request).await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_payment_row_rides_the_journal_and_a_crash_copy_replays_it_without_registration() {
    use payments_example::{Backend, Provider, RedbBackend, payments, router};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.idemdb");
    let store = Store::builder().open(&path).unwrap();
    let (router, dispatcher) =
        router(RedbBackend::new(store.clone()), Provider::in_memory(Duration::ZERO).unwrap()).unwrap();
    let dispatching = tokio::spawn(dispatcher.run());
    let before = store.journal_stats().expect("a file store journals");
    let started = std::time::Instant::now();
    for n in 0..3 {
        assert_eq!(pay_in_process(&router, &format!("k-{n}")).await, 201);
    }
    let after = store.journal_stats().unwrap();
    // Only the periodic checkpoint (every CHECKPOINT_MS) could add one.
    if started.elapsed() < Duration::from_millis(idemdb::CHECKPOINT_MS - 1_000) {
        assert_eq!(after.checkpoints - before.checkpoints, 0, "a payment's commits are journal appends");
    }
    assert!(after.appends >= before.appends + 6, "reservations and payment rows ride the journal");
    // A crash: the store file and its journal as they are now, the service still running.
    let copy = dir.path().join("crashed.idemdb");
    std::fs::copy(&path, &copy).unwrap();
    std::fs::copy(dir.path().join("s.idemdb-journal"), dir.path().join("crashed.idemdb-journal")).unwrap();
    dispatching.abort();
    let _ = dispatching.await;
    drop((router, store));
    // Any open replays it, an operator's tool included: row tables need no registration.
    let reopened = RedbBackend::new(Store::builder().open(&copy).unwrap());
    assert_eq!(payments(reopened.store(), "acme").await.unwrap().len(), 3, "0 lost");
}
