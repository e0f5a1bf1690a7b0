//! Queue jobs in the redb store: one record per `(scope, job id)` in `idemdb_jobs`; a step's
//! result is recorded in the transaction of the step's own local effect, so a redelivered job
//! skips it.

use redb::ReadableTable;

use idemdb_core::{
    AuditKind, Compensation, Corrupt, DecisionContext, EffectName, Fingerprint, IdempotencyKey, JobAnswer, JobLease,
    JobRecord, JobRefusal, Scope, ScopedKey, claim_job,
};

use crate::journal::apply::TableId;
use crate::tables::{EXPIRY_JOB, JOBS, marked_expiry_key};
use crate::txn::{Begun, Txn};
use crate::{Error, ExecuteError, Store};

impl Txn<'_> {
    fn load_job(&self, encoded: &[u8]) -> Result<Option<JobRecord>, Error> {
        let table = self.tx_closing_kept_tables().open_table(JOBS)?;
        let Some(value) = table.get(encoded)? else { return Ok(None) };
        JobRecord::decode(value.value()).map(Some).map_err(|source| Error::Corrupt(Corrupt { what: "job", source }))
    }

    fn put_job(&mut self, encoded: &[u8], previous: Option<&JobRecord>, job: &JobRecord) -> Result<(), Error> {
        self.put_logged(TableId::Jobs, encoded, &job.encode())?;
        let (old, new) = (previous.and_then(JobRecord::due_at), job.due_at());
        self.move_entry(
            TableId::Expiry,
            old.map(|old| marked_expiry_key(old, EXPIRY_JOB, encoded)),
            new.map(|new| marked_expiry_key(new, EXPIRY_JOB, encoded)),
        )
    }

    /// Changes the job `lease` names with `change`, writing what it returns.
    fn change_job<T>(
        &mut self,
        lease: &JobLease,
        change: impl FnOnce(&JobRecord, &Txn<'_>) -> Result<(JobRecord, T), JobRefusal>,
    ) -> Result<T, Error> {
        let encoded = ScopedKey::encode_parts(&lease.scope, &lease.job);
        let job = self.load_job(&encoded)?.ok_or(JobRefusal::NotFound)?;
        let (next, value) = change(&job, self)?;
        self.put_job(&encoded, Some(&job), &next)?;
        self.event(AuditKind::JobChanged, &lease.scope, &encoded, next.fence, Some(&next.fingerprint), None);
        Ok(value)
    }

    /// [`Store::claim_job`] inside this transaction.
    ///
    /// # Errors
    /// As [`Store::claim_job`].
    pub fn claim_job(
        &mut self,
        scope: &Scope,
        job: &IdempotencyKey,
        fingerprint: &Fingerprint,
    ) -> Result<JobAnswer, Error> {
        let encoded = ScopedKey::encode_parts(scope, job);
        let existing = self.load_job(&encoded)?;
        let previous = existing.clone();
        let context = DecisionContext::at(
            idemdb_core::DecisionTime::new(self.now(), self.retention_time()),
            self.engine().policy(scope.operation()),
        )
        .with_fence_floor(self.engine().fence_floor());
        let decision = claim_job(existing, scope, job, fingerprint, context)?;
        if let Some(record) = &decision.write {
            self.put_job(&encoded, previous.as_ref(), record)?;
            self.event(AuditKind::JobClaimed, scope, &encoded, record.fence, Some(fingerprint), None);
        }
        Ok(decision.answer)
    }

    /// Records that `step` of the job `lease` runs finished with `result` (and what its
    /// compensation needs), in this transaction — the one that wrote the step's own effect.
    ///
    /// # Errors
    /// [`JobRefusal::StepDone`], [`JobRefusal::StaleLease`], [`JobRefusal::WrongState`];
    /// storage errors.
    pub fn record_step(
        &mut self,
        lease: &JobLease,
        step: &EffectName,
        result: Vec<u8>,
        compensation: Option<Vec<u8>>,
    ) -> Result<(), Error> {
        let now = self.now();
        let encoded = ScopedKey::encode_parts(&lease.scope, &lease.job);
        let job = self.load_job(&encoded)?.ok_or(JobRefusal::NotFound)?;
        let policy = self.engine().policy(lease.scope.operation()).clone();
        let next = job.record_step(lease.fence, step, result, compensation, now, &policy)?;
        self.put_job(&encoded, Some(&job), &next)?;
        self.event(AuditKind::JobStep, &lease.scope, &encoded, next.fence, None, Some(step.as_str()));
        Ok(())
    }

    /// Refuses (stale lease, job not running) unless the lease's holder may run a step now.
    ///
    /// # Errors
    /// [`JobRefusal::StaleLease`], [`JobRefusal::WrongState`], [`JobRefusal::NotFound`].
    pub fn check_can_run(&self, lease: &JobLease) -> Result<(), Error> {
        let encoded = ScopedKey::encode_parts(&lease.scope, &lease.job);
        let job = self.load_job(&encoded)?.ok_or(JobRefusal::NotFound)?;
        Ok(job.check_can_run(lease.fence)?)
    }

    /// The stored result of `step` of the job, if it finished.
    ///
    /// # Errors
    /// Storage errors; [`Error::Corrupt`].
    pub fn step_result(&self, lease: &JobLease, step: &EffectName) -> Result<Option<Vec<u8>>, Error> {
        let encoded = ScopedKey::encode_parts(&lease.scope, &lease.job);
        let job = self.load_job(&encoded)?.ok_or(JobRefusal::NotFound)?;
        Ok(job.step_result(step).map(<[u8]>::to_vec))
    }
}

impl Store {
    /// Claims the job `(scope, job)` for a delivery of its message (`fingerprint`): a new job,
    /// or one whose worker's lease expired (it resumes after its finished steps), is
    /// [`JobAnswer::Claimed`]; a live lease is `Running`; a finished job answers its result; a
    /// job given up hands its compensations over.
    ///
    /// ```
    /// use idemdb::{EffectName, Fingerprint, IdempotencyKey, JobAnswer, Scope, Store};
    /// let store = Store::in_memory()?;
    /// let (scope, job) = (Scope::new("acme", "fulfil_order")?, IdempotencyKey::new("order-842")?);
    /// let message = Fingerprint::from_bytes([1; 32]);
    /// let JobAnswer::Claimed(lease) = store.claim_job(&scope, &job, &message)? else { panic!() };
    /// let mut runs = 0;
    /// for _delivery in 0..2 {
    ///     // Each step runs once: a second delivery reads the stored result.
    ///     let reserved = store.run_step(&lease, &EffectName::new("reserve_stock")?, |_txn| {
    ///         runs += 1;
    ///         Ok::<_, idemdb::Error>((b"held".to_vec(), Some(b"release".to_vec())))
    ///     })?;
    ///     assert_eq!(reserved, b"held");
    /// }
    /// assert_eq!(runs, 1);
    /// store.finish_job(&lease, b"shipped".to_vec())?;
    /// assert_eq!(store.claim_job(&scope, &job, &message)?, JobAnswer::Completed { result: b"shipped".to_vec() });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// Storage errors; [`Error::Corrupt`].
    pub fn claim_job(
        &self,
        scope: &Scope,
        job: &IdempotencyKey,
        fingerprint: &Fingerprint,
    ) -> Result<JobAnswer, Error> {
        let (scope, job, fingerprint) = (scope.clone(), job.clone(), *fingerprint);
        self.group.run(&self.engine, move |txn| txn.claim_job(&scope, &job, &fingerprint))
    }

    /// Runs `step` of the job once: if it finished already (an earlier delivery ran it), its
    /// stored result is returned and `run` is not called; otherwise `run` writes the step's
    /// local effect in a transaction and returns `(result, compensation)`, which are recorded
    /// **in the same commit**. A step that calls outside enqueues an outbox effect from `run`
    /// ([`Txn::enqueue_effect`]) instead of calling.
    ///
    /// # Errors
    /// [`ExecuteError::Operation`] with `run`'s error (nothing stored); [`ExecuteError::Store`]
    /// ([`JobRefusal::StaleLease`] when another worker took the job over).
    pub fn run_step<E>(
        &self,
        lease: &JobLease,
        step: &EffectName,
        run: impl FnOnce(&mut Txn<'_>) -> Result<(Vec<u8>, Option<Vec<u8>>), E>,
    ) -> Result<Vec<u8>, ExecuteError<E>> {
        let begun = Begun::new(&self.engine)?;
        let mut txn = begun.txn();
        if let Some(done) = txn.step_result(lease, step)? {
            return Ok(done);
        }
        // The lease and the job's state are checked before `run`: a stale worker's step never
        // starts.
        txn.check_can_run(lease)?;
        let (result, compensation) = run(&mut txn).map_err(ExecuteError::Operation)?;
        txn.record_step(lease, step, result.clone(), compensation)?;
        let finished = txn.finish()?;
        begun.commit(finished)?;
        Ok(result)
    }

    /// Finishes the job with `result` (replayed to later deliveries).
    ///
    /// # Errors
    /// [`JobRefusal::StaleLease`], [`JobRefusal::WrongState`], [`JobRefusal::TooLarge`];
    /// storage errors.
    pub fn finish_job(&self, lease: &JobLease, result: Vec<u8>) -> Result<(), Error> {
        let lease = lease.clone();
        self.group.run(&self.engine, move |txn| {
            let policy = txn.engine().policy(lease.scope.operation()).clone();
            txn.change_job(&lease, |job, txn| Ok((job.finish(lease.fence, result, txn.now(), &policy)?, ())))
        })
    }

    /// Gives the saga up: returns the compensations of its finished steps, newest first, for
    /// the caller to run with [`Store::compensate`] under the same lease.
    ///
    /// # Errors
    /// [`JobRefusal::StaleLease`], [`JobRefusal::WrongState`]; storage errors.
    pub fn abandon_job(&self, lease: &JobLease, reason: &str) -> Result<Vec<Compensation>, Error> {
        let (lease, reason) = (lease.clone(), reason.to_string());
        self.group.run(&self.engine, move |txn| {
            let policy = txn.engine().policy(lease.scope.operation()).clone();
            txn.change_job(&lease, |job, txn| job.abandon(lease.fence, &reason, txn.now(), &policy))
        })
    }

    /// Runs the compensation of `step` once: `run` writes its local effect (or enqueues an
    /// outbox effect), and the compensation is recorded in the same commit. A compensation
    /// recorded already is refused ([`JobRefusal::NoCompensation`]) without calling `run`.
    ///
    /// # Errors
    /// [`ExecuteError::Operation`] with `run`'s error (nothing stored); [`ExecuteError::Store`].
    pub fn compensate<E>(
        &self,
        lease: &JobLease,
        step: &EffectName,
        run: impl FnOnce(&mut Txn<'_>, &Compensation) -> Result<(), E>,
    ) -> Result<(), ExecuteError<E>> {
        let begun = Begun::new(&self.engine)?;
        let mut txn = begun.txn();
        let encoded = ScopedKey::encode_parts(&lease.scope, &lease.job);
        let job = txn.load_job(&encoded)?.ok_or(Error::from(JobRefusal::NotFound))?;
        let policy = self.policy(lease.scope.operation()).clone();
        let next = job.record_compensated(lease.fence, step, txn.now(), &policy).map_err(Error::from)?;
        let compensation = job
            .pending_compensations()
            .into_iter()
            .find(|pending| pending.step == *step)
            .ok_or(Error::from(JobRefusal::NoCompensation(step.clone())))?;
        run(&mut txn, &compensation).map_err(ExecuteError::Operation)?;
        txn.put_job(&encoded, Some(&job), &next)?;
        txn.event(AuditKind::JobChanged, &lease.scope, &encoded, next.fence, None, Some(step.as_str()));
        let finished = txn.finish()?;
        begun.commit(finished)?;
        Ok(())
    }

    /// Records a finished step in a transaction of its own (for a step whose effect went
    /// through the outbox; a local effect belongs in [`Store::run_step`]).
    ///
    /// # Errors
    /// As [`Txn::record_step`].
    pub fn record_step(
        &self,
        lease: &JobLease,
        step: &EffectName,
        result: Vec<u8>,
        compensation: Option<Vec<u8>>,
    ) -> Result<(), Error> {
        let (lease, step) = (lease.clone(), step.clone());
        self.group.run(&self.engine, move |txn| txn.record_step(&lease, &step, result, compensation))
    }

    /// Records that the compensation of `step` ran (for one that went through the outbox; a
    /// local one belongs in [`Store::compensate`]).
    ///
    /// # Errors
    /// [`JobRefusal::NoCompensation`], [`JobRefusal::StaleLease`], [`JobRefusal::WrongState`];
    /// storage errors.
    pub fn record_compensated(&self, lease: &JobLease, step: &EffectName) -> Result<(), Error> {
        let (lease, step) = (lease.clone(), step.clone());
        self.group.run(&self.engine, move |txn| {
            let policy = txn.engine().policy(lease.scope.operation()).clone();
            txn.change_job(&lease, |job, txn| Ok((job.record_compensated(lease.fence, &step, txn.now(), &policy)?, ())))
        })
    }

    /// The record of job `(scope, job)`.
    ///
    /// # Errors
    /// Storage errors; [`Error::Corrupt`].
    pub fn job(&self, scope: &Scope, job: &IdempotencyKey) -> Result<Option<JobRecord>, Error> {
        self.read_value(JOBS, &ScopedKey::encode_parts(scope, job), "job", JobRecord::decode)
    }
}
