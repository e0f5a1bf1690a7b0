//! Migrations and the version check, the transaction API, the audit trail, retention and the
//! fence floor, import from the embedded store, and the crate docs' example.

use std::time::Duration;

use idemdb_postgres::{
    AuditKind, ConnectError, Error, ErrorCode, ExpiredLease, Failure, Fingerprint, IdempotencyKey, KeyHash,
    ManualClock, PgStore, Policy, Record, Refusal, Reservation, Reserve, SCHEMA_VERSION, Scope, ScopedKey, State,
    TimeSource, TransitionError,
};
use libtest_mimic::Failed;

use crate::support::{Env, admin, block_on, builder, count, fresh_schema};

fn scope() -> Scope {
    Scope::new("acme", "create_payment").expect("scope")
}

fn key(name: &str) -> IdempotencyKey {
    IdempotencyKey::new(name).expect("key")
}

const FP: Fingerprint = Fingerprint::from_bytes([1; 32]);

async fn acquire(store: &PgStore, key: &IdempotencyKey) -> idemdb_postgres::Lease {
    match store.reserve(Reserve::new(&scope(), key, &FP)).await.expect("reserve") {
        Reservation::Acquired(lease) => lease,
        other => panic!("expected a lease, got {other:?}"),
    }
}

pub fn migrations(env: &Env) -> Result<(), Failed> {
    block_on(async {
        const S: &str = "idemdb_migrations";
        fresh_schema(&env.url, S).await;
        fresh_schema(&env.url, "idemdb_migrations_other").await;
        let admin = admin(&env.url).await;

        // No tables yet, migrations off: a typed mismatch, nothing created.
        match builder(env, S).migrate_on_connect(false).connect().await {
            Err(ConnectError::SchemaMismatch(mismatch)) => {
                assert_eq!((mismatch.found(), mismatch.expected()), (0, SCHEMA_VERSION));
                assert!(!mismatch.is_newer());
            }
            other => panic!("expected a schema mismatch, got {other:?}"),
        }
        let schemas = count(&admin, &format!("SELECT count(*) FROM pg_namespace WHERE nspname = '{S}'")).await;
        assert_eq!(schemas, 0, "a refused connect creates nothing");

        // Four instances migrating at once: applied once.
        let runs = futures_join(env, S).await;
        assert!(runs.iter().all(|version| *version == SCHEMA_VERSION), "{runs:?}");
        let migrations = i64::from(SCHEMA_VERSION);
        assert_eq!(count(&admin, &format!("SELECT count(*) FROM {S}.idemdb_schema")).await, migrations);
        assert_eq!(count(&admin, &format!("SELECT count(*) FROM {S}.idemdb_meta")).await, 1);

        // Instances share the secret the migration made; another schema has its own.
        let a = builder(env, S).migrate_on_connect(false).connect().await.expect("connect");
        let b = builder(env, S).connect().await.expect("connect");
        let other = builder(env, "idemdb_migrations_other").connect().await.expect("connect");
        assert_eq!(a.key_hash(&scope(), &key("k")), b.key_hash(&scope(), &key("k")));
        assert_ne!(a.key_hash(&scope(), &key("k")), other.key_hash(&scope(), &key("k")));

        // A schema migrated by a newer idemdb: refused at connect and by migrate, untouched.
        let newer = i32::try_from(SCHEMA_VERSION + 1).expect("version");
        admin.execute(&format!("INSERT INTO {S}.idemdb_schema (version) VALUES ($1)"), &[&newer]).await.expect("bump");
        for refused in [builder(env, S).connect().await.map(drop), builder(env, S).migrate().await.map(drop)] {
            match refused {
                Err(ConnectError::SchemaMismatch(mismatch)) => {
                    assert!(mismatch.is_newer() && mismatch.found() == SCHEMA_VERSION + 1, "{mismatch}")
                }
                other => panic!("a newer schema must be refused, got {other:?}"),
            }
        }
        assert_eq!(
            count(&admin, &format!("SELECT count(*) FROM {S}.idemdb_schema")).await,
            migrations + 1,
            "untouched"
        );

        // Tables dropped under a connected store: a typed schema error, not "not found".
        admin.batch_execute("DROP SCHEMA idemdb_migrations_other CASCADE").await.expect("drop");
        let error = other.get(&scope(), &key("k")).await.expect_err("tables are gone");
        assert_eq!(error.code(), ErrorCode::SchemaMismatch, "{error}");

        // Bad settings are refused before any connection.
        let bad = PgStore::builder(env.url.clone()).schema("Bad-Name").connect().await.expect_err("bad schema");
        assert_eq!(bad.code(), ErrorCode::InvalidArgument);
        let bad = PgStore::connect("postgresql://[not a url").await.expect_err("bad url");
        assert_eq!(bad.code(), ErrorCode::InvalidArgument);
        let bad = builder(env, S).policy("op", Policy::default().with_lease_ttl(Duration::ZERO)).connect().await;
        assert_eq!(bad.expect_err("bad policy").code(), ErrorCode::InvalidPolicy);
    });
    Ok(())
}

async fn futures_join(env: &Env, schema: &str) -> Vec<u32> {
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let builder = builder(env, schema);
            tokio::spawn(async move { builder.migrate().await.expect("migrate") })
        })
        .collect();
    let mut versions = Vec::new();
    for handle in handles {
        versions.push(handle.await.expect("task"));
    }
    versions
}

pub fn transaction_api(env: &Env) -> Result<(), Failed> {
    block_on(async {
        const S: &str = "idemdb_txn";
        fresh_schema(&env.url, S).await;
        let clock = ManualClock::new(1_000_000_000);
        let policy =
            Policy::default().with_lease_ttl(Duration::from_secs(10)).with_expired_lease(ExpiredLease::Takeover);
        let store = builder(env, S)
            .policy("create_payment", policy)
            .clock(clock.clone())
            .time_source(TimeSource::HostClock)
            .connect()
            .await
            .expect("connect");
        let admin = admin(&env.url).await;
        admin.batch_execute(&format!("CREATE TABLE {S}.orders (id integer PRIMARY KEY)")).await.expect("orders");
        let orders = format!("SELECT count(*) FROM {S}.orders");
        let insert = format!("INSERT INTO {S}.orders (id) VALUES ($1)");

        // Committed: the order and the completion, together.
        let lease = acquire(&store, &key("k1")).await;
        let mut txn = store.begin().await.expect("begin");
        txn.client().execute(&insert, &[&1]).await.expect("order");
        txn.complete(&lease, b"order 1".to_vec()).await.expect("complete");
        txn.commit().await.expect("commit");
        assert_eq!(count(&admin, &orders).await, 1);
        let replay = store.reserve(Reserve::new(&scope(), &key("k1"), &FP)).await.expect("reserve");
        assert!(matches!(replay, Reservation::Replay { ref body, .. } if body == b"order 1"), "{replay:?}");

        // Dropped, or rolled back: neither the order nor the completion.
        let lease = acquire(&store, &key("k2")).await;
        for roll_back in [false, true] {
            let mut txn = store.begin().await.expect("begin");
            txn.client().execute(&insert, &[&2]).await.expect("order");
            txn.complete(&lease, b"order 2".to_vec()).await.expect("complete");
            if roll_back {
                txn.rollback().await.expect("rollback");
            } else {
                drop(txn);
            }
            assert_eq!(count(&admin, &orders).await, 1, "no order 2 (rolled back: {roll_back})");
            let record = store.get(&scope(), &key("k2")).await.expect("get").expect("record");
            assert!(matches!(record.state, State::InProgress { .. }), "{:?}", record.state);
        }

        // A stale lease (taken over after it expired): complete is refused, the order goes too.
        clock.advance(Duration::from_secs(11));
        let newer = acquire(&store, &key("k2")).await;
        assert_eq!(newer.fence(), lease.fence() + 1, "taken over");
        let mut txn = store.begin().await.expect("begin");
        txn.client().execute(&insert, &[&2]).await.expect("order");
        let refused = txn.complete(&lease, b"stale".to_vec()).await;
        assert!(
            matches!(refused, Err(Error::Refused(Refusal::Transition(TransitionError::StaleFence { .. })))),
            "{refused:?}"
        );
        drop(txn);
        assert_eq!(count(&admin, &orders).await, 1, "the stale holder's order rolled back");

        // An application statement that fails aborts the transaction: nothing commits.
        let mut txn = store.begin().await.expect("begin");
        let duplicate = txn.client().execute(&insert, &[&1]).await;
        assert!(duplicate.is_err(), "order 1 exists");
        assert!(txn.complete(&newer, b"after a failed statement".to_vec()).await.is_err());
        assert!(txn.commit().await.is_err(), "an aborted transaction does not commit");
        let record = store.get(&scope(), &key("k2")).await.expect("get").expect("record");
        assert!(matches!(record.state, State::InProgress { .. }));

        // Reserve, write and complete in one transaction (the embedded store's `execute`).
        let mut txn = store.begin().await.expect("begin");
        let Reservation::Acquired(lease) = txn.reserve(Reserve::new(&scope(), &key("k3"), &FP)).await.expect("reserve")
        else {
            panic!("a new key is acquired")
        };
        txn.client().execute(&insert, &[&3]).await.expect("order");
        txn.complete(&lease, b"order 3".to_vec()).await.expect("complete");
        assert_eq!(txn.now(), Some(idemdb_postgres::Clock::now(&clock)), "one time for the transaction");
        txn.commit().await.expect("commit");
        assert_eq!(count(&admin, &orders).await, 2);

        // A transaction with no decision commits the application's rows alone.
        let txn = store.begin().await.expect("begin");
        txn.client().execute(&insert, &[&4]).await.expect("order");
        txn.commit().await.expect("commit");
        assert_eq!(count(&admin, &orders).await, 3);
    });
    Ok(())
}

pub fn audit_trail(env: &Env) -> Result<(), Failed> {
    block_on(async {
        const S: &str = "idemdb_audit";
        fresh_schema(&env.url, S).await;
        let store = builder(env, S).connect().await.expect("connect");
        let raw = "secret-key-7f3a9c";
        let (s, k) = (scope(), key(raw));
        let traced = Reserve::new(&s, &k, &FP).traced("req-42").expect("a valid id");
        let lease = match store.reserve(traced).await.expect("reserve") {
            Reservation::Acquired(lease) => lease,
            other => panic!("{other:?}"),
        };
        store.complete(&lease, b"ch_1".to_vec()).await.expect("complete");
        let replay = store.reserve(Reserve::new(&scope(), &key(raw), &FP)).await.expect("replay");
        assert!(matches!(replay, Reservation::Replay { .. }));
        let mismatch = store
            .reserve(Reserve::new(&scope(), &key(raw), &Fingerprint::from_bytes([2; 32])))
            .await
            .expect("mismatch");
        assert!(matches!(mismatch, Reservation::Mismatch { .. }));
        // An invalid correlation id is refused where the request is built: no call takes it
        // (and no event: the kinds below are all there are).
        let bad = Reserve::new(&s, &k, &FP).traced("has space").expect_err("bad correlation");
        assert_eq!(idemdb_postgres::Error::from(bad).code(), ErrorCode::InvalidKey);

        // Buffered answers show before they are written, and are written by flush.
        let events = store.audit_events(100).await.expect("events");
        let kinds: Vec<AuditKind> = events.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [AuditKind::Reserved, AuditKind::Completed, AuditKind::Replayed, AuditKind::Conflict]);
        let admin = admin(&env.url).await;
        assert_eq!(count(&admin, &format!("SELECT count(*) FROM {S}.idemdb_audit")).await, 2, "decisions written");
        store.flush().await.expect("flush");
        assert_eq!(count(&admin, &format!("SELECT count(*) FROM {S}.idemdb_audit")).await, 4, "answers written");

        // Keyed hashes under the secret in the database, never the key itself.
        let secret: Vec<u8> =
            admin.query_one(&format!("SELECT secret FROM {S}.idemdb_meta"), &[]).await.expect("secret").get(0);
        let secret: [u8; 32] = secret.try_into().expect("32-byte secret");
        let expected = KeyHash::compute(&secret, &ScopedKey::new(scope(), key(raw)).encode());
        let events = store.audit_events(100).await.expect("events");
        assert_eq!(events.len(), 4);
        assert!(events.iter().all(|event| event.key_hash == expected), "every event hashes the key alike");
        assert_eq!(store.key_hash(&scope(), &key(raw)), expected);
        assert_eq!(events[0].correlation.as_deref(), Some("req-42"));
        assert_eq!(events[0].fingerprint_prefix, Some(FP.prefix()));
        let rows: Vec<String> = admin
            .query(&format!("SELECT a::text FROM {S}.idemdb_audit a"), &[])
            .await
            .expect("rows")
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert!(rows.iter().all(|row| !row.contains(raw)), "no raw key in the audit trail: {rows:?}");

        // With the audit trail off, nothing is written.
        let quiet = builder(env, S).audit(false).connect().await.expect("connect");
        let _ = quiet.reserve(Reserve::new(&scope(), &key("quiet-key"), &FP)).await.expect("reserve");
        quiet.flush().await.expect("flush");
        assert_eq!(count(&admin, &format!("SELECT count(*) FROM {S}.idemdb_audit")).await, 4);
    });
    Ok(())
}

pub fn retention(env: &Env) -> Result<(), Failed> {
    block_on(async {
        const S: &str = "idemdb_retention";
        fresh_schema(&env.url, S).await;
        const T0: u64 = 1_000_000_000;
        let policy = Policy::default()
            .with_lease_ttl(Duration::from_secs(1))
            .with_response_ttl(Duration::from_secs(10))
            .with_tombstone_ttl(Duration::from_secs(20));
        let open = |clock: &ManualClock| {
            builder(env, S)
                .policy("create_payment", policy.clone())
                .clock(clock.clone())
                .time_source(TimeSource::HostClock)
                .audit_retention(Duration::from_secs(15))
                .connect()
        };
        let clock = ManualClock::new(T0);
        let store = open(&clock).await.expect("connect");
        let admin = admin(&env.url).await;

        let first = acquire(&store, &key("k")).await;
        assert_eq!(first.fence(), T0, "a fresh fence is the time in ms");
        store.complete(&first, b"r".to_vec()).await.expect("complete");
        for name in ["a", "b", "c"] {
            let lease = acquire(&store, &key(name)).await;
            store.fail(&lease, Failure::Retryable).await.expect("release");
        }

        // Before the response TTL nothing is due.
        clock.set(T0 + 9_999);
        let report = store.purge_expired(100).await.expect("purge");
        assert_eq!((report.tombstoned, report.forgotten), (0, 0));

        // At the response TTL: a tombstone, and the key answers expired.
        clock.set(T0 + 10_000);
        let report = store.purge_expired(100).await.expect("purge");
        assert_eq!(report.tombstoned, 1);
        let answer = store.reserve(Reserve::new(&scope(), &key("k"), &FP)).await.expect("reserve");
        assert!(matches!(answer, Reservation::Expired { .. }), "{answer:?}");

        // At the tombstone TTL: forgotten, a budget of 1 at a time, with `more` set.
        clock.set(T0 + 30_000);
        let report = store.purge_expired(1).await.expect("purge");
        assert_eq!(report.forgotten, 1);
        assert!(report.more, "three more are due");
        let mut forgotten = 1;
        loop {
            let report = store.purge_expired(100).await.expect("purge");
            forgotten += report.forgotten;
            if !report.more {
                break;
            }
        }
        assert_eq!(forgotten, 4);
        assert_eq!(count(&admin, &format!("SELECT count(*) FROM {S}.idemdb_records")).await, 0);
        let floor = count(&admin, &format!("SELECT fence_floor FROM {S}.idemdb_meta")).await;
        assert_eq!(floor as u64, first.fence(), "the fence floor is the highest removed fence");
        let events = store.audit_events(1000).await.expect("events");
        assert!(events.iter().any(|e| e.kind == AuditKind::Purged));

        // Audit events past their retention (15 s) went in the same passes.
        assert!(events.iter().all(|e| e.at.as_millis() >= T0 + 15_000), "old events were removed");

        // Another instance whose clock reads earlier than that fence still issues a higher one.
        let behind = ManualClock::new(T0 - 500_000);
        let other = open(&behind).await.expect("connect");
        let again = acquire(&other, &key("k")).await;
        assert!(again.fence() > first.fence(), "fence {} after floor {}", again.fence(), first.fence());
    });
    Ok(())
}

pub fn import(env: &Env) -> Result<(), Failed> {
    block_on(async {
        const S: &str = "idemdb_import";
        fresh_schema(&env.url, S).await;
        const T0: u64 = 1_700_000_000_000;
        let policy = Policy::default()
            .with_lease_ttl(Duration::from_secs(30))
            .with_response_ttl(Duration::from_secs(3600))
            .with_tombstone_ttl(Duration::from_secs(7200));
        let clock = ManualClock::new(T0);
        let embedded = idemdb::Store::builder()
            .clock(clock.clone())
            .policy("create_payment", policy.clone())
            .in_memory()
            .expect("embedded store");
        let lease = |store: &idemdb::Store, name: &str| match store
            .reserve(Reserve::new(&scope(), &key(name), &FP))
            .expect("reserve")
        {
            Reservation::Acquired(lease) => lease,
            other => panic!("{other:?}"),
        };
        let early = lease(&embedded, "tombstone");
        embedded.complete(&early, b"old".to_vec()).expect("complete");
        clock.set(T0 + 3_600_000);
        embedded.purge_expired(100).expect("purge");
        let completed = lease(&embedded, "completed");
        embedded.complete(&completed, b"{\"charge\":\"ch_1\"}".to_vec()).expect("complete");
        let failed = lease(&embedded, "failed");
        embedded.fail(&failed, Failure::Definitive(b"declined".to_vec())).expect("fail");
        let released = lease(&embedded, "released");
        embedded.fail(&released, Failure::Retryable).expect("release");
        let uncertain = lease(&embedded, "uncertain");
        embedded.fail(&uncertain, Failure::Uncertain).expect("uncertain");
        let _in_progress = lease(&embedded, "in-progress");

        let mut filter = idemdb::ListFilter::default();
        filter.limit = 1000;
        let records: Vec<(ScopedKey, idemdb_postgres::Record)> = embedded
            .list(&filter)
            .expect("list")
            .records
            .into_iter()
            .map(|listed| (listed.scoped, listed.record))
            .collect();
        assert_eq!(records.len(), 6);

        let pg = builder(env, S)
            .policy("create_payment", policy)
            .clock(clock.clone())
            .time_source(TimeSource::HostClock)
            .connect()
            .await
            .expect("connect");
        let report = pg.import(&records, false).await.expect("import");
        assert_eq!((report.imported, report.skipped), (6, 0));
        let report = pg.import(&records, false).await.expect("import again");
        assert_eq!((report.imported, report.skipped), (0, 6), "existing records are kept");
        let report = pg.import(&records, true).await.expect("import with overwrite");
        assert_eq!((report.imported, report.skipped), (6, 0));
        for (scoped, record) in &records {
            assert_eq!(pg.get(&scoped.scope, &scoped.key).await.expect("get").as_ref(), Some(record));
        }

        // Both stores answer every key alike, now and after the lease and the response TTL.
        for at in [T0 + 3_600_000, T0 + 3_600_000 + 31_000, T0 + 7_300_000] {
            clock.set(at);
            for (scoped, _) in &records {
                for fingerprint in [FP, Fingerprint::from_bytes([2; 32])] {
                    let embedded_answer =
                        embedded.reserve(Reserve::new(&scoped.scope, &scoped.key, &fingerprint)).expect("reserve");
                    let pg_answer =
                        pg.reserve(Reserve::new(&scoped.scope, &scoped.key, &fingerprint)).await.expect("reserve");
                    assert_eq!(pg_answer, embedded_answer, "{} at {at}", scoped.key.as_str());
                }
            }
        }
    });
    Ok(())
}

/// The crate docs' example, run: three deliveries, one charge.
pub fn crate_docs_example(env: &Env) -> Result<(), Failed> {
    block_on(async {
        const S: &str = "idemdb_docs";
        fresh_schema(&env.url, S).await;
        let store = builder(env, S).connect().await.expect("connect");
        let scope = Scope::new("acme", "create_payment").expect("scope");
        let key = IdempotencyKey::new("order-842:authorize-v1").expect("key");
        let fingerprint = Fingerprint::from_bytes([1; 32]);
        let mut charges = 0;
        for _delivery in 0..3 {
            match store.reserve(Reserve::new(&scope, &key, &fingerprint)).await.expect("reserve") {
                Reservation::Acquired(lease) => {
                    charges += 1;
                    store.complete(&lease, br#"{"charge":"ch_1"}"#.to_vec()).await.expect("complete");
                }
                Reservation::Replay { body, .. } => assert_eq!(body, br#"{"charge":"ch_1"}"#),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(charges, 1);
    });
    Ok(())
}

/// The idemdb binary next to this test binary (`cargo test --workspace` builds it); built here
/// with the cargo that built this test when it is missing or older than this test (`cargo
/// test -p idemdb-postgres`; cargo does nothing when it is current).
pub fn cli_binary() -> Result<std::path::PathBuf, Failed> {
    let exe = std::env::current_exe().map_err(|e| format!("this test's path: {e}"))?;
    let dir = exe.parent().and_then(std::path::Path::parent).ok_or("this test binary has no target directory")?;
    let binary = dir.join(format!("idemdb{}", std::env::consts::EXE_SUFFIX));
    let modified = |path: &std::path::Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    if !binary.is_file() || modified(&binary) < modified(&exe) {
        // target/<profile>/deps/this-test → target/
        let target = dir.parent().ok_or("no target directory")?;
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "idemdb-cli", "--bin", "idemdb", "--target-dir"])
            .arg(target)
            .status()
            .map_err(|e| format!("cargo build -p idemdb-cli: {e}"))?;
        if !status.success() || !binary.is_file() {
            return Err(format!("cargo build -p idemdb-cli did not build {}", binary.display()).into());
        }
    }
    Ok(binary)
}

fn cli(binary: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let output = std::process::Command::new(binary).args(args).output().expect("run idemdb");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "idemdb {args:?}: {}\n{stdout}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null)
}

/// The move `docs/scaling.md` describes, with the CLI: a full export of a store file, then
/// `idemdb import --postgres`; every record arrives as it was, a second import skips them all.
pub fn cli_import(env: &Env) -> Result<(), Failed> {
    let binary = cli_binary()?;
    block_on(async {
        const S: &str = "idemdb_cli_import";
        fresh_schema(&env.url, S).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("payments.idemdb");
        let embedded = idemdb::Store::open(&file).expect("create a store file");
        let lease = |name: &str| match embedded.reserve(Reserve::new(&scope(), &key(name), &FP)).expect("reserve") {
            Reservation::Acquired(lease) => lease,
            other => panic!("{other:?}"),
        };
        embedded.complete(&lease("paid"), br#"{"charge":"ch_1"}"#.to_vec()).expect("complete");
        embedded.fail(&lease("declined"), Failure::Definitive(b"card declined".to_vec())).expect("fail");
        embedded.fail(&lease("retry"), Failure::Retryable).expect("release");
        embedded.fail(&lease("unsure"), Failure::Uncertain).expect("uncertain");
        let _running = lease("running");
        let mut filter = idemdb::ListFilter::default();
        filter.limit = 100;
        let records = embedded.list(&filter).expect("list").records;
        drop(embedded);

        let backup = dir.path().join("backup.jsonl");
        let (file, backup) = (file.to_str().expect("path"), backup.to_str().expect("path"));
        cli(&binary, &["export", file, "--show-keys", "--show-payloads", "-o", backup]);
        let import = |extra: &[&str]| {
            let mut args = vec!["import", "--postgres", env.url.as_str(), "--schema", S, backup, "--json"];
            args.extend_from_slice(extra);
            cli(&binary, &args)
        };
        let first = import(&[]);
        assert_eq!((first["imported"].as_u64(), first["skipped_existing"].as_u64()), (Some(5), Some(0)), "{first}");
        let again = import(&[]);
        assert_eq!((again["imported"].as_u64(), again["skipped_existing"].as_u64()), (Some(0), Some(5)), "{again}");
        assert_eq!(import(&["--overwrite"])["imported"].as_u64(), Some(5));

        let pg = builder(env, S).connect().await.expect("connect");
        assert_eq!(records.len(), 5);
        for listed in &records {
            let stored = pg.get(&listed.scoped.scope, &listed.scoped.key).await.expect("get");
            assert_eq!(stored.as_ref(), Some(&listed.record), "{:?}", listed.scoped.key);
        }
    });
    Ok(())
}

/// Arguments after `--postgres`, and environment variables.
type Invocation = (Vec<String>, Vec<(&'static str, String)>);

/// `idemdb import --postgres` with a password in each connection-string form (URL, key=value,
/// URL with `?password=`), in `PGPASSWORD`, in a password file and in `~/.pgpass`: on success
/// (the server trusts loopback, so any password connects) and on error (a closed port), no
/// output of the command holds the password.
pub fn passwords_never_printed(env: &Env) -> Result<(), Failed> {
    const SECRET: &str = "pw-never-printed-19af";
    let binary = cli_binary()?;
    block_on(async {
        const S: &str = "idemdb_passwords";
        fresh_schema(&env.url, S).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let input = dir.path().join("empty.jsonl");
        std::fs::write(&input, "").expect("write an empty export");
        let password_file = dir.path().join("password");
        std::fs::write(&password_file, format!("{SECRET}\n")).expect("password file");
        let home = dir.path().join("home");
        std::fs::create_dir(&home).expect("home");
        std::fs::write(home.join(".pgpass"), format!("*:*:*:*:{SECRET}\n")).expect("pgpass");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(home.join(".pgpass"), std::fs::Permissions::from_mode(0o600)).expect("chmod");
        }
        let server = crate::proxy::server_addr(&env.url);
        let (host, port) = (server.ip().to_string(), server.port().to_string());
        let input = input.to_str().expect("path");
        let mut runs = 0;
        for reachable in [true, false] {
            let port = if reachable { port.clone() } else { "1".to_string() };
            let url = format!("postgresql://postgres@{host}:{port}/postgres");
            let forms: Vec<Invocation> = vec![
                (vec![format!("postgresql://postgres:{SECRET}@{host}:{port}/postgres")], vec![]),
                (vec![format!("host={host} port={port} user=postgres password={SECRET} dbname=postgres")], vec![]),
                (vec![format!("{url}?password={SECRET}")], vec![]),
                (vec![url.clone()], vec![("PGPASSWORD", SECRET.to_string())]),
                (vec![url.clone(), "--password-file".into(), password_file.display().to_string()], vec![]),
                (vec![url.clone()], vec![("HOME", home.display().to_string())]),
                (
                    vec![String::new()],
                    vec![
                        ("PGHOST", host.clone()),
                        ("PGPORT", port.clone()),
                        ("PGUSER", "postgres".into()),
                        ("PGPASSWORD", SECRET.into()),
                    ],
                ),
            ];
            for (args, vars) in forms {
                let output = std::process::Command::new(&binary)
                    .args(["import", "--schema", S, "--postgres"])
                    .args(&args)
                    .arg(input)
                    .env("RUST_LOG", "trace")
                    .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
                    .output()
                    .expect("run idemdb");
                let all =
                    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
                assert_eq!(output.status.success(), reachable, "{args:?} {vars:?}: {all}");
                assert!(all.contains(&format!("{host}:{port}")), "the output names the database: {all}");
                assert!(!all.contains(SECRET), "{args:?} {vars:?}: the password was printed:\n{all}");
                runs += 1;
            }
        }
        println!("passwords: {runs} runs of idemdb import, none printed the password");
        admin(&env.url).await.batch_execute(&format!("DROP SCHEMA {S} CASCADE")).await.expect("drop schema");
    });
    Ok(())
}

/// An import of 100,000 records (`IDEMDB_IMPORT_RECORDS` to change the count) in one
/// transaction, then the same import again (every key skipped): the time is printed, never
/// asserted; every record is counted in the table afterwards.
pub fn import_at_scale(env: &Env) -> Result<(), Failed> {
    let records: usize = std::env::var("IDEMDB_IMPORT_RECORDS").ok().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    block_on(async {
        const S: &str = "idemdb_import_scale";
        fresh_schema(&env.url, S).await;
        let embedded = idemdb::Store::in_memory().expect("memory store");
        let Reservation::Acquired(lease) =
            embedded.reserve(Reserve::new(&scope(), &key("template"), &FP)).expect("reserve")
        else {
            panic!("a new key is acquired")
        };
        embedded.complete(&lease, br#"{"charge":"ch_1"}"#.to_vec()).expect("complete");
        let template = embedded.get(&scope(), &key("template")).expect("get").expect("the record");
        let batch: Vec<(ScopedKey, Record)> = (0..records)
            .map(|n| (ScopedKey::new(scope(), key(&format!("imported-{n:07}"))), template.clone()))
            .collect();
        let pg = builder(env, S).operation_timeout(Duration::from_secs(3600)).connect().await.expect("connect");
        let started = std::time::Instant::now();
        let report = pg.import(&batch, false).await.expect("import");
        let first = started.elapsed();
        let started = std::time::Instant::now();
        let again = pg.import(&batch, false).await.expect("import again");
        let second = started.elapsed();
        println!(
            "import: {records} records in {:.2} s ({:.0} records/s); again (all skipped) in {:.2} s",
            first.as_secs_f64(),
            records as f64 / first.as_secs_f64(),
            second.as_secs_f64()
        );
        assert_eq!((report.imported, report.skipped), (records as u64, 0));
        assert_eq!((again.imported, again.skipped), (0, records as u64));
        let admin = admin(&env.url).await;
        assert_eq!(count(&admin, &format!("SELECT count(*) FROM {S}.idemdb_records")).await, records as i64);
        let sample = pg.get(&scope(), &key(&format!("imported-{:07}", records - 1))).await.expect("get");
        assert_eq!(sample.as_ref(), Some(&template));
        admin.batch_execute(&format!("DROP SCHEMA {S} CASCADE")).await.expect("drop schema");
    });
    Ok(())
}

/// Reserved schema names are refused with a typed error before anything is created there.
pub fn reserved_schemas_are_refused(env: &Env) -> Result<(), Failed> {
    block_on(async {
        for schema in ["information_schema", "pg_catalog", "pg_idemdb"] {
            let refused = builder(env, schema).connect().await.expect_err("a reserved schema");
            assert!(matches!(refused, ConnectError::ReservedSchema(_)), "{schema}: {refused}");
            assert_eq!(refused.code(), ErrorCode::InvalidArgument);
            let refused = builder(env, schema).migrate().await.expect_err("a reserved schema");
            assert!(matches!(refused, ConnectError::ReservedSchema(_)), "{schema}: {refused}");
        }
        let admin = admin(&env.url).await;
        let created = count(
            &admin,
            "SELECT count(*) FROM pg_class WHERE relname LIKE 'idemdb\\_%' \
             AND relnamespace IN ('information_schema'::regnamespace, 'pg_catalog'::regnamespace)",
        )
        .await;
        assert_eq!(created, 0, "no idemdb table in a reserved schema");
    });
    Ok(())
}
