//! What a handler can do with its lease, and what the key becomes when a handler fails.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body::Frame;
use idemdb::StateKind;
use idemdb::redb::{ReadableTableMetadata, TableDefinition};
use idemdb_http::{LeaseHandle, Operation};
use tower::{Layer, ServiceExt};

use crate::support::*;

const BODY: &str = r#"{"amount":"10.50"}"#;
const ROWS: TableDefinition<&str, u64> = TableDefinition::new("app_rows");

fn handle_of<S: Send + Sync + 'static>(request: &Request<Body>) -> LeaseHandle<S> {
    request.extensions().get::<LeaseHandle<S>>().expect("the layer inserts the lease handle").clone()
}

#[tokio::test]
async fn a_handler_that_completes_in_its_own_transaction_is_not_completed_again() {
    let (store, _) = store();
    let watched = Watched::new(store.clone());
    let effects = Effects::default();
    let handler = {
        let (store, effects) = (store.clone(), effects.clone());
        move |request: Request<Body>| {
            let (store, effects) = (store.clone(), effects.clone());
            async move {
                let handle: LeaseHandle<Watched> = handle_of(&request);
                effects.add();
                let mut headers = HeaderMap::new();
                headers.insert("content-type", HeaderValue::from_static("application/json"));
                headers.insert("x-trace", HeaderValue::from_static("not replayed"));
                let body = Bytes::from_static(b"{\"row\":1}");
                let stored = handle.stored_response(StatusCode::CREATED, &headers, body.clone());
                let (lease, key) = (handle.lease(), handle.key());
                // The business row and the completion: one commit.
                store
                    .asynchronous()
                    .write(move |txn| {
                        txn.tables_checkpointing()
                            .open_table(ROWS)
                            .map_err(idemdb::Error::from)?
                            .insert(key.as_str(), 1)
                            .map_err(idemdb::Error::from)?;
                        txn.complete(&lease, stored)
                    })
                    .await
                    .unwrap();
                handle.completed_by_handler().unwrap();
                let mut response = Response::new(Body::from(body));
                *response.status_mut() = StatusCode::CREATED;
                *response.headers_mut() = headers;
                response
            }
        }
    };
    let svc = service(layer(watched.clone(), Operation::named("op")), handler);
    let first = send(&svc, post("/rows", Some("k-1"), BODY)).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(watched.completes.load(Ordering::SeqCst), 0, "the layer did not complete again");
    assert_eq!(watched.fails.load(Ordering::SeqCst), 0);
    for _ in 0..3 {
        let replay = send(&svc, post("/rows", Some("k-1"), BODY)).await;
        assert!(replay.replayed());
        assert_eq!((replay.status, &replay.body), (first.status, &first.body));
        assert_eq!(replay.headers["content-type"], "application/json");
        assert!(replay.headers.get("x-trace").is_none(), "the handler's bytes used the operation's allow-list");
    }
    assert_eq!(effects.count(), 1);
    let read = store.write(|txn| {
        let table = txn.tables_checkpointing().open_table(ROWS).map_err(idemdb::Error::from)?;
        table.len().map_err(idemdb::Error::from)
    });
    assert_eq!(read.unwrap(), 1, "one row for the key");
    assert_eq!(record(&store, "op", "k-1").unwrap().state.kind(), StateKind::Completed);
}

#[tokio::test]
async fn a_panicking_handler_leaves_the_key_uncertain_never_runnable_twice() {
    let (store, _) = store();
    let effects = Effects::default();
    let handler = {
        let effects = effects.clone();
        move |_: Request<Body>| {
            let effects = effects.clone();
            async move {
                effects.add();
                if effects.count() > 0 {
                    panic!("bug in the handler");
                }
                Response::new(Body::empty())
            }
        }
    };
    let svc = service(layer(store.asynchronous(), Operation::named("op")), handler);
    let first = send(&svc, post("/p", Some("k-1"), BODY)).await;
    assert_eq!(first.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(first.problem(), "urn:idemdb:problem:internal");
    assert_eq!(record(&store, "op", "k-1").unwrap().state.kind(), StateKind::Uncertain);
    for _ in 0..2 {
        let retry = send(&svc, post("/p", Some("k-1"), BODY)).await;
        assert_eq!(retry.status, StatusCode::CONFLICT);
        assert_eq!(retry.problem(), "urn:idemdb:problem:needs-reconciliation");
    }
    assert_eq!(effects.count(), 1);
    // Other keys are unaffected by the panic.
    assert_eq!(send(&svc, post("/p", Some("k-2"), BODY)).await.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(effects.count(), 2);
}

#[tokio::test]
async fn a_service_error_leaves_the_key_uncertain_and_is_passed_on() {
    let (store, _) = store();
    let effects = Effects::default();
    let inner = tower::service_fn({
        let effects = effects.clone();
        move |_: Request<Body>| {
            effects.add();
            async { Err::<Response<Body>, std::io::Error>(std::io::Error::other("connection to the bank reset")) }
        }
    });
    let svc = layer(store.asynchronous(), Operation::named("op")).layer(inner);
    let error = svc.clone().oneshot(post("/p", Some("k-1"), BODY)).await.unwrap_err();
    assert_eq!(error.to_string(), "connection to the bank reset");
    assert_eq!(record(&store, "op", "k-1").unwrap().state.kind(), StateKind::Uncertain);
    let retry = svc.oneshot(post("/p", Some("k-1"), BODY)).await.unwrap();
    assert_eq!(retry.status(), StatusCode::CONFLICT);
    assert_eq!(effects.count(), 1);
}

/// A body with no known length, as a stream has.
struct Streamed(Option<Bytes>);

impl http_body::Body for Streamed {
    type Data = Bytes;
    type Error = std::io::Error;
    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.0.take().map(|bytes| Ok(Frame::data(bytes))))
    }
}

#[tokio::test]
async fn too_large_and_streamed_responses_reach_the_first_client_and_leave_the_key_uncertain() {
    let clock = idemdb::ManualClock::new(T0);
    let policy = idemdb::Policy::default().with_max_result_bytes(64);
    let store = idemdb::Store::builder().clock(clock).default_policy(policy).in_memory().unwrap();
    let effects = Effects::default();
    let handler = {
        let effects = effects.clone();
        move |request: Request<Body>| {
            effects.add();
            let streamed = request.uri().path() == "/stream";
            let body = if streamed {
                Body::new(Streamed(Some(Bytes::from_static(b"chunk"))))
            } else {
                Body::from(vec![b'x'; 1000])
            };
            std::future::ready(Response::builder().status(200).body(body).unwrap())
        }
    };
    let svc = service(layer(store.asynchronous(), Operation::new()), handler);
    let big = send(&svc, post("/big", Some("k-1"), BODY)).await;
    assert_eq!((big.status, big.body.len()), (StatusCode::OK, 1000), "the first client gets all of it");
    let stream = send(&svc, post("/stream", Some("k-2"), BODY)).await;
    assert_eq!(stream.body, "chunk");
    for (path, key) in [("/big", "k-1"), ("/stream", "k-2")] {
        let retry = send(&svc, post(path, Some(key), BODY)).await;
        assert_eq!(retry.status, StatusCode::CONFLICT, "{path}");
        assert_eq!(retry.problem(), "urn:idemdb:problem:needs-reconciliation");
        assert_eq!(record(&store, &format!("POST {path}"), key).unwrap().state.kind(), StateKind::Uncertain);
    }
    assert_eq!(effects.count(), 2);
}

#[tokio::test]
async fn a_handler_can_renew_release_or_mark_uncertain() {
    let (store, clock) = store();
    let effects = Effects::default();
    let handler = {
        let (effects, clock) = (effects.clone(), clock.clone());
        move |request: Request<Body>| {
            let (effects, clock) = (effects.clone(), clock.clone());
            async move {
                effects.add();
                let handle: LeaseHandle<idemdb::AsyncStore> = handle_of(&request);
                match request.uri().path() {
                    "/renew" => {
                        let before = handle.lease().expires_at();
                        clock.advance(Duration::from_secs(30));
                        let renewed = handle.renew().await.unwrap();
                        assert!(renewed.expires_at() > before);
                        assert_eq!(handle.lease(), renewed);
                        Response::new(Body::from("renewed"))
                    }
                    "/invalid" => {
                        handle.release().await.unwrap();
                        assert!(handle.completed_by_handler().unwrap_err().is_settled());
                        Response::builder().status(400).body(Body::from("bad amount")).unwrap()
                    }
                    _ => {
                        handle.mark_uncertain().await.unwrap();
                        assert!(handle.renew().await.unwrap_err().is_settled());
                        Response::builder().status(502).body(Body::from("provider timed out")).unwrap()
                    }
                }
            }
        }
    };
    let svc = service(layer(store.asynchronous(), Operation::new()), handler);
    assert_eq!(send(&svc, post("/renew", Some("k-1"), BODY)).await.body, "renewed");
    assert!(send(&svc, post("/renew", Some("k-1"), BODY)).await.replayed());

    // Released: not stored, so the corrected retry (or the same one) runs again.
    assert_eq!(send(&svc, post("/invalid", Some("k-2"), BODY)).await.status, StatusCode::BAD_REQUEST);
    let again = send(&svc, post("/invalid", Some("k-2"), BODY)).await;
    assert!(!again.replayed());
    assert_eq!(effects.count(), 3);

    assert_eq!(send(&svc, post("/uncertain", Some("k-3"), BODY)).await.status, StatusCode::BAD_GATEWAY);
    let retry = send(&svc, post("/uncertain", Some("k-3"), BODY)).await;
    assert_eq!(retry.problem(), "urn:idemdb:problem:needs-reconciliation");
    assert_eq!(effects.count(), 4);
    assert_eq!(record(&store, "POST /uncertain", "k-3").unwrap().state.kind(), StateKind::Uncertain);
}

#[tokio::test]
async fn a_handlers_400_or_release_leaves_no_binding_so_the_corrected_request_runs() {
    let (store, _) = store();
    let effects = Effects::default();
    // Refuses `"amount":"10.505"` before any effect: by its 400 alone (the default policy
    // releases it) on `/plain`, by `release()` and then 400 on `/released`; charges otherwise.
    let handler = {
        let effects = effects.clone();
        move |request: Request<Body>| {
            let effects = effects.clone();
            async move {
                let handle: LeaseHandle<idemdb::AsyncStore> = handle_of(&request);
                let path = request.uri().path().to_string();
                let body = axum::body::to_bytes(request.into_body(), 1024).await.unwrap();
                if body.windows(6).any(|w| w == b"10.505") {
                    if path == "/released" {
                        handle.release().await.unwrap();
                    }
                    return Response::builder().status(400).body(Body::from("bad amount")).unwrap();
                }
                effects.add();
                Response::builder().status(201).body(Body::from("charged")).unwrap()
            }
        }
    };
    let svc = service(layer(store.asynchronous(), Operation::new()), handler);
    for path in ["/plain", "/released"] {
        let refused = send(&svc, post(path, Some("k-1"), r#"{"amount":"10.505"}"#)).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{path}");
        assert_eq!(record(&store, &format!("POST {path}"), "k-1").unwrap().state.kind(), StateKind::Released);
        let fixed = send(&svc, post(path, Some("k-1"), r#"{"amount":"10.50"}"#)).await;
        assert_eq!((fixed.status, fixed.replayed()), (StatusCode::CREATED, false), "{path}: {:?}", fixed.body);
        assert!(send(&svc, post(path, Some("k-1"), r#"{"amount":"10.50"}"#)).await.replayed(), "{path}");
        let first_body = send(&svc, post(path, Some("k-1"), r#"{"amount":"10.505"}"#)).await;
        assert_eq!(first_body.status, StatusCode::UNPROCESSABLE_ENTITY, "{path}: bound to the corrected body now");
    }
    assert_eq!(effects.count(), 2, "one charge per key");
}
