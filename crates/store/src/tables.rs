//! Table definitions and the byte layout of their keys. See `docs/design.md`.
//!
//! | table            | key                                   | value                          |
//! |------------------|---------------------------------------|--------------------------------|
//! | `idemdb_meta`    | name (`&str`)                         | raw bytes                      |
//! | `idemdb_records` | `ScopedKey::encode` (length-prefixed) | version byte · bincode(Record) |
//! | `idemdb_expiry`  | due `u64` BE · `ScopedKey::encode`    | empty                          |
//! | `idemdb_audit`   | at `u64` BE · sequence `u64` BE       | version byte · bincode(event)  |
//! | `idemdb_intents` | `ScopedKey::encode` (length-prefixed) | version byte · bincode(intent) |

use redb::TableDefinition;

use idemdb_core::Timestamp;

/// Store-wide metadata: magic, format, audit secret, clock (retention time, unconfirmed gaps).
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("idemdb_meta");
/// One record per `(scope, key)`.
pub(crate) const RECORDS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idemdb_records");
/// Time-ordered index of the next retention step of each record.
pub(crate) const EXPIRY: TableDefinition<&[u8], ()> = TableDefinition::new("idemdb_expiry");
/// The audit trail.
pub(crate) const AUDIT: TableDefinition<[u8; 16], &[u8]> = TableDefinition::new("idemdb_audit");
/// Client intents (see `intents.rs`); created on first use.
pub(crate) const INTENTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idemdb_intents");

/// Value of the `magic` meta entry.
pub(crate) const MAGIC: &[u8] = b"idemdb";
/// Store format written by this build (meta entry `format`, `u32` big-endian).
pub const STORE_FORMAT: u32 = 1;

pub(crate) const META_MAGIC: &str = "magic";
pub(crate) const META_FORMAT: &str = "format";
pub(crate) const META_SECRET: &str = "audit_secret";
pub(crate) const META_CLOCK: &str = "clock_high_water";
pub(crate) const META_CLOCK_PENDING: &str = "clock_pending";
pub(crate) const META_FENCE_FLOOR: &str = "fence_floor";

/// Key of an expiry index entry.
pub(crate) fn expiry_key(due: Timestamp, scoped: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + scoped.len());
    out.extend_from_slice(&due.as_millis().to_be_bytes());
    out.extend_from_slice(scoped);
    out
}

/// Splits an expiry index key into its due time and scoped key bytes.
pub(crate) fn split_expiry_key(bytes: &[u8]) -> Option<(Timestamp, &[u8])> {
    let (due, scoped) = bytes.split_first_chunk::<8>()?;
    Some((Timestamp::from_millis(u64::from_be_bytes(*due)), scoped))
}

/// Key of an audit entry.
pub(crate) fn audit_key(at: Timestamp, sequence: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&at.as_millis().to_be_bytes());
    out[8..].copy_from_slice(&sequence.to_be_bytes());
    out
}
