//! Timing rounds, medians and percentiles, and the rows they become.

use std::time::{Duration, Instant};

use crate::backend::{Io, IoCounters};
use crate::data::Res;
use crate::env::{ProcIo, TICKS_PER_SEC};

/// One timed run of `ops` operations.
#[derive(Debug, Clone, Default)]
pub(crate) struct Run {
    pub(crate) ops: u64,
    pub(crate) elapsed: Duration,
    /// What reached the redb file, for systems opened through the counting backend.
    pub(crate) io: Option<Io>,
    /// `/proc/self/io` delta over the run.
    pub(crate) proc_io: Option<ProcIo>,
    /// Per-operation latencies in nanoseconds.
    pub(crate) latencies: Vec<u64>,
}

/// What one caller did.
#[derive(Debug, Clone, Default)]
pub(crate) struct ThreadRun {
    pub(crate) ops: u64,
    /// When it stopped, from the common start.
    pub(crate) finished: Duration,
    pub(crate) latencies: Vec<u64>,
}

/// Runs `op(i)` for `i in 0..n`, timing each call, with I/O counters around the whole run.
pub(crate) fn timed(n: usize, counters: Option<&IoCounters>, mut op: impl FnMut(usize) -> Res<()>) -> Res<Run> {
    let mut latencies = Vec::with_capacity(n);
    let io_before = counters.map(IoCounters::snapshot);
    let proc_before = ProcIo::now();
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        op(i)?;
        latencies.push(t.elapsed().as_nanos() as u64);
    }
    let elapsed = start.elapsed();
    let proc_io = ProcIo::now().zip(proc_before).map(|(after, before)| after.since(before));
    let io = counters.map(IoCounters::snapshot).zip(io_before).map(|(after, before)| after.since(before));
    Ok(Run { ops: n as u64, elapsed, io, proc_io, latencies })
}

/// Like [`timed`], but stops early once `cap` has passed (for paths that may be very slow).
pub(crate) fn timed_capped(
    n: usize,
    cap: Duration,
    counters: Option<&IoCounters>,
    mut op: impl FnMut(usize) -> Res<()>,
) -> Res<Run> {
    let mut latencies = Vec::with_capacity(n);
    let io_before = counters.map(IoCounters::snapshot);
    let proc_before = ProcIo::now();
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        op(i)?;
        latencies.push(t.elapsed().as_nanos() as u64);
        if start.elapsed() >= cap {
            break;
        }
    }
    let elapsed = start.elapsed();
    let proc_io = ProcIo::now().zip(proc_before).map(|(after, before)| after.since(before));
    let io = counters.map(IoCounters::snapshot).zip(io_before).map(|(after, before)| after.since(before));
    Ok(Run { ops: latencies.len() as u64, elapsed, io, proc_io, latencies })
}

/// The runs of one workload over several rounds, summarised as one row.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    pub(crate) name: String,
    runs: Vec<Run>,
}

impl Series {
    pub(crate) fn new(name: impl Into<String>) -> Series {
        Series { name: name.into(), runs: Vec::new() }
    }

    pub(crate) fn push(&mut self, run: Run) {
        self.runs.push(run);
    }

    pub(crate) fn summary(&self) -> Summary {
        let ops: u64 = self.runs.iter().map(|r| r.ops).sum();
        let per_round: Vec<f64> =
            self.runs.iter().filter(|r| r.ops > 0).map(|r| r.elapsed.as_secs_f64() / r.ops as f64).collect();
        let mut latencies: Vec<u64> = self.runs.iter().flat_map(|r| r.latencies.iter().copied()).collect();
        latencies.sort_unstable();
        let io = self.runs.iter().map(|r| r.io).try_fold(Io::default(), |sum, io| {
            io.map(|io| Io {
                syncs: sum.syncs + io.syncs,
                writes: sum.writes + io.writes,
                bytes: sum.bytes + io.bytes,
                grows: sum.grows + io.grows,
            })
        });
        let proc_io = self.runs.iter().map(|r| r.proc_io).try_fold(ProcIo::default(), |sum, io| {
            io.map(|io| ProcIo {
                write_bytes: sum.write_bytes + io.write_bytes,
                write_calls: sum.write_calls + io.write_calls,
                cpu_ticks: sum.cpu_ticks + io.cpu_ticks,
            })
        });
        let per_op = |total: u64| if ops == 0 { f64::NAN } else { total as f64 / ops as f64 };
        Summary {
            name: self.name.clone(),
            ops,
            secs_per_op: median(&per_round),
            p50: percentile(&latencies, 0.50),
            p99: percentile(&latencies, 0.99),
            syncs_per_op: io.map(|io| per_op(io.syncs)),
            writes_per_op: io.map(|io| per_op(io.writes)),
            bytes_per_op: io.map(|io| per_op(io.bytes)),
            proc_bytes_per_op: proc_io.map(|io| per_op(io.write_bytes)),
            cpu_per_op: proc_io.map(|io| per_op(io.cpu_ticks) / TICKS_PER_SEC),
            io_total: io,
            note: String::new(),
        }
    }
}

/// One row of the raw-numbers table.
#[derive(Debug, Clone)]
pub(crate) struct Summary {
    pub(crate) name: String,
    pub(crate) ops: u64,
    /// Median over rounds of elapsed / ops.
    pub(crate) secs_per_op: f64,
    /// Per-call latency percentiles (seconds).
    pub(crate) p50: Option<f64>,
    pub(crate) p99: Option<f64>,
    pub(crate) syncs_per_op: Option<f64>,
    pub(crate) writes_per_op: Option<f64>,
    pub(crate) bytes_per_op: Option<f64>,
    pub(crate) proc_bytes_per_op: Option<f64>,
    /// CPU seconds (user + system, all threads) per operation.
    pub(crate) cpu_per_op: Option<f64>,
    /// Totals behind the per-operation counts.
    pub(crate) io_total: Option<Io>,
    pub(crate) note: String,
}

impl Summary {
    pub(crate) fn ops_per_sec(&self) -> f64 {
        1.0 / self.secs_per_op
    }

    pub(crate) fn with_note(mut self, note: impl Into<String>) -> Summary {
        self.note = note.into();
        self
    }
}

pub(crate) fn median(values: &[f64]) -> f64 {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 { sorted[mid] } else { (sorted[mid - 1] + sorted[mid]) / 2.0 }
}

/// Nearest-rank percentile of sorted nanoseconds, in seconds.
pub(crate) fn percentile(sorted_ns: &[u64], q: f64) -> Option<f64> {
    if sorted_ns.is_empty() {
        return None;
    }
    let rank = ((q * sorted_ns.len() as f64).ceil() as usize).clamp(1, sorted_ns.len());
    Some(sorted_ns[rank - 1] as f64 / 1e9)
}
