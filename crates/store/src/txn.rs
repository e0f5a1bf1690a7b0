//! One write transaction over the store: read, decide, write — then commit once.

use std::cell::RefCell;

use redb::{ReadableTable, WriteTransaction};

use idemdb_core::{
    AuditKind, Corrupt, DecisionContext, DecisionTime, Failure, Fingerprint, IdempotencyKey, Lease, LeaseStep,
    MAX_RESULT_BYTES_LIMIT, Record, Refusal, Reservation, Reserve, Resolution, Scope, ScopedKey, State, Timestamp,
    decide, decode_record, encode_record, needs_effect_census,
};

use crate::Error;
use crate::audit::{EncodedEvent, MAX_SEGMENT_EVENTS, encode_segment};
use crate::engine::Engine;
use crate::journal::Mutation;
use crate::journal::apply::{self, TableId};
use crate::journal::commit::CommitFailure;
use crate::tables::{
    EXPIRY, META_CLOCK, META_CLOCK_PENDING, META_FENCE_FLOOR, RECONCILE_RECORD, RECORDS, audit_key, expiry_key,
    reconcile_key,
};
use idemdb_core::{AuditEvent, ResolutionCause};

mod undo;

/// What an operation changed in its transaction, to put back if it fails.
#[derive(Default)]
struct Undo {
    /// Each key the operation wrote, with its value before the operation's first write to it
    /// (`None`: absent), in order of first write.
    previous: Vec<(TableId, Vec<u8>, Option<Vec<u8>>)>,
    /// The keys in `previous`.
    seen: std::collections::HashSet<(TableId, Vec<u8>)>,
    /// Lengths at the start: journal mutations, audit events, written records.
    log_len: usize,
    audit_len: usize,
    written_len: usize,
    /// Entries of the written-records list that existed before and were overwritten.
    written_before: Vec<(usize, Option<Vec<u8>>)>,
    /// Set when the operation wrote what the log cannot take back (what, for debugging).
    irreversible: Option<&'static str>,
}

/// An open write transaction. Obtained through [`Store::write`](crate::Store::write)(crate::Store::write);
/// committed when the closure returns `Ok`, rolled back otherwise.
pub struct Txn<'s> {
    store: &'s Engine,
    tx: &'s WriteTransaction,
    /// The record table and the expiry index, each opened on first use and kept open until
    /// the transaction finishes: opening a redb table looks its root up in the table tree,
    /// which cost a reservation about a twentieth of its instructions when every read and
    /// write opened the table anew.
    records: RefCell<Option<redb::Table<'s, &'static [u8], &'static [u8]>>>,
    expiry: RefCell<Option<redb::Table<'s, &'static [u8], ()>>>,
    now: Timestamp,
    retention: Timestamp,
    audit: Vec<EncodedEvent>,
    /// The last value written per record key, to read back after a failed commit.
    written: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Positions in `written` by record key.
    written_at: std::collections::HashMap<Vec<u8>, usize>,
    /// The mutations of the store's tables, when the store journals its commits.
    log: Option<Vec<Mutation>>,
    /// Set once [`Txn::tables_checkpointing`] handed out the redb transaction: what was written through it
    /// is not in `log`, so the commit is a durable checkpoint instead of a journal record.
    raw: std::sync::atomic::AtomicBool,
    /// Whether the commit must be durable in the file (a flush).
    durable: bool,
    /// The undo log of the operation running in a group commit ([`Txn::operation`]).
    undo: Option<Undo>,
    /// Set when [`Txn::tables_checkpointing`] handed out the redb transaction during the
    /// running operation (its writes cannot be taken back).
    raw_in_operation: std::sync::atomic::AtomicBool,
    /// Set when an operation failed and its writes could not be taken back: nothing of this
    /// transaction may commit, and [`Txn::finish`] answers with this error.
    spoiled: Option<Error>,
}

impl std::fmt::Debug for Txn<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Txn").field("now", &self.now).finish_non_exhaustive()
    }
}

/// A begun write transaction: it owns the redb transaction that its [`Txn`] borrows, and
/// commits it with what the `Txn` finished with.
///
/// ```text
/// let begun = Begun::new(engine)?;
/// let mut txn = begun.txn();
/// ... read, decide, write through `txn` ...
/// begun.commit(txn.finish()?)
/// ```
pub(crate) struct Begun<'e> {
    engine: &'e Engine,
    tx: WriteTransaction,
    at: DecisionTime,
}

impl<'e> Begun<'e> {
    /// Takes the write lock, then reads the clock (so decisions are made in time order).
    pub(crate) fn new(engine: &'e Engine) -> Result<Self, Error> {
        let tx = engine.begin_write()?;
        let at = engine.clock.read();
        Ok(Begun { engine, tx, at })
    }

    /// The transaction to read, decide and write in.
    pub(crate) fn txn(&self) -> Txn<'_> {
        Txn {
            store: self.engine,
            tx: &self.tx,
            records: RefCell::new(None),
            expiry: RefCell::new(None),
            now: self.at.now,
            retention: self.at.retention,
            audit: Vec::new(),
            written: Vec::new(),
            written_at: std::collections::HashMap::new(),
            log: self.engine.open_journal().map(|_| Vec::new()),
            raw: std::sync::atomic::AtomicBool::new(false),
            durable: false,
            undo: None,
            raw_in_operation: std::sync::atomic::AtomicBool::new(false),
            spoiled: None,
        }
    }
}

impl<'s> Txn<'s> {
    pub(crate) fn engine(&self) -> &'s Engine {
        self.store
    }

    /// Makes this transaction's commit durable whatever the store's durability setting.
    pub(crate) fn make_durable(&mut self) {
        self.durable = true;
    }

    /// The store time every decision in this transaction uses (see [`Store::now`](crate::Store::now)).
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// The retention time every decision in this transaction uses to judge expiry and
    /// forgetting (see [`Store::decision_time`](crate::Store::decision_time)).
    pub fn retention_time(&self) -> Timestamp {
        self.retention
    }

    /// One of the application's own tables, typed as `table` declares it: reads see this
    /// transaction's writes, and writes are logged for the store's journal, so the commit
    /// stays one journal append (no redb checkpoint). The table must have been registered
    /// when the store was opened ([`StoreBuilder::journaled_table`](crate::StoreBuilder::journaled_table)),
    /// with the same key and value types, so that recovery can replay its writes.
    ///
    /// ```
    /// use idemdb::{Store, redb::TableDefinition};
    /// const ORDERS: TableDefinition<&str, u64> = TableDefinition::new("orders");
    /// let store = Store::builder().journaled_table(ORDERS).in_memory()?;
    /// store.write(|txn| {
    ///     txn.table(ORDERS)?.insert("order-842", 1050)?;
    ///     Ok::<(), idemdb::Error>(())
    /// })?;
    /// let amount = store.write(|txn| Ok::<_, idemdb::Error>(txn.table(ORDERS)?.get("order-842")?.map(|v| v.value())))?;
    /// assert_eq!(amount, Some(1050));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnregisteredTable`] for a table the store was not told about (or told about
    /// with other types, or named `idemdb_…`); storage errors opening it.
    pub fn table<K: redb::Key + 'static, V: redb::Value + 'static>(
        &mut self,
        table: redb::TableDefinition<K, V>,
    ) -> Result<crate::app_table::AppTable<'_, K, V>, Error> {
        self.irreversible("an application table");
        crate::app_table::AppTable::open(self.tx, &self.store.config.apps, self.log.as_mut(), table)
    }

    /// The underlying redb transaction: the escape hatch for what [`Txn::table`] does not
    /// cover (another table type, an unregistered table, redb's own API). **A transaction that
    /// calls this commits as a durable redb checkpoint** (a flush of the store file) instead
    /// of one journal append, because what is written through it is not in the journal.
    ///
    /// Do not open tables whose names start with `idemdb_`: those belong to the store.
    pub fn tables_checkpointing(&self) -> &WriteTransaction {
        self.raw.store(true, std::sync::atomic::Ordering::Relaxed);
        self.raw_in_operation.store(true, std::sync::atomic::Ordering::Relaxed);
        self.tx_closing_kept_tables()
    }

    /// The redb transaction for **reading** the store's tables (writes go through
    /// [`Txn::put_logged`] and [`Txn::remove_logged`], so they are journaled). The tables this
    /// `Txn` keeps open are closed first, so the caller may open any table.
    pub(crate) fn tx_closing_kept_tables(&self) -> &WriteTransaction {
        self.records.borrow_mut().take();
        self.expiry.borrow_mut().take();
        self.tx
    }

    /// Runs `f` on the record table, opening it on the first use in this transaction.
    fn with_records<T>(
        &self,
        f: impl FnOnce(&mut redb::Table<'s, &'static [u8], &'static [u8]>) -> Result<T, Error>,
    ) -> Result<T, Error> {
        with_open(self.tx, &self.records, RECORDS, f)
    }

    /// Runs `f` on the expiry index, opening it on the first use in this transaction.
    fn with_expiry<T>(
        &self,
        f: impl FnOnce(&mut redb::Table<'s, &'static [u8], ()>) -> Result<T, Error>,
    ) -> Result<T, Error> {
        with_open(self.tx, &self.expiry, EXPIRY, f)
    }

    /// Writes `key` → `value` into one of the store's tables and logs it for the journal
    /// (and, inside a group commit's operation, its previous value for the undo log).
    pub(crate) fn put_logged(&mut self, table: TableId, key: &[u8], value: &[u8]) -> Result<(), Error> {
        self.before_write(table, key)?;
        self.write_raw(table, key, Some(value))?;
        if let Some(log) = &mut self.log {
            log.push(Mutation::Put { table: table.byte(), key: key.to_vec(), value: value.to_vec() });
        }
        Ok(())
    }

    /// Removes `key` from one of the store's tables and logs it for the journal (and, inside a
    /// group commit's operation, its previous value for the undo log).
    pub(crate) fn remove_logged(&mut self, table: TableId, key: &[u8]) -> Result<(), Error> {
        self.before_write(table, key)?;
        self.write_raw(table, key, None)?;
        if let Some(log) = &mut self.log {
            log.push(Mutation::Remove { table: table.byte(), key: key.to_vec() });
        }
        Ok(())
    }

    /// Puts `key` → `value`, or removes `key` (`None`), in one of the store's tables: no log.
    fn write_raw(&self, table: TableId, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        match (table, value) {
            (TableId::Records, Some(value)) => self.with_records(|records| Ok(records.insert(key, value).map(drop)?)),
            (TableId::Records, None) => self.with_records(|records| Ok(records.remove(key).map(drop)?)),
            (TableId::Expiry, Some([])) => self.with_expiry(|index| Ok(index.insert(key, ()).map(drop)?)),
            (TableId::Expiry, None) => self.with_expiry(|index| Ok(index.remove(key).map(drop)?)),
            (_, Some(value)) => Ok(apply::apply_put(self.tx, &self.store.config.apps, table, key, value)?),
            (_, None) => Ok(apply::apply_remove(self.tx, &self.store.config.apps, table, key)?),
        }
    }

    /// Writes the clock state when it is due (see [`Engine::persist_clock_if_due`]).
    pub(crate) fn persist_clock_logged(&mut self, force: bool) -> Result<(), Error> {
        if let Some(state) = self.store.clock.take_due(force) {
            self.put_logged(TableId::Meta, META_CLOCK.as_bytes(), &state.trusted.to_be_bytes())?;
            self.put_logged(TableId::Meta, META_CLOCK_PENDING.as_bytes(), &state.encode_pending())?;
        }
        Ok(())
    }

    /// [`Store::reserve`](crate::Store::reserve) inside this transaction: with effects, they
    /// are enqueued in it when the key is acquired.
    ///
    /// # Errors
    /// As [`Store::reserve`](crate::Store::reserve).
    pub fn reserve(&mut self, request: Reserve<'_>) -> Result<Reservation, Error> {
        #[cfg(not(feature = "workflow"))]
        if !request.effects().is_empty() {
            return Err(Error::Internal("effects need the outbox (the `workflow` feature)"));
        }
        let answer = self.reserve_with(request.scope(), request.key(), request.fingerprint(), request.correlation())?;
        #[cfg(feature = "workflow")]
        if let Reservation::Acquired(lease) = &answer {
            for effect in request.effects() {
                self.enqueue_effect(lease, &effect.effect, effect.version, effect.payload.clone())?;
            }
        }
        Ok(answer)
    }

    /// The reservation of [`Txn::reserve`]. The correlation id, when given, is recorded; it
    /// was checked by [`Reserve::traced`].
    pub(crate) fn reserve_with(
        &mut self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        correlation: Option<&str>,
    ) -> Result<Reservation, Error> {
        let encoded = ScopedKey::encode_parts(scope, key);
        let existing = self.load(&encoded)?;
        // The index entries to move are those of the record as it was.
        let prior = Prior::of(existing.as_ref());
        let mut context =
            DecisionContext::at(DecisionTime::new(self.now, self.retention), self.store.policy(scope.operation()))
                .with_fence_floor(self.store.fence_floor());
        if needs_effect_census(existing.as_ref(), &context) {
            context = context.with_no_effect_enqueued(!self.any_effect(&encoded)?);
        }
        let decision = decide(existing, scope, key, fingerprint, context)?;
        if let Some(record) = &decision.write {
            self.put_moving(&encoded, prior, record)?;
        }
        let kind = decision.audit_kind();
        let answer = decision.answer;
        self.event(kind, scope, &encoded, answer.fence(), Some(fingerprint), correlation);
        Ok(answer)
    }

    /// Whether any outbox effect was ever enqueued for `(scope, key)`, whatever its state: the
    /// census behind [`idemdb_core::ExpiredLease::TakeoverIfNoEffect`]. Items are keyed by the
    /// scoped key followed by the effect's name, so one range read answers it.
    pub(crate) fn any_effect(&self, scoped_key: &[u8]) -> Result<bool, Error> {
        let table = self.tx_closing_kept_tables().open_table(crate::tables::OUTBOX)?;
        let mut after = table.range(scoped_key..)?;
        Ok(match after.next() {
            Some(entry) => entry?.0.value().starts_with(scoped_key),
            None => false,
        })
    }

    /// The outbox items of `(scope, key)` (its encoded `scoped_key`), in effect-name order.
    fn effects_of(&self, scoped_key: &[u8]) -> Result<Vec<idemdb_core::OutboxItem>, Error> {
        let table = self.tx_closing_kept_tables().open_table(crate::tables::OUTBOX)?;
        let mut items = Vec::new();
        for entry in table.range(scoped_key..)? {
            let (key, value) = entry?;
            if !key.value().starts_with(scoped_key) {
                break;
            }
            let item = idemdb_core::OutboxItem::decode(key.value(), value.value())
                .map_err(idemdb_core::Corrupt::of("outbox item"))?;
            items.push(item);
        }
        Ok(items)
    }

    /// [`Store::complete`](crate::Store::complete) inside this transaction.
    ///
    /// # Errors
    /// As [`Store::complete`](crate::Store::complete).
    pub fn complete(&mut self, lease: &Lease, result: Vec<u8>) -> Result<(), Error> {
        self.transition(lease, LeaseStep::Complete(result)).map(drop)
    }

    /// [`Store::fail`](crate::Store::fail) inside this transaction.
    ///
    /// # Errors
    /// As [`Store::fail`](crate::Store::fail).
    pub fn fail(&mut self, lease: &Lease, failure: Failure) -> Result<(), Error> {
        self.transition(lease, LeaseStep::Fail(failure)).map(drop)
    }

    /// [`Store::renew`](crate::Store::renew) inside this transaction.
    ///
    /// # Errors
    /// As [`Store::renew`](crate::Store::renew).
    pub fn renew(&mut self, lease: &Lease) -> Result<Lease, Error> {
        self.transition(lease, LeaseStep::Renew).map(|record| lease.renewed_by(&record))
    }

    /// [`Store::reconcile`](crate::Store::reconcile) inside this transaction.
    ///
    /// # Errors
    /// As [`Store::reconcile`](crate::Store::reconcile).
    pub fn reconcile(
        &mut self,
        scope: &Scope,
        key: &IdempotencyKey,
        resolution: Resolution,
        cause: ResolutionCause,
    ) -> Result<(), Error> {
        let encoded = ScopedKey::new(scope.clone(), key.clone()).encode();
        let record = self.load(&encoded)?.ok_or(Refusal::NotFound)?;
        let effects = self.effects_of(&encoded)?;
        idemdb_core::check_effects_settled(effects.iter().map(|item| (&item.effect, item.state.kind())))?;
        let policy = self.store.policy(scope.operation());
        let next = idemdb_core::reconcile(&record, resolution, self.now, policy)?;
        self.put(&encoded, Some(&record), &next)?;
        let correlation = AuditEvent::resolution_correlation(None, cause);
        self.event(AuditKind::Reconciled, scope, &encoded, next.fence, None, Some(&correlation));
        Ok(())
    }

    /// Reads a record inside this transaction.
    ///
    /// # Errors
    /// Storage errors; [`Error::Corrupt`].
    pub fn get(&self, scope: &Scope, key: &IdempotencyKey) -> Result<Option<Record>, Error> {
        self.load(&ScopedKey::new(scope.clone(), key.clone()).encode())
    }

    /// Writes a record as given (keeping the expiry index right), replacing any existing one
    /// when `overwrite` is set. For import tools; it bypasses the state machine, but not the
    /// rules every record keeps: the record must pass [`Record::validate`] with the
    /// operation's result limit. Returns whether the record was written.
    ///
    /// # Errors
    /// [`Refusal::InvalidRecord`](idemdb_core::Refusal::InvalidRecord) for a record the engine would never write; storage errors;
    /// [`Error::Corrupt`] when the existing record does not decode.
    pub fn import(&mut self, scoped: &ScopedKey, record: &Record, overwrite: bool) -> Result<bool, Error> {
        record.validate(self.store.policy(scoped.scope.operation()).max_result_bytes())?;
        let encoded = scoped.encode();
        let existing = self.load(&encoded)?;
        if existing.is_some() && !overwrite {
            return Ok(false);
        }
        self.put(&encoded, existing.as_ref(), record)?;
        Ok(true)
    }

    /// Applies a lease holder's step to its record.
    fn transition(&mut self, lease: &Lease, step: LeaseStep) -> Result<Record, Error> {
        let encoded = lease.scoped_key().encode();
        let record = self.load(&encoded)?.ok_or(Refusal::NotFound)?;
        let kind = step.audit_kind();
        let next = step.apply(&record, lease, self.now, self.store.policy(lease.scope().operation()))?;
        self.put(&encoded, Some(&record), &next)?;
        self.event(kind, lease.scope(), &encoded, lease.fence(), Some(&next.fingerprint), None);
        Ok(next)
    }

    pub(crate) fn load(&self, encoded: &[u8]) -> Result<Option<Record>, Error> {
        self.with_records(|records| {
            let Some(value) = records.get(encoded)? else { return Ok(None) };
            decode_record(value.value()).map(Some).map_err(|source| Error::Corrupt(Corrupt { what: "record", source }))
        })
    }

    /// Writes `record` over `previous`, moving its expiry index entry if its due time changed.
    /// Every record written passes [`Record::validate`] (with the largest result limit; the
    /// operation's own limit is checked where bodies come in), so no write path can store a
    /// record that the decoder or the state machine would trip over.
    pub(crate) fn put(&mut self, encoded: &[u8], previous: Option<&Record>, record: &Record) -> Result<(), Error> {
        self.put_moving(encoded, Prior::of(previous), record)
    }

    /// Writes `record`, moving its index entries from where `prior` had them. Every record
    /// written passes [`Record::validate`] (with the largest result limit; the operation's own
    /// limit is checked where bodies come in), so no write path can store a record that the
    /// decoder or the state machine would trip over.
    fn put_moving(&mut self, encoded: &[u8], prior: Prior, record: &Record) -> Result<(), Error> {
        record.validate(MAX_RESULT_BYTES_LIMIT)?;
        let value = encode_record(record);
        self.put_logged(TableId::Records, encoded, &value)?;
        self.move_index(encoded, prior.due, record.due_at())?;
        let uncertain = matches!(record.state, State::Uncertain { .. });
        if uncertain != prior.uncertain {
            let key = reconcile_key(RECONCILE_RECORD, encoded);
            if uncertain {
                self.put_logged(TableId::Reconcile, &key, &record.updated_at.as_millis().to_be_bytes())?;
            } else {
                self.remove_logged(TableId::Reconcile, &key)?;
            }
        }
        self.remember(encoded, Some(value));
        Ok(())
    }

    /// Removes a record and its index entry, keeping its fence as the floor for later bindings.
    pub(crate) fn remove(&mut self, encoded: &[u8], previous: &Record) -> Result<(), Error> {
        let floor = self.store.raise_fence_floor(previous.fence);
        self.put_logged(TableId::Meta, META_FENCE_FLOOR.as_bytes(), &floor.to_be_bytes())?;
        self.remove_logged(TableId::Records, encoded)?;
        self.move_index(encoded, previous.due_at(), None)?;
        if matches!(previous.state, State::Uncertain { .. }) {
            self.remove_logged(TableId::Reconcile, &reconcile_key(RECONCILE_RECORD, encoded))?;
        }
        self.remember(encoded, None);
        Ok(())
    }

    fn move_index(&mut self, encoded: &[u8], old: Option<Timestamp>, new: Option<Timestamp>) -> Result<(), Error> {
        self.move_entry(
            TableId::Expiry,
            old.map(|old| expiry_key(old, encoded)),
            new.map(|new| expiry_key(new, encoded)),
        )
    }

    /// Moves an entry of an index table (empty values) from key `old` to key `new`, logged.
    pub(crate) fn move_entry(
        &mut self,
        table: TableId,
        old: Option<Vec<u8>>,
        new: Option<Vec<u8>>,
    ) -> Result<(), Error> {
        if old == new {
            return Ok(());
        }
        if let Some(old) = old {
            self.remove_logged(table, &old)?;
        }
        if let Some(new) = new {
            self.put_logged(table, &new, &[])?;
        }
        Ok(())
    }

    fn remember(&mut self, encoded: &[u8], value: Option<Vec<u8>>) {
        match self.written_at.get(encoded) {
            Some(&at) => {
                self.before_remember(at);
                self.written[at].1 = value;
            }
            None => {
                self.written_at.insert(encoded.to_vec(), self.written.len());
                self.written.push((encoded.to_vec(), value));
            }
        }
    }

    pub(crate) fn event(
        &mut self,
        kind: AuditKind,
        scope: &Scope,
        encoded: &[u8],
        fence: u64,
        fingerprint: Option<&Fingerprint>,
        correlation: Option<&str>,
    ) {
        if let Some(event) = self.store.audit_event(self.now, kind, scope, encoded, fence, fingerprint, correlation) {
            self.audit.push(event);
        }
    }

    /// Writes what the commit carries and closes the tables this `Txn` kept open: what
    /// [`Begun::commit`] commits. The audit events of this transaction's own decisions are
    /// written here, with every event still waiting for a commit (answers that changed
    /// nothing, see [`idemdb_core::AuditBatch`]): a decision and its event are on record
    /// together or not at all. The clock state goes with any write.
    ///
    /// # Errors
    /// The error of an operation whose writes could not be taken back ([`Txn::operation`]):
    /// nothing of this transaction may commit. Storage errors writing the audit segments or
    /// the clock.
    pub(crate) fn finish(mut self) -> Result<Finished, Error> {
        if let Some(spoiled) = self.spoiled.take() {
            return Err(spoiled);
        }
        let own = std::mem::take(&mut self.audit);
        let carried = self.store.take_buffered_audit();
        if let Err(error) = self.write_audit(&carried, &own) {
            self.store.buffer_audit_events(carried);
            return Err(error);
        }
        if (!self.written.is_empty() || self.store.clock.cancelled())
            && let Err(error) = self.persist_clock_logged(false)
        {
            self.store.buffer_audit_events(carried);
            return Err(error);
        }
        let raw = self.raw.load(std::sync::atomic::Ordering::Relaxed);
        let Txn { written, log, durable, now, .. } = self;
        Ok(Finished { carried, written, log, raw, durable, now })
    }

    /// Writes `carried` and `own` events, oldest first, as segments: one entry per segment,
    /// keyed by its newest event's time — one B-tree insert per commit, not one per event.
    fn write_audit(&mut self, carried: &[EncodedEvent], own: &[EncodedEvent]) -> Result<(), Error> {
        if carried.is_empty() && own.is_empty() {
            return Ok(());
        }
        let mut events: Vec<&EncodedEvent> = carried.iter().chain(own).collect();
        events.sort_by_key(|event| event.at);
        for segment in events.chunks(MAX_SEGMENT_EVENTS) {
            let Some(newest) = segment.last() else { continue };
            let key = audit_key(newest.at, self.store.next_audit_sequence());
            self.put_logged(TableId::Audit, &key, &encode_segment(segment))?;
        }
        Ok(())
    }
}

/// Runs `f` on the table `definition` of `tx`, kept open in `open` (opened on first use).
fn with_open<'s, K: redb::Key + 'static, V: redb::Value + 'static, T>(
    tx: &'s WriteTransaction,
    open: &RefCell<Option<redb::Table<'s, K, V>>>,
    definition: redb::TableDefinition<'static, K, V>,
    f: impl FnOnce(&mut redb::Table<'s, K, V>) -> Result<T, Error>,
) -> Result<T, Error> {
    let mut open = open.borrow_mut();
    if open.is_none() {
        *open = Some(tx.open_table(definition)?);
    }
    match open.as_mut() {
        Some(table) => f(table),
        None => Err(Error::Internal("a table of the transaction did not stay open")),
    }
}

/// What a finished [`Txn`] hands to [`Begun::commit`].
pub(crate) struct Finished {
    /// The waiting audit events this commit writes besides its own (buffered again if it
    /// fails; its own events fail with it).
    carried: Vec<EncodedEvent>,
    written: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    log: Option<Vec<Mutation>>,
    raw: bool,
    durable: bool,
    now: Timestamp,
}

impl Begun<'_> {
    /// Commits: one journal append (or, for a transaction that wrote through
    /// [`Txn::tables_checkpointing`] or must be durable in the file, a redb checkpoint).
    pub(crate) fn commit(self, finished: Finished) -> Result<(), Error> {
        let Begun { engine: store, mut tx, .. } = self;
        let Finished { carried, written, log, raw, durable, now } = finished;
        if durable && let Err(error) = tx.set_durability(redb::Durability::Immediate) {
            store.buffer_audit_events(carried);
            return Err(error.into());
        }
        let committed = match store.open_journal() {
            None => tx.commit().map_err(crate::error::StorageError::from),
            Some(wal) => {
                let log = if raw || durable { None } else { log };
                match wal.commit(tx, log.as_deref(), now.as_millis()) {
                    Ok(()) => Ok(()),
                    Err(CommitFailure::Commit(Error::Storage(error))) => Err(error),
                    Err(other) => {
                        store.snapshots.invalidate();
                        store.buffer_audit_events(carried);
                        return Err(other.into_error());
                    }
                }
            }
        };
        store.snapshots.invalidate();
        let result = match committed {
            Ok(()) => Ok(()),
            Err(error) => {
                if written.is_empty() {
                    Err(Error::Storage(error))
                } else {
                    match read_back(store, &written) {
                        Ok(true) => Ok(()),
                        Ok(false) => Err(Error::Storage(error)),
                        Err(_) => Err(Error::CommitUnknown(error)),
                    }
                }
            }
        };
        // The waiting events this commit carried were not written: keep them for the next one.
        if result.is_err() {
            store.buffer_audit_events(carried);
        }
        result
    }
}

/// What the index entries of a record were before a write.
#[derive(Clone, Copy)]
struct Prior {
    due: Option<Timestamp>,
    uncertain: bool,
}

impl Prior {
    fn of(previous: Option<&Record>) -> Prior {
        Prior {
            due: previous.and_then(Record::due_at),
            uncertain: previous.is_some_and(|record| matches!(record.state, State::Uncertain { .. })),
        }
    }
}

/// Whether every written record reads back as written.
fn read_back(store: &Engine, written: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<bool, Error> {
    let read = store.db.begin_read()?;
    let records = read.open_table(RECORDS)?;
    for (key, value) in written {
        let stored = records.get(key.as_slice())?.map(|guard| guard.value().to_vec());
        if stored != *value {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use redb::ReadableTableMetadata;

    use crate::journal::apply::TableId;
    use crate::tables::{EXPIRY, RECORDS};
    use crate::{Error, Store};

    #[test]
    fn handing_out_the_redb_transaction_closes_the_tables_kept_open() {
        let store = Store::builder().in_memory().expect("store");
        store
            .write(|txn| -> Result<(), Error> {
                // Both kept-open tables opened by the transaction's own writes and reads ...
                txn.put_logged(TableId::Expiry, b"due", &[])?;
                txn.put_logged(TableId::Records, b"record", b"bytes")?;
                assert_eq!(txn.load(b"missing")?, None);
                // ... and then opened by store code through the redb transaction (purge scans
                // the expiry index this way): redb refuses a table opened twice, so this works
                // only because `tx_closing_kept_tables()` closed them.
                assert_eq!(txn.tx_closing_kept_tables().open_table(EXPIRY)?.len()?, 1);
                assert_eq!(txn.tx_closing_kept_tables().open_table(RECORDS)?.len()?, 1);
                // The transaction's next write opens them again.
                txn.remove_logged(TableId::Expiry, b"due")?;
                txn.remove_logged(TableId::Records, b"record")?;
                assert_eq!(txn.tx_closing_kept_tables().open_table(EXPIRY)?.len()?, 0);
                Ok(())
            })
            .expect("one write");
    }
}
