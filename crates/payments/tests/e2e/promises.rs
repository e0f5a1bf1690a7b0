//! Every retry ends in a final answer, at the service's edges: a store that cannot be read
//! right after the reservation, a provider slower than the lease, operators acting on records
//! whose charge is unresolved, and a shutdown with requests in flight. Each check counts the
//! provider's calls and charges and the ledger's payments, not only the answers.

use std::time::{Duration, Instant};

use crate::support::*;

/// Retries `key` (a second apart) until it answers 201 or `within` has passed; every answer.
async fn retry_until_paid(http: &reqwest::Client, url: &str, key: &str, body: &str, within: Duration) -> Vec<Reply> {
    let until = Instant::now() + within;
    let mut replies = Vec::new();
    loop {
        let reply = pay(http, url, "acme", key, body).await.unwrap();
        let paid = reply.status == 201;
        replies.push(reply);
        if paid || Instant::now() >= until {
            return replies;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_blip_after_the_reservation_never_releases_a_key_whose_charge_is_enqueued() {
    store_blip_after_the_reservation(&Db::redb()).await;
}

/// The handler's read of the charge enqueued with the reservation fails: three times (a blip
/// of about 140 ms: the handler reads through it and answers 201), or for longer than it keeps
/// reading (an outage: 503 `store-unavailable`, and the key kept, marked uncertain). Either
/// way the dispatcher charges once, the payment is written once, and every retry ends at the
/// payment's 201. (A failed read used to release the key: 503 "could not be enqueued", the
/// charge made all the same, and the key's retries refused for good.)
pub async fn store_blip_after_the_reservation(db: &Db) {
    let server = db.start(&[
        "--lease-ttl-secs",
        "5",
        "--reconcile-interval-secs",
        "1",
        "--fail-reads-after-reserve-to",
        "acct_blip:3",
    ]);
    let http = http();
    let blip = r#"{"amount":"12.00","currency":"BRL","destination":"acct_blip"}"#;
    let first = pay(&http, &server.url, "acme", "blip-1", blip).await.unwrap();
    assert_eq!((first.status, first.replayed), (201, false), "read through the blip: {first:?}");
    let retry = pay(&http, &server.url, "acme", "blip-1", blip).await.unwrap();
    assert_eq!((retry.status, retry.replayed, &retry.body), (201, true, &first.body));
    drop(server);

    let server = db.start(&[
        "--lease-ttl-secs",
        "5",
        "--reconcile-interval-secs",
        "1",
        "--fail-reads-after-reserve-to",
        "acct_outage:1000",
    ]);
    let outage = r#"{"amount":"13.00","currency":"BRL","destination":"acct_outage"}"#;
    let first = pay(&http, &server.url, "acme", "outage-1", outage).await.unwrap();
    assert_eq!(
        (first.status, first.problem.as_deref()),
        (503, Some("urn:payments-example:problem:store-unavailable")),
        "an unreadable store is not a release: {first:?}"
    );
    let replies = retry_until_paid(&http, &server.url, "outage-1", outage, Duration::from_secs(20)).await;
    let last = replies.last().unwrap();
    assert_eq!((last.status, last.replayed), (201, true), "the dispatcher's payment is replayed: {replies:?}");
    let effects = effects(&http, &server.url, "acme").await;
    for key in ["blip-1", "outage-1"] {
        assert_eq!(
            (effects.payments_of(key), effects.charges_of(key).len(), effects.calls_of(key)),
            (1, 1, 1),
            "{key}: one payment, one charge, one call"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_slower_than_the_lease_is_called_once_and_the_key_reaches_its_201() {
    slow_provider(&Db::redb()).await;
}

/// A provider that takes 2.5 s under a 2 s lease: the dispatcher's call has a deadline below
/// the lease (1.5 s), so the charge is reported unknown instead of being sent again by the
/// next claim; the reconciler then asks the provider (whose charge landed meanwhile) and
/// settles it. One call, one charge, one payment, and the key's retries end at its 201. (The
/// call used to outlive its claim: every claim sent the charge again, each report was refused
/// as stale, and the key answered `409 needs-reconciliation` for good.)
pub async fn slow_provider(db: &Db) {
    let server =
        db.start(&["--lease-ttl-secs", "2", "--provider-latency-ms", "2500", "--reconcile-interval-secs", "4"]);
    let http = http();
    let body = payment("14.00");
    let replies = retry_until_paid(&http, &server.url, "slow-1", &body, Duration::from_secs(25)).await;
    let last = replies.last().unwrap();
    assert_eq!(last.status, 201, "a final answer: {:?}", statuses(&replies));
    // Several dispatcher polls and reconciler rounds later, still one call.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let effects = effects(&http, &server.url, "acme").await;
    assert_eq!(
        (effects.payments_of("slow-1"), effects.charges_of("slow-1").len(), effects.calls_of("slow-1")),
        (1, 1, 1),
        "one payment, one charge, one call: {:?}",
        statuses(&replies)
    );
}

fn statuses(replies: &[Reply]) -> Vec<(u16, Option<&str>)> {
    replies.iter().map(|reply| (reply.status, reply.problem.as_deref())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_payments_in_progress_finish_with_their_201() {
    sigterm_drains(&Db::redb()).await;
}

/// SIGTERM while six payments wait for a provider that takes 1.5 s: the server stops
/// accepting, the dispatcher finishes their charges, each client gets its 201, and the process
/// exits 0. After a restart each retry replays its payment: one call, one charge, one payment
/// per key. (SIGTERM used to drop the requests in flight: each client saw its connection
/// closed, and its retry waited.)
pub async fn sigterm_drains(db: &Db) {
    let server = db.start(&["--provider-latency-ms", "1500"]);
    let http = http();
    let keys: Vec<String> = (0..6).map(|i| format!("drain-{i}")).collect();
    let requests: Vec<_> = keys
        .iter()
        .map(|key| {
            let (http, url, key) = (http.clone(), server.url.clone(), key.clone());
            tokio::spawn(async move { pay(&http, &url, "acme", &key, &payment("15.00")).await })
        })
        .collect();
    // The payments are reserved and their charges are at the provider.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, stderr) = tokio::task::spawn_blocking(move || server.stop()).await.unwrap();
    assert!(status.success(), "a clean exit: {status:?} {stderr}");
    for (key, request) in keys.iter().zip(requests) {
        let reply = request.await.unwrap();
        let reply = reply.unwrap_or_else(|error| panic!("{key}: the request in flight was dropped: {error}"));
        assert_eq!((reply.status, reply.replayed), (201, false), "{key}: {reply:?}");
    }
    let server = db.start(&[]);
    for key in &keys {
        let retry = pay(&http, &server.url, "acme", key, &payment("15.00")).await.unwrap();
        assert_eq!((retry.status, retry.replayed), (201, true), "{key}: {retry:?}");
    }
    let effects = effects(&http, &server.url, "acme").await;
    for key in &keys {
        assert_eq!(
            (effects.payments_of(key), effects.charges_of(key).len(), effects.calls_of(key)),
            (1, 1, 1),
            "{key}: one payment, one charge, one call"
        );
    }
}

/// A payment still waiting when the drain limit passes is cut, and its charge, in flight at
/// the provider, is reported unknown before the process exits (not left claimed until its lease
/// runs out): after a restart the reconciler asks the provider at once, and the key's retries
/// end at its 201 within seconds, with one charge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_cut_at_the_drain_limit_reaches_its_201_soon_after_a_restart() {
    let db = Db::redb();
    let server = db.start(&["--provider-latency-ms", "2500", "--drain-secs", "1"]);
    let http = http();
    let url = server.url.clone();
    let request = {
        let http = http.clone();
        tokio::spawn(async move { pay(&http, &url, "acme", "cut-1", &payment("16.00")).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, stderr) = tokio::task::spawn_blocking(move || server.stop()).await.unwrap();
    assert!(status.success(), "{status:?} {stderr}");
    assert!(stderr.contains("were cut") && stderr.contains("1 charge(s) in flight"), "said: {stderr}");
    assert!(request.await.unwrap().is_err(), "the request outlived the drain and was cut");
    let server = db.start(&["--provider-latency-ms", "500", "--reconcile-interval-secs", "1"]);
    let started = Instant::now();
    let replies = retry_until_paid(&http, &server.url, "cut-1", &payment("16.00"), Duration::from_secs(20)).await;
    assert_eq!(replies.last().unwrap().status, 201, "{:?}", statuses(&replies));
    assert!(started.elapsed() < Duration::from_secs(15), "no lease (60 s) to wait for: {:?}", started.elapsed());
    let effects = effects(&http, &server.url, "acme").await;
    assert_eq!((effects.payments_of("cut-1"), effects.charges_of("cut-1").len()), (1, 1));
}
