//! `POST /v1/admin/backup` and SIGUSR1: a backup taken while payments run holds every payment
//! acknowledged before it started; the endpoint's refusals; PostgreSQL's answer.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};

use idemdb::redb::ReadableTable;
use idemdb::{StateKind, Store};
use serde_json::Value;

use crate::support::*;

/// The payments row table as redb sees it, to read every tenant's rows at once.
const PAYMENTS: idemdb::redb::TableDefinition<(&str, &str), &[u8]> =
    idemdb::redb::TableDefinition::new(payments_example::PAYMENTS.name());

const TOKEN: &str = "admin-token-for-the-e2e-tests";

pub async fn ask_backup(http: &reqwest::Client, url: &str, token: &str, body: &str) -> (u16, Value) {
    let response = http
        .post(format!("{url}/v1/admin/backup"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, serde_json::from_slice(&response.bytes().await.unwrap()).unwrap_or(Value::Null))
}

/// The idempotency keys completed in the backup at `path` and the payment ids in its table.
fn contents(path: &Path) -> (BTreeSet<String>, BTreeSet<String>) {
    let store = Store::builder().open_read_only(path).expect("the backup opens alone");
    let mut filter = idemdb::ListFilter::default();
    filter.limit = 100_000;
    filter.state = Some(StateKind::Completed);
    let completed = store.list(&filter).unwrap().records.iter().map(|r| r.scoped.key.as_str().to_string()).collect();
    let payments = store
        .read(|tx| {
            let table = tx.open_table(PAYMENTS).map_err(idemdb::Error::from)?;
            let ids: BTreeSet<String> =
                table.iter().map_err(idemdb::Error::from)?.map(|e| e.unwrap().0.value().1.to_string()).collect();
            Ok::<_, idemdb::Error>(ids)
        })
        .unwrap();
    (completed, payments)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_while_payments_run_holds_every_payment_acknowledged_before_it() {
    let db = Db::redb();
    let backups = tempfile::tempdir().unwrap();
    let backup_dir = backups.path().to_str().unwrap();
    let server = db.start(&["--admin-token", TOKEN, "--backup-dir", backup_dir]);
    let http = http();
    // key -> payment id, for every 201 received.
    let acknowledged = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..4 {
        let (http, url, acknowledged, stop) = (http.clone(), server.url.clone(), acknowledged.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let key = format!("live-{c}-{i}");
                let reply = pay(&http, &url, "acme", &key, &payment("10.50")).await.unwrap();
                i += 1;
                // Only a 201 is an acknowledgement (on a loaded machine a payment can outlast
                // the handler's wait and answer otherwise; it is then not counted).
                if reply.status != 201 {
                    continue;
                }
                let created: Value = serde_json::from_slice(&reply.body).unwrap();
                acknowledged.lock().unwrap().push((key, created["id"].as_str().unwrap().to_string()));
            }
        }));
    }
    let mut checked = 0;
    for round in 0..3 {
        while acknowledged.lock().unwrap().len() < 20 * (round + 1) {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let before: Vec<(String, String)> = acknowledged.lock().unwrap().clone();
        let name = format!("round-{round}.idemdb");
        let (status, report) = ask_backup(&http, &server.url, TOKEN, &format!(r#"{{"name":"{name}"}}"#)).await;
        assert_eq!(status, 201, "{report}");
        assert_eq!(report["verified"], true);
        let (completed, payments) = contents(&backups.path().join(&name));
        for (key, id) in &before {
            assert!(completed.contains(key), "round {round}: the record of {key} is missing");
            assert!(payments.contains(id), "round {round}: the payment {id} of {key} is missing");
        }
        assert!(report["records"].as_u64().unwrap() >= before.len() as u64);
        checked += before.len();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }
    assert!(checked >= 120, "{checked}");

    // Refusals: another token, a tenant's token, a path, an existing name.
    assert_eq!(ask_backup(&http, &server.url, "acme", "{}").await.0, 401);
    assert_eq!(ask_backup(&http, &server.url, "wrong-token-of-the-same-length", "{}").await.0, 401);
    for name in ["../escape.idemdb", "/tmp/x.idemdb", ".hidden", "a/b", ""] {
        let (status, problem) = ask_backup(&http, &server.url, TOKEN, &format!(r#"{{"name":"{name}"}}"#)).await;
        assert_eq!((status, problem["type"].as_str()), (400, Some("urn:payments-example:problem:invalid-name")));
    }
    let (status, problem) = ask_backup(&http, &server.url, TOKEN, r#"{"name":"round-0.idemdb"}"#).await;
    assert_eq!((status, problem["type"].as_str()), (409, Some("urn:payments-example:problem:backup-exists")));
    let (status, report) = ask_backup(&http, &server.url, TOKEN, "{}").await;
    assert_eq!(status, 201, "a timestamped name: {report}");
    assert!(report["name"].as_str().unwrap().starts_with("idemdb-"));
    assert!(!backups.path().parent().unwrap().join("escape.idemdb").exists());
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr1_writes_a_timestamped_backup_into_the_backup_directory() {
    let db = Db::redb();
    let backups = tempfile::tempdir().unwrap();
    let server = db.start(&["--backup-dir", backups.path().to_str().unwrap()]);
    let http = http();
    for i in 0..5 {
        assert_eq!(pay(&http, &server.url, "acme", &format!("sig-{i}"), &payment("1.00")).await.unwrap().status, 201);
    }
    assert!(std::process::Command::new("kill").args(["-USR1", &server.pid().to_string()]).status().unwrap().success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let file = loop {
        let found = std::fs::read_dir(backups.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("idemdb-"));
        if let Some(file) = found {
            break file;
        }
        assert!(std::time::Instant::now() < deadline, "no backup after SIGUSR1");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let (completed, payments) = contents(&file);
    assert_eq!((completed.len(), payments.len()), (5, 5));
    // Without --admin-token the endpoint is not there.
    assert_eq!(ask_backup(&http, &server.url, TOKEN, "{}").await.0, 404);
}

/// SIGUSR1 to a service that writes no backups (no `--backup-dir`; on PostgreSQL never):
/// refused with a line that says why, and the service answers on and ends normally.
#[cfg(unix)]
pub async fn sigusr1_refused(db: &Db) {
    let server = db.start(&[]);
    let http = http();
    assert_eq!(pay(&http, &server.url, "acme", "usr1-before", &payment("1.00")).await.unwrap().status, 201);
    for _ in 0..2 {
        let sent = std::process::Command::new("kill").args(["-USR1", &server.pid().to_string()]).status().unwrap();
        assert!(sent.success());
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let after =
        pay(&http, &server.url, "acme", "usr1-after", &payment("2.00")).await.expect("the service still answers");
    assert_eq!(after.status, 201);
    let replay = pay(&http, &server.url, "acme", "usr1-before", &payment("1.00")).await.unwrap();
    assert!(replay.status == 201 && replay.replayed, "the payment before the signals replays");
    let (status, stderr) = server.stop();
    assert_eq!(status.code(), Some(0), "a normal shutdown after the signals: {status:?}\n{stderr}");
    assert_eq!(stderr.matches("SIGUSR1 refused").count(), 2, "one refusal per signal, with its reason:\n{stderr}");
    let reason = if matches!(db, Db::Redb(_)) { "--backup-dir DIR" } else { "back up PostgreSQL with its own tools" };
    assert!(stderr.contains(reason), "{stderr}");
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr1_without_a_backup_dir_is_refused_and_the_service_serves_on() {
    sigusr1_refused(&Db::redb()).await;
}

/// On PostgreSQL the endpoint answers a `not-on-this-backend` problem.
pub async fn not_on_this_backend(db: &Db) {
    let server = db.start(&["--admin-token", TOKEN]);
    let (status, problem) = ask_backup(&http(), &server.url, TOKEN, "{}").await;
    assert_eq!((status, problem["type"].as_str()), (501, Some("urn:payments-example:problem:not-on-this-backend")));
}
