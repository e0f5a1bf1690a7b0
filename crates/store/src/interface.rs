//! The redb store behind the async store interface ([`IdempotencyStore`]).
//!
//! Lookups answer inline: a replay or a refusal is decided from a cached read snapshot in
//! microseconds. Everything that commits (an acquisition, complete, fail, renew, reconcile,
//! purge) waits for a flush, so it runs on a blocking thread pool and joins the group commit
//! there; an async runtime's worker threads never wait on an `fsync`. On `wasm32` there are no
//! threads: every call runs inline and its future is ready when first polled.
//!
//! [`Store`]'s own methods block; the interface is implemented by a separate handle,
//! [`AsyncStore`] ([`Store::asynchronous`]), so a method call never silently picks the blocking
//! method where the async one was meant: a `Store` has only blocking methods, an `AsyncStore`
//! only async ones (as `reqwest` keeps its blocking client in a type of its own).
//!
//! ```
//! use idemdb::{Fingerprint, IdempotencyKey, Reservation, Reserve, Scope, Store};
//! use idemdb_interface::IdempotencyStore;
//!
//! async fn charge_once<S: IdempotencyStore>(store: &S, scope: &Scope, key: &IdempotencyKey) -> Result<Vec<u8>, S::Error> {
//!     let fp = Fingerprint::from_bytes([1; 32]);
//!     match store.reserve(Reserve::new(scope, key, &fp)).await? {
//!         Reservation::Acquired(lease) => {
//!             store.complete(&lease, b"ch_1".to_vec()).await?;
//!             Ok(b"ch_1".to_vec())
//!         }
//!         Reservation::Replay { body, .. } => Ok(body),
//!         other => panic!("{other:?}"),
//!     }
//! }
//!
//! let store = Store::in_memory()?;
//! let scope = Scope::new("acme", "create_payment")?;
//! let key = IdempotencyKey::new("order-842")?;
//! let store = store.asynchronous();
//! assert_eq!(pollster::block_on(charge_once(&store, &scope, &key))?, b"ch_1");
//! assert_eq!(pollster::block_on(charge_once(&store, &scope, &key))?, b"ch_1", "a replay");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::future::Future;

#[cfg(feature = "workflow")]
use idemdb_core::{
    Attention, Compensation, Delivery, DomainGuard, EffectName, EffectReport, Fingerprint, InboxAnswer, JobAnswer,
    JobLease, JobRecord, ObjectRecord, OutboxItem, ProviderState,
};
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
use idemdb_core::{BusinessWrite, Row, RowTable};
use idemdb_core::{
    Failure, IdempotencyKey, KeyHash, Lease, Policy, PurgeReport, Record, Reservation, Reserve, Resolution, Scope,
};
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
use idemdb_interface::BusinessStore;
use idemdb_interface::IdempotencyStore;
#[cfg(feature = "workflow")]
use idemdb_interface::{InspectStore, ListedDelivery, WorkflowStore};

use crate::{Error, Store};
use idemdb_core::ResolutionCause;

/// Runs `work` where it may block: a blocking pool natively, inline on wasm32.
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
async fn off_runtime<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    blocking::unblock(work).await
}

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
async fn off_runtime<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    work()
}

/// The async handle of a [`Store`]: the same store (a clone of the handle, cheap: two reference
/// counts), seen through the async store interface ([`IdempotencyStore`], [`WorkflowStore`],
/// [`InspectStore`]) that the HTTP layer and backend-neutral code are generic over.
///
/// Its methods are the interface's, and they are async; [`Store`]'s methods of the same names
/// block. Keeping the two in separate types means a call always means what it says.
///
/// ```
/// use idemdb::Store;
/// use idemdb_interface::IdempotencyStore;
///
/// let store = Store::in_memory()?;
/// let handle = store.asynchronous();
/// assert_eq!(handle.policy("any"), store.policy("any"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct AsyncStore {
    store: Store,
}

impl Store {
    /// This store's async handle, for code generic over the store interface.
    pub fn asynchronous(&self) -> AsyncStore {
        AsyncStore { store: self.clone() }
    }
}

impl AsyncStore {
    /// The blocking store behind this handle.
    pub fn blocking(&self) -> &Store {
        &self.store
    }
}

impl std::fmt::Debug for AsyncStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncStore").finish_non_exhaustive()
    }
}

impl From<Store> for AsyncStore {
    fn from(store: Store) -> Self {
        AsyncStore { store }
    }
}

/// The futures own a clone of the handle (cheap: two reference counts).
impl IdempotencyStore for AsyncStore {
    type Error = Error;

    fn policy(&self, operation: &str) -> &Policy {
        Store::policy(&self.store, operation)
    }

    fn key_hash(&self, scope: &Scope, key: &IdempotencyKey) -> KeyHash {
        Store::key_hash(&self.store, scope, key)
    }

    fn tenant_hash(&self, tenant: &str) -> KeyHash {
        Store::tenant_hash(&self.store, tenant)
    }

    fn reserve(&self, request: Reserve<'_>) -> impl Future<Output = Result<Reservation, Error>> + Send {
        let store = self.store.clone();
        let (scope, key, fingerprint) = (request.scope().clone(), request.key().clone(), *request.fingerprint());
        let correlation = request.correlation().map(str::to_string);
        let effects = request.into_effects();
        async move {
            // A replay, a conflict or a key in progress needs no commit (and no effect is
            // enqueued for an answer other than an acquisition).
            if let Some(answer) = store.answer_from_snapshot(&scope, &key, &fingerprint, correlation.as_deref())? {
                if store.engine.clock_unsaved() {
                    // The reading put a wall-clock jump right: written before the answer, off
                    // the runtime (see `Store::save_clock_if_put_right`).
                    let saving = store.clone();
                    off_runtime(move || saving.save_clock_if_put_right()).await;
                }
                return Ok(answer);
            }
            if effects.is_empty() {
                return off_runtime(move || store.reserve_in_commit(scope, key, fingerprint, correlation)).await;
            }
            off_runtime(move || {
                store.reserve(
                    Reserve::new(&scope, &key, &fingerprint).traced(correlation.as_deref())?.enqueuing(effects),
                )
            })
            .await
        }
    }

    fn complete(&self, lease: &Lease, result: Vec<u8>) -> impl Future<Output = Result<(), Error>> + Send {
        let (store, lease) = (self.store.clone(), lease.clone());
        off_runtime(move || store.complete(&lease, result))
    }

    fn fail(&self, lease: &Lease, failure: Failure) -> impl Future<Output = Result<(), Error>> + Send {
        let (store, lease) = (self.store.clone(), lease.clone());
        off_runtime(move || store.fail(&lease, failure))
    }

    fn renew(&self, lease: &Lease) -> impl Future<Output = Result<Lease, Error>> + Send {
        let (store, lease) = (self.store.clone(), lease.clone());
        off_runtime(move || store.renew(&lease))
    }

    fn reconcile(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        resolution: Resolution,
        cause: ResolutionCause,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        let (store, scope, key) = (self.store.clone(), scope.clone(), key.clone());
        off_runtime(move || store.reconcile(&scope, &key, resolution, cause))
    }

    fn get(&self, scope: &Scope, key: &IdempotencyKey) -> impl Future<Output = Result<Option<Record>, Error>> + Send {
        let answer = Store::get(&self.store, scope, key);
        async move { answer }
    }

    fn purge_expired(&self, budget: usize) -> impl Future<Output = Result<PurgeReport, Error>> + Send {
        let store = self.store.clone();
        off_runtime(move || store.purge_expired(budget))
    }
}

/// Every call runs in a transaction of its own, on the blocking pool natively (each waits
/// for a flush).
#[cfg(feature = "workflow")]
impl WorkflowStore for AsyncStore {
    fn enqueue_effect(
        &self,
        lease: &Lease,
        effect: &EffectName,
        version: u16,
        payload: Vec<u8>,
    ) -> impl Future<Output = Result<OutboxItem, Error>> + Send {
        let (store, lease, effect) = (self.store.clone(), lease.clone(), effect.clone());
        off_runtime(move || store.enqueue_effect(&lease, &effect, version, payload))
    }

    fn claim_effects(&self, limit: usize) -> impl Future<Output = Result<Vec<OutboxItem>, Error>> + Send {
        let store = self.store.clone();
        off_runtime(move || store.claim_effects(limit))
    }

    fn report_effect(
        &self,
        claim: &OutboxItem,
        report: EffectReport,
    ) -> impl Future<Output = Result<OutboxItem, Error>> + Send {
        let (store, claim) = (self.store.clone(), claim.clone());
        off_runtime(move || store.report_effect(&claim, report))
    }

    fn retry_effect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
        cause: ResolutionCause,
    ) -> impl Future<Output = Result<OutboxItem, Error>> + Send {
        let (store, scope, key, effect) = (self.store.clone(), scope.clone(), key.clone(), effect.clone());
        off_runtime(move || store.retry_effect(&scope, &key, &effect, cause))
    }

    fn resolve_effect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
        state: ProviderState,
        cause: ResolutionCause,
    ) -> impl Future<Output = Result<OutboxItem, Error>> + Send {
        let (store, scope, key, effect) = (self.store.clone(), scope.clone(), key.clone(), effect.clone());
        off_runtime(move || store.resolve_effect(&scope, &key, &effect, state, cause))
    }

    fn effect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
    ) -> impl Future<Output = Result<Option<OutboxItem>, Error>> + Send {
        let answer = Store::effect(&self.store, scope, key, effect);
        async move { answer }
    }

    fn reconciliation_queue(&self, limit: usize) -> impl Future<Output = Result<Vec<Attention>, Error>> + Send {
        let answer = Store::reconciliation_queue(&self.store, limit);
        async move { answer }
    }

    fn supersede(
        &self,
        scope: &Scope,
        old_key: &IdempotencyKey,
        new_key: &IdempotencyKey,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        let (store, scope, old_key, new_key) = (self.store.clone(), scope.clone(), old_key.clone(), new_key.clone());
        off_runtime(move || store.supersede(&scope, &old_key, &new_key))
    }

    fn accept_delivery<G: DomainGuard + Send + Sync + 'static>(
        &self,
        delivery: &Delivery,
        guard: G,
    ) -> impl Future<Output = Result<InboxAnswer, Error>> + Send {
        let (store, delivery) = (self.store.clone(), delivery.clone());
        off_runtime(move || store.accept_delivery(&delivery, &guard))
    }

    fn object(
        &self,
        source: &str,
        object_id: &str,
    ) -> impl Future<Output = Result<Option<ObjectRecord>, Error>> + Send {
        let answer = Store::object(&self.store, source, object_id);
        async move { answer }
    }

    fn claim_job(
        &self,
        scope: &Scope,
        job: &IdempotencyKey,
        fingerprint: &Fingerprint,
    ) -> impl Future<Output = Result<JobAnswer, Error>> + Send {
        let (store, scope, job, fingerprint) = (self.store.clone(), scope.clone(), job.clone(), *fingerprint);
        off_runtime(move || store.claim_job(&scope, &job, &fingerprint))
    }

    fn record_step(
        &self,
        lease: &JobLease,
        step: &EffectName,
        result: Vec<u8>,
        compensation: Option<Vec<u8>>,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        let (store, lease, step) = (self.store.clone(), lease.clone(), step.clone());
        off_runtime(move || store.record_step(&lease, &step, result, compensation))
    }

    fn finish_job(&self, lease: &JobLease, result: Vec<u8>) -> impl Future<Output = Result<(), Error>> + Send {
        let (store, lease) = (self.store.clone(), lease.clone());
        off_runtime(move || store.finish_job(&lease, result))
    }

    fn abandon_job(
        &self,
        lease: &JobLease,
        reason: &str,
    ) -> impl Future<Output = Result<Vec<Compensation>, Error>> + Send {
        let (store, lease, reason) = (self.store.clone(), lease.clone(), reason.to_string());
        off_runtime(move || store.abandon_job(&lease, &reason))
    }

    fn record_compensated(
        &self,
        lease: &JobLease,
        step: &EffectName,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        let (store, lease, step) = (self.store.clone(), lease.clone(), step.clone());
        off_runtime(move || store.record_compensated(&lease, &step))
    }

    fn job(
        &self,
        scope: &Scope,
        job: &IdempotencyKey,
    ) -> impl Future<Output = Result<Option<JobRecord>, Error>> + Send {
        let answer = Store::job(&self.store, scope, job);
        async move { answer }
    }
}

impl AsyncStore {
    /// [`Store::write`] for async code: the transaction (and its flush) runs on the blocking
    /// pool, so the runtime's threads never wait for it. This is how an async handler writes
    /// its own tables and completes the record in the same commit.
    ///
    /// ```
    /// use idemdb::{Fingerprint, IdempotencyKey, Reservation, Reserve, Scope, Store};
    /// use redb::TableDefinition;
    /// const ORDERS: TableDefinition<&str, u64> = TableDefinition::new("app_orders");
    ///
    /// let store = Store::builder().journaled_table(ORDERS).in_memory()?;
    /// let (scope, key) = (Scope::new("acme", "place_order")?, IdempotencyKey::new("order-842")?);
    /// let Reservation::Acquired(lease) = store.reserve(Reserve::new(&scope, &key, &Fingerprint::from_bytes([9; 32])))? else {
    ///     panic!()
    /// };
    /// pollster::block_on(store.asynchronous().write(move |txn| {
    ///     txn.table(ORDERS)?.insert("order-842", 1050)?;
    ///     txn.complete(&lease, b"order placed".to_vec())
    /// }))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`Store::write`].
    pub async fn write<T, E>(
        &self,
        f: impl FnOnce(&mut crate::Txn<'_>) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<Error> + Send + 'static,
    {
        let store = self.store.clone();
        off_runtime(move || store.write(f)).await
    }
}

/// The commit runs on the blocking pool (it waits for a flush); the reads answer inline from a
/// snapshot.
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
impl BusinessStore for AsyncStore {
    fn commit_business(
        &self,
        write: BusinessWrite,
    ) -> impl Future<Output = Result<Vec<idemdb_core::OutboxItem>, Error>> + Send {
        let store = self.store.clone();
        off_runtime(move || store.commit_business(write))
    }

    fn row(
        &self,
        table: RowTable,
        partition: &str,
        id: &str,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, Error>> + Send {
        std::future::ready(self.store.row(table, partition, id))
    }

    fn rows(
        &self,
        table: RowTable,
        partition: &str,
        after: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Row>, Error>> + Send {
        std::future::ready(self.store.rows(table, partition, after, limit))
    }
}

/// The listings read a snapshot inline: no commit, no `fsync`.
#[cfg(feature = "workflow")]
impl InspectStore for AsyncStore {
    fn list_effects(
        &self,
        state: Option<idemdb_core::OutboxStateKind>,
        limit: usize,
    ) -> impl Future<Output = Result<Option<Vec<OutboxItem>>, Error>> + Send {
        let filter = crate::EffectFilter { state, tenant: None, limit };
        std::future::ready(self.store.effects(&filter).map(Some))
    }

    fn list_deliveries(&self, limit: usize) -> impl Future<Output = Result<Option<Vec<ListedDelivery>>, Error>> + Send {
        let listed = self.store.deliveries(limit).map(|deliveries| {
            deliveries
                .into_iter()
                .map(|(source, delivery_id, record)| ListedDelivery { source, delivery_id, record })
                .collect()
        });
        std::future::ready(listed.map(Some))
    }

    fn key_history(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        window: usize,
    ) -> impl Future<Output = Result<Option<Vec<idemdb_core::AuditEvent>>, Error>> + Send {
        let hash = Store::key_hash(&self.store, scope, key);
        let events = self.store.audit_events(window).map(|events| {
            events.into_iter().filter(|event| event.key_hash == hash && event.tenant == scope.tenant()).collect()
        });
        std::future::ready(events.map(Some))
    }
}
