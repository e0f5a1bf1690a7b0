//! A client that hangs up never strands its key: once a key is reserved, the handler and the
//! settlement run to their end on a task of their own, whatever happens to the request's
//! future; a panic anywhere after the reservation settles the record (uncertain), never
//! leaves it in progress for the whole lease.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Frame;
use idemdb::{StateKind, Store};
use idemdb_http::Operation;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;

use crate::support::*;

const BODY: &str = r#"{"amount":"10.50"}"#;

/// A handler that counts its effect half-way through a few awaits, then answers 201: a future
/// dropped at any of its await points would cut it between its effect and its answer.
fn slow_handler(
    effects: Effects,
) -> impl Fn(Request<Body>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> + Clone + Send + Sync {
    move |_request: Request<Body>| {
        let effects = effects.clone();
        Box::pin(async move {
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(2)).await;
            effects.add();
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(2)).await;
            Response::builder().status(StatusCode::CREATED).body(Body::from(r#"{"paid":true}"#)).unwrap()
        })
    }
}

/// Waits until the record of `key` exists and is no longer in progress (at most 10 s), and
/// returns its state (`None`: no record after 10 s).
async fn settled(store: &Store, operation: &str, key: &str) -> Option<StateKind> {
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let state = record(store, operation, key).map(|r| r.state.kind());
        let done = state.is_some_and(|state| state != StateKind::InProgress);
        if done || tokio::time::Instant::now() >= until {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Polls `future` `polls` times (yielding to the runtime between polls), then drops it.
async fn poll_then_drop<F: Future + Unpin>(mut future: F, polls: usize) {
    for _ in 0..polls {
        let waker = std::task::Waker::noop();
        if Pin::new(&mut future).poll(&mut Context::from_waker(waker)).is_ready() {
            return;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_micros(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_future_dropped_at_any_point_leaves_its_key_settled_or_untouched() {
    let (store, _) = store();
    let effects = Effects::default();
    let svc = service(layer(store.asynchronous(), Operation::named("pay")), slow_handler(effects.clone()));
    let mut completed = 0;
    for polls in 0..40 {
        let key = format!("k-{polls}");
        let before = effects.count();
        let future = Box::pin(svc.clone().oneshot(post("/p", Some(&key), BODY)));
        poll_then_drop(future, polls).await;
        if polls == 0 {
            // Dropped before its first poll: nothing was reserved, nothing ran.
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(record(&store, "pay", &key).is_none());
            assert_eq!(effects.count(), before, "no record, no effect");
            continue;
        }
        match settled(&store, "pay", &key).await {
            None => panic!("a request polled {polls} times left no record"),
            Some(state) => {
                assert_eq!(state, StateKind::Completed, "a reserved key runs to its end ({polls} polls)");
                assert_eq!(effects.count(), before + 1, "one effect ({polls} polls)");
                completed += 1;
                // The retry the client sends after its hang-up is a replay, never a second run.
                let retry = send(&svc, post("/p", Some(&key), BODY)).await;
                assert_eq!(retry.status, StatusCode::CREATED);
                assert!(retry.replayed(), "{polls} polls");
            }
        }
    }
    assert_eq!(effects.count(), completed);
    assert_eq!(completed, 39, "every future polled at least once reserved and finished");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_hang_up_over_a_real_socket_never_strand_their_keys() {
    let (store, _) = store();
    let effects = Effects::default();
    let svc = service(layer(store.asynchronous(), Operation::named("pay")), slow_handler(effects.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let router = axum::Router::new().fallback_service(svc.clone());
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    let keys = 40;
    for n in 0..keys {
        let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
        let request = format!(
            "POST /p HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\nx-test-tenant: acme\r\n\
             idempotency-key: \"h-{n}\"\r\ncontent-length: {}\r\n\r\n{BODY}",
            BODY.len()
        );
        socket.write_all(request.as_bytes()).await.unwrap();
        // Hang up 0–4 ms after sending: before, during or after the handler's effect.
        tokio::time::sleep(Duration::from_micros(100 * (n % 40))).await;
        drop(socket);
    }
    for n in 0..keys {
        let state = settled(&store, "pay", &format!("h-{n}")).await;
        assert_eq!(state, Some(StateKind::Completed), "key h-{n} reached its answer without its client");
    }
    assert_eq!(effects.count(), keys as usize, "one effect per key");
    // Every retry is a replay of the 201, over the same socket path.
    for n in 0..keys {
        let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
        let request = format!(
            "POST /p HTTP/1.1\r\nhost: test\r\nconnection: close\r\ncontent-type: application/json\r\n\
             x-test-tenant: acme\r\nidempotency-key: \"h-{n}\"\r\ncontent-length: {}\r\n\r\n{BODY}",
            BODY.len()
        );
        socket.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        socket.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
        assert!(answer.to_ascii_lowercase().contains("idempotent-replayed: true"), "{answer}");
    }
    assert_eq!(effects.count(), keys as usize, "the retries ran nothing");
    server.abort();
}

/// A response body that panics when the layer collects it.
struct Exploding;

impl http_body::Body for Exploding {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        panic!("a bug while producing the response body")
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(8)
    }
}

#[tokio::test]
async fn a_panic_while_the_layer_collects_the_body_settles_the_key_uncertain() {
    let (store, _) = store();
    let effects = Effects::default();
    let handler = {
        let effects = effects.clone();
        move |_: Request<Body>| {
            effects.add();
            std::future::ready(Response::builder().status(StatusCode::CREATED).body(Body::new(Exploding)).unwrap())
        }
    };
    let svc = service(layer(store.asynchronous(), Operation::named("op")), handler);
    let first = send(&svc, post("/p", Some("k-1"), BODY)).await;
    assert_eq!(first.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(first.problem(), "urn:idemdb:problem:internal");
    assert_eq!(record(&store, "op", "k-1").unwrap().state.kind(), StateKind::Uncertain, "not in progress");
    let retry = send(&svc, post("/p", Some("k-1"), BODY)).await;
    assert_eq!(retry.status, StatusCode::CONFLICT);
    assert_eq!(retry.problem(), "urn:idemdb:problem:needs-reconciliation");
    assert_eq!(effects.count(), 1);
}
