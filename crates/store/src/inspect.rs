//! Looking inside a store: statistics, listings, the audit trail, verification, compaction.

use std::collections::BTreeMap;

use redb::{ReadableTable, ReadableTableMetadata};

use idemdb_core::{Corrupt, Record, ScopedKey, State, StateKind, Timestamp, decode_record};

use crate::audit::decode_entry;
use crate::tables::{AUDIT, EXPIRY, RECORDS, split_expiry_key};
use crate::{Error, Store};
use idemdb_core::{AuditEvent, KeyHash};

/// Counts and sizes of a store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Records by operation and state.
    pub by_operation: BTreeMap<String, BTreeMap<StateKind, u64>>,
    /// All records.
    pub records: u64,
    /// The earliest creation time among in-progress records.
    pub oldest_in_progress: Option<Timestamp>,
    /// The next instant at which retention has work.
    pub next_due: Option<Timestamp>,
    /// The last instant at which any record is still known (the expiry horizon).
    pub horizon: Option<Timestamp>,
    /// Entries of the expiry index.
    pub index_entries: u64,
    /// Events in the audit trail.
    pub audit_events: u64,
    /// Answers' audit events dropped since the store opened because writes kept failing and
    /// `AuditBatch::MAX_WAITING` events already waited (0 on a healthy disk).
    pub audit_events_dropped: u64,
    /// Size of the file on disk, for a file store.
    pub file_bytes: Option<u64>,
    /// Bytes of pages redb has allocated.
    pub allocated_bytes: u64,
    /// Bytes of user data stored.
    pub stored_bytes: u64,
    /// Bytes lost to fragmentation (reclaimed by compaction).
    pub fragmented_bytes: u64,
}

impl Stats {
    /// Records in `state`, over every operation.
    pub fn count(&self, state: StateKind) -> u64 {
        self.by_operation.values().filter_map(|states| states.get(&state)).sum()
    }
}

/// Which records [`Store::list`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListFilter {
    /// Only this tenant.
    pub tenant: Option<String>,
    /// Only this operation (with `tenant`, a range scan; alone, a filter).
    pub operation: Option<String>,
    /// Only this state.
    pub state: Option<StateKind>,
    /// Continue after this cursor ([`Listing::next_cursor`]).
    pub after: Option<String>,
    /// At most this many records (0 means 100).
    pub limit: usize,
}

/// One record of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedRecord {
    /// Scope and key.
    pub scoped: ScopedKey,
    /// The keyed hash of scope and key, as logs and the audit trail show it.
    pub key_hash: KeyHash,
    /// The record.
    pub record: Record,
}

/// A page of records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// The records.
    pub records: Vec<ListedRecord>,
    /// Pass as [`ListFilter::after`] for the next page; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// One problem [`Store::verify`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Which table.
    pub table: &'static str,
    /// What is wrong (keys appear only as their keyed hash).
    pub detail: String,
}

/// What [`Store::verify`] checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Whether redb's own integrity check passed without repair.
    pub storage_ok: bool,
    /// Records checked.
    pub records: u64,
    /// Index entries checked.
    pub index_entries: u64,
    /// Audit events checked.
    pub audit_events: u64,
    /// Problems found.
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    /// Whether the store is sound.
    pub fn is_ok(&self) -> bool {
        self.storage_ok && self.problems.is_empty()
    }
}

/// redb's page size (4 KiB, fixed by its file format).
const REDB_PAGE_BYTES: u64 = 4096;

impl Store {
    /// Counts records by operation and state, and reports sizes.
    ///
    /// # Errors
    /// Storage errors; [`Error::Corrupt`].
    pub fn stats(&self) -> Result<Stats, Error> {
        let mut stats = Stats::default();
        {
            let read = self.engine.db.begin_read()?;
            let records = read.open_table(RECORDS)?;
            for entry in records.iter()? {
                let (key, value) = entry?;
                let record = decode_record(value.value()).map_err(Corrupt::of("record"))?;
                let operation =
                    ScopedKey::decode(key.value()).map(|s| s.scope.operation().to_string()).unwrap_or_default();
                *stats.by_operation.entry(operation).or_default().entry(record.state.kind()).or_default() += 1;
                stats.records += 1;
                if let State::InProgress { .. } = record.state {
                    stats.oldest_in_progress =
                        Some(stats.oldest_in_progress.map_or(record.created_at, |t| t.min(record.created_at)));
                }
                let last_known = match &record.state {
                    State::Completed { forget_at, .. }
                    | State::Failed { forget_at, .. }
                    | State::Released { forget_at }
                    | State::Tombstone { forget_at, .. } => Some(*forget_at),
                    State::InProgress { .. } | State::Uncertain { .. } => None,
                };
                if let Some(last) = last_known {
                    stats.horizon = Some(stats.horizon.map_or(last, |h| h.max(last)));
                }
            }
            let index = read.open_table(EXPIRY)?;
            stats.index_entries = index.len()?;
            stats.next_due = index.first()?.and_then(|(key, _)| split_expiry_key(key.value()).map(|(due, _)| due));
            stats.audit_events = count_audit_events(&read.open_table(AUDIT)?)?;
            stats.audit_events_dropped = self.engine.audit_events_dropped();
        }
        match &self.engine.db {
            crate::db::Db::Writable(db) => {
                let tx = db.begin_write()?;
                let db_stats = tx.stats()?;
                tx.abort()?;
                stats.allocated_bytes = db_stats.allocated_pages() * db_stats.page_size() as u64;
                stats.stored_bytes = db_stats.stored_bytes();
                stats.fragmented_bytes = db_stats.fragmented_bytes();
            }
            // A read-only handle cannot see the allocator: the sizes are those of the store's
            // own tables (free pages of the file are not counted).
            crate::db::Db::ReadOnly(_) => self.table_sizes(&mut stats)?,
        }
        stats.file_bytes = self.engine.path.as_ref().and_then(|p| std::fs::metadata(p).ok()).map(|m| m.len());
        Ok(stats)
    }

    fn table_sizes(&self, stats: &mut Stats) -> Result<(), Error> {
        let read = self.engine.db.begin_read()?;
        let mut add = |table: redb::TableStats| {
            stats.allocated_bytes += (table.leaf_pages() + table.branch_pages()) * REDB_PAGE_BYTES;
            stats.stored_bytes += table.stored_bytes();
            stats.fragmented_bytes += table.fragmented_bytes();
        };
        add(read.open_table(crate::tables::META)?.stats()?);
        add(read.open_table(RECORDS)?.stats()?);
        add(read.open_table(EXPIRY)?.stats()?);
        add(read.open_table(AUDIT)?.stats()?);
        match read.open_table(crate::tables::INTENTS) {
            Ok(intents) => add(intents.stats()?),
            Err(redb::TableError::TableDoesNotExist(_)) => {}
            Err(other) => return Err(other.into()),
        }
        Ok(())
    }

    /// Lists records in key order (tenant, then operation, then key).
    ///
    /// # Errors
    /// Storage errors; [`Error::Corrupt`].
    pub fn list(&self, filter: &ListFilter) -> Result<Listing, Error> {
        let limit = if filter.limit == 0 { 100 } else { filter.limit };
        let prefix = match (&filter.tenant, &filter.operation) {
            (Some(tenant), operation) => ScopedKey::prefix(tenant, operation.as_deref()),
            (None, _) => Vec::new(),
        };
        let start = match filter.after.as_deref().map(|cursor| hex::decode(cursor).ok()) {
            Some(Some(cursor)) => cursor,
            Some(None) => return Ok(Listing::default()),
            None => prefix.clone(),
        };
        let read = self.engine.db.begin_read()?;
        let records = read.open_table(RECORDS)?;
        let mut listing = Listing::default();
        for entry in records.range(start.as_slice()..)? {
            let (key, value) = entry?;
            let key = key.value();
            if !key.starts_with(&prefix) {
                break;
            }
            if filter.after.is_some() && key == start.as_slice() {
                continue;
            }
            let Ok(scoped) = ScopedKey::decode(key) else { continue };
            if filter.operation.as_deref().is_some_and(|op| scoped.scope.operation() != op) {
                continue;
            }
            let record = decode_record(value.value()).map_err(Corrupt::of("record"))?;
            if filter.state.is_some_and(|state| record.state.kind() != state) {
                continue;
            }
            if listing.records.len() == limit {
                listing.next_cursor = listing.records.last().map(|last| hex::encode(last.scoped.encode()));
                break;
            }
            listing.records.push(ListedRecord { key_hash: self.engine.key_hash_of(key), scoped, record });
        }
        Ok(listing)
    }

    /// The newest `limit` audit events, oldest first, including events of read-only answers
    /// (replays, refusals) that are still buffered for the next commit.
    ///
    /// # Errors
    /// Storage errors; [`Error::Corrupt`].
    pub fn audit_events(&self, limit: usize) -> Result<Vec<AuditEvent>, Error> {
        let read = self.engine.db.begin_read()?;
        let audit = read.open_table(AUDIT)?;
        let mut buffered = self.engine.buffered_audit_events()?;
        let stored_limit = limit.saturating_sub(buffered.len());
        // Newest entries first, each entry's events oldest first.
        let mut newest_first = Vec::new();
        let mut stored = 0;
        for entry in audit.iter()?.rev() {
            if stored >= stored_limit {
                break;
            }
            let (_, value) = entry?;
            let entry = decode_entry(value.value()).map_err(Corrupt::of("audit event"))?;
            stored += entry.len();
            newest_first.push(entry);
        }
        let mut events: Vec<AuditEvent> = newest_first.into_iter().rev().flatten().collect();
        events.drain(..events.len().saturating_sub(stored_limit));
        let skip = buffered.len().saturating_sub(limit);
        events.extend(buffered.drain(skip..));
        Ok(events)
    }

    /// Checks the store: redb's integrity check (which repairs what redb can), then every
    /// record, index entry and audit event is decoded and cross-checked, and every record is
    /// checked against the rules every record keeps ([`Record::validate`]).
    ///
    /// # Errors
    /// [`Error::OtherHandles`] while clones of this handle are alive; [`Error::ReadOnly`] on
    /// a read-only store (redb's integrity check writes: check a copy of the file instead);
    /// storage errors that prevent the check from running.
    pub fn verify(&mut self) -> Result<VerifyReport, Error> {
        let mut report = VerifyReport::default();
        // redb checks integrity only without live read transactions: drop the cached snapshot.
        let engine = self.exclusive("verify")?;
        engine.snapshots.invalidate();
        match engine.db.writable_mut()?.check_integrity() {
            Ok(ok) => report.storage_ok = ok,
            Err(error) => {
                report.problems.push(Problem { table: "redb", detail: format!("integrity check failed: {error}") });
            }
        }
        if let Err(error) = self.verify_tables(&mut report) {
            report.problems.push(Problem { table: "redb", detail: format!("could not read the store: {error}") });
        }
        Ok(report)
    }

    fn verify_tables(&self, report: &mut VerifyReport) -> Result<(), Error> {
        let read = self.engine.db.begin_read()?;
        let records = read.open_table(RECORDS)?;
        let index = read.open_table(EXPIRY)?;
        let mut problem = |table, detail: String| report.problems.push(Problem { table, detail });
        let mut record_count = 0;
        for entry in records.iter()? {
            let (key, value) = entry?;
            record_count += 1;
            let hash = self.engine.key_hash_of(key.value());
            if let Err(error) = ScopedKey::decode(key.value()) {
                problem("idemdb_records", format!("key {hash}: {error}"));
            }
            match decode_record(value.value()) {
                Err(error) => problem("idemdb_records", format!("record {hash}: {error}")),
                Ok(record) => {
                    if let Err(error) = record.validate(idemdb_core::MAX_RESULT_BYTES_LIMIT) {
                        problem("idemdb_records", format!("record {hash}: {error}"));
                    }
                    if let Some(due) = record.due_at() {
                        let expected = crate::tables::expiry_key(due, key.value());
                        if index.get(expected.as_slice())?.is_none() {
                            problem("idemdb_expiry", format!("record {hash} has no index entry for {due}"));
                        }
                    }
                }
            }
        }
        let mut index_count = 0;
        for entry in index.iter()? {
            let (key, _) = entry?;
            index_count += 1;
            let Some((due, scoped)) = split_expiry_key(key.value()) else {
                problem("idemdb_expiry", "entry shorter than its 8-byte time".into());
                continue;
            };
            if crate::tables::is_workflow_entry(scoped) {
                // Retention of an outbox item, delivery or job (checked with its table below).
                continue;
            }
            let hash = self.engine.key_hash_of(scoped);
            match records.get(scoped)? {
                None => problem("idemdb_expiry", format!("entry for {hash} at {due} has no record")),
                Some(value) => {
                    if decode_record(value.value()).ok().and_then(|r| r.due_at()) != Some(due) {
                        problem("idemdb_expiry", format!("entry for {hash} at {due} does not match the record"));
                    }
                }
            }
        }
        let mut audit_count = 0;
        for (position, entry) in read.open_table(AUDIT)?.iter()?.enumerate() {
            let (_, value) = entry?;
            match decode_entry(value.value()) {
                Ok(events) => audit_count += events.len() as u64,
                Err(error) => problem("idemdb_audit", format!("entry {}: {error}", position + 1)),
            }
        }
        #[cfg(feature = "workflow")]
        crate::workflow::verify_tables(&read, &mut problem)?;
        report.records = record_count;
        report.index_entries = index_count;
        report.audit_events = audit_count;
        Ok(())
    }

    /// Compacts the file, returning freed pages to the file system. Returns whether anything
    /// was compacted. Run it after a large purge; it needs no other handle to be open.
    ///
    /// # Errors
    /// [`Error::OtherHandles`] while clones of this handle are alive; [`Error::ReadOnly`] on
    /// a read-only store; storage errors.
    pub fn compact(&mut self) -> Result<bool, Error> {
        // redb compacts only without live read transactions: drop the cached snapshot.
        let engine = self.exclusive("compact")?;
        if engine.open_journal().is_some() {
            // Checkpoint first: compaction works on the durable file.
            crate::flush::flush(engine)?;
        }
        engine.snapshots.invalidate();
        Ok(engine.db.writable_mut()?.compact()?)
    }

    /// The engine, for work that needs the only handle (redb's integrity check and compaction
    /// take the database exclusively).
    fn exclusive(&mut self, action: &'static str) -> Result<&mut crate::engine::Engine, Error> {
        // The audit writer's thread holds the engine while it runs: it lets go first.
        if std::sync::Arc::strong_count(&self.audit_flusher) == 1 {
            self.audit_flusher.stop();
        }
        std::sync::Arc::get_mut(&mut self.engine).ok_or(Error::OtherHandles { action })
    }
}

/// Events in the audit table (entries hold one event or a segment of them); an entry that
/// does not decode counts as one (`verify` names it).
pub(crate) fn count_audit_events(audit: &impl ReadableTable<[u8; 16], &'static [u8]>) -> Result<u64, Error> {
    let mut count = 0;
    for entry in audit.iter()? {
        let (_, value) = entry?;
        count += decode_entry(value.value()).map_or(1, |events| events.len() as u64);
    }
    Ok(count)
}
