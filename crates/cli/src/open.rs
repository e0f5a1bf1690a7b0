//! Opening store files for the operator commands, and where the demo keeps its store.

use std::path::{Path, PathBuf};

use idemdb::{OpenError, Store};

use crate::error::{CliError, guard, set_current_file};

/// Checks that `file` is an existing regular file before the store opens it (opening would
/// otherwise create a new store, or initialise an empty file as one).
///
/// # Errors
/// Exit 3 for a missing path, a directory, or an empty file.
pub(crate) fn check_existing(file: &Path) -> Result<(), CliError> {
    set_current_file(file);
    match std::fs::metadata(file) {
        Err(error) => Err(CliError::open(file, &error)),
        Ok(meta) if meta.is_dir() => Err(CliError::open_msg(file, "is a directory, not a store file")),
        Ok(meta) if meta.len() == 0 => Err(CliError::open_msg(file, "the file is empty: not an idemdb store")),
        Ok(_) => Ok(()),
    }
}

/// Opens an existing store file.
///
/// # Errors
/// Exit 3 when the file is missing, empty, not a store, of a newer format or open elsewhere.
pub(crate) fn open_existing(file: &Path) -> Result<Store, CliError> {
    check_existing(file)?;
    match guard(|| open_raw(file)) {
        Ok(opened) => opened.map_err(|error| CliError::open(file, &error)),
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
