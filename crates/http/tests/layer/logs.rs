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
