//! The store: a redb database holding idempotency records.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redb::{ReadableTable, WriteTransaction};

use idemdb_core::{
    DecisionTime, Failure, Fingerprint, IdempotencyKey, OutcomeClass, Policy, Record, Resolution, Scope, ScopedKey,
    StateKind, Timestamp, UncertainCause, decide_above, decode_record,
};

use crate::audit::{AuditEvent, AuditKind, EncodedEvent, KeyHash, fingerprint_prefix};
use crate::builder::{Initialiser, Meta};
use crate::clock::ClockGuard;
use crate::db::Db;
use crate::group::GroupCommit;
use crate::snapshot::Snapshots;
use crate::tables::{AUDIT, META, META_CLOCK, META_CLOCK_PENDING, META_FENCE_FLOOR};
use crate::txn::{Txn, reservation_from};
use crate::{Clock, Durability, Error, OpenError, StoreBuilder};

/// Settings fixed when the store is opened.
pub(crate) struct Config {
    pub(crate) policies: HashMap<String, Policy>,
    pub(crate) default_policy: Policy,
    pub(crate) durability: Durability,
    pub(crate) audit: bool,
    pub(crate) audit_retention: Duration,
    pub(crate) trust_clock_at_open: bool,
}

/// The right of one attempt to execute an operation, until [`Lease::expires_at`].
///
/// Only the lease with the record's current fence may complete or fail it: after a takeover
/// (or a reconcile), an older lease is refused with a stale-fence error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub(crate) scoped: ScopedKey,
    pub(crate) fence: u64,
    pub(crate) expires_at: Timestamp,
    pub(crate) attempt: u32,
}

impl Lease {
    /// The scope.
    pub fn scope(&self) -> &Scope {
        &self.scoped.scope
    }

    /// The idempotency key.
    pub fn key(&self) -> &IdempotencyKey {
        &self.scoped.key
    }

    /// The fence number.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// When the lease expires unless renewed.
    pub fn expires_at(&self) -> Timestamp {
        self.expires_at
    }

    /// Which attempt this is (1 for the first).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
}

/// The answer to [`Store::reserve`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reservation {
    /// The caller holds the lease: execute, then [`Store::complete`] or [`Store::fail`].
    Acquired(Lease),
    /// A true retry of a finished request: here is the stored body, byte for byte.
    Replay {
        /// Completed, or failed definitively.
        outcome: OutcomeClass,
        /// The stored result or failure body.
        body: Vec<u8>,
    },
    /// Another attempt holds a live lease.
    InProgress {
        /// Time left on that lease.
        retry_after: Duration,
    },
    /// The key is bound to a different request (conflict; HTTP 422).
    Mismatch {
        /// The state of the record the key is bound to.
        stored: StateKind,
    },
    /// An earlier attempt's outcome is unknown; reconcile before any new effect.
    NeedsReconciliation {
        /// Why.
        cause: UncertainCause,
    },
    /// The response was purged; only the tombstone remains. Never executed again.
    Expired {
        /// The outcome the record reached.
        outcome: OutcomeClass,
    },
}

impl Reservation {
    /// The lease, if one was acquired.
    pub fn lease(&self) -> Option<&Lease> {
        match self {
            Reservation::Acquired(lease) => Some(lease),
            _ => None,
        }
    }

    /// A short lower-case name of the answer (`acquired`, `replay`, `in_progress`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Reservation::Acquired(_) => "acquired",
            Reservation::Replay { .. } => "replay",
            Reservation::InProgress { .. } => "in_progress",
            Reservation::Mismatch { .. } => "mismatch",
            Reservation::NeedsReconciliation { .. } => "needs_reconciliation",
            Reservation::Expired { .. } => "expired",
        }
    }
}

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

/// An embedded idempotency store on redb.
///
/// Every decision (reserve, complete, fail, renew, reconcile) is one write transaction:
/// read the record, decide with [`idemdb_core::decide`] or a transition, write, commit.
/// `Store` is `Send + Sync`; share it across threads with an `Arc`.
pub struct Store {
    /// Declared before `db`: the cached read snapshot is dropped before the database.
    pub(crate) snapshots: Snapshots,
    pub(crate) db: Db,
    pub(crate) path: Option<PathBuf>,
    pub(crate) config: Config,
    /// Store time and retention time (see `clock.rs`).
    pub(crate) clock: ClockGuard,
    pub(crate) secret: [u8; 32],
    audit_sequence: AtomicU64,
    pub(crate) group: GroupCommit,
    /// The highest fence of any record purge removed (persisted as meta `fence_floor`).
    fence_floor: AtomicU64,
    /// Audit events not yet written: they go out in batches with a later commit.
    buffered_audit: Mutex<Vec<EncodedEvent>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish_non_exhaustive()
    }
}

/// Buffered audit events that make an answer commit the buffer by itself.
const AUDIT_BUFFER: usize = 4096;
/// Buffered audit events that make the next commit carry them.
const AUDIT_BATCH: usize = 256;
/// Store time after which the next commit carries buffered audit events.
const AUDIT_DELAY_MS: u64 = 1_000;

impl Store {
    /// A builder for policies, clock, durability and backend.
    pub fn builder() -> StoreBuilder {
        StoreBuilder::new()
    }

    /// Opens (or creates) the store file at `path` with default settings.
    ///
    /// # Errors
    /// See [`StoreBuilder::open`].
    pub fn open(path: impl AsRef<Path>) -> Result<Store, OpenError> {
        StoreBuilder::new().open(path)
    }

    /// Opens an empty in-memory store with default settings.
    ///
    /// # Errors
    /// See [`StoreBuilder::in_memory`].
    pub fn in_memory() -> Result<Store, OpenError> {
        StoreBuilder::new().in_memory()
    }

    pub(crate) fn from_parts(
        db: Db,
        path: Option<PathBuf>,
        config: Config,
        clock: Arc<dyn Clock>,
        init: Initialiser,
    ) -> Result<Store, OpenError> {
        let Meta { secret, clock: clock_state, fence_floor } = init.run(&db)?;
        let trust_clock_at_open = config.trust_clock_at_open;
        let next_sequence = {
            let read = db.begin_read()?;
            let audit = read.open_table(AUDIT)?;
            let last = audit.last()?.map(|(key, _)| key.value());
            last.map(|key| {
                let mut sequence = [0u8; 8];
                sequence.copy_from_slice(&key[8..]);
                u64::from_be_bytes(sequence).saturating_add(1)
            })
            .unwrap_or(0)
        };
        Ok(Store {
            snapshots: Snapshots::default(),
            db,
            path,
            config,
            clock: ClockGuard::new(clock, clock_state, trust_clock_at_open),
            secret,
            audit_sequence: AtomicU64::new(next_sequence),
            group: GroupCommit::default(),
            fence_floor: AtomicU64::new(fence_floor),
            buffered_audit: Mutex::new(Vec::new()),
        })
    }

    /// The file path, for a file store.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The policy that applies to `operation`.
    pub fn policy(&self, operation: &str) -> &Policy {
        self.config.policies.get(operation).unwrap_or(&self.config.default_policy)
    }

    /// The store's notion of now (*store time*): elapsed time measured with the clock's
    /// monotonic reading since the store was opened, plus any forward gap of the wall clock
    /// (time the store was closed, or a jump) not yet cancelled by the wall clock going back.
    /// Leases, fences and the times written into records use it. See `docs/design.md`, "Time".
    pub fn now(&self) -> Timestamp {
        self.read_clock().now
    }

    /// Store time and *retention time* read together. Retention time is store time without
    /// the wall-clock gaps the store has not confirmed yet (kept for ten minutes of monotonic
    /// time): it decides expiry and forgetting, so a wall-clock jump alone never makes a known
    /// key unknown.
    pub fn decision_time(&self) -> DecisionTime {
        self.read_clock()
    }

    /// Reads the clock outside a write transaction. A reading that found a wall-clock jump put
    /// right (pending gaps cancelled) persists the clock at once — the one write a read may
    /// make, and a rare one — because a restart that forgot the cancellation could later take
    /// the jump for time that passed. Best effort: when another write transaction is running,
    /// its commit persists it; on failure the cancellation stays in memory.
    pub(crate) fn read_clock(&self) -> DecisionTime {
        let at = self.clock.read();
        if self.clock.cancelled() && !self.is_read_only() {
            let _ = self.persist_clock_now();
        }
        at
    }

    fn persist_clock_now(&self) -> Result<(), Error> {
        let mut tx = match self.db.writable()?.try_begin_write() {
            Ok(tx) => tx,
            Err(redb::TransactionError::WouldBlock) => return Ok(()),
            Err(other) => return Err(other.into()),
        };
        tx.set_durability(redb::Durability::Immediate)?;
        self.persist_clock_if_due(&tx, true)?;
        let committed = tx.commit();
        self.snapshots.invalidate();
        committed?;
        Ok(())
    }

    /// Whether the store was opened read-only ([`StoreBuilder::open_read_only`]).
    pub fn is_read_only(&self) -> bool {
        self.db.is_read_only()
    }

    /// The keyed hash that logs and the audit trail use for `(scope, key)`.
    pub fn key_hash(&self, scope: &Scope, key: &IdempotencyKey) -> KeyHash {
        KeyHash::compute(&self.secret, &ScopedKey::new(scope.clone(), key.clone()).encode())
    }

    pub(crate) fn key_hash_of(&self, scoped: &[u8]) -> KeyHash {
        KeyHash::compute(&self.secret, scoped)
    }

    pub(crate) fn fence_floor(&self) -> u64 {
        self.fence_floor.load(Ordering::SeqCst)
    }

    /// Raises the fence floor before a removal commits (raising it early is harmless).
    pub(crate) fn raise_fence_floor(&self, tx: &WriteTransaction, fence: u64) -> Result<(), Error> {
        let floor = self.fence_floor.fetch_max(fence, Ordering::SeqCst).max(fence);
        tx.open_table(META)?.insert(META_FENCE_FLOOR, floor.to_be_bytes().as_slice())?;
        Ok(())
    }

    pub(crate) fn next_audit_sequence(&self) -> u64 {
        self.audit_sequence.fetch_add(1, Ordering::SeqCst)
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
    /// the same commit** (see [`Txn::tables`]).
    ///
    /// ```
    /// use idemdb::{Reservation, Scope, Store, IdempotencyKey, Fingerprint};
    /// use redb::TableDefinition;
    /// const ORDERS: TableDefinition<&str, u64> = TableDefinition::new("app_orders");
    ///
    /// let store = Store::in_memory()?;
    /// let scope = Scope::new("acme", "place_order")?;
    /// let key = IdempotencyKey::new("order-842")?;
    /// let fp = Fingerprint::from_bytes([9; 32]);
    /// let Reservation::Acquired(lease) = store.reserve(&scope, &key, &fp)? else { panic!() };
    /// store.write(|txn| {
    ///     txn.tables().open_table(ORDERS).map_err(idemdb::Error::from)?
    ///         .insert("order-842", 1050).map_err(idemdb::Error::from)?;
    ///     txn.complete(&lease, b"order placed".to_vec())
    /// })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The closure's error, or [`Error`] converted into it when the transaction could not
    /// begin or commit.
    pub fn write<T, E: From<Error>>(&self, f: impl FnOnce(&mut Txn<'_>) -> Result<T, E>) -> Result<T, E> {
        let mut txn = Txn::begin(self)?;
        let value = f(&mut txn)?;
        txn.commit()?;
        Ok(value)
    }

    pub(crate) fn begin_write(&self) -> Result<WriteTransaction, Error> {
        let mut tx = self.db.writable()?.begin_write()?;
        tx.set_durability(match self.config.durability {
            Durability::Immediate => redb::Durability::Immediate,
            Durability::Eventual => redb::Durability::None,
        })?;
        Ok(tx)
    }

    /// Writes the clock state (retention time, unconfirmed gaps) into `tx` when it moved on
    /// enough since last time: retention time by a second, or the gaps changed.
    pub(crate) fn persist_clock_if_due(&self, tx: &WriteTransaction, force: bool) -> Result<(), Error> {
        if let Some(state) = self.clock.take_due(force) {
            let mut meta = tx.open_table(META)?;
            meta.insert(META_CLOCK, state.trusted.to_be_bytes().as_slice())?;
            meta.insert(META_CLOCK_PENDING, state.encode_pending().as_slice())?;
        }
        Ok(())
    }

    /// Reserves `(scope, key)` for a request with `fingerprint`, or says why not.
    ///
    /// ```
    /// use idemdb::{Fingerprint, IdempotencyKey, Reservation, Scope, Store};
    /// let store = Store::in_memory()?;
    /// let scope = Scope::new("acme", "create_payment")?;
    /// let key = Store::new_key()?;
    /// let fp = Fingerprint::from_bytes([1; 32]);
    /// let Reservation::Acquired(lease) = store.reserve(&scope, &key, &fp)? else { panic!() };
    /// store.complete(&lease, b"{\"charge\":\"ch_1\"}".to_vec())?;
    /// let again = store.reserve(&scope, &key, &fp)?;
    /// assert!(matches!(again, Reservation::Replay { ref body, .. } if body == b"{\"charge\":\"ch_1\"}"));
    /// let other = store.reserve(&scope, &key, &Fingerprint::from_bytes([2; 32]))?;
    /// assert!(matches!(other, Reservation::Mismatch { .. }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Storage`] / [`Error::CommitUnknown`] when the storage fails,
    /// [`Error::Corrupt`] for an undecodable record.
    pub fn reserve(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
    ) -> Result<Reservation, Error> {
        self.reserve_inner(scope, key, fingerprint, None)
    }

    /// [`Store::reserve`] with a correlation id recorded in the audit trail and log events.
    ///
    /// # Errors
    /// As [`Store::reserve`], and [`Error::Key`] for an invalid correlation id.
    pub fn reserve_traced(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        correlation: &str,
    ) -> Result<Reservation, Error> {
        idemdb_core::validate_correlation(correlation)?;
        self.reserve_inner(scope, key, fingerprint, Some(correlation))
    }

    fn reserve_inner(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        correlation: Option<&str>,
    ) -> Result<Reservation, Error> {
        // Answers that change nothing (replay, in progress, mismatch, expired, uncertain) are
        // decided from a read snapshot: no write lock, no flush, no clone of the scope or key.
        if let Some(answer) = self.answer_from_snapshot(scope, key, fingerprint, correlation)? {
            return Ok(answer);
        }
        let scoped = ScopedKey::new(scope.clone(), key.clone());
        let fingerprint = *fingerprint;
        let correlation = correlation.map(str::to_string);
        self.group
            .run(self, move |txn| txn.reserve_traced(&scoped.scope, &scoped.key, &fingerprint, correlation.as_deref()))
    }

    fn answer_from_snapshot(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        correlation: Option<&str>,
    ) -> Result<Option<Reservation>, Error> {
        let encoded = ScopedKey::encode_parts(scope, key);
        let Some(record) = self.get_encoded(&encoded)? else { return Ok(None) };
        let at = self.read_clock();
        let decision =
            decide_above(Some(&record), fingerprint, at, self.policy(scope.operation()), self.fence_floor())?;
        if decision.write.is_some() {
            return Ok(None);
        }
        let (answer, kind, fence) =
            reservation_from(decision.verdict, Some(record), || ScopedKey::new(scope.clone(), key.clone()))?;
        if let Some(event) = self.audit_event(at.now, kind, scope, &encoded, fence, Some(fingerprint), correlation) {
            self.buffer_audit(event)?;
        }
        Ok(Some(answer))
    }

    /// Stores the result of the lease's attempt; retries replay it byte for byte.
    ///
    /// # Errors
    /// [`Error::Transition`] for a stale fence, a finished record or a result over the limit;
    /// [`Error::NotFound`]; storage errors.
    pub fn complete(&self, lease: &Lease, result: impl Into<Vec<u8>>) -> Result<(), Error> {
        let result = result.into();
        let lease = lease.clone();
        self.group.run(self, move |txn| txn.complete(&lease, result))
    }

    /// Records that the lease's attempt failed.
    ///
    /// # Errors
    /// As [`Store::complete`].
    pub fn fail(&self, lease: &Lease, failure: Failure) -> Result<(), Error> {
        let lease = lease.clone();
        self.group.run(self, move |txn| txn.fail(&lease, failure))
    }

    /// Extends the lease; returns the renewed lease.
    ///
    /// # Errors
    /// [`Error::Transition`] when the lease is stale or the record is no longer in progress.
    pub fn renew(&self, lease: &Lease) -> Result<Lease, Error> {
        let lease = lease.clone();
        self.group.run(self, move |txn| txn.renew(&lease))
    }

    /// Resolves an uncertain record.
    ///
    /// # Errors
    /// [`Error::Transition`] when the record is not uncertain or its lease is still live;
    /// [`Error::NotFound`].
    pub fn reconcile(&self, scope: &Scope, key: &IdempotencyKey, resolution: Resolution) -> Result<(), Error> {
        let (scope, key) = (scope.clone(), key.clone());
        self.group.run(self, move |txn| txn.reconcile(&scope, &key, resolution))
    }

    /// Reserves, runs `operation` and completes, **in one commit**: for effects in the same
    /// database. If the operation fails, nothing is stored and the key stays free.
    ///
    /// ```
    /// use idemdb::{Executed, Fingerprint, IdempotencyKey, Scope, Store};
    /// use redb::{ReadableTable, TableDefinition};
    /// const BALANCES: TableDefinition<&str, i64> = TableDefinition::new("app_balances");
    ///
    /// let store = Store::in_memory()?;
    /// let scope = Scope::new("acme", "credit")?;
    /// let key = IdempotencyKey::new("credit-17")?;
    /// let fp = Fingerprint::from_bytes([3; 32]);
    /// let credit = |tables: &redb::WriteTransaction| -> Result<Vec<u8>, redb::Error> {
    ///     let mut balances = tables.open_table(BALANCES)?;
    ///     let old = balances.get("alice")?.map(|v| v.value()).unwrap_or(0);
    ///     balances.insert("alice", old + 100)?;
    ///     Ok((old + 100).to_string().into_bytes())
    /// };
    /// assert_eq!(store.execute(&scope, &key, &fp, credit)?, Executed::Ran { result: b"100".to_vec() });
    /// // A retry replays; the balance is credited once.
    /// assert!(matches!(store.execute(&scope, &key, &fp, credit)?, Executed::Answered(_)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`ExecuteError::Operation`] with the operation's error (everything rolled back), or
    /// [`ExecuteError::Store`].
    pub fn execute<E>(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        operation: impl FnOnce(&WriteTransaction) -> Result<Vec<u8>, E>,
    ) -> Result<Executed, ExecuteError<E>> {
        let mut txn = Txn::begin(self)?;
        let reservation = txn.reserve(scope, key, fingerprint)?;
        let Reservation::Acquired(lease) = reservation else {
            txn.commit()?;
            return Ok(Executed::Answered(reservation));
        };
        let result = operation(txn.tables()).map_err(ExecuteError::Operation)?;
        txn.complete(&lease, result.clone())?;
        txn.commit()?;
        Ok(Executed::Ran { result })
    }

    /// Reads the record of `(scope, key)`.
    ///
    /// # Errors
    /// Storage errors; [`Error::Corrupt`].
    pub fn get(&self, scope: &Scope, key: &IdempotencyKey) -> Result<Option<Record>, Error> {
        let scoped = ScopedKey::new(scope.clone(), key.clone()).encode();
        self.get_encoded(&scoped)
    }

    pub(crate) fn get_encoded(&self, scoped: &[u8]) -> Result<Option<Record>, Error> {
        let snapshot = self.snapshots.records(&self.db)?;
        let Some(value) = snapshot.records.get(scoped)? else { return Ok(None) };
        decode_record(value.value()).map(Some).map_err(|source| Error::Corrupt { what: "record", source })
    }

    /// Builds an audit event (when the audit table is on) and emits its `tracing` event.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn audit_event(
        &self,
        at: Timestamp,
        kind: AuditKind,
        scope: &Scope,
        encoded: &[u8],
        fence: u64,
        fingerprint: Option<&Fingerprint>,
        correlation: Option<&str>,
    ) -> Option<EncodedEvent> {
        let key_hash = self.key_hash_of(encoded);
        tracing::debug!(
            target: "idemdb",
            event = kind.as_str(),
            key_hash = %key_hash,
            tenant = scope.tenant(),
            operation = scope.operation(),
            fence,
            correlation = correlation.unwrap_or(""),
        );
        self.config.audit.then(|| {
            EncodedEvent::new(
                at,
                kind,
                scope.tenant(),
                scope.operation(),
                key_hash,
                fence,
                fingerprint.map(fingerprint_prefix),
                correlation,
            )
        })
    }

    /// Keeps an answer's audit event for a later commit; commits the buffer when it is full.
    /// A read-only store writes no audit trail (its answers still emit `tracing` events).
    fn buffer_audit(&self, event: EncodedEvent) -> Result<(), Error> {
        if self.is_read_only() {
            return Ok(());
        }
        let full = {
            let mut buffer = self.buffered_audit.lock().unwrap_or_else(PoisonError::into_inner);
            buffer.push(event);
            buffer.len() >= AUDIT_BUFFER
        };
        if full {
            self.write(|_| Ok::<(), Error>(()))?;
        }
        Ok(())
    }

    pub(crate) fn buffer_audit_events(&self, mut events: Vec<EncodedEvent>) {
        if !events.is_empty() {
            self.buffered_audit.lock().unwrap_or_else(PoisonError::into_inner).append(&mut events);
        }
    }

    /// Whether a commit at `now` carrying `own` new events should write the audit batch:
    /// when forced, when the buffer reaches [`AUDIT_BATCH`] events, or when its oldest event is
    /// [`AUDIT_DELAY_MS`] old.
    pub(crate) fn audit_batch_due(&self, own: usize, now: Timestamp, force: bool) -> bool {
        if !self.config.audit {
            return false;
        }
        let buffer = self.buffered_audit.lock().unwrap_or_else(PoisonError::into_inner);
        if buffer.is_empty() && own == 0 {
            return false;
        }
        force
            || buffer.len() + own >= AUDIT_BATCH
            || buffer
                .first()
                .is_some_and(|oldest| now.as_millis() >= oldest.at.as_millis().saturating_add(AUDIT_DELAY_MS))
    }

    /// The events not yet written, decoded.
    pub(crate) fn buffered_audit_events(&self) -> Result<Vec<AuditEvent>, Error> {
        let buffer = self.buffered_audit.lock().unwrap_or_else(PoisonError::into_inner);
        buffer
            .iter()
            .map(|event| event.decode().map_err(|source| Error::Corrupt { what: "buffered audit event", source }))
            .collect()
    }

    pub(crate) fn take_buffered_audit(&self) -> Vec<EncodedEvent> {
        std::mem::take(&mut *self.buffered_audit.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Makes every earlier commit durable (needed only with [`Durability::Eventual`]).
    ///
    /// # Errors
    /// Storage errors.
    pub fn flush(&self) -> Result<(), Error> {
        let mut txn = Txn::begin(self)?;
        txn.make_durable()?;
        self.persist_clock_if_due(txn.tables(), true)?;
        txn.commit()
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if self.is_read_only() {
            return;
        }
        // Best effort: keep the clock state (as of now) and buffered audit events.
        self.clock.read();
        let buffered = !self.buffered_audit.lock().unwrap_or_else(PoisonError::into_inner).is_empty();
        if buffered || self.clock.changed() {
            let _ = self.flush();
        }
    }
}
