//! `idemdb recover`: open a store for writing once, so a crash's leftovers are applied (redb's
//! repair, the journal's records), and close it cleanly; or, with `--discard-journal`, accept
//! the loss of a journal that cannot be put back.

use clap::Args;
use serde_json::json;

use idemdb::Store;

use crate::cmd::FileArg;
use crate::error::{CliError, Exit};
use crate::open::open_existing_with;
use crate::output;

/// Arguments of `idemdb recover`.
#[derive(Debug, Args)]
#[command(
    after_help = "Nothing else may have the store open. Every open for writing recovers a store; this command does \
only that, reports it, and closes the store cleanly (afterwards the file alone is the whole store).\n\n\
An open refuses a store whose journal should hold acknowledged commits but is missing, damaged or another \
store's: the error names the journal it looked for (and where the store last opened it). Put that file back \
first. Only if it is truly lost, --discard-journal opens the store at its last checkpoint, giving up the commits \
that journal held, and starts a new journal."
)]
pub(crate) struct RecoverArgs {
    #[command(flatten)]
    file: FileArg,
    /// Open even though the store's journal is missing, damaged or not its own, giving up the
    /// acknowledged commits it held (an operator's decision; logged).
    #[arg(long)]
    discard_journal: bool,
}

pub(crate) fn run(args: &RecoverArgs, json: bool) -> Result<Exit, CliError> {
    let file = &args.file.file;
    if args.discard_journal {
        eprintln!(
            "idemdb: {}: opening without its journal if it cannot be read: the commits only that journal held are given up",
            file.display()
        );
    }
    let store = open_existing_with(file, Store::builder().discard_lost_journal(args.discard_journal))?;
    let recovered = store.journal_stats().map(|stats| stats.recovered);
    let records = store.stats().map_err(|error| CliError::runtime_ctx(file, "cannot read the store", &error))?.records;
    drop(store);
    if json {
        output::print_json(&json!({
            "file": file.display().to_string(),
            "journal_records_applied": recovered,
            "records": records,
            "closed_cleanly": true,
        }));
    } else {
        output::print(&output::fields(&[
            ("store", file.display().to_string()),
            ("journal records applied", recovered.map_or_else(|| "none (no journal)".into(), output::count)),
            ("records", output::count(records)),
            ("closed", "cleanly: the file alone is the whole store".into()),
        ]));
    }
    Ok(Exit::Ok)
}
