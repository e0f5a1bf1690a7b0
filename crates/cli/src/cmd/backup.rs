//! `idemdb backup`: a verified, complete, closed copy of a store nobody holds open.

use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use idemdb::{BackupError, BackupOptions, OpenError};

use crate::error::{CliError, Exit, guard};
use crate::open::{check_existing, open_read_only};
use crate::output;

/// Arguments of `idemdb backup`.
#[derive(Debug, Args)]
#[command(after_help = "The backup is one store file that opens alone (no journal beside it), holding every \
record, index entry, audit event and workflow entry of the store, and its secret and clock. It is written to a \
hidden temporary file beside DEST (.NAME.backup-PID-XXXX.partial), synced, opened on its own and verified (with \
the record and index counts of the store), then moved to DEST. A crash leaves at most the temporary file; DEST is \
never a partial file, and the next backup to DEST removes the temporary files of earlier backups whose process has \
ended (only files of that exact name for DEST).\n\n\
What it does to SRC: it opens SRC read-only and writes nothing to it, with one exception: a store left by a \
crash (it needs redb's crash recovery, or its journal holds commits its file does not) is first opened for \
writing once, which recovers it and applies those commits to the file, as every command does; a line on stderr \
says so before it happens. No record is lost or changed by that.\n\n\
What it does to DEST: it writes a new file. With --overwrite it replaces an existing file, atomically, once the \
new backup is verified; it takes the locks an open store holds on DEST (DEST.lock, DEST itself, DEST-journal) \
before it starts and keeps them until the backup has taken DEST's place, so it never replaces a store that is \
open (exit 3, \"is a store that is open\"), nor a store whose journal may hold commits its file does not (exit 3: \
open it once, e.g. `idemdb recover DEST`, then back up onto it). SRC itself, its journal and a directory are \
refused (exit 2). Before writing, the free space on DEST's file system must hold the size of SRC and a margin \
(16 MiB, or a tenth of SRC if more): otherwise exit 4, naming both figures, and nothing is written.\n\n\
A store held open by a running service (exit 3, \"already open\") is backed up by that service: \
`Store::backup_to` in the library, `POST /v1/admin/backup` or SIGUSR1 in the payments example. Never copy the \
file of a live store: the copy lacks what its journal holds.\n\n\
Tables an application keeps in the store's database are not known here by type: the backup refuses such a \
store unless --leave-out-unknown-tables (the application backs up its tables with `BackupOptions::table`).")]
pub(crate) struct BackupArgs {
    /// The store file to back up.
    #[arg(value_name = "SRC")]
    source: PathBuf,
    /// The backup file to write (its directory must exist).
    #[arg(value_name = "DEST")]
    dest: PathBuf,
    /// Replace DEST if it exists (atomically, once the new backup is verified); never a store
    /// that is open, or one whose journal may hold commits its file does not.
    #[arg(long)]
    overwrite: bool,
    /// Leave out tables that are not idemdb's instead of refusing the store.
    #[arg(long)]
    leave_out_unknown_tables: bool,
}

pub(crate) fn run(args: &BackupArgs, json: bool) -> Result<Exit, CliError> {
    let source = &args.source;
    check_existing(source)?;
    // What DEST alone can refuse is refused before SRC is opened: opening a store left by a
    // crash recovers it (a write), and a refused command changes nothing.
    if let Some(refused) = refused_destination(source, &args.dest, args.overwrite) {
        return Err(CliError::usage_msg("DEST", &crate::error::cause_chain(&refused)));
    }
    // A store at DEST that is open, or whose journal may hold commits, is refused before SRC
    // is opened too (the backup holds DEST and checks again when it runs).
    match BackupOptions::new().overwrite(args.overwrite).check_destination(&args.dest) {
        Ok(()) => {}
        Err(error @ (BackupError::DestinationOpen { .. } | BackupError::DestinationPending { .. })) => {
            return Err(CliError::open(&args.dest, &error));
        }
        Err(error @ BackupError::DestinationExists(_)) => {
            return Err(CliError::usage_msg("DEST", &crate::error::cause_chain(&error)));
        }
        Err(error) => return Err(CliError::runtime_ctx(&args.dest, "backup failed", &error)),
    }
    let store = match open_read_only(source) {
        Ok(store) => store,
        Err(error) => return Err(held_elsewhere(source, error)),
    };
    let total = store.stats().map(|stats| stats.records).unwrap_or(0);
    let bar = output::progress(total, json, "backing up");
    bar.set_length(0);
    let options = BackupOptions::new()
        .overwrite(args.overwrite)
        .leave_out_unknown_tables(args.leave_out_unknown_tables)
        .progress(|progress| {
            bar.set_length(progress.total);
            bar.set_position(progress.copied);
        });
    let outcome = guard(|| store.backup_with(&args.dest, options));
    bar.finish_and_clear();
    let report = match outcome {
        Ok(Ok(report)) => report,
        Ok(Err(
            error @ (BackupError::DestinationExists(_) | BackupError::SameFile { .. } | BackupError::NotAFile { .. }),
        )) => {
            return Err(CliError::usage_msg("DEST", &crate::error::cause_chain(&error)));
        }
        // The store at DEST is in use, or holds commits only in its journal: it is left as it is.
        Ok(Err(error @ (BackupError::DestinationOpen { .. } | BackupError::DestinationPending { .. }))) => {
            return Err(CliError::open(&args.dest, &error));
        }
        Ok(Err(error)) => return Err(CliError::runtime_ctx(&args.dest, "backup failed", &error)),
        Err(panic) => {
            return Err(CliError::runtime_msg(
                Some(source),
                format!("the storage layer failed while reading the store ({panic}); see `idemdb verify`"),
            ));
        }
    };
    if json {
        output::print_json(&json!({
            "file": source.display().to_string(),
            "backup": report.path.display().to_string(),
            "records": report.records,
            "index_entries": report.index_entries,
            "audit_events": report.audit_events,
            "entries": report.entries,
            "bytes": report.bytes,
            "source_bytes": report.source_bytes,
            "replaced": report.replaced,
            "left_out": report.left_out,
            "removed_stale": report.removed_stale.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            "snapshot_ms": report.snapshot_took.as_millis() as u64,
            "took_ms": report.took.as_millis() as u64,
            "verified": true,
        }));
    } else {
        let mut fields = vec![
            ("store", source.display().to_string()),
            ("backup", report.path.display().to_string()),
            ("records", output::count(report.records)),
            ("index entries", output::count(report.index_entries)),
            ("audit events", output::count(report.audit_events)),
            ("size", output::bytes(report.bytes)),
            ("took", output::duration(report.took)),
            ("verified", "yes (opened alone; counts match the store)".into()),
        ];
        if report.replaced {
            fields.push(("replaced", "yes (the earlier file at DEST)".into()));
        }
        if !report.left_out.is_empty() {
            fields.push(("left out", report.left_out.join(", ")));
        }
        if !report.removed_stale.is_empty() {
            let names: Vec<String> = report.removed_stale.iter().map(|p| p.display().to_string()).collect();
            fields.push(("removed", format!("temporary files of killed backups: {}", names.join(", "))));
        }
        output::print(&output::fields(&fields));
    }
    Ok(Exit::Ok)
}

/// The refusals of [`idemdb::Store::backup_with`] that DEST decides alone: a directory, a file
/// that exists (without `--overwrite`), SRC itself or its journal.
fn refused_destination(source: &std::path::Path, dest: &std::path::Path, overwrite: bool) -> Option<BackupError> {
    let meta = std::fs::metadata(dest).ok()?;
    if meta.is_dir() {
        return Some(BackupError::NotAFile { path: dest.to_path_buf(), kind: "a directory" });
    }
    let resolved = std::fs::canonicalize(dest).ok()?;
    let source = std::fs::canonicalize(source).ok()?;
    let mut journal = source.clone().into_os_string();
    journal.push("-journal");
    let same = |other: &std::path::Path| resolved == other || same_inode(&meta, other);
    if same(&source) {
        return Some(BackupError::SameFile { dest: dest.to_path_buf(), what: "file" });
    }
    if same(std::path::Path::new(&journal)) {
        return Some(BackupError::SameFile { dest: dest.to_path_buf(), what: "journal" });
    }
    (!overwrite).then(|| BackupError::DestinationExists(dest.to_path_buf()))
}

#[cfg(unix)]
fn same_inode(meta: &std::fs::Metadata, other: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(other).is_ok_and(|theirs| theirs.dev() == meta.dev() && theirs.ino() == meta.ino())
}

#[cfg(not(unix))]
fn same_inode(_meta: &std::fs::Metadata, _other: &std::path::Path) -> bool {
    false
}

/// An open that failed because another process holds the store says where to back it up.
fn held_elsewhere(source: &std::path::Path, error: CliError) -> CliError {
    let text = error.to_string();
    if text.contains(&OpenError::AlreadyOpen.to_string()) {
        return CliError::open_msg(
            source,
            format!(
                "{}: a running service holds it; back it up through that service (`Store::backup_to`; the payments \
                 example: POST /v1/admin/backup or SIGUSR1), never by copying the file",
                OpenError::AlreadyOpen
            ),
        );
    }
    error
}
