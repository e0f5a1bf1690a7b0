//! Instructions per operation, counted by callgrind: a repeatable measure of idemdb's own CPU
//! work per reservation, unaffected by a loaded machine (timings are; instruction counts are
//! not).
//!
//! ```sh
//! cargo bench -p idemdb-benches --bench instructions                 # the table
//! cargo bench -p idemdb-benches --bench instructions -- --top reserve # and where they go
//! ```
//!
//! Each workload runs twice under `valgrind --tool=callgrind`, with a small and a large number
//! of operations after the same set-up; the difference of the two totals divided by the
//! difference of the counts is the cost of one operation, with the process start, the store's
//! opening and the set-up cancelled out. Everything the process does counts, on every thread
//! (the group commit's, too); the time spent inside the kernel (the `fdatasync` itself) does
//! not, so the figure is the CPU work that is idemdb's to cut.
//!
//! Without valgrind on the machine it says so and exits without failing.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

#[path = "../compare/data.rs"]
#[allow(dead_code)]
mod data;

use data::Res;
use idemdb::{Reservation, Reserve, Store};
use thousands::Separable;

/// The environment variable that makes this binary run one workload instead of the table.
const WORKLOAD_ENV: &str = "IDEMDB_INSTRUCTIONS_WORKLOAD";
/// Operations in the small and the large run.
const SMALL: u64 = 200;
const LARGE: u64 = 1_200;
/// The same with `--quick` (the CI smoke: the harness runs, the figures carry no weight).
const QUICK_SMALL: u64 = 20;
const QUICK_LARGE: u64 = 120;
/// Completed records the replay workloads look up among.
const REPLAY_SET: u64 = 1_000;

/// One measured workload: what one of its operations is.
#[derive(Debug, Clone, Copy)]
struct Workload {
    name: &'static str,
    what: &'static str,
    journal: bool,
    audit: bool,
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `reserve` of a fresh key (one durable commit).
    Reserve,
    /// `reserve` then `complete` (two durable commits).
    ReserveComplete,
    /// `reserve` of a completed key: a replay (no commit).
    Replay,
}

const WORKLOADS: &[Workload] = &[
    Workload {
        name: "reserve",
        what: "durable reserve, 1 caller, journal on, audit on",
        journal: true,
        audit: true,
        kind: Kind::Reserve,
    },
    Workload {
        name: "reserve-no-audit",
        what: "durable reserve, 1 caller, journal on, audit off",
        journal: true,
        audit: false,
        kind: Kind::Reserve,
    },
    Workload {
        name: "reserve-no-journal",
        what: "durable reserve, 1 caller, journal off, audit on",
        journal: false,
        audit: true,
        kind: Kind::Reserve,
    },
    Workload {
        name: "reserve-complete",
        what: "reserve + complete, 1 caller, journal on, audit on",
        journal: true,
        audit: true,
        kind: Kind::ReserveComplete,
    },
    Workload { name: "replay", what: "replay lookup, audit on", journal: true, audit: true, kind: Kind::Replay },
    Workload {
        name: "replay-no-audit",
        what: "replay lookup, audit off",
        journal: true,
        audit: false,
        kind: Kind::Replay,
    },
];

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("instructions: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Res<()> {
    if let Ok(spec) = std::env::var(WORKLOAD_ENV) {
        return run_workload(&spec);
    }
    let mut top = None;
    let (mut small_ops, mut large_ops) = (SMALL, LARGE);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--top" => top = Some(args.next().ok_or("--top needs a workload name")?),
            "--bench" => {}
            "--quick" => (small_ops, large_ops) = (QUICK_SMALL, QUICK_LARGE),
            "--help" | "-h" => {
                println!("usage: cargo bench -p idemdb-benches --bench instructions -- [--quick] [--top WORKLOAD]");
                println!("workloads: {}", WORKLOADS.iter().map(|w| w.name).collect::<Vec<_>>().join(", "));
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?} (try --help)").into()),
        }
    }
    if Command::new("valgrind").arg("--version").output().is_err() {
        println!("instructions: skipped, valgrind is not installed (apt-get install valgrind)");
        return Ok(());
    }
    let scratch = scratch_dir()?;
    println!("# Instructions per operation (callgrind; {large_ops} − {small_ops} operations, set-up cancelled out)\n");
    if large_ops == QUICK_LARGE {
        println!("quick mode: too few operations for the figures to carry weight\n");
    }
    println!("| workload | instructions / op |");
    println!("|---|---:|");
    let mut per_op = Vec::new();
    for workload in WORKLOADS {
        let small = count(workload, small_ops, &scratch, None)?;
        let keep =
            (top.as_deref() == Some(workload.name)).then(|| scratch.join(format!("{}.callgrind", workload.name)));
        let large = count(workload, large_ops, &scratch, keep.as_deref())?;
        let instructions = large.saturating_sub(small) / (large_ops - small_ops);
        println!("| {} | {} |", workload.what, group(instructions));
        per_op.push((workload.name, instructions));
    }
    let find = |name: &str| per_op.iter().find(|(n, _)| *n == name).map(|(_, i)| *i as f64);
    if let (Some(on), Some(off)) = (find("replay"), find("replay-no-audit")) {
        println!("\nreplay with the audit trail on costs {:.2}× replay with it off", on / off);
    }
    if let (Some(on), Some(off)) = (find("reserve"), find("reserve-no-audit")) {
        println!("reserve with the audit trail on costs {:.2}× reserve with it off", on / off);
    }
    if let Some(name) = top {
        let file = scratch.join(format!("{name}.callgrind"));
        if !file.exists() {
            return Err(format!("no workload named {name:?} (try --help)").into());
        }
        println!("\n## Where the instructions of `{name}` go (inclusive, {large_ops} operations plus set-up)\n");
        let annotated = Command::new("callgrind_annotate").arg("--inclusive=yes").arg(&file).output()?;
        let text = String::from_utf8_lossy(&annotated.stdout);
        for line in text.lines().filter(|line| line.contains(':')).take(60) {
            println!("    {line}");
        }
    }
    Ok(())
}

/// Runs `workload` with `ops` operations under callgrind and returns the instructions it
/// collected. `keep` is where its profile goes when it should be kept.
fn count(workload: &Workload, ops: u64, scratch: &Path, keep: Option<&Path>) -> Res<u64> {
    let out = keep.map_or_else(|| scratch.join("discard.callgrind"), Path::to_path_buf);
    let output = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(std::env::current_exe()?)
        .env(WORKLOAD_ENV, format!("{}:{ops}:{}", workload.name, scratch.display()))
        .output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(format!("workload {} failed under valgrind:\n{stderr}", workload.name).into());
    }
    // "==1234== Collected : 123456789"
    stderr
        .lines()
        .find_map(|line| line.split_once("Collected :").and_then(|(_, n)| n.trim().parse().ok()))
        .ok_or_else(|| format!("callgrind printed no total for {}:\n{stderr}", workload.name).into())
}

/// The child's side: `name:ops:scratch`.
fn run_workload(spec: &str) -> Res<()> {
    let mut parts = spec.splitn(3, ':');
    let (Some(name), Some(ops), Some(scratch)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("malformed {WORKLOAD_ENV}: {spec:?}").into());
    };
    let workload = WORKLOADS.iter().find(|w| w.name == name).ok_or_else(|| format!("no workload {name:?}"))?;
    let ops: u64 = ops.parse()?;
    let dir = tempfile::tempdir_in(scratch)?;
    let store = Store::builder().audit(workload.audit).journal(workload.journal).open(dir.path().join("store.redb"))?;
    let scope = data::scope()?;
    let body = data::result_body(0);
    match workload.kind {
        Kind::Reserve | Kind::ReserveComplete => {
            let requests = data::requests(&scope, 0, ops as usize)?;
            for request in &requests {
                let Reservation::Acquired(lease) =
                    store.reserve(Reserve::new(&scope, &request.key, &request.fingerprint))?
                else {
                    return Err("a fresh key was not acquired".into());
                };
                if workload.kind == Kind::ReserveComplete {
                    store.complete(&lease, body.clone())?;
                }
            }
        }
        Kind::Replay => {
            let requests = data::requests(&scope, 0, REPLAY_SET as usize)?;
            for request in &requests {
                let Reservation::Acquired(lease) =
                    store.reserve(Reserve::new(&scope, &request.key, &request.fingerprint))?
                else {
                    return Err("a fresh key was not acquired".into());
                };
                store.complete(&lease, body.clone())?;
            }
            for i in 0..ops {
                let request = &requests[(data::mix(i) % REPLAY_SET) as usize];
                let answer = store.reserve(Reserve::new(&scope, &request.key, &request.fingerprint))?;
                if !matches!(answer, Reservation::Replay { .. }) {
                    return Err(format!("expected a replay, got {}", answer.name()).into());
                }
            }
        }
    }
    Ok(())
}

/// Scratch space on the checkout's file system (as the other harness uses).
fn scratch_dir() -> Res<PathBuf> {
    let dir = match std::env::var_os("IDEMDB_BENCH_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/tmp/idemdb-instructions"),
    };
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// `1234567` → `1,234,567`.
fn group(n: u64) -> String {
    n.separate_with_commas()
}
