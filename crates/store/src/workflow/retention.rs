//! Retention of workflow tables through the store's one expiry index: finished outbox items,
//! old deliveries and finished jobs have entries `due · marker · key` there (see
//! `tables.rs`), so a purge pass costs what is due, whatever the tables hold.

use redb::ReadableTable;

use idemdb_core::{Corrupt, DeliveryRecord, JobRecord, ObjectRecord, OutboxItem, Timestamp};

use crate::Error;
use crate::journal::apply::TableId;
use crate::tables::{DELIVERIES, EXPIRY_DELIVERY, EXPIRY_JOB, EXPIRY_OUTBOX, JOBS, OBJECTS, OUTBOX};
use crate::txn::Txn;

/// Removes what a due workflow entry (`rest` = marker · key) names, if it is still due at
/// `due`. Returns whether anything was removed; the caller removes the index entry.
pub(crate) fn forget_entry(txn: &mut Txn<'_>, rest: &[u8], due: Timestamp) -> Result<bool, Error> {
    let Some((&marker, key)) = rest.split_first() else { return Ok(false) };
    match marker {
        EXPIRY_OUTBOX => {
            let Some(item) = txn.load_effect(key)? else { return Ok(false) };
            let policy = txn.engine().policy(item.scope.operation()).clone();
            if item.forget_at(&policy) != Some(due) {
                return Ok(false);
            }
            txn.remove_logged(TableId::Outbox, key)?;
            Ok(true)
        }
        EXPIRY_DELIVERY => {
            if txn.tx_closing_kept_tables().open_table(DELIVERIES)?.get(key)?.is_none() {
                return Ok(false);
            }
            txn.remove_logged(TableId::Deliveries, key)?;
            Ok(true)
        }
        EXPIRY_JOB => {
            let due_now = match txn.tx_closing_kept_tables().open_table(JOBS)?.get(key)? {
                Some(value) => JobRecord::decode(value.value()).map_err(Corrupt::of("job"))?.due_at(),
                None => return Ok(false),
            };
            if due_now != Some(due) {
                return Ok(false);
            }
            txn.remove_logged(TableId::Jobs, key)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Decodes one table entry (key, value).
type Decoder<'a> = &'a dyn Fn(&[u8], &[u8]) -> Result<(), idemdb_core::DecodeError>;

/// Decodes every outbox item, delivery, object and job (for `verify`), reporting each that
/// does not decode through `problem(table, detail)`.
pub(crate) fn verify_tables(
    read: &redb::ReadTransaction,
    problem: &mut impl FnMut(&'static str, String),
) -> Result<(), Error> {
    let mut check =
        |name: &'static str, table: redb::TableDefinition<&[u8], &[u8]>, decode: Decoder<'_>| -> Result<(), Error> {
            let table = match read.open_table(table) {
                Ok(table) => table,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
                Err(error) => return Err(error.into()),
            };
            for (position, entry) in table.iter()?.enumerate() {
                let (key, value) = entry?;
                if let Err(error) = decode(key.value(), value.value()) {
                    problem(name, format!("entry {}: {error}", position + 1));
                }
            }
            Ok(())
        };
    check("idemdb_outbox", OUTBOX, &|key, value| OutboxItem::decode(key, value).map(drop))?;
    check("idemdb_deliveries", DELIVERIES, &|_, value| DeliveryRecord::decode(value).map(drop))?;
    check("idemdb_objects", OBJECTS, &|_, value| ObjectRecord::decode(value).map(drop))?;
    check("idemdb_jobs", JOBS, &|_, value| JobRecord::decode(value).map(drop))?;
    Ok(())
}
