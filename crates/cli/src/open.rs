//! Opening store files for the operator commands, and where the demo keeps its store.

use std::path::{Path, PathBuf};

use idemdb::{OpenError, Store, StoreBuilder};

use crate::error::{CliError, guard, set_current_file};

/// Checks that `file` is an existing regular file before the store opens it (opening would
/// otherwise create a new store, or initialise an empty file as one).
///
/// # Errors
/// Exit 3 for a missing path, a directory, a FIFO or another file that is not a regular file,
/// or an empty file.
pub(crate) fn check_existing(file: &Path) -> Result<(), CliError> {
    set_current_file(file);
    match std::fs::metadata(file) {
        Err(error) => Err(CliError::open(file, &error)),
        Ok(meta) if meta.is_dir() => Err(CliError::open_msg(file, "is a directory, not a store file")),
        Ok(meta) if !meta.is_file() => Err(not_a_file(file, &meta)),
        Ok(meta) if meta.len() == 0 => Err(CliError::open_msg(file, "the file is empty: not an idemdb store")),
        Ok(_) => Ok(()),
    }
}

/// "is a FIFO, not a regular file" (exit 3).
pub(crate) fn not_a_file(file: &Path, meta: &std::fs::Metadata) -> CliError {
    match OpenError::not_a_regular_file(file, meta) {
        Some(OpenError::NotAFile { kind, .. }) => CliError::open_msg(file, format!("is {kind}, not a regular file")),
        _ => CliError::open_msg(file, "is not a regular file"),
    }
}

/// Opens an existing store file for writing (`purge`, `compact`).
///
/// # Errors
/// Exit 3 when the file is missing, empty, not a store, of a newer format or open elsewhere.
pub(crate) fn open_existing(file: &Path) -> Result<Store, CliError> {
    open_existing_with(file, Store::builder())
}

/// [`open_existing`] with a builder of the caller's.
pub(crate) fn open_existing_with(file: &Path, builder: StoreBuilder) -> Result<Store, CliError> {
    check_existing(file)?;
    set_current_file(file);
    opened(file, guard(|| builder.open(file)))
}

/// Opens an existing store file read-only (`stats`, `get`, `list`, `export`,
/// `purge --dry-run`): not a byte of the file changes, and a read-only file works. A file that
/// was not closed cleanly (a crash) needs redb's recovery, or holds commits only in its journal
/// (`<file>-journal`); both write: it is opened for writing instead, once, which recovers it
/// and replays the journal.
///
/// # Errors
/// As [`open_existing`]; for a file that needs recovery and cannot be written, exit 3.
pub(crate) fn open_read_only(file: &Path) -> Result<Store, CliError> {
    open_read_only_with(file, Store::builder)
}

/// [`open_read_only`] with builders of the caller's.
pub(crate) fn open_read_only_with(file: &Path, builder: impl Fn() -> StoreBuilder) -> Result<Store, CliError> {
    check_existing(file)?;
    match guard(|| builder().open_read_only(file)) {
        // A crash left redb's recovery or journal records to apply: both write.
        Ok(Err(why @ (OpenError::NeedsRecovery | OpenError::JournalPending { .. }))) => {
            // The documented fallback writes: say so, and why, before doing it.
            let reason = match why {
                OpenError::JournalPending { path } => {
                    format!("its journal {} holds commits the file does not yet have", path.display())
                }
                _ => "it was not closed cleanly and needs redb's crash recovery".to_string(),
            };
            eprintln!(
                "idemdb: {}: {reason}; opening it for writing once to recover it (this writes to the store file)",
                file.display()
            );
            match guard(|| builder().open(file)) {
                Ok(Err(error)) => Err(CliError::open_msg(
                    file,
                    format!(
                        "the store was not closed cleanly and needs recovery, which writes, but it could not be opened for writing: {}",
                        crate::error::cause_chain(&error)
                    ),
                )),
                other => opened(file, other),
            }
        }
        other => opened(file, other),
    }
}

fn opened(file: &Path, result: Result<Result<Store, OpenError>, String>) -> Result<Store, CliError> {
    match result {
        Ok(Ok(store)) => Ok(store),
        // The path that is not a regular file may be the store's journal: name that path.
        Ok(Err(OpenError::NotAFile { path, kind }))
            if path != file && std::fs::canonicalize(file).ok().as_ref() != Some(&path) =>
        {
            Err(CliError::open_msg(
                file,
                format!("its journal {} is {kind}, not a regular file; nothing was changed", path.display()),
            ))
        }
        Ok(Err(OpenError::NotAFile { kind, .. })) => {
            Err(CliError::open_msg(file, format!("is {kind}, not a regular file")))
        }
        Ok(Err(error)) => Err(CliError::open(file, &error)),
        Err(panic) => Err(CliError::open_msg(
            file,
            format!("the file is damaged: the storage layer failed while opening it ({panic}); see `idemdb verify`"),
        )),
    }
}

/// Opens (or creates) a store file, with the library's error.
pub(crate) fn open_raw(file: &Path) -> Result<Store, OpenError> {
    set_current_file(file);
    Store::builder().open(file)
}

/// The demo's directory: `$XDG_DATA_HOME/idemdb`, else `~/.local/share/idemdb`, else
/// `./idemdb-data`.
pub(crate) fn default_data_dir() -> PathBuf {
    let non_empty = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty()).map(PathBuf::from);
    if let Some(data) = non_empty("XDG_DATA_HOME") {
        return data.join("idemdb");
    }
    if let Some(home) = non_empty("HOME").or_else(|| non_empty("USERPROFILE")) {
        return home.join(".local").join("share").join("idemdb");
    }
    PathBuf::from("idemdb-data")
}
