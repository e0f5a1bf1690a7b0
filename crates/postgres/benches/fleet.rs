//! Figures for fleets on PostgreSQL, from one run on one machine:
//!
//! * **Purge**: loads expired records (1,000,000 by default, `IDEMDB_BENCH_PURGE_RECORDS` to
//!   change it) with one server-side `INSERT … SELECT … generate_series` copying one imported
//!   record, then times a full purge by [`PurgeTask`]'s batches (1000 records a batch), and
//!   measures the latency (p50, p99) of concurrent durable reserves of new keys without a purge
//!   and while the purge runs.
//! * **Against hand-written SQL**: a minimal implementation of the same contract in plain SQL
//!   (`INSERT … ON CONFLICT DO NOTHING`, `SELECT … FOR UPDATE`, `UPDATE`, one transaction for
//!   the reservation and one statement for the completion, a single `SELECT` for a replay)
//!   beside the adapter and the embedded redb store: reserve + complete at 1 and 32 callers,
//!   replay at 32; ratios adapter / hand-written and adapter / embedded.
//!
//! ```sh
//! bash scripts/with-postgres.sh cargo bench -p idemdb-postgres --bench fleet             # full run
//! bash scripts/with-postgres.sh cargo bench -p idemdb-postgres --bench fleet -- --quick  # smoke
//! ```
//!
//! Not a test: nothing asserts on timing.

mod common;

use common::threads;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use idemdb::{Durability, Fingerprint, IdempotencyKey, Reservation, Reserve, Scope, ScopedKey, Store};
use idemdb_postgres::tokio_postgres::{self, Client, NoTls};
use idemdb_postgres::{PgStore, PurgeTask};

const SCHEMA: &str = "idemdb_bench_fleet";
const REPLAY_KEYS: usize = 2_000;
const RESULT: [u8; 200] = [b'r'; 200];

fn scope() -> Scope {
    Scope::new("acme", "create_payment").expect("scope")
}

fn fingerprint() -> Fingerprint {
    Fingerprint::from_bytes([7; 32])
}

fn new_key() -> IdempotencyKey {
    Store::new_key().expect("random key")
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

async fn adapter(url: &str, pool: usize) -> PgStore {
    PgStore::builder(url)
        .schema(SCHEMA)
        .pool_size(pool)
        .operation_timeout(Duration::from_secs(600))
        .connect()
        .await
        .expect("connect to PostgreSQL")
}

/// Runs `callers` tasks calling `op` until `stop` is set or `duration` is over; each call's
/// latency.
async fn timed_tasks<F, Fut>(callers: usize, duration: Duration, stop: Arc<AtomicBool>, op: F) -> Vec<Duration>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let deadline = Instant::now() + duration;
    let handles: Vec<_> = (0..callers)
        .map(|caller| {
            let (op, stop) = (Arc::clone(&op), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut n = 0u64;
                while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    op(caller, n).await;
                    latencies.push(started.elapsed());
                    n += 1;
                }
                latencies
            })
        })
        .collect();
    let mut all = Vec::new();
    for handle in handles {
        all.extend(handle.await.expect("caller task"));
    }
    all.sort();
    all
}

/// Operations a second of `callers` tasks over `duration`.
async fn rate<F, Fut>(callers: usize, duration: Duration, op: F) -> f64
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let started = Instant::now();
    let done = timed_tasks(callers, duration, Arc::new(AtomicBool::new(false)), op).await.len();
    done as f64 / started.elapsed().as_secs_f64()
}

async fn purge_figures(url: &str, records: u64, callers: usize, window: Duration) {
    let admin = connect(url).await;
    admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")).await.expect("drop schema");
    let store = adapter(url, callers + 1).await;
    // One record written long ago (a manual clock at 1970 + 1000 s): past its response and its
    // tombstone TTL at the database's time, so the purge forgets it.
    let clock = idemdb::ManualClock::new(1_000_000);
    let embedded = Store::builder().clock(clock).in_memory().expect("embedded store");
    let Reservation::Acquired(lease) =
        embedded.reserve(Reserve::new(&scope(), &new_key(), &fingerprint())).expect("reserve")
    else {
        panic!("a new key is acquired")
    };
    embedded.complete(&lease, RESULT.to_vec()).expect("complete");
    let mut filter = idemdb::ListFilter::default();
    filter.limit = 10;
    let template = embedded.list(&filter).expect("list").records.remove(0).record;
    let seed = ScopedKey::new(scope(), IdempotencyKey::new("template").expect("key"));
    store.import(&[(seed, template)], false).await.expect("import");
    let started = Instant::now();
    admin
        .execute(
            &format!(
                "INSERT INTO {SCHEMA}.idemdb_records (tenant, operation, key, state, due_at, record) \
                 SELECT tenant, operation, 'expired-' || g, state, due_at, record \
                 FROM {SCHEMA}.idemdb_records, generate_series(2, $1::bigint) g WHERE key = 'template'"
            ),
            &[&i64::try_from(records).expect("count")],
        )
        .await
        .expect("load");
    admin.batch_execute(&format!("VACUUM ANALYZE {SCHEMA}.idemdb_records")).await.expect("analyze");
    println!("purge: loaded {records} expired records in {:.2} s", started.elapsed().as_secs_f64());

    let reserve = {
        let store = store.clone();
        move |_: usize, _: u64| {
            let store = store.clone();
            async move {
                let answer = store.reserve(Reserve::new(&scope(), &new_key(), &fingerprint())).await.expect("reserve");
                assert!(matches!(answer, Reservation::Acquired(_)));
            }
        }
    };
    let quiet = timed_tasks(callers, window, Arc::new(AtomicBool::new(false)), reserve.clone()).await;

    let mut task = PurgeTask::new(store.clone());
    task.batch_size = 1000;
    let stop = Arc::new(AtomicBool::new(false));
    let during = tokio::spawn(timed_tasks(callers, Duration::from_secs(24 * 3600), Arc::clone(&stop), reserve));
    let round = task.round().await.expect("purge");
    stop.store(true, Ordering::Relaxed);
    let during = during.await.expect("reserves");
    let took = round.took.as_secs_f64();
    println!(
        "purge: {} records forgotten in {} batches of 1000 in {took:.2} s ({:.0} records/s), {} audit events written",
        round.report.forgotten,
        round.batches,
        round.report.forgotten as f64 / took,
        round.report.forgotten
    );
    let left: i64 = admin
        .query_one(&format!("SELECT count(*) FROM {SCHEMA}.idemdb_records WHERE key LIKE 'expired-%'"), &[])
        .await
        .expect("count")
        .get(0);
    println!("purge: {left} expired records left");
    println!("| reserves ({callers} callers, new keys) | calls | p50 ms | p99 ms |");
    println!("|---|---:|---:|---:|");
    for (name, latencies) in [("without a purge", &quiet), ("during the purge", &during)] {
        println!(
            "| {name} | {} | {:.2} | {:.2} |",
            latencies.len(),
            percentile(latencies, 0.5).as_secs_f64() * 1e3,
            percentile(latencies, 0.99).as_secs_f64() * 1e3
        );
    }
    println!(
        "purge: p50 during / without {:.2}x, p99 during / without {:.2}x",
        percentile(&during, 0.5).as_secs_f64() / percentile(&quiet, 0.5).as_secs_f64(),
        percentile(&during, 0.99).as_secs_f64() / percentile(&quiet, 0.99).as_secs_f64()
    );
    admin.batch_execute(&format!("DROP SCHEMA {SCHEMA} CASCADE")).await.expect("drop schema");
}

/// The hand-written contract: one table, a reservation in one transaction (insert the key if
/// new, lock the row, check the request's hash and the lock), a completion in one statement, a
/// replay in one `SELECT`.
struct HandWritten {
    client: Client,
}

const HW_TABLE: &str = "idemdb_bench_fleet.hand_written_keys";

impl HandWritten {
    async fn create(url: &str) {
        let admin = connect(url).await;
        admin
            .batch_execute(&format!(
                "DROP TABLE IF EXISTS {HW_TABLE};
                 CREATE TABLE {HW_TABLE} (
                     tenant text COLLATE \"C\" NOT NULL,
                     key text COLLATE \"C\" NOT NULL,
                     request_hash bytea NOT NULL,
                     locked_at timestamptz,
                     response bytea,
                     created_at timestamptz NOT NULL DEFAULT now(),
                     PRIMARY KEY (tenant, key)
                 )"
            ))
            .await
            .expect("create the hand-written table");
    }

    async fn connect(url: &str) -> HandWritten {
        HandWritten { client: connect(url).await }
    }

    /// `true`: this caller holds the key and runs the effect.
    async fn reserve(&self, tenant: &str, key: &str, hash: &[u8]) -> bool {
        let c = &self.client;
        c.batch_execute("BEGIN").await.expect("begin");
        let inserted = c
            .execute(
                &format!(
                    "INSERT INTO {HW_TABLE} (tenant, key, request_hash, locked_at) VALUES ($1, $2, $3, now()) \
                     ON CONFLICT DO NOTHING"
                ),
                &[&tenant, &key, &hash],
            )
            .await
            .expect("insert");
        let row = c
            .query_one(
                &format!(
                    "SELECT request_hash, locked_at < now() - interval '60 seconds', response IS NOT NULL \
                     FROM {HW_TABLE} WHERE tenant = $1 AND key = $2 FOR UPDATE"
                ),
                &[&tenant, &key],
            )
            .await
            .expect("lock");
        let (stored, stale, done): (Vec<u8>, Option<bool>, bool) = (row.get(0), row.get(1), row.get(2));
        let mine = inserted == 1 || (stored == hash && !done && stale == Some(true));
        if mine && inserted == 0 {
            c.execute(
                &format!("UPDATE {HW_TABLE} SET locked_at = now() WHERE tenant = $1 AND key = $2"),
                &[&tenant, &key],
            )
            .await
            .expect("relock");
        }
        c.batch_execute("COMMIT").await.expect("commit");
        mine
    }

    async fn complete(&self, tenant: &str, key: &str, response: &[u8]) {
        self.client
            .execute(
                &format!("UPDATE {HW_TABLE} SET response = $3, locked_at = NULL WHERE tenant = $1 AND key = $2"),
                &[&tenant, &key, &response],
            )
            .await
            .expect("complete");
    }

    async fn replay(&self, tenant: &str, key: &str, hash: &[u8]) -> Option<Vec<u8>> {
        let row = self
            .client
            .query_opt(
                &format!("SELECT request_hash, response FROM {HW_TABLE} WHERE tenant = $1 AND key = $2"),
                &[&tenant, &key],
            )
            .await
            .expect("replay")?;
        let stored: Vec<u8> = row.get(0);
        (stored == hash).then(|| row.get(1))
    }
}

fn embedded(dir: &std::path::Path, name: &str) -> Store {
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    Store::builder().durability(Durability::Immediate).open(&path).expect("open the embedded store")
}

async fn hand_written_pool(url: &str, callers: usize) -> Arc<Vec<HandWritten>> {
    let mut clients = Vec::new();
    for _ in 0..callers {
        clients.push(HandWritten::connect(url).await);
    }
    Arc::new(clients)
}

fn comparison(runtime: &tokio::runtime::Runtime, url: &str, dir: &std::path::Path, duration: Duration, rounds: usize) {
    runtime.block_on(async {
        let admin = connect(url).await;
        admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")).await.expect("drop schema");
        let _ = adapter(url, 1).await;
        HandWritten::create(url).await;
    });
    let hash = fingerprint().as_bytes().to_vec();
    let mut rows = Vec::new();
    for (workload, callers) in [("reserve + complete", 1usize), ("reserve + complete", 32), ("replay", 32)] {
        let (mut hw_rates, mut pg_rates, mut redb_rates) = (Vec::new(), Vec::new(), Vec::new());
        let replay = workload == "replay";
        let keys: Arc<Vec<IdempotencyKey>> =
            Arc::new(if replay { (0..REPLAY_KEYS).map(|_| new_key()).collect() } else { Vec::new() });
        let pg = runtime.block_on(adapter(url, callers));
        let hw = runtime.block_on(hand_written_pool(url, callers));
        let redb = embedded(dir, &format!("fleet-{callers}-{replay}.idemdb"));
        if replay {
            runtime.block_on(async {
                for key in keys.iter() {
                    if let Reservation::Acquired(lease) =
                        pg.reserve(Reserve::new(&scope(), key, &fingerprint())).await.expect("r")
                    {
                        pg.complete(&lease, RESULT.to_vec()).await.expect("complete");
                    }
                    assert!(hw[0].reserve("acme", key.as_str(), &hash).await);
                    hw[0].complete("acme", key.as_str(), &RESULT).await;
                    if let Reservation::Acquired(lease) =
                        redb.reserve(Reserve::new(&scope(), key, &fingerprint())).expect("r")
                    {
                        redb.complete(&lease, RESULT.to_vec()).expect("complete");
                    }
                }
            });
        }
        for _ in 0..rounds {
            let (h, k, hh) = (Arc::clone(&hw), Arc::clone(&keys), hash.clone());
            hw_rates.push(runtime.block_on(rate(callers, duration, move |caller, n| {
                let (h, k, hh) = (Arc::clone(&h), Arc::clone(&k), hh.clone());
                async move {
                    let client = &h[caller];
                    if k.is_empty() {
                        let key = new_key();
                        assert!(client.reserve("acme", key.as_str(), &hh).await);
                        client.complete("acme", key.as_str(), &RESULT).await;
                    } else {
                        let key = &k[(caller * 997 + n as usize) % k.len()];
                        assert!(client.replay("acme", key.as_str(), &hh).await.is_some());
                    }
                }
            })));
            let (p, k) = (pg.clone(), Arc::clone(&keys));
            pg_rates.push(runtime.block_on(rate(callers, duration, move |caller, n| {
                let (p, k) = (p.clone(), Arc::clone(&k));
                async move {
                    if k.is_empty() {
                        let answer =
                            p.reserve(Reserve::new(&scope(), &new_key(), &fingerprint())).await.expect("reserve");
                        let Reservation::Acquired(lease) = answer else { panic!("a new key is acquired") };
                        p.complete(&lease, RESULT.to_vec()).await.expect("complete");
                    } else {
                        let key = &k[(caller * 997 + n as usize) % k.len()];
                        let answer = p.reserve(Reserve::new(&scope(), key, &fingerprint())).await.expect("reserve");
                        assert!(matches!(answer, Reservation::Replay { .. }));
                    }
                }
            })));
            let (r, k) = (redb.clone(), Arc::clone(&keys));
            redb_rates.push(threads(callers, duration, move |caller, n| {
                if k.is_empty() {
                    let answer = r.reserve(Reserve::new(&scope(), &new_key(), &fingerprint())).expect("reserve");
                    let Reservation::Acquired(lease) = answer else { panic!("a new key is acquired") };
                    r.complete(&lease, RESULT.to_vec()).expect("complete");
                } else {
                    let key = &k[(caller * 997 + n as usize) % k.len()];
                    let answer = r.reserve(Reserve::new(&scope(), key, &fingerprint())).expect("reserve");
                    assert!(matches!(answer, Reservation::Replay { .. }));
                }
            }));
        }
        rows.push((workload, callers, median(hw_rates), median(pg_rates), median(redb_rates)));
    }
    println!(
        "| workload | callers | hand-written SQL ops/s | adapter ops/s | embedded (redb) ops/s | adapter / hand-written | goal | adapter / embedded |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|---:|");
    for (workload, callers, hw, pg, redb) in rows {
        let ratio = pg / hw;
        let verdict = if ratio >= 1.0 { "PASS" } else { "MISS" };
        println!(
            "| {workload} | {callers} | {hw:.0} | {pg:.0} | {redb:.0} | {ratio:.2}x | >= 1.0x {verdict} | {:.2}x |",
            pg / redb
        );
    }
}

fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let Ok(url) = std::env::var("IDEMDB_PG_URL") else {
        println!(
            "skipped: IDEMDB_PG_URL is not set (bash scripts/with-postgres.sh cargo bench -p idemdb-postgres --bench fleet)"
        );
        return;
    };
    let records: u64 = std::env::var("IDEMDB_BENCH_PURGE_RECORDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(if quick { 20_000 } else { 1_000_000 });
    let (duration, rounds, window) = if quick {
        (Duration::from_millis(500), 1, Duration::from_secs(1))
    } else {
        (Duration::from_secs(3), 3, Duration::from_secs(10))
    };
    let only = std::env::var("IDEMDB_BENCH_ONLY").unwrap_or_default();
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/tmp/idemdb-bench-fleet");
    std::fs::create_dir_all(&dir).expect("bench directory");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(async {
        let admin = connect(&url).await;
        let version: String = admin.query_one("SHOW server_version", &[]).await.expect("version").get(0);
        let cores = std::thread::available_parallelism().map_or(0, usize::from);
        println!("PostgreSQL {version}; {cores} cores; {records} expired records for the purge");
    });
    if only.is_empty() || only == "compare" {
        comparison(&runtime, &url, &dir, duration, rounds);
    }
    if only.is_empty() || only == "purge" {
        runtime.block_on(purge_figures(&url, records, 8, window));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
