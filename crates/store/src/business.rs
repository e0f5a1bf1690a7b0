//! The business write on redb: row puts and deletes and the store's transitions in one `Txn`
//! ([`Store::commit_business`]), and reads of row tables. The rows' layout and replay are in
//! `rows.rs`.

use redb::{ReadableTable, TableError};

use idemdb_core::{BusinessWrite, OutboxItem, Row, RowTable, RowWrite, Settle, check_row};

use crate::rows::{definition, list, logged_key};
use crate::tables::TableId;
use crate::{Error, Store, Txn};

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
    /// [`Refusal::Row`](idemdb_core::Refusal::Row) for a partition or id the limits refuse, or a value too large; storage
    /// errors (a table of that name with other types).
    pub fn put_row(&mut self, table: RowTable, partition: &str, id: &str, value: &[u8]) -> Result<(), Error> {
        check_row(partition, id, Some(value))?;
        self.put_logged(TableId::Rows, &logged_key(table, partition, id), value)
    }

    /// Deletes the row `(partition, id)` of `table`; returns whether it was there.
    ///
    /// # Errors
    /// As [`Txn::put_row`].
    pub fn delete_row(&mut self, table: RowTable, partition: &str, id: &str) -> Result<bool, Error> {
        check_row(partition, id, None)?;
        if self.row(table, partition, id)?.is_none() {
            return Ok(false);
        }
        self.remove_logged(TableId::Rows, &logged_key(table, partition, id))?;
        Ok(true)
    }

    /// The row `(partition, id)` of `table`, as this transaction sees it.
    ///
    /// # Errors
    /// Storage errors.
    pub fn row(&self, table: RowTable, partition: &str, id: &str) -> Result<Option<Vec<u8>>, Error> {
        let table = self.tx_closing_kept_tables().open_table(definition(table.name()))?;
        Ok(table.get((partition, id))?.map(|value| value.value().to_vec()))
    }

    /// Applies `write` in this transaction: every row change, then every settlement in order
    /// (see [`Store::commit_business`]). Returns the outbox items the effect settlements left.
    ///
    /// # Errors
    /// [`Refusal::Row`](idemdb_core::Refusal::Row) before anything is written; the first refused settlement (the
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
        #[cfg_attr(not(feature = "workflow"), allow(unused_mut))]
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
    /// use idemdb::{BusinessWrite, Fingerprint, IdempotencyKey, Reservation, Reserve, RowTable, Scope, Store};
    /// const ORDERS: RowTable = RowTable::new("app_orders");
    ///
    /// let store = Store::in_memory()?;
    /// let scope = Scope::new("acme", "place_order")?;
    /// let key = IdempotencyKey::new("order-842")?;
    /// let Reservation::Acquired(lease) = store.reserve(Reserve::new(&scope, &key, &Fingerprint::from_bytes([9; 32])))? else { panic!() };
    /// store.commit_business(
    ///     BusinessWrite::new().put(ORDERS, "acme", "order-842", b"1050".to_vec()).complete(&lease, b"placed".to_vec()),
    /// )?;
    /// assert_eq!(store.rows(ORDERS, "acme", None, 0)?.len(), 1);
    /// let replay = store.reserve(Reserve::new(&scope, &key, &Fingerprint::from_bytes([9; 32])))?;
    /// assert!(matches!(replay, Reservation::Replay { ref body, .. } if body == b"placed"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Refusal::Row`](idemdb_core::Refusal::Row) for a row the limits refuse; the first settlement the store refuses
    /// ([`Refusal::Transition`](idemdb_core::Refusal::Transition), [`Refusal::Outbox`](idemdb_core::Refusal::Outbox)); storage errors. On any error nothing of the
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
