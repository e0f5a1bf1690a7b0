//! Table definitions and the byte layout of their keys. See `docs/design.md`.
//!
//! | table            | key                                   | value                          |
//! |------------------|---------------------------------------|--------------------------------|
//! | `idemdb_meta`    | name (`&str`)                         | raw bytes                      |
//! | `idemdb_records` | `ScopedKey::encode` (length-prefixed) | version byte · bincode(Record) |
//! | `idemdb_expiry`  | due `u64` BE · `ScopedKey::encode`    | empty                          |
//! | `idemdb_audit`   | at `u64` BE · sequence `u64` BE       | version byte · bincode(event)  |
//! | `idemdb_intents` | `ScopedKey::encode` (length-prefixed) | version byte · bincode(intent) |
//! | `idemdb_outbox`  | `ScopedKey::encode` · len · effect    | version byte · bincode(item)   |
//! | `idemdb_outbox_due` | due `u64` BE · outbox key          | empty                          |
//! | `idemdb_reconcile` | kind `u8` · record or outbox key    | since `u64` BE (8 bytes)       |
//! | `idemdb_deliveries` | len · source · len · delivery id   | version byte · bincode(delivery) |
//! | `idemdb_objects` | len · source · len · object id        | version byte · bincode(object) |
//! | `idemdb_jobs`    | `ScopedKey::encode` of the job        | version byte · bincode(job)    |
//!
//! The expiry index also schedules the removal of finished outbox items, deliveries and
//! jobs: their entries are `due · marker · key`, with a marker byte of `0xF0` or above.
//! A record's entry is `due · ScopedKey::encode`, whose first byte is a tenant length
//! (at most 128), so the two never collide and entries written before these tables existed
//! read unchanged.

use redb::{Key, ReadOnlyTable, ReadTransaction, TableDefinition, Value};

use idemdb_core::Timestamp;

use crate::Error;

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

/// Outbox items, one per `(scope, key, effect)`.
pub(crate) const OUTBOX: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idemdb_outbox");
/// Outbox items a dispatcher should look at, by due time.
pub(crate) const OUTBOX_DUE: TableDefinition<&[u8], ()> = TableDefinition::new("idemdb_outbox_due");
/// The reconciliation queue: uncertain records and uncertain outbox items, with the time they
/// became uncertain (`u64` BE bytes: the same key and value types as other tables, so redb's
/// code is not instantiated once more, which the WebAssembly build pays for in size).
pub(crate) const RECONCILE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idemdb_reconcile");
/// Webhook deliveries, one per `(source, delivery id)`.
pub(crate) const DELIVERIES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idemdb_deliveries");
/// The objects webhook deliveries describe, one per `(source, object id)`.
pub(crate) const OBJECTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idemdb_objects");
/// Queue jobs, one per `(scope, job id)`.
pub(crate) const JOBS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idemdb_jobs");

/// The id of each table in journal records (`journal/apply.rs` applies a mutation by it).
/// Every table the store owns has one, so every write the store makes is journaled. A
/// record carries the id as one byte ([`TableId::byte`]); ids are never reused, and 6 is
/// skipped (it named a table of a development build).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum TableId {
    Meta = 1,
    Records = 2,
    Expiry = 3,
    Audit = 4,
    Reconcile = 5,
    Intents = 7,
    Outbox = 8,
    OutboxDue = 9,
    Deliveries = 10,
    Objects = 11,
    Jobs = 12,
    /// Every application table (`app_table.rs`): the logged key is `name length: u32 BE ·
    /// name · key`.
    Application = 13,
    /// Every row table (`rows.rs`): the logged key is `name length: u32 BE · name · partition
    /// length: u32 BE · partition · id`; replayed without registration (all have one type).
    Rows = 14,
}

impl TableId {
    /// The byte a journal record carries.
    pub(crate) const fn byte(self) -> u8 {
        self as u8
    }

    /// The table a record's byte names; `None` for a byte no table has (a record of a later
    /// build, or damage that still checksums).
    pub(crate) fn from_byte(byte: u8) -> Option<TableId> {
        Some(match byte {
            1 => TableId::Meta,
            2 => TableId::Records,
            3 => TableId::Expiry,
            4 => TableId::Audit,
            5 => TableId::Reconcile,
            7 => TableId::Intents,
            8 => TableId::Outbox,
            9 => TableId::OutboxDue,
            10 => TableId::Deliveries,
            11 => TableId::Objects,
            12 => TableId::Jobs,
            13 => TableId::Application,
            14 => TableId::Rows,
            _ => return None,
        })
    }
}

/// Reconciliation queue entry kinds.
pub(crate) const RECONCILE_RECORD: u8 = 1;
#[cfg_attr(not(feature = "workflow"), allow(dead_code))]
pub(crate) const RECONCILE_EFFECT: u8 = 2;

/// Expiry index markers of what is not a record.
pub(crate) const EXPIRY_OUTBOX: u8 = 0xF0;
#[cfg_attr(not(feature = "workflow"), allow(dead_code))]
pub(crate) const EXPIRY_DELIVERY: u8 = 0xF1;
#[cfg_attr(not(feature = "workflow"), allow(dead_code))]
pub(crate) const EXPIRY_JOB: u8 = 0xF2;

/// Key of a reconciliation queue entry.
pub(crate) fn reconcile_key(kind: u8, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + key.len());
    out.push(kind);
    out.extend_from_slice(key);
    out
}

/// Whether the part of an expiry index key after its due time belongs to a workflow table
/// (its first byte is a marker, not a tenant length).
pub(crate) fn is_workflow_entry(rest: &[u8]) -> bool {
    rest.first().is_some_and(|&marker| marker >= EXPIRY_OUTBOX)
}

/// Key of an expiry index entry of a workflow table (`marker` is one of the `EXPIRY_*` bytes).
#[cfg_attr(not(feature = "workflow"), allow(dead_code))]
pub(crate) fn marked_expiry_key(due: Timestamp, marker: u8, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + key.len());
    out.extend_from_slice(&due.as_millis().to_be_bytes());
    out.push(marker);
    out.extend_from_slice(key);
    out
}

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
/// The last journal sequence number applied to the file (`u64` BE; written by every durable
/// commit while a journal is open). Absent: the store never had a journal.
pub(crate) const META_JOURNAL_CHECKPOINT: &str = "journal_checkpoint";

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

/// Opens `table` for reading; `None` when no write has created it yet (a store that never
/// used intents, the outbox, the inbox or jobs).
pub(crate) fn open_optional<K: Key + 'static, V: Value + 'static>(
    read: &ReadTransaction,
    table: TableDefinition<K, V>,
) -> Result<Option<ReadOnlyTable<K, V>>, Error> {
    match read.open_table(table) {
        Ok(table) => Ok(Some(table)),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
mod table_id_tests {
    use super::TableId;

    #[test]
    fn every_id_round_trips_through_its_byte_and_no_other_byte_names_a_table() {
        let named: Vec<u8> = (0..=u8::MAX).filter(|byte| TableId::from_byte(*byte).is_some()).collect();
        for byte in &named {
            assert_eq!(TableId::from_byte(*byte).map(TableId::byte), Some(*byte));
        }
        assert_eq!(named, [1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14], "6 is skipped, none reused");
    }
}
