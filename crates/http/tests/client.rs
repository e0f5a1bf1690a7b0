//! The Rust client against a service that answers each final problem type: every intent
//! ends completed or needing attention, and none is sent again once it is final. Each test
//! counts the requests the service received.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use idemdb::{AttentionCause, ErrorCode, IntentState, IntentStateKind, Scope, Store};
use idemdb_http::client::{IdempotentClient, IntentRequest, Retry};

#[derive(Clone, Default)]
struct Hits(Arc<Mutex<HashMap<String, u32>>>, Arc<Mutex<Vec<HeaderMap>>>);

impl Hits {
    fn of(&self, path: &str) -> u32 {
        self.0.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

fn problem(status: u16, slug: &str) -> Response {
    let body = format!(r#"{{"type":"urn:idemdb:problem:{slug}","title":"t","status":{status}}}"#);
    (StatusCode::from_u16(status).unwrap(), [("content-type", "application/problem+json")], body).into_response()
}

fn foreign_problem(status: u16, type_uri: &str) -> Response {
    let body = format!(r#"{{"type":"{type_uri}","title":"t","status":{status}}}"#);
    (StatusCode::from_u16(status).unwrap(), [("content-type", "application/problem+json")], body).into_response()
}

async fn answer(State(hits): State<Hits>, Path(path): Path<String>, headers: HeaderMap) -> Response {
    *hits.0.lock().unwrap().entry(path.clone()).or_default() += 1;
    hits.1.lock().unwrap().push(headers);
    match path.as_str() {
        "replayed-500" => {
            (StatusCode::INTERNAL_SERVER_ERROR, [("idempotent-replayed", "true")], "stored failure").into_response()
        }
        "reconcile" => problem(409, "needs-reconciliation"),
        "expired" => problem(410, "expired"),
        "provider" => problem(409, "provider-key-expired"),
        "conflict" => problem(422, "key-mismatch"),
        "not-found" => (StatusCode::NOT_FOUND, "no such account").into_response(),
        "busy" => (StatusCode::SERVICE_UNAVAILABLE, "busy").into_response(),
        // Another service's problems whose types happen to end like idemdb's.
        "other-unavailable" => foreign_problem(400, "https://other.example/problems/unavailable"),
        "other-closed" => foreign_problem(403, "https://other.example/problems/closed"),
        "other-expired" => foreign_problem(401, "https://other.example/problems/expired"),
        "other-corrupt" => foreign_problem(404, "https://other.example/problems/corrupt"),
        // The service's own base, told to the client.
        "based-reconcile" => foreign_problem(409, "https://api.example.com/problems/needs-reconciliation"),
        _ => (StatusCode::CREATED, "ok").into_response(),
    }
}

async fn serve() -> (String, Hits) {
    let hits = Hits::default();
    let app = Router::new().route("/{path}", post(answer)).with_state(hits.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{address}"), hits)
}

fn fast() -> Retry {
    Retry::default().base_delay(Duration::from_millis(1)).max_delay(Duration::from_millis(5))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_final_answer_ends_the_intent_and_nothing_is_resent() {
    let (base, hits) = serve().await;
    let store = Store::in_memory().unwrap();
    let noticed = Arc::new(Mutex::new(Vec::new()));
    let seen = noticed.clone();
    let client = IdempotentClient::new(store.clone(), reqwest::Client::new())
        .base_url(base.parse().unwrap())
        .retry(fast().attempts_per_intent(3))
        .on_needs_attention(move |intent| seen.lock().unwrap().push(intent.key.clone()));
    let scope = Scope::new("me", "pay").unwrap();
    let send = |path: &str| client.send(&scope, IntentRequest::post(format!("/{path}")).text(path.to_string()));

    let replayed = send("replayed-500").await.unwrap();
    assert_eq!((replayed.status, replayed.replayed()), (StatusCode::INTERNAL_SERVER_ERROR, true));
    assert_eq!(send("not-found").await.unwrap().status, StatusCode::NOT_FOUND);
    assert!(send("conflict").await.unwrap_err().is_conflict());
    for (path, cause) in [
        ("reconcile", AttentionCause::NeedsReconciliation),
        ("expired", AttentionCause::Expired),
        ("provider", AttentionCause::ProviderKeyExpired),
        ("busy", AttentionCause::RetriesExhausted),
    ] {
        let error = send(path).await.unwrap_err();
        assert_eq!((error.code(), error.needs_attention()), (ErrorCode::NeedsAttention, Some(cause)), "{path}");
        assert!(error.answer().is_some(), "{path}: the last answer is kept");
    }
    let expected = [("replayed-500", 1), ("not-found", 1), ("conflict", 1), ("reconcile", 1), ("expired", 1)];
    for (path, count) in expected.into_iter().chain([("provider", 1), ("busy", 3)]) {
        assert_eq!(hits.of(path), count, "{path}");
    }
    assert_eq!(noticed.lock().unwrap().len(), 4, "the app is told of each intent that needs attention");

    // Final means final: nothing is pending, and a resume sends nothing.
    assert!(client.resume_pending().await.unwrap().is_empty());
    for (path, count) in expected.into_iter().chain([("provider", 1), ("busy", 3)]) {
        assert_eq!(hits.of(path), count, "{path} after resume");
    }
    let states: Vec<IntentStateKind> = store.all_intents().unwrap().iter().map(|i| i.state.kind()).collect();
    assert_eq!(states.len(), 7);
    assert!(states.iter().all(|s| matches!(s, IntentStateKind::Completed | IntentStateKind::NeedsAttention)));

    // A person reconciles and reopens one: it is sent again with a new budget, and abandons another.
    let waiting = store.intents_needing_attention().unwrap();
    let reconcile = waiting.iter().find(|i| i.request.windows(9).any(|w| w == b"reconcile")).unwrap();
    let parked = store.intent(&reconcile.scope, &reconcile.key).unwrap().unwrap();
    let IntentState::NeedsAttention { response: Some(last), .. } = &parked.state else { panic!("{parked:?}") };
    assert_eq!(last.status, 409);
    store.reopen_intent(&reconcile.scope, &reconcile.key).unwrap();
    let resumed = client.resume_pending().await.unwrap();
    assert_eq!(resumed.len(), 1);
    assert_eq!(hits.of("reconcile"), 2);
}

/// Another service's problem type was classified by its last path segment ahead of the
/// status: a 400 or 403 ending `/unavailable` or `/closed` was resent until the budget ran out,
/// a 401 ending `/expired` or a 404 ending `/corrupt` became needs-attention. The status
/// decides; idemdb's own types are read in full, under the base the client is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_services_problem_types_are_classified_by_their_status() {
    let (base, hits) = serve().await;
    let store = Store::in_memory().unwrap();
    let client = IdempotentClient::new(store.clone(), reqwest::Client::new())
        .base_url(base.parse().unwrap())
        .retry(fast().attempts_per_intent(5))
        .problem_base("https://api.example.com/problems/");
    let scope = Scope::new("me", "pay").unwrap();
    let send = |path: &str| client.send(&scope, IntentRequest::post(format!("/{path}")).text(path.to_string()));
    for (path, status) in
        [("other-unavailable", 400), ("other-closed", 403), ("other-expired", 401), ("other-corrupt", 404)]
    {
        let answer = send(path).await.unwrap();
        assert_eq!(answer.status.as_u16(), status, "{path}: the answer is final");
        assert_eq!(hits.of(path), 1, "{path}: sent once");
    }
    let error = send("based-reconcile").await.unwrap_err();
    assert_eq!(error.needs_attention(), Some(AttentionCause::NeedsReconciliation));
    assert_eq!(hits.of("based-reconcile"), 1);
    let states: Vec<IntentStateKind> = store.all_intents().unwrap().iter().map(|i| i.state.kind()).collect();
    assert_eq!(states.iter().filter(|s| **s == IntentStateKind::Completed).count(), 4, "{states:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attempt_budget_counts_across_resumes() {
    let (base, hits) = serve().await;
    let store = Store::in_memory().unwrap();
    let client = IdempotentClient::new(store.clone(), reqwest::Client::new())
        .base_url(base.parse().unwrap())
        .retry(fast().max_attempts(2).attempts_per_intent(5));
    let scope = Scope::new("me", "pay").unwrap();
    let error = client.send(&scope, IntentRequest::post("/busy")).await.unwrap_err();
    assert!(error.is_retries_exhausted(), "{error}");
    let first = client.resume_pending().await.unwrap();
    assert_eq!(first[0].intent.attempts, 2, "the count is kept across resumes");
    let second = client.resume_pending().await.unwrap();
    assert_eq!(second[0].result.as_ref().unwrap_err().needs_attention(), Some(AttentionCause::RetriesExhausted));
    assert_eq!(hits.of("busy"), 5);
    assert!(client.resume_pending().await.unwrap().is_empty());
    assert_eq!(hits.of("busy"), 5, "never resent once it needs attention");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_intent_reaches_the_service_at_its_new_address() {
    let (base, hits) = serve().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("intents.idemdb");
    let scope = Scope::new("me", "pay").unwrap();
    {
        let gone = IdempotentClient::new(Store::open(&file).unwrap(), reqwest::Client::new())
            .base_url("http://127.0.0.1:9/".parse().unwrap())
            .retry(fast().max_attempts(1));
        let error = gone.send(&scope, IntentRequest::post("/moved").text("x")).await.unwrap_err();
        assert!(error.is_retries_exhausted(), "{error}");
    }
    let moved =
        IdempotentClient::new(Store::open(&file).unwrap(), reqwest::Client::new()).base_url(base.parse().unwrap());
    let resumed = moved.resume_pending().await.unwrap();
    assert_eq!(resumed[0].result.as_ref().unwrap().status, StatusCode::CREATED);
    assert_eq!(hits.of("moved"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_header_reaches_the_server_and_never_the_store_file() {
    let (base, hits) = serve().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("intents.idemdb");
    let scope = Scope::new("me", "pay").unwrap();
    {
        let client = IdempotentClient::new(Store::open(&file).unwrap(), reqwest::Client::new())
            .base_url(base.parse().unwrap())
            .transport_headers(|_| {
                let mut headers = http::HeaderMap::new();
                headers.insert("authorization", "Bearer tok-SECRET-from-callback".parse().unwrap());
                headers
            });
        let request = IntentRequest::post("/ok")
            .header("x-api-key", "sk-SECRET-in-request")
            .header("content-type", "text/plain")
            .text("x");
        client.send(&scope, request).await.unwrap();
    }
    let sent = hits.1.lock().unwrap().pop().unwrap();
    assert_eq!(sent["x-api-key"], "sk-SECRET-in-request");
    assert_eq!(sent["authorization"], "Bearer tok-SECRET-from-callback");
    let bytes = std::fs::read(&file).unwrap();
    for secret in [&b"SECRET"[..], b"x-api-key", b"authorization"] {
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret),
            "{} in the store file",
            String::from_utf8_lossy(secret)
        );
    }
    assert!(bytes.windows(10).any(|w| w == b"text/plain"), "the allowed header is stored");
}
