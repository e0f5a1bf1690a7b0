//! `Operation::enqueue_on_reserve`: the effect is in the outbox from the reserving commit on,
//! before the handler runs; a body the payload function refuses enqueues nothing.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use http::{Request, Response, StatusCode};
use idemdb::{EffectName, IdempotencyKey, Scope};
use idemdb_http::Operation;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_effect_is_enqueued_with_the_reservation_before_the_handler_runs() {
    let (store, _) = store();
    let charge = EffectName::new("charge").unwrap();
    let op = Operation::named("pay").enqueue_on_reserve(charge.clone(), 1, |body, key_hash| {
        let value: serde_json::Value = serde_json::from_slice(body).ok()?;
        let amount = value.get("amount")?.as_i64()?;
        Some(format!("{key_hash}:{amount}").into_bytes())
    });
    // The handler records what the outbox held when it ran.
    let seen: Arc<Mutex<Vec<Option<Vec<u8>>>>> = Arc::default();
    let (watcher, seen_by) = (store.clone(), Arc::clone(&seen));
    let effect = charge.clone();
    let svc = service(layer(store.asynchronous(), op), move |request: Request<Body>| {
        let (store, seen, effect) = (watcher.clone(), Arc::clone(&seen_by), effect.clone());
        async move {
            let key = request.headers()["idempotency-key"].to_str().unwrap().trim_matches('"').to_string();
            let scope = Scope::new("acme", "pay").unwrap();
            let item = store.effect(&scope, &IdempotencyKey::new(key).unwrap(), &effect).unwrap();
            seen.lock().unwrap().push(item.map(|item| item.payload));
            Response::builder().status(StatusCode::CREATED).body(Body::from("ok")).unwrap()
        }
    });
    assert_eq!(send(&svc, post("/p", Some("e-1"), r#"{"amount":7}"#)).await.status, StatusCode::CREATED);
    assert!(send(&svc, post("/p", Some("e-1"), r#"{"amount":7}"#)).await.replayed());
    assert_eq!(send(&svc, post("/p", Some("e-2"), r#"{"amount":"seven"}"#)).await.status, StatusCode::CREATED);
    let scope = Scope::new("acme", "pay").unwrap();
    let hash = store.key_hash(&scope, &IdempotencyKey::new("e-1").unwrap());
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, vec![Some(format!("{hash}:7").into_bytes()), None], "the handler ran twice, once per key");
    // One effect in all: the replay enqueued nothing, the refused payload nothing.
    assert_eq!(store.claim_effects(10).unwrap().len(), 1);
}
