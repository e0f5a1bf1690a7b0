//! The purge task: bounded batches, the retention rules kept, rows locked by others skipped
//! (never waited for), several purgers at once removing each row once, a spawned task that
//! runs on its own; and what an instance does when a newer version migrated the schema.

use std::time::Duration;

use idemdb_postgres::{
    AuditKind, ConnectError, Failure, Fingerprint, IdempotencyKey, ManualClock, PgStore, PgStoreBuilder, Policy,
    PurgeTask, Record, Reservation, Reserve, SCHEMA_VERSION, Scope, ScopedKey, TimeSource,
};
use libtest_mimic::Failed;

use crate::support::{Env, admin, block_on, builder, count, fresh_schema};

const T0: u64 = 1_000_000_000;
const FP: Fingerprint = Fingerprint::from_bytes([3; 32]);

fn scope() -> Scope {
    Scope::new("acme", "create_payment").expect("scope")
}

fn key(name: &str) -> IdempotencyKey {
    IdempotencyKey::new(name).expect("key")
}

fn policy() -> Policy {
    Policy::default()
        .with_lease_ttl(Duration::from_secs(1))
        .with_response_ttl(Duration::from_secs(10))
        .with_tombstone_ttl(Duration::from_secs(20))
}

fn open(env: &Env, schema: &str, clock: &ManualClock) -> PgStoreBuilder {
    builder(env, schema)
        .policy("create_payment", policy())
        .clock(clock.clone())
        .time_source(TimeSource::HostClock)
        .audit_retention(Duration::from_secs(15))
}

/// `n` completed records named `<prefix>-<i>`, written at `T0` (results due at `T0 + 10 s`,
/// tombstones forgotten at `T0 + 30 s`), through the linear import.
async fn seed(store: &PgStore, prefix: &str, n: usize) {
    let clock = ManualClock::new(T0);
    let embedded =
        idemdb::Store::builder().clock(clock).policy("create_payment", policy()).in_memory().expect("embedded store");
    let Reservation::Acquired(lease) =
        embedded.reserve(Reserve::new(&scope(), &key("template"), &FP)).expect("reserve")
    else {
        panic!("a new key is acquired")
    };
    embedded.complete(&lease, b"r".to_vec()).expect("complete");
    let template: Record = embedded.get(&scope(), &key("template")).expect("get").expect("record");
    let batch: Vec<(ScopedKey, Record)> =
        (0..n).map(|i| (ScopedKey::new(scope(), key(&format!("{prefix}-{i:05}"))), template.clone())).collect();
    let report = store.import(&batch, false).await.expect("import");
    assert_eq!(report.imported, n as u64);
}

async fn records(admin: &idemdb_postgres::tokio_postgres::Client, schema: &str) -> i64 {
    count(admin, &format!("SELECT count(*) FROM {schema}.idemdb_records")).await
}

async fn tombstones(admin: &idemdb_postgres::tokio_postgres::Client, schema: &str) -> i64 {
    count(admin, &format!("SELECT count(*) FROM {schema}.idemdb_records WHERE state = 'tombstone'")).await
}

/// Rounds in batches: results become tombstones at their response TTL (and still answer
/// expired), tombstones are forgotten at their tombstone TTL, unexpired records stay, old audit
/// events go; each batch handles at most `batch_size` records.
pub fn batches_keep_the_rules(env: &Env) -> Result<(), Failed> {
    block_on(async {
        const S: &str = "idemdb_purge_batches";
        fresh_schema(&env.url, S).await;
        let clock = ManualClock::new(T0);
        let store = open(env, S, &clock).connect().await.expect("connect");
        let admin = admin(&env.url).await;
        // Written by a reserve at T0 (with its audit events at T0) beside 250 imported ones.
        let Reservation::Acquired(lease) =
            store.reserve(Reserve::new(&scope(), &key("old-early"), &FP)).await.expect("reserve")
        else {
            panic!("a new key is acquired")
        };
        store.complete(&lease, b"early".to_vec()).await.expect("complete");
        seed(&store, "old", 250).await;

        let mut task = PurgeTask::new(store.clone());
        task.batch_size = 40;
        // At T0 + 20 s: the 251 old results are tombstones now; nothing is forgotten; the audit
        // events of T0 are past the 15 s audit retention.
        clock.set(T0 + 20_000);
        let round = task.round().await.expect("round");
        assert_eq!((round.report.tombstoned, round.report.forgotten), (251, 0), "{round:?}");
        assert!(round.batches >= 7, "251 records in batches of 40 take at least 7 batches: {round:?}");
        assert!(!round.report.more);
        assert!(round.report.audit_removed >= 2, "the reserve's and the completion's events: {round:?}");
        let events = store.audit_events(10_000).await.expect("events");
        assert!(events.iter().all(|e| e.at.as_millis() >= T0 + 5_000), "no event older than the retention is left");
        assert_eq!(tombstones(&admin, S).await, 251);
        assert_eq!(records(&admin, S).await, 251);
        let answer = store.reserve(Reserve::new(&scope(), &key("old-00007"), &FP)).await.expect("reserve");
        assert!(matches!(answer, Reservation::Expired { .. }), "a tombstone still answers: {answer:?}");

        // Written at T0 + 25 s: a result due at T0 + 35 s, a released record forgotten later.
        clock.set(T0 + 25_000);
        let Reservation::Acquired(lease) =
            store.reserve(Reserve::new(&scope(), &key("young"), &FP)).await.expect("reserve")
        else {
            panic!("a new key is acquired")
        };
        store.complete(&lease, b"young".to_vec()).await.expect("complete");
        let Reservation::Acquired(lease) =
            store.reserve(Reserve::new(&scope(), &key("released"), &FP)).await.expect("reserve")
        else {
            panic!("a new key is acquired")
        };
        store.fail(&lease, Failure::Retryable).await.expect("release");

        // Just before the old tombstones' TTL: nothing more is due.
        clock.set(T0 + 29_999);
        let round = task.round().await.expect("round");
        assert_eq!((round.report.tombstoned, round.report.forgotten), (0, 0), "{round:?}");
        assert_eq!(records(&admin, S).await, 253);

        // At it: the 250 tombstones go; the young result and the released record stay.
        clock.set(T0 + 30_000);
        let round = task.round().await.expect("round");
        assert_eq!((round.report.tombstoned, round.report.forgotten), (0, 251), "{round:?}");
        assert_eq!(records(&admin, S).await, 2);
        assert!(store.get(&scope(), &key("young")).await.expect("get").is_some());
        assert!(store.get(&scope(), &key("released")).await.expect("get").is_some());
        let events = store.audit_events(10_000).await.expect("events");
        assert_eq!(events.iter().filter(|e| e.kind == AuditKind::Purged).count(), 502, "one event per change");

        // One round with a bound on its batches leaves the rest for the next round.
        clock.set(T0 + 60_000);
        task.batch_size = 1;
        task.max_batches = 1;
        let round = task.round().await.expect("round");
        assert_eq!((round.batches, round.report.tombstoned + round.report.forgotten), (1, 1), "{round:?}");
        assert!(round.report.more, "more is due");
    });
    Ok(())
}

/// A record whose row another transaction holds (a reserve deciding on it) is skipped: the
/// purge finishes while the lock is held, removes everything else and leaves that row; a later
/// round takes it.
pub fn a_locked_row_does_not_block_the_purge(env: &Env) -> Result<(), Failed> {
    block_on(async {
        const S: &str = "idemdb_purge_skip_locked";
        fresh_schema(&env.url, S).await;
        let clock = ManualClock::new(T0);
        let store = open(env, S, &clock).connect().await.expect("connect");
        let admin = admin(&env.url).await;
        seed(&store, "due", 100).await;
        let mut holder = crate::support::admin(&env.url).await;
        let lock = holder.transaction().await.expect("begin");
        lock.execute(&format!("SELECT 1 FROM {S}.idemdb_records WHERE key = 'due-00042' FOR UPDATE"), &[])
            .await
            .expect("lock a row");

        clock.set(T0 + 20_000);
        let mut task = PurgeTask::new(store.clone());
        task.batch_size = 16;
        // A bound on the test, not a measurement: a purge that waited for the lock would hang.
        let round = tokio::time::timeout(Duration::from_secs(60), task.round())
            .await
            .expect("the purge finished while the row was locked")
            .expect("round");
        assert_eq!(round.report.tombstoned, 99, "{round:?}");
        assert_eq!(records(&admin, S).await, 100, "tombstones stay until their own TTL");
        let locked_state = count(
            &admin,
            &format!("SELECT count(*) FROM {S}.idemdb_records WHERE key = 'due-00042' AND state = 'completed'"),
        )
        .await;
        assert_eq!(locked_state, 1, "the locked row was left as it was");

        lock.commit().await.expect("release the lock");
        let round = task.round().await.expect("round");
        assert_eq!(round.report.tombstoned, 1, "the next round takes the row: {round:?}");
        assert_eq!(tombstones(&admin, S).await, 100);
    });
    Ok(())
}

/// Two instances (two pools) purging one schema at once, in small batches: every record is
/// changed exactly once over both (sums of their reports, one audit event per change).
pub fn two_purgers_change_each_row_once(env: &Env) -> Result<(), Failed> {
    block_on(async {
        const S: &str = "idemdb_purge_two";
        const N: u64 = 600;
        fresh_schema(&env.url, S).await;
        let clock = ManualClock::new(T0);
        let a = open(env, S, &clock).connect().await.expect("connect");
        let b = open(env, S, &clock).connect().await.expect("connect");
        let admin = admin(&env.url).await;
        seed(&a, "shared", N as usize).await;
        for (at, expected_tombstones, expected_records) in [(T0 + 20_000, N as i64, N as i64), (T0 + 40_000, 0, 0)] {
            clock.set(at);
            let tasks = [&a, &b].map(|store| {
                let mut task = PurgeTask::new(store.clone());
                task.batch_size = 8;
                tokio::spawn(async move { task.round().await.expect("round") })
            });
            let mut changed = 0;
            let mut batches = Vec::new();
            for task in tasks {
                let round = task.await.expect("task");
                changed += round.report.tombstoned + round.report.forgotten;
                batches.push(round.batches);
            }
            assert_eq!(changed, N, "each record changed once over both purgers (batches {batches:?})");
            assert_eq!(tombstones(&admin, S).await, expected_tombstones);
            assert_eq!(records(&admin, S).await, expected_records);
            let purged = count(
                &admin,
                &format!(
                    "SELECT count(*) FROM {S}.idemdb_audit WHERE kind = '{}' AND at = {at}",
                    AuditKind::Purged.as_str()
                ),
            )
            .await;
            assert_eq!(purged as u64, N, "one audit event per change");
        }
    });
    Ok(())
}

/// A spawned task runs rounds on its own and stops when told.
pub fn a_spawned_task_runs_until_stopped(env: &Env) -> Result<(), Failed> {
    block_on(async {
        const S: &str = "idemdb_purge_spawned";
        fresh_schema(&env.url, S).await;
        let clock = ManualClock::new(T0);
        let store = open(env, S, &clock).connect().await.expect("connect");
        let admin = admin(&env.url).await;
        seed(&store, "spawned", 50).await;
        clock.set(T0 + 40_000);
        let mut task = PurgeTask::new(store.clone());
        task.interval = Duration::from_millis(20);
        task.batch_size = 7;
        let handle = task.spawn();
        let mut rounds = handle.rounds();
        // Past both TTLs: the records go (whether a round tombstones first or forgets at once
        // is the rules' business); the test waits on the task's rounds, each a change it sees.
        let mut changed = 0;
        while records(&admin, S).await > 0 {
            rounds.changed().await.expect("the task runs");
            let round = &rounds.borrow_and_update().1;
            changed += round.report.tombstoned + round.report.forgotten;
        }
        assert!(changed >= 50, "{changed}");
        let (n, _) = handle.stop().await;
        assert!(n >= 1, "{n} rounds");
        assert_eq!(records(&admin, S).await, 0);
    });
    Ok(())
}

/// A rolling upgrade across a migration: once a newer build migrated the schema, an instance of
/// this build that is already connected keeps working (migrations only add), while one that
/// starts now refuses with a typed error and changes nothing.
pub fn an_older_instance_beside_a_newer_schema(env: &Env) -> Result<(), Failed> {
    block_on(async {
        const S: &str = "idemdb_rolling_upgrade";
        fresh_schema(&env.url, S).await;
        let clock = ManualClock::new(T0);
        let running = open(env, S, &clock).connect().await.expect("connect");
        let admin = admin(&env.url).await;
        let newer = i32::try_from(SCHEMA_VERSION + 1).expect("version");
        admin.execute(&format!("INSERT INTO {S}.idemdb_schema (version) VALUES ($1)"), &[&newer]).await.expect("bump");
        admin
            .batch_execute(&format!("CREATE TABLE {S}.idemdb_added_by_a_newer_build (id bigint PRIMARY KEY)"))
            .await
            .expect("a newer migration's table");

        let Reservation::Acquired(lease) =
            running.reserve(Reserve::new(&scope(), &key("during"), &FP)).await.expect("reserve")
        else {
            panic!("a new key is acquired")
        };
        running.complete(&lease, b"ok".to_vec()).await.expect("complete");
        let replay = running.reserve(Reserve::new(&scope(), &key("during"), &FP)).await.expect("reserve");
        assert!(matches!(replay, Reservation::Replay { .. }), "{replay:?}");

        match open(env, S, &clock).connect().await {
            Err(ConnectError::SchemaMismatch(mismatch)) => {
                assert!(mismatch.is_newer(), "{mismatch}");
                assert_eq!((mismatch.found(), mismatch.expected()), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
            }
            other => panic!("a newer schema must be refused at connect, got {other:?}"),
        }
        let versions = count(&admin, &format!("SELECT count(*) FROM {S}.idemdb_schema")).await;
        assert_eq!(versions, i64::from(SCHEMA_VERSION) + 1, "untouched by the refused instance");
        admin.batch_execute(&format!("DROP SCHEMA {S} CASCADE")).await.expect("drop");
    });
    Ok(())
}
