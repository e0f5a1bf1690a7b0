//! The layer inside an axum router: operations named by the matched route, per-route
//! settings, other routes untouched; and the keyed hash in the logs, never the raw key.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::Path;
use axum::routing::{self, get};
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use idemdb_http::{IdempotencyLayer, Operation};
use tower::ServiceExt;

use crate::support::*;

fn app(store: idemdb::Store, effects: Effects) -> Router {
    let layer = IdempotencyLayer::new(store.asynchronous(), tenant as fn(&http::request::Parts) -> Option<String>)
        .route(Method::POST, "/v1/login", Operation::new().key_optional());
    let count = move || {
        let effects = effects.clone();
        move |Path(id): Path<String>| {
            effects.add();
            std::future::ready(format!("paid {id}"))
        }
    };
    Router::new()
        .route("/v1/orders/{id}/pay", routing::post(count()))
        .route("/v1/orders/{id}", get(|Path(id): Path<String>| async move { id }))
        .route("/v1/login", routing::post(|| async { "welcome" }))
        .layer(layer)
}

async fn call(app: &Router, request: Request<Body>) -> (StatusCode, String) {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn operations_are_named_by_the_matched_route_and_the_path_is_fingerprinted() {
    let (store, _) = store();
    let effects = Effects::default();
    let app = app(store.clone(), effects.clone());
    assert_eq!(call(&app, post("/v1/orders/1/pay", Some("k-1"), "{}")).await, (StatusCode::OK, "paid 1".into()));
    assert_eq!(call(&app, post("/v1/orders/1/pay", Some("k-1"), "{}")).await, (StatusCode::OK, "paid 1".into()));
    // Same route template, so the same operation; another order is another request: 422.
    let (status, _) = call(&app, post("/v1/orders/2/pay", Some("k-1"), "{}")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(effects.count(), 1);
    assert!(record(&store, "POST /v1/orders/{id}/pay", "k-1").is_some(), "the record is under the route template");
    // GET is not covered; the listed login route does not require a key.
    let get = Request::builder().uri("/v1/orders/9").body(Body::empty()).unwrap();
    assert_eq!(call(&app, get).await, (StatusCode::OK, "9".into()));
    assert_eq!(call(&app, post("/v1/login", None, "{}")).await, (StatusCode::OK, "welcome".into()));
    assert_eq!(call(&app, post("/v1/orders/3/pay", None, "{}")).await.0, StatusCode::BAD_REQUEST);
}

/// Every field value of every span and event, as text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<String>>>);

struct Fields<'a>(&'a mut Vec<String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push(format!("{}={value:?}", field.name()));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.push(format!("{}={value}", field.name()));
    }
}

impl tracing::Subscriber for Captured {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut lines = self.0.lock().unwrap();
        lines.push(format!("span {}", span.metadata().name()));
        span.record(&mut Fields(&mut lines));
        tracing::span::Id::from_u64(lines.len() as u64)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        values.record(&mut Fields(&mut self.0.lock().unwrap()));
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        event.record(&mut Fields(&mut self.0.lock().unwrap()));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn spans_carry_the_keyed_hash_never_the_key_or_the_body() {
    let captured = Captured::default();
    let (store, _) = store();
    let key = "secret-key-4f1c";
    let body = r#"{"card":"4242424242424242"}"#;
    let expected_hash = store.key_hash(
        &idemdb::Scope::new("acme", "POST /v1/orders/{id}/pay").unwrap(),
        &idemdb::IdempotencyKey::new(key).unwrap(),
    );
    tracing::subscriber::with_default(captured.clone(), || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let app = app(store.clone(), Effects::default());
            call(&app, post("/v1/orders/1/pay", Some(key), body)).await;
            call(&app, post("/v1/orders/1/pay", Some(key), body)).await;
            call(&app, post("/v1/orders/2/pay", Some(key), body)).await;
        });
    });
    let lines = captured.0.lock().unwrap().join("\n");
    assert!(lines.contains("span idempotency"), "{lines}");
    assert!(lines.contains(&format!("key_hash={expected_hash}")), "{lines}");
    assert!(lines.contains("answer=replay") && lines.contains("answer=mismatch"), "{lines}");
    assert!(!lines.contains(key), "the raw key was logged:\n{lines}");
    assert!(!lines.contains("4242"), "the body was logged:\n{lines}");
}
