//! Queue jobs on PostgreSQL: one row per `(scope, job id)` in `idemdb_jobs`; a step's result is
//! recorded in the transaction of the step's own statements when the application runs them
//! in the same [`PgTxn`], so a redelivered job skips it.

use deadpool_postgres::tokio_postgres::types::ToSql;

use idemdb_core::{
    AuditKind, Compensation, Corrupt, DecisionContext, EffectName, Fingerprint, IdempotencyKey, JobAnswer, JobLease,
    JobRecord, JobRefusal, Scope, Timestamp, claim_job,
};

use super::LOCK_JOB;
use crate::audit::to_sql_ms;
use crate::error::Error;
use crate::store::PgStore;
use crate::txn::PgTxn;

impl PgTxn {
    /// Locks the job's identity and reads its record, then the time and the fence floor.
    async fn lock_job(
        &mut self,
        scope: &Scope,
        job: &IdempotencyKey,
    ) -> Result<(Option<JobRecord>, Timestamp, u64), Error> {
        self.advisory_lock(LOCK_JOB, &[scope.tenant(), scope.operation(), job.as_str()]).await?;
        let (now, floor) = self.time_and_floor().await?;
        let inner = self.inner_arc();
        let params: [&(dyn ToSql + Sync); 3] = [&scope.tenant(), &scope.operation(), &job.as_str()];
        let record = match self.query(&inner.sql.wf.job_get, &params).await?.first() {
            Some(row) => Some(
                JobRecord::decode(&row.try_get::<_, Vec<u8>>(0).map_err(Error::from_driver)?)
                    .map_err(Corrupt::of("job"))?,
            ),
            None => None,
        };
        Ok((record, now, floor))
    }

    async fn put_job(&mut self, scope: &Scope, job: &IdempotencyKey, record: &JobRecord) -> Result<(), Error> {
        let inner = self.inner_arc();
        let (state, forget_at, bytes) =
            (record.state.kind().as_str(), record.due_at().map(|at| to_sql_ms(at.as_millis())), record.encode());
        let params: [&(dyn ToSql + Sync); 6] =
            [&scope.tenant(), &scope.operation(), &job.as_str(), &state, &forget_at, &bytes];
        self.execute(&inner.sql.wf.job_upsert, &params).await.map(drop)
    }

    fn job_event(&mut self, kind: AuditKind, lease: &JobLease, record: &JobRecord, step: Option<&EffectName>) {
        let at = self.now().unwrap_or(record.updated_at);
        let fingerprint = (kind != AuditKind::JobStep).then_some(&record.fingerprint);
        let row = self.inner_arc().event(
            at,
            kind,
            &lease.scope,
            &lease.job,
            record.fence,
            fingerprint,
            step.map(EffectName::as_str),
        );
        self.push_event(row);
    }

    /// Applies `change` to the job `lease` names, writing what it returns.
    async fn change_job<T>(
        &mut self,
        lease: &JobLease,
        kind: AuditKind,
        step: Option<&EffectName>,
        change: impl FnOnce(&JobRecord, Timestamp) -> Result<(JobRecord, T), JobRefusal>,
    ) -> Result<T, Error> {
        let (record, now, _) = self.lock_job(&lease.scope, &lease.job).await?;
        let record = record.ok_or(JobRefusal::NotFound)?;
        let (next, value) = change(&record, now)?;
        self.put_job(&lease.scope, &lease.job, &next).await?;
        self.job_event(kind, lease, &next, step);
        Ok(value)
    }

    /// [`PgStore::claim_job`] inside this transaction.
    ///
    /// # Errors
    /// As [`PgStore::claim_job`].
    pub async fn claim_job(
        &mut self,
        scope: &Scope,
        job: &IdempotencyKey,
        fingerprint: &Fingerprint,
    ) -> Result<JobAnswer, Error> {
        let (existing, now, floor) = self.lock_job(scope, job).await?;
        let inner = self.inner_arc();
        let context = DecisionContext::new(now, inner.policy(scope.operation())).with_fence_floor(floor);
        let decision = claim_job(existing, scope, job, fingerprint, context)?;
        if let Some(record) = &decision.write {
            self.put_job(scope, job, record).await?;
            let row = inner.event(now, AuditKind::JobClaimed, scope, job, record.fence, Some(fingerprint), None);
            self.push_event(row);
        }
        Ok(decision.answer)
    }

    /// Records that `step` of the job `lease` runs finished with `result` (and what its
    /// compensation needs), in this transaction — the one that ran the step's own statements.
    ///
    /// # Errors
    /// [`JobRefusal::StepDone`], [`JobRefusal::StaleLease`], [`JobRefusal::WrongState`] (as
    /// [`Refusal::Job`](idemdb_core::Refusal::Job)); database errors.
    pub async fn record_step(
        &mut self,
        lease: &JobLease,
        step: &EffectName,
        result: Vec<u8>,
        compensation: Option<Vec<u8>>,
    ) -> Result<(), Error> {
        let policy = self.inner_arc().policy(lease.scope.operation()).clone();
        self.change_job(lease, AuditKind::JobStep, Some(step), |job, now| {
            Ok((job.record_step(lease.fence, step, result, compensation, now, &policy)?, ()))
        })
        .await
    }

    /// The stored result of `step` of the job, if it finished (its row locked).
    ///
    /// # Errors
    /// [`JobRefusal::NotFound`]; database errors; [`Error::Corrupt`].
    pub async fn step_result(&mut self, lease: &JobLease, step: &EffectName) -> Result<Option<Vec<u8>>, Error> {
        let (record, _, _) = self.lock_job(&lease.scope, &lease.job).await?;
        let record = record.ok_or(JobRefusal::NotFound)?;
        Ok(record.step_result(step).map(<[u8]>::to_vec))
    }
}

impl PgStore {
    /// Claims the job `(scope, job)` for a delivery of its message (`fingerprint`): a new job,
    /// or one whose worker's lease expired (it resumes after its finished steps), is
    /// [`JobAnswer::Claimed`]; a live lease is `Running`; a finished job answers its result; a
    /// job given up hands its compensations over.
    ///
    /// # Errors
    /// Database errors; [`Error::Corrupt`].
    pub async fn claim_job(
        &self,
        scope: &Scope,
        job: &IdempotencyKey,
        fingerprint: &Fingerprint,
    ) -> Result<JobAnswer, Error> {
        self.in_txn(|mut txn| async move {
            let outcome = txn.claim_job(scope, job, fingerprint).await;
            (txn, outcome)
        })
        .await
    }

    /// Records a finished step in a transaction of its own (for a step whose effect went
    /// through the outbox; a local one belongs in the application's [`PgTxn`] with
    /// [`PgTxn::record_step`]).
    ///
    /// # Errors
    /// As [`PgTxn::record_step`].
    pub async fn record_step(
        &self,
        lease: &JobLease,
        step: &EffectName,
        result: Vec<u8>,
        compensation: Option<Vec<u8>>,
    ) -> Result<(), Error> {
        let (result, compensation) = (&result, &compensation);
        self.in_txn(|mut txn| async move {
            let outcome = txn.record_step(lease, step, result.clone(), compensation.clone()).await;
            (txn, outcome)
        })
        .await
    }

    /// Finishes the job with `result` (replayed to later deliveries).
    ///
    /// # Errors
    /// [`JobRefusal::StaleLease`], [`JobRefusal::WrongState`], [`JobRefusal::TooLarge`];
    /// database errors.
    pub async fn finish_job(&self, lease: &JobLease, result: Vec<u8>) -> Result<(), Error> {
        let result = &result;
        self.in_txn(|mut txn| async move {
            let policy = txn.inner_arc().policy(lease.scope.operation()).clone();
            let outcome = txn
                .change_job(lease, AuditKind::JobChanged, None, |job, now| {
                    Ok((job.finish(lease.fence, result.clone(), now, &policy)?, ()))
                })
                .await;
            (txn, outcome)
        })
        .await
    }

    /// Gives the saga up: returns the compensations of its finished steps, newest first.
    ///
    /// # Errors
    /// [`JobRefusal::StaleLease`], [`JobRefusal::WrongState`]; database errors.
    pub async fn abandon_job(&self, lease: &JobLease, reason: &str) -> Result<Vec<Compensation>, Error> {
        self.in_txn(|mut txn| async move {
            let policy = txn.inner_arc().policy(lease.scope.operation()).clone();
            let outcome = txn
                .change_job(lease, AuditKind::JobChanged, None, |job, now| {
                    job.abandon(lease.fence, reason, now, &policy)
                })
                .await;
            (txn, outcome)
        })
        .await
    }

    /// Records that the compensation of `step` ran.
    ///
    /// # Errors
    /// [`JobRefusal::NoCompensation`], [`JobRefusal::StaleLease`], [`JobRefusal::WrongState`];
    /// database errors.
    pub async fn record_compensated(&self, lease: &JobLease, step: &EffectName) -> Result<(), Error> {
        self.in_txn(|mut txn| async move {
            let policy = txn.inner_arc().policy(lease.scope.operation()).clone();
            let outcome = txn
                .change_job(lease, AuditKind::JobChanged, Some(step), |job, now| {
                    Ok((job.record_compensated(lease.fence, step, now, &policy)?, ()))
                })
                .await;
            (txn, outcome)
        })
        .await
    }

    /// The record of job `(scope, job)`.
    ///
    /// # Errors
    /// [`Error::Unavailable`] and database errors; [`Error::Corrupt`].
    pub async fn job(&self, scope: &Scope, job: &IdempotencyKey) -> Result<Option<JobRecord>, Error> {
        let params: [&(dyn ToSql + Sync); 3] = [&scope.tenant(), &scope.operation(), &job.as_str()];
        let Some(row) = self.read_one(|sql| &sql.wf.job_get, &params).await? else { return Ok(None) };
        let value: Vec<u8> = row.try_get(0).map_err(Error::from_driver)?;
        JobRecord::decode(&value).map(Some).map_err(|source| Error::Corrupt(Corrupt { what: "job", source }))
    }
}
