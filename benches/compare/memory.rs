//! Memory held under sustained load: 64 callers reserve new keys on a durable file store for a
//! fixed time, journal on and — the baseline, in the same process — journal off, while a
//! sampler reads the process's resident set (`VmRSS` in `/proc/self/status`) every 100 ms.
//!
//! With the journal, redb commits with `Durability::None` and keeps the pages of those commits
//! in its cache until a checkpoint; the checkpoint interval is what bounds that memory, and the
//! peak here is how it shows.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::concurrent::idemdb_run;
use crate::data::Res;
use crate::durable::{open_store, open_store_journaled};

/// One sustained run.
#[derive(Debug, Clone)]
pub(crate) struct MemoryRun {
    pub(crate) label: &'static str,
    pub(crate) callers: usize,
    pub(crate) seconds: f64,
    pub(crate) ops: u64,
    /// Resident set before the callers started, at its peak while they ran, and after.
    pub(crate) start_kib: u64,
    pub(crate) peak_kib: u64,
    pub(crate) end_kib: u64,
    /// Checkpoints taken during the run (journal on only).
    pub(crate) checkpoints: Option<u64>,
}

impl MemoryRun {
    /// How far the resident set rose above where it started.
    pub(crate) fn growth_kib(&self) -> u64 {
        self.peak_kib.saturating_sub(self.start_kib)
    }
}

/// The resident set of this process in KiB, where Linux says it.
pub(crate) fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs the journal-off baseline, then the journal on, each for `duration` with `callers`.
/// Returns nothing where the resident set cannot be read (not Linux).
pub(crate) fn run(dir: &Path, callers: usize, duration: Duration) -> Res<Vec<MemoryRun>> {
    if rss_kib().is_none() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    {
        let store = open_store(&dir.join("memory-off.redb"), true)?;
        out.push(sampled("journal off", callers, || {
            Ok((idemdb_run(&store.inner, &store.counters, callers, duration, 1 << 52)?.ops, None))
        })?);
    }
    {
        let store = open_store_journaled(&dir.join("memory-on.redb"), true)?;
        let before = store.inner.journal_stats().map_or(0, |stats| stats.checkpoints);
        out.push(sampled("journal on", callers, || {
            let ops = idemdb_run(&store.inner, &store.counters, callers, duration, 1 << 53)?.ops;
            let after = store.inner.journal_stats().map_or(0, |stats| stats.checkpoints);
            Ok((ops, Some(after - before)))
        })?);
    }
    Ok(out)
}

/// Runs `work` while sampling the resident set.
fn sampled(label: &'static str, callers: usize, work: impl FnOnce() -> Res<(u64, Option<u64>)>) -> Res<MemoryRun> {
    let start_kib = rss_kib().unwrap_or(0);
    let peak = AtomicU64::new(start_kib);
    let done = AtomicBool::new(false);
    let started = Instant::now();
    let (ops, checkpoints) = std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                if let Some(now) = rss_kib() {
                    peak.fetch_max(now, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let result = work();
        done.store(true, Ordering::Relaxed);
        result
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let end_kib = rss_kib().unwrap_or(0);
    peak.fetch_max(end_kib, Ordering::Relaxed);
    Ok(MemoryRun { label, callers, seconds, ops, start_kib, peak_kib: peak.into_inner(), end_kib, checkpoints })
}
