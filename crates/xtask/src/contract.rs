//! The transaction-contract sections: `batch-atomicity` (calls that fail after writing, mixed
//! into concurrent group commits) and `audit-durability` (decision, resolution and lock-free
//! audit events across `kill -9`). Their runs, summary lines and rows.

use std::time::Instant;

use idemdb_reliability::audit_durability::{self, AuditDurabilityReport};
use idemdb_reliability::batch_atomicity::{self, AtomicityReport};

use crate::binaries::build_child;
use crate::size::{Size, threads};
use crate::table::{Row, group, print_notes, row};

/// Calls per thread in a batch-atomicity round.
const CALLS_PER_THREAD: usize = 60;

/// Runs `batch-atomicity` at `size` and prints what it did.
pub(crate) fn batch_atomicity(size: &Size, seed: u64) -> AtomicityReport {
    let t = Instant::now();
    // More threads than cores: callers queue behind each other's commits and share batches.
    let report = batch_atomicity::run(size.atomicity_rounds, threads().max(2) * 4, CALLS_PER_THREAD, seed);
    println!(
        "  batch atomicity: {} rounds, {} calls ({} succeeded, {} failed after writing, {} refused before writing), {} partial writes, {} unexpected answers, {} failures, in {:.1?}",
        group(report.rounds),
        group(report.calls),
        group(report.succeeded),
        group(report.failed_after_writing),
        group(report.refused),
        report.partial_writes,
        report.unexpected,
        report.failures,
        t.elapsed()
    );
    print_notes("batch atomicity", &report.notes);
    report
}

/// Runs `audit-durability` at `size` and prints what it did.
///
/// # Errors
/// The child binary could not be built.
pub(crate) fn audit_durability(size: &Size, seed: u64) -> Result<AuditDurabilityReport, String> {
    let t = Instant::now();
    let child = build_child()?;
    let report = audit_durability::run(&child, size.audit_kills, 1_500, seed);
    println!(
        "  audit durability: {} kills, {} decision and {} resolution events acknowledged, {} lost; {} lock-free events, {} lost ({} beyond the bound), {} failures, in {:.1?}",
        group(report.kills),
        group(report.decisions),
        group(report.resolutions),
        report.decisions_lost,
        group(report.lock_free),
        report.lock_free_lost,
        report.lock_free_lost_beyond_bound,
        report.failures,
        t.elapsed()
    );
    print_notes("audit durability", &report.notes);
    Ok(report)
}

/// The rows of `batch-atomicity`.
pub(crate) fn atomicity_rows(report: &AtomicityReport, size: &Size, at_least: impl Fn(u64) -> String) -> Vec<Row> {
    let zero = |v: u64| Some(("0", v == 0));
    let ran = report.rounds >= size.atomicity_rounds && report.failed_after_writing > 0 && report.succeeded > 0;
    let bad = report.unexpected + report.failures;
    vec![
        row("batch rounds", report.rounds, Some((&at_least(size.atomicity_rounds), ran))),
        row("partial writes", report.partial_writes, zero(report.partial_writes)),
        row("batch calls answered wrongly", bad, zero(bad)),
        row("calls failed after writing", report.failed_after_writing, None),
    ]
}

/// The rows of `audit-durability`.
pub(crate) fn audit_rows(report: &AuditDurabilityReport, size: &Size, at_least: impl Fn(u64) -> String) -> Vec<Row> {
    let zero = |v: u64| Some(("0", v == 0));
    let ran = report.kills >= size.audit_kills && report.failures == 0 && report.resolutions > 0;
    vec![
        row("audit kills", report.kills, Some((&at_least(size.audit_kills), ran))),
        row("decision events lost", report.decisions_lost, zero(report.decisions_lost)),
        row("answer events lost > 1 s", report.lock_free_lost_beyond_bound, zero(report.lock_free_lost_beyond_bound)),
        row("answer events lost <= 1 s", report.lock_free_lost, None),
    ]
}
