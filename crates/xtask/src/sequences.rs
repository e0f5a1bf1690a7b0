//! The operator-sequences section: its run, its summary line and its rows.

use std::time::Instant;

use idemdb_reliability::operator_sequences::{SequenceConfig, SequenceReport, run};

use crate::binaries::{build_child, build_cli, target_dir};
use crate::size::{Size, parse_u64, threads};
use crate::table::{Row, group, row};

/// Runs the section at `size` and prints what it did (and every failing sequence, up to a
/// limit, with its seed and steps).
/// `--sequence N` runs sequence `N` of the seed alone (a replay of one the report named).
pub(crate) fn operator_sequences(size: &Size, seed: u64, args: &[String]) -> Result<SequenceReport, String> {
    let t = Instant::now();
    let one = parse_u64(args, "--sequence")?;
    let (child, cli) = (build_child()?, build_cli()?);
    let report = run(&SequenceConfig {
        child,
        cli,
        sequences: if one.is_some() { 1 } else { size.operator_sequences },
        first: one.unwrap_or(0),
        seed,
        threads: threads(),
        dir: None,
    })
    .map_err(|e| format!("operator sequences: {e}"))?;
    let kinds: Vec<String> = report.steps.iter().map(|(kind, n)| format!("{kind} {}", group(*n))).collect();
    println!(
        "  operator sequences: {} sequences, {} steps ({}), {} completions acknowledged, {} verified, {} lost, {} given up by an explicit discard (still in a journal file kept in the directory), {} in stores replaced by backup --overwrite, {} foreign, {} refusals ({} untyped, {} changed data), {} stores refused at the final check, {} harness failures, {} failing sequences, in {:.1?}",
        group(report.sequences),
        group(report.steps_run()),
        kinds.join(", "),
        group(report.acknowledged),
        group(report.verified),
        group(report.lost),
        group(report.given_up),
        group(report.replaced),
        group(report.foreign),
        group(report.refusals),
        group(report.untyped),
        group(report.refusals_changed),
        group(report.refused_at_check),
        group(report.failures),
        group(report.failed_sequences),
        t.elapsed()
    );
    if !report.changed_by.is_empty() {
        let kinds: Vec<String> = report.changed_by.iter().map(|(kind, n)| format!("{kind} {}", group(*n))).collect();
        println!("    refusals that changed data, by step: {}", kinds.join(", "));
    }
    for failing in report.failing.iter().take(if one.is_some() { 1 } else { 6 }) {
        println!("    ! operator sequence: {failing}");
    }
    if report.failed_sequences > 0 {
        let list = target_dir().join("operator-sequences-failing.txt");
        let written = std::fs::write(&list, report.failing.join("\n")).is_ok();
        println!(
            "    {} failing sequences{}; `cargo xtask reliability --only operator-sequences --seed {seed} [--sequence N]` runs them again",
            group(report.failed_sequences),
            if written { format!(", each with its seed and steps, in {}", list.display()) } else { String::new() },
        );
    }
    Ok(report)
}

/// The section's rows: sequences run (at least the size's), then 0 lost, 0 foreign, 0
/// refusals that changed data, 0 untyped refusals, and the counts as information.
pub(crate) fn rows(report: &SequenceReport, size: &Size, at_least: impl Fn(u64) -> String) -> Vec<Row> {
    let zero = |v: u64| Some(("0", v == 0));
    let ran = report.sequences >= size.operator_sequences && report.failures == 0 && report.verified > 0;
    vec![
        row("operator sequences run", report.sequences, Some((&at_least(size.operator_sequences), ran))),
        row("acknowledged writes lost", report.lost, zero(report.lost)),
        row("foreign records applied", report.foreign, zero(report.foreign)),
        row("refusals that changed data", report.refusals_changed, zero(report.refusals_changed)),
        row("untyped refusals", report.untyped, zero(report.untyped)),
        row("sequence acks verified", report.verified, None),
        row("given up by explicit discard", report.given_up, None),
        row("operator refusals", report.refusals, None),
    ]
}
