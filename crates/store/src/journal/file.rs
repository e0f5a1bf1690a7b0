//! The journal file: its header, appending a batch's record, scanning the records a crash
//! left after the last checkpoint, and starting over after a checkpoint. The byte layout is in
//! `format.rs`; where the file lives (beside the store, its identity) in `files.rs`.

use redb::StorageBackend;

use super::format::{self, BLOCK, Generation, RECORD_HEADER, Seal, Slot, SlotInfo, Stop};
use super::{JournalError, Mutation};

/// A journal file's first block, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    /// The file's length.
    pub(crate) len: u64,
    /// Its two header slots (both [`Slot::Invalid`] when the file is shorter than a block).
    pub(crate) slots: [Slot; 2],
}

impl Header {
    /// Reads the header of `backend`.
    pub(crate) fn read(backend: &impl StorageBackend) -> Result<Header, JournalError> {
        let len = backend.len()?;
        if len < BLOCK as u64 {
            let mut head = vec![0u8; usize::try_from(len).unwrap_or(0)];
            backend.read(0, &mut head)?;
            let blank = head.iter().all(|byte| *byte == 0);
            let slot = if blank { Slot::Blank } else { Slot::Invalid };
            return Ok(Header { len, slots: [slot, slot] });
        }
        let mut head = vec![0u8; BLOCK];
        backend.read(0, &mut head)?;
        Ok(Header { len, slots: format::read_slots(&head) })
    }

    /// The newest valid slot of the journal `id`.
    pub(crate) fn newest_of(&self, id: &[u8; 16]) -> Option<SlotInfo> {
        self.slots
            .iter()
            .filter_map(|slot| match slot {
                Slot::Current(info) if info.id == *id => Some(*info),
                _ => None,
            })
            .max_by_key(|info| info.generation.epoch)
    }

    /// Whether neither slot holds anything (a file never initialised, or wiped).
    pub(crate) fn is_blank(&self) -> bool {
        self.slots.iter().all(|slot| *slot == Slot::Blank)
    }
}

/// Why a scan ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScanEnd {
    /// Zeros: nothing was ever written there in this generation's use of the file.
    Blank,
    /// Bytes that are not a record of this generation: a torn or damaged write, or a record
    /// of an earlier generation.
    NotARecord,
    /// A record of this generation with another sequence number.
    OutOfSequence(u64),
    /// The end of the journal.
    End,
}

impl ScanEnd {
    pub(crate) fn describe(self) -> String {
        match self {
            ScanEnd::Blank => "zeros (the end of the records)".into(),
            ScanEnd::NotARecord => {
                "bytes that are not a record of the current generation (a torn or damaged write, or a record of an earlier generation)".into()
            }
            ScanEnd::OutOfSequence(seq) => format!("a record out of sequence ({seq})"),
            ScanEnd::End => "the end of the journal".into(),
        }
    }
}

/// What a scan of a journal found.
#[derive(Debug)]
pub(crate) struct Scan {
    /// The records after the checkpoint, in order.
    pub(crate) batches: Vec<Vec<Mutation>>,
    /// Where the scan stopped (the offset after the last record taken).
    pub(crate) stopped_at: u64,
    /// Why.
    pub(crate) end: ScanEnd,
}

/// Reads the records sealed with `seal` and numbered from `from` on, from block 1, in order,
/// stopping at the first that is not the next one. Reads stay below `limit` (the smaller of
/// the file's length and the journal's recorded capacity), so a damaged length field can
/// never make it read or allocate more than the journal holds. With `first_only`, stops after
/// one record (the read-only check).
pub(crate) fn scan(
    backend: &impl StorageBackend,
    seal: Seal,
    from: u64,
    limit: u64,
    first_only: bool,
) -> Result<Scan, JournalError> {
    let mut batches = Vec::new();
    let mut at = BLOCK as u64;
    let mut seq = from;
    let mut first = vec![0u8; RECORD_HEADER];
    let end = loop {
        let left = limit.saturating_sub(at);
        if left < BLOCK as u64 {
            break ScanEnd::End;
        }
        backend.read(at, &mut first)?;
        let max_len = usize::try_from(left).unwrap_or(usize::MAX).saturating_sub(RECORD_HEADER);
        let Some((len, _)) = format::peek(&first, max_len) else {
            let blank = first.iter().all(|byte| *byte == 0);
            break if blank { ScanEnd::Blank } else { ScanEnd::NotARecord };
        };
        let size = format::blocks_for(len) * BLOCK;
        if size as u64 > left {
            // Its blocks would run past the journal's end (a file cut short): not a record.
            break ScanEnd::NotARecord;
        }
        let mut record = vec![0u8; size];
        backend.read(at, &mut record)?;
        match format::decode_record(&record, seal, seq) {
            Ok(batch) => {
                batches.push(batch);
                at += record.len() as u64;
                seq = seq.checked_add(1).ok_or(JournalError::Malformed { seq })?;
                if first_only {
                    break ScanEnd::End;
                }
            }
            Err(Stop::NotARecord) => break ScanEnd::NotARecord,
            Err(Stop::OtherSequence(found)) => break ScanEnd::OutOfSequence(found),
            Err(Stop::Malformed) => return Err(JournalError::Malformed { seq }),
        }
    };
    Ok(Scan { batches, stopped_at: at, end })
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
    /// The journal id.
    id: [u8; 16],
    /// The generation records are sealed with.
    generation: Generation,
    /// Whether the header slot last written is durable. A slot is overwritten only two
    /// generations later, and never while the slot written after it is not durable yet, so one
    /// slot naming the store's generation (or the one before) is always on disk.
    slot_synced: bool,
}

impl<B: StorageBackend> Journal<B> {
    /// Starts generation `generation` of the journal `id` on `backend`, after the checkpoint
    /// `checkpointed`: writes its header slot (the other slot, the previous generation's, is
    /// left as it is) and syncs. With `fresh`, the file is first emptied and preallocated with
    /// written zeros to `capacity` bytes — only ever for a file that holds nothing the store
    /// needs. Otherwise the file keeps its size.
    ///
    /// # Errors
    /// I/O errors.
    pub(crate) fn start(
        backend: B,
        id: [u8; 16],
        generation: Generation,
        checkpointed: u64,
        capacity: u64,
        fresh: bool,
    ) -> Result<Self, JournalError> {
        let capacity = if fresh { Self::rounded(capacity) } else { Self::rounded(backend.len()?) };
        if fresh {
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
        }
        let journal = Journal {
            backend,
            capacity,
            write_at: BLOCK as u64,
            next_seq: checkpointed.checked_add(1).ok_or(JournalError::Malformed { seq: checkpointed })?,
            checkpointed,
            id,
            generation,
            slot_synced: false,
        };
        let mut journal = journal;
        journal.write_slot()?;
        journal.backend.sync_data()?;
        journal.slot_synced = true;
        Ok(journal)
    }

    fn rounded(capacity: u64) -> u64 {
        capacity.max(2 * BLOCK as u64) / BLOCK as u64 * BLOCK as u64
    }

    fn seal(&self) -> Seal {
        Seal { id: self.id, generation: self.generation }
    }

    fn write_slot(&mut self) -> Result<(), JournalError> {
        let info = SlotInfo { id: self.id, generation: self.generation, capacity: self.capacity };
        self.backend.write(format::slot_offset(self.generation), &format::slot(&info))?;
        Ok(())
    }

    /// Appends one batch: one write of whole blocks, then one `fdatasync`. Returns its
    /// sequence number. The batch is durable when this returns (and so is the header slot of
    /// its generation, written before it).
    ///
    /// # Errors
    /// [`JournalError::Full`] (checkpoint, then append again); I/O errors (the journal must
    /// then be reopened: whether the record reached the disk is unknown).
    pub(crate) fn append(&mut self, mutations: &[Mutation]) -> Result<u64, JournalError> {
        let record = format::encode_record(self.seal(), self.next_seq, mutations);
        let left = self.capacity.saturating_sub(self.write_at);
        if record.len() as u64 > left {
            return Err(JournalError::Full { needed: record.len() as u64, left });
        }
        self.backend.write(self.write_at, &record)?;
        self.backend.sync_data()?;
        self.slot_synced = true;
        let seq = self.next_seq;
        self.write_at += record.len() as u64;
        self.next_seq += 1;
        Ok(seq)
    }

    /// Starts over after a checkpoint that applied every record up to `checkpointed` and
    /// recorded `generation` as the next one: the next record goes to the first block again,
    /// sealed with the new generation, whose header slot is written now (made durable by the
    /// next append's sync). What follows on disk belongs to an earlier generation, so recovery
    /// stops there.
    ///
    /// # Errors
    /// I/O errors writing the slot (the checkpoint itself has taken effect).
    pub(crate) fn restart(&mut self, checkpointed: u64, generation: Generation) -> Result<(), JournalError> {
        self.write_at = BLOCK as u64;
        self.next_seq = checkpointed.checked_add(1).ok_or(JournalError::Malformed { seq: checkpointed })?;
        self.checkpointed = checkpointed;
        self.generation = generation;
        if !self.slot_synced {
            // The previous generation's slot is not durable yet; the slot about to be written
            // is the one before it: make the previous one durable first.
            self.backend.sync_data()?;
        }
        self.slot_synced = false;
        self.write_slot()
    }

    /// The last sequence number the store's checkpoint covers.
    pub(crate) fn checkpointed(&self) -> u64 {
        self.checkpointed
    }

    /// The generation records are sealed with.
    pub(crate) fn generation(&self) -> Generation {
        self.generation
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
    const G1: Generation = Generation { epoch: 1, salt: 77 };

    fn put(n: u8) -> Vec<Mutation> {
        vec![Mutation::Put { table: 1, key: vec![n], value: vec![n; usize::from(n) * 100] }]
    }

    fn read_all(file: &Shared, id: [u8; 16], generation: Generation, from: u64) -> Scan {
        scan(file, Seal { id, generation }, from, file.len().unwrap(), false).unwrap()
    }

    #[test]
    fn a_new_journal_is_preallocated_and_records_come_back_after_a_crash() {
        let file = Shared::default();
        let mut journal = Journal::start(file.clone(), ID, G1, 0, CAP, true).unwrap();
        assert_eq!(file.len().unwrap(), CAP, "preallocated once");
        let header = Header::read(&file).unwrap();
        assert_eq!(header.newest_of(&ID).map(|slot| slot.generation), Some(G1));
        for n in 1..=5 {
            assert_eq!(journal.append(&put(n)).unwrap(), u64::from(n));
        }
        assert_eq!(file.len().unwrap(), CAP, "appends never change the size");
        drop(journal);
        let found = read_all(&file, ID, G1, 1);
        assert_eq!(found.batches, (1..=5).map(put).collect::<Vec<_>>());
        assert_eq!(found.end, ScanEnd::Blank);
        // After a checkpoint at 3 the records would start at block 1 with seq 4: 1..3 are not.
        let found = read_all(&file, ID, G1, 4);
        assert!(found.batches.is_empty());
        assert_eq!(found.end, ScanEnd::OutOfSequence(1));
    }

    #[test]
    fn after_a_checkpoint_records_of_the_earlier_generation_are_never_replayed() {
        let file = Shared::default();
        let mut journal = Journal::start(file.clone(), ID, G1, 0, CAP, true).unwrap();
        for n in 1..=4 {
            journal.append(&put(n)).unwrap();
        }
        let g2 = Generation { epoch: 2, salt: 5 };
        journal.restart(2, g2).unwrap();
        journal.append(&put(9)).unwrap();
        // The new generation's record 3 at block 1, then generation 1's records 2.., which
        // carry the sequence numbers that would follow (3, 4): never taken.
        let found = read_all(&file, ID, g2, 3);
        assert_eq!(found.batches, vec![put(9)]);
        assert_eq!(found.end, ScanEnd::NotARecord, "generation 1's record there is not one of generation 2");
        // The old generation's records read with the old seal are there, but nothing asks for them.
        assert!(read_all(&file, ID, G1, 3).batches.is_empty(), "block 1 now holds generation 2");
        // The same bytes under another journal id are never records.
        assert!(read_all(&file, [4; 16], g2, 3).batches.is_empty());
        let header = Header::read(&file).unwrap();
        assert_eq!(header.newest_of(&ID).map(|slot| slot.generation), Some(g2));
        assert!(header.slots.iter().any(|slot| matches!(slot, Slot::Current(info) if info.generation == G1)));
    }

    #[test]
    fn a_torn_last_record_ends_recovery_and_the_rest_is_applied() {
        let file = Shared::default();
        let mut journal = Journal::start(file.clone(), ID, G1, 0, CAP, true).unwrap();
        journal.append(&put(1)).unwrap();
        let second_at = BLOCK as u64 * 2;
        journal.append(&put(20)).unwrap();
        // The second record's last sector never reached the disk.
        file.write(second_at + 1536, &[0; 512]).unwrap();
        let found = read_all(&file, ID, G1, 1);
        assert_eq!(found.batches, vec![put(1)]);
        assert_eq!(found.end, ScanEnd::NotARecord);
        assert_eq!(found.stopped_at, second_at);
    }

    #[test]
    fn a_damaged_length_never_reads_past_the_limit_and_a_full_journal_says_so() {
        let file = Shared::default();
        let mut journal = Journal::start(file.clone(), ID, G1, 0, CAP, true).unwrap();
        journal.append(&put(1)).unwrap();
        // The length field claims 4 GiB.
        file.write(BLOCK as u64, &[0xff, 0xff, 0xff, 0xf0]).unwrap();
        let found = scan(&file, Seal { id: ID, generation: G1 }, 1, CAP, false).unwrap();
        assert!(found.batches.is_empty());
        assert_eq!(found.end, ScanEnd::NotARecord);

        let mut small = Journal::start(Shared::default(), ID, G1, 0, 3 * BLOCK as u64, true).unwrap();
        small.append(&put(1)).unwrap();
        assert!(matches!(small.append(&put(60)), Err(JournalError::Full { .. })), "two blocks needed, one left");
        small.restart(1, Generation { epoch: 2, salt: 1 }).unwrap();
        assert!(small.append(&put(2)).is_ok());
    }

    #[test]
    fn the_slot_a_generation_depends_on_stays_durable_until_the_next_is() {
        // Two checkpoints in a row with no append between: the second must not overwrite the
        // only durable slot while the one written by the first is not synced yet.
        let file = Shared::default();
        let mut journal = Journal::start(file.clone(), ID, G1, 0, CAP, true).unwrap();
        let syncs = file.syncs();
        journal.restart(0, Generation { epoch: 2, salt: 2 }).unwrap();
        assert_eq!(file.syncs(), syncs, "the slot of a new generation rides the next append's sync");
        journal.restart(0, Generation { epoch: 3, salt: 3 }).unwrap();
        assert_eq!(file.syncs(), syncs + 1, "slot 2 made durable before slot 1 is overwritten");
        journal.append(&put(1)).unwrap();
        journal.restart(1, Generation { epoch: 4, salt: 4 }).unwrap();
        assert_eq!(file.syncs(), syncs + 2, "only the append's sync");
    }
}
