//! The journal as the store's commit path uses it: the journaled commit. The checkpoint rule
//! and the checkpoint commit are in `checkpoint.rs`; opening and recovery in `recovery.rs`;
//! the table ids in `tables.rs`.
//!
//! A journaled commit appends the batch's mutations to the journal (one write, one
//! `fdatasync`) and only then commits redb with `Durability::None`: a commit is visible to
//! readers only once it is durable, and a crash at any point leaves either the record (replayed
//! at the next open) or nothing. A checkpoint is an `Immediate` redb commit that also writes
//! the last journal sequence number it covers and the **next generation** into the metadata
//! table; the journal then starts over at its first block, sealing its records with the new
//! generation, so nothing written before the checkpoint can be taken for a later record. Every
//! write that is not journaled (a transaction that used the escape hatch
//! [`Txn::tables_checkpointing`](crate::Txn::tables_checkpointing), an explicit flush) is made by such a
//! checkpoint commit; every write of the store's own tables, and of the application tables
//! written through [`Txn::table`](crate::Txn::table), is journaled, so the durable file plus the records after its checkpoint is always
//! exactly the last acknowledged state. The last checkpoint of a clean close also clears the
//! metadata's "records may be pending" marker.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use redb::{StorageBackend, WriteTransaction};

use super::{Journal, JournalError, Mutation};
use crate::Error;

/// A journal file behind a trait object (shared: recovery reads it before the commit path
/// keeps it).
#[derive(Clone)]
pub(crate) struct JournalFile(pub(crate) std::sync::Arc<dyn StorageBackend>);

impl std::fmt::Debug for JournalFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JournalFile")
    }
}

impl StorageBackend for JournalFile {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.0.write(offset, data)
    }
}

/// What a store's journal has done since the store was opened
/// ([`Store::journal_stats`](crate::Store::journal_stats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JournalStats {
    /// Journal records appended: one write and one `fdatasync` each, one per group commit.
    pub appends: u64,
    /// Checkpoints: durable redb commits (every transaction that used
    /// [`Txn::tables_checkpointing`](crate::Txn::tables_checkpointing) is one, as are the
    /// periodic ones).
    pub checkpoints: u64,
    /// Journal records the open replayed into the file (commits a crash had left only in the
    /// journal).
    pub recovered: u64,
}

/// Counters for benchmarks and tests.
#[derive(Debug, Default)]
pub(crate) struct JournalCounters {
    pub(crate) appends: AtomicU64,
    pub(crate) checkpoints: AtomicU64,
    pub(crate) recovered: AtomicU64,
}

/// The journal of an open store.
pub(crate) struct OpenJournal {
    state: Mutex<OpenJournalState>,
    /// Set when a journal write or the commit after it failed: the handle writes no more.
    failed: AtomicBool,
    /// Set by the last handle's close: the next checkpoint clears the "records may be pending"
    /// marker, and nothing is appended after it.
    pub(super) closing: AtomicBool,
    pub(crate) counters: JournalCounters,
}

pub(crate) struct OpenJournalState {
    pub(crate) journal: Journal<JournalFile>,
    /// Store time of the last checkpoint.
    pub(crate) checkpoint_at: u64,
}

pub(super) fn io(error: std::io::Error) -> Error {
    Error::from(redb::Error::Io(error))
}

impl OpenJournal {
    pub(crate) fn new(journal: Journal<JournalFile>, now: u64, recovered: u64) -> OpenJournal {
        let counters = JournalCounters::default();
        counters.recovered.store(recovered, Ordering::Relaxed);
        OpenJournal {
            state: Mutex::new(OpenJournalState { journal, checkpoint_at: now }),
            failed: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            counters,
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, OpenJournalState> {
        // Held only around one append or one commit; a panic there leaves the journal's
        // position as it was (it moves only after a successful write).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    pub(super) fn fail(&self) {
        self.failed.store(true, Ordering::SeqCst);
    }

    pub(crate) fn stats(&self) -> JournalStats {
        JournalStats {
            appends: self.counters.appends.load(Ordering::Relaxed),
            checkpoints: self.counters.checkpoints.load(Ordering::Relaxed),
            recovered: self.counters.recovered.load(Ordering::Relaxed),
        }
    }

    /// The last handle is closing: the next checkpoint (the close's flush) records a clean
    /// close, and every later commit is a checkpoint too.
    pub(crate) fn begin_close(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    /// Commits `tx`. With `log` (the transaction's mutations, nothing else written), appends
    /// them to the journal and commits redb without a flush; without it, or when a checkpoint
    /// is due, commits durably as a checkpoint.
    ///
    /// # Errors
    /// [`CommitFailure::Refused`] after an earlier failure; [`CommitFailure::Unknown`] when
    /// the journal write or the commit after it failed (the handle then refuses further
    /// writes); the redb commit error of a failed checkpoint.
    pub(crate) fn commit(&self, tx: WriteTransaction, log: Option<&[Mutation]>, now: u64) -> Result<(), CommitFailure> {
        let mut state = self.lock();
        if self.failed() {
            return Err(CommitFailure::Refused);
        }
        let Some(log) = log else { return self.checkpoint_locked(&mut state, tx, now) };
        if log.is_empty() {
            // Nothing changed: nothing to journal.
            return tx.commit().map_err(|error| CommitFailure::Commit(error.into()));
        }
        if self.checkpoint_due(&state, now) {
            return self.checkpoint_locked(&mut state, tx, now);
        }
        match state.journal.append(log) {
            Ok(_) => {}
            Err(JournalError::Full { .. }) => return self.checkpoint_locked(&mut state, tx, now),
            Err(JournalError::Io(error)) => {
                self.fail();
                drop(tx);
                return Err(CommitFailure::Unknown(io(error)));
            }
            Err(_) => {
                self.fail();
                return Err(CommitFailure::Unknown(Error::Internal("journal append failed")));
            }
        }
        self.counters.appends.fetch_add(1, Ordering::Relaxed);
        tx.commit().map_err(|error| {
            // The record is durable; the commit is not in memory: only a reopen (which replays
            // the record) makes the two agree again.
            self.fail();
            CommitFailure::Unknown(error.into())
        })
    }
}

/// How a journaled commit failed.
#[derive(Debug)]
pub(crate) enum CommitFailure {
    /// An earlier failure stopped this handle: nothing was written.
    Refused,
    /// The redb commit reported an error (read back to learn whether it took effect).
    Commit(Error),
    /// The journal write, or the commit after a successful journal write, failed.
    Unknown(Error),
}

impl CommitFailure {
    /// The error a caller sees when nothing is read back.
    pub(crate) fn into_error(self) -> Error {
        match self {
            CommitFailure::Refused => Error::JournalFailed,
            CommitFailure::Commit(error) => error,
            CommitFailure::Unknown(Error::Storage(storage)) => Error::CommitUnknown(storage),
            CommitFailure::Unknown(other) => other,
        }
    }
}
