//! Durable reserve and replay throughput, the PostgreSQL adapter beside the embedded redb store
//! on the same machine, at 1 and 32 concurrent callers; the ratios come from one run.
//!
//! ```sh
//! bash scripts/with-postgres.sh cargo bench -p idemdb-postgres             # full run
//! bash scripts/with-postgres.sh cargo bench -p idemdb-postgres -- --quick  # smoke run
//! ```
//!
//! Not a test: nothing asserts on timing. Both stores are durable: the redb store flushes every
//! commit (`Durability::Immediate`, its file under `target/tmp/idemdb-bench-pg/` or
//! `IDEMDB_BENCH_DIR`), the PostgreSQL server runs with its defaults (`fsync` and
//! `synchronous_commit` on). Both keep the audit trail. The redb store is called through its
//! blocking API from threads (one per caller); the PostgreSQL adapter from tasks on a Tokio
//! runtime with as many pooled connections as callers.

mod common;

use common::threads;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemdb::{Durability, Fingerprint, IdempotencyKey, Reservation, Reserve, Scope, Store};
use idemdb_postgres::PgStore;

const REPLAY_KEYS: usize = 2_000;

struct Settings {
    duration: Duration,
    rounds: usize,
}

fn scope() -> Scope {
    Scope::new("acme", "create_payment").expect("scope")
}

fn fingerprint() -> Fingerprint {
    Fingerprint::from_bytes([7; 32])
}

fn new_key() -> IdempotencyKey {
    Store::new_key().expect("random key")
}

/// Runs `callers` tasks calling `op` until the duration is over; operations a second.
async fn tasks<F, Fut>(callers: usize, duration: Duration, op: F) -> f64
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let started = Instant::now();
    let deadline = started + duration;
    let handles: Vec<_> = (0..callers)
        .map(|caller| {
            let op = Arc::clone(&op);
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    op(caller, n).await;
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut done = 0;
    for handle in handles {
        done += handle.await.expect("caller task");
    }
    done as f64 / started.elapsed().as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

async fn pg_store(url: &str, pool: usize) -> PgStore {
    PgStore::builder(url).schema("idemdb_bench").pool_size(pool).connect().await.expect("connect to PostgreSQL")
}

fn embedded(dir: &std::path::Path, name: &str) -> Store {
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    Store::builder().durability(Durability::Immediate).open(&path).expect("open the embedded store")
}

/// Completed records for the replay rows, the same keys in both stores.
async fn populate(redb: &Store, pg: &PgStore, keys: &[IdempotencyKey]) {
    for key in keys {
        if let Reservation::Acquired(lease) =
            redb.reserve(Reserve::new(&scope(), key, &fingerprint())).expect("reserve")
        {
            redb.complete(&lease, vec![b'r'; 200]).expect("complete");
        }
        if let Reservation::Acquired(lease) =
            pg.reserve(Reserve::new(&scope(), key, &fingerprint())).await.expect("reserve")
        {
            pg.complete(&lease, vec![b'r'; 200]).await.expect("complete");
        }
    }
}

fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let settings = if quick {
        Settings { duration: Duration::from_millis(500), rounds: 1 }
    } else {
        Settings { duration: Duration::from_secs(3), rounds: 3 }
    };
    let Ok(url) = std::env::var("IDEMDB_PG_URL") else {
        println!(
            "skipped: IDEMDB_PG_URL is not set (bash scripts/with-postgres.sh cargo bench -p idemdb-postgres starts a server)"
        );
        return;
    };
    let dir = std::env::var_os("IDEMDB_BENCH_DIR").map(std::path::PathBuf::from).unwrap_or_else(|| {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/tmp/idemdb-bench-pg")
    });
    std::fs::create_dir_all(&dir).expect("bench directory");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");

    runtime.block_on(async {
        let (admin, connection) =
            idemdb_postgres::tokio_postgres::connect(&url, idemdb_postgres::tokio_postgres::NoTls)
                .await
                .expect("connect");
        tokio::spawn(connection);
        admin.batch_execute("DROP SCHEMA IF EXISTS idemdb_bench CASCADE").await.expect("drop schema");
        let version: String = admin.query_one("SHOW server_version", &[]).await.expect("version").get(0);
        let sync: String = admin.query_one("SHOW synchronous_commit", &[]).await.expect("setting").get(0);
        let fsync: String = admin.query_one("SHOW fsync", &[]).await.expect("setting").get(0);
        eprintln!(
            "PostgreSQL {version} (fsync {fsync}, synchronous_commit {sync}); embedded store in {}",
            dir.display()
        );
    });

    let mut rows = Vec::new();
    for callers in [1usize, 32] {
        // Durable reserve of new keys.
        let (mut redb_rates, mut pg_rates) = (Vec::new(), Vec::new());
        for round in 0..settings.rounds {
            let redb = embedded(&dir, &format!("reserve-{callers}-{round}.idemdb"));
            redb_rates.push(threads(callers, settings.duration, move |_, _| {
                let answer = redb.reserve(Reserve::new(&scope(), &new_key(), &fingerprint())).expect("reserve");
                assert!(matches!(answer, Reservation::Acquired(_)));
            }));
            let pg = runtime.block_on(pg_store(&url, callers));
            pg_rates.push(runtime.block_on(tasks(callers, settings.duration, move |_, _| {
                let pg = pg.clone();
                async move {
                    let answer = pg.reserve(Reserve::new(&scope(), &new_key(), &fingerprint())).await.expect("reserve");
                    assert!(matches!(answer, Reservation::Acquired(_)));
                }
            })));
        }
        rows.push(("durable reserve, new key", callers, median(redb_rates), median(pg_rates)));

        // Replay of completed keys.
        let keys: Arc<Vec<IdempotencyKey>> = Arc::new((0..REPLAY_KEYS).map(|_| new_key()).collect());
        let redb = embedded(&dir, &format!("replay-{callers}.idemdb"));
        let pg = runtime.block_on(pg_store(&url, callers));
        runtime.block_on(populate(&redb, &pg, &keys));
        let (mut redb_rates, mut pg_rates) = (Vec::new(), Vec::new());
        for _ in 0..settings.rounds {
            let (redb, keys_r) = (redb.clone(), Arc::clone(&keys));
            redb_rates.push(threads(callers, settings.duration, move |caller, n| {
                let key = &keys_r[(caller * 997 + n as usize) % keys_r.len()];
                let answer = redb.reserve(Reserve::new(&scope(), key, &fingerprint())).expect("reserve");
                assert!(matches!(answer, Reservation::Replay { .. }));
            }));
            let (pg, keys_p) = (pg.clone(), Arc::clone(&keys));
            pg_rates.push(runtime.block_on(tasks(callers, settings.duration, move |caller, n| {
                let (pg, keys) = (pg.clone(), Arc::clone(&keys_p));
                async move {
                    let key = &keys[(caller * 997 + n as usize) % keys.len()];
                    let answer = pg.reserve(Reserve::new(&scope(), key, &fingerprint())).await.expect("reserve");
                    assert!(matches!(answer, Reservation::Replay { .. }));
                }
            })));
        }
        rows.push(("replay of a completed key", callers, median(redb_rates), median(pg_rates)));
    }

    println!("| workload | callers | embedded (redb) ops/s | PostgreSQL ops/s | PostgreSQL / embedded |");
    println!("|---|---:|---:|---:|---:|");
    for (workload, callers, redb, pg) in rows {
        println!("| {workload} | {callers} | {redb:.0} | {pg:.0} | {:.2}x |", pg / redb);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
