//! A write-ahead journal in front of redb: each group commit is made durable by **one write
//! and one `fdatasync`** of a preallocated file, while redb commits without flushing
//! (`Durability::None`) and is checkpointed durably now and then.
//!
//! This module owns the file: creating and preallocating it, appending a batch's record,
//! finding the records a crash left after the last checkpoint, and starting over after a
//! checkpoint. The byte layout is in [`format`]. The file is reached through a redb
//! [`StorageBackend`], so the reliability harness can put a fault-injecting disk under it as it
//! does under the store.
//!
//! The WebAssembly build keeps no journal ([`Engine::wal`](crate::engine::Engine::wal) is
//! `None` there), so the compiler leaves this code out of the `.wasm`; it still compiles there.
#![cfg_attr(target_arch = "wasm32", allow(dead_code))]

pub(crate) mod files;
pub(crate) mod format;
pub(crate) mod meta;
pub(crate) mod wal;

use redb::StorageBackend;

pub(crate) use format::Mutation;
use format::{BLOCK, Header, RECORD_HEADER, Stop};

/// Default journal size: 8 MiB, preallocated (a checkpoint happens when half of it is used).
pub const DEFAULT_JOURNAL_BYTES: u64 = 8 * 1024 * 1024;

/// A journal failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// The storage below failed.
    #[error("journal I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The file is not a journal, or is another store's, or of a format this build does not
    /// read: it is never applied.
    #[error("the journal file {0}")]
    Refused(&'static str),
    /// A complete, checksummed record does not parse (never the result of a crash).
    #[error("journal record {seq} is malformed")]
    Malformed {
        /// Its sequence number.
        seq: u64,
    },
    /// A batch does not fit in the space left before the next checkpoint.
    #[error("journal is full ({needed} bytes needed, {left} left): checkpoint first")]
    Full {
        /// Bytes the record needs.
        needed: u64,
        /// Bytes left.
        left: u64,
    },
}

/// An open journal.
#[derive(Debug)]
pub(crate) struct Journal<B: StorageBackend> {
    backend: B,
    capacity: u64,
    /// Where the next record goes.
    write_at: u64,
    /// Its sequence number.
    next_seq: u64,
    /// The last sequence number the store's checkpoint covers.
    checkpointed: u64,
}

impl<B: StorageBackend> Journal<B> {
    /// Opens the journal on `backend` for the store `store_id`, whose last checkpoint applied
    /// every record up to `checkpointed`. Returns the journal (positioned after the records
    /// found) and the batches a crash left after the checkpoint, in order: the caller applies
    /// them, then checkpoints. An empty or blank backend is initialised (preallocated with
    /// zeros to `capacity` bytes, header written, synced).
    ///
    /// # Errors
    /// [`JournalError::Refused`] for another store's journal or a foreign file;
    /// [`JournalError::Malformed`]; I/O errors.
    pub(crate) fn open(
        backend: B,
        store_id: &[u8; 16],
        checkpointed: u64,
        capacity: u64,
    ) -> Result<(Self, Vec<Vec<Mutation>>), JournalError> {
        let capacity = Self::rounded(capacity);
        let len = backend.len()?;
        let mut head = vec![0u8; BLOCK];
        if len >= BLOCK as u64 {
            backend.read(0, &mut head)?;
        }
        match format::read_header(&head) {
            Header::Journal(id) if id == *store_id => {}
            Header::Journal(_) => return Err(JournalError::Refused("belongs to another store")),
            Header::OtherFormat(_) => return Err(JournalError::Refused("has a format this build does not read")),
            Header::Foreign if len >= BLOCK as u64 => return Err(JournalError::Refused("is not an idemdb journal")),
            Header::Foreign | Header::Blank => {
                Self::initialise(&backend, store_id, capacity)?;
                let journal =
                    Journal { backend, capacity, write_at: BLOCK as u64, next_seq: checkpointed + 1, checkpointed };
                return Ok((journal, Vec::new()));
            }
        }
        let capacity = len.max(BLOCK as u64 * 2);
        let mut journal =
            Journal { backend, capacity, write_at: BLOCK as u64, next_seq: checkpointed + 1, checkpointed };
        let batches = journal.scan()?;
        Ok((journal, batches))
    }

    /// Starts a new journal on `backend` whatever it holds (the store never journaled
    /// anything, so nothing there can be its own): preallocated, header written, synced.
    ///
    /// # Errors
    /// I/O errors.
    pub(crate) fn create(
        backend: B,
        store_id: &[u8; 16],
        checkpointed: u64,
        capacity: u64,
    ) -> Result<Self, JournalError> {
        let capacity = Self::rounded(capacity);
        Self::initialise(&backend, store_id, capacity)?;
        Ok(Journal { backend, capacity, write_at: BLOCK as u64, next_seq: checkpointed + 1, checkpointed })
    }

    /// Whether `backend` holds a record the store with `store_id`, checkpointed at
    /// `checkpointed`, has not applied: reads only (for read-only opens).
    ///
    /// # Errors
    /// [`JournalError::Refused`] for another store's journal; I/O errors.
    pub(crate) fn has_pending(backend: &B, store_id: &[u8; 16], checkpointed: u64) -> Result<bool, JournalError> {
        let len = backend.len()?;
        if len < 2 * BLOCK as u64 {
            return Ok(false);
        }
        let mut head = vec![0u8; BLOCK];
        backend.read(0, &mut head)?;
        match format::read_header(&head) {
            Header::Journal(id) if id == *store_id => {}
            Header::Blank => return Ok(false),
            Header::Journal(_) => return Err(JournalError::Refused("belongs to another store")),
            Header::OtherFormat(_) => return Err(JournalError::Refused("has a format this build does not read")),
            Header::Foreign => return Err(JournalError::Refused("is not an idemdb journal")),
        }
        let mut first = vec![0u8; RECORD_HEADER];
        backend.read(BLOCK as u64, &mut first)?;
        let max_len = usize::try_from(len - BLOCK as u64).unwrap_or(usize::MAX).saturating_sub(RECORD_HEADER);
        let Some((payload, seq)) = format::peek(&first, max_len) else { return Ok(false) };
        if seq != checkpointed + 1 {
            return Ok(false);
        }
        let mut record = vec![0u8; format::blocks_for(payload) * BLOCK];
        backend.read(BLOCK as u64, &mut record)?;
        Ok(format::decode_record(&record, seq).is_ok())
    }

    fn rounded(capacity: u64) -> u64 {
        capacity.max(2 * BLOCK as u64) / BLOCK as u64 * BLOCK as u64
    }

    fn initialise(backend: &B, store_id: &[u8; 16], capacity: u64) -> Result<(), JournalError> {
        // Written zeros, not only a sparse length: a commit must never allocate blocks.
        backend.set_len(0)?;
        backend.set_len(capacity)?;
        let zeros = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < capacity {
            let take = (capacity - at).min(zeros.len() as u64) as usize;
            backend.write(at, &zeros[..take])?;
            at += take as u64;
        }
        backend.write(0, &format::header(store_id))?;
        backend.sync_data()?;
        Ok(())
    }

    /// Reads the records after the checkpoint, in order, stopping at the first that is not
    /// the next one; positions the journal after them.
    fn scan(&mut self) -> Result<Vec<Vec<Mutation>>, JournalError> {
        let mut batches = Vec::new();
        let mut first = vec![0u8; RECORD_HEADER];
        loop {
            let left = self.capacity.saturating_sub(self.write_at);
            if left < BLOCK as u64 {
                break;
            }
            self.backend.read(self.write_at, &mut first)?;
            let max_len = usize::try_from(left).unwrap_or(usize::MAX).saturating_sub(RECORD_HEADER);
            let Some((len, _)) = format::peek(&first, max_len) else { break };
            let mut record = vec![0u8; format::blocks_for(len) * BLOCK];
            self.backend.read(self.write_at, &mut record)?;
            match format::decode_record(&record, self.next_seq) {
                Ok(batch) => {
                    batches.push(batch);
                    self.write_at += record.len() as u64;
                    self.next_seq += 1;
                }
                Err(Stop::NotARecord | Stop::OtherSequence(_)) => break,
                Err(Stop::Malformed) => return Err(JournalError::Malformed { seq: self.next_seq }),
            }
        }
        Ok(batches)
    }

    /// Appends one batch: one write of whole blocks, then one `fdatasync`. Returns its
    /// sequence number. The batch is durable when this returns.
    ///
    /// # Errors
    /// [`JournalError::Full`] (checkpoint, then append again); I/O errors (the journal must
    /// then be reopened: whether the record reached the disk is unknown).
    pub(crate) fn append(&mut self, mutations: &[Mutation]) -> Result<u64, JournalError> {
        let record = format::encode_record(self.next_seq, mutations);
        let left = self.capacity.saturating_sub(self.write_at);
        if record.len() as u64 > left {
            return Err(JournalError::Full { needed: record.len() as u64, left });
        }
        self.backend.write(self.write_at, &record)?;
        self.backend.sync_data()?;
        let seq = self.next_seq;
        self.write_at += record.len() as u64;
        self.next_seq += 1;
        Ok(seq)
    }

    /// Starts over after a checkpoint that applied every record up to `checkpointed`: the
    /// next record goes to the first block again. What follows it on disk is older, so
    /// recovery stops there.
    pub(crate) fn restart(&mut self, checkpointed: u64) {
        self.write_at = BLOCK as u64;
        self.next_seq = checkpointed + 1;
        self.checkpointed = checkpointed;
    }

    /// The last sequence number the store's checkpoint covers.
    pub(crate) fn checkpointed(&self) -> u64 {
        self.checkpointed
    }

    /// Makes the journal empty on disk: the first record block is zeroed and synced, so no
    /// record is found there whatever the store's checkpoint says (a clean close).
    ///
    /// # Errors
    /// I/O errors.
    pub(crate) fn clear(&mut self, checkpointed: u64) -> Result<(), JournalError> {
        self.backend.write(BLOCK as u64, &[0u8; BLOCK])?;
        self.backend.sync_data()?;
        self.restart(checkpointed);
        Ok(())
    }

    /// Bytes used since the last checkpoint.
    pub(crate) fn used(&self) -> u64 {
        self.write_at - BLOCK as u64
    }

    /// Records appended since the last checkpoint.
    pub(crate) fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// The journal's size (fixed once preallocated).
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    use crate::test_support::Shared;

    const ID: [u8; 16] = [3; 16];
    const CAP: u64 = 64 * 1024;

    fn put(n: u8) -> Vec<Mutation> {
        vec![Mutation::Put { table: 1, key: vec![n], value: vec![n; usize::from(n) * 100] }]
    }

    #[test]
    fn a_new_journal_is_preallocated_and_records_come_back_after_a_crash() {
        let file = Shared::default();
        let (mut journal, found) = Journal::open(file.clone(), &ID, 0, CAP).unwrap();
        assert!(found.is_empty());
        assert_eq!(file.len().unwrap(), CAP, "preallocated once");
        for n in 1..=5 {
            assert_eq!(journal.append(&put(n)).unwrap(), u64::from(n));
        }
        assert_eq!(file.len().unwrap(), CAP, "appends never change the size");
        drop(journal);
        // Reopened as after a crash: every record after the checkpoint, in order.
        let (journal, found) = Journal::open(file.clone(), &ID, 0, CAP).unwrap();
        assert_eq!(found, (1..=5).map(put).collect::<Vec<_>>());
        assert_eq!(journal.last_seq(), 5);
        // With a checkpoint at 3, only 4 and 5 are applied.
        let (_, found) = Journal::open(file, &ID, 3, CAP).unwrap();
        assert!(found.is_empty(), "records sit at their offsets: after a checkpoint at 3 the journal restarted");
    }

    #[test]
    fn after_a_checkpoint_older_records_on_disk_are_never_replayed() {
        let file = Shared::default();
        let (mut journal, _) = Journal::open(file.clone(), &ID, 0, CAP).unwrap();
        for n in 1..=4 {
            journal.append(&put(n)).unwrap();
        }
        journal.restart(4);
        journal.append(&put(9)).unwrap();
        let (_, found) = Journal::open(file.clone(), &ID, 4, CAP).unwrap();
        assert_eq!(found, vec![put(9)], "record 5 only; the old records 2..4 behind it are older");
        // A crash right after the checkpoint, before any new record: nothing to apply.
        let fresh = Shared::default();
        let (mut journal, _) = Journal::open(fresh.clone(), &ID, 0, CAP).unwrap();
        journal.append(&put(1)).unwrap();
        journal.restart(1);
        let (_, found) = Journal::open(fresh, &ID, 1, CAP).unwrap();
        assert!(found.is_empty());
    }

    #[test]
    fn a_torn_last_record_ends_recovery_and_the_rest_is_applied() {
        let file = Shared::default();
        let (mut journal, _) = Journal::open(file.clone(), &ID, 0, CAP).unwrap();
        journal.append(&put(1)).unwrap();
        let second_at = BLOCK as u64 * 2;
        journal.append(&put(20)).unwrap();
        // The second record's last sector never reached the disk.
        file.write(second_at + 1536, &[0; 512]).unwrap();
        let (journal, found) = Journal::open(file, &ID, 0, CAP).unwrap();
        assert_eq!(found, vec![put(1)]);
        assert_eq!(journal.last_seq(), 1, "the next record overwrites the torn one");
    }

    #[test]
    fn foreign_and_other_stores_journals_are_refused_and_a_full_journal_says_so() {
        let file = Shared::default();
        Journal::open(file.clone(), &ID, 0, CAP).unwrap();
        assert!(matches!(Journal::open(file, &[4; 16], 0, CAP), Err(JournalError::Refused(_))));
        let foreign = Shared::default();
        foreign.set_len(BLOCK as u64).unwrap();
        foreign.write(0, b"not a journal").unwrap();
        assert!(matches!(Journal::open(foreign, &ID, 0, CAP), Err(JournalError::Refused(_))));
        let (mut small, _) = Journal::open(Shared::default(), &ID, 0, 3 * BLOCK as u64).unwrap();
        small.append(&put(1)).unwrap();
        assert!(matches!(small.append(&put(60)), Err(JournalError::Full { .. })), "two blocks needed, one left");
        small.restart(1);
        assert!(small.append(&put(2)).is_ok());
    }
}
