//! The journal's bytes: a header block, then records of table mutations, each aligned to a
//! block and checksummed, so recovery can tell a complete record from a torn one.
//!
//! ```text
//! header (block 0, 4096 bytes):
//!   magic "idemdb-journal\0\0" (16) · format: u32 BE (= 1) · store id: [u8; 16] · zero padding
//! record (at a multiple of 4096, padded with zeros to the next one):
//!   len: u32 BE (payload bytes) · seq: u64 BE · check: [u8; 8] · payload
//!   check = the first 8 bytes of BLAKE3(len ‖ seq ‖ payload)
//! payload:
//!   count: u32 BE, then per mutation:
//!   op: u8 (1 put, 2 remove) · table: u8 · key_len: u32 BE · key · [value_len: u32 BE · value]
//! ```
//!
//! Sequence numbers are consecutive. A checkpoint records the last applied one in the store,
//! and the next record is written at block 1 again: what follows it on disk has older
//! sequence numbers, so recovery stops there, as it stops at the first record whose length,
//! checksum or sequence number is off (a write torn by a crash). The file is preallocated with
//! written zeros and never changes size on the commit path.

use std::fmt;

/// Block size: every record starts at a multiple of it and every write covers whole blocks.
pub(crate) const BLOCK: usize = 4096;
/// The header's magic.
pub(crate) const MAGIC: &[u8; 16] = b"idemdb-journal\0\0";
/// The journal format this build writes.
pub(crate) const JOURNAL_FORMAT: u32 = 1;
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

/// The header block of a journal of the store with `store_id`.
pub(crate) fn header(store_id: &[u8; 16]) -> Vec<u8> {
    let mut block = vec![0u8; BLOCK];
    block[..16].copy_from_slice(MAGIC);
    block[16..20].copy_from_slice(&JOURNAL_FORMAT.to_be_bytes());
    block[20..36].copy_from_slice(store_id);
    block
}

/// What a header block says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Header {
    /// A journal of this format for the store with this id.
    Journal([u8; 16]),
    /// All zeros: a journal whose creation did not finish (nothing was ever journaled in it).
    Blank,
    /// A journal of another format version.
    OtherFormat(u32),
    /// Not a journal at all.
    Foreign,
}

/// Reads a header block.
pub(crate) fn read_header(block: &[u8]) -> Header {
    if block.len() < 36 {
        return Header::Foreign;
    }
    if block.iter().all(|byte| *byte == 0) {
        return Header::Blank;
    }
    if &block[..16] != MAGIC {
        return Header::Foreign;
    }
    let format = u32::from_be_bytes([block[16], block[17], block[18], block[19]]);
    if format != JOURNAL_FORMAT {
        return Header::OtherFormat(format);
    }
    let mut id = [0u8; 16];
    id.copy_from_slice(&block[20..36]);
    Header::Journal(id)
}

fn check(len: u32, seq: u64, payload: &[u8]) -> [u8; 8] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&len.to_be_bytes());
    hasher.update(&seq.to_be_bytes());
    hasher.update(payload);
    let mut out = [0u8; 8];
    out.copy_from_slice(&hasher.finalize().as_bytes()[..8]);
    out
}

/// The record of `mutations` with sequence number `seq`, padded to whole blocks.
pub(crate) fn encode_record(seq: u64, mutations: &[Mutation]) -> Vec<u8> {
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
    record.extend_from_slice(&check(len, seq, &payload));
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
pub(crate) fn decode_record(bytes: &[u8], expected: u64) -> Result<Vec<Mutation>, Stop> {
    let (len, seq) = peek(bytes, bytes.len().saturating_sub(RECORD_HEADER)).ok_or(Stop::NotARecord)?;
    let payload = &bytes[RECORD_HEADER..RECORD_HEADER + len];
    let mut stored = [0u8; 8];
    stored.copy_from_slice(&bytes[12..20]);
    if stored != check(u32::try_from(len).unwrap_or(u32::MAX), seq, payload) {
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

    fn sample() -> Vec<Mutation> {
        vec![
            Mutation::Put { table: 1, key: b"k1".to_vec(), value: vec![7; 5000] },
            Mutation::Remove { table: 2, key: b"gone".to_vec() },
            Mutation::Put { table: 3, key: Vec::new(), value: Vec::new() },
        ]
    }

    #[test]
    fn records_round_trip_and_fill_whole_blocks() {
        let record = encode_record(42, &sample());
        assert_eq!(record.len() % BLOCK, 0);
        assert_eq!(record.len(), 2 * BLOCK, "5 KB of payload takes two blocks");
        assert_eq!(decode_record(&record, 42), Ok(sample()));
        assert_eq!(decode_record(&record, 43), Err(Stop::OtherSequence(42)));
        let empty = encode_record(1, &[]);
        assert_eq!(empty.len(), BLOCK);
        assert_eq!(decode_record(&empty, 1), Ok(Vec::new()));
    }

    #[test]
    fn a_torn_or_zeroed_record_is_not_a_record() {
        let record = encode_record(7, &sample());
        // Torn at every sector boundary: the second half never reached the disk.
        for cut in (512..record.len()).step_by(512) {
            let mut torn = record.clone();
            torn[cut..].fill(0);
            if torn != record {
                assert_eq!(decode_record(&torn, 7), Err(Stop::NotARecord), "cut at {cut}");
            }
        }
        let mut flipped = record.clone();
        flipped[100] ^= 1;
        assert_eq!(decode_record(&flipped, 7), Err(Stop::NotARecord));
        assert_eq!(decode_record(&vec![0; BLOCK], 7), Err(Stop::NotARecord));
        assert!(peek(&[0xff; RECORD_HEADER], 100).is_none(), "an impossible length");
    }

    #[test]
    fn headers_say_whose_journal_it_is() {
        let id = [9u8; 16];
        let block = header(&id);
        assert_eq!(block.len(), BLOCK);
        assert_eq!(read_header(&block), Header::Journal(id));
        assert_eq!(read_header(&vec![0; BLOCK]), Header::Blank);
        assert_eq!(read_header(b"SQLite format 3\0 and more bytes here to 36"), Header::Foreign);
        let mut newer = block.clone();
        newer[16..20].copy_from_slice(&2u32.to_be_bytes());
        assert_eq!(read_header(&newer), Header::OtherFormat(2));
        assert!(format!("{:?}", sample()).contains("5000 B"), "debug output shows lengths, not data");
    }
}
