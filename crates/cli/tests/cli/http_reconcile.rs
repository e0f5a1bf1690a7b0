//! `reconcile` on a store the HTTP layer wrote: the payments example's charge whose provider
//! answer was lost, resolved from the shell, then retried through the layer.

use std::path::Path;
use std::time::Duration;

use idemdb::{ExpiredLease, Policy, Store};
use payments_example::{Provider, RedbLedger, payment_operation_name};
use serde_json::Value;

use super::{arg, idemdb};

/// Runs the payments example (router and dispatcher, no reconciler: what is uncertain stays
/// so) over `dir` on a runtime of its own for the length of `client`, then drops the runtime,
/// and with it every handle on the store file.
fn with_service<T>(dir: &Path, client: impl AsyncFnOnce(String) -> T) -> T {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(async {
        let policy = Policy::default()
            .with_lease_ttl(Duration::from_secs(60))
            .with_expired_lease(ExpiredLease::TakeoverIfNoEffect);
        let store =
            Store::builder().policy(payment_operation_name(), policy).open(dir.join("idemdb.redb")).expect("store");
        let provider = Provider::open(&dir.join("provider.redb"), Duration::ZERO)
            .expect("provider")
            .lose_responses_to("acct_lost");
        let (router, dispatcher) = payments_example::router(RedbLedger::new(store), provider).expect("router");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(dispatcher.run());
        tokio::spawn(async move { axum::serve(listener, router).await });
        client(url).await
    })
}

pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) replayed: bool,
    pub(crate) body: Value,
}

pub(crate) async fn pay(url: &str, key: &str) -> Reply {
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/payments"))
        .header("authorization", "Bearer acme")
        .header("idempotency-key", format!("\"{key}\""))
        .header("content-type", "application/json")
        .body(r#"{"amount":"20.00","currency":"BRL","destination":"acct_lost"}"#)
        .send()
        .await
        .expect("send");
    let status = response.status().as_u16();
    let replayed = response.headers().get("idempotent-replayed").is_some_and(|v| v == "true");
    let body = serde_json::from_slice(&response.bytes().await.expect("body")).unwrap_or(Value::Null);
    Reply { status, replayed, body }
}

/// `GET /v1/ledger` of tenant acme: (payments, provider charges).
pub(crate) async fn ledger(url: &str) -> (Vec<Value>, Vec<Value>) {
    let response = reqwest::Client::new()
        .get(format!("{url}/v1/ledger"))
        .header("authorization", "Bearer acme")
        .send()
        .await
        .expect("ledger");
    let ledger: Value = serde_json::from_slice(&response.bytes().await.expect("body")).expect("ledger JSON");
    let list = |name: &str| ledger[name].as_array().cloned().unwrap_or_default();
    (list("payments"), list("provider_charges"))
}

#[test]
fn a_charge_confirmed_from_the_shell_replays_as_an_http_response() {
    let dir = tempfile::TempDir::new().expect("tempdir");
    let first = with_service(dir.path(), async |url| pay(&url, "order-900").await);
    assert_eq!(first.status, 502, "the provider's answer was lost: {:?}", first.body);

    let file = dir.path().join("idemdb.redb");
    let queue = idemdb(["reconcile", arg(&file), "--json"]).code(0).json();
    assert_eq!(queue["entries"].as_array().map(Vec::len), Some(1), "{queue}");
    idemdb([
        "reconcile",
        arg(&file),
        "--tenant",
        "acme",
        "--operation",
        "create_payment",
        "--key",
        "order-900",
        "--effect",
        "charge",
        "--provider",
        "confirmed",
        "--reference",
        "ch_1",
        "--status",
        "201",
        "--body",
        r#"{"status":"succeeded","provider_charge":"ch_1"}"#,
    ])
    .code(0);

    let (retry, again, (_, charges)) = with_service(dir.path(), async |url| {
        (pay(&url, "order-900").await, pay(&url, "order-900").await, ledger(&url).await)
    });
    for reply in [&retry, &again] {
        assert_eq!(reply.status, 201, "the retry replays the resolution, not 500 corrupt: {:?}", reply.body);
        assert!(reply.replayed);
        assert_eq!(reply.body["provider_charge"], "ch_1");
    }
    assert_eq!(charges.len(), 1, "one charge at the provider: {charges:?}");
    assert_eq!(charges[0]["calls"], 1, "the retries charged nothing: {charges:?}");
}
