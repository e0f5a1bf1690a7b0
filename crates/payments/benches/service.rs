//! The payments service under load, with the store's journal on and off: paid requests a
//! second with 32 clients, and the store's `fdatasync` calls per paid request (every commit of
//! one payment: the reservation with its charge, the claim, the payment row with the report).
//!
//! Two stores: the journal on (as the binary opens it, `Store::builder()`: every
//! commit of a payment, its row included, is one journal append) and the journal off (every
//! commit is a durable redb commit).
//!
//! ```sh
//! cargo bench -p payments-example --bench service             # 5 rounds of 3 s per mode
//! cargo bench -p payments-example --bench service -- --quick  # 1 round of 1 s (a smoke run)
//! ```
//!
//! The service runs in this process: the router (the idemdb layer, the handler) and its
//! dispatcher on a tokio runtime with 2 workers, each client a task sending
//! `POST /v1/payments` with a key of its own straight into the router (no socket, so the
//! figure is the service's, not a loopback's). The provider keeps its charges in memory and
//! answers at once: it stands for a remote system whose disk is not ours. Rounds alternate
//! journal on and off on fresh stores (so drift of the disk hits both alike); medians are
//! reported, with the ratio of the medians. The store's files are on the checkout's file system
//! (`target/tmp/payments-bench`), behind a backend that counts the calls that reach them.
//! Nothing here asserts on timing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use idemdb::Store;
use payments_example::{PAYMENTS_PATH, Provider, RedbBackend};
use tower::ServiceExt;

#[path = "../../../benches/compare/backend.rs"]
#[allow(dead_code)]
mod backend;

mod data;

use backend::CountingBackend;
use data::Res;

/// Concurrent clients.
const CLIENTS: usize = 32;

/// One measured round.
#[derive(Debug, Clone, Copy)]
struct Round {
    paid: u64,
    seconds: f64,
    /// `fdatasync` calls on the store's files (the journal's included) during the round.
    syncs: u64,
    /// CPU time of every thread of the process during the round (`None` without `/proc`).
    cpu: Option<Duration>,
}

impl Round {
    fn rate(&self) -> f64 {
        self.paid as f64 / self.seconds
    }

    fn syncs_per_paid(&self) -> f64 {
        self.syncs as f64 / self.paid.max(1) as f64
    }

    /// CPU µs per paid request (NaN without `/proc`).
    fn cpu_per_paid(&self) -> f64 {
        self.cpu.map_or(f64::NAN, |cpu| cpu.as_secs_f64() * 1e6 / self.paid.max(1) as f64)
    }
}

/// User + system CPU time of this process so far (`/proc/self/stat`, 10 ms ticks), on Linux.
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces); utime and stime are 14 and 15.
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // USER_HZ is 100 on every Linux build in use.
    Some(Duration::from_millis(ticks * 10))
}

fn main() -> Res<()> {
    let mut rounds = 5;
    let mut seconds = 3.0;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--bench" => {}
            "--quick" => (rounds, seconds) = (1, 1.0),
            "--help" | "-h" => {
                println!("usage: cargo bench -p payments-example --bench service -- [--quick]");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?} (try --help)").into()),
        }
    }
    let scratch = scratch_dir()?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let mut measured: [Vec<Round>; 2] = Default::default();
    for round in 0..rounds {
        for (mode, rounds_of_mode) in MODES.iter().zip(measured.iter_mut()) {
            let dir = tempfile::tempdir_in(&scratch)?;
            let this = runtime.block_on(run(dir.path(), *mode, Duration::from_secs_f64(seconds)))?;
            eprintln!(
                "… round {}/{rounds}, {}: {} paid in {:.2} s, {} fdatasyncs",
                round + 1,
                mode.name(),
                this.paid,
                this.seconds,
                this.syncs
            );
            rounds_of_mode.push(this);
        }
    }
    report(&measured, rounds, seconds);
    Ok(())
}

/// How the store is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The journal on (as the binary opens it): every commit of a payment is journaled.
    Journaled,
    /// The journal off: every commit is a durable redb commit.
    NoJournal,
}

const MODES: [Mode; 2] = [Mode::Journaled, Mode::NoJournal];

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Journaled => "journal on (the binary)",
            Mode::NoJournal => "journal off",
        }
    }
}

/// One round: a fresh store, the service, `CLIENTS` clients paying for `length`.
async fn run(dir: &Path, mode: Mode, length: Duration) -> Res<Round> {
    let path = dir.join("idemdb.redb");
    let (backend, counters) = CountingBackend::open(&path)?;
    let store = if mode == Mode::NoJournal {
        Store::builder().journal(false).open_backend(backend)?
    } else {
        let mut journal_path = path.clone().into_os_string();
        journal_path.push("-journal");
        let journal_file =
            CountingBackend::open_shared(Path::new(&journal_path), Arc::clone(&counters), Arc::default())?;
        Store::builder().journal(true).open_backend_with_journal(backend, journal_file)?
    };
    let provider = Provider::in_memory(Duration::ZERO)?;
    let (router, dispatcher) = payments_example::router(RedbBackend::new(store), provider)?;
    let dispatching = tokio::spawn(dispatcher.run());
    // A warm-up payment: the tables exist and the dispatcher runs before the clock starts.
    pay(&router, "warm-up").await?;
    let (stop, paid) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let before = counters.snapshot();
    let cpu_before = process_cpu();
    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (router, stop, paid) = (router.clone(), Arc::clone(&stop), Arc::clone(&paid));
            tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    pay(&router, &format!("c{client}-{n}")).await?;
                    paid.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
                Ok::<(), String>(())
            })
        })
        .collect();
    tokio::time::sleep(length).await;
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu = process_cpu().zip(cpu_before).map(|(after, before)| after.saturating_sub(before));
    let syncs = counters.snapshot().since(before).syncs;
    dispatching.abort();
    Ok(Round { paid: paid.load(Ordering::Relaxed), seconds, syncs, cpu })
}

/// One `POST /v1/payments` that must be paid (201).
async fn pay(router: &axum::Router, key: &str) -> Result<(), String> {
    let request = Request::post(PAYMENTS_PATH)
        .header("authorization", "Bearer acme")
        .header("idempotency-key", format!("\"{key}\""))
        .header("content-type", "application/json")
        .body(Body::from(r#"{"amount":"10.00","currency":"BRL","destination":"acct_x"}"#))
        .map_err(|e| e.to_string())?;
    let response = router.clone().oneshot(request).await.map_err(|e| e.to_string())?;
    if response.status() != StatusCode::CREATED {
        return Err(format!("payment {key} answered {}", response.status()));
    }
    Ok(())
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn report(measured: &[Vec<Round>; 2], rounds: usize, seconds: f64) {
    let rate = |rounds: &[Round]| median(rounds.iter().map(Round::rate));
    let syncs = |rounds: &[Round]| median(rounds.iter().map(Round::syncs_per_paid));
    let rounds_of = |rounds: &[Round]| rounds.iter().map(|r| format!("{:.0}", r.rate())).collect::<Vec<_>>().join(" ");
    println!(
        "# Payments service, {CLIENTS} clients in process, {rounds} round(s) of {seconds:.0} s per store ({} cores)\n",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    let cpu = |rounds: &[Round]| median(rounds.iter().map(Round::cpu_per_paid));
    println!(
        "| store | paid requests/s (median) | fdatasync per paid request | CPU µs per paid request | rounds (requests/s) |"
    );
    println!("|---|---:|---:|---:|---|");
    for (mode, rounds) in MODES.iter().zip(measured) {
        println!(
            "| {} | {:.0} | {:.2} | {:.0} | {} |",
            mode.name(),
            rate(rounds),
            syncs(rounds),
            cpu(rounds),
            rounds_of(rounds)
        );
    }
    let [journaled, off] = measured;
    println!("\n| target | measured | goal | result |");
    println!("|---|---|---|---|");
    let ratio = rate(journaled) / rate(off);
    println!("| 32 clients, journal on vs journal off | {ratio:.2}× | ≥ 2× | {} |", verdict(ratio >= 2.0));
    let syncs = syncs(journaled);
    println!("| fdatasync per paid request, journal on | {syncs:.2} | ≤ 2 | {} |", verdict(syncs <= 2.0));
}

fn verdict(pass: bool) -> &'static str {
    if pass { "PASS" } else { "MISS" }
}

/// `target/tmp/payments-bench` beside the checkout: the same file system as the code, so every
/// flush reaches the disk (`IDEMDB_BENCH_DIR` moves it).
fn scratch_dir() -> Res<PathBuf> {
    let dir = match std::env::var_os("IDEMDB_BENCH_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tmp/payments-bench"),
    };
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
