//! `idemdb compact`: return free pages to the file system, or (`--rebuild`) rewrite the file
//! with every table in key order.

use clap::Args;
use serde_json::json;

use idemdb::RebuildError;

use crate::cmd::FileArg;
use crate::error::{CliError, Exit, guard};
use crate::open::{check_existing, open_existing};
use crate::output;

/// Arguments of `idemdb compact`.
#[derive(Debug, Args)]
#[command(
    after_help = "Nothing else may have the store open while it is compacted. Most useful after a large purge.\n\n\
Without --rebuild, free pages at the end of the file go back to the file system; entries stay where they are. \
With --rebuild, every table is copied in key order into FILE.rebuild (full B-tree pages: about a quarter smaller \
after inserts in random key order), which then replaces FILE atomically. The rebuild needs free disk space for \
the copy; a crash before the replacement leaves FILE untouched.\n\n\
What it may do to data: nothing is added, removed or changed but the file's layout. --rebuild refuses, and changes \
nothing, a store that holds application tables (tables an application wrote with its own types, which this tool \
cannot copy): compact it without --rebuild, or let the application that owns the tables copy them (its backup, \
naming them). A store whose journal holds commits not yet in the file is recovered first (see `idemdb recover`)."
)]
pub(crate) struct CompactArgs {
    #[command(flatten)]
    file: FileArg,
    /// Rewrite the file with every table in key order (full pages), then replace it.
    #[arg(long)]
    rebuild: bool,
}

pub(crate) fn run(args: &CompactArgs, json: bool) -> Result<Exit, CliError> {
    let file = &args.file.file;
    let size = || std::fs::metadata(file).map(|meta| meta.len()).map_err(|error| CliError::runtime(file, &error));
    let (compacted, before, records) = if args.rebuild {
        check_existing(file)?;
        let before = size()?;
        let report = match guard(|| idemdb::rebuild(file)) {
            Ok(Ok(report)) => report,
            Ok(Err(RebuildError::Open(error))) => return Err(CliError::open(file, &error)),
            Ok(Err(RebuildError::UnknownTables(tables))) => {
                return Err(CliError::runtime_msg(
                    Some(file),
                    format!(
                        "the store holds application tables a rebuild cannot copy ({}); nothing was changed. Compact it \
                         without --rebuild, or let the application that owns those tables copy them",
                        tables.join(", ")
                    ),
                ));
            }
            Ok(Err(error)) => return Err(CliError::runtime_ctx(file, "rebuild failed", &error)),
            Err(panic) => {
                return Err(CliError::open_msg(
                    file,
                    format!(
                        "the file is damaged: the storage layer failed while reading it ({panic}); see `idemdb verify`"
                    ),
                ));
            }
        };
        (true, before, Some(report.records))
    } else {
        let mut store = open_existing(file)?;
        let before = size()?;
        let compacted = store.compact().map_err(|error| CliError::runtime_ctx(file, "compaction failed", &error))?;
        (compacted, before, None)
    };
    let after = size()?;
    if json {
        output::print_json(&json!({
            "file": file.display().to_string(),
            "rebuilt": args.rebuild,
            "compacted": compacted,
            "records": records,
            "file_bytes_before": before,
            "file_bytes_after": after,
        }));
    } else {
        let mut fields = vec![
            ("store", file.display().to_string()),
            (
                "compacted",
                match (args.rebuild, compacted) {
                    (true, _) => "yes (rebuilt in key order)".into(),
                    (false, true) => "yes".into(),
                    (false, false) => "no (nothing to reclaim)".into(),
                },
            ),
        ];
        if let Some(records) = records {
            fields.push(("records copied", output::count(records)));
        }
        fields.push(("size before", output::bytes(before)));
        fields.push(("size after", output::bytes(after)));
        output::print(&output::fields(&fields));
    }
    Ok(Exit::Ok)
}
