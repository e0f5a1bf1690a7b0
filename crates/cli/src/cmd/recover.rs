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
What it may do to files: apply the journal's records to the store file; move a journal that is not this store's \
(another store's, left at this name) aside as <journal>.set-aside-<journal id>-<seconds>, never writing over it; \
remove the store's own earlier journal (found where the store was last opened) once its records are applied. It \
never deletes or rewrites a journal that holds anything not applied.\n\n\
An open refuses a store whose journal should hold acknowledged commits but is missing, damaged, cut short or \
another store's, and changes nothing then: the error names the journal it looked for, where the store last \
opened it, and what is intact. Put that file back first. Only if it is truly lost, --discard-journal opens the \
store anyway: it applies the intact records before the damage, gives up the rest, sets the journal file aside \
(the given-up commits stay in it) and starts a new journal; the report says how many were given up and where \
the file is."
)]
pub(crate) struct RecoverArgs {
    #[command(flatten)]
    file: FileArg,
    /// Open even though the store's journal is missing, damaged, cut short or not its own:
    /// apply what is intact, give up the acknowledged commits past it (an operator's decision;
    /// reported), and keep the journal file aside.
    #[arg(long)]
    discard_journal: bool,
}

pub(crate) fn run(args: &RecoverArgs, json: bool) -> Result<Exit, CliError> {
    let file = &args.file.file;
    let store = open_existing_with(file, Store::builder().discard_lost_journal(args.discard_journal))?;
    let report = store.journal_recovery().cloned().unwrap_or_default();
    let records = store.stats().map_err(|error| CliError::runtime_ctx(file, "cannot read the store", &error))?.records;
    drop(store);
    let set_aside: Vec<serde_json::Value> = report
        .set_aside
        .iter()
        .map(|aside| {
            json!({
                "from": aside.from.display().to_string(),
                "to": aside.to.display().to_string(),
                "reason": aside.reason.to_string(),
            })
        })
        .collect();
    if report.discarded {
        // Said after the fact, and only when something was given up.
        eprintln!(
            "idemdb: {}: the journal could not be read to its end; {} intact record(s) applied, {} given up{}",
            file.display(),
            report.applied,
            if report.given_up > 0 { report.given_up.to_string() } else { "any after that point".to_string() },
            report
                .set_aside
                .iter()
                .map(|aside| format!("; the journal is kept at {}", aside.to.display()))
                .collect::<String>()
        );
    }
    if json {
        output::print_json(&json!({
            "file": file.display().to_string(),
            "journal_records_applied": report.applied,
            "journal_read_from": report.read_from.as_ref().map(|path| path.display().to_string()),
            "journal_discarded": report.discarded,
            "journal_records_given_up": report.given_up,
            "journal_stopped_by": report.stopped_by,
            "journal_set_aside": set_aside,
            "journal_removed": report.removed.as_ref().map(|path| path.display().to_string()),
            "records": records,
            "closed_cleanly": true,
        }));
    } else {
        let mut fields =
            vec![("store", file.display().to_string()), ("journal records applied", output::count(report.applied))];
        if let Some(from) = &report.read_from {
            fields.push(("read from", from.display().to_string()));
        }
        if let Some(stopped) = &report.stopped_by {
            fields.push(("records stopped", stopped.clone()));
        }
        if report.discarded {
            fields.push(("records given up", output::count(report.given_up)));
        }
        for aside in &report.set_aside {
            fields.push((
                "journal set aside",
                format!("{} -> {} ({})", aside.from.display(), aside.to.display(), aside.reason),
            ));
        }
        if let Some(removed) = &report.removed {
            fields.push(("earlier journal removed", removed.display().to_string()));
        }
        fields.push(("records", output::count(records)));
        fields.push(("closed", "cleanly: the file alone is the whole store".into()));
        output::print(&output::fields(&fields));
    }
    Ok(Exit::Ok)
}
