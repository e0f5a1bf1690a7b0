//! Row tables: the application's rows, `(partition, id)` → bytes, in tables of the store's own
//! database ([`RowTable`]), written through the journal like the store's own tables.
//!
//! Every row table has the same redb types, `(&str, &str)` → `&[u8]`, so recovery replays a
//! row without being told about the table: a journal mutation of id [`T_ROWS`] carries the
//! table's name in front of the key (`name length: u32 BE · name · partition length: u32 BE ·
//! partition · id`), and the replay opens the table by that name. That is what typed
//! application tables ([`Txn::table`]) cannot do: their types must be registered at every open,
//! so an operator's tool cannot replay them. For the same reason a backup and a rebuild copy
//! every row table without being told its name ([`row_tables`]).

use redb::{ReadTransaction, ReadableTable, TableDefinition, TableError, TableHandle, WriteTransaction};

use idemdb_core::{BusinessWrite, OutboxItem, Row, RowTable, RowWrite, Settle, check_row_key, check_table_name};

use crate::journal::apply::Applied;
use crate::tables::T_ROWS;
use crate::{Error, Store, Txn};

/// The redb table of the row table `name`.
fn definition(name: &str) -> TableDefinition<'_, (&'static str, &'static str), &'static [u8]> {
    TableDefinition::new(name)
}

/// The logged key of a row: `name length · name · partition length · partition · id`.
fn logged_key(table: RowTable, partition: &str, id: &str) -> Vec<u8> {
    let name = table.name();
    let mut out = Vec::with_capacity(8 + name.len() + partition.len() + id.len());
    for part in [name, partition] {
        // Both are at most a few KiB (checked), so the length fits a u32.
        out.extend_from_slice(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(part.as_bytes());
    }
    out.extend_from_slice(id.as_bytes());
    out
}

/// Splits a logged key into the table's name, the partition and the id.
fn split_logged(key: &[u8]) -> Option<(&str, &str, &str)> {
    fn take(rest: &[u8]) -> Option<(&str, &[u8])> {
        let (len, rest) = rest.split_first_chunk::<4>()?;
        let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
        if rest.len() < len {
            return None;
        }
        let (part, rest) = rest.split_at(len);
        Some((std::str::from_utf8(part).ok()?, rest))
    }
    let (name, rest) = take(key)?;
    let (partition, rest) = take(rest)?;
    let id = std::str::from_utf8(rest).ok()?;
    check_table_name(name).ok()?;
    Some((name, partition, id))
}

/// Writes (`Some`) or removes (`None`) one logged row in `tx`: the write path and the replay.
pub(crate) fn apply(tx: &WriteTransaction, key: &[u8], value: Option<&[u8]>) -> Result<(), Applied> {
    let (name, partition, id) = split_logged(key).ok_or(Applied::Malformed)?;
    let mut table = tx.open_table(definition(name))?;
    match value {
        Some(value) => drop(table.insert((partition, id), value)?),
        None => drop(table.remove((partition, id))?),
    }
    Ok(())
}

/// The names of the row tables in `read`: the tables that are not the store's own (`known`)
/// and open with the row types. A backup and a rebuild copy them without being told of them.
pub(crate) fn row_tables(read: &ReadTransaction, known: &[String]) -> Result<Vec<String>, Error> {
    let mut found = Vec::new();
    for table in read.list_tables()? {
        let name = table.name();
        if known.iter().any(|k| k == name) || check_table_name(name).is_err() {
            continue;
        }
        match read.open_table(definition(name)) {
            Ok(_) => found.push(name.to_string()),
            Err(TableError::TableTypeMismatch { .. }) => {}
            Err(other) => return Err(other.into()),
        }
    }
    Ok(found)
}

/// Reads rows of `partition` after `after`, at most `limit` (0: all), from an open table.
fn list(
    table: &impl ReadableTable<(&'static str, &'static str), &'static [u8]>,
    partition: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<Row>, Error> {
    let start = (partition, after.unwrap_or(""));
    let mut rows = Vec::new();
    for entry in table.range(start..)? {
        let (key, value) = entry?;
        let (p, id) = key.value();
        if p != partition {
            break;
        }
        if after == Some(id) {
            continue;
        }
        rows.push(Row { id: id.to_string(), value: value.value().to_vec() });
        if rows.len() == limit {
            break;
        }
    }
    Ok(rows)
}

impl Txn<'_> {
    /// Puts the row `(partition, id)` of `table` (replacing any row there); the write rides
    /// the store's journal. No registration is needed: every row table has the same types.
    ///
    /// ```
    /// use idemdb::{RowTable, Store};
    /// const ORDERS: RowTable = RowTable::new("app_orders");
    /// let store = Store::in_memory()?;
    /// store.write(|txn| txn.put_row(ORDERS, "acme", "order-842", b"1050"))?;
    /// assert_eq!(store.row(ORDERS, "acme", "order-842")?, Some(b"1050".to_vec()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Row`] for a partition or id the limits refuse, or a value too large; storage
    /// errors (a table of that name with other types).
    pub fn put_row(&mut self, table: RowTable, partition: &str, id: &str, value: &[u8]) -> Result<(), Error> {
        check_row_key("partition", partition)?;
        check_row_key("id", id)?;
        if value.len() > idemdb_core::MAX_ROW_VALUE_LEN {
            return Err(
                idemdb_core::RowError::ValueTooLarge { len: value.len(), max: idemdb_core::MAX_ROW_VALUE_LEN }.into()
            );
        }
        self.put_logged(T_ROWS, &logged_key(table, partition, id), value)
    }

    /// Deletes the row `(partition, id)` of `table`; returns whether it was there.
    ///
    /// # Errors
    /// As [`Txn::put_row`].
    pub fn delete_row(&mut self, table: RowTable, partition: &str, id: &str) -> Result<bool, Error> {
        check_row_key("partition", partition)?;
        check_row_key("id", id)?;
        if self.row(table, partition, id)?.is_none() {
            return Ok(false);
        }
        self.remove_logged(T_ROWS, &logged_key(table, partition, id))?;
        Ok(true)
    }

    /// The row `(partition, id)` of `table`, as this transaction sees it.
    ///
    /// # Errors
    /// Storage errors.
    pub fn row(&self, table: RowTable, partition: &str, id: &str) -> Result<Option<Vec<u8>>, Error> {
        let table = self.tx().open_table(definition(table.name()))?;
        Ok(table.get((partition, id))?.map(|value| value.value().to_vec()))
    }

    /// Applies `write` in this transaction: every row change, then every settlement in order
    /// (see [`Store::commit_business`]). Returns the outbox items the effect settlements left.
    ///
    /// # Errors
    /// [`Error::Row`] before anything is written; the first refused settlement (the
    /// transaction must then be rolled back, as [`Store::write`] does with an `Err`).
    pub fn apply_business(&mut self, write: BusinessWrite) -> Result<Vec<OutboxItem>, Error> {
        write.check()?;
        let (rows, settles) = write.into_parts();
        for row in rows {
            match row {
                RowWrite::Put { table, partition, id, value } => self.put_row(table, &partition, &id, &value)?,
                RowWrite::Delete { table, partition, id } => drop(self.delete_row(table, &partition, &id)?),
            }
        }
        let mut items = Vec::new();
        for settle in settles {
            match settle {
                Settle::Complete { lease, result } => self.complete(&lease, result)?,
                Settle::Fail { lease, failure } => self.fail(&lease, failure)?,
                #[cfg(feature = "workflow")]
                Settle::ReportEffect { claim, report } => items.push(self.report_effect(&claim, report)?),
                #[cfg(feature = "workflow")]
                Settle::ResolveEffect { scope, key, effect, state, cause } => {
                    items.push(self.resolve_effect(&scope, &key, &effect, state, cause)?);
                }
                #[cfg(not(feature = "workflow"))]
                Settle::ReportEffect { .. } | Settle::ResolveEffect { .. } => {
                    return Err(Error::Internal("this build has no outbox (feature `workflow`)"));
                }
            }
        }
        Ok(items)
    }
}

impl Store {
    /// Commits `write` — application rows, then the store's transitions — in one transaction:
    /// all of it or none. With the store's journal on (the default) that is one journal
    /// append; the rows need no registration and survive a crash, a backup and a rebuild
    /// like the store's own tables. The same call is
    /// [`BusinessStore::commit_business`](idemdb_interface::BusinessStore::commit_business)
    /// on every backend.
    ///
    /// ```
    /// use idemdb::{BusinessWrite, Fingerprint, IdempotencyKey, Reservation, RowTable, Scope, Store};
    /// const ORDERS: RowTable = RowTable::new("app_orders");
    ///
    /// let store = Store::in_memory()?;
    /// let scope = Scope::new("acme", "place_order")?;
    /// let key = IdempotencyKey::new("order-842")?;
    /// let Reservation::Acquired(lease) = store.reserve(&scope, &key, &Fingerprint::from_bytes([9; 32]))? else { panic!() };
    /// store.commit_business(
    ///     BusinessWrite::new().put(ORDERS, "acme", "order-842", b"1050".to_vec()).complete(&lease, b"placed".to_vec()),
    /// )?;
    /// assert_eq!(store.rows(ORDERS, "acme", None, 0)?.len(), 1);
    /// let replay = store.reserve(&scope, &key, &Fingerprint::from_bytes([9; 32]))?;
    /// assert!(matches!(replay, Reservation::Replay { ref body, .. } if body == b"placed"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Row`] for a row the limits refuse; the first settlement the store refuses
    /// ([`Error::Transition`], [`Error::Outbox`]); storage errors. On any error nothing of the
    /// write was committed, except [`Error::CommitUnknown`] (repeat to learn what was stored).
    pub fn commit_business(&self, write: BusinessWrite) -> Result<Vec<OutboxItem>, Error> {
        self.write(|txn| txn.apply_business(write))
    }

    /// The row `(partition, id)` of `table`, if there is one.
    ///
    /// # Errors
    /// Storage errors.
    pub fn row(&self, table: RowTable, partition: &str, id: &str) -> Result<Option<Vec<u8>>, Error> {
        let read = self.engine.db.begin_read()?;
        match read.open_table(definition(table.name())) {
            Ok(rows) => Ok(rows.get((partition, id))?.map(|value| value.value().to_vec())),
            Err(TableError::TableDoesNotExist(_)) => Ok(None),
            Err(other) => Err(other.into()),
        }
    }

    /// The rows of `partition` in `table` whose ids come after `after` (`None`: from the
    /// first), in byte order of their ids, at most `limit` of them (`0`: all).
    ///
    /// # Errors
    /// Storage errors.
    pub fn rows(&self, table: RowTable, partition: &str, after: Option<&str>, limit: usize) -> Result<Vec<Row>, Error> {
        let read = self.engine.db.begin_read()?;
        match read.open_table(definition(table.name())) {
            Ok(rows) => list(&rows, partition, after, limit),
            Err(TableError::TableDoesNotExist(_)) => Ok(Vec::new()),
            Err(other) => Err(other.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logged_keys_round_trip() {
        const T: RowTable = RowTable::new("app_t");
        for (partition, id) in [("", ""), ("acme", "order-842"), ("ü", "a:b\u{1}")] {
            let key = logged_key(T, partition, id);
            assert_eq!(split_logged(&key), Some(("app_t", partition, id)));
        }
        // A name the rules refuse, a cut length or bad UTF-8 is malformed, not a table.
        assert_eq!(split_logged(&logged_key(RowTable::new("ok"), "p", "i")[..6]), None);
        let mut bad_name = vec![0, 0, 0, 2];
        bad_name.extend_from_slice(b"Xy\0\0\0\0");
        assert_eq!(split_logged(&bad_name), None);
        let mut bad_utf8 = logged_key(T, "p", "");
        bad_utf8.push(0xFF);
        assert_eq!(split_logged(&bad_utf8), None);
    }
}
