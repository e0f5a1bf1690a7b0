//! `reconcile` on a store the HTTP layer wrote: the payments example's charge whose provider
//! answer was lost, resolved from the shell, then retried through the layer.

use std::path::Path;
use std::time::Duration;

use idemdb::{ExpiredLease, Policy, Store};
use payments_example::{Provider, RedbBackend, payment_operation_name};
use serde_json::Value;

use super::{arg, idemdb};

/// Runs the payments example (router and dispatcher, no reconciler: what is uncertain stays
/// so) over `dir` on a runtime of its own for the length of `client`, then drops the runtime,
/// and with it every handle on the store file.
fn with_service<T>(dir: &Path, client: impl AsyncFnOnce(String) -> T) -> T {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(async {
        let policy = Policy::default()
            .with_lease_ttl(Duration::from_secs(60))
            .with_expired_lease(ExpiredLease::TakeoverIfNoEffect);
        let store =
            Store::builder().policy(payment_operation_name(), policy).open(dir.join("idemdb.redb")).expect("store");
        let provider = Provider::open(&dir.join("provider.redb"), Duration::ZERO)
            .expect("provider")
            .lose_responses_to("acct_lost");
        let (router, dispatcher) = payments_example::router(RedbBackend::new(store), provider).expect("router");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(dispatcher.run());
        tokio::spawn(async move { axum::serve(listener, router).await });
        client(url).await
    })
}

pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) replayed: bool,
    pub(crate) body: Value,
}

pub(crate) async fn pay(url: &str, key: &str) -> Reply {
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/payments"))
        .header("authorization", "Bearer acme")
        .header("idempotency-key", format!("\"{key}\""))
        .header("content-type", "application/json")
        .body(r#"{"amount":"20.00","currency":"BRL","destination":"acct_lost"}"#)
        .send()
        .await
        .expect("send");
    let status = response.status().as_u16();
    let replayed = response.headers().get("idempotent-replayed").is_some_and(|v| v == "true");
    let body = serde_json::from_slice(&response.bytes().await.expect("body")).unwrap_or(Value::Null);
    Reply { status, replayed, body }
}

/// `GET /v1/ledger` of tenant acme: (payments, provider charges).
pub(crate) async fn ledger(url: &str) -> (Vec<Value>, Vec<Value>) {
    let response = reqwest::Client::new()
        .get(format!("{url}/v1/ledger"))
        .header("authorization", "Bearer acme")
        .send()
        .await
        .expect("ledger");
    let ledger: Value = serde_json::from_slice(&response.bytes().await.expect("body")).expect("ledger JSON");
    let list = |name: &str| ledger[name].as_array().cloned().unwrap_or_default();
    (list("payments"), list("provider_charges"))
}

#[test]
fn a_charge_confirmed_from_the_shell_replays_as_an_http_response() {
    let dir = tempfile::TempDir::new().expect("tempdir");
    let first = with_service(dir.path(), async |url| pay(&url, "order-900").await);
    assert_eq!(first.status, 502, "the provider's answer was lost: {:?}", first.body);

    let file = dir.path().join("idemdb.redb");
    let queue = idemdb(["reconcile", arg(&file), "--json"]).code(0).json();
    assert_eq!(queue["entries"].as_array().map(Vec::len), Some(1), "{queue}");
    idemdb([
        "reconcile",
        arg(&file),
        "--tenant",
        "acme",
        "--operation",
        "create_payment",
        "--key",
        "order-900",
        "--effect",
        "charge",
        "--provider",
        "confirmed",
        "--reference",
        "ch_1",
        "--status",
        "201",
        "--body",
        r#"{"status":"succeeded","provider_charge":"ch_1"}"#,
    ])
    .code(0);

    let (retry, again, (_, charges)) = with_service(dir.path(), async |url| {
        (pay(&url, "order-900").await, pay(&url, "order-900").await, ledger(&url).await)
    });
    for reply in [&retry, &again] {
        assert_eq!(reply.status, 201, "the retry replays the resolution, not 500 corrupt: {:?}", reply.body);
        assert!(reply.replayed);
        assert_eq!(reply.body["provider_charge"], "ch_1");
    }
    assert_eq!(charges.len(), 1, "one charge at the provider: {charges:?}");
    assert_eq!(charges[0]["calls"], 1, "the retries charged nothing: {charges:?}");
}

/// Runs the binary with `env` set (and `IDEMDB_ADMIN_TOKEN` unset unless given there).
fn idemdb_env(args: &[&str], env: &[(&str, &str)]) -> super::Run {
    let mut command = assert_cmd::cargo::cargo_bin_cmd!("idemdb");
    command.env_remove("IDEMDB_ADMIN_TOKEN").args(args);
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().expect("run idemdb");
    super::Run {
        code: output.status.code().expect("exited normally"),
        stdout: String::from_utf8(output.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(output.stderr).expect("utf-8 stderr"),
    }
}

const TOKEN: &str = "operator-secret-0123456789";

#[test]
fn reconcile_url_lists_and_resolves_on_a_running_service() {
    let dir = tempfile::TempDir::new().expect("tempdir");
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token file");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(async {
        let store = Store::builder()
            .policy(payment_operation_name(), Policy::default().with_expired_lease(ExpiredLease::TakeoverIfNoEffect))
            .open(dir.path().join("idemdb.redb"))
            .expect("store");
        let provider = Provider::open(&dir.path().join("provider.redb"), Duration::ZERO)
            .expect("provider")
            .lose_responses_to("acct_lost");
        let admin = payments_example::Admin::new(TOKEN, None).expect("admin");
        let (router, dispatcher) =
            payments_example::router_with_admin(RedbBackend::new(store), provider, Some(admin)).expect("router");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(dispatcher.run());
        tokio::spawn(async move { axum::serve(listener, router).await });

        assert_eq!(pay(&url, "order-900").await.status, 502);
        let admin_url = format!("{url}/v1/admin");
        let cli = |args: Vec<String>, env: Vec<(&'static str, &'static str)>| {
            tokio::task::spawn_blocking(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                idemdb_env(&args, &env)
            })
        };
        let with_file = |extra: &[&str]| {
            let mut args: Vec<String> = vec!["reconcile".into(), "--url".into(), admin_url.clone()];
            args.extend(["--token-file".to_string(), arg(&token_file).to_string()]);
            args.extend(extra.iter().map(|s| s.to_string()));
            args
        };

        // Listed while the service runs (it holds the store file: the file itself is locked).
        let listed = cli(with_file(&["--json"]), vec![]).await.expect("cli").code(0);
        let entries = listed.json()["entries"].as_array().cloned().expect("entries");
        assert_eq!(entries.len(), 1, "{}", listed.stdout);
        assert_eq!((entries[0]["kind"].as_str(), entries[0]["effect"].as_str()), (Some("effect"), Some("charge")));
        assert!(entries[0].get("idempotency_key").is_none(), "keys hidden by default");
        let table = cli(with_file(&["--show-keys"]), vec![]).await.expect("cli").code(0);
        assert!(table.stdout.contains("effect charge (uncertain)"), "{}", table.stdout);
        // Old code printed the key's hash whatever --show-keys said.
        assert!(table.stdout.contains("order-900"), "--show-keys shows the key: {}", table.stdout);
        let hidden = cli(with_file(&[]), vec![]).await.expect("cli").code(0);
        assert!(!hidden.stdout.contains("order-900"), "keys hidden by default: {}", hidden.stdout);
        // The service never spells the tenant (the client's bearer token): its hash only.
        assert!(!listed.stdout.contains("acme") && !table.stdout.contains("acme"), "{}", table.stdout);
        let key_hash = entries[0]["key_hash"].as_str().expect("key hash").to_string();
        let locked =
            cli(vec!["reconcile".into(), arg(&dir.path().join("idemdb.redb")).into()], vec![]).await.expect("cli");
        assert_eq!(locked.code, 3, "the file is the service's while it runs: {}", locked.stderr);

        // The token from the environment; none, or a wrong one, is refused and never printed.
        let base = vec!["reconcile".to_string(), "--url".into(), admin_url.clone(), "--json".into()];
        let from_env = cli(base.clone(), vec![("IDEMDB_ADMIN_TOKEN", TOKEN)]).await.expect("cli").code(0);
        assert_eq!(from_env.json()["entries"].as_array().map(Vec::len), Some(1));
        cli(base.clone(), vec![]).await.expect("cli").code(2);
        let wrong =
            cli(base.clone(), vec![("IDEMDB_ADMIN_TOKEN", "not-the-operator-token")]).await.expect("cli").code(4);
        assert!(wrong.stderr.contains("401"), "{}", wrong.stderr);
        assert!(!wrong.stderr.contains("not-the-operator-token"), "the token is not printed: {}", wrong.stderr);
        cli(vec!["reconcile".into(), "--url".into(), "https://example.invalid/v1/admin".into()], vec![])
            .await
            .expect("cli")
            .code(2);

        let (_, charges) = ledger(&url).await;
        let charge = charges[0]["id"].as_str().expect("charge id").to_string();
        // Named by the key hash the listing shows.
        let resolve = with_file(&[
            "--key-hash",
            &key_hash,
            "--effect",
            "charge",
            "--provider",
            "confirmed",
            "--reference",
            &charge,
            "--note",
            "provider dashboard",
            "--json",
        ]);
        let done = cli(resolve.clone(), vec![]).await.expect("cli").code(0);
        let done = done.json();
        assert_eq!(done["cause"], "operator");
        assert_eq!(done["now"]["record"]["response"]["status"], 201, "{done}");
        for run in [&listed, &table, &from_env] {
            assert!(!run.stdout.contains(TOKEN) && !run.stderr.contains(TOKEN), "the token is never printed");
        }
        // Again: the entry has left the queue, so its hash names nothing; exit 4, nothing changes.
        let again = cli(resolve, vec![]).await.expect("cli").code(4);
        assert!(again.stderr.contains("IDEMDB_NOT_FOUND"), "{}", again.stderr);

        let retry = pay(&url, "order-900").await;
        assert_eq!((retry.status, retry.replayed), (201, true), "{:?}", retry.body);
        assert_eq!(retry.body["provider_charge"], charge.as_str());
        let (payments, charges) = ledger(&url).await;
        assert_eq!(payments.len(), 1, "exactly one payment row: {payments:?}");
        assert_eq!(payments[0]["idempotency_key"], "order-900");
        assert_eq!((charges.len(), &charges[0]["calls"]), (1, &serde_json::json!(1)), "one provider call");
        let empty = cli(with_file(&[]), vec![]).await.expect("cli").code(0);
        assert!(empty.stdout.contains("empty"), "{}", empty.stdout);
    });
}

/// `reconcile --postgres` on a database a running store has open, when `IDEMDB_PG_URL` names
/// a server (skipped with a notice otherwise, failed under `IDEMDB_PG_REQUIRED=1`).
#[test]
fn reconcile_postgres_lists_and_resolves_while_the_store_is_in_use() {
    use idemdb::{EffectReport, Fingerprint, Reservation, Reserve};
    use idemdb_interface::WorkflowStore;
    let Some(pg) = std::env::var("IDEMDB_PG_URL").ok().filter(|url| !url.is_empty()) else {
        assert_ne!(
            std::env::var("IDEMDB_PG_REQUIRED").as_deref(),
            Ok("1"),
            "IDEMDB_PG_REQUIRED=1 but IDEMDB_PG_URL is not set"
        );
        eprintln!("cli: IDEMDB_PG_URL is not set: the reconcile --postgres test is SKIPPED");
        return;
    };
    let schema = "cli_reconcile";
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(async {
        let (client, connection) =
            idemdb_postgres::tokio_postgres::connect(&pg, idemdb_postgres::tokio_postgres::NoTls)
                .await
                .expect("connect");
        let connection = tokio::spawn(connection);
        client.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE")).await.expect("drop schema");
        drop(client);
        let _ = connection.await;
        let store = idemdb_postgres::PgStore::builder(pg.clone()).schema(schema).connect().await.expect("store");
        let (scope, key) = (super::scope("acme", "create_payment"), super::key("order-7"));
        let fp = Fingerprint::from_bytes([7; 32]);
        let Reservation::Acquired(lease) = store.reserve(Reserve::new(&scope, &key, &fp)).await.expect("reserve")
        else {
            panic!("a new key is acquired");
        };
        let charge = idemdb::EffectName::new("charge").expect("effect");
        WorkflowStore::enqueue_effect(&store, &lease, &charge, 1, b"{}".to_vec()).await.expect("enqueue");
        let claims = WorkflowStore::claim_effects(&store, 8).await.expect("claim");
        assert_eq!(claims.len(), 1);
        WorkflowStore::report_effect(&store, &claims[0], EffectReport::Unknown { reason: "timeout".into() })
            .await
            .expect("report");

        let cli = |extra: &'static [&'static str]| {
            let pg = pg.clone();
            tokio::task::spawn_blocking(move || {
                let mut args = vec!["reconcile", "--postgres", pg.as_str(), "--schema", schema];
                args.extend_from_slice(extra);
                idemdb_env(&args, &[])
            })
        };
        let listed = cli(&["--json"]).await.expect("cli").code(0);
        let entries = listed.json()["entries"].as_array().cloned().expect("entries");
        assert_eq!(entries.len(), 1, "{}", listed.stdout);
        assert_eq!(entries[0]["state"], "uncertain");
        let done = cli(&[
            "--tenant",
            "acme",
            "--operation",
            "create_payment",
            "--key",
            "order-7",
            "--effect",
            "charge",
            "--provider",
            "confirmed",
            "--reference",
            "ch_7",
            "--status",
            "201",
            "--body",
            "{\"charge\":\"ch_7\"}",
        ])
        .await
        .expect("cli")
        .code(0);
        assert!(done.stdout.contains("confirmed"), "{}", done.stdout);
        cli(&[
            "--tenant",
            "acme",
            "--operation",
            "create_payment",
            "--key",
            "order-7",
            "--effect",
            "charge",
            "--provider",
            "not_found",
        ])
        .await
        .expect("cli")
        .code(4);
        // The store that stayed open sees it: the record replays the HTTP response.
        match store.reserve(Reserve::new(&scope, &key, &fp)).await.expect("reserve") {
            Reservation::Replay { body, .. } => {
                let response = idemdb_http::StoredResponse::decode(&body).expect("an HTTP response of the layer");
                assert_eq!(
                    (response.status().as_u16(), response.body().as_ref()),
                    (201, b"{\"charge\":\"ch_7\"}".as_slice())
                );
            }
            other => panic!("expected a replay, got {other:?}"),
        }
        let queue = cli(&["--json"]).await.expect("cli").code(0);
        assert_eq!(queue.json()["entries"].as_array().map(Vec::len), Some(0));
    });
}
