//! `idemdb purge`: apply retention now (or, with `--dry-run`, count what it would do).

use clap::Args;
use serde_json::json;

use idemdb::PurgeReport;

use crate::FileArg;
use crate::error::{CliError, Exit};
use crate::open::open_existing;
use crate::output;

/// Arguments of `idemdb purge`.
#[derive(Debug, Args)]
#[command(after_help = "Retention never makes a known key unknown early: a result becomes a tombstone only at \
its response TTL, and a tombstone is forgotten only at its tombstone TTL, both fixed when the record was \
written. Run `idemdb compact` afterwards to return the freed space to the file system.")]
pub(crate) struct PurgeArgs {
    #[command(flatten)]
    file: FileArg,
    /// Count what would be purged now, and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Records per write transaction.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    budget: u64,
}

pub(crate) fn run(args: &PurgeArgs, json: bool) -> Result<Exit, CliError> {
    let file = &args.file.file;
    let store = open_existing(file)?;
    let preview =
        store.purge_preview().map_err(|error| CliError::runtime_ctx(file, "cannot scan the expiry index", &error))?;
    let (report, passes) = if args.dry_run {
        (preview, 0)
    } else {
        let work = preview.tombstoned + preview.forgotten + preview.stale_index_entries;
        let bar = output::progress(work, json, "purging");
        let budget = usize::try_from(args.budget).unwrap_or(usize::MAX);
        let mut total = PurgeReport::default();
        let mut passes = 0u64;
        loop {
            let pass =
                store.purge_expired(budget).map_err(|error| CliError::runtime_ctx(file, "purge failed", &error))?;
            passes += 1;
            total.tombstoned += pass.tombstoned;
            total.forgotten += pass.forgotten;
            total.stale_index_entries += pass.stale_index_entries;
            total.audit_removed += pass.audit_removed;
            bar.inc(pass.tombstoned + pass.forgotten + pass.stale_index_entries);
            let progressed = pass.tombstoned + pass.forgotten + pass.stale_index_entries + pass.audit_removed > 0;
            if !pass.more || !progressed {
                break;
            }
        }
        bar.finish_and_clear();
        (total, passes)
    };
    if json {
        output::print_json(&json!({
            "file": file.display().to_string(),
            "dry_run": args.dry_run,
            "tombstoned": report.tombstoned,
            "forgotten": report.forgotten,
            "stale_index_entries": report.stale_index_entries,
            "audit_removed": report.audit_removed,
            "passes": passes,
        }));
        return Ok(Exit::Ok);
    }
    let verb = |done: &'static str, would: &'static str| if args.dry_run { would } else { done };
    let mut text = output::fields(&[
        ("store", file.display().to_string()),
        (verb("tombstoned", "would tombstone"), output::count(report.tombstoned)),
        (verb("forgotten", "would forget"), output::count(report.forgotten)),
        (verb("stale index entries removed", "stale index entries"), output::count(report.stale_index_entries)),
        (verb("audit events removed", "old audit events"), output::count(report.audit_removed)),
    ]);
    if args.dry_run {
        text.push_str("dry run: nothing was changed\n");
    }
    output::print(&text);
    Ok(Exit::Ok)
}
