//! What a failed backup says (a leaf of `backup`: its parts use it, it uses none of them).

use std::path::{Path, PathBuf};

use crate::rebuild::RebuildError;
use crate::{Error, OpenError, Problem, VerifyReport};

/// A backup failed. The store is unchanged, nothing is left at the destination (an existing
/// file there is untouched) and the temporary copy is removed, whatever the variant.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackupError {
    /// The destination exists; [`BackupOptions::overwrite`](crate::BackupOptions::overwrite) replaces it.
    #[error("{0} exists already; a backup writes a new file unless asked to overwrite")]
    DestinationExists(PathBuf),
    /// The destination is a store that is open (in this process or another, in any runtime):
    /// the lock of `locked` is held. Nothing was written; the store is untouched.
    #[error(
        "{path} is a store that is open ({} is locked): a backup never replaces a store in use; close it first, or \
         back up to another file",
        .locked.display()
    )]
    DestinationOpen {
        /// The destination as given.
        path: PathBuf,
        /// The file whose lock is held: the holder lock, the store file or its journal.
        locked: PathBuf,
        /// What the holder lock says of its holder, when another runtime holds it.
        #[source]
        source: Option<Box<OpenError>>,
    },
    /// The destination is a store whose journal may hold commits its file does not (it was not
    /// closed cleanly): replacing the file would lose them. Nothing was written. Open the
    /// store for writing once (`Store::open`, `idemdb recover`), which applies them, then
    /// back up onto it.
    #[error(
        "{path} is a store whose journal {} may hold commits its file does not ({reason}): replacing it would lose \
         them; open it for writing once (Store::open, idemdb recover) to apply them, then back up onto it",
        .journal.display()
    )]
    DestinationPending {
        /// The destination as given.
        path: PathBuf,
        /// Its journal (where its metadata says it was last opened, else beside it).
        journal: PathBuf,
        /// Why its records may be pending.
        reason: &'static str,
    },
    /// The destination's file system has less free space than the backup needs: the store
    /// file's size and a margin (16 MiB, or a tenth of the store file when that is more). A
    /// backup that fills the disk the store is on would make the store's writers fail.
    #[error(
        "{path}: {available} bytes free on its file system, and a backup of this store needs {needed} (the store \
         file's size and a margin); free space there, or back up to another file system"
    )]
    InsufficientSpace {
        /// The directory the backup would be written in.
        path: PathBuf,
        /// Bytes free there (for an unprivileged process).
        available: u64,
        /// Bytes the backup needs.
        needed: u64,
    },
    /// The destination is the store itself, or its journal.
    #[error("{dest} is the store's own {what}: a backup goes to another file")]
    SameFile {
        /// The destination as given.
        dest: PathBuf,
        /// `file` or `journal`.
        what: &'static str,
    },
    /// The directory the destination would go in does not exist (or is not a directory).
    #[error("{0}: no such directory for the backup (it is not created)")]
    NoDirectory(PathBuf),
    /// The destination is not a regular file (a directory, a FIFO, a path without a name).
    #[error("{path} is {kind}, not a file a backup can be written to")]
    NotAFile {
        /// The destination.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// The store holds tables that are neither the store's nor named for the backup.
    #[error(
        "the store holds tables the backup was not told how to copy ({}); name them with \
         BackupOptions::table, or leave them out explicitly",
        .0.join(", ")
    )]
    UnknownTables(Vec<String>),
    /// The file system is full (or the quota is used up).
    #[error("no space left for the backup at {path}: {source}")]
    NoSpace {
        /// The temporary file being written.
        path: PathBuf,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The copy did not verify: it was removed.
    #[error("the backup did not verify: {}", describe(.0))]
    Unverified(Box<VerifyReport>),
    /// The copy verified but does not hold what the snapshot held: it was removed.
    #[error("the backup holds {copy} {what}, the snapshot {snapshot}")]
    Mismatch {
        /// `records` or `index entries`.
        what: &'static str,
        /// In the snapshot.
        snapshot: u64,
        /// In the copy.
        copy: u64,
    },
    /// A file system call failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was attempted.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The copy could not be opened for its check.
    #[error("the backup could not be opened for its check: {0}")]
    Open(#[source] OpenError),
    /// Reading the store or writing the copy failed.
    #[error(transparent)]
    Store(#[from] Error),
}

impl BackupError {
    /// The stable code of this error (see [`ErrorCode`](idemdb_core::ErrorCode)).
    pub fn code(&self) -> idemdb_core::ErrorCode {
        use idemdb_core::ErrorCode;
        match self {
            BackupError::DestinationOpen { .. } => ErrorCode::StoreBusy,
            BackupError::DestinationPending { .. } => ErrorCode::NotAStore,
            BackupError::InsufficientSpace { .. } => ErrorCode::Storage,
            BackupError::DestinationExists(_)
            | BackupError::SameFile { .. }
            | BackupError::NoDirectory(_)
            | BackupError::NotAFile { .. }
            | BackupError::UnknownTables(_) => ErrorCode::InvalidArgument,
            BackupError::NoSpace { .. } | BackupError::Io { .. } => ErrorCode::Storage,
            BackupError::Unverified(_) | BackupError::Mismatch { .. } => ErrorCode::Corrupt,
            BackupError::Open(open) => open.code(),
            BackupError::Store(store) => store.code(),
        }
    }
}

idemdb_core::coded!(BackupError);

impl From<RebuildError> for BackupError {
    fn from(error: RebuildError) -> Self {
        match error {
            RebuildError::Io { action, path, source } => BackupError::Io { action, path, source },
            RebuildError::DestinationExists(path) => BackupError::DestinationExists(path),
            RebuildError::UnknownTables(tables) => BackupError::UnknownTables(tables),
            RebuildError::Open(open) => BackupError::Open(open),
            RebuildError::Store(store) => BackupError::Store(store),
        }
    }
}

/// The I/O failure `action` on `path`, as a backup reports it.
pub(super) fn io<'p>(action: &'static str, path: &'p Path) -> impl FnOnce(std::io::Error) -> BackupError + 'p {
    move |source| BackupError::Io { action, path: path.to_path_buf(), source }
}

fn describe(report: &VerifyReport) -> String {
    let mut parts: Vec<String> = Vec::new();
    if !report.storage_ok {
        parts.push("redb's integrity check failed".into());
    }
    parts.extend(report.problems.iter().map(|Problem { table, detail }| format!("{table}: {detail}")));
    parts.join("; ")
}
