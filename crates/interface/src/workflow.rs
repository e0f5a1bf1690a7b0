//! The workflow primitives behind the same interface: the outbox, the reconciliation queue,
//! the webhook inbox and queue jobs, so code written against [`WorkflowStore`] runs on the
//! redb store and on the PostgreSQL adapter alike. The rules are the core's
//! ([`OutboxItem`], [`idemdb_core::accept`], [`idemdb_core::claim_job`]); a backend only
//! stores what they decide, each call in one transaction.
//!
//! Effects written in the same transaction as the application's own rows go through the
//! backend's own transaction API (`Txn::enqueue_effect` on redb); the methods here each run a
//! transaction of their own.

use std::future::Future;

use idemdb_core::{
    Attention, Compensation, Delivery, DomainGuard, EffectName, EffectReport, Fingerprint, IdempotencyKey, InboxAnswer,
    JobAnswer, JobLease, JobRecord, Lease, ObjectRecord, OutboxItem, ProviderState, ResolutionCause, Scope,
};

use crate::IdempotencyStore;

/// The outbox, reconciliation queue, inbox and jobs of a backend.
pub trait WorkflowStore: IdempotencyStore {
    /// Enqueues an external effect of the intent `lease` holds, under the provider key
    /// `<key>:<effect>-v<version>`.
    fn enqueue_effect(
        &self,
        lease: &Lease,
        effect: &EffectName,
        version: u16,
        payload: Vec<u8>,
    ) -> impl Future<Output = Result<OutboxItem, Self::Error>> + Send;

    /// Claims up to `limit` due effects for dispatch.
    fn claim_effects(&self, limit: usize) -> impl Future<Output = Result<Vec<OutboxItem>, Self::Error>> + Send;

    /// Reports what the provider answered for a claimed effect; the intent's record follows.
    fn report_effect(
        &self,
        claim: &OutboxItem,
        report: EffectReport,
    ) -> impl Future<Output = Result<OutboxItem, Self::Error>> + Send;

    /// Sends an uncertain effect again, inside the provider's key-retention window only.
    fn retry_effect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
        cause: ResolutionCause,
    ) -> impl Future<Output = Result<OutboxItem, Self::Error>> + Send;

    /// Records what the provider says about an uncertain effect; `cause` says who learnt it
    /// and how (the audit trail records it).
    fn resolve_effect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
        state: ProviderState,
        cause: ResolutionCause,
    ) -> impl Future<Output = Result<OutboxItem, Self::Error>> + Send;

    /// The effect `effect` of `(scope, key)`.
    fn effect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
    ) -> impl Future<Output = Result<Option<OutboxItem>, Self::Error>> + Send;

    /// The reconciliation queue, oldest first (`limit` 0: all).
    fn reconciliation_queue(&self, limit: usize) -> impl Future<Output = Result<Vec<Attention>, Self::Error>> + Send;

    /// Links a deliberate new attempt (`new_key`) to the intent it replaces, in the audit trail.
    fn supersede(
        &self,
        scope: &Scope,
        old_key: &IdempotencyKey,
        new_key: &IdempotencyKey,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Accepts a webhook delivery under `guard`.
    fn accept_delivery<G: DomainGuard + Send + Sync + 'static>(
        &self,
        delivery: &Delivery,
        guard: G,
    ) -> impl Future<Output = Result<InboxAnswer, Self::Error>> + Send;

    /// The object `object_id` of `source`, as the applied deliveries left it.
    fn object(
        &self,
        source: &str,
        object_id: &str,
    ) -> impl Future<Output = Result<Option<ObjectRecord>, Self::Error>> + Send;

    /// Claims job `(scope, job)` for a delivery of its message.
    fn claim_job(
        &self,
        scope: &Scope,
        job: &IdempotencyKey,
        fingerprint: &Fingerprint,
    ) -> impl Future<Output = Result<JobAnswer, Self::Error>> + Send;

    /// Records a finished step of the job (its own effect went through the outbox, or is
    /// already on record).
    fn record_step(
        &self,
        lease: &JobLease,
        step: &EffectName,
        result: Vec<u8>,
        compensation: Option<Vec<u8>>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Finishes the job.
    fn finish_job(&self, lease: &JobLease, result: Vec<u8>) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Gives the saga up; returns its compensations, newest first.
    fn abandon_job(
        &self,
        lease: &JobLease,
        reason: &str,
    ) -> impl Future<Output = Result<Vec<Compensation>, Self::Error>> + Send;

    /// Records that the compensation of `step` ran.
    fn record_compensated(
        &self,
        lease: &JobLease,
        step: &EffectName,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// The record of job `(scope, job)`.
    fn job(
        &self,
        scope: &Scope,
        job: &IdempotencyKey,
    ) -> impl Future<Output = Result<Option<JobRecord>, Self::Error>> + Send;
}
