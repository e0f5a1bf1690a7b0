//! The journal as the store uses it: the tables a record may change, applying a mutation to
//! them (the same code writes a transaction and replays a record), the journaled commit, the
//! checkpoint rule and recovery at open.
//!
//! A journaled commit appends the batch's mutations to the journal (one write, one
//! `fdatasync`) and only then commits redb with `Durability::None`: a commit is visible to
//! readers only once it is durable, and a crash at any point leaves either the record (replayed
//! at the next open) or nothing. A checkpoint is an `Immediate` redb commit that also writes
//! the last journal sequence number it covers into the metadata table (`journal_checkpoint`);
//! the journal then starts over at its first block. Every write to the store's tables that is
//! not journaled (a transaction that handed the application [`Txn::tables`](crate::Txn::tables),
//! purge, the workflow tables, intents) is made by such a checkpoint commit, so the durable
//! file plus the records after its checkpoint is always exactly the last acknowledged state.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use redb::{Database, ReadableDatabase, StorageBackend, WriteTransaction};

use super::{Journal, JournalError, Mutation};
use crate::tables::{AUDIT, EXPIRY, META, META_JOURNAL_CHECKPOINT, META_SECRET, RECONCILE, RECORDS};
use crate::{Error, OpenError};

/// Table ids in journal records.
pub(crate) const T_META: u8 = 1;
pub(crate) const T_RECORDS: u8 = 2;
pub(crate) const T_EXPIRY: u8 = 3;
pub(crate) const T_AUDIT: u8 = 4;
pub(crate) const T_RECONCILE: u8 = 5;

/// Checkpoint after this many journal records...
pub const CHECKPOINT_RECORDS: u64 = 1024;
/// ...or this many journal bytes (and always before the journal is full)...
pub const CHECKPOINT_BYTES: u64 = 4 * 1024 * 1024;
/// ...or at the first commit this long (store time) after the last checkpoint.
pub const CHECKPOINT_MS: u64 = 10_000;

/// A journal file behind a trait object.
pub(crate) struct JournalFile(pub(crate) Box<dyn StorageBackend>);

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

/// What the open hands the engine: the journal file and whether commits use it afterwards.
pub(crate) struct JournalSetup {
    pub(crate) file: JournalFile,
    pub(crate) capacity: u64,
    pub(crate) path: Option<PathBuf>,
    /// Whether commits are journaled after recovery (off: the journal is replayed, emptied and
    /// left alone).
    pub(crate) active: bool,
}

/// What a store's journal has done since the store was opened
/// ([`Store::journal_stats`](crate::Store::journal_stats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JournalStats {
    /// Journal records appended: one write and one `fdatasync` each, one per group commit.
    pub appends: u64,
    /// Checkpoints: durable redb commits (every transaction that wrote the application's
    /// tables or the workflow tables is one, as are the periodic ones).
    pub checkpoints: u64,
}

/// Counters for benchmarks and tests.
#[derive(Debug, Default)]
pub(crate) struct WalCounters {
    pub(crate) appends: AtomicU64,
    pub(crate) checkpoints: AtomicU64,
}

/// The journal of an open store.
pub(crate) struct Wal {
    state: Mutex<WalState>,
    /// Set when a journal write or the commit after it failed: the handle writes no more.
    failed: AtomicBool,
    pub(crate) counters: WalCounters,
}

struct WalState {
    journal: Journal<JournalFile>,
    /// Store time of the last checkpoint.
    checkpoint_at: u64,
}

fn io(error: std::io::Error) -> Error {
    Error::from(redb::Error::Io(error))
}

impl Wal {
    fn lock(&self) -> MutexGuard<'_, WalState> {
        // Held only around one append or one commit; a panic there leaves the journal's
        // position as it was (it moves only after a successful write).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    fn fail(&self) {
        self.failed.store(true, Ordering::SeqCst);
    }

    pub(crate) fn stats(&self) -> JournalStats {
        JournalStats {
            appends: self.counters.appends.load(Ordering::Relaxed),
            checkpoints: self.counters.checkpoints.load(Ordering::Relaxed),
        }
    }

    /// Whether records were appended since the last checkpoint.
    pub(crate) fn has_records(&self) -> bool {
        self.lock().journal.used() > 0
    }

    /// Commits `tx`. With `log` (the transaction's mutations, nothing else written), appends
    /// them to the journal and commits redb without a flush; without it, or when a checkpoint
    /// is due, commits durably as a checkpoint.
    ///
    /// # Errors
    /// [`Error::JournalFailed`] after an earlier failure; [`Error::CommitUnknown`] when the
    /// journal write or the commit after it failed (the handle then refuses further writes);
    /// the redb commit error of a failed checkpoint.
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
        let due = state.journal.last_seq() - state.journal.checkpointed() >= CHECKPOINT_RECORDS
            || state.journal.used() >= CHECKPOINT_BYTES.min(state.journal.capacity() / 2)
            || now.saturating_sub(state.checkpoint_at) >= CHECKPOINT_MS;
        if due {
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

    /// A durable commit of `tx` that records the journal's last sequence number as applied,
    /// then starts the journal over. For every `Immediate` commit the engine makes while a
    /// journal is open.
    pub(crate) fn checkpoint(&self, tx: WriteTransaction, now: u64) -> Result<(), CommitFailure> {
        let mut state = self.lock();
        if self.failed() {
            return Err(CommitFailure::Refused);
        }
        self.checkpoint_locked(&mut state, tx, now)
    }

    fn checkpoint_locked(&self, state: &mut WalState, mut tx: WriteTransaction, now: u64) -> Result<(), CommitFailure> {
        let last = state.journal.last_seq();
        let prepared = (|| -> Result<(), Error> {
            tx.open_table(META)?.insert(META_JOURNAL_CHECKPOINT, last.to_be_bytes().as_slice())?;
            tx.set_durability(redb::Durability::Immediate)?;
            Ok(())
        })();
        if let Err(error) = prepared {
            return Err(CommitFailure::Commit(error));
        }
        match tx.commit() {
            Ok(()) => {
                state.journal.restart(last);
                state.checkpoint_at = now;
                self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(error) => {
                // redb refuses every later commit after a failed flush; so does the journal.
                self.fail();
                Err(CommitFailure::Commit(error.into()))
            }
        }
    }

    /// After a clean checkpoint at close: zeroes the journal's first record block.
    pub(crate) fn clear(&self) -> Result<(), Error> {
        let mut state = self.lock();
        if self.failed() {
            return Err(Error::JournalFailed);
        }
        let last = state.journal.last_seq();
        if state.journal.used() > 0 {
            return Err(Error::Internal("the journal holds records after the closing checkpoint"));
        }
        state.journal.clear(last).map_err(|error| match error {
            JournalError::Io(error) => io(error),
            _ => Error::Internal("journal clear failed"),
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

/// Writes one mutation into its table of `tx`.
pub(crate) fn apply_put(tx: &WriteTransaction, table: u8, key: &[u8], value: &[u8]) -> Result<(), Applied> {
    match table {
        T_META => {
            let key = std::str::from_utf8(key).map_err(|_| Applied::Malformed)?;
            tx.open_table(META)?.insert(key, value)?;
        }
        T_RECORDS => {
            tx.open_table(RECORDS)?.insert(key, value)?;
        }
        T_EXPIRY => {
            if !value.is_empty() {
                return Err(Applied::Malformed);
            }
            tx.open_table(EXPIRY)?.insert(key, ())?;
        }
        T_AUDIT => {
            let key: [u8; 16] = key.try_into().map_err(|_| Applied::Malformed)?;
            tx.open_table(AUDIT)?.insert(key, value)?;
        }
        T_RECONCILE => {
            tx.open_table(RECONCILE)?.insert(key, value)?;
        }
        _ => return Err(Applied::Malformed),
    }
    Ok(())
}

/// Removes one key from its table of `tx`.
pub(crate) fn apply_remove(tx: &WriteTransaction, table: u8, key: &[u8]) -> Result<(), Applied> {
    match table {
        T_META => {
            let key = std::str::from_utf8(key).map_err(|_| Applied::Malformed)?;
            tx.open_table(META)?.remove(key)?;
        }
        T_RECORDS => {
            tx.open_table(RECORDS)?.remove(key)?;
        }
        T_EXPIRY => {
            tx.open_table(EXPIRY)?.remove(key)?;
        }
        T_AUDIT => {
            let key: [u8; 16] = key.try_into().map_err(|_| Applied::Malformed)?;
            tx.open_table(AUDIT)?.remove(key)?;
        }
        T_RECONCILE => {
            tx.open_table(RECONCILE)?.remove(key)?;
        }
        _ => return Err(Applied::Malformed),
    }
    Ok(())
}

/// A mutation could not be applied.
pub(crate) enum Applied {
    Storage(Error),
    /// It names no table of the store, or a key of the wrong shape.
    Malformed,
}

macro_rules! applied_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Applied {
            fn from(error: $t) -> Self {
                Applied::Storage(error.into())
            }
        }
    )*};
}
applied_from!(redb::TableError, redb::StorageError);

impl From<Applied> for Error {
    fn from(applied: Applied) -> Self {
        match applied {
            Applied::Storage(error) => error,
            Applied::Malformed => Error::Internal("a journal mutation names no table of the store"),
        }
    }
}

/// The journal's id of the store with `secret` (its records are never applied to another).
pub(crate) fn store_id(secret: &[u8]) -> [u8; 16] {
    let key = blake3::derive_key("idemdb 2026-12-01 journal store id", secret);
    let mut id = [0u8; 16];
    id.copy_from_slice(&key[..16]);
    id
}

/// Reads the store's secret and journal checkpoint.
fn journal_meta(db: &Database) -> Result<(Vec<u8>, Option<u64>), OpenError> {
    let read = db.begin_read()?;
    let meta = read.open_table(META)?;
    let secret = meta
        .get(META_SECRET)?
        .map(|guard| guard.value().to_vec())
        .ok_or_else(|| OpenError::CorruptMeta("audit secret missing".into()))?;
    let checkpoint = match meta.get(META_JOURNAL_CHECKPOINT)? {
        None => None,
        Some(guard) => Some(
            <[u8; 8]>::try_from(guard.value())
                .map(u64::from_be_bytes)
                .map_err(|_| OpenError::CorruptMeta("journal checkpoint malformed".into()))?,
        ),
    };
    Ok((secret, checkpoint))
}

/// Recovery at open: replays the records after the store's checkpoint, in order, and
/// checkpoints them in one durable commit. A store that never had a journal (no checkpoint
/// entry) starts a new one, whatever the file holds, and records checkpoint 0 durably before
/// any record can be appended.
pub(crate) fn recover(db: &Database, setup: JournalSetup, now: u64) -> Result<Option<Wal>, OpenError> {
    let JournalSetup { file, capacity, path, active } = setup;
    let refused = |reason: String| OpenError::Journal { path: path.clone().unwrap_or_default(), reason };
    let open_error = |error: JournalError| match error {
        JournalError::Io(error) => OpenError::Storage(redb::StorageError::Io(error).into()),
        other => refused(other.to_string()),
    };
    let (secret, checkpoint) = journal_meta(db)?;
    let id = store_id(&secret);
    let (mut journal, batches, checkpoint) = match checkpoint {
        None => (Journal::create(file, &id, 0, capacity).map_err(open_error)?, Vec::new(), None),
        Some(at) => {
            let (journal, batches) = Journal::open(file, &id, at, capacity).map_err(open_error)?;
            (journal, batches, Some(at))
        }
    };
    let applied = checkpoint.unwrap_or(0) + batches.len() as u64;
    if checkpoint.is_none() || !batches.is_empty() {
        let mut tx = db.begin_write()?;
        tx.set_durability(redb::Durability::Immediate)?;
        for (at, batch) in batches.iter().enumerate() {
            for mutation in batch {
                let result = match mutation {
                    Mutation::Put { table, key, value } => apply_put(&tx, *table, key, value),
                    Mutation::Remove { table, key } => apply_remove(&tx, *table, key),
                };
                match result {
                    Ok(()) => {}
                    Err(Applied::Storage(error)) => return Err(storage(error)),
                    Err(Applied::Malformed) => {
                        let seq = checkpoint.unwrap_or(0) + at as u64 + 1;
                        return Err(refused(format!("record {seq} names no table of the store")));
                    }
                }
            }
        }
        tx.open_table(META)?.insert(META_JOURNAL_CHECKPOINT, applied.to_be_bytes().as_slice())?;
        tx.commit()?;
    }
    journal.restart(applied);
    if !active {
        // Applied and checkpointed: leave nothing in the file that a later open could take for
        // a record.
        journal.clear(applied).map_err(open_error)?;
        return Ok(None);
    }
    Ok(Some(Wal {
        state: Mutex::new(WalState { journal, checkpoint_at: now }),
        failed: AtomicBool::new(false),
        counters: WalCounters::default(),
    }))
}

fn storage(error: Error) -> OpenError {
    match error {
        Error::Storage(storage) | Error::CommitUnknown(storage) => OpenError::Storage(storage),
        other => OpenError::CorruptMeta(other.to_string()),
    }
}

/// Whether the journal `file` holds records the store `db` has not applied (for read-only
/// opens, which cannot replay them). Reads only.
pub(crate) fn has_pending(
    read: &redb::ReadTransaction,
    file: &impl StorageBackend,
    path: &std::path::Path,
) -> Result<bool, OpenError> {
    let meta = read.open_table(META)?;
    let Some(checkpoint) = meta.get(META_JOURNAL_CHECKPOINT)? else { return Ok(false) };
    let checkpoint = <[u8; 8]>::try_from(checkpoint.value())
        .map(u64::from_be_bytes)
        .map_err(|_| OpenError::CorruptMeta("journal checkpoint malformed".into()))?;
    let secret = meta
        .get(META_SECRET)?
        .map(|guard| guard.value().to_vec())
        .ok_or_else(|| OpenError::CorruptMeta("audit secret missing".into()))?;
    Journal::has_pending(file, &store_id(&secret), checkpoint).map_err(|error| match error {
        JournalError::Io(error) => OpenError::Io { action: "read", path: path.to_path_buf(), source: error },
        other => OpenError::Journal { path: path.to_path_buf(), reason: other.to_string() },
    })
}
