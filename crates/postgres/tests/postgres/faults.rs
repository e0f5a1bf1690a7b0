//! Faults in the middle of a run: connections killed with `pg_terminate_backend`, mid-transaction
//! and at random, and the server restarted with `pg_ctl restart -m immediate` (a crash: no
//! checkpoint, recovery at start). Checked afterwards: no completion that was acknowledged is
//! lost, no key has a second effect, and every call that returned an error was repeated (the
//! same call, the same lease) until it answered.
//!
//! The effect is a row the lease holder writes **in the transaction that completes the record**
//! (the transaction API), and the operation's policy lets a retry take over an expired lease:
//! the documented setting for effects that are local and transactional. A holder that lost its
//! lease in the turmoil finds its fence stale at commit, and its effect rolls back with it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemdb_postgres::{
    Error, ErrorCode, ExpiredLease, Fingerprint, IdempotencyKey, Lease, PgStore, Policy, Refusal, Reservation, Reserve,
    Scope, State,
};
use libtest_mimic::Failed;

use crate::support::{Env, admin, block_on, builder, count, fresh_schema};

const SCHEMA: &str = "idemdb_faults";
const KEYS: usize = 400;
const TASKS: usize = 16;
const APP: &str = "idemdb-fault-test";

fn scope() -> Scope {
    Scope::new("acme", "transfer").expect("scope")
}

fn policy() -> Policy {
    Policy::default().with_lease_ttl(Duration::from_secs(2)).with_expired_lease(ExpiredLease::Takeover)
}

/// Errors a caller may see while the database is being killed and restarted: all of them mean
/// "repeat the call".
fn repeatable(error: &Error) -> bool {
    matches!(error.code(), ErrorCode::Unavailable | ErrorCode::CommitUnknown)
}

#[derive(Default)]
struct Tally {
    errors: AtomicU64,
    unknown: AtomicU64,
    stale: AtomicU64,
    /// Keys finished (by any task: acknowledged or replayed), counted per task.
    finished: AtomicU64,
    /// The body each acknowledged completion stored, by key.
    acknowledged: Mutex<HashMap<usize, String>>,
    /// Bodies of attempts whose commit the adapter reported rolled back (`Unavailable`).
    rolled_back: Mutex<Vec<String>>,
}

/// One attempt's effect and completion, in one transaction.
async fn effect_and_complete(store: &PgStore, lease: &Lease, index: usize, body: &str) -> Result<(), Error> {
    let mut txn = store.begin().await?;
    txn.client()
        .execute(&format!("INSERT INTO {SCHEMA}.effects (key, writer) VALUES ($1, $2)"), &[&(index as i32), &body])
        .await?;
    txn.complete(lease, body.as_bytes().to_vec()).await?;
    txn.commit().await
}

async fn drive(store: PgStore, task: usize, tally: Arc<Tally>, stop: Arc<AtomicBool>) -> Result<(), String> {
    let fingerprint = Fingerprint::from_bytes([3; 32]);
    // Two tasks share each key (task t and t + 8), in opposite orders.
    let mut keys: Vec<usize> = (0..KEYS).filter(|k| k % (TASKS / 2) == task % (TASKS / 2)).collect();
    if task >= TASKS / 2 {
        keys.reverse();
    }
    for index in keys {
        let key = IdempotencyKey::new(format!("transfer-{index}")).expect("key");
        let mut attempt = 0;
        'key: loop {
            if stop.load(Ordering::Relaxed) {
                return Err("stopped: the run took too long".into());
            }
            let answer = match store.reserve(Reserve::new(&scope(), &key, &fingerprint)).await {
                Ok(answer) => answer,
                Err(error) if repeatable(&error) => {
                    tally.errors.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue; // the same call again
                }
                Err(error) => return Err(format!("reserve {index}: {error}")),
            };
            match answer {
                Reservation::Acquired(lease) => {
                    attempt += 1;
                    for repeat in 0.. {
                        // A body per transaction, so that the stored one names its transaction.
                        let body = format!("t{task}-k{index}-a{attempt}-r{repeat}");
                        match effect_and_complete(&store, &lease, index, &body).await {
                            Ok(()) => {
                                let previous = tally.acknowledged.lock().expect("tally").insert(index, body.clone());
                                if let Some(previous) = previous {
                                    return Err(format!("key {index} acknowledged twice: {previous} and {body}"));
                                }
                                tally.finished.fetch_add(1, Ordering::Relaxed);
                                break 'key;
                            }
                            Err(error) if repeatable(&error) => {
                                tally.errors.fetch_add(1, Ordering::Relaxed);
                                if error.code() == ErrorCode::CommitUnknown {
                                    tally.unknown.fetch_add(1, Ordering::Relaxed);
                                } else {
                                    tally.rolled_back.lock().expect("tally").push(body.clone());
                                }
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                // The same transaction again, with the same lease: if the first
                                // one committed, `complete` refuses (wrong state) and this one
                                // rolls back, effect included.
                            }
                            Err(Error::Refused(Refusal::Transition(refused))) => {
                                // Another task took the lease over (stale fence), or an earlier
                                // attempt of ours did commit (already completed): ask again.
                                let _ = refused;
                                tally.stale.fetch_add(1, Ordering::Relaxed);
                                continue 'key;
                            }
                            Err(error) => return Err(format!("complete {index}: {error}")),
                        }
                    }
                }
                Reservation::Replay { .. } => {
                    tally.finished.fetch_add(1, Ordering::Relaxed);
                    break 'key;
                }
                Reservation::InProgress { .. } => tokio::time::sleep(Duration::from_millis(20)).await,
                other => return Err(format!("key {index}: unexpected {other:?}")),
            }
        }
    }
    Ok(())
}

pub fn run(env: &Env) -> Result<(), Failed> {
    let Some(restart) = env.restart.clone() else {
        return Err(
            "IDEMDB_PG_RESTART is not set: this test restarts the server (scripts/with-postgres.sh sets it)".into()
        );
    };
    block_on(async {
        fresh_schema(&env.url, SCHEMA).await;
        let store = builder(env, SCHEMA).policy("transfer", policy()).pool_size(TASKS).application_name(APP);
        let store = store.connect().await.expect("connect");
        admin(&env.url)
            .await
            .batch_execute(&format!("CREATE TABLE {SCHEMA}.effects (key integer NOT NULL, writer text NOT NULL)"))
            .await
            .expect("effects table");

        let tally = Arc::new(Tally::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for task in 0..TASKS {
            tasks.push(tokio::spawn(drive(store.clone(), task, Arc::clone(&tally), Arc::clone(&stop))));
        }

        // The faults: kill random connections of the store while transactions run, restart the
        // server (a crash) half-way, keep killing after it.
        // Keys finished, over both tasks of each key.
        let done = || tally.finished.load(Ordering::Relaxed) as usize / 2;
        let mut killed = 0i64;
        let mut restarted = false;
        let started = std::time::Instant::now();
        while tasks.iter().any(|task| !task.is_finished()) {
            if started.elapsed() > Duration::from_secs(150) {
                stop.store(true, Ordering::Relaxed);
                break;
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
            if !restarted && done() >= KEYS / 2 {
                let restart = restart.clone();
                let status = tokio::task::spawn_blocking(move || {
                    std::process::Command::new("sh").arg("-c").arg(&restart).status()
                })
                .await
                .expect("restart task")
                .expect("run the restart command");
                assert!(status.success(), "the restart command failed");
                restarted = true;
                continue;
            }
            if done() >= KEYS / 10 && killed < 60 {
                let Ok(client) = tokio::time::timeout(Duration::from_secs(2), admin_quiet(&env.url)).await else {
                    continue;
                };
                let Some(client) = client else { continue };
                let row = client
                    .query_one(
                        "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity \
                         WHERE application_name = $1 AND state <> 'idle' ORDER BY random() LIMIT 3) victims",
                        &[&APP],
                    )
                    .await;
                if let Ok(row) = row {
                    killed += row.get::<_, i64>(0);
                }
            }
        }
        for task in tasks {
            task.await.expect("task").unwrap_or_else(|message| panic!("{message}"));
        }
        assert!(restarted, "the server was restarted during the run");
        assert!(killed > 0, "connections were killed during the run");

        // Nothing lost, nothing doubled.
        let admin = admin(&env.url).await;
        let effects = count(&admin, &format!("SELECT count(*) FROM {SCHEMA}.effects")).await;
        let distinct = count(&admin, &format!("SELECT count(DISTINCT key) FROM {SCHEMA}.effects")).await;
        assert_eq!((effects, distinct), (KEYS as i64, KEYS as i64), "exactly one effect per key");
        let acknowledged = tally.acknowledged.lock().expect("tally").clone();
        let rolled_back = tally.rolled_back.lock().expect("tally").clone();
        let unknown = tally.unknown.load(Ordering::Relaxed) as usize;
        // A key completes without an acknowledgement only through a commit whose outcome was
        // reported unknown (and then found done on repeating).
        assert!(acknowledged.len() + unknown >= KEYS, "{} acknowledged, {unknown} unknown", acknowledged.len());
        let store = builder(env, SCHEMA).policy("transfer", policy()).connect().await.expect("connect");
        for index in 0..KEYS {
            let key = IdempotencyKey::new(format!("transfer-{index}")).expect("key");
            let record = store.get(&scope(), &key).await.expect("get").expect("record");
            let State::Completed { result, .. } = record.state else { panic!("key {index}: {:?}", record.state) };
            let writer: String = admin
                .query_one(&format!("SELECT writer FROM {SCHEMA}.effects WHERE key = $1"), &[&(index as i32)])
                .await
                .expect("effect")
                .get(0);
            assert_eq!(result, writer.as_bytes(), "key {index}: the stored completion is the effect's attempt");
            if let Some(body) = acknowledged.get(&index) {
                assert_eq!(&writer, body, "key {index}: the acknowledged completion is the stored one");
            }
            assert!(!rolled_back.contains(&writer), "key {index}: {writer} was reported rolled back but committed");
        }
        println!(
            "faults: {KEYS} keys, {killed} connections killed, 1 restart; {} errors repeated ({} commit outcome unknown), {} stale leases",
            tally.errors.load(Ordering::Relaxed),
            tally.unknown.load(Ordering::Relaxed),
            tally.stale.load(Ordering::Relaxed),
        );
    });
    Ok(())
}

/// An administrative connection, or `None` while the server is down.
async fn admin_quiet(url: &str) -> Option<idemdb_postgres::tokio_postgres::Client> {
    let (client, connection) =
        idemdb_postgres::tokio_postgres::connect(url, idemdb_postgres::tokio_postgres::NoTls).await.ok()?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Some(client)
}

/// A transaction whose connection is killed after the effect and the completion were written,
/// before `COMMIT`: the commit fails as unavailable (the adapter asked the database: rolled
/// back), nothing of it is stored, and the same transaction repeated with the same lease
/// succeeds — one effect.
pub fn killed_mid_transaction(env: &Env) -> Result<(), Failed> {
    block_on(async {
        const SCHEMA: &str = "idemdb_killed";
        fresh_schema(&env.url, SCHEMA).await;
        let store = builder(env, SCHEMA).connect().await.expect("connect");
        let admin = admin(&env.url).await;
        admin
            .batch_execute(&format!("CREATE TABLE {SCHEMA}.effects (key integer NOT NULL, writer text NOT NULL)"))
            .await
            .expect("effects table");
        let key = IdempotencyKey::new("order-842").expect("key");
        let Reservation::Acquired(lease) =
            store.reserve(Reserve::new(&scope(), &key, &Fingerprint::from_bytes([1; 32]))).await.expect("reserve")
        else {
            panic!("a new key is acquired")
        };

        let mut txn = store.begin().await.expect("begin");
        let insert = format!("INSERT INTO {SCHEMA}.effects (key, writer) VALUES (842, 'first')");
        txn.client().execute(&insert, &[]).await.expect("effect");
        txn.complete(&lease, b"first".to_vec()).await.expect("complete in the transaction");
        let pid: i32 = txn.client().query_one("SELECT pg_backend_pid()", &[]).await.expect("pid").get(0);
        let killed: bool = admin.query_one("SELECT pg_terminate_backend($1)", &[&pid]).await.expect("terminate").get(0);
        assert!(killed, "the transaction's backend was terminated");
        let error = txn.commit().await.expect_err("the killed transaction cannot commit");
        assert_eq!(error.code(), ErrorCode::Unavailable, "rolled back, and the adapter knows it: {error}");

        assert_eq!(count(&admin, &format!("SELECT count(*) FROM {SCHEMA}.effects")).await, 0, "no effect stored");
        let record = store.get(&scope(), &key).await.expect("get").expect("record");
        assert!(matches!(record.state, State::InProgress { .. }), "still in progress: {:?}", record.state);

        // The same transaction again, with the same lease.
        let mut txn = store.begin().await.expect("begin");
        txn.client().execute(&insert.replace("first", "second"), &[]).await.expect("effect");
        txn.complete(&lease, b"second".to_vec()).await.expect("complete");
        txn.commit().await.expect("commit");
        assert_eq!(count(&admin, &format!("SELECT count(*) FROM {SCHEMA}.effects")).await, 1, "one effect");
        let again =
            store.reserve(Reserve::new(&scope(), &key, &Fingerprint::from_bytes([1; 32]))).await.expect("reserve");
        assert!(matches!(again, Reservation::Replay { ref body, .. } if body == b"second"), "{again:?}");
    });
    Ok(())
}
