//! Retention: turn expired results into tombstones and forget expired tombstones, through the
//! time-ordered expiry index, so the cost follows the number of due records.

use redb::ReadableTable;

use idemdb_core::{AuditKind, PurgeReport, Retention, ScopedKey, Timestamp};

use crate::audit::decode_entry;
use crate::journal::apply::TableId;
use crate::tables::{AUDIT, EXPIRY, audit_key, expiry_key, split_expiry_key};
use crate::txn::Txn;
use crate::{Error, Store};

impl Store {
    /// Applies retention to at most `budget` due records (and at most `budget` old audit
    /// events) in one write transaction. Call it again while [`PurgeReport::more`] is set.
    ///
    /// A record is only ever changed at or after the instants it stored when written: results
    /// become tombstones at their response TTL; tombstones are forgotten at their tombstone
    /// TTL. A known key therefore never becomes unknown early.
    ///
    /// # Errors
    /// Storage errors; [`Error::Corrupt`] for an undecodable record (nothing is changed).
    pub fn purge_expired(&self, budget: usize) -> Result<PurgeReport, Error> {
        self.write(|txn| purge(txn, budget))
    }

    /// Counts what [`Store::purge_expired`] would do now with an unlimited budget, without
    /// writing anything.
    ///
    /// # Errors
    /// Storage errors; [`Error::Corrupt`].
    pub fn purge_preview(&self) -> Result<PurgeReport, Error> {
        let now = self.decision_time().retention;
        let read = self.engine.db.begin_read()?;
        let index = read.open_table(EXPIRY)?;
        let mut report = PurgeReport::default();
        let upper = expiry_key(Timestamp::from_millis(now.as_millis().saturating_add(1)), &[]);
        for entry in index.range(..upper.as_slice())? {
            let (key, _) = entry?;
            let Some((_, scoped)) = split_expiry_key(key.value()) else {
                report.stale_index_entries += 1;
                continue;
            };
            if crate::tables::is_workflow_entry(scoped) {
                report.workflow_forgotten += 1;
                continue;
            }
            let record = match self.engine.get_encoded(scoped) {
                Ok(record) => record,
                Err(Error::Corrupt(_)) => {
                    report.corrupt += 1;
                    continue;
                }
                Err(other) => return Err(other),
            };
            match record.map(|record| record.retention(now)) {
                Some(Retention::Tombstone(_)) => report.tombstoned += 1,
                Some(Retention::Forget) => report.forgotten += 1,
                Some(Retention::Keep) | None => report.stale_index_entries += 1,
            }
        }
        let cutoff = now
            .as_millis()
            .saturating_sub(u64::try_from(self.engine.config.audit_retention.as_millis()).unwrap_or(u64::MAX));
        let audit = read.open_table(AUDIT)?;
        for entry in audit.range(..audit_key(Timestamp::from_millis(cutoff), 0))? {
            let (_, value) = entry?;
            report.audit_removed += decode_entry(value.value()).map_or(1, |events| events.len() as u64);
        }
        Ok(report)
    }
}

/// Most corrupt records one purge pass steps over.
const MAX_CORRUPT_SKIPPED: usize = 1024;

fn purge(txn: &mut Txn<'_>, budget: usize) -> Result<PurgeReport, Error> {
    // Retention time: only measured or confirmed time makes a record less known.
    let now = txn.retention_time();
    // Every purge keeps the clock, even one with nothing due.
    txn.persist_clock_logged(true)?;
    let mut report = PurgeReport::default();
    let upper = expiry_key(Timestamp::from_millis(now.as_millis().saturating_add(1)), &[]);
    // Corrupt records are skipped without spending budget, up to a bound, so one damaged
    // record cannot stop retention for the whole store.
    let scan = budget.saturating_add(1).saturating_add(MAX_CORRUPT_SKIPPED);
    let due: Vec<Vec<u8>> = {
        let index = txn.tx_closing_kept_tables().open_table(EXPIRY)?;
        let mut keys = Vec::new();
        for entry in index.range(..upper.as_slice())?.take(scan) {
            keys.push(entry?.0.value().to_vec());
        }
        keys
    };
    let mut done = 0usize;
    for index_key in due {
        if done == budget {
            report.more = true;
            break;
        }
        done += 1;
        let Some((due_at, scoped)) = split_expiry_key(&index_key) else {
            txn.remove_logged(TableId::Expiry, &index_key)?;
            report.stale_index_entries += 1;
            continue;
        };
        if crate::tables::is_workflow_entry(scoped) {
            // A build without the workflow primitives leaves their retention to one with them.
            #[cfg(feature = "workflow")]
            {
                if crate::workflow::forget_entry(txn, scoped, due_at)? {
                    report.workflow_forgotten += 1;
                } else {
                    report.stale_index_entries += 1;
                }
                txn.remove_logged(TableId::Expiry, &index_key)?;
            }
            #[cfg(not(feature = "workflow"))]
            let _ = due_at;
            continue;
        }
        let record = match txn.load(scoped) {
            Err(Error::Corrupt(_)) => {
                report.corrupt += 1;
                done -= 1;
                continue;
            }
            other => other?,
        };
        let record = match record {
            Some(record) if record.due_at() == Some(due_at) => record,
            _ => {
                txn.remove_logged(TableId::Expiry, &index_key)?;
                report.stale_index_entries += 1;
                continue;
            }
        };
        match record.retention(now) {
            Retention::Keep => {}
            Retention::Tombstone(tombstone) => {
                txn.put(scoped, Some(&record), &tombstone)?;
                report.tombstoned += 1;
                audit_purge(txn, scoped, record.fence);
            }
            Retention::Forget => {
                txn.remove(scoped, &record)?;
                report.forgotten += 1;
                audit_purge(txn, scoped, record.fence);
            }
        }
    }
    // Old audit events go in the same pass, oldest first.
    let retention_ms = u64::try_from(txn_audit_retention(txn).as_millis()).unwrap_or(u64::MAX);
    let cutoff = audit_key(Timestamp::from_millis(now.as_millis().saturating_sub(retention_ms)), 0);
    // An entry (one event, or a segment keyed by its newest event) goes once all its events
    // are past retention. The budget counts entries.
    let (due, more) = {
        let audit = txn.tx_closing_kept_tables().open_table(AUDIT)?;
        let mut due = Vec::new();
        let mut more = false;
        for entry in audit.range(..cutoff)? {
            let (key, value) = entry?;
            if due.len() == budget {
                more = true;
                break;
            }
            due.push((key.value(), decode_entry(value.value()).map_or(1, |e| e.len())));
        }
        (due, more)
    };
    for (key, events) in due {
        txn.remove_logged(TableId::Audit, &key)?;
        report.audit_removed += events as u64;
    }
    report.more |= more;
    Ok(report)
}

fn txn_audit_retention(txn: &Txn<'_>) -> std::time::Duration {
    txn.engine().config.audit_retention
}

fn audit_purge(txn: &mut Txn<'_>, scoped: &[u8], fence: u64) {
    if let Ok(decoded) = ScopedKey::decode(scoped) {
        txn.event(AuditKind::Purged, &decoded.scope, scoped, fence, None, None);
    }
}
