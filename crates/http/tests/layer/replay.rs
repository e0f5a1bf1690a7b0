//! Replays: status, allow-listed headers and body byte for byte; the allow-list; tenants.

use axum::body::Body;
use http::{Request, Response, StatusCode};
use idemdb_http::Operation;

use crate::support::*;

const BODY: &str = r#"{"amount":"10.50"}"#;

#[tokio::test]
async fn a_replay_has_the_stored_status_allowed_headers_and_the_same_bytes() {
    let (store, _) = store();
    let effects = Effects::default();
    let handler = {
        let effects = effects.clone();
        move |_: Request<Body>| {
            effects.add();
            // Not UTF-8, with a NUL and trailing whitespace: bytes, not text.
            let body: Vec<u8> = vec![0xff, 0x00, b'o', b'k', b' ', b'\n', 0xfe];
            std::future::ready(
                Response::builder()
                    .status(StatusCode::ACCEPTED)
                    .header("content-type", "application/octet-stream")
                    .header("location", "/v1/jobs/7")
                    .header("etag", "\"v1\"")
                    .header("link", "</a>; rel=\"a\"")
                    .header("link", "</b>; rel=\"b\"")
                    .header("set-cookie", "session=secret")
                    .header("x-request-cost", "7")
                    .body(Body::from(body))
                    .unwrap(),
            )
        }
    };
    let svc = service(layer(store.asynchronous(), Operation::named("op")), handler);
    let first = send(&svc, post("/jobs", Some("k-1"), BODY)).await;
    assert_eq!(first.headers["set-cookie"], "session=secret", "the first client gets every header");
    let replay = send(&svc, post("/jobs", Some("k-1"), BODY)).await;
    assert_eq!(replay.status, StatusCode::ACCEPTED);
    assert_eq!(replay.body, first.body, "byte for byte");
    assert_eq!(replay.headers["idempotent-replayed"], "true");
    for name in ["content-type", "location", "etag"] {
        assert_eq!(
            replay.headers.get_all(name).iter().collect::<Vec<_>>(),
            first.headers.get_all(name).iter().collect::<Vec<_>>(),
            "{name}"
        );
    }
    let links: Vec<_> = replay.headers.get_all("link").iter().map(|v| v.to_str().unwrap()).collect();
    assert_eq!(links, ["</a>; rel=\"a\"", "</b>; rel=\"b\""], "repeated headers keep their order");
    assert!(replay.headers.get("set-cookie").is_none(), "never replay a cookie");
    assert!(replay.headers.get("x-request-cost").is_none(), "not on the allow-list");
    assert_eq!(effects.count(), 1);
}

#[tokio::test]
async fn the_allow_list_is_per_operation() {
    let (store, _) = store();
    let effects = Effects::default();
    let op = Operation::named("op").replay_headers(["X-Request-Cost"]);
    let svc = service(layer(store.asynchronous(), op), created(effects.clone()));
    let first = send(&svc, post("/things", Some("k-1"), BODY)).await;
    let replay = send(&svc, post("/things", Some("k-1"), BODY)).await;
    assert_eq!(replay.headers["x-request-cost"], "7");
    assert!(replay.headers.get("content-type").is_none(), "the list replaces the defaults");
    assert!(replay.headers.get("location").is_none());
    assert_eq!(replay.body, first.body);
    assert_eq!(effects.count(), 1);
}

#[tokio::test]
async fn two_tenants_with_the_same_key_are_two_records() {
    let (store, _) = store();
    let effects = Effects::default();
    let svc = service(layer(store.asynchronous(), Operation::named("op")), created(effects.clone()));
    let mut other = post("/things", Some("k-1"), BODY);
    other.headers_mut().insert("x-test-tenant", http::HeaderValue::from_static("globex"));
    let acme = send(&svc, post("/things", Some("k-1"), BODY)).await;
    let globex = send(&svc, other).await;
    assert!(!acme.replayed() && !globex.replayed(), "neither sees the other's response");
    assert_ne!(acme.body, globex.body);
    assert_eq!(effects.count(), 2);
    let scope = |tenant| idemdb::Scope::new(tenant, "op").unwrap();
    let key = idemdb::IdempotencyKey::new("k-1").unwrap();
    assert!(store.get(&scope("acme"), &key).unwrap().is_some());
    assert!(store.get(&scope("globex"), &key).unwrap().is_some());
}

#[tokio::test]
async fn stored_5xx_are_replayed_by_default_and_released_when_the_policy_says_so() {
    let (store, _) = store();
    let effects = Effects::default();
    let failing = {
        let effects = effects.clone();
        move |_: Request<Body>| {
            effects.add();
            std::future::ready(Response::builder().status(500).body(Body::from("down")).unwrap())
        }
    };
    let svc = service(layer(store.asynchronous(), Operation::named("op")), failing.clone());
    assert_eq!(send(&svc, post("/x", Some("k-1"), BODY)).await.status, StatusCode::INTERNAL_SERVER_ERROR);
    let replay = send(&svc, post("/x", Some("k-1"), BODY)).await;
    assert!(replay.replayed());
    assert_eq!(replay.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(replay.body, "down");
    assert_eq!(effects.count(), 1, "Stripe's rule: the first response, 5xx included");
    assert_eq!(record(&store, "op", "k-1").unwrap().state.kind(), idemdb::StateKind::Failed);

    let release = Operation::named("op2")
        .responses(idemdb_http::ResponsePolicy::default().server_errors(idemdb_http::OnResponse::Release));
    let svc = service(layer(store.asynchronous(), release), failing);
    send(&svc, post("/x", Some("k-1"), BODY)).await;
    let again = send(&svc, post("/x", Some("k-1"), BODY)).await;
    assert!(!again.replayed());
    assert_eq!(effects.count(), 3, "a released key runs again");
}
