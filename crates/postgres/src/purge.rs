//! Retention: results past their response TTL become tombstones; tombstones and released
//! records past their last expiry are removed — through the `due_at` index, so the cost follows
//! the number of due records. The rules are the core's ([`Record::retention`]).

use idemdb_core::{AuditKind, IdempotencyKey, PurgeReport, Record, Retention, Scope, decode_record};

use crate::audit::to_sql_ms;
use crate::error::Error;
use crate::txn::PgTxn;

/// Most undecodable records one pass steps over without spending its budget (so one damaged
/// row cannot stop retention).
const MAX_CORRUPT_SKIPPED: usize = 1024;

/// One pass in `txn`: at most `budget` due records and `budget` old audit events.
pub(crate) async fn purge(txn: &mut PgTxn, budget: usize) -> Result<PurgeReport, Error> {
    let now = txn.time().await?;
    let inner = txn.inner_arc();
    let sql = &inner.sql;
    let limit = i64::try_from(budget.saturating_add(1).saturating_add(MAX_CORRUPT_SKIPPED)).unwrap_or(i64::MAX);
    let rows = txn.query(&sql.purge_due, &[&to_sql_ms(now.as_millis()), &limit]).await?;
    let mut report = PurgeReport::default();
    let mut done = 0usize;
    let mut removed_fence = 0u64;
    for row in &rows {
        if done == budget {
            report.more = true;
            break;
        }
        let identity = (|| {
            let tenant: String = row.try_get(0).ok()?;
            let operation: String = row.try_get(1).ok()?;
            let key: String = row.try_get(2).ok()?;
            Some((Scope::new(tenant, operation).ok()?, IdempotencyKey::new(key).ok()?))
        })();
        let bytes: Option<Vec<u8>> = row.try_get(3).ok();
        let record = bytes.as_deref().map(decode_record);
        let (Some((scope, key)), Some(bytes), Some(Ok(record))) = (identity, &bytes, record) else {
            report.corrupt += 1;
            continue;
        };
        done += 1;
        match record.retention(now) {
            Retention::Keep => {}
            Retention::Tombstone(tombstone) => {
                txn.write(&sql.update, &scope, &key, &tombstone, Some(bytes)).await?;
                report.tombstoned += 1;
                purged(txn, now, &scope, &key, &record);
            }
            Retention::Forget => {
                txn.delete(&scope, &key, bytes).await?;
                removed_fence = removed_fence.max(record.fence);
                report.forgotten += 1;
                purged(txn, now, &scope, &key, &record);
            }
        }
    }
    if removed_fence > 0 {
        // In the same transaction as the removals: a later binding of a removed key gets a
        // fence above every lease the removed record ever issued.
        txn.query(&sql.raise_floor, &[&to_sql_ms(removed_fence)]).await?;
    }
    let retention_ms = u64::try_from(inner.settings.audit_retention.as_millis()).unwrap_or(u64::MAX);
    let cutoff = to_sql_ms(now.as_millis().saturating_sub(retention_ms));
    let audit_limit = i64::try_from(budget).unwrap_or(i64::MAX);
    let removed = txn.query(&sql.audit_purge_counted, &[&cutoff, &audit_limit]).await?;
    let removed: i64 = removed.first().map(|row| row.try_get(0)).transpose().map_err(Error::from_driver)?.unwrap_or(0);
    report.audit_removed = u64::try_from(removed).unwrap_or(0);
    if report.audit_removed as usize == budget {
        let left = txn.query(&sql.audit_due, &[&cutoff]).await?;
        if left.first().map(|row| row.try_get::<_, bool>(0)).transpose().map_err(Error::from_driver)? == Some(true) {
            report.more = true;
        }
    }
    Ok(report)
}

fn purged(txn: &mut PgTxn, now: idemdb_core::Timestamp, scope: &Scope, key: &IdempotencyKey, record: &Record) {
    let row = txn.inner_arc().event(now, AuditKind::Purged, scope, key, record.fence, None, None);
    txn.push_event(row);
}
