//! The same service on PostgreSQL (`--postgres $IDEMDB_PG_URL`, a fresh schema per test): the
//! checks the redb tests make, and two instances on one database racing on the same keys.
//!
//! Without `IDEMDB_PG_URL` each test here prints that it is skipped and passes without running;
//! with `IDEMDB_PG_REQUIRED=1` it fails instead. `bash scripts/with-postgres.sh cargo test -p
//! payments-example` starts a throwaway server and sets both.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::payments;
use crate::support::*;

/// Runs a shared check on a fresh schema, or skips it.
macro_rules! on_postgres {
    ($($name:ident => $check:path,)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let Some(db) = Db::postgres(stringify!($check).rsplit(':').next().unwrap().trim()).await else { return };
            $check(&db).await;
        }
    )*};
}

on_postgres! {
    postgres_sequential_retries_replay_the_first_answer_and_make_one_effect => payments::sequential_retries,
    postgres_thirty_two_concurrent_requests_with_one_key_make_one_201_and_one_effect => payments::thirty_two_concurrent_requests,
    postgres_the_same_key_with_another_amount_is_422_and_no_effect => payments::another_amount,
    postgres_a_lost_provider_answer_waits_in_the_reconciliation_queue => payments::lost_provider_answer,
    postgres_webhooks_dedupe_delivery_ids_and_apply_only_newer_versions => payments::webhooks,
    postgres_the_expiry_policy_is_published => payments::published_policy,
    postgres_the_backup_endpoint_answers_not_on_this_backend => crate::backup::not_on_this_backend,
    postgres_sigusr1_is_refused_and_the_service_serves_on => crate::backup::sigusr1_refused,
    postgres_a_store_blip_after_the_reservation_never_releases_a_key => crate::promises::store_blip_after_the_reservation,
    postgres_a_provider_slower_than_the_lease_is_called_once => crate::promises::slow_provider,
    postgres_sigterm_lets_the_payments_in_progress_finish => crate::promises::sigterm_drains,
}

/// Two processes on one database and schema, each sent every key twice at once, both
/// dispatching: one fresh 201 and one effect per key, and both instances see the same ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_instances_racing_on_the_same_keys_make_one_effect_per_key() {
    let Some(db) = Db::postgres("two_instances").await else { return };
    let args = ["--provider-latency-ms", "100"];
    let servers = [db.start(&args), db.start(&args)];
    let http = http();
    let keys: Vec<String> = (0..12).map(|i| format!("race-{i}")).collect();
    let mut requests = Vec::new();
    for key in &keys {
        for server in servers.iter().chain(&servers) {
            let (http, url, key) = (http.clone(), server.url.clone(), key.clone());
            requests.push(tokio::spawn(async move {
                let reply = pay(&http, &url, "acme", &key, &payment("10.50")).await;
                (key, reply)
            }));
        }
    }
    let mut fresh = std::collections::HashMap::<String, usize>::new();
    for request in requests {
        let (key, reply) = request.await.unwrap();
        let reply = reply.unwrap();
        let in_progress = reply.status == 409 && reply.problem.as_deref() == Some("urn:idemdb:problem:in-progress");
        assert!(reply.status == 201 || in_progress, "{key}: {reply:?}");
        if reply.status == 201 && !reply.replayed {
            *fresh.entry(key).or_default() += 1;
        }
    }
    // Every key settles to a replay of its one payment, asked of either instance.
    let mut bodies = Vec::new();
    for key in &keys {
        let mut answers = Vec::new();
        for server in &servers {
            let deadline = Instant::now() + Duration::from_secs(20);
            let reply = loop {
                let reply = pay(&http, &server.url, "acme", key, &payment("10.50")).await.unwrap();
                let in_progress = reply.problem.as_deref() == Some("urn:idemdb:problem:in-progress");
                if !in_progress || Instant::now() > deadline {
                    break reply;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            assert_eq!((reply.status, reply.replayed), (201, true), "{key}: {reply:?}");
            answers.push(reply.body);
        }
        assert_eq!(answers[0], answers[1], "{key}: both instances replay the same bytes");
        bodies.extend(answers);
    }
    let ledgers = [effects(&http, &servers[0].url, "acme").await, effects(&http, &servers[1].url, "acme").await];
    for key in &keys {
        assert_eq!(fresh.get(key).copied(), Some(1), "{key}: exactly one fresh 201 over both instances");
        for effects in &ledgers {
            assert_eq!(effects.payments_of(key), 1, "{key}: one payment");
            assert_eq!(effects.charges_of(key).len(), 1, "{key}: one charge");
            assert_eq!(effects.calls_of(key), 1, "{key}: the provider was asked once");
            assert_eq!(effects.payment_charges_of(key), effects.charges_of(key), "{key}: the payment names the charge");
        }
    }
    for effects in &ledgers {
        assert_eq!(effects.payments.len(), keys.len(), "no payment beyond the keys sent");
    }
    assert_eq!(bodies.len(), 2 * keys.len());
}

/// An unreachable database is a message and a non-zero exit, not a panic (no server needed).
#[test]
fn an_unreachable_database_is_a_clear_error_and_a_failed_exit() {
    let output = Command::new(env!("CARGO_BIN_EXE_payments-example"))
        .args(["--addr", "127.0.0.1:0", "--postgres", "postgresql://postgres@127.0.0.1:1/postgres"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with(
            "payments-example: cannot connect to PostgreSQL at postgres@127.0.0.1:1/postgres: database unavailable"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(output.stdout.is_empty(), "it never listened");

    let output =
        Command::new(env!("CARGO_BIN_EXE_payments-example")).args(["--postgres", "not a url"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("PostgreSQL settings: invalid configuration: connection string"), "{stderr}");
}

const SECRET: &str = "pw-never-printed-7c1e";

/// Arguments after `--postgres`, and environment variables.
type Invocation = (Vec<String>, Vec<(&'static str, String)>);

/// The three connection-string forms with a password, the password in `PGPASSWORD` and in a
/// password file: on a failed connect and on a successful start, no output (stdout, stderr,
/// with every log level on) holds the password.
#[test]
fn passwords_never_reach_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let password_file = dir.path().join("pg-password");
    std::fs::write(&password_file, format!("{SECRET}\n")).unwrap();
    let unreachable = "postgresql://postgres@127.0.0.1:1/postgres";
    let cases: Vec<Invocation> = vec![
        (vec![format!("postgresql://postgres:{SECRET}@127.0.0.1:1/postgres")], vec![]),
        (vec![format!("host=127.0.0.1 port=1 user=postgres password={SECRET} dbname=postgres")], vec![]),
        (vec![format!("{unreachable}?password={SECRET}")], vec![]),
        (vec![unreachable.to_string()], vec![("PGPASSWORD", SECRET.to_string())]),
        (vec![unreachable.to_string(), "--password-file".into(), password_file.display().to_string()], vec![]),
        (
            vec![String::new()],
            vec![("PGHOST", "127.0.0.1".into()), ("PGPORT", "1".into()), ("PGPASSWORD", SECRET.into())],
        ),
    ];
    for (args, env) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_payments-example"))
            .args(["--addr", "127.0.0.1:0", "--postgres"])
            .args(&args)
            .env("RUST_LOG", "trace")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .unwrap();
        let all = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert_eq!(output.status.code(), Some(1), "{args:?}: {all}");
        assert!(all.contains("127.0.0.1:1"), "the message names the database: {all}");
        assert!(!all.contains(SECRET), "{args:?} {env:?}: the password was printed: {all}");
    }
    // A successful start with the password from the environment, then a request.
    let Ok(url) = std::env::var("IDEMDB_PG_URL") else { return };
    let mut child = Command::new(env!("CARGO_BIN_EXE_payments-example"))
        .args(["--addr", "127.0.0.1:0", "--schema", "pay_e2e_passwords", "--postgres", &url])
        .env("PGPASSWORD", SECRET)
        .env("RUST_LOG", "trace")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
    assert!(first.starts_with("listening on "), "{first}");
    child.kill().unwrap();
    child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut rest).unwrap();
    assert!(!format!("{first}{rest}").contains(SECRET), "the password was printed: {first}{rest}");
}

/// Exactly one of `--data` and `--postgres`, and `--schema` only with `--postgres`: clap's
/// usage errors (exit 2), before anything is opened.
#[test]
fn exactly_one_backend_is_required() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("never-created");
    let data = data.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&[], "the following required arguments were not provided"),
        (&["--data", data, "--postgres", "postgresql://127.0.0.1:1/x"], "cannot be used with"),
        (&["--data", data, "--schema", "s"], "--schema is for --postgres"),
        (&["--schema", "s"], "the following required arguments were not provided"),
    ];
    for (args, expected) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_payments-example"))
            .args(["--addr", "127.0.0.1:0"])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}: it never listened");
    }
    assert!(!dir.path().join("never-created").exists(), "nothing was opened");
}

/// The reliability harness's HTTP flow on PostgreSQL: 1,000 payments whose clients hang up at
/// random points, the service killed with SIGKILL with requests in flight in 20 of the 25
/// rounds; every key reaches 201 without an operator, one payment and one charge per key, and
/// every acknowledged answer is what retries replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_hang_ups_and_kills_leave_every_key_with_a_final_answer_and_one_effect() {
    let Some(Db::Postgres { url, schema }) = Db::postgres("http_flow").await else { return };
    let config = idemdb_reliability::http_flow::HttpFlowConfig {
        service: env!("CARGO_BIN_EXE_payments-example").into(),
        rounds: 25,
        keys_per_round: 40,
        seed: 0x5047,
        store_args: ["--postgres", url.as_str(), "--schema", schema.as_str()].map(Into::into).to_vec(),
    };
    let report =
        tokio::task::spawn_blocking(move || idemdb_reliability::http_flow::run(&config)).await.unwrap().unwrap();
    println!("{report:?}");
    assert_eq!((report.runs, report.kills), (1_000, 20));
    assert!(report.clean(), "{report:?}");
    assert!(report.acknowledged > 0 && report.cut_requests > 0 && report.hung_up > 0, "{report:?}");
}

/// A plain connection to the test database, for arranging faults and counting rows.
async fn sql(url: &str) -> idemdb_postgres::tokio_postgres::Client {
    let (client, connection) =
        idemdb_postgres::tokio_postgres::connect(url, idemdb_postgres::tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// The payment row's write fails once (a trigger refuses the first insert, so the dispatcher's
/// transaction rolls back and nothing is committed): the charge is sent again with the same
/// provider key after the first backoff, and the waiting request gets its 201 then, not after
/// the 60 s lease (the client gives up after 20 s). One payment, one charge, asked twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_failed_payment_row_write_is_retried_at_once_not_after_the_lease() {
    let Some(db) = Db::postgres("failed_row_write").await else { return };
    let Db::Postgres { url, schema } = &db else { unreachable!() };
    let server = db.start(&["--lease-ttl-secs", "60"]);
    let admin = sql(url).await;
    admin
        .batch_execute(&format!(
            "CREATE SEQUENCE \"{schema}\".fail_once;
             CREATE FUNCTION \"{schema}\".fail_first_insert() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               IF nextval('\"{schema}\".fail_once') = 1 THEN RAISE EXCEPTION 'injected: the payment row write fails'; END IF;
               RETURN NEW;
             END $$;
             CREATE TRIGGER fail_first_insert BEFORE INSERT ON \"{schema}\".app_payments
               FOR EACH ROW EXECUTE FUNCTION \"{schema}\".fail_first_insert();"
        ))
        .await
        .unwrap();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
    let first = pay(&http, &server.url, "acme", "row-fails-once", &payment("10.50"))
        .await
        .expect("an answer before the client gives up (not the whole lease)");
    assert_eq!((first.status, first.replayed), (201, false), "{first:?}");
    let retry = pay(&http, &server.url, "acme", "row-fails-once", &payment("10.50")).await.unwrap();
    assert_eq!((retry.status, retry.replayed), (201, true), "{retry:?}");
    assert_eq!(retry.body, first.body);
    let attempts: i64 =
        admin.query_one(&format!("SELECT last_value FROM \"{schema}\".fail_once"), &[]).await.unwrap().get(0);
    assert_eq!(attempts, 2, "the row write failed once, then succeeded");
    let effects = effects(&http, &server.url, "acme").await;
    assert_eq!(effects.payments_of("row-fails-once"), 1, "one payment row");
    assert_eq!(effects.charges_of("row-fails-once").len(), 1, "one charge");
    assert_eq!(effects.calls_of("row-fails-once"), 2, "asked again with the same provider key");
}

/// The service's purge task runs: with a 1 s response TTL, a 1 s tombstone TTL and a 1 s purge
/// interval, the records of finished payments leave the table on their own, while the payment rows (the application's) stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_the_purge_task_removes_expired_records() {
    let Some(db) = Db::postgres("purge_task").await else { return };
    let Db::Postgres { url, schema } = &db else { unreachable!() };
    let args = ["--response-ttl-secs", "1", "--tombstone-ttl-secs", "1", "--purge-interval-secs", "1"];
    let server = db.start(&args);
    let http = http();
    for n in 0..5 {
        let reply = pay(&http, &server.url, "acme", &format!("purged-{n}"), &payment("10.50")).await.unwrap();
        assert_eq!(reply.status, 201, "{reply:?}");
    }
    let admin = sql(url).await;
    let count = |table: &'static str| {
        let (admin, query) = (&admin, format!("SELECT count(*) FROM \"{schema}\".{table}"));
        async move { admin.query_one(&query, &[]).await.unwrap().get::<_, i64>(0) }
    };
    assert_eq!(count("app_payments").await, 5);
    // A bound on the test, not a measurement: the records are due after 2 s.
    let deadline = Instant::now() + Duration::from_secs(60);
    while count("idemdb_records").await > 0 {
        assert!(Instant::now() < deadline, "the purge task never removed the expired records");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(count("app_payments").await, 5, "the application's rows are not the purge's");
    let removals: i64 = admin
        .query_one(&format!("SELECT count(*) FROM \"{schema}\".idemdb_audit WHERE kind = 'purged'"), &[])
        .await
        .unwrap()
        .get(0);
    assert!(removals >= 5, "each record's removal is in the audit trail ({removals})");
}
