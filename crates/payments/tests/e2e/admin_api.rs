//! The admin API at `/v1/admin` (behind `--admin-token`): the queue, one record, resolutions
//! with the payment row written, problem answers — on redb and on PostgreSQL.

use serde_json::{Value, json};

use crate::support::{Db, effects, http, json_answer, pay};

const TOKEN: &str = "operator-secret-0123456789";
const LOST: &str = r#"{"amount":"20.00","currency":"BRL","destination":"acct_lost"}"#;

async fn admin_get(http: &reqwest::Client, url: &str, path: &str, token: Option<&str>) -> (u16, Value) {
    let mut request = http.get(format!("{url}/v1/admin{path}"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("admin request");
    let status = response.status().as_u16();
    let body = response.bytes().await.expect("body");
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

async fn admin_resolve(http: &reqwest::Client, url: &str, body: &Value) -> (u16, Value) {
    json_answer(http.post(format!("{url}/v1/admin/resolve")).bearer_auth(TOKEN), &body.to_string()).await
}

/// Runs the story; returns the record as the resolution left it (with its history).
async fn an_operator_resolves_a_lost_charge(db: &Db) -> Value {
    let server = db.start(&[
        "--admin-token",
        TOKEN,
        "--provider-lose-responses-to",
        "acct_lost",
        "--reconcile-interval-secs",
        "3600",
    ]);
    let (http, url) = (http(), server.url.clone());
    let first = pay(&http, &url, "acme", "order-900", LOST).await.unwrap();
    assert_eq!(first.status, 502, "{:?}", String::from_utf8_lossy(&first.body));

    // No token, a tenant's token: refused, nothing listed.
    assert_eq!(admin_get(&http, &url, "/reconciliation", None).await.0, 401);
    assert_eq!(admin_get(&http, &url, "/reconciliation", Some("acme")).await.0, 401);
    let (status, bad) = admin_get(&http, &url, "/reconciliation?limit=0", Some(TOKEN)).await;
    assert_eq!((status, bad["code"].as_str()), (400, Some("IDEMDB_INVALID_ARGUMENT")), "{bad}");

    let (status, queue) = admin_get(&http, &url, "/reconciliation?limit=10", Some(TOKEN)).await;
    assert_eq!(status, 200, "{queue}");
    let entries = queue["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{queue}");
    let entry = &entries[0];
    assert_eq!(
        (entry["kind"].as_str(), entry["effect"].as_str(), entry["state"].as_str()),
        (Some("effect"), Some("charge"), Some("uncertain"))
    );
    assert_eq!(entry["idempotency_key"], "order-900");
    // The tenant (here the client's bearer token) is never spelled: its keyed hash is.
    assert!(entry.get("tenant").is_none() && entry["tenant_hash"].as_str().map(str::len) == Some(32), "{entry}");
    assert!(!queue.to_string().contains("acme"), "{queue}");
    // The tenant's own queue speaks the same JSON.
    let tenant_queue = crate::support::reconciliation(&http, &url, "acme").await;
    assert_eq!(tenant_queue, entries.clone(), "one spelling of an entry");

    let (status, view) =
        admin_get(&http, &url, "/record?tenant=acme&operation=create_payment&key=order-900", Some(TOKEN)).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["record"]["state"], "uncertain");
    assert_eq!(view["record"]["fingerprint"].as_str().map(str::len), Some(64));
    assert_eq!(view["record"]["attempts"], 1);
    let (status, missing) =
        admin_get(&http, &url, "/record?tenant=acme&operation=create_payment&key=nope", Some(TOKEN)).await;
    assert_eq!((status, missing["code"].as_str()), (404, Some("IDEMDB_NOT_FOUND")));

    // The page's view of the charge: what it charges, in the business's words.
    let summary = &view["effects"][0]["summary"];
    assert_eq!((summary["amount"].as_str(), summary["destination"].as_str()), (Some("20.00"), Some("acct_lost")));
    assert!(!view.to_string().contains("acme"), "the record view never spells the tenant: {view}");

    // The record cannot be settled by hand while its charge is unresolved: a made-up answer
    // would be replayed while the ledger says otherwise. (It used to be accepted: retries then
    // replayed the operator's body, whatever the provider did.)
    for settle in [
        json!({"resolution": "completed", "status": 201, "body": "{\"made\":\"up\"}"}),
        json!({"resolution": "failed", "status": 500, "body": "{}"}),
        json!({"resolution": "released"}),
    ] {
        let mut request = json!({"tenant": "acme", "operation": "create_payment", "key": "order-900"});
        request.as_object_mut().unwrap().extend(settle.as_object().unwrap().clone());
        let (status, refused) = admin_resolve(&http, &url, &request).await;
        assert_eq!((status, refused["code"].as_str()), (409, Some("IDEMDB_WRONG_STATE")), "{settle}: {refused}");
        let detail = refused["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("`charge` is uncertain") && detail.contains("provider's facts"), "{refused}");
    }
    let (_, view) =
        admin_get(&http, &url, "/record?tenant=acme&operation=create_payment&key=order-900", Some(TOKEN)).await;
    assert_eq!(view["record"]["state"], "uncertain", "nothing changed: {view}");
    let retry = pay(&http, &url, "acme", "order-900", LOST).await.unwrap();
    assert_eq!((retry.status, retry.problem.as_deref()), (409, Some("urn:idemdb:problem:needs-reconciliation")));

    // The provider made the charge: its id is the reference, as the provider's lookup says.
    let charge = effects(&http, &url, "acme").await.charges_of("order-900").to_vec();
    assert_eq!(charge.len(), 1, "the provider charged once");
    let key_hash = entry["key_hash"].as_str().unwrap();
    let (status, asked) =
        admin_get(&http, &url, &format!("/lookup?key_hash={key_hash}&effect=charge"), Some(TOKEN)).await;
    assert_eq!(
        (status, asked["provider"].as_str(), asked["reference"].as_str()),
        (200, Some("confirmed"), Some(charge[0].as_str()))
    );
    // Facts the provider contradicts are refused with its word, and change nothing. Old code
    // stored the wrong reference, or failed the payment of a charge that was made.
    let named = json!({ "tenant": "acme", "operation": "create_payment", "key": "order-900", "effect": "charge" });
    let with = |extra: Value| {
        let mut body = named.clone();
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    for (claim, says) in [
        (json!({"provider": "confirmed", "reference": "ch_wrong"}), charge[0].as_str()),
        (json!({"provider": "failed"}), "resolve it confirmed"),
        (json!({"provider": "not_found"}), "resolve it confirmed"),
    ] {
        let (status, refused) = admin_resolve(&http, &url, &with(claim.clone())).await;
        assert_eq!((status, refused["code"].as_str()), (422, Some("IDEMDB_INVALID_ARGUMENT")), "{claim}: {refused}");
        assert!(refused["detail"].as_str().unwrap().contains(says), "{claim}: {refused}");
    }
    let (_, still) = admin_get(&http, &url, "/reconciliation", Some(TOKEN)).await;
    assert_eq!(still["entries"][0]["state"], "uncertain", "nothing changed: {still}");
    assert_eq!(effects(&http, &url, "acme").await.payments_of("order-900"), 0, "no payment row was written");
    let resolve = json!({
        "tenant": "acme", "operation": "create_payment", "key": "order-900",
        "effect": "charge", "provider": "confirmed", "reference": charge[0], "note": "provider dashboard"
    });
    let missing_reference = json!({
        "tenant": "acme", "operation": "create_payment", "key": "order-900", "effect": "charge", "provider": "confirmed"
    });
    assert_eq!(admin_resolve(&http, &url, &missing_reference).await.0, 400);
    let (status, done) = admin_resolve(&http, &url, &resolve).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["cause"], "operator");
    assert_eq!(done["now"]["record"]["state"], "completed");
    assert_eq!(done["now"]["record"]["response"]["status"], 201, "the payment's 201 is stored: {done}");
    assert_eq!(done["now"]["effects"][0]["state"], "confirmed", "{done}");
    // Twice is refused by the core: the charge is not uncertain any more.
    let (status, again) = admin_resolve(&http, &url, &resolve).await;
    assert_eq!((status, again["code"].as_str()), (409, Some("IDEMDB_WRONG_STATE")), "{again}");

    let retry = pay(&http, &url, "acme", "order-900", LOST).await.unwrap();
    assert_eq!((retry.status, retry.replayed), (201, true), "{:?}", String::from_utf8_lossy(&retry.body));
    let ledger = effects(&http, &url, "acme").await;
    assert_eq!(ledger.payments_of("order-900"), 1, "exactly one payment row");
    assert_eq!(ledger.calls_of("order-900"), 1, "the provider was called once");
    assert_eq!(ledger.payment_charges_of("order-900"), charge.as_slice(), "the row names the charge");
    let (_, queue) = admin_get(&http, &url, "/reconciliation", Some(TOKEN)).await;
    assert_eq!(queue["entries"].as_array().map(Vec::len), Some(0), "{queue}");
    done["now"].clone()
}

#[tokio::test]
async fn an_operator_resolves_a_lost_charge_on_redb() {
    let db = Db::redb();
    let now = an_operator_resolves_a_lost_charge(&db).await;
    // The audit trail, read back while the service that wrote it runs (a killed process loses
    // the events of its last unflushed batch).
    let kinds: Vec<&str> = now["history"].as_array().unwrap().iter().filter_map(|e| e["kind"].as_str()).collect();
    for kind in ["reserved", "effect_enqueued", "effect_reported", "effect_resolved"] {
        assert!(kinds.contains(&kind), "`{kind}` is in the history: {kinds:?}");
    }
    assert_operator_cause(&now);
    // The page, the outbox and the inbox.
    let server = db.start(&["--admin-token", TOKEN]);
    let (http, url) = (http(), server.url.clone());
    let page = http.get(format!("{url}/v1/admin")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    assert!(page.text().await.unwrap().contains("Reconciliation queue"));
    let (status, outbox) = admin_get(&http, &url, "/effects?state=confirmed", Some(TOKEN)).await;
    assert_eq!(status, 200, "{outbox}");
    assert_eq!(outbox["items"].as_array().map(Vec::len), Some(1), "{outbox}");
    assert_eq!(admin_get(&http, &url, "/effects?state=lost", Some(TOKEN)).await.0, 400);
    let (status, inbox) = admin_get(&http, &url, "/deliveries?limit=5", Some(TOKEN)).await;
    assert_eq!((status, inbox["deliveries"].as_array().map(Vec::len)), (200, Some(0)), "{inbox}");
}

#[tokio::test]
async fn an_operator_resolves_a_lost_charge_on_postgres() {
    let Some(db) = Db::postgres("admin_api").await else { return };
    let now = an_operator_resolves_a_lost_charge(&db).await;
    assert_operator_cause(&now);
    let server = db.start(&["--admin-token", TOKEN]);
    let (status, outbox) = admin_get(&http(), &server.url, "/effects?state=confirmed&limit=5", Some(TOKEN)).await;
    assert_eq!(status, 200, "{outbox}");
    let items = outbox["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{outbox}");
    assert_eq!(
        (items[0]["idempotency_key"].as_str(), items[0]["state"].as_str()),
        (Some("order-900"), Some("confirmed"))
    );
    let (status, none) = admin_get(&http(), &server.url, "/effects?state=uncertain", Some(TOKEN)).await;
    assert_eq!((status, none["items"].as_array().map(Vec::len)), (200, Some(0)), "{none}");
    let (status, inbox) = admin_get(&http(), &server.url, "/deliveries", Some(TOKEN)).await;
    assert_eq!((status, inbox["deliveries"].as_array().map(Vec::len)), (200, Some(0)), "{inbox}");
}

/// The history names the operator as the cause of the charge's resolution, and no other
/// event has a cause.
fn assert_operator_cause(now: &serde_json::Value) {
    let history = now["history"].as_array().expect("the history is read back on both backends");
    let resolved: Vec<_> = history.iter().filter(|e| e["kind"] == "effect_resolved").collect();
    assert_eq!(resolved.len(), 1, "{history:?}");
    assert_eq!(resolved[0]["cause"], "operator", "{history:?}");
    assert!(history.iter().filter(|e| e["kind"] != "effect_resolved").all(|e| e["cause"].is_null()), "{history:?}");
}

/// Polls the admin record view of `key` until its charge is `state` (at most 10 s).
async fn charge_becomes(http: &reqwest::Client, url: &str, key: &str, state: &str) -> Value {
    let path = format!("/record?tenant=acme&operation=create_payment&key={key}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (status, view) = admin_get(http, url, &path, Some(TOKEN)).await;
        if status == 200 && view["effects"][0]["state"] == state {
            return view;
        }
        assert!(std::time::Instant::now() < deadline, "the charge of {key} never became {state}: {view}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// An operator's `failed` while the provider call may still land is refused: the dispatcher's
/// call outlived its deadline (750 ms under a 1 s lease), the provider takes 6 s (a margin for a loaded machine), and its
/// lookup says "no such charge" until then — "not yet", not "no". Old code accepted it: the
/// key answered 500 for good while the provider charged the card. Once the provider's settle
/// time has passed, "no such charge" is a fact and `failed` is taken.
#[tokio::test]
async fn an_operators_failed_is_refused_while_the_call_may_still_land() {
    const SLOW: &str = r#"{"amount":"7.00","currency":"BRL","destination":"acct_slow"}"#;
    let db = Db::redb();
    // A 1 s lease (the call's deadline is 750 ms), a slow provider, no reconciler rounds.
    let slow = |latency: &str, extra: &[&str]| {
        let mut args = vec!["--admin-token", TOKEN, "--lease-ttl-secs", "1", "--reconcile-interval-secs", "3600"];
        args.extend(["--provider-latency-ms", latency]);
        args.extend(extra);
        db.start(&args)
    };
    let server = slow("6000", &[]);
    let (http, url) = (http(), server.url.clone());
    let first = pay(&http, &url, "acme", "order-slow", SLOW).await.unwrap();
    assert_ne!(first.status, 201, "the call outlived its deadline: {:?}", String::from_utf8_lossy(&first.body));
    charge_becomes(&http, &url, "order-slow", "uncertain").await;
    let named = json!({"tenant": "acme", "operation": "create_payment", "key": "order-slow", "effect": "charge"});
    let (status, asked) = admin_get(
        &http,
        &url,
        "/lookup?tenant=acme&operation=create_payment&key=order-slow&effect=charge",
        Some(TOKEN),
    )
    .await;
    assert_eq!(
        (status, asked["provider"].as_str()),
        (200, Some("not_found")),
        "the charge is still on its way: {asked}"
    );
    let mut failed = named.clone();
    failed.as_object_mut().unwrap().insert("provider".into(), json!("failed"));
    let (status, refused) = admin_resolve(&http, &url, &failed).await;
    assert_eq!((status, refused["code"].as_str()), (409, Some("IDEMDB_WRONG_STATE")), "{refused}");
    assert!(
        refused["detail"].as_str().unwrap_or_default().contains("may still be applied by the provider"),
        "{refused}"
    );
    // The call lands: the provider's word now refuses `failed`, and confirms the charge.
    let landing = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let charged = loop {
        let charges = effects(&http, &url, "acme").await.charges_of("order-slow").to_vec();
        if !charges.is_empty() {
            break charges;
        }
        assert!(std::time::Instant::now() < landing, "the provider never made the charge");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let (status, refused) = admin_resolve(&http, &url, &failed).await;
    assert_eq!((status, refused["code"].as_str()), (422, Some("IDEMDB_INVALID_ARGUMENT")), "{refused}");
    let mut confirmed = named.clone();
    confirmed
        .as_object_mut()
        .unwrap()
        .extend([("provider".into(), json!("confirmed")), ("reference".into(), json!(charged[0]))]);
    let (status, done) = admin_resolve(&http, &url, &confirmed).await;
    assert_eq!(status, 200, "{done}");
    let retry = pay(&http, &url, "acme", "order-slow", SLOW).await.unwrap();
    assert_eq!(retry.status, 201, "{:?}", String::from_utf8_lossy(&retry.body));
    let ledger = effects(&http, &url, "acme").await;
    assert_eq!(
        (ledger.charges_of("order-slow").len(), ledger.payments_of("order-slow"), ledger.calls_of("order-slow")),
        (1, 1, 1)
    );
    drop(server);

    // A provider that settles within 500 ms drops a call it could not apply by then: after
    // that, "no such charge" is a fact, `failed` is taken, and nothing is ever charged.
    let server = slow("2500", &["--provider-settle-ms", "500"]);
    let url = server.url.clone();
    let first = pay(&http, &url, "acme", "order-dropped", SLOW).await.unwrap();
    assert_ne!(first.status, 201);
    charge_becomes(&http, &url, "order-dropped", "uncertain").await;
    let mut failed = failed.clone();
    failed["key"] = json!("order-dropped");
    let settled = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let taken = loop {
        let (status, answer) = admin_resolve(&http, &url, &failed).await;
        if status == 200 {
            break answer;
        }
        assert!(std::time::Instant::now() < settled, "`failed` was never taken: {answer}");
        assert_eq!((status, answer["code"].as_str()), (409, Some("IDEMDB_WRONG_STATE")), "{answer}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(taken["now"]["record"]["state"], "failed", "{taken}");
    // The call reaches the provider's storage after its settle time: dropped, never charged.
    tokio::time::sleep(std::time::Duration::from_millis(2_700)).await;
    let retry = pay(&http, &url, "acme", "order-dropped", SLOW).await.unwrap();
    assert_eq!(retry.status, 500, "the operator's failure is the key's answer");
    let ledger = effects(&http, &url, "acme").await;
    assert_eq!((ledger.charges_of("order-dropped").len(), ledger.payments_of("order-dropped")), (0, 0));
}
