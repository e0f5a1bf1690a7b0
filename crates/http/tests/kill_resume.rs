//! The Rust client killed with SIGKILL at random points and resumed, twenty times, against a
//! lossy service (the first answer of every key is lost after its effect; some keys are busy
//! first): every intent ends completed, none is sent after it was final, and the service
//! performs exactly one effect per key. The child is this test binary run again (the
//! `kill_resume_child` test, which does nothing unless its environment says so).

#![allow(clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use idemdb::{IdempotencyKey, IntentStateKind, Scope, Store};
use idemdb_http::client::{IdempotentClient, IntentRequest, Retry};

const PAYMENTS: usize = 24;
const KILLS: usize = 20;

#[derive(Clone, Default)]
struct Service {
    /// Effects per key: the service performs one per key and replays afterwards.
    effects: Arc<Mutex<HashMap<String, u32>>>,
    /// Every key received, in order.
    seen: Arc<Mutex<Vec<String>>>,
    /// Keys already answered 503 once.
    busy: Arc<Mutex<HashSet<String>>>,
}

async fn pay(State(service): State<Service>, headers: HeaderMap) -> Response {
    let Some(key) = headers.get("idempotency-key").and_then(|v| v.to_str().ok()) else {
        return (StatusCode::BAD_REQUEST, "key required").into_response();
    };
    let key = key.trim_matches('"').to_string();
    service.seen.lock().unwrap().push(key.clone());
    let n: usize = key.trim_start_matches("pay-").parse().unwrap_or(0);
    if n.is_multiple_of(5) && service.busy.lock().unwrap().insert(key.clone()) {
        return (StatusCode::SERVICE_UNAVAILABLE, "busy").into_response();
    }
    let first = {
        let mut effects = service.effects.lock().unwrap();
        let count = effects.entry(key.clone()).or_default();
        let first = *count == 0;
        if first {
            *count += 1; // the effect
        }
        first
    };
    if first {
        // The effect happened; its answer is lost (the client's attempt times out first).
        tokio::time::sleep(Duration::from_millis(400)).await;
        return (StatusCode::CREATED, "late").into_response();
    }
    (StatusCode::CREATED, [("idempotent-replayed", "true")], format!("charge for {key}")).into_response()
}

fn scope() -> Scope {
    Scope::new("me", "pay").unwrap()
}

/// The child: resume what is pending, then send every payment (a finished one answers from the
/// store without a send), printing each final answer.
/// What the child prints once its store is open.
const CHILD_OPEN: &str = "idemdb-kill-child: store open";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_resume_child() {
    let (Ok(path), Ok(base)) = (std::env::var("IDEMDB_KILL_CHILD_STORE"), std::env::var("IDEMDB_KILL_CHILD_BASE"))
    else {
        return;
    };
    let store = Store::open(&path).unwrap();
    // The parent times its kill from here, so a slow start on a loaded machine cannot use it up.
    let mut out = std::io::stdout();
    writeln!(out, "{CHILD_OPEN}").unwrap();
    out.flush().unwrap();
    let client = IdempotentClient::new(store, reqwest::Client::new()).base_url(base.parse().unwrap()).retry(
        Retry::default()
            .max_attempts(6)
            .base_delay(Duration::from_millis(5))
            .max_delay(Duration::from_millis(40))
            .timeout(Duration::from_millis(100)),
    );
    client.resume_pending().await.unwrap();
    for n in 0..PAYMENTS {
        let key = IdempotencyKey::new(format!("pay-{n:02}")).unwrap();
        let answer =
            client.send_with_key(&scope(), &key, IntentRequest::post("/pay").text(format!("payment {n}"))).await;
        let mut out = std::io::stdout();
        writeln!(out, "final pay-{n:02} {:?}", answer.map(|a| a.status)).unwrap();
        out.flush().unwrap();
    }
}

/// The states of the store's intents (the store is closed again before the next child).
fn states(path: &std::path::Path) -> HashMap<String, IntentStateKind> {
    if !path.exists() {
        return HashMap::new();
    }
    let store = Store::open(path).unwrap();
    store.all_intents().unwrap().into_iter().map(|i| (i.key.as_str().to_string(), i.state.kind())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_twenty_times_and_resumed_one_effect_per_key_none_resent_after_final() {
    let service = Service::default();
    let app = Router::new().route("/pay", post(pay)).with_state(service.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("client.idemdb");
    let exe = std::env::current_exe().unwrap();
    let run = |kill_after: Option<Duration>| {
        let (exe, path, base) = (exe.clone(), path.clone(), base.clone());
        async move {
            let mut child = Command::new(exe)
                .args(["--exact", "kill_resume_child", "--nocapture", "--test-threads=1"])
                .env("IDEMDB_KILL_CHILD_STORE", &path)
                .env("IDEMDB_KILL_CHILD_BASE", &base)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            // Read the child's stdout to its end on a thread of its own, saying when the store
            // is open.
            let (opened, open) = tokio::sync::oneshot::channel();
            let stdout = child.stdout.take().unwrap();
            std::thread::spawn(move || {
                let mut opened = Some(opened);
                for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
                    if line.contains(CHILD_OPEN)
                        && let Some(opened) = opened.take()
                    {
                        let _ = opened.send(());
                    }
                }
            });
            match kill_after {
                Some(after) => {
                    let _ = open.await;
                    tokio::time::sleep(after).await;
                    child.kill().unwrap(); // SIGKILL
                    child.wait().unwrap();
                }
                None => {
                    let status = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
                    assert!(status.success());
                }
            }
        }
    };
    // A fixed seed: the same kill points on every run.
    let mut seed: u64 = 20_261_202;
    let mut resent_after_final = Vec::new();
    let mut killed_mid_flight = 0;
    for _ in 0..KILLS {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let final_before: HashSet<String> =
            states(&path).into_iter().filter(|(_, s)| *s != IntentStateKind::Pending).map(|(k, _)| k).collect();
        let from = service.seen.lock().unwrap().len();
        run(Some(Duration::from_millis((seed >> 33) % 200))).await;
        let sent: Vec<String> = service.seen.lock().unwrap()[from..].to_vec();
        resent_after_final.extend(sent.into_iter().filter(|key| final_before.contains(key)));
        if states(&path).values().any(|s| *s == IntentStateKind::Pending) {
            killed_mid_flight += 1;
        }
    }
    let final_before: HashSet<String> =
        states(&path).into_iter().filter(|(_, s)| *s != IntentStateKind::Pending).map(|(k, _)| k).collect();
    let from = service.seen.lock().unwrap().len();
    run(None).await;
    resent_after_final
        .extend(service.seen.lock().unwrap()[from..].iter().filter(|k| final_before.contains(*k)).cloned());

    assert_eq!(resent_after_final, Vec::<String>::new(), "no intent is sent after it is final");
    let end = states(&path);
    assert_eq!(end.len(), PAYMENTS);
    assert!(end.values().all(|s| *s == IntentStateKind::Completed), "{end:?}");
    let effects = service.effects.lock().unwrap().clone();
    let expected: HashMap<String, u32> = (0..PAYMENTS).map(|n| (format!("pay-{n:02}"), 1)).collect();
    assert_eq!(effects, expected, "exactly one effect per key, and no other key");
    let sends = service.seen.lock().unwrap().len();
    assert!(sends > PAYMENTS, "the lossy service made the client send again ({sends} sends)");
    assert!(killed_mid_flight >= 1, "some kill left an intent pending");
    println!("{KILLS} kills ({killed_mid_flight} left an intent pending), {sends} sends for {PAYMENTS} effects");
}
