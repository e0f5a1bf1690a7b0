//! What the layer writes to logs: keys and tenants as keyed hashes, never raw.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use http::StatusCode;
use idemdb::{IdempotencyKey, Scope};
use idemdb_http::Operation;

use crate::support::*;

/// A `tracing` writer that keeps everything in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// What every test of this binary logged: one process-wide subscriber (a subscriber of one
/// thread would race with the interest that other threads' callsites cache).
fn captured() -> &'static Captured {
    static CAPTURED: OnceLock<Captured> = OnceLock::new();
    CAPTURED.get_or_init(|| {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber of this test binary");
        captured
    })
}

#[tokio::test]
async fn the_tenant_and_the_key_reach_logs_as_keyed_hashes_only() {
    let captured = captured();

    let (store, _) = store();
    let effects = Effects::default();
    let svc = service(layer(store.asynchronous(), Operation::named("op")), created(effects.clone()));
    let key = "k-logged-1f2e";
    assert_eq!(send(&svc, post("/things", Some(key), r#"{"a":1}"#)).await.status, StatusCode::CREATED);
    // The same key with another body: refused inside the request's span, which logs.
    let refused = send(&svc, post("/things", Some(key), r#"{"a":2}"#)).await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(effects.count(), 1);

    let logs = captured.text();
    let tenant_hash = store.tenant_hash("acme").to_string();
    let scope = Scope::new("acme", "op").unwrap();
    let key_hash = store.key_hash(&scope, &IdempotencyKey::new(key).unwrap()).to_string();
    assert!(logs.contains(&format!("tenant_hash={tenant_hash}")), "the tenant's hash is logged: {logs}");
    assert!(logs.contains(&format!("key_hash={key_hash}")), "the key's hash is logged: {logs}");
    assert!(!logs.contains("acme"), "the raw tenant never is: {logs}");
    assert!(!logs.contains(key), "the raw key never is: {logs}");
    assert_ne!(tenant_hash, key_hash);
}

#[tokio::test]
async fn with_the_audit_trail_off_decisions_still_reach_a_listening_subscriber() {
    let captured = captured();

    let store = idemdb::Store::builder().audit(false).in_memory().unwrap();
    let effects = Effects::default();
    let svc = service(layer(store.asynchronous(), Operation::named("op-unaudited")), created(effects.clone()));
    let key = "k-unaudited-7c1d";
    assert_eq!(send(&svc, post("/things", Some(key), r#"{"a":1}"#)).await.status, StatusCode::CREATED);
    // A replay, answered from a read snapshot: its event is logged though none is stored.
    assert_eq!(send(&svc, post("/things", Some(key), r#"{"a":1}"#)).await.status, StatusCode::CREATED);
    assert_eq!(effects.count(), 1);

    let scope = Scope::new("acme", "op-unaudited").unwrap();
    let key_hash = store.key_hash(&scope, &IdempotencyKey::new(key).unwrap()).to_string();
    let logs = captured.text();
    let lines: Vec<&str> = logs.lines().filter(|line| line.contains(&format!("key_hash={key_hash}"))).collect();
    assert!(
        lines.iter().any(|line| line.contains("event=\"reserved\"") || line.contains("event=reserved")),
        "{lines:?}"
    );
    assert!(lines.iter().any(|line| line.contains("replayed")), "the replay is logged: {lines:?}");
    assert!(store.audit_events(100).unwrap().is_empty(), "the audit trail is off: nothing is stored");
}

/// An operator's resolution is logged with the tenant's keyed hash, and the admin API's JSON
/// never spells the tenant (in the payments example it is the client's bearer token); the
/// operator names the entry by the key hash the queue lists. Old code: `tenant=<raw>` in the
/// resolution's log line and `"tenant": <raw>` in the queue and the record view.
#[tokio::test]
async fn operator_resolutions_and_the_admin_views_name_the_tenant_by_its_hash_only() {
    use axum::body::Body;
    use http::{Method, Request, Response};
    use http_body_util::BodyExt;
    use idemdb_http::LeaseHandle;
    use tower::ServiceExt;

    let captured = captured();
    let (store, _) = store();
    let tenant = "sk_live_bearer_6d0e41";
    let handler = |request: Request<Body>| async move {
        let handle = request.extensions().get::<LeaseHandle<idemdb::AsyncStore>>().cloned().unwrap();
        handle.mark_uncertain().await.unwrap();
        Response::builder().status(502).body(Body::from("provider timed out")).unwrap()
    };
    let svc = service(layer(store.asynchronous(), Operation::named("pay")), handler);
    let mut request = post("/pay", Some("k-hashed"), r#"{"a":1}"#);
    request.headers_mut().insert("x-test-tenant", tenant.parse().unwrap());
    assert_eq!(send(&svc, request).await.status, StatusCode::BAD_GATEWAY);

    let router = idemdb_http::admin::AdminApi::new(store.asynchronous()).router();
    let call = |method: Method, uri: String, body: Option<serde_json::Value>| {
        let router = router.clone();
        async move {
            let body = Body::from(body.map(|b| b.to_string()).unwrap_or_default());
            let request = Request::builder().method(method).uri(uri).body(body).unwrap();
            let response = router.oneshot(request).await.unwrap();
            let status = response.status();
            let text = String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
            (status, text)
        }
    };
    let (status, queue) = call(Method::GET, "/reconciliation".into(), None).await;
    assert_eq!(status, StatusCode::OK, "{queue}");
    let tenant_hash = store.tenant_hash(tenant).to_string();
    let entry = serde_json::from_str::<serde_json::Value>(&queue).unwrap()["entries"][0].clone();
    assert_eq!(entry["tenant_hash"], tenant_hash.as_str(), "{queue}");
    let key_hash = entry["key_hash"].as_str().expect(&queue).to_string();
    let (status, view) = call(Method::GET, format!("/record?key_hash={key_hash}"), None).await;
    assert_eq!(status, StatusCode::OK, "the queue's key hash names the record: {view}");
    let (_, effects) = call(Method::GET, "/effects".into(), None).await;
    let resolve = serde_json::json!({ "key_hash": key_hash, "resolution": "released", "note": "checked" });
    let (status, resolved) = call(Method::POST, "/resolve".into(), Some(resolve)).await;
    assert_eq!(status, StatusCode::OK, "{resolved}");
    let released = store.get(&Scope::new(tenant, "pay").unwrap(), &IdempotencyKey::new("k-hashed").unwrap()).unwrap();
    assert_eq!(released.unwrap().state.kind(), idemdb::StateKind::Released);
    for (what, text) in [("queue", &queue), ("record", &view), ("effects", &effects), ("resolution", &resolved)] {
        assert!(!text.contains(tenant), "the {what} spells the tenant: {text}");
    }

    let logs = captured.text();
    // This test's resolution (its note): other tests of the binary resolve keys too, and their
    // lines may come first in the shared capture.
    let line = logs
        .lines()
        .find(|line| line.contains("resolved by an operator") && line.contains("note=\"checked\""))
        .expect("the resolution is logged");
    assert!(line.contains(&format!("tenant_hash={tenant_hash}")), "{line}");
    assert!(!logs.contains(tenant), "the raw tenant is never logged: {logs}");
}
