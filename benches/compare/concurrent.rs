//! Concurrent callers: N threads share one durable file store, each reserving its own keys
//! for a fixed time. Group commit shows as a total rate above the one-caller rate and as
//! fewer than one flush per reservation.

use std::path::Path;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use crate::backend::IoCounters;
use crate::data::{self, Res};
use crate::durable::{Counted, JournalIo, open_store, open_store_journaled};
use crate::env::ProcIo;
use crate::measure::{Run, Series, Summary, ThreadRun};
use crate::sqlite;
use idemdb::Reserve;

/// Merges the callers of one timed run into a [`Run`] (total operations over the longest
/// caller's time).
fn merge(threads: Vec<ThreadRun>) -> Run {
    let elapsed = threads.iter().map(|t| t.finished).max().unwrap_or_default();
    let ops = threads.iter().map(|t| t.ops).sum();
    let latencies = threads.into_iter().flat_map(|t| t.latencies).collect();
    Run { ops, elapsed, io: None, proc_io: None, latencies }
}

/// Concurrent rows, by number of callers.
pub(crate) struct Concurrent {
    /// The journal off.
    pub(crate) idemdb: Vec<(usize, Summary)>,
    /// The journal on (the default of a file store), with its flushes.
    pub(crate) journaled: Vec<(usize, Summary, JournalIo)>,
    pub(crate) sqlite_full: Vec<(usize, Summary)>,
}

pub(crate) fn run(
    dir: &Path,
    callers: &[usize],
    sqlite_callers: &[usize],
    rounds: usize,
    duration: Duration,
) -> Res<Concurrent> {
    let store = open_store(&dir.join("concurrent.redb"), true)?;
    let journal_store = open_store_journaled(&dir.join("concurrent-journal.redb"), true)?;
    let mut idemdb: Vec<(usize, Series)> =
        callers.iter().map(|&n| (n, Series::new(format!("idemdb reserve, {n} caller{}", plural(n))))).collect();
    let mut journaled: Vec<(usize, Series, JournalIo)> = callers
        .iter()
        .map(|&n| (n, Series::new(format!("journal on: reserve, {n} caller{}", plural(n))), JournalIo::default()))
        .collect();
    let mut sqlite_full: Vec<(usize, Series)> = sqlite_callers
        .iter()
        .map(|&n| (n, Series::new(format!("SQLite FULL reserve, {n} connection{}", plural(n)))))
        .collect();
    let mut sqlite_present = true;
    let mut next_base = 1u64 << 50;
    for _ in 0..rounds {
        // Interleave the caller counts so that disk drift hits each alike.
        for (threads, series) in &mut idemdb {
            series.push(idemdb_run(&store.inner, &store.counters, *threads, duration, next_base)?);
            next_base += 1 << 44;
        }
        for (threads, series, io) in &mut journaled {
            series.push(journaled_run(&journal_store, *threads, duration, next_base, io)?);
            next_base += 1 << 44;
        }
        for (threads, series) in &mut sqlite_full {
            let path = dir.join("concurrent.sqlite");
            let before = ProcIo::now();
            match sqlite::concurrent(&path, sqlite::Sync::Full, *threads, duration, next_base)? {
                Some(runs) => {
                    let mut run = merge(runs);
                    run.proc_io = ProcIo::now().zip(before).map(|(after, before)| after.since(before));
                    series.push(run);
                }
                None => sqlite_present = false,
            }
            next_base += 1 << 44;
        }
    }
    Ok(Concurrent {
        idemdb: idemdb.into_iter().map(|(n, s)| (n, s.summary())).collect(),
        journaled: journaled.into_iter().map(|(n, s, io)| (n, s.summary(), io)).collect(),
        sqlite_full: if sqlite_present {
            sqlite_full.into_iter().map(|(n, s)| (n, s.summary())).collect()
        } else {
            Vec::new()
        },
    })
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// [`idemdb_run`] on a journaled store, adding its journal flushes to `io`.
fn journaled_run(
    store: &Counted<idemdb::Store>,
    threads: usize,
    duration: Duration,
    base: u64,
    io: &mut JournalIo,
) -> Res<Run> {
    let before = JournalIo::now(store);
    let run = idemdb_run(&store.inner, &store.counters, threads, duration, base)?;
    io.add(JournalIo::now(store).since(before, run.ops));
    Ok(run)
}

pub(crate) fn idemdb_run(
    store: &idemdb::Store,
    counters: &IoCounters,
    threads: usize,
    duration: Duration,
    base: u64,
) -> Res<Run> {
    let scope = data::scope()?;
    let barrier = Barrier::new(threads + 1);
    let (runs, io, proc_io) = std::thread::scope(|s| -> Res<_> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                let scope = &scope;
                s.spawn(move || -> Res<ThreadRun> {
                    barrier.wait();
                    let start = Instant::now();
                    let deadline = start + duration;
                    let mut run = ThreadRun::default();
                    let mut j = 0u64;
                    while Instant::now() < deadline {
                        let request = data::request(scope, base + ((t as u64) << 32) + j)?;
                        j += 1;
                        let t0 = Instant::now();
                        match store.reserve(Reserve::new(scope, &request.key, &request.fingerprint))? {
                            idemdb::Reservation::Acquired(_) => {}
                            other => return Err(format!("expected a fresh reservation, got {}", other.name()).into()),
                        }
                        run.latencies.push(t0.elapsed().as_nanos() as u64);
                    }
                    run.ops = j;
                    run.finished = start.elapsed();
                    Ok(run)
                })
            })
            .collect();
        let io_before = counters.snapshot();
        let proc_before = ProcIo::now();
        barrier.wait();
        let runs = handles.into_iter().map(|h| h.join().map_err(|_| "caller panicked")?).collect::<Res<Vec<_>>>()?;
        let io = counters.snapshot().since(io_before);
        let proc_io = ProcIo::now().zip(proc_before).map(|(after, before)| after.since(before));
        Ok((runs, io, proc_io))
    })?;
    let mut run = merge(runs);
    run.io = Some(io);
    run.proc_io = proc_io;
    Ok(run)
}
