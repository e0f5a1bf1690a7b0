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
    let server = db.start(&["--lease-ttl-secs", "2", "--provider-latency-ms", "2500", "--reconcile-interval-secs", "4"]);
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
