//! Stored value encoding: one format-version byte, then a bincode 2 body.
//!
//! ```text
//! record value := version:u8 (= 1) · bincode-standard(Record)
//! ```
//! bincode's standard configuration writes integers as variable-length little-endian
//! integers whose meaning does not depend on the platform, so the same bytes are produced on
//! wasm32 and x86-64. Keys of ordered tables (expiry index, audit trail) are not bincode:
//! they use fixed big-endian integers so byte order matches numeric order.

use crate::Record;

/// Current version of stored record values.
pub const RECORD_FORMAT: u8 = 1;

/// Largest encoded value the decoder accepts (guards allocations on corrupt input).
const DECODE_LIMIT: usize = 64 * 1024 * 1024;
// A body at the largest result limit a policy allows, with its record's bookkeeping, decodes.
const _: () = assert!(crate::MAX_RESULT_BYTES_LIMIT + 1024 * 1024 <= DECODE_LIMIT);

/// A stored value could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The value was empty.
    #[error("stored value is empty")]
    Empty,
    /// The value was written by a newer version of idemdb.
    #[error("stored value has format version {found}, written by a newer version (this build reads up to {supported})")]
    NewerFormat {
        /// Version found.
        found: u8,
        /// Newest version this build reads.
        supported: u8,
    },
    /// The value has a format version this build no longer reads.
    #[error("stored value has format version {found}, which needs an upgrade (this build reads {supported})")]
    OlderFormat {
        /// Version found.
        found: u8,
        /// Version this build reads.
        supported: u8,
    },
    /// The body did not decode.
    #[error("stored value is malformed: {reason}")]
    Malformed {
        /// What went wrong.
        reason: String,
    },
}

impl DecodeError {
    /// The stable code: [`ErrorCode::NewerFormat`](crate::ErrorCode::NewerFormat),
    /// [`ErrorCode::OlderFormat`](crate::ErrorCode::OlderFormat), or
    /// [`ErrorCode::Corrupt`](crate::ErrorCode::Corrupt).
    pub fn code(&self) -> crate::ErrorCode {
        match self {
            DecodeError::NewerFormat { .. } => crate::ErrorCode::NewerFormat,
            DecodeError::OlderFormat { .. } => crate::ErrorCode::OlderFormat,
            DecodeError::Empty | DecodeError::Malformed { .. } => crate::ErrorCode::Corrupt,
        }
    }
}

crate::coded!(DecodeError);

/// A stored value of one kind (`what`: "record", "outbox item", ...) did not decode: the
/// same failure, with the same code, on every backend. Each adapter's error carries it as
/// `Error::Corrupt`.
///
/// ```
/// use idemdb_core::{Corrupt, DecodeError, ErrorCode};
///
/// let corrupt = Corrupt::of("record")(DecodeError::Empty);
/// assert_eq!((corrupt.what, corrupt.code()), ("record", ErrorCode::Corrupt));
/// assert_eq!(corrupt.to_string(), "stored record is corrupt: stored value is empty");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stored {what} is corrupt: {source}")]
pub struct Corrupt {
    /// What was being read.
    pub what: &'static str,
    /// The decode failure.
    #[source]
    pub source: DecodeError,
}

impl Corrupt {
    /// The decode failure of a stored `what`, for `map_err`:
    /// `decode_record(bytes).map_err(Corrupt::of("record"))?`.
    pub fn of(what: &'static str) -> impl Fn(DecodeError) -> Corrupt {
        move |source| Corrupt { what, source }
    }

    /// The stable code: the decode failure's (see [`DecodeError::code`]).
    pub fn code(&self) -> crate::ErrorCode {
        self.source.code()
    }
}

crate::coded!(Corrupt);

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<DECODE_LIMIT>()
}

/// Checks the version byte of a stored value and returns its body.
///
/// # Errors
/// [`DecodeError`] for an empty value or an unknown version.
pub fn split_version(bytes: &[u8], supported: u8) -> Result<&[u8], DecodeError> {
    let (&version, body) = bytes.split_first().ok_or(DecodeError::Empty)?;
    match version {
        v if v == supported => Ok(body),
        v if v > supported => Err(DecodeError::NewerFormat { found: v, supported }),
        v => Err(DecodeError::OlderFormat { found: v, supported }),
    }
}

/// Encodes any serde value behind a version byte.
pub fn encode_versioned<T: serde::Serialize>(version: u8, value: &T) -> Vec<u8> {
    let mut out = vec![version];
    encode_append(&mut out, value);
    out
}

/// Appends the encoding of a serde value, without a version byte, to `out` — for values that
/// share the version byte of the entry that holds them (events inside an audit segment).
///
/// ```
/// use idemdb_core::{encode_append, encode_versioned};
/// let mut out = vec![7u8];
/// encode_append(&mut out, &(1u64, "a"));
/// assert_eq!(out, encode_versioned(7, &(1u64, "a")));
/// ```
pub fn encode_append<T: serde::Serialize>(out: &mut Vec<u8>, value: &T) {
    // Encoding into a Vec cannot fail for the plain data types stored here.
    if let Err(error) = bincode::serde::encode_into_std_write(value, out, config()) {
        debug_assert!(false, "encoding a stored value failed: {error}");
    }
}

/// Decodes a value written by [`encode_versioned`], refusing trailing bytes.
///
/// # Errors
/// [`DecodeError`] for an unknown version or a malformed body.
pub fn decode_versioned<T: serde::de::DeserializeOwned>(bytes: &[u8], supported: u8) -> Result<T, DecodeError> {
    let body = split_version(bytes, supported)?;
    let (value, read) = bincode::serde::decode_from_slice(body, config())
        .map_err(|error| DecodeError::Malformed { reason: error.to_string() })?;
    if read != body.len() {
        return Err(DecodeError::Malformed { reason: format!("{} trailing bytes", body.len() - read) });
    }
    Ok(value)
}

/// Encodes a record.
pub fn encode_record(record: &Record) -> Vec<u8> {
    encode_versioned(RECORD_FORMAT, record)
}

/// Decodes a record.
///
/// # Errors
/// [`DecodeError`] for an unknown version or a malformed body.
pub fn decode_record(bytes: &[u8]) -> Result<Record, DecodeError> {
    decode_versioned(bytes, RECORD_FORMAT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Fingerprint, OutcomeClass, State, Timestamp, UncertainCause};

    fn sample_records() -> Vec<Record> {
        let base = Record {
            fingerprint: Fingerprint::from_bytes([0xab; 32]),
            state: State::InProgress { lease_expires_at: Timestamp::from_millis(1_700_000_060_000) },
            fence: 1_700_000_000_000,
            attempts: 1,
            created_at: Timestamp::from_millis(1_700_000_000_000),
            updated_at: Timestamp::from_millis(1_700_000_000_000),
        };
        let at = |state| Record { state, ..base.clone() };
        vec![
            base.clone(),
            at(State::Completed {
                result: b"{\"charge\":\"ch_1\"}".to_vec(),
                expires_at: Timestamp::from_millis(1_702_592_000_000),
                forget_at: Timestamp::from_millis(1_734_128_000_000),
            }),
            at(State::Failed {
                error: b"declined".to_vec(),
                expires_at: Timestamp::from_millis(1_702_592_000_000),
                forget_at: Timestamp::from_millis(1_734_128_000_000),
            }),
            at(State::Released { forget_at: Timestamp::from_millis(1_734_128_000_000) }),
            at(State::Uncertain { cause: UncertainCause::LeaseExpired }),
            at(State::Uncertain { cause: UncertainCause::Reported }),
            at(State::Tombstone { outcome: OutcomeClass::Completed, forget_at: Timestamp::MAX }),
        ]
    }

    /// Golden bytes of format 1, one line of hex per record of `sample_records`. A change to
    /// the encoding must add a format version, never alter these.
    const GOLDEN_V1: &str = include_str!("../testdata/records-v1.hex");

    #[test]
    fn golden_format_1_records_decode_and_encode_identically() {
        let lines: Vec<&str> = GOLDEN_V1.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).collect();
        let records = sample_records();
        assert_eq!(lines.len(), records.len());
        for (line, record) in lines.iter().zip(&records) {
            let bytes: Vec<u8> =
                (0..line.len()).step_by(2).map(|i| u8::from_str_radix(&line[i..i + 2], 16).unwrap()).collect();
            assert_eq!(decode_record(&bytes).unwrap(), *record);
            assert_eq!(encode_record(record), bytes, "encoding of {:?} changed", record.state.kind());
        }
    }

    #[test]
    fn version_byte_is_checked() {
        let record = sample_records().remove(1);
        let mut bytes = encode_record(&record);
        assert_eq!(bytes[0], RECORD_FORMAT);
        bytes[0] = RECORD_FORMAT + 1;
        assert_eq!(decode_record(&bytes), Err(DecodeError::NewerFormat { found: 2, supported: 1 }));
        bytes[0] = 0;
        assert_eq!(decode_record(&bytes), Err(DecodeError::OlderFormat { found: 0, supported: 1 }));
        assert_eq!(decode_record(&[]), Err(DecodeError::Empty));
        assert!(decode_record(&[RECORD_FORMAT + 1]).unwrap_err().to_string().contains("newer version"));
    }

    #[test]
    fn malformed_and_trailing_bytes_are_refused() {
        let mut bytes = encode_record(&sample_records()[0]);
        bytes.push(0);
        assert!(matches!(decode_record(&bytes), Err(DecodeError::Malformed { .. })));
        assert!(matches!(decode_record(&bytes[..bytes.len() - 5]), Err(DecodeError::Malformed { .. })));
        // A huge declared length must not allocate: the decoder's limit refuses it.
        let mut hostile = vec![RECORD_FORMAT];
        hostile.extend_from_slice(&[0xab; 32]);
        hostile.push(1); // Completed
        hostile.push(253); // varint u64 marker
        hostile.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(decode_record(&hostile), Err(DecodeError::Malformed { .. })));
    }

    #[test]
    fn a_record_at_the_largest_result_limit_decodes() {
        let mut record = sample_records().remove(1);
        record.state = State::Completed {
            result: vec![7; crate::MAX_RESULT_BYTES_LIMIT],
            expires_at: Timestamp::MAX,
            forget_at: Timestamp::MAX,
        };
        assert_eq!(decode_record(&encode_record(&record)), Ok(record));
    }

    #[test]
    #[ignore = "run with --ignored to print the golden hex after an intentional format change"]
    fn print_golden() {
        for record in sample_records() {
            let hex: String = encode_record(&record).iter().map(|b| format!("{b:02x}")).collect();
            println!("{hex}");
        }
    }
}
