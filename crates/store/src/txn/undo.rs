//! One operation's writes inside a shared write transaction, and how to take them back.
//!
//! The transaction contract (`docs/design.md`, "Transaction contract"): an operation that
//! returns an error leaves no write behind. Alone in a transaction that is redb's own rollback
//! (the transaction is dropped, not committed). In a group commit many operations share one
//! transaction, and redb cannot roll part of one back (its savepoints can only be taken before
//! a transaction's first write). So [`Txn::operation`] keeps an undo log while an operation
//! runs: before the operation's first write to a key, the key's value as it was; and the
//! lengths of the journal log, the audit events and the written-records list. When the
//! operation returns `Err`, every key goes back to its value (newest first), and the journal
//! mutations, audit events and read-back entries it added are dropped. A write the log cannot
//! take back (an application table, the raw redb transaction) spoils the transaction instead:
//! nothing of it commits, and every caller in it gets the error.

use redb::ReadableTable;

use crate::Error;
use crate::journal::apply::TableId;
use crate::tables::{AUDIT, INTENTS, META, RECONCILE};

use super::{Txn, Undo};

impl Txn<'_> {
    /// Runs one operation of a batch: its writes stay when it returns `Ok` and are taken back
    /// when it returns `Err` (see the module doc). `undoable: false` (an operation alone in its
    /// transaction) keeps no log: an error spoils the transaction, which is then not committed.
    pub(crate) fn operation<R>(
        &mut self,
        undoable: bool,
        operation: impl FnOnce(&mut Txn<'_>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        self.raw_in_operation.store(false, std::sync::atomic::Ordering::Relaxed);
        if undoable {
            self.undo = Some(Undo {
                log_len: self.log.as_ref().map_or(0, Vec::len),
                audit_len: self.audit.len(),
                written_len: self.written.len(),
                ..Undo::default()
            });
        }
        let answer = operation(self);
        if self.raw_in_operation.load(std::sync::atomic::Ordering::Relaxed) {
            self.irreversible("the raw redb transaction");
        }
        let undo = self.undo.take();
        if let Err(error) = &answer {
            match undo {
                Some(undo) => {
                    if let Err(spoiled) = self.take_back(undo) {
                        self.spoil(spoiled);
                    }
                }
                None => self.spoil(error.clone()),
            }
        }
        answer
    }

    /// Nothing of this transaction may commit: [`Txn::finish`] answers with `error`.
    fn spoil(&mut self, error: Error) {
        if self.spoiled.is_none() {
            self.spoiled = Some(error);
        }
    }

    /// Records the value of `key` in `table` before the running operation's first write to it.
    pub(super) fn before_write(&mut self, table: TableId, key: &[u8]) -> Result<(), Error> {
        let Some(undo) = &self.undo else { return Ok(()) };
        if undo.irreversible.is_some() || undo.seen.contains(&(table, key.to_vec())) {
            return Ok(());
        }
        let value = self.read_raw(table, key)?;
        let Some(undo) = &mut self.undo else { return Ok(()) };
        match value {
            Some(previous) => {
                undo.seen.insert((table, key.to_vec()));
                undo.previous.push((table, key.to_vec(), previous));
            }
            None => undo.irreversible = Some("a write to a table the undo log does not read"),
        }
        Ok(())
    }

    /// Records that the running operation wrote around the log (an application table, the raw
    /// redb transaction).
    pub(super) fn irreversible(&mut self, what: &'static str) {
        if let Some(undo) = &mut self.undo {
            undo.irreversible.get_or_insert(what);
        }
    }

    /// Records a written-records entry about to be overwritten.
    pub(super) fn before_remember(&mut self, at: usize) {
        if let Some(undo) = &mut self.undo
            && at < undo.written_len
            && !undo.written_before.iter().any(|(index, _)| *index == at)
        {
            undo.written_before.push((at, self.written[at].1.clone()));
        }
    }

    /// The value of `key` in `table` as this transaction sees it: `Some(value)` (`None` inside
    /// when absent), or `None` for a table this log does not read.
    fn read_raw(&self, table: TableId, key: &[u8]) -> Result<Option<Option<Vec<u8>>>, Error> {
        let bytes = |definition: redb::TableDefinition<&[u8], &[u8]>| -> Result<Option<Vec<u8>>, Error> {
            Ok(self.tx.open_table(definition)?.get(key)?.map(|value| value.value().to_vec()))
        };
        Ok(Some(match table {
            TableId::Records => {
                self.with_records(|records| Ok(records.get(key)?.map(|value| value.value().to_vec())))?
            }
            TableId::Expiry => self.with_expiry(|index| Ok(index.get(key)?.map(|_| Vec::new())))?,
            TableId::Meta => {
                let Ok(name) = std::str::from_utf8(key) else { return Ok(None) };
                self.tx.open_table(META)?.get(name)?.map(|value| value.value().to_vec())
            }
            TableId::Audit => {
                let Ok(key) = <[u8; 16]>::try_from(key) else { return Ok(None) };
                self.tx.open_table(AUDIT)?.get(key)?.map(|value| value.value().to_vec())
            }
            TableId::Reconcile => bytes(RECONCILE)?,
            TableId::Intents => bytes(INTENTS)?,
            #[cfg(feature = "workflow")]
            table => match workflow::bytes_table(table) {
                Some(definition) => bytes(definition)?,
                None if table == crate::tables::TableId::OutboxDue => {
                    self.tx.open_table(crate::tables::OUTBOX_DUE)?.get(key)?.map(|_| Vec::new())
                }
                None => return Ok(None),
            },
            #[cfg(not(feature = "workflow"))]
            _ => return Ok(None),
        }))
    }

    /// Puts every key the operation wrote back to its value before it, newest first, and
    /// drops what the operation added to the journal log, the audit events and the
    /// written-records list.
    fn take_back(&mut self, undo: Undo) -> Result<(), Error> {
        if undo.irreversible.is_some() {
            return Err(Error::Internal(
                "an operation of this group commit failed after a write that cannot be taken back \
                 (an application table or the raw redb transaction); nothing of the batch was committed",
            ));
        }
        for (table, key, value) in undo.previous.iter().rev() {
            self.write_raw(*table, key, value.as_deref())?;
        }
        if let Some(log) = &mut self.log {
            log.truncate(undo.log_len);
        }
        self.audit.truncate(undo.audit_len);
        for (key, _) in self.written.drain(undo.written_len..) {
            self.written_at.remove(&key);
        }
        for (at, value) in undo.written_before {
            self.written[at].1 = value;
        }
        Ok(())
    }
}

#[cfg(feature = "workflow")]
mod workflow {
    use crate::tables::{DELIVERIES, JOBS, OBJECTS, OUTBOX, TableId};

    /// The workflow tables of byte values, by id.
    pub(super) fn bytes_table(table: TableId) -> Option<redb::TableDefinition<'static, &'static [u8], &'static [u8]>> {
        match table {
            TableId::Outbox => Some(OUTBOX),
            TableId::Deliveries => Some(DELIVERIES),
            TableId::Objects => Some(OBJECTS),
            TableId::Jobs => Some(JOBS),
            _ => None,
        }
    }
}
