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
use idemdb::{
    AttentionCause, Canonicalizer, ErrorCode, IdempotencyKey, IntentState, IntentStateKind, ManualClock, Scope, Store,
};
use idemdb_http::client::{IdempotentClient, IntentRequest, Retry};

/// What the service received: requests per path, the headers and bodies of each, and the
/// requests per idempotency key (the first of a key is its one effect; the others replays).
#[derive(Clone, Default)]
struct Hits(
    Arc<Mutex<HashMap<String, u32>>>,
    Arc<Mutex<Vec<HeaderMap>>>,
    Arc<Mutex<Vec<String>>>,
    Arc<Mutex<HashMap<String, u32>>>,
);

impl Hits {
    fn of(&self, path: &str) -> u32 {
        self.0.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    /// The effects: keys the service received at least once.
    fn effects(&self) -> usize {
        self.3.lock().unwrap().len()
    }
}

/// The size of the answer of `/huge`: over the store's 1 MiB result limit.
const HUGE: usize = (1 << 20) + 1024;

fn problem(status: u16, slug: &str) -> Response {
    let body = format!(r#"{{"type":"urn:idemdb:problem:{slug}","title":"t","status":{status}}}"#);
    (StatusCode::from_u16(status).unwrap(), [("content-type", "application/problem+json")], body).into_response()
}

fn foreign_problem(status: u16, type_uri: &str) -> Response {
    let body = format!(r#"{{"type":"{type_uri}","title":"t","status":{status}}}"#);
    (StatusCode::from_u16(status).unwrap(), [("content-type", "application/problem+json")], body).into_response()
}

async fn answer(State(hits): State<Hits>, Path(path): Path<String>, headers: HeaderMap, body: String) -> Response {
    *hits.0.lock().unwrap().entry(path.clone()).or_default() += 1;
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let replay = {
        let mut keys = hits.3.lock().unwrap();
        let sends = keys.entry(key).or_default();
        *sends += 1;
        *sends > 1
    };
    hits.1.lock().unwrap().push(headers);
    hits.2.lock().unwrap().push(body);
    match path.as_str() {
        // An effect that takes a while; a key seen before is answered as a replay.
        "slow" => {
            tokio::time::sleep(Duration::from_millis(fastrand::u64(0..8))).await;
            let replayed = if replay { "true" } else { "false" };
            (StatusCode::CREATED, [("idempotent-replayed", replayed)], "done").into_response()
        }
        "huge" => (StatusCode::CREATED, "x".repeat(HUGE)).into_response(),
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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    (format!("http://{address}"), serve_on(listener))
}

fn serve_on(listener: tokio::net::TcpListener) -> Hits {
    let hits = Hits::default();
    let app = Router::new().route("/{path}", post(answer)).with_state(hits.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    hits
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

/// A field excluded from the fingerprint was dropped from the request sent: the stored
/// request was the canonical one. Exclusion is about the fingerprint only. Old code: the server
/// received `{"amount":"10.50"}`, without `trace_id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_excluded_from_the_fingerprint_is_still_sent() {
    let (base, hits) = serve().await;
    let store = Store::in_memory().unwrap();
    let client = IdempotentClient::new(store.clone(), reqwest::Client::new())
        .base_url(base.parse().unwrap())
        .canonicalizer(Canonicalizer::new().exclude("/body/trace_id").unwrap());
    let scope = Scope::new("me", "pay").unwrap();
    let key = IdempotencyKey::new("k-trace").unwrap();
    let request =
        |trace: &str| IntentRequest::post("/ok").json(serde_json::json!({"amount": "10.50", "trace_id": trace}));
    let answer = client.send_with_key(&scope, &key, request("t-1")).await.unwrap();
    assert_eq!(answer.status, StatusCode::CREATED);
    let sent: serde_json::Value = serde_json::from_str(&hits.2.lock().unwrap()[0]).unwrap();
    assert_eq!(
        sent,
        serde_json::json!({"amount": "10.50", "trace_id": "t-1"}),
        "the excluded field reaches the server"
    );

    // Another trace id is the same intent: its recorded answer, nothing sent.
    let again = client.send_with_key(&scope, &key, request("t-2")).await.unwrap();
    assert_eq!(again, answer);
    assert_eq!(hits.of("ok"), 1);
    // A field that is not excluded still tells two requests apart.
    let other = IntentRequest::post("/ok").json(serde_json::json!({"amount": "99", "trace_id": "t-1"}));
    let error = client.send_with_key(&scope, &key, other).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::KeyMismatch);
    assert_eq!(hits.of("ok"), 1);
}

/// A final answer over the store's result limit (1 MiB) was never recorded: the store refused
/// it, the intent stayed pending and every resume sent it again. Old code: the call failed with
/// the store's `IDEMDB_TOO_LARGE`, and each resume was one more send (2 sends after one resume).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_answer_too_large_to_store_needs_attention_at_once_and_is_not_resent() {
    let (base, hits) = serve().await;
    let store = Store::in_memory().unwrap();
    let noticed = Arc::new(Mutex::new(0));
    let seen = noticed.clone();
    let client = IdempotentClient::new(store.clone(), reqwest::Client::new())
        .base_url(base.parse().unwrap())
        .retry(fast())
        .on_needs_attention(move |_| *seen.lock().unwrap() += 1);
    let scope = Scope::new("me", "pay").unwrap();
    let error = client.send(&scope, IntentRequest::post("/huge").text("x")).await.unwrap_err();
    assert_eq!(error.needs_attention(), Some(AttentionCause::AnswerTooLarge), "{error}");
    let answer = error.answer().unwrap();
    assert_eq!((answer.status, answer.body.len()), (StatusCode::CREATED, HUGE), "the caller gets the answer whole");
    assert_eq!(*noticed.lock().unwrap(), 1);
    assert!(client.resume_pending().await.unwrap().is_empty());
    assert_eq!(hits.of("huge"), 1, "sent once");
    let intent = &store.all_intents().unwrap()[0];
    let IntentState::NeedsAttention { response: Some(kept), .. } = &intent.state else { panic!("{intent:?}") };
    assert_eq!((kept.status, kept.body.len()), (201, 0), "its status and headers are kept, not the body");
}

/// An outage spent the whole budget: each refused connection was an attempt, so an intent
/// that never reached the server came to need attention and was not sent when the server came
/// back. Old code: after 4 calls against the stopped server the intent needed attention
/// (retries_exhausted, 4 attempts charged) and the server never received it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_charges_one_attempt_and_the_intent_is_sent_once_the_server_is_back() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener); // nothing listens: each connection is refused
    let store = Store::in_memory().unwrap();
    let client = IdempotentClient::new(store.clone(), reqwest::Client::new())
        .base_url(format!("http://{address}").parse().unwrap())
        .retry(fast().max_attempts(3).attempts_per_intent(4));
    let scope = Scope::new("me", "pay").unwrap();
    let error = client.send(&scope, IntentRequest::post("/ok").text("x")).await.unwrap_err();
    assert!(error.is_retries_exhausted(), "{error}");
    for _ in 0..3 {
        let resumed = client.resume_pending().await.unwrap();
        assert!(resumed[0].result.as_ref().unwrap_err().is_retries_exhausted());
    }
    let waiting = store.pending_intents().unwrap();
    assert_eq!(waiting[0].attempts, 1, "12 refused sends, the first of the outage charged");

    let hits = serve_on(tokio::net::TcpListener::bind(address).await.unwrap());
    let resumed = client.resume_pending().await.unwrap();
    assert_eq!(resumed[0].result.as_ref().unwrap().status, StatusCode::CREATED);
    assert_eq!(hits.of("ok"), 1, "sent once the server is back");
    let done = store.intent(&scope, &waiting[0].key).unwrap().unwrap();
    assert_eq!(done.attempts, 2, "the send that reached it is charged");
}

/// The budget is time as well as count: an intent sent without a final answer for longer than
/// `Retry::max_pending` needs attention instead of being sent again. Old code had no time
/// budget: the resume below sent it a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intent_pending_longer_than_its_time_budget_needs_attention_and_is_not_resent() {
    let (base, hits) = serve().await;
    let clock = ManualClock::new(1_700_000_000_000);
    let store = Store::builder().clock(clock.clone()).in_memory().unwrap();
    let client = IdempotentClient::new(store.clone(), reqwest::Client::new())
        .base_url(base.parse().unwrap())
        .retry(fast().max_attempts(1).attempts_per_intent(100).max_pending(Duration::from_secs(3600)));
    let scope = Scope::new("me", "pay").unwrap();
    assert!(client.send(&scope, IntentRequest::post("/busy")).await.unwrap_err().is_retries_exhausted());
    clock.advance(Duration::from_secs(3600));
    let resumed = client.resume_pending().await.unwrap();
    let error = resumed[0].result.as_ref().unwrap_err();
    assert_eq!(error.needs_attention(), Some(AttentionCause::RetriesExhausted), "{error}");
    assert_eq!(hits.of("busy"), 1, "not sent after its time ran out");
    // Reopened by a person, it gets a new budget and is sent.
    store.reopen_intent(&scope, &resumed[0].intent.key).unwrap();
    client.resume_pending().await.unwrap();
    assert_eq!(hits.of("busy"), 2);
}

/// A call dropped at any point (a timeout around it firing mid-call) leaves its intent absent,
/// pending or final, never in a state nobody resumes: a resume then completes each one, and the
/// service sees one effect per intent and no key the store does not know.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_at_any_point_is_completed_once_by_a_resume() {
    let (base, hits) = serve().await;
    let store = Store::in_memory().unwrap();
    let client =
        IdempotentClient::new(store.clone(), reqwest::Client::new()).base_url(base.parse().unwrap()).retry(fast());
    let scope = Scope::new("me", "pay").unwrap();
    let mut rng = fastrand::Rng::with_seed(38);
    let mut delivered = HashMap::new();
    for i in 0..100 {
        let limit = Duration::from_micros(rng.u64(0..12_000));
        let key = IdempotencyKey::new(format!("k-{i}")).unwrap();
        let call = client.send_with_key(&scope, &key, IntentRequest::post("/slow").text(format!("{i}")));
        if let Ok(result) = tokio::time::timeout(limit, call).await {
            delivered.insert(key, result.unwrap());
        }
    }
    // A store call under way when its call was dropped still commits: wait until every intent
    // is final, resuming what is pending.
    for _ in 0..50 {
        client.resume_pending().await.unwrap();
        if store.pending_intents().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let intents = store.all_intents().unwrap();
    assert!(intents.iter().all(|i| i.state.kind() == IntentStateKind::Completed), "every intent completed");
    let keys: std::collections::HashSet<String> = intents.iter().map(|i| format!("\"{}\"", i.key.as_str())).collect();
    let received = hits.3.lock().unwrap().clone();
    assert!(received.keys().all(|key| keys.contains(key)), "no send without its intent stored");
    assert_eq!(hits.effects(), intents.len(), "each stored intent took effect once");
    for intent in &intents {
        let IntentState::Completed { response } = &intent.state else { unreachable!() };
        if let Some(answer) = delivered.get(&intent.key) {
            assert_eq!(answer.status.as_u16(), response.status, "a delivered answer is the recorded one");
        }
    }
    assert!(delivered.len() < 100 && intents.len() > delivered.len(), "some calls were cancelled: {}", delivered.len());
}
