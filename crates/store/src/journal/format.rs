//! The journal's bytes: a header block with two slots, then records of table mutations, each
//! aligned to a block and checksummed, so recovery can tell a complete record of the current
//! generation from a torn one, a damaged one, or one left by an earlier generation.
//!
//! ```text
//! header (block 0, 4096 bytes): two slots of 512 bytes at offsets 0 and 512, the rest zeros
//!   slot: magic "idemdb-journal\0\0" (16) · format: u32 BE (= 2) · journal id: [u8; 16]
//!         · epoch: u64 BE · salt: u64 BE · capacity: u64 BE · check: [u8; 8]
//!   check = the first 8 bytes of BLAKE3(the 60 bytes before it)
//!   a generation (epoch, salt) is written into slot `epoch % 2`, so the slot of the previous
//!   generation stays intact while the next one is written
//! record (at a multiple of 4096, padded with zeros to the next one):
//!   len: u32 BE (payload bytes) · seq: u64 BE · check: [u8; 8] · payload
//!   check = the first 8 bytes of BLAKE3("idemdb journal record 2" ‖ journal id ‖ epoch ‖ salt
//!           ‖ len ‖ seq ‖ payload)
//! payload:
//!   count: u32 BE, then per mutation:
//!   op: u8 (1 put, 2 remove) · table: u8 · key_len: u32 BE · key · [value_len: u32 BE · value]
//! ```
//!
//! The store's metadata names the journal id and the current generation (`meta.rs`); recovery
//! takes only records sealed with both, in sequence from the checkpoint on, and stops at the
//! first that is not (zeros, a torn or damaged write, a record of an earlier generation). Every
//! checkpoint and every open starts a new generation, so records left behind an early stop
//! can never line up with later ones. The file is preallocated with written zeros and never
//! changes size on the commit path.
//!
//! Format 2 is the first release's journal format (format 1 was a development build's, read as
//! a format this build does not read).

use std::fmt;

/// Block size: every record starts at a multiple of it and every write covers whole blocks.
pub(crate) const BLOCK: usize = 4096;
/// The header's magic.
pub(crate) const MAGIC: &[u8; 16] = b"idemdb-journal\0\0";
/// The journal format this build writes.
pub(crate) const JOURNAL_FORMAT: u32 = 2;
/// Bytes of a header slot (the slot's content is shorter; the rest is zeros).
pub(crate) const SLOT: usize = 512;
/// Bytes of a slot's content before its check.
const SLOT_BODY: usize = 16 + 4 + 16 + 8 + 8 + 8;
/// Bytes of a record's header (length, sequence, check).
pub(crate) const RECORD_HEADER: usize = 4 + 8 + 8;

/// One change to one of the store's tables.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Mutation {
    /// `key` now holds `value`.
    Put {
        /// Which table.
        table: u8,
        /// The key's bytes.
        key: Vec<u8>,
        /// The value's bytes.
        value: Vec<u8>,
    },
    /// `key` was removed.
    Remove {
        /// Which table.
        table: u8,
        /// The key's bytes.
        key: Vec<u8>,
    },
}

impl fmt::Debug for Mutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keys and values are a store's data: lengths only.
        match self {
            Mutation::Put { table, key, value } => {
                write!(f, "Put {{ table: {table}, key: {} B, value: {} B }}", key.len(), value.len())
            }
            Mutation::Remove { table, key } => write!(f, "Remove {{ table: {table}, key: {} B }}", key.len()),
        }
    }
}

/// Why the bytes at an offset are not a record to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Zeros, an impossible length, a checksum that does not match (a torn or never-written
    /// block), or a record past the end of the file.
    NotARecord,
    /// A complete record with another sequence number than the next one (an older record,
    /// left from before the last checkpoint).
    OtherSequence(u64),
    /// A complete, checksummed record whose payload does not parse: a bug or a foreign file,
    /// never a crash.
    Malformed,
}

/// A journal generation: an epoch that grows by one at every reset of the journal (a
/// checkpoint, a re-initialisation) and a random salt drawn with it. Every record's checksum
/// covers it, so a record of an earlier generation is never taken for a current one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Generation {
    pub(crate) epoch: u64,
    pub(crate) salt: u64,
}

impl Generation {
    pub(crate) fn from_bytes(bytes: [u8; 16]) -> Generation {
        let (epoch, salt) = bytes.split_at(8);
        Generation {
            epoch: u64::from_be_bytes(epoch.try_into().unwrap_or_default()),
            salt: u64::from_be_bytes(salt.try_into().unwrap_or_default()),
        }
    }

    pub(crate) fn to_bytes(self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.epoch.to_be_bytes());
        out[8..].copy_from_slice(&self.salt.to_be_bytes());
        out
    }
}

/// A new random salt for the generation after `current` (the arguments only matter where no
/// random source exists, which keeps no journal).
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
pub(crate) fn fresh_salt(_current: Generation, _checkpoint: u64) -> u64 {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    u64::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[10], bytes[11]])
}

// The WebAssembly build keeps no journal (its open refuses one before this is reached); this
// only keeps the module compiling there.
#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
pub(crate) fn fresh_salt(current: Generation, checkpoint: u64) -> u64 {
    current.salt.wrapping_add(checkpoint).wrapping_add(1)
}

/// What a header slot holds: which journal this is, its current generation and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlotInfo {
    pub(crate) id: [u8; 16],
    pub(crate) generation: Generation,
    pub(crate) capacity: u64,
}

/// The bytes of a header slot (written at offset `slot_offset(generation)`).
pub(crate) fn slot(info: &SlotInfo) -> [u8; SLOT] {
    let mut out = [0u8; SLOT];
    out[..16].copy_from_slice(MAGIC);
    out[16..20].copy_from_slice(&JOURNAL_FORMAT.to_be_bytes());
    out[20..36].copy_from_slice(&info.id);
    out[36..44].copy_from_slice(&info.generation.epoch.to_be_bytes());
    out[44..52].copy_from_slice(&info.generation.salt.to_be_bytes());
    out[52..60].copy_from_slice(&info.capacity.to_be_bytes());
    let check = blake3::hash(&out[..SLOT_BODY]);
    out[SLOT_BODY..SLOT_BODY + 8].copy_from_slice(&check.as_bytes()[..8]);
    out
}

/// The offset of the slot a generation is written to.
pub(crate) fn slot_offset(generation: Generation) -> u64 {
    (generation.epoch % 2) * SLOT as u64
}

/// What one header slot says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// A valid slot of this format.
    Current(SlotInfo),
    /// A header of a format this build does not read.
    OtherFormat(u32),
    /// All zeros: never written.
    Blank,
    /// Anything else: torn, damaged, or not a journal.
    Invalid,
}

/// Reads one header slot.
pub(crate) fn read_slot(bytes: &[u8]) -> Slot {
    if bytes.len() < SLOT_BODY + 8 {
        return Slot::Invalid;
    }
    if bytes[..SLOT_BODY + 8].iter().all(|byte| *byte == 0) {
        return Slot::Blank;
    }
    if &bytes[..16] != MAGIC {
        return Slot::Invalid;
    }
    let format = u32::from_be_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
    let mut id = [0u8; 16];
    id.copy_from_slice(&bytes[20..36]);
    if format != JOURNAL_FORMAT {
        return Slot::OtherFormat(format);
    }
    let check = blake3::hash(&bytes[..SLOT_BODY]);
    if bytes[SLOT_BODY..SLOT_BODY + 8] != check.as_bytes()[..8] {
        return Slot::Invalid;
    }
    let be = |at: usize| u64::from_be_bytes(bytes[at..at + 8].try_into().unwrap_or_default());
    Slot::Current(SlotInfo { id, generation: Generation { epoch: be(36), salt: be(44) }, capacity: be(52) })
}

/// Both slots of a header block (`block` may be short: missing bytes read as invalid).
pub(crate) fn read_slots(block: &[u8]) -> [Slot; 2] {
    let at = |offset: usize| block.get(offset..offset + SLOT).map_or(Slot::Invalid, read_slot);
    [at(0), at(SLOT)]
}

/// What a record's checksum is sealed with: the journal and generation it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seal {
    pub(crate) id: [u8; 16],
    pub(crate) generation: Generation,
}

fn check(seal: Seal, len: u32, seq: u64, payload: &[u8]) -> [u8; 8] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"idemdb journal record 2");
    hasher.update(&seal.id);
    hasher.update(&seal.generation.to_bytes());
    hasher.update(&len.to_be_bytes());
    hasher.update(&seq.to_be_bytes());
    hasher.update(payload);
    let mut out = [0u8; 8];
    out.copy_from_slice(&hasher.finalize().as_bytes()[..8]);
    out
}

/// The record of `mutations` with sequence number `seq`, padded to whole blocks.
pub(crate) fn encode_record(seal: Seal, seq: u64, mutations: &[Mutation]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(
        4 + mutations
            .iter()
            .map(|m| match m {
                Mutation::Put { key, value, .. } => 10 + key.len() + value.len(),
                Mutation::Remove { key, .. } => 6 + key.len(),
            })
            .sum::<usize>(),
    );
    payload.extend_from_slice(&u32::try_from(mutations.len()).unwrap_or(u32::MAX).to_be_bytes());
    for mutation in mutations {
        match mutation {
            Mutation::Put { table, key, value } => {
                payload.push(1);
                payload.push(*table);
                push_bytes(&mut payload, key);
                push_bytes(&mut payload, value);
            }
            Mutation::Remove { table, key } => {
                payload.push(2);
                payload.push(*table);
                push_bytes(&mut payload, key);
            }
        }
    }
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let mut record = Vec::with_capacity(blocks_for(payload.len()) * BLOCK);
    record.extend_from_slice(&len.to_be_bytes());
    record.extend_from_slice(&seq.to_be_bytes());
    record.extend_from_slice(&check(seal, len, seq, &payload));
    record.extend_from_slice(&payload);
    record.resize(blocks_for(payload.len()) * BLOCK, 0);
    record
}

fn push_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Blocks a record with a payload of `payload_len` bytes takes.
pub(crate) fn blocks_for(payload_len: usize) -> usize {
    (RECORD_HEADER + payload_len).div_ceil(BLOCK)
}

/// The payload length and sequence number a record's first bytes announce, if they are a
/// plausible record header (`None` for zeros). `max_len` bounds the payload (the bytes left in
/// the file).
pub(crate) fn peek(first: &[u8], max_len: usize) -> Option<(usize, u64)> {
    if first.len() < RECORD_HEADER {
        return None;
    }
    let len = u32::from_be_bytes([first[0], first[1], first[2], first[3]]) as usize;
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&first[4..12]);
    let seq = u64::from_be_bytes(seq);
    (len >= 4 && len <= max_len && seq != 0).then_some((len, seq))
}

/// Decodes a whole record (`bytes` holds at least its header and payload) expected to carry
/// sequence number `expected`.
pub(crate) fn decode_record(bytes: &[u8], seal: Seal, expected: u64) -> Result<Vec<Mutation>, Stop> {
    let (len, seq) = peek(bytes, bytes.len().saturating_sub(RECORD_HEADER)).ok_or(Stop::NotARecord)?;
    let payload = &bytes[RECORD_HEADER..RECORD_HEADER + len];
    let mut stored = [0u8; 8];
    stored.copy_from_slice(&bytes[12..20]);
    if stored != check(seal, u32::try_from(len).unwrap_or(u32::MAX), seq, payload) {
        return Err(Stop::NotARecord);
    }
    if seq != expected {
        return Err(Stop::OtherSequence(seq));
    }
    decode_payload(payload).ok_or(Stop::Malformed)
}

fn decode_payload(payload: &[u8]) -> Option<Vec<Mutation>> {
    let mut rest = payload;
    let count = take_u32(&mut rest)?;
    let mut out = Vec::with_capacity(count.min(1 << 16) as usize);
    for _ in 0..count {
        let (&op, tail) = rest.split_first()?;
        let (&table, tail) = tail.split_first()?;
        rest = tail;
        let key = take_bytes(&mut rest)?;
        out.push(match op {
            1 => Mutation::Put { table, key, value: take_bytes(&mut rest)? },
            2 => Mutation::Remove { table, key },
            _ => return None,
        });
    }
    rest.is_empty().then_some(out)
}

fn take_u32(rest: &mut &[u8]) -> Option<u32> {
    let (bytes, tail) = rest.split_first_chunk::<4>()?;
    *rest = tail;
    Some(u32::from_be_bytes(*bytes))
}

fn take_bytes(rest: &mut &[u8]) -> Option<Vec<u8>> {
    let len = take_u32(rest)? as usize;
    let (bytes, tail) = rest.split_at_checked(len)?;
    *rest = tail;
    Some(bytes.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEAL: Seal = Seal { id: [5; 16], generation: Generation { epoch: 3, salt: 0xdead_beef } };

    fn sample() -> Vec<Mutation> {
        vec![
            Mutation::Put { table: 1, key: b"k1".to_vec(), value: vec![7; 5000] },
            Mutation::Remove { table: 2, key: b"gone".to_vec() },
            Mutation::Put { table: 3, key: Vec::new(), value: Vec::new() },
        ]
    }

    #[test]
    fn records_round_trip_and_fill_whole_blocks() {
        let record = encode_record(SEAL, 42, &sample());
        assert_eq!(record.len() % BLOCK, 0);
        assert_eq!(record.len(), 2 * BLOCK, "5 KB of payload takes two blocks");
        assert_eq!(decode_record(&record, SEAL, 42), Ok(sample()));
        assert_eq!(decode_record(&record, SEAL, 43), Err(Stop::OtherSequence(42)));
        let empty = encode_record(SEAL, 1, &[]);
        assert_eq!(empty.len(), BLOCK);
        assert_eq!(decode_record(&empty, SEAL, 1), Ok(Vec::new()));
    }

    #[test]
    fn a_record_of_another_generation_or_journal_is_not_a_record() {
        let record = encode_record(SEAL, 7, &sample());
        let Seal { id, generation } = SEAL;
        let next = Seal { id, generation: Generation { epoch: generation.epoch + 1, ..generation } };
        let resalted = Seal { id, generation: Generation { salt: generation.salt ^ 1, ..generation } };
        let other = Seal { id: [6; 16], generation };
        for seal in [next, resalted, other] {
            assert_eq!(decode_record(&record, seal, 7), Err(Stop::NotARecord), "{seal:?}");
        }
    }

    #[test]
    fn a_torn_or_zeroed_record_is_not_a_record() {
        let record = encode_record(SEAL, 7, &sample());
        // Torn at every sector boundary: the second half never reached the disk.
        for cut in (512..record.len()).step_by(512) {
            let mut torn = record.clone();
            torn[cut..].fill(0);
            if torn != record {
                assert_eq!(decode_record(&torn, SEAL, 7), Err(Stop::NotARecord), "cut at {cut}");
            }
        }
        let mut flipped = record.clone();
        flipped[100] ^= 1;
        assert_eq!(decode_record(&flipped, SEAL, 7), Err(Stop::NotARecord));
        assert_eq!(decode_record(&vec![0; BLOCK], SEAL, 7), Err(Stop::NotARecord));
        assert!(peek(&[0xff; RECORD_HEADER], 100).is_none(), "an impossible length");
    }

    #[test]
    fn header_slots_say_whose_journal_it_is_and_which_generation() {
        let info = SlotInfo { id: [9; 16], generation: Generation { epoch: 4, salt: 11 }, capacity: 1 << 20 };
        let mut block = vec![0u8; BLOCK];
        let at = slot_offset(info.generation) as usize;
        block[at..at + SLOT].copy_from_slice(&slot(&info));
        assert_eq!(read_slots(&block), [Slot::Current(info), Slot::Blank]);
        let next = SlotInfo { generation: Generation { epoch: 5, salt: 12 }, ..info };
        let at = slot_offset(next.generation) as usize;
        block[at..at + SLOT].copy_from_slice(&slot(&next));
        assert_eq!(read_slots(&block), [Slot::Current(info), Slot::Current(next)], "the previous slot stays");
        // A flipped byte anywhere in a slot's content makes it invalid, never another slot.
        for byte in 0..SLOT_BODY + 8 {
            let mut damaged = block.clone();
            damaged[byte] ^= 0x40;
            let [first, _] = read_slots(&damaged);
            assert!(matches!(first, Slot::Invalid | Slot::OtherFormat(_)), "byte {byte}: {first:?}");
        }
        assert_eq!(read_slots(&vec![0; BLOCK]), [Slot::Blank, Slot::Blank]);
        let mut development = slot(&info);
        development[16..20].copy_from_slice(&1u32.to_be_bytes());
        assert_eq!(read_slot(&development), Slot::OtherFormat(1), "a development build's format 1 is not read");
        assert_eq!(read_slots(b"SQLite format 3\0 and more bytes")[0], Slot::Invalid, "short and foreign");
        let mut newer = slot(&info);
        newer[16..20].copy_from_slice(&3u32.to_be_bytes());
        assert_eq!(read_slot(&newer), Slot::OtherFormat(3));
        assert!(format!("{:?}", sample()).contains("5000 B"), "debug output shows lengths, not data");
    }
}
