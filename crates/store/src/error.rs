//! Errors: [`OpenError`] for opening a store, [`Error`] for operations on an open one, both
//! wrapping [`StorageError`] for failures of the storage below.

use std::path::PathBuf;

use idemdb_core::{Corrupt, ErrorCode, PolicyError, Refusal};

/// The storage engine (redb) or its backend failed.
///
/// Cheap to clone: every caller whose request shared a failed group commit gets the same error.
#[derive(Debug, Clone, thiserror::Error)]
#[error("storage error: {source}")]
pub struct StorageError {
    #[source]
    source: std::sync::Arc<redb::Error>,
}

impl StorageError {
    /// The stable code: [`ErrorCode::StoreBusy`] when the database is open elsewhere,
    /// [`ErrorCode::Corrupt`] for damage redb detected, [`ErrorCode::Storage`] otherwise.
    pub fn code(&self) -> ErrorCode {
        match &*self.source {
            redb::Error::DatabaseAlreadyOpen => ErrorCode::StoreBusy,
            redb::Error::Corrupted(_) => ErrorCode::Corrupt,
            _ => ErrorCode::Storage,
        }
    }

    /// Whether the store must be closed and opened again before further use: after an I/O
    /// error redb refuses every operation on this handle, and a reopen runs its recovery.
    pub fn reopen_required(&self) -> bool {
        matches!(*self.source, redb::Error::Io(_) | redb::Error::PreviousIo | redb::Error::DatabaseClosed)
    }
}

macro_rules! storage_from {
    ($($t:ty),*) => {$(
        impl From<$t> for StorageError {
            fn from(error: $t) -> Self {
                StorageError { source: std::sync::Arc::new(error.into()) }
            }
        }
        impl From<$t> for Error {
            fn from(error: $t) -> Self {
                Error::Storage(error.into())
            }
        }
    )*};
}
storage_from!(
    redb::Error,
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError,
    redb::DatabaseError,
    redb::SetDurabilityError,
    redb::CompactionError
);

/// An operation on an open store failed. Nothing stored was changed unless the variant says
/// otherwise.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The storage failed; check [`StorageError::reopen_required`].
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The commit returned an error and the store could not read back whether it took effect.
    /// Reopen the store and repeat the call: every call is idempotent, so the repeat tells
    /// what was stored.
    #[error("commit outcome unknown, reopen the store and retry: {0}")]
    CommitUnknown(#[source] StorageError),
    /// A stored value did not decode (the core's [`Corrupt`], as on every backend).
    #[error(transparent)]
    Corrupt(#[from] Corrupt),
    /// The rules refused the operation (no record, a stale fence, a wrong state, an invalid
    /// key, an outbox, inbox or job rule, a row over the limits): the same [`Refusal`], with the
    /// same code, as on every backend. Nothing was changed.
    #[error(transparent)]
    Refused(Refusal),
    /// A new key could not be generated: the platform has no randomness the store can read.
    #[error("no random source available on this platform")]
    NoRandomness,
    /// The call needs the only handle of the store (redb's integrity check and compaction
    /// take the database exclusively), and clones of this handle are alive.
    #[error("cannot {action} while other handles of the store are open; drop its clones first")]
    OtherHandles {
        /// What was attempted.
        action: &'static str,
    },
    /// An invariant of the engine did not hold (a bug, or a panic in another caller's
    /// operation that shared this call's group commit). Nothing of this call was committed.
    #[error("internal error: {0}")]
    Internal(&'static str),
    /// The store was opened read-only ([`StoreBuilder::open_read_only`](crate::StoreBuilder::open_read_only)).
    #[error("the store was opened read-only")]
    ReadOnly,
    /// A journal write or the commit after it failed on this handle earlier: whether that
    /// commit is durable is unknown, so the handle refuses every later write. Drop every
    /// handle and open the store again (the open replays what the journal holds).
    #[error("an earlier journal write failed on this handle; reopen the store")]
    JournalFailed,
    /// [`Txn::table`](crate::Txn::table) was given an application table the store was not
    /// told about ([`StoreBuilder::journaled_table`](crate::StoreBuilder::journaled_table)),
    /// or a journal record names one: the store could not replay its writes after a crash.
    #[error("application table {name:?} is not registered with the store (StoreBuilder::journaled_table)")]
    UnregisteredTable {
        /// The table's name.
        name: String,
    },
}

idemdb_core::refused_from!(Error, Error::Refused);

impl Error {
    /// The stable code of this error (see [`ErrorCode`]).
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Storage(storage) => storage.code(),
            Error::CommitUnknown(_) => ErrorCode::CommitUnknown,
            Error::Corrupt(corrupt) => corrupt.code(),
            Error::Refused(refusal) => refusal.code(),
            Error::NoRandomness => ErrorCode::NoRandomness,
            Error::OtherHandles { .. } => ErrorCode::StoreBusy,
            Error::Internal(_) => ErrorCode::Internal,
            Error::ReadOnly => ErrorCode::ReadOnly,
            Error::JournalFailed => ErrorCode::Storage,
            Error::UnregisteredTable { .. } => ErrorCode::InvalidArgument,
        }
    }

    /// The rules' refusal, when the error is one ([`Error::Refused`]).
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            Error::Refused(refusal) => Some(refusal),
            _ => None,
        }
    }

    /// Whether the store must be reopened before further use.
    pub fn reopen_required(&self) -> bool {
        match self {
            Error::Storage(storage) => storage.reopen_required(),
            Error::CommitUnknown(_) | Error::JournalFailed => true,
            _ => false,
        }
    }
}

/// A store could not be opened or created.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
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
    /// The store is already open (in this process or another).
    #[error("store is already open by another handle or process")]
    AlreadyOpen,
    /// Another runtime's process holds the store file through its holder lock (`<store>.lock`,
    /// which every runtime takes: native opens and the npm package's Node file store, see
    /// `docs/design.md`, "Locking"). Nothing was read or changed. Retry once that process has
    /// closed the store; a lock whose process is gone is taken over by the next open.
    #[error(
        "{store} is held by process {pid} ({runtime} runtime) through the lock file {lock}; one process at a time: \
         retry once it has closed the store"
    )]
    HeldElsewhere {
        /// The store file, as given to the open.
        store: PathBuf,
        /// The lock file.
        lock: PathBuf,
        /// The holder's process id (0 when the lock file does not name one yet).
        pid: u32,
        /// The holder's runtime as its lock file says (`node`, `unknown` for a file that names
        /// only a pid).
        runtime: String,
    },
    /// The path names something other than a regular file (a directory, a FIFO, a socket, a
    /// device): it is neither opened nor replaced.
    #[error("{path} is {kind}, not a regular file")]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What it is (`a directory`, `a FIFO`, ...).
        kind: &'static str,
    },
    /// The file was replaced by another every time it was opened (another process keeps
    /// replacing it); nothing was written.
    #[error("{path} was replaced while it was being opened, {attempts} times; try again")]
    Replaced {
        /// The path.
        path: PathBuf,
        /// How many opens found the file replaced.
        attempts: u32,
    },
    /// A read-only open found a file that was not closed cleanly: reading it needs redb's
    /// recovery, which writes. Open it for writing once ([`StoreBuilder::open`](crate::StoreBuilder::open)).
    #[error("the store was not closed cleanly and needs recovery, which a read-only open cannot run")]
    NeedsRecovery,
    /// A read-only open found commits in the store's journal that the store file does not hold
    /// yet (the store was not closed cleanly), or an open without a journal (a backend: the
    /// WebAssembly bindings, the npm package's Node file store) found a store whose journal may
    /// hold commits. Open it for writing once with the native engine (`Store::open`, `idemdb
    /// recover`): the open replays the journal into the file.
    #[error(
        "the journal {path} holds commits not yet in the store; open it for writing once with the native engine \
         (idemdb recover, Store::open) to apply them"
    )]
    JournalPending {
        /// The journal file.
        path: PathBuf,
    },
    /// The journal file beside the store is not this store's journal, or one of its complete
    /// records does not parse; nothing was applied.
    #[error("journal {path}: {reason}")]
    Journal {
        /// The journal file (empty for a journal on a backend).
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The store's metadata says its journal may hold acknowledged commits that the file
    /// does not, and there is no journal where it should be (deleted, moved, a dangling
    /// symlink). Nothing was changed. Put the store's journal back at `journal` (or at
    /// `recorded`, where it was last opened); if it is truly lost, open with
    /// [`StoreBuilder::discard_lost_journal`](crate::StoreBuilder::discard_lost_journal)
    /// (`idemdb recover --discard-journal`) to accept the loss of those commits.
    #[error(
        "the journal of {store} may hold acknowledged commits the store file does not, but {journal} {reason}{}; \
         put the journal back, or open with discard_lost_journal (idemdb recover --discard-journal) to accept their loss",
        recorded.as_ref().map(|path| format!(" (it was last opened at {})", path.display())).unwrap_or_default()
    )]
    JournalMissing {
        /// The store file (resolved).
        store: PathBuf,
        /// Where the journal was looked for.
        journal: PathBuf,
        /// Where the store last opened its journal, when that is elsewhere.
        recorded: Option<PathBuf>,
        /// What was found (`does not exist`, ...).
        reason: String,
    },
    /// The journal of a store whose records may be pending is damaged where it must be read:
    /// a blank, short or unreadable header, a complete record that does not parse. Nothing was
    /// applied or changed. Restore the journal from a copy, or open with
    /// [`StoreBuilder::discard_lost_journal`](crate::StoreBuilder::discard_lost_journal) to
    /// accept the loss of the commits it held.
    #[error(
        "the journal {journal} of {store} is damaged: {reason}; nothing was applied or changed. Restore it from a \
         copy; only if none exists, open with discard_lost_journal (idemdb recover --discard-journal), which applies \
         the intact records before the damage, gives up the rest and sets the journal file aside"
    )]
    JournalDamaged {
        /// The store file (empty for a store on a backend).
        store: PathBuf,
        /// The journal file (empty for a journal on a backend).
        journal: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The journal holds acknowledged commits that write an application table this open did
    /// not register ([`StoreBuilder::journaled_table`](crate::StoreBuilder::journaled_table)):
    /// replaying them needs the table's key and value types, which only the application knows.
    /// Nothing was applied or changed, and nothing is lost: open the store with the table
    /// registered (start the application that owns it, which replays the journal; a clean close
    /// then leaves nothing for other tools to replay). Never discard this journal: its commits
    /// were acknowledged.
    #[error(
        "the journal {journal} of {store} holds acknowledged commits that write the application table {table:?}, \
         which this open did not register (StoreBuilder::journaled_table); nothing was applied or changed. Open the \
         store once with that table registered (start the application that owns it) to replay them; do not discard \
         the journal"
    )]
    JournalNeedsTable {
        /// The store file (empty for a store on a backend).
        store: PathBuf,
        /// The journal file (empty for a journal on a backend).
        journal: PathBuf,
        /// The application table's name.
        table: String,
    },
    /// The journal found for the store is not its journal: another store's (a copy of this
    /// file that was opened since, or a store sharing its secret), or a later state of this
    /// store than the file holds (the store file was replaced by an older copy of itself).
    /// Nothing was applied or changed: a journal is applied only to the store file it belongs
    /// to.
    #[error("{journal} is not the journal of {store}: {reason}; nothing was applied")]
    JournalForeign {
        /// The store file (empty for a store on a backend).
        store: PathBuf,
        /// The journal file (empty for a journal on a backend).
        journal: PathBuf,
        /// Why not.
        reason: String,
    },
    /// The file is not a redb file, or is damaged beyond what redb's recovery repairs.
    #[error("not an idemdb store (or damaged): {reason}")]
    NotAStore {
        /// What redb reported.
        reason: String,
    },
    /// The file is a redb database that idemdb did not create.
    #[error("the file is a redb database but not an idemdb store (its tables: {tables})")]
    Foreign {
        /// The tables found.
        tables: String,
    },
    /// The store was written by a newer version of idemdb.
    #[error("store format {found} was written by a newer version of idemdb (this build reads format {supported})")]
    NewerFormat {
        /// Format found.
        found: u32,
        /// Format this build reads.
        supported: u32,
    },
    /// The store has an older format that needs an upgrade.
    #[error("store format {found} needs an upgrade to format {supported}")]
    OlderFormat {
        /// Format found.
        found: u32,
        /// Format this build writes.
        supported: u32,
    },
    /// A policy was invalid.
    #[error("invalid policy for operation {operation:?}: {source}")]
    Policy {
        /// The operation (`None` for the default policy).
        operation: Option<String>,
        /// What is wrong.
        #[source]
        source: PolicyError,
    },
    /// This platform has no wall clock or no randomness the store can use; pass them to the
    /// builder ([`StoreBuilder::clock`](crate::StoreBuilder::clock),
    /// [`StoreBuilder::secret_seed`](crate::StoreBuilder::secret_seed)).
    #[error("platform lacks {0}; provide it through the store builder")]
    MissingPlatform(&'static str),
    /// The storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// Stored metadata did not decode.
    #[error("store metadata is corrupt: {0}")]
    CorruptMeta(String),
}

impl OpenError {
    /// The stable code of this error (see [`ErrorCode`]).
    pub fn code(&self) -> ErrorCode {
        match self {
            OpenError::Io { .. } => ErrorCode::Storage,
            OpenError::AlreadyOpen | OpenError::HeldElsewhere { .. } => ErrorCode::StoreBusy,
            OpenError::NotAStore { .. } | OpenError::CorruptMeta(_) => ErrorCode::NotAStore,
            OpenError::Foreign { .. } => ErrorCode::Foreign,
            OpenError::NewerFormat { .. } => ErrorCode::NewerFormat,
            OpenError::OlderFormat { .. } => ErrorCode::OlderFormat,
            OpenError::Policy { .. } => ErrorCode::InvalidPolicy,
            OpenError::MissingPlatform(_) => ErrorCode::Unsupported,
            OpenError::Storage(storage) => storage.code(),
            OpenError::NotAFile { .. } => ErrorCode::InvalidArgument,
            OpenError::NeedsRecovery | OpenError::JournalPending { .. } => ErrorCode::NotAStore,
            OpenError::Journal { .. }
            | OpenError::JournalMissing { .. }
            | OpenError::JournalDamaged { .. }
            | OpenError::JournalForeign { .. } => ErrorCode::Corrupt,
            OpenError::Replaced { .. } => ErrorCode::StoreBusy,
            OpenError::JournalNeedsTable { .. } => ErrorCode::InvalidArgument,
        }
    }

    /// [`OpenError::NotAFile`] for a path whose metadata is not that of a regular file (a
    /// directory, a FIFO, a socket, a device); `None` for a regular file.
    pub fn not_a_regular_file(path: &std::path::Path, meta: &std::fs::Metadata) -> Option<OpenError> {
        let kind = meta.file_type();
        if kind.is_file() {
            return None;
        }
        let kind = if kind.is_dir() { "a directory" } else { special_file_kind(&kind) };
        Some(OpenError::NotAFile { path: path.to_path_buf(), kind })
    }
}

idemdb_core::coded!(Error, OpenError, StorageError);

#[cfg(unix)]
fn special_file_kind(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else {
        "not a file"
    }
}

#[cfg(not(unix))]
fn special_file_kind(_kind: &std::fs::FileType) -> &'static str {
    "not a file"
}

impl From<redb::DatabaseError> for OpenError {
    fn from(error: redb::DatabaseError) -> Self {
        match error {
            redb::DatabaseError::DatabaseAlreadyOpen | redb::DatabaseError::LockProtocolMismatch => {
                OpenError::AlreadyOpen
            }
            redb::DatabaseError::UpgradeRequired(version) => {
                OpenError::NotAStore { reason: format!("redb file format {version} needs a manual upgrade") }
            }
            redb::DatabaseError::Storage(redb::StorageError::Io(io))
                if matches!(io.kind(), std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof) =>
            {
                OpenError::NotAStore { reason: io.to_string() }
            }
            redb::DatabaseError::Storage(redb::StorageError::Corrupted(reason)) => OpenError::NotAStore { reason },
            other => OpenError::Storage(other.into()),
        }
    }
}

macro_rules! open_from_storage {
    ($($t:ty),*) => {$(
        impl From<$t> for OpenError {
            fn from(error: $t) -> Self {
                OpenError::Storage(error.into())
            }
        }
    )*};
}
open_from_storage!(
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError,
    redb::SetDurabilityError
);
