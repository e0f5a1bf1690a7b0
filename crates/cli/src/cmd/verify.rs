//! `idemdb verify`: redb's integrity check, then every record, index entry and audit event
//! decoded and cross-checked. Exit 1 on any problem, with a report instead of a crash.

use std::path::Path;

use clap::Args;
use serde_json::json;

use idemdb::{OpenError, VerifyReport};

use crate::cmd::FileArg;
use crate::error::{CliError, Exit, cause_chain, guard, set_current_file};
use crate::open::{not_a_file, open_raw};
use crate::output;

/// Arguments of `idemdb verify`.
#[derive(Debug, Args)]
#[command(after_help = "Exits with 0 when the store is sound, 1 when any problem was found (including a file \
that is damaged or not an idemdb store at all), 3 when the file could not be opened for another reason \
(missing, not a regular file, already open for writing, newer format).\n\nThe file is not changed: it is \
copied (under a read-only lock, so no writer changes it meanwhile) into the temporary directory ($TMPDIR), \
which needs room for the copy, and the copy is checked. redb's integrity check repairs the copy where it can; \
the report still counts the damage it found. To repair the store itself, open it for writing once (for \
example `idemdb purge FILE`): every open for writing runs the same check.")]
pub(crate) struct VerifyArgs {
    #[command(flatten)]
    file: FileArg,
}

/// What verification concluded.
struct Outcome {
    report: Option<VerifyReport>,
    /// Problems outside the library's report (the file could not be read at all).
    fatal: Option<String>,
}

impl Outcome {
    fn ok(&self) -> bool {
        self.fatal.is_none() && self.report.as_ref().is_some_and(VerifyReport::is_ok)
    }

    fn problem_count(&self) -> usize {
        usize::from(self.fatal.is_some())
            + self.report.as_ref().map_or(0, |r| r.problems.len() + usize::from(!r.storage_ok))
    }
}

pub(crate) fn run(args: &VerifyArgs, json: bool) -> Result<Exit, CliError> {
    let file = &args.file.file;
    let outcome = check(file)?;
    if json {
        let report = outcome.report.as_ref();
        let problems: Vec<_> = report
            .map(|r| r.problems.iter().map(|p| json!({"table": p.table, "detail": p.detail})).collect())
            .unwrap_or_default();
        output::print_json(&json!({
            "file": file.display().to_string(),
            "ok": outcome.ok(),
            "error": outcome.fatal,
            "storage_ok": report.map(|r| r.storage_ok),
            "records": report.map(|r| r.records),
            "index_entries": report.map(|r| r.index_entries),
            "audit_events": report.map(|r| r.audit_events),
            "problems": problems,
        }));
    } else {
        output::print(&describe(file, &outcome));
    }
    Ok(if outcome.ok() { Exit::Ok } else { Exit::Problems })
}

fn check(file: &Path) -> Result<Outcome, CliError> {
    set_current_file(file);
    let meta = std::fs::metadata(file).map_err(|error| CliError::open(file, &error))?;
    if meta.is_dir() {
        return Err(CliError::open_msg(file, "is a directory, not a store file"));
    }
    if !meta.is_file() {
        return Err(not_a_file(file, &meta));
    }
    let fatal = |text: String| Outcome { report: None, fatal: Some(text) };
    if meta.len() == 0 {
        return Ok(fatal("the file is empty: not an idemdb store".into()));
    }
    // Check a copy, so the file itself is never written (redb's check repairs and commits).
    let copy_dir = tempfile::Builder::new()
        .prefix("idemdb-verify-")
        .tempdir()
        .map_err(|error| CliError::runtime_ctx(file, "cannot make a temporary directory for the copy", &error))?;
    let copy = copy_dir.path().join("store.idemdb");
    {
        // A read-only handle holds the store's lock while the bytes are copied, so no writer
        // changes them meanwhile. A file left by a crash cannot be opened read-only (its
        // recovery writes): it is copied as it is, and the copy recovered.
        let held = match guard(|| idemdb::Store::builder().open_read_only(file)) {
            Ok(Ok(store)) => Some(store),
            Ok(Err(OpenError::AlreadyOpen)) => return Err(CliError::open(file, &OpenError::AlreadyOpen)),
            // Another runtime's process (a Node app) writes it: a copy now could be torn.
            Ok(Err(held @ OpenError::HeldElsewhere { .. })) => return Err(CliError::open(file, &held)),
            Ok(Err(OpenError::NewerFormat { found, supported })) => {
                return Err(CliError::open(file, &OpenError::NewerFormat { found, supported }));
            }
            Ok(Err(error)) if is_access_failure(&error) => return Err(CliError::open(file, &error)),
            Ok(Err(_)) | Err(_) => None,
        };
        std::fs::copy(file, &copy)
            .map_err(|error| CliError::runtime_ctx(file, "cannot copy the file to check it", &error))?;
        // Commits not yet checkpointed into the file live in its journal: the copy gets it
        // too, and its open replays them.
        // The journal sits beside the store file's resolved path (a symlink's target). Only
        // a regular file is copied: copying a FIFO would wait for a writer for ever; the
        // copy's open then reports what is wrong with it.
        let journal = journal_of(&std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf()));
        if std::fs::metadata(&journal).is_ok_and(|meta| meta.is_file()) {
            std::fs::copy(&journal, journal_of(&copy))
                .map_err(|error| CliError::runtime_ctx(&journal, "cannot copy the journal to check it", &error))?;
        }
        drop(held);
    }
    let opened = guard(|| open_raw(&copy));
    let mut store = match opened {
        Err(panic) => return Ok(fatal(format!("the storage layer failed while opening the file ({panic})"))),
        Ok(Ok(store)) => store,
        Ok(Err(error)) => {
            return match error {
                OpenError::NotAStore { .. } | OpenError::Foreign { .. } | OpenError::CorruptMeta(_) => {
                    Ok(fatal(format!("cannot be opened as an idemdb store: {}", cause_chain(&error))))
                }
                OpenError::Storage(_) if !is_access_failure(&error) => {
                    Ok(fatal(format!("cannot be opened as an idemdb store: {}", cause_chain(&error))))
                }
                other => Err(CliError::open(file, &other)),
            };
        }
    };
    set_current_file(file);
    match guard(|| store.verify()) {
        Ok(Ok(report)) => Ok(Outcome { report: Some(report), fatal: None }),
        Ok(Err(error)) => Ok(fatal(format!("the check could not finish: {}", cause_chain(&error)))),
        Err(panic) => Ok(fatal(format!("the storage layer failed while reading the file ({panic})"))),
    }
}

/// Whether an error comes from the file system refusing access (permissions, locks, a full
/// disk) rather than from what the file contains.
fn is_access_failure(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return !matches!(io.kind(), std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof);
        }
        current = error.source();
    }
    false
}

fn describe(file: &Path, outcome: &Outcome) -> String {
    let mut pairs = vec![("store", file.display().to_string())];
    if let Some(report) = &outcome.report {
        let storage = if report.storage_ok {
            "ok".to_string()
        } else {
            "DAMAGED: redb's integrity check failed (redb repaired what it could)".to_string()
        };
        pairs.push(("storage", storage));
        pairs.push(("records checked", output::count(report.records)));
        pairs.push(("index entries checked", output::count(report.index_entries)));
        pairs.push(("audit events checked", output::count(report.audit_events)));
    }
    pairs.push(("problems", output::count(outcome.problem_count() as u64)));
    let mut text = output::fields(&pairs);
    if let Some(fatal) = &outcome.fatal {
        text.push_str(&format!("  - {fatal}\n"));
    }
    if let Some(report) = &outcome.report {
        for problem in &report.problems {
            text.push_str(&format!("  - {}: {}\n", problem.table, problem.detail));
        }
    }
    text.push_str(if outcome.ok() { "verify: OK\n" } else { "verify: PROBLEMS FOUND\n" });
    text
}

/// The journal file beside a store file (`<file>-journal`).
fn journal_of(file: &std::path::Path) -> std::path::PathBuf {
    let mut name = file.as_os_str().to_os_string();
    name.push("-journal");
    std::path::PathBuf::from(name)
}
