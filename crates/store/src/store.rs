//! The public handle: [`Store`], a cheap-to-clone reference to an open store's
//! [`Engine`](crate::engine::Engine) and group-commit queue, with the operations applications
//! call. Opening lives in `builder.rs`; inspection, retention, rebuild and intents add their
//! operations from their own modules.

use std::path::Path;
use std::sync::Arc;

use idemdb_core::{
    DecisionContext, DecisionTime, Failure, Fingerprint, IdempotencyKey, KeyHash, Lease, Policy, Record, Reservation,
    Reserve, Resolution, Scope, ScopedKey, Timestamp, decide,
};

use crate::Error;
use crate::audit_flush::AuditFlusher;
use crate::engine::Engine;
use crate::group::GroupCommit;
use crate::txn::{Begun, Txn};
use idemdb_core::ResolutionCause;

/// What [`Store::execute`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Executed {
    /// The operation ran and its result was stored in the same commit.
    Ran {
        /// The result.
        result: Vec<u8>,
    },
    /// The operation did not run: here is what the key already holds (never `Acquired`).
    Answered(Reservation),
}

/// [`Store::execute`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecuteError<E> {
    /// The operation returned an error; the transaction was rolled back, so neither its writes
    /// nor the reservation were stored and the key is free.
    #[error("operation failed; nothing was stored")]
    Operation(#[source] E),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] Error),
}

impl<E> ExecuteError<E> {
    /// The stable code: [`ErrorCode::OperationFailed`](idemdb_core::ErrorCode::OperationFailed)
    /// for the operation's own error, the store error's code otherwise.
    pub fn code(&self) -> idemdb_core::ErrorCode {
        match self {
            ExecuteError::Operation(_) => idemdb_core::ErrorCode::OperationFailed,
            ExecuteError::Store(store) => store.code(),
        }
    }
}

impl<E> idemdb_core::Coded for ExecuteError<E> {
    fn code(&self) -> idemdb_core::ErrorCode {
        ExecuteError::code(self)
    }
}

/// An embedded idempotency store on redb.
///
/// Every decision (reserve, complete, fail, renew, reconcile) is one write transaction:
/// read the record, decide with [`idemdb_core::decide`] or a transition, write, commit.
/// `Store` is a handle: `Send + Sync`, and cheap to clone (clones share the open store, which
/// closes when the last clone is dropped). Its methods block; the async store interface
/// [`IdempotencyStore`](idemdb_interface::IdempotencyStore) is implemented by its async
/// handle, [`AsyncStore`](crate::AsyncStore) (`store.asynchronous()`).
#[derive(Clone)]
pub struct Store {
    /// Declared first: dropped with the last handle, it stops its thread (which holds the
    /// engine) before the engine below closes, on the caller's thread.
    pub(crate) audit_flusher: Arc<AuditFlusher>,
    pub(crate) engine: Arc<Engine>,
    pub(crate) group: Arc<GroupCommit>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.engine.path).finish_non_exhaustive()
    }
}

impl Store {
    pub(crate) fn from_engine(engine: Engine) -> Store {
        Store {
            audit_flusher: Arc::new(AuditFlusher::default()),
            engine: Arc::new(engine),
            group: Arc::new(GroupCommit::default()),
        }
    }

    /// The file path, for a file store.
    pub fn path(&self) -> Option<&Path> {
        self.engine.path.as_deref()
    }

    /// Whether writes to `table` through [`Txn::table`](crate::Txn::table) are journaled: it
    /// was registered, with these key and value types, by
    /// [`StoreBuilder::journaled_table`](crate::StoreBuilder::journaled_table) when this store
    /// was opened. A library handed an open store asks this to choose between
    /// [`Txn::table`](crate::Txn::table) and the checkpointing escape hatch.
    ///
    /// ```
    /// use idemdb::{Store, redb::TableDefinition};
    /// const ORDERS: TableDefinition<&str, u64> = TableDefinition::new("orders");
    /// assert!(Store::builder().journaled_table(ORDERS).in_memory()?.journals_table(ORDERS));
    /// assert!(!Store::in_memory()?.journals_table(ORDERS));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn journals_table<K: redb::Key + 'static, V: redb::Value + 'static>(
        &self,
        table: redb::TableDefinition<K, V>,
    ) -> bool {
        self.engine.config.apps.knows(&table)
    }

    /// The policy that applies to `operation`.
    pub fn policy(&self, operation: &str) -> &Policy {
        self.engine.policy(operation)
    }

    /// The store's notion of now (*store time*): elapsed time measured with the clock's
    /// monotonic reading since the store was opened, plus any forward gap of the wall clock
    /// (time the store was closed, or a jump) not yet cancelled by the wall clock going back.
    /// Leases, fences and the times written into records use it. See `docs/design.md`, "Time".
    pub fn now(&self) -> Timestamp {
        self.decision_time().now
    }

    /// Store time and *retention time* read together. Retention time is store time without
    /// the wall-clock gaps the store has not confirmed yet (kept for ten minutes of monotonic
    /// time): it decides expiry and forgetting, so a wall-clock jump alone never makes a known
    /// key unknown.
    pub fn decision_time(&self) -> DecisionTime {
        let at = self.engine.decision_time();
        self.save_clock_if_put_right();
        at
    }

    /// Writes a wall-clock jump that a reading put right (pending gaps cancelled) before the
    /// answer that saw it is given: a restart that forgot the cancellation could later take the
    /// jump for time that passed, and forget a key within its retention (`docs/design.md`,
    /// "Time"). A commit of the clock alone, through the group commit, at most once per
    /// correction; best effort (on failure the next commit writes it). It blocks: the blocking
    /// calls run it on their caller's thread, [`AsyncStore`](crate::AsyncStore) off the async
    /// runtime — a lookup answered on a runtime's worker never commits there.
    pub(crate) fn save_clock_if_put_right(&self) {
        if self.engine.clock_unsaved() {
            let _ = self.write(|_| Ok::<(), Error>(()));
        }
    }

    /// Whether the store was opened read-only
    /// ([`StoreBuilder::open_read_only`](crate::StoreBuilder::open_read_only)).
    pub fn is_read_only(&self) -> bool {
        self.engine.is_read_only()
    }

    /// The keyed hash that logs and the audit trail use for `(scope, key)`.
    pub fn key_hash(&self, scope: &Scope, key: &IdempotencyKey) -> KeyHash {
        self.engine.key_hash_of(&ScopedKey::encode_parts(scope, key))
    }

    /// The keyed hash that log events show for a tenant ([`KeyHash::tenant`] under the
    /// store's secret): the raw tenant never reaches a log.
    pub fn tenant_hash(&self, tenant: &str) -> KeyHash {
        self.engine.tenant_hash(tenant)
    }

    /// A new random idempotency key (UUID v4 from the operating system's CSPRNG).
    ///
    /// # Errors
    /// [`Error::NoRandomness`] on `wasm32-unknown-unknown`, where the bindings make keys from
    /// `crypto.getRandomValues` instead.
    pub fn new_key() -> Result<IdempotencyKey, Error> {
        #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
        {
            Ok(IdempotencyKey::from_random_bytes(uuid::Uuid::new_v4().into_bytes()))
        }
        #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
        {
            Err(Error::NoRandomness)
        }
    }

    /// Runs `f` in one write transaction and commits if it returns `Ok`; on `Err` everything
    /// it wrote (idempotency records and the application's own tables) is rolled back.
    ///
    /// This is how an application writes its own redb tables and completes the record **in
    /// the same commit**: [`Txn::table`] writes a table registered with
    /// [`StoreBuilder::journaled_table`](crate::StoreBuilder::journaled_table) through the
    /// journal (one append, no redb flush); [`Txn::tables_checkpointing`] is the raw escape
    /// hatch, whose commit is a durable checkpoint.
    ///
    /// ```
    /// use idemdb::{Reservation, Reserve, Scope, Store, IdempotencyKey, Fingerprint};
    /// use redb::TableDefinition;
    /// const ORDERS: TableDefinition<&str, u64> = TableDefinition::new("app_orders");
    ///
    /// let store = Store::builder().journaled_table(ORDERS).in_memory()?;
    /// let scope = Scope::new("acme", "place_order")?;
    /// let key = IdempotencyKey::new("order-842")?;
    /// let fp = Fingerprint::from_bytes([9; 32]);
    /// let Reservation::Acquired(lease) = store.reserve(Reserve::new(&scope, &key, &fp))? else { panic!() };
    /// store.write(|txn| {
    ///     txn.table(ORDERS)?.insert("order-842", 1050)?;
    ///     txn.complete(&lease, b"order placed".to_vec())
    /// })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The closure's error, or [`Error`] converted into it when the transaction could not
    /// begin or commit.
    pub fn write<T, E: From<Error>>(&self, f: impl FnOnce(&mut Txn<'_>) -> Result<T, E>) -> Result<T, E> {
        let begun = Begun::new(&self.engine)?;
        let mut txn = begun.txn();
        let value = f(&mut txn)?;
        let finished = txn.finish()?;
        begun.commit(finished)?;
        Ok(value)
    }

    /// Runs `f` on a fresh read transaction of the store's database: how an application
    /// reads its own tables (those it writes with [`Store::write`]) without taking the write
    /// lock. The idemdb tables are read through the store's own methods.
    ///
    /// ```
    /// use idemdb::Store;
    /// use redb::{ReadableTable, TableDefinition};
    /// const ORDERS: TableDefinition<&str, u64> = TableDefinition::new("app_orders");
    ///
    /// let store = Store::builder().journaled_table(ORDERS).in_memory()?;
    /// store.write(|txn| {
    ///     txn.table(ORDERS)?.insert("order-842", 1050)?;
    ///     Ok::<(), idemdb::Error>(())
    /// })?;
    /// let amount = store.read(|tx| {
    ///     let orders = tx.open_table(ORDERS).map_err(idemdb::Error::from)?;
    ///     Ok::<_, idemdb::Error>(orders.get("order-842").map_err(idemdb::Error::from)?.map(|v| v.value()))
    /// })?;
    /// assert_eq!(amount, Some(1050));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The closure's error, or [`Error`] converted into it when the transaction could not
    /// begin.
    pub fn read<T, E: From<Error>>(&self, f: impl FnOnce(&redb::ReadTransaction) -> Result<T, E>) -> Result<T, E> {
        let tx = self.engine.db.begin_read().map_err(Error::from)?;
        f(&tx)
    }

    /// Reserves `(scope, key)` for a request with `fingerprint`, or says why not: the one
    /// reservation call. The [`Reserve`] request may carry a correlation id (checked when it
    /// was given to it) and effects to enqueue in the outbox in the same commit when the key is
    /// acquired (an acquired reservation has its effects in the outbox; any other answer
    /// enqueued nothing).
    ///
    /// ```
    /// use idemdb::{Fingerprint, IdempotencyKey, Reservation, Reserve, Scope, Store};
    /// let store = Store::in_memory()?;
    /// let scope = Scope::new("acme", "create_payment")?;
    /// let key = Store::new_key()?;
    /// let fp = Fingerprint::from_bytes([1; 32]);
    /// let Reservation::Acquired(lease) = store.reserve(Reserve::new(&scope, &key, &fp))? else { panic!() };
    /// store.complete(&lease, b"{\"charge\":\"ch_1\"}".to_vec())?;
    /// let again = store.reserve(Reserve::new(&scope, &key, &fp).traced("req-7f3a")?)?;
    /// assert!(matches!(again, Reservation::Replay { ref body, .. } if body == b"{\"charge\":\"ch_1\"}"));
    /// let other = store.reserve(Reserve::new(&scope, &key, &Fingerprint::from_bytes([2; 32])))?;
    /// assert!(matches!(other, Reservation::Mismatch { .. }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Storage`] / [`Error::CommitUnknown`] when the storage fails,
    /// [`Error::Corrupt`] for an undecodable record; with effects, as
    /// [`Txn::enqueue_effect`](crate::Txn) (on an error nothing is committed), and
    /// [`Error::Internal`] for effects on a build without the outbox (the `workflow` feature).
    pub fn reserve(&self, request: Reserve<'_>) -> Result<Reservation, Error> {
        if request.effects().is_empty() {
            return self.reserve_with(request.scope(), request.key(), request.fingerprint(), request.correlation());
        }
        #[cfg(feature = "workflow")]
        {
            self.reserve_enqueuing(request)
        }
        #[cfg(not(feature = "workflow"))]
        {
            Err(Error::Internal("effects need the outbox (the `workflow` feature)"))
        }
    }

    /// A reservation without effects: the correlation id (checked by [`Reserve::traced`]), when
    /// given, is recorded.
    pub(crate) fn reserve_with(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        correlation: Option<&str>,
    ) -> Result<Reservation, Error> {
        // Answers that change nothing (replay, in progress, mismatch, expired, uncertain) are
        // decided from a read snapshot: no write lock, no flush, no clone of the scope or key.
        if let Some(answer) = self.answer_from_snapshot(scope, key, fingerprint, correlation)? {
            self.save_clock_if_put_right();
            return Ok(answer);
        }
        self.reserve_in_commit(scope.clone(), key.clone(), *fingerprint, correlation.map(str::to_string))
    }

    /// The write half of a reservation: decided inside a (group) commit.
    pub(crate) fn reserve_in_commit(
        &self,
        scope: Scope,
        key: IdempotencyKey,
        fingerprint: Fingerprint,
        correlation: Option<String>,
    ) -> Result<Reservation, Error> {
        self.group.run(&self.engine, move |txn| txn.reserve_with(&scope, &key, &fingerprint, correlation.as_deref()))
    }

    pub(crate) fn answer_from_snapshot(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        correlation: Option<&str>,
    ) -> Result<Option<Reservation>, Error> {
        let encoded = ScopedKey::encode_parts(scope, key);
        let Some(record) = self.engine.get_encoded(&encoded)? else { return Ok(None) };
        // Never writes here: the clock a reading put right is the caller's to save (above, and
        // off the runtime in `AsyncStore`).
        let at = self.engine.decision_time();
        let now = at.now;
        let context =
            DecisionContext::at(at, self.engine.policy(scope.operation())).with_fence_floor(self.engine.fence_floor());
        let decision = decide(Some(record), scope, key, fingerprint, context)?;
        let kind = decision.audit_kind();
        let Some(answer) = decision.unchanged() else { return Ok(None) };
        let event = self.engine.audit_event(now, kind, scope, &encoded, answer.fence(), Some(fingerprint), correlation);
        // The event waits for a commit; the store's audit writer sees that it is written
        // within the bounds of `AuditBatch` (off this thread where threads exist).
        if let Some(waiting) = event.and_then(|event| self.engine.buffer_audit(event))
            && !self.audit_flusher.waiting(&self.engine, &self.group, waiting)
            && waiting.full
        {
            self.write(|_| Ok::<(), Error>(()))?;
        }
        Ok(Some(answer))
    }

    /// Stores the result of the lease's attempt; retries replay it byte for byte.
    ///
    /// # Errors
    /// [`Refusal::Transition`](idemdb_core::Refusal::Transition) for a stale fence, a finished record or a result over the limit;
    /// [`Refusal::NotFound`](idemdb_core::Refusal::NotFound); storage errors.
    pub fn complete(&self, lease: &Lease, result: impl Into<Vec<u8>>) -> Result<(), Error> {
        let result = result.into();
        let lease = lease.clone();
        self.group.run(&self.engine, move |txn| txn.complete(&lease, result))
    }

    /// Records that the lease's attempt failed.
    ///
    /// # Errors
    /// As [`Store::complete`].
    pub fn fail(&self, lease: &Lease, failure: Failure) -> Result<(), Error> {
        let lease = lease.clone();
        self.group.run(&self.engine, move |txn| txn.fail(&lease, failure))
    }

    /// Extends the lease; returns the renewed lease.
    ///
    /// # Errors
    /// [`Refusal::Transition`](idemdb_core::Refusal::Transition) when the lease is stale or the record is no longer in progress.
    pub fn renew(&self, lease: &Lease) -> Result<Lease, Error> {
        let lease = lease.clone();
        self.group.run(&self.engine, move |txn| txn.renew(&lease))
    }

    /// Resolves an uncertain record.
    ///
    /// # Errors
    /// [`Refusal::Transition`](idemdb_core::Refusal::Transition) when the record is not uncertain or its lease is still live;
    /// [`Refusal::NotFound`](idemdb_core::Refusal::NotFound).
    pub fn reconcile(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        resolution: Resolution,
        cause: ResolutionCause,
    ) -> Result<(), Error> {
        let (scope, key) = (scope.clone(), key.clone());
        self.group.run(&self.engine, move |txn| txn.reconcile(&scope, &key, resolution, cause))
    }

    /// Reserves, runs `operation` and completes, **in one commit**: for effects in the same
    /// database. If the operation fails, nothing is stored and the key stays free; if the key
    /// is not acquired (a replay, a conflict, a key in progress), the operation does not run.
    ///
    /// The operation gets the store's transaction: what it writes through
    /// [`Txn::table`](crate::Txn::table) (tables registered with
    /// [`StoreBuilder::journaled_table`](crate::StoreBuilder::journaled_table)) or
    /// [`Txn::put_row`](crate::Txn::put_row) rides the journal with the reservation and the
    /// completion, so the whole call commits as **one journal append**. The escape hatch,
    /// [`Txn::tables_checkpointing`](crate::Txn::tables_checkpointing) (raw redb tables the
    /// store was not told about), makes the commit a durable checkpoint instead.
    ///
    /// ```
    /// use idemdb::{Executed, Fingerprint, IdempotencyKey, Reserve, Scope, Store};
    /// use idemdb::redb::TableDefinition;
    /// const BALANCES: TableDefinition<&str, i64> = TableDefinition::new("app_balances");
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = Store::builder().journaled_table(BALANCES).open(dir.path().join("s.idemdb"))?;
    /// let (scope, key) = (Scope::new("acme", "credit")?, IdempotencyKey::new("credit-17")?);
    /// let fp = Fingerprint::from_bytes([3; 32]);
    /// let credit = |txn: &mut idemdb::Txn<'_>| -> Result<Vec<u8>, idemdb::Error> {
    ///     let mut balances = txn.table(BALANCES)?;
    ///     let old = balances.get("alice")?.map(|v| v.value()).unwrap_or(0);
    ///     balances.insert("alice", old + 100)?;
    ///     Ok((old + 100).to_string().into_bytes())
    /// };
    /// let before = store.journal_stats().expect("a file store journals");
    /// let ran = store.execute(Reserve::new(&scope, &key, &fp), credit)?;
    /// assert_eq!(ran, Executed::Ran { result: b"100".to_vec() });
    /// // A retry replays; the balance is credited once.
    /// assert!(matches!(store.execute(Reserve::new(&scope, &key, &fp), credit)?, Executed::Answered(_)));
    /// let after = store.journal_stats().unwrap();
    /// assert_eq!(after.checkpoints, before.checkpoints, "journal appends, no checkpoint");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`ExecuteError::Operation`] with the operation's error (everything rolled back), or
    /// [`ExecuteError::Store`] ([`Error::UnregisteredTable`] through [`Txn::table`](crate::Txn::table)
    /// for a table the store was not told about).
    pub fn execute<E>(
        &self,
        request: Reserve<'_>,
        operation: impl FnOnce(&mut Txn<'_>) -> Result<Vec<u8>, E>,
    ) -> Result<Executed, ExecuteError<E>> {
        let begun = Begun::new(&self.engine)?;
        let mut txn = begun.txn();
        let reservation = txn.reserve(request)?;
        let Reservation::Acquired(lease) = reservation else {
            let finished = txn.finish()?;
            begun.commit(finished)?;
            return Ok(Executed::Answered(reservation));
        };
        let result = operation(&mut txn).map_err(ExecuteError::Operation)?;
        txn.complete(&lease, result.clone())?;
        let finished = txn.finish()?;
        begun.commit(finished)?;
        Ok(Executed::Ran { result })
    }

    /// Reads the record of `(scope, key)`.
    ///
    /// # Errors
    /// Storage errors; [`Error::Corrupt`].
    pub fn get(&self, scope: &Scope, key: &IdempotencyKey) -> Result<Option<Record>, Error> {
        self.engine.get_encoded(&ScopedKey::encode_parts(scope, key))
    }

    /// What the store's write-ahead journal did since the store was opened; `None` when
    /// commits are not journaled ([`StoreBuilder::journal`](crate::StoreBuilder::journal)).
    pub fn journal_stats(&self) -> Option<crate::JournalStats> {
        self.engine.open_journal().map(crate::journal::commit::OpenJournal::stats)
    }

    /// What the open did with the store's journal: the records it replayed, the records it
    /// gave up (only with [`StoreBuilder::discard_lost_journal`](crate::StoreBuilder::discard_lost_journal)),
    /// and the journal files it moved aside rather than write over ([`JournalRecovery`](crate::JournalRecovery)).
    /// `None` for a store opened read-only, in memory, or on a backend without a journal.
    pub fn journal_recovery(&self) -> Option<&crate::JournalRecovery> {
        self.engine.recovery.as_ref()
    }

    /// Makes every earlier commit durable (needed only with [`Durability::Eventual`](crate::Durability::Eventual)).
    ///
    /// # Errors
    /// Storage errors.
    pub fn flush(&self) -> Result<(), Error> {
        crate::flush::flush(&self.engine)
    }
}
