//! Requests a second through the idempotency layer against the same handler without it, over
//! loopback HTTP, at 1 and 32 concurrent clients. The handler writes one row of its own into
//! a durable file store; every request has a new key.
//!
//! ```sh
//! cargo bench -p idemdb-http --bench layer            # 3 rounds of 3 s per row
//! cargo bench -p idemdb-http --bench layer -- --quick # 1 round of 0.5 s per row
//! ```
//!
//! Rows:
//! * `bare`: the handler alone — one redb commit (its row) per request;
//! * `layer, one commit`: the layer reserves the key (a group commit), then the handler writes
//!   its row **and** completes the lease in one transaction;
//! * `layer, layer completes`: the layer reserves, the handler commits its row, the layer
//!   completes (a second group commit) — for comparison.
//!
//! Ratios are measured in the same run, rounds interleaved; nothing here asserts on timing.

use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Extension, Router};
use http::Method;
use idemdb::redb::backends::FileBackend;
use idemdb::redb::{BackendError, StorageBackend, TableDefinition};
use idemdb::{AsyncStore, Durability, Store};
use idemdb_http::{IdempotencyLayer, LeaseHandle, Operation, SingleTenant};

const ROWS: TableDefinition<&str, &[u8]> = TableDefinition::new("bench_rows");
const BODY: &str = r#"{"amount":"10.50","currency":"BRL","destination":"acct_x"}"#;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Path {
    Bare,
    OneCommit,
    LayerCompletes,
}

impl Path {
    fn route(self) -> &'static str {
        match self {
            Path::Bare => "/bare",
            Path::OneCommit => "/one-commit",
            Path::LayerCompletes => "/layer-completes",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Path::Bare => "bare handler",
            Path::OneCommit => "layer, one commit",
            Path::LayerCompletes => "layer, layer completes",
        }
    }
}

static ROW: AtomicU64 = AtomicU64::new(0);

/// Flushes of the store file (`sync_data` calls), to count durable commits per request.
static SYNCS: AtomicU64 = AtomicU64::new(0);

/// redb's file backend, counting flushes.
#[derive(Debug)]
struct Counting(FileBackend);

impl StorageBackend for Counting {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        SYNCS.fetch_add(1, Ordering::Relaxed);
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.0.write(offset, data)
    }
    fn close(&self) -> Result<(), std::io::Error> {
        self.0.close()
    }
    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.0.try_lock_range(start, end)
    }
    fn try_lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.0.try_lock_shared_range(start, end)
    }
    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.lock_range(start, end)
    }
    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.lock_shared_range(start, end)
    }
    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.unlock_range(start, end)
    }
    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.0.query_lock_range(start, end)
    }
}

fn row_key() -> String {
    format!("row-{:012}", ROW.fetch_add(1, Ordering::Relaxed))
}

fn json_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers
}

/// Writes the handler's one row.
fn insert_row(txn: &mut idemdb::Txn<'_>, key: &str, body: &[u8]) -> Result<(), idemdb::Error> {
    txn.table(ROWS)?.insert(key, body)
}

/// The bare handler: one row in its own commit.
async fn bare(Extension(store): Extension<Store>, body: Bytes) -> impl IntoResponse {
    let key = row_key();
    let written = store.asynchronous().write(move |txn| insert_row(txn, &key, &body)).await;
    match written {
        Ok(()) => (StatusCode::CREATED, json_headers(), r#"{"ok":true}"#).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// The same row, and the completion in the same commit.
async fn one_commit(
    Extension(store): Extension<Store>,
    Extension(lease): Extension<LeaseHandle<AsyncStore>>,
    body: Bytes,
) -> impl IntoResponse {
    let key = row_key();
    let headers = json_headers();
    let stored = lease.stored_response(StatusCode::CREATED, &headers, &br#"{"ok":true}"#[..]);
    let held = lease.lease();
    let written = store
        .asynchronous()
        .write(move |txn| {
            insert_row(txn, &key, &body)?;
            txn.complete(&held, stored)
        })
        .await;
    if written.is_err() || lease.completed_by_handler().is_err() {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    (StatusCode::CREATED, headers, r#"{"ok":true}"#).into_response()
}

fn app(store: Store) -> Router {
    let layer = IdempotencyLayer::new(store.asynchronous(), SingleTenant::new("bench"))
        .route(Method::POST, Path::OneCommit.route(), Operation::named("one_commit"))
        .route(Method::POST, Path::LayerCompletes.route(), Operation::named("layer_completes"))
        .only_listed_routes();
    Router::new()
        .route(Path::Bare.route(), post(bare))
        .route(Path::OneCommit.route(), post(one_commit))
        .route(Path::LayerCompletes.route(), post(bare))
        .layer(layer)
        .layer(Extension(store))
}

/// Requests a second of `clients` loops, each with its own connection, for `time`, and the
/// store's flushes per request.
async fn measure(url: &str, path: Path, clients: usize, time: Duration) -> (f64, f64) {
    let syncs_before = SYNCS.load(Ordering::Relaxed);
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + time;
    let started = Instant::now();
    let mut loops = Vec::new();
    for _ in 0..clients {
        let (url, done) = (format!("{url}{}", path.route()), done.clone());
        loops.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            while Instant::now() < deadline {
                let key = idemdb::Store::new_key().map(|k| format!("\"{}\"", k.as_str())).unwrap_or_default();
                let sent = http
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("idempotency-key", key)
                    .body(BODY)
                    .send()
                    .await;
                if let Ok(response) = sent
                    && response.status() == StatusCode::CREATED
                    && response.bytes().await.is_ok()
                {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for handle in loops {
        let _ = handle.await;
    }
    let done = done.load(Ordering::Relaxed) as f64;
    let syncs = (SYNCS.load(Ordering::Relaxed) - syncs_before) as f64;
    (done / started.elapsed().as_secs_f64(), syncs / done.max(1.0))
}

/// The 1, 5 and 15 minute load averages, where the OS shows them.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| text.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "n/a".into())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let (rounds, time) = if quick { (1, Duration::from_millis(500)) } else { (3, Duration::from_secs(3)) };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        // On the checkout's file system (every flush reaches the disk), or IDEMDB_BENCH_DIR.
        let base = std::env::var_os("IDEMDB_BENCH_DIR")
            .map_or_else(|| env!("CARGO_TARGET_TMPDIR").into(), std::path::PathBuf::from);
        std::fs::create_dir_all(&base)?;
        let dir = tempfile::tempdir_in(&base)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.path().join("bench.idemdb"))?;
        let store = Store::builder()
            .durability(Durability::Immediate)
            .journaled_table(ROWS)
            .open_backend(Counting(FileBackend::new(file)?))?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        tokio::spawn(async move { axum::serve(listener, app(store)).await });
        println!("idempotency layer vs bare handler, loopback HTTP, durable file store on {}", dir.path().display());
        println!("{rounds} round(s) of {} ms per row, rounds interleaved; median requests/s", time.as_millis());
        println!("load average at the start: {} (other work on the machine distorts timings)", load_average());
        println!();
        println!("| clients | path | requests/s | ratio to bare | flushes/request |");
        println!("|---:|---|---:|---:|---:|");
        for clients in [1, 32] {
            let paths = [Path::Bare, Path::OneCommit, Path::LayerCompletes];
            let mut results: Vec<Vec<f64>> = vec![Vec::new(); paths.len()];
            let mut flushes: Vec<Vec<f64>> = vec![Vec::new(); paths.len()];
            // Warm up the connections and the file.
            measure(&url, Path::Bare, clients, Duration::from_millis(200)).await;
            for _ in 0..rounds {
                for (i, path) in paths.iter().enumerate() {
                    let (rate, per_request) = measure(&url, *path, clients, time).await;
                    results[i].push(rate);
                    flushes[i].push(per_request);
                }
            }
            let bare = median(results[0].clone());
            for (i, path) in paths.iter().enumerate() {
                let rate = median(results[i].clone());
                let per_request = median(flushes[i].clone());
                println!("| {clients} | {} | {rate:.0} | {:.2} | {per_request:.2} |", path.name(), rate / bare);
            }
        }
        println!();
        println!("load average at the end: {}", load_average());
        Ok::<(), Box<dyn std::error::Error>>(())
    })?;
    Ok(())
}
