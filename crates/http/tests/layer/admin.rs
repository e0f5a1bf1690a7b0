//! The admin router over the redb store, with the layer: an uncertain key resolved by an
//! operator — completed (the layer replays the operator's response), released (the retry
//! runs the handler again) — and its refusals. Counts the handler's runs.

use axum::body::Body;
use http::{Method, Request, Response, StatusCode};
use idemdb::StateKind;
use idemdb::{OutboxItem, Reservation, Reserve};
use idemdb_http::LeaseHandle;
use idemdb_http::admin::{AdminApi, ConfirmHook, HookError, ProviderFact};
use serde_json::json;
use tower::ServiceExt;

use crate::support::*;

const BODY: &str = r#"{"amount":"10.50"}"#;

async fn admin(router: &axum::Router, method: Method, uri: &str, body: Option<serde_json::Value>) -> Answer {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(body.map(|b| b.to_string()).unwrap_or_default()))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    use http_body_util::BodyExt;
    Answer { status: parts.status, headers: parts.headers, body: body.collect().await.unwrap().to_bytes() }
}

#[tokio::test]
async fn an_operator_completes_or_releases_an_uncertain_key() {
    let (store, _) = store();
    let effects = Effects::default();
    let handler = {
        let effects = effects.clone();
        move |request: Request<Body>| {
            let effects = effects.clone();
            async move {
                effects.add();
                let handle = request.extensions().get::<LeaseHandle<idemdb::AsyncStore>>().cloned().unwrap();
                handle.mark_uncertain().await.unwrap();
                Response::builder().status(502).body(Body::from("provider timed out")).unwrap()
            }
        }
    };
    let svc = service(layer(store.asynchronous(), idemdb_http::Operation::named("pay")), handler);
    let router = AdminApi::new(store.asynchronous()).router();
    for key in ["k-done", "k-free"] {
        assert_eq!(send(&svc, post("/pay", Some(key), BODY)).await.status, StatusCode::BAD_GATEWAY);
    }
    assert_eq!(effects.count(), 2);

    let queue = admin(&router, Method::GET, "/reconciliation?limit=10", None).await;
    assert_eq!(queue.status, StatusCode::OK);
    let entries = queue.json()["entries"].as_array().cloned().unwrap();
    assert_eq!(entries.len(), 2, "{:?}", queue.json());
    let acme = store.tenant_hash("acme").to_string();
    assert!(
        entries.iter().all(|e| e["kind"] == "record" && e["state"] == "uncertain" && e["tenant_hash"] == acme.as_str())
    );
    let view = admin(&router, Method::GET, "/record?tenant=acme&operation=pay&key=k-done", None).await;
    assert_eq!(view.json()["record"]["cause"], "reported", "{:?}", view.json());
    let kinds: Vec<String> =
        view.json()["history"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap().to_string()).collect();
    assert_eq!(kinds, ["reserved", "failed"], "the key's audit history");

    // Completed with the operator's response: the layer replays it; the handler does not run.
    let done = json!({"tenant": "acme", "operation": "pay", "key": "k-done", "resolution": "completed",
                      "status": 201, "body": "{\"id\":\"p1\"}"});
    let resolved = admin(&router, Method::POST, "/resolve", Some(done.clone())).await;
    assert_eq!(resolved.status, StatusCode::OK, "{:?}", resolved.json());
    assert_eq!(resolved.json()["now"]["record"]["response"]["status"], 201);
    let retry = send(&svc, post("/pay", Some("k-done"), BODY)).await;
    assert_eq!((retry.status, retry.replayed(), &retry.body[..]), (StatusCode::CREATED, true, &b"{\"id\":\"p1\"}"[..]));
    assert_eq!(effects.count(), 2, "a replay runs nothing");
    let view = admin(&router, Method::GET, "/record?tenant=acme&operation=pay&key=k-done", None).await;
    let history = view.json()["history"].as_array().cloned().unwrap();
    let resolution = history.iter().find(|e| e["kind"] == "reconciled").expect("the resolution is in the history");
    assert_eq!(resolution["cause"], "operator", "the trail says a person decided: {history:?}");
    assert!(history.iter().filter(|e| e["kind"] != "reconciled").all(|e| e["cause"].is_null()));
    let twice = admin(&router, Method::POST, "/resolve", Some(done)).await;
    assert_eq!(twice.status, StatusCode::CONFLICT, "{:?}", twice.json());
    assert!(twice.problem().starts_with("urn:idemdb:problem:"), "the core refuses a finished record");

    // Released: the key is free, the retry runs the handler again.
    let free = json!({"tenant": "acme", "operation": "pay", "key": "k-free", "resolution": "released"});
    assert_eq!(admin(&router, Method::POST, "/resolve", Some(free)).await.status, StatusCode::OK);
    assert_eq!(record(&store, "pay", "k-free").unwrap().state.kind(), StateKind::Released);
    send(&svc, post("/pay", Some("k-free"), BODY)).await;
    assert_eq!(effects.count(), 3, "the released key ran again");

    // Refusals are problem JSON and change nothing.
    for (body, status) in [
        (json!({"tenant": "acme", "operation": "pay", "key": "k-x", "resolution": "released"}), StatusCode::NOT_FOUND),
        (
            json!({"tenant": "acme", "operation": "pay", "key": "k-free", "resolution": "maybe"}),
            StatusCode::BAD_REQUEST,
        ),
        (json!({"tenant": "acme", "operation": "pay"}), StatusCode::BAD_REQUEST),
        (
            json!({"tenant": "acme", "operation": "pay", "key": "k-free", "resolution": "completed", "status": 99}),
            StatusCode::BAD_REQUEST,
        ),
        (json!([1, 2]), StatusCode::BAD_REQUEST),
    ] {
        let refused = admin(&router, Method::POST, "/resolve", Some(body.clone())).await;
        assert_eq!(refused.status, status, "{body}: {:?}", refused.json());
        assert_eq!(refused.headers["content-type"], "application/problem+json");
    }
    assert_eq!(admin(&router, Method::GET, "/reconciliation?limit=abc", None).await.status, StatusCode::BAD_REQUEST);
    assert_eq!(effects.count(), 3, "refusals run nothing");
    let page = admin(&router, Method::GET, "/", None).await;
    assert!(page.headers["content-security-policy"].to_str().unwrap().contains("default-src 'none'"));
}

/// A provider the test decides the facts of.
struct Provider(Option<ProviderFact>);

impl ConfirmHook<idemdb::AsyncStore> for Provider {
    async fn confirmed(&self, _: &idemdb::AsyncStore, _: &OutboxItem, _: &str) -> Result<bool, HookError> {
        Ok(false)
    }

    async fn lookup(&self, _: &idemdb::AsyncStore, _: &OutboxItem) -> Result<Option<ProviderFact>, HookError> {
        Ok(self.0.clone())
    }
}

/// A store with one charge whose provider answer was lost (uncertain), under tenant acme,
/// operation pay, key k-lost.
fn lost_charge() -> idemdb::Store {
    lost_charge_at().0
}

/// [`lost_charge`], with the store's clock.
fn lost_charge_at() -> (idemdb::Store, idemdb::ManualClock) {
    let (store, clock) = store();
    let (scope, key) = (idemdb::Scope::new("acme", "pay").unwrap(), idemdb::IdempotencyKey::new("k-lost").unwrap());
    let Reservation::Acquired(lease) =
        store.reserve(Reserve::new(&scope, &key, &idemdb::Fingerprint::from_bytes([1; 32]))).unwrap()
    else {
        panic!("a new key is acquired")
    };
    store.enqueue_effect(&lease, &idemdb::EffectName::new("charge").unwrap(), 1, b"{}".to_vec()).unwrap();
    let claim = store.claim_effects(1).unwrap().pop().unwrap();
    store.report_effect(&claim, idemdb::EffectReport::Unknown { reason: "timeout".into() }).unwrap();
    (store, clock)
}

/// With a provider lookup, an operator's fact is checked before anything changes: a charge
/// the provider never made cannot be confirmed, one it made cannot be failed or sent again
/// as not found, and another reference is refused. Old code stored every such fact.
#[tokio::test]
async fn an_operator_fact_the_provider_contradicts_is_refused_and_changes_nothing() {
    let charge = json!({"tenant": "acme", "operation": "pay", "key": "k-lost", "effect": "charge"});
    let claim = |extra: serde_json::Value| {
        let mut body = charge.clone();
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    let made = || Some(ProviderFact::Made { reference: "ch_real".into() });
    for (fact, said, says) in [
        (Some(ProviderFact::NotMade), json!({"provider": "confirmed", "reference": "ch_1"}), "no trace"),
        (made(), json!({"provider": "confirmed", "reference": "ch_1"}), "ch_real, not ch_1"),
        (made(), json!({"provider": "failed"}), "resolve it confirmed"),
        (made(), json!({"provider": "not_found"}), "resolve it confirmed"),
    ] {
        let store = lost_charge();
        let router = AdminApi::new(store.asynchronous()).hook(Provider(fact.clone())).router();
        let refused = admin(&router, Method::POST, "/resolve", Some(claim(said.clone()))).await;
        assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY, "{fact:?} {said}: {:?}", refused.json());
        assert!(refused.json()["detail"].as_str().unwrap().contains(says), "{:?}", refused.json());
        let item = store
            .effect(
                &idemdb::Scope::new("acme", "pay").unwrap(),
                &idemdb::IdempotencyKey::new("k-lost").unwrap(),
                &idemdb::EffectName::new("charge").unwrap(),
            )
            .unwrap()
            .unwrap();
        assert_eq!(item.state.kind(), idemdb::OutboxStateKind::Uncertain, "nothing changed");
    }
    // What the provider says is asked from the page with `GET /lookup`; facts that agree go
    // through.
    let store = lost_charge();
    let router = AdminApi::new(store.asynchronous()).hook(Provider(made())).router();
    let asked = admin(&router, Method::GET, "/lookup?tenant=acme&operation=pay&key=k-lost&effect=charge", None).await;
    assert_eq!(asked.json(), json!({"provider": "confirmed", "reference": "ch_real"}));
    let agreed =
        admin(&router, Method::POST, "/resolve", Some(claim(json!({"provider": "confirmed", "reference": "ch_real"}))))
            .await;
    assert_eq!(agreed.status, StatusCode::OK, "{:?}", agreed.json());
    // Without a lookup the operator's word is taken, and `/lookup` says there is none; but
    // `failed` only once the provider's settle time (60 s by default) has passed since the
    // call: before then the call may still land, whatever anyone says.
    let (store, clock) = lost_charge_at();
    let router = AdminApi::new(store.asynchronous()).router();
    let none = admin(&router, Method::GET, "/lookup?tenant=acme&operation=pay&key=k-lost&effect=charge", None).await;
    assert_eq!(none.status, StatusCode::NOT_IMPLEMENTED);
    let early = admin(&router, Method::POST, "/resolve", Some(claim(json!({"provider": "failed"})))).await;
    assert_eq!(early.status, StatusCode::CONFLICT, "{:?}", early.json());
    assert_eq!(early.json()["code"], "IDEMDB_WRONG_STATE");
    assert!(
        early.json()["detail"].as_str().unwrap().contains("may still be applied by the provider"),
        "{:?}",
        early.json()
    );
    clock.advance(idemdb::core::DEFAULT_PROVIDER_SETTLE_TIME);
    let taken = admin(&router, Method::POST, "/resolve", Some(claim(json!({"provider": "failed"})))).await;
    assert_eq!(taken.status, StatusCode::OK, "{:?}", taken.json());
}
