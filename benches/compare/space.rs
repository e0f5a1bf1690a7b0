//! Space: bytes allocated per record after compaction, for the same records in idemdb (with and
//! without the audit trail), raw redb and SQLite.

use std::path::Path;

use idemdb::{Durability, Reservation, Reserve, Store};
use idemdb_core::encode_record;

use crate::data::{self, Res};
use crate::durable::{RAW, open_raw};
use crate::env::allocated_bytes;
use crate::sqlite;

/// Bytes per record of one system.
pub(crate) struct SpaceRow {
    pub(crate) name: String,
    /// st_blocks × 512 of the files, over the records.
    pub(crate) file_per_record: f64,
    /// What the engine says it has allocated (redb pages, SQLite pages), over the records.
    pub(crate) pages_per_record: f64,
    /// Bytes of keys and values the engine stores (redb only).
    pub(crate) stored_per_record: Option<f64>,
}

pub(crate) struct Space {
    pub(crate) records_per_kind: u64,
    /// Bytes of one stored key, in-progress record and completed record (idemdb's encoding).
    pub(crate) key_bytes: usize,
    pub(crate) in_progress_bytes: usize,
    pub(crate) completed_bytes: usize,
    /// After the documented compaction (`compact`, then a rebuild in key order).
    pub(crate) idemdb: SpaceRow,
    pub(crate) idemdb_audit: SpaceRow,
    /// The same store after `compact` alone (entries stay where random inserts put them).
    pub(crate) idemdb_compact_only: SpaceRow,
    pub(crate) raw_redb: SpaceRow,
    pub(crate) sqlite: Option<SpaceRow>,
}

pub(crate) fn run(dir: &Path, per_kind: u64) -> Res<Space> {
    let records = (2 * per_kind) as f64;
    let (idemdb_compact_only, idemdb) = idemdb_space(&dir.join("space.redb"), per_kind, false)?;
    let (_, idemdb_audit) = idemdb_space(&dir.join("space-audit.redb"), per_kind, true)?;
    let raw_redb = raw_space(&dir.join("space-raw.redb"), per_kind)?;
    let sqlite =
        sqlite::space(&dir.join("space.sqlite"), per_kind, per_kind, crate::env::now_ms())?.map(|s| SpaceRow {
            name: "SQLite (WAL, after VACUUM)".into(),
            file_per_record: s.file_blocks as f64 / records,
            pages_per_record: s.pages as f64 / records,
            stored_per_record: None,
        });
    let sample = data::request(&data::scope()?, 0)?;
    let now = crate::env::now_ms_u64();
    let in_progress_bytes = encode_record(&data::in_progress_record(sample.fingerprint, now)).len();
    let completed_bytes = encode_record(&data::completed_record(
        sample.fingerprint,
        now,
        now + data::THIRTY_DAYS_MS,
        data::result_body(0),
    ))
    .len();
    Ok(Space {
        records_per_kind: per_kind,
        key_bytes: sample.encoded.len(),
        in_progress_bytes,
        completed_bytes,
        idemdb,
        idemdb_audit,
        idemdb_compact_only,
        raw_redb,
        sqlite,
    })
}

/// `per_kind` reservations left in progress and `per_kind` completed ones, through the public
/// API, then `compact()` until it has nothing left to do (the first row), then
/// `idemdb::rebuild` (the second row: the documented compaction).
fn idemdb_space(path: &Path, per_kind: u64, audit: bool) -> Res<(SpaceRow, SpaceRow)> {
    let scope = data::scope()?;
    {
        let store = Store::builder().durability(Durability::Eventual).audit(audit).open(path)?;
        for chunk_start in (0..2 * per_kind).step_by(1_000) {
            let end = (chunk_start + 1_000).min(2 * per_kind);
            store.write(|txn| -> Res<()> {
                for i in chunk_start..end {
                    let request = data::request(&scope, i)?;
                    let Reservation::Acquired(lease) =
                        txn.reserve(Reserve::new(&scope, &request.key, &request.fingerprint))?
                    else {
                        return Err("space: expected a fresh reservation".into());
                    };
                    if i >= per_kind {
                        txn.complete(&lease, data::result_body(i))?;
                    }
                }
                Ok(())
            })?;
        }
        store.flush()?;
    }
    let mut store = Store::builder().audit(audit).open(path)?;
    for _ in 0..8 {
        if !store.compact()? {
            break;
        }
    }
    drop(store);
    let name = if audit { "idemdb, audit on (default)" } else { "idemdb, audit off" };
    let compacted = idemdb_row(path, per_kind, audit, format!("{name}, compact only"))?;
    idemdb::rebuild(path)?;
    let rebuilt = idemdb_row(path, per_kind, audit, name.to_string())?;
    Ok((compacted, rebuilt))
}

fn idemdb_row(path: &Path, per_kind: u64, audit: bool, name: String) -> Res<SpaceRow> {
    let store = Store::builder().audit(audit).open(path)?;
    let stats = store.stats()?;
    if stats.records != 2 * per_kind {
        return Err(format!("space: store holds {} records, expected {}", stats.records, 2 * per_kind).into());
    }
    drop(store);
    let records = (2 * per_kind) as f64;
    Ok(SpaceRow {
        name,
        file_per_record: allocated_bytes(path) as f64 / records,
        pages_per_record: stats.allocated_bytes as f64 / records,
        stored_per_record: Some(stats.stored_bytes as f64 / records),
    })
}

/// The same key and record bytes in one raw redb table.
fn raw_space(path: &Path, per_kind: u64) -> Res<SpaceRow> {
    let scope = data::scope()?;
    let now = crate::env::now_ms_u64();
    let mut raw = open_raw(path)?;
    for chunk_start in (0..2 * per_kind).step_by(1_000) {
        let end = (chunk_start + 1_000).min(2 * per_kind);
        let mut tx = raw.inner.begin_write()?;
        tx.set_durability(idemdb::redb::Durability::None)?;
        {
            let mut table = tx.open_table(RAW)?;
            for i in chunk_start..end {
                let request = data::request(&scope, i)?;
                let record = if i >= per_kind {
                    data::completed_record(request.fingerprint, now, now + data::THIRTY_DAYS_MS, data::result_body(i))
                } else {
                    data::in_progress_record(request.fingerprint, now)
                };
                table.insert(request.encoded.as_slice(), encode_record(&record).as_slice())?;
            }
        }
        tx.commit()?;
    }
    let tx = raw.inner.begin_write()?;
    tx.commit()?;
    for _ in 0..8 {
        if !raw.inner.compact()? {
            break;
        }
    }
    let tx = raw.inner.begin_write()?;
    let stats = tx.stats()?;
    tx.abort()?;
    drop(raw);
    let records = (2 * per_kind) as f64;
    Ok(SpaceRow {
        name: "raw redb (same keys and values)".into(),
        file_per_record: allocated_bytes(path) as f64 / records,
        pages_per_record: (stats.allocated_pages() * stats.page_size() as u64) as f64 / records,
        stored_per_record: Some(stats.stored_bytes() as f64 / records),
    })
}
