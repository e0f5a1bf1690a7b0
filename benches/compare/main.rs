//! idemdb side by side with the physical floor, raw redb and SQLite, measured in one run.
//!
//! ```sh
//! cargo bench -p idemdb-benches --features sqlite            # full run, a few minutes
//! cargo bench -p idemdb-benches --features sqlite -- --quick # CI smoke, under a minute
//! ```
//!
//! Prints the machine, a table of targets (measured, baseline, ratio, goal, PASS/MISS) and the
//! raw numbers behind them. Ratios are between systems measured in the same run on the same
//! disk; nothing here asserts on timing. See `docs/benchmarks.md` for what each row measures.

mod backend;
mod canon;
mod concurrent;
mod data;
mod durable;
mod env;
mod lookup;
mod measure;
mod memory;
mod purge;
mod report;
mod results;
mod space;
mod sqlite;
mod targets;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::data::Res;
use crate::env::now_ms_u64;

/// Sizes of one run.
struct Plan {
    quick: bool,
    durable_rounds: usize,
    durable_ops: usize,
    callers: Vec<usize>,
    sqlite_callers: Vec<usize>,
    concurrent_rounds: usize,
    concurrent_time: Duration,
    lookup: lookup::Sizes,
    purge_stored: [u64; 2],
    purge_expired: u64,
    purge_budget: usize,
    space_per_kind: u64,
    canon_sizes: Vec<usize>,
    canon_rounds: usize,
    canon_time: Duration,
    memory_callers: usize,
    memory_time: Duration,
}

impl Plan {
    fn full() -> Plan {
        Plan {
            quick: false,
            durable_rounds: 10,
            durable_ops: 250,
            callers: vec![1, 2, 16, 64],
            sqlite_callers: vec![1, 16, 64],
            concurrent_rounds: 5,
            concurrent_time: Duration::from_millis(1500),
            lookup: lookup::Sizes { records: 1_000_000, samples: 100_000, warmup: 20_000, cap: Duration::from_secs(5) },
            purge_stored: [100_000, 1_000_000],
            purge_expired: 10_000,
            purge_budget: 1_000,
            space_per_kind: 100_000,
            canon_sizes: vec![1024, 64 * 1024],
            canon_rounds: 5,
            canon_time: Duration::from_millis(300),
            memory_callers: 64,
            memory_time: Duration::from_secs(60),
        }
    }

    fn quick() -> Plan {
        Plan {
            quick: true,
            durable_rounds: 4,
            durable_ops: 50,
            callers: vec![1, 2, 16, 64],
            sqlite_callers: vec![1, 16, 64],
            concurrent_rounds: 1,
            concurrent_time: Duration::from_millis(400),
            lookup: lookup::Sizes { records: 10_000, samples: 10_000, warmup: 2_000, cap: Duration::from_secs(1) },
            purge_stored: [10_000, 50_000],
            purge_expired: 1_000,
            purge_budget: 1_000,
            space_per_kind: 10_000,
            canon_sizes: vec![1024, 64 * 1024],
            canon_rounds: 3,
            canon_time: Duration::from_millis(100),
            memory_callers: 64,
            memory_time: Duration::from_secs(2),
        }
    }
}

/// `YYYY-MM-DD HH:MM UTC` from the system clock (civil-from-days, no dependency).
fn utc_now() -> String {
    let secs = now_ms_u64() / 1000;
    let days = (secs / 86_400) as i64;
    let (hour, minute) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02} UTC")
}

fn progress(started: Instant, what: &str) {
    eprintln!("… [{:>4.0} s] {what}", started.elapsed().as_secs_f64());
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("benchmark failed: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The sections a run can be limited to with `--only a,b`.
const SECTIONS: [&str; 7] = ["durable", "concurrent", "lookup", "purge", "space", "canon", "memory"];

fn run() -> Res<()> {
    let mut quick = false;
    let mut only: Option<Vec<String>> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--only" => {
                let list = args.next().ok_or("--only needs a comma-separated list of sections")?;
                let sections: Vec<String> = list.split(',').map(|s| s.trim().to_string()).collect();
                if let Some(bad) = sections.iter().find(|s| !SECTIONS.contains(&s.as_str())) {
                    return Err(format!("unknown section {bad:?}; sections: {}", SECTIONS.join(", ")).into());
                }
                only = Some(sections);
            }
            // cargo bench passes --bench to harness = false targets.
            "--bench" => {}
            "--help" | "-h" => {
                println!("usage: cargo bench -p idemdb-benches [--features sqlite] -- [--quick] [--only SECTIONS]");
                println!("sections (comma-separated): {}", SECTIONS.join(", "));
                println!("environment: IDEMDB_BENCH_DIR=<dir> for the scratch files (default: target/tmp)");
                return Ok(());
            }
            other => eprintln!("ignoring unknown argument {other:?}"),
        }
    }
    let wanted = |section: &str| only.as_ref().is_none_or(|list| list.iter().any(|s| s == section));
    let plan = if quick { Plan::quick() } else { Plan::full() };
    let started = Instant::now();
    let root = env::scratch_root()?;
    let scratch = tempfile::tempdir_in(&root)?;
    let dir = scratch.path();

    println!("# idemdb benchmarks — {} mode, {}", if plan.quick { "quick (CI smoke)" } else { "full" }, utc_now());
    println!();
    for line in env::Machine::describe(dir).lines {
        println!("- {line}");
    }
    println!(
        "- engines: idemdb {} on redb 4.6, SQLite {}",
        env!("CARGO_PKG_VERSION"),
        sqlite::version().unwrap_or_else(|| format!("not built ({})", sqlite::SKIPPED))
    );
    println!(
        "- sizes: {}×{} durable ops per workload; callers {:?} for {:.1} s × {} round(s); lookups on {} records; \
         purge of {} expired from {} and {} stored; space {} + {} records",
        plan.durable_rounds,
        plan.durable_ops,
        plan.callers,
        plan.concurrent_time.as_secs_f64(),
        plan.concurrent_rounds,
        plan.lookup.records,
        plan.purge_expired,
        plan.purge_stored[0],
        plan.purge_stored[1],
        plan.space_per_kind,
        plan.space_per_kind,
    );
    if let Some(list) = &only {
        println!("- only: {}", list.join(", "));
    }
    if plan.quick {
        println!(
            "- quick mode: sizes are too small for the ratios to carry weight; run without --quick to judge targets"
        );
    }
    println!();

    let mut results = results::Results::default();
    if wanted("durable") {
        progress(started, "durable single-caller workloads (floors, raw redb, idemdb, SQLite)");
        results.durable = Some(durable::run(dir, plan.durable_rounds, plan.durable_ops)?);
    }
    if wanted("concurrent") {
        progress(started, "concurrent callers");
        results.concurrent = Some(concurrent::run(
            dir,
            &plan.callers,
            &plan.sqlite_callers,
            plan.concurrent_rounds,
            plan.concurrent_time,
        )?);
    }
    if wanted("lookup") {
        progress(started, &format!("replay lookups on {} records (building the stores first)", plan.lookup.records));
        results.lookup = Some(lookup::run(dir, &plan.lookup)?);
    }
    if wanted("purge") {
        for stored in plan.purge_stored {
            progress(started, &format!("purge of {} expired records among {stored}", plan.purge_expired));
            results.purges.push(purge::run(dir, stored, plan.purge_expired, plan.purge_budget)?);
        }
    }
    if wanted("space") {
        progress(started, "space after compaction");
        results.space = Some(space::run(dir, plan.space_per_kind)?);
    }
    if wanted("canon") {
        progress(started, "canonicalise + fingerprint");
        results.canon = canon::run(&plan.canon_sizes, plan.canon_rounds, plan.canon_time)?;
    }
    if wanted("memory") {
        progress(
            started,
            &format!(
                "memory: {} callers for {:.0} s, journal off then on",
                plan.memory_callers,
                plan.memory_time.as_secs_f64()
            ),
        );
        results.memory = memory::run(dir, plan.memory_callers, plan.memory_time)?;
    }
    progress(started, "done");
    if let Some(load) = env::load_average() {
        println!("- load average (1 min) at the end: {load}");
    }

    if let Some(flush) = results.durable.as_ref().and_then(|d| d.floor_in_place.p50) {
        println!("- one flush (4 KiB overwrite + fdatasync) took p50 {} µs in this run", report::micros(flush));
        if flush > 1e-3 {
            println!(
                "- WARNING: flushes this slow (a throttled or busy disk) dominate every durable commit, so the \
                 single-caller ratios measure the disk, not the engines; re-run when the disk is idle"
            );
        }
    }
    println!();
    println!("## Targets\n");
    print!("{}", report::targets_table(&targets::targets(&results)));
    println!();
    results::print_details(&results, plan.purge_budget);
    println!("total run time: {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}
