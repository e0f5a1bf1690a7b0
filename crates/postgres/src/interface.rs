//! The PostgreSQL adapter behind the async store interface ([`IdempotencyStore`] and
//! [`WorkflowStore`]): each method is the inherent method of the same name.

use std::future::Future;

use idemdb_core::{
    Attention, Compensation, Delivery, DomainGuard, EffectName, EffectReport, Failure, Fingerprint, IdempotencyKey,
    InboxAnswer, JobAnswer, JobLease, JobRecord, KeyHash, Lease, ObjectRecord, OutboxItem, Policy, ProviderState,
    PurgeReport, Record, Reservation, Reserve, Resolution, Scope,
};
use idemdb_interface::{BusinessStore, IdempotencyStore, WorkflowStore};

use crate::{Error, PgStore};
use idemdb_core::ResolutionCause;

impl IdempotencyStore for PgStore {
    type Error = Error;

    fn policy(&self, operation: &str) -> &Policy {
        PgStore::policy(self, operation)
    }

    fn key_hash(&self, scope: &Scope, key: &IdempotencyKey) -> KeyHash {
        PgStore::key_hash(self, scope, key)
    }

    fn tenant_hash(&self, tenant: &str) -> KeyHash {
        PgStore::tenant_hash(self, tenant)
    }

    fn reserve(&self, request: Reserve<'_>) -> impl Future<Output = Result<Reservation, Error>> + Send {
        PgStore::reserve(self, request)
    }

    fn complete(&self, lease: &Lease, result: Vec<u8>) -> impl Future<Output = Result<(), Error>> + Send {
        PgStore::complete(self, lease, result)
    }

    fn fail(&self, lease: &Lease, failure: Failure) -> impl Future<Output = Result<(), Error>> + Send {
        PgStore::fail(self, lease, failure)
    }

    fn renew(&self, lease: &Lease) -> impl Future<Output = Result<Lease, Error>> + Send {
        PgStore::renew(self, lease)
    }

    fn reconcile(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        resolution: Resolution,
        cause: ResolutionCause,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        PgStore::reconcile(self, scope, key, resolution, cause)
    }

    fn get(&self, scope: &Scope, key: &IdempotencyKey) -> impl Future<Output = Result<Option<Record>, Error>> + Send {
        PgStore::get(self, scope, key)
    }

    fn purge_expired(&self, budget: usize) -> impl Future<Output = Result<PurgeReport, Error>> + Send {
        PgStore::purge_expired(self, budget)
    }
}

/// The operator listings: the outbox ([`PgStore::effects`]), the inbox
/// ([`PgStore::deliveries`]) and a key's audit history ([`PgStore::key_history`]).
impl idemdb_interface::InspectStore for PgStore {
    async fn list_effects(
        &self,
        state: Option<idemdb_core::OutboxStateKind>,
        limit: usize,
    ) -> Result<Option<Vec<idemdb_core::OutboxItem>>, Error> {
        self.effects(state, limit).await.map(Some)
    }

    async fn list_deliveries(&self, limit: usize) -> Result<Option<Vec<idemdb_interface::ListedDelivery>>, Error> {
        self.deliveries(limit).await.map(Some)
    }

    async fn key_history(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        window: usize,
    ) -> Result<Option<Vec<idemdb_core::AuditEvent>>, Error> {
        PgStore::key_history(self, scope, key, window).await.map(Some)
    }
}

/// The workflow primitives: each method is the inherent method of the same name.
impl WorkflowStore for PgStore {
    fn enqueue_effect(
        &self,
        lease: &Lease,
        effect: &EffectName,
        version: u16,
        payload: Vec<u8>,
    ) -> impl Future<Output = Result<OutboxItem, Error>> + Send {
        PgStore::enqueue_effect(self, lease, effect, version, payload)
    }

    fn claim_effects(&self, limit: usize) -> impl Future<Output = Result<Vec<OutboxItem>, Error>> + Send {
        PgStore::claim_effects(self, limit)
    }

    fn report_effect(
        &self,
        claim: &OutboxItem,
        report: EffectReport,
    ) -> impl Future<Output = Result<OutboxItem, Error>> + Send {
        PgStore::report_effect(self, claim, report)
    }

    fn retry_effect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
        cause: ResolutionCause,
    ) -> impl Future<Output = Result<OutboxItem, Error>> + Send {
        PgStore::retry_effect(self, scope, key, effect, cause)
    }

    fn resolve_effect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
        state: ProviderState,
        cause: ResolutionCause,
    ) -> impl Future<Output = Result<OutboxItem, Error>> + Send {
        PgStore::resolve_effect(self, scope, key, effect, state, cause)
    }

    fn effect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
    ) -> impl Future<Output = Result<Option<OutboxItem>, Error>> + Send {
        PgStore::effect(self, scope, key, effect)
    }

    fn reconciliation_queue(&self, limit: usize) -> impl Future<Output = Result<Vec<Attention>, Error>> + Send {
        PgStore::reconciliation_queue(self, limit)
    }

    fn supersede(
        &self,
        scope: &Scope,
        old_key: &IdempotencyKey,
        new_key: &IdempotencyKey,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        PgStore::supersede(self, scope, old_key, new_key)
    }

    fn accept_delivery<G: DomainGuard + Send + Sync + 'static>(
        &self,
        delivery: &Delivery,
        guard: G,
    ) -> impl Future<Output = Result<InboxAnswer, Error>> + Send {
        let (store, delivery) = (self.clone(), delivery.clone());
        async move { store.accept_delivery(&delivery, &guard).await }
    }

    fn object(
        &self,
        source: &str,
        object_id: &str,
    ) -> impl Future<Output = Result<Option<ObjectRecord>, Error>> + Send {
        PgStore::object(self, source, object_id)
    }

    fn claim_job(
        &self,
        scope: &Scope,
        job: &IdempotencyKey,
        fingerprint: &Fingerprint,
    ) -> impl Future<Output = Result<JobAnswer, Error>> + Send {
        PgStore::claim_job(self, scope, job, fingerprint)
    }

    fn record_step(
        &self,
        lease: &JobLease,
        step: &EffectName,
        result: Vec<u8>,
        compensation: Option<Vec<u8>>,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        PgStore::record_step(self, lease, step, result, compensation)
    }

    fn finish_job(&self, lease: &JobLease, result: Vec<u8>) -> impl Future<Output = Result<(), Error>> + Send {
        PgStore::finish_job(self, lease, result)
    }

    fn abandon_job(
        &self,
        lease: &JobLease,
        reason: &str,
    ) -> impl Future<Output = Result<Vec<Compensation>, Error>> + Send {
        PgStore::abandon_job(self, lease, reason)
    }

    fn record_compensated(
        &self,
        lease: &JobLease,
        step: &EffectName,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        PgStore::record_compensated(self, lease, step)
    }

    fn job(
        &self,
        scope: &Scope,
        job: &IdempotencyKey,
    ) -> impl Future<Output = Result<Option<JobRecord>, Error>> + Send {
        PgStore::job(self, scope, job)
    }
}

impl BusinessStore for PgStore {
    fn commit_business(
        &self,
        write: idemdb_core::BusinessWrite,
    ) -> impl Future<Output = Result<Vec<OutboxItem>, Error>> + Send {
        PgStore::commit_business(self, write)
    }

    fn row(
        &self,
        table: idemdb_core::RowTable,
        partition: &str,
        id: &str,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, Error>> + Send {
        PgStore::row(self, table, partition, id)
    }

    fn rows(
        &self,
        table: idemdb_core::RowTable,
        partition: &str,
        after: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<idemdb_core::Row>, Error>> + Send {
        PgStore::rows(self, table, partition, after, limit)
    }
}
