//! `idemdb purge`: apply retention now (or, with `--dry-run`, count what it would do).

use clap::Args;
use serde_json::json;

use idemdb::PurgeReport;

use crate::cmd::FileArg;
use crate::error::{CliError, Exit};
use crate::open::{open_existing_with, open_read_only_with};
use crate::output;

/// Arguments of `idemdb purge`.
#[derive(Debug, Args)]
#[command(after_help = "Retention never makes a known key unknown early: a result becomes a tombstone only at \
its response TTL, and a tombstone is forgotten only at its tombstone TTL, both fixed when the record was \
written.\n\n--dry-run opens the store read-only: not a byte of the file changes. A purge that made the file \
grow (redb doubles a full file when a write needs a page and none is free) compacts it at the end, so the file \
is never left larger than the data needs; `idemdb compact --rebuild` gives back more.\n\n\
Retention runs on the store's confirmed time: a gap the wall clock shows since the store was last used (or a \
clock set ahead by mistake) counts only once the wall clock has kept it for ten minutes of store use, so a \
wrong clock never makes a known key unknown. The report shows such a gap; --trust-clock counts it at once.")]
pub(crate) struct PurgeArgs {
    #[command(flatten)]
    file: FileArg,
    /// Count what would be purged now, and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Count the time since the store was last used, as the wall clock shows it, as passed at
    /// once (only when the wall clock is known to be right; see the help below).
    #[arg(long)]
    trust_clock: bool,
    /// Records per write transaction.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    budget: u64,
}

pub(crate) fn run(args: &PurgeArgs, json: bool) -> Result<Exit, CliError> {
    let file = &args.file.file;
    let builder = || idemdb::Store::builder().trust_clock_at_open(args.trust_clock);
    let mut store =
        if args.dry_run { open_read_only_with(file, builder)? } else { open_existing_with(file, builder())? };
    let at = store.decision_time();
    let unconfirmed = at.now.saturating_since(at.retention);
    let size = || std::fs::metadata(file).map(|meta| meta.len()).ok();
    let size_before = size();
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
    // redb grows a full file by doubling its usable size when a write needs a page and none is
    // free; tombstones are written before the pages they free can be reused, so a purge of a
    // compact file (a fresh import, a rebuild) doubles it. Give that back at once.
    let grew = !args.dry_run && size().zip(size_before).is_some_and(|(after, before)| after > before);
    let compacted =
        grew && store.compact().map_err(|error| CliError::runtime_ctx(file, "compaction failed", &error))?;
    let size_after = size();
    if json {
        output::print_json(&json!({
            "file": file.display().to_string(),
            "dry_run": args.dry_run,
            "tombstoned": report.tombstoned,
            "forgotten": report.forgotten,
            "stale_index_entries": report.stale_index_entries,
            "audit_removed": report.audit_removed,
            "passes": passes,
            "compacted": compacted,
            "unconfirmed_clock_ms": u64::try_from(unconfirmed.as_millis()).unwrap_or(u64::MAX),
            "file_bytes_before": size_before,
            "file_bytes_after": size_after,
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
    if unconfirmed >= std::time::Duration::from_secs(1) {
        text.push_str(&format!(
            "clock: the wall clock is {} ahead of the store's confirmed time; records due in that gap are kept \
(--trust-clock counts it)\n",
            output::duration(unconfirmed)
        ));
    }
    if args.dry_run {
        text.push_str("dry run: nothing was changed\n");
    } else if let (Some(before), Some(after)) = (size_before, size_after) {
        let note = if compacted { " (compacted after the purge)" } else { "" };
        text.push_str(&format!("file size: {} before, {} after{note}\n", output::bytes(before), output::bytes(after)));
    }
    output::print(&text);
    Ok(Exit::Ok)
}
