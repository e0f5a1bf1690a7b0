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
    // Encoding into a Vec cannot fail for the plain data types stored here.
    if let Err(error) = bincode::serde::encode_into_std_write(value, &mut out, config()) {
        debug_assert!(false, "encoding a stored value failed: {error}");
    }
    out
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
