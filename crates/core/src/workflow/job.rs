//! Queue jobs with steps, as pure rules.
//!
//! A queue delivers a message at least once, and again after a worker crashed. The job gets a
//! stable logical id (the key), reserved atomically like any idempotency key; each step's
//! result is persisted when the step completes (in the transaction of the step's local effect,
//! or through the outbox for an external one), so a redelivered job skips the finished steps
//! and resumes at the next. A worker that died leaves its lease to expire; the redelivery then
//! takes the job over with a higher fence (every finished step is on record, so nothing runs
//! twice). When a saga is abandoned, the compensations its finished steps registered run in
//! reverse order, each recorded once.
//!
//! ```
//! use idemdb_core::{claim_job, DecisionContext, EffectName, Fingerprint, IdempotencyKey, JobAnswer, Policy, Scope, Timestamp};
//!
//! let policy = Policy::default();
//! let (scope, job) = (Scope::new("acme", "fulfil_order")?, IdempotencyKey::new("order-842")?);
//! let fp = Fingerprint::from_bytes([1; 32]);
//! let at = DecisionContext::new(Timestamp::from_millis(1_000), &policy);
//! let first = claim_job(None, &scope, &job, &fp, at)?;
//! let JobAnswer::Claimed(lease) = &first.answer else { panic!() };
//! let record = first.write.expect("claimed");
//! let reserve = EffectName::new("reserve_stock")?;
//! let record = record.record_step(lease.fence, &reserve, b"held".to_vec(), Some(b"release".to_vec()), at.now, &policy)?;
//!
//! // The worker dies; the message comes back after the lease: the job resumes after its step.
//! let later = DecisionContext::new(Timestamp::from_millis(1_000 + 61_000), &policy);
//! let again = claim_job(Some(record), &scope, &job, &fp, later)?;
//! let JobAnswer::Claimed(lease) = &again.answer else { panic!() };
//! assert_eq!(lease.attempt, 2);
//! assert_eq!(lease.done[0].name, reserve);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Byte layout
//!
//! Stored under `ScopedKey::encode` of `(scope, job id)`; the value is
//! `version:u8 (= 1) · bincode-standard(JobRecord)`.

use core::time::Duration;

use serde::{Deserialize, Serialize};

use super::EffectName;
use crate::{
    DecisionContext, DecodeError, ErrorCode, Fingerprint, IdempotencyKey, Policy, Scope, StateKind, Timestamp, codec,
};

/// Format version of stored job records.
pub const JOB_FORMAT: u8 = 1;

/// One finished step of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StepRecord {
    /// The step.
    pub name: EffectName,
    /// Its result (what a resumed job reads instead of running the step again).
    #[serde(with = "serde_bytes")]
    pub result: Vec<u8>,
    /// What its compensation needs, if it registered one.
    pub compensation: Option<Vec<u8>>,
    /// Whether the compensation ran.
    pub compensated: bool,
}

/// Where a job is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum JobState {
    /// A worker holds the lease until `lease_expires_at`.
    Running {
        /// End of the lease.
        lease_expires_at: Timestamp,
    },
    /// Finished with a result, replayed to redeliveries until `forget_at`.
    Completed {
        /// The job's result.
        #[serde(with = "serde_bytes")]
        result: Vec<u8>,
        /// When the record is forgotten.
        forget_at: Timestamp,
    },
    /// The saga was given up: the compensations of its finished steps run, newest first,
    /// under a lease like the job's own.
    Compensating {
        /// Why it was given up.
        reason: String,
        /// End of the compensating worker's lease (`None`: not claimed yet).
        lease_expires_at: Option<Timestamp>,
    },
    /// Every compensation ran.
    Compensated {
        /// Why it was given up.
        reason: String,
        /// When the record is forgotten.
        forget_at: Timestamp,
    },
}

/// The name of a [`JobState`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JobStateKind {
    /// [`JobState::Running`].
    Running,
    /// [`JobState::Completed`].
    Completed,
    /// [`JobState::Compensating`].
    Compensating,
    /// [`JobState::Compensated`].
    Compensated,
}

crate::names!(JobStateKind, "job state", {
    Running => "running",
    Completed => "completed",
    Compensating => "compensating",
    Compensated => "compensated",
});

impl JobState {
    /// Which state this is.
    pub fn kind(&self) -> JobStateKind {
        match self {
            JobState::Running { .. } => JobStateKind::Running,
            JobState::Completed { .. } => JobStateKind::Completed,
            JobState::Compensating { .. } => JobStateKind::Compensating,
            JobState::Compensated { .. } => JobStateKind::Compensated,
        }
    }
}

/// A job, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct JobRecord {
    /// Fingerprint of the job's message (a redelivery carries the same).
    pub fingerprint: Fingerprint,
    /// The state.
    pub state: JobState,
    /// Fence of the newest lease.
    pub fence: u64,
    /// Leases issued (deliveries that ran the job).
    pub attempts: u32,
    /// Finished steps, in the order they finished.
    pub steps: Vec<StepRecord>,
    /// When the job was first claimed.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// A compensation to run: the step it undoes and what it registered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Compensation {
    /// The step it undoes.
    pub step: EffectName,
    /// What the step registered for it.
    pub data: Vec<u8>,
}

/// The right of one worker to run (or compensate) a job.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobLease {
    /// The scope.
    pub scope: Scope,
    /// The job id.
    pub job: IdempotencyKey,
    /// The lease's fence.
    pub fence: u64,
    /// When it expires.
    pub expires_at: Timestamp,
    /// Which delivery this is (1 for the first).
    pub attempt: u32,
    /// The steps already finished, with their results: skip them.
    pub done: Vec<StepRecord>,
}

impl JobLease {
    /// The stored result of `step`, if it finished already.
    pub fn result_of(&self, step: &EffectName) -> Option<&[u8]> {
        self.done.iter().find(|done| done.name == *step).map(|done| done.result.as_slice())
    }
}

/// What [`claim_job`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobAnswer {
    /// The caller runs the job: skip the steps in [`JobLease::done`].
    Claimed(JobLease),
    /// Another worker holds a live lease.
    Running {
        /// Time left on it.
        retry_after: Duration,
    },
    /// The job finished: its result.
    Completed {
        /// The result.
        result: Vec<u8>,
    },
    /// The saga was given up: the caller runs these compensations, newest first, and records
    /// each ([`JobRecord::record_compensated`]).
    Compensate {
        /// The compensating worker's lease.
        lease: JobLease,
        /// The compensations still to run, in order.
        pending: Vec<Compensation>,
    },
    /// The saga was given up and every compensation ran.
    Compensated {
        /// Why it was given up.
        reason: String,
    },
    /// The job id is bound to a different message: a conflict.
    Mismatch,
}

/// What [`claim_job`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobDecision {
    /// The answer.
    pub answer: JobAnswer,
    /// The record to write in the same transaction (`None`: unchanged).
    pub write: Option<JobRecord>,
}

/// The job rules refused a change; the stored record is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JobRefusal {
    /// No job exists for the id.
    #[error("no job for this id")]
    NotFound,
    /// The lease's fence is not the job's: another worker took it over.
    #[error("stale job lease: fence {presented} is older than the job's fence {current}")]
    StaleLease {
        /// The fence presented.
        presented: u64,
        /// The job's fence.
        current: u64,
    },
    /// The job is not in a state that allows this change.
    #[error("job is {state}; cannot {action}")]
    WrongState {
        /// The job's state.
        state: JobStateKind,
        /// What was attempted.
        action: &'static str,
    },
    /// The step finished already (its result is on record: a resumed job reads it instead).
    #[error("step {0} finished already")]
    StepDone(EffectName),
    /// A compensation asked for out of order: compensations run newest first.
    #[error("compensation of step {step} asked before that of the newer step {newest}; compensations run newest first")]
    CompensationOrder {
        /// The step asked for.
        step: EffectName,
        /// The step whose compensation must run first.
        newest: EffectName,
    },
    /// No finished step of that name registered a compensation still to run.
    #[error("no pending compensation for step {0}")]
    NoCompensation(EffectName),
    /// No fence is left for a new lease on this job (fences never repeat).
    #[error("no fence above {fence} is left for this job")]
    FenceExhausted {
        /// The job's fence.
        fence: u64,
    },
    /// A result, compensation or reason is over the operation's result limit.
    #[error("{what} is {len} bytes; the limit is {max}")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
}

impl JobRefusal {
    /// The stable code of this refusal.
    pub fn code(&self) -> ErrorCode {
        match self {
            JobRefusal::NotFound => ErrorCode::NotFound,
            JobRefusal::StaleLease { .. } => ErrorCode::StaleLease,
            JobRefusal::WrongState { .. }
            | JobRefusal::StepDone(_)
            | JobRefusal::NoCompensation(_)
            | JobRefusal::CompensationOrder { .. } => ErrorCode::WrongState,
            JobRefusal::TooLarge { .. } => ErrorCode::TooLarge,
            JobRefusal::FenceExhausted { .. } => ErrorCode::FenceExhausted,
        }
    }
}

crate::coded!(JobRefusal);

/// Decides what a delivery of job `(scope, job)` with message `fingerprint` meets, like
/// [`decide`](crate::decide) for a request: a new or forgotten job is claimed; a live lease is
/// refused (`Running`); an expired lease is taken over with a higher fence (its finished
/// steps are on record); a finished job answers its result; a job given up hands its
/// compensations to the caller under a new lease.
///
/// # Errors
/// [`JobRefusal::FenceExhausted`] when a new lease would need a fence above
/// [`MAX_FENCE`](crate::MAX_FENCE).
pub fn claim_job(
    existing: Option<JobRecord>,
    scope: &Scope,
    job: &IdempotencyKey,
    fingerprint: &Fingerprint,
    context: DecisionContext<'_>,
) -> Result<JobDecision, JobRefusal> {
    let DecisionContext { now, retention, policy, fence_floor, .. } = context;
    let exhausted = |error: crate::TransitionError| match error {
        crate::TransitionError::FenceExhausted { fence } => JobRefusal::FenceExhausted { fence },
        _ => JobRefusal::FenceExhausted { fence: fence_floor },
    };
    let lease = |record: &JobRecord, expires_at| JobLease {
        scope: scope.clone(),
        job: job.clone(),
        fence: record.fence,
        expires_at,
        attempt: record.attempts,
        done: record.steps.clone(),
    };
    let Some(record) = existing.filter(|record| !record.is_forgotten(retention.min(now.max(record.updated_at)))) else {
        let expires_at = now.saturating_add(policy.lease_ttl());
        let record = JobRecord {
            fingerprint: *fingerprint,
            state: JobState::Running { lease_expires_at: expires_at },
            fence: crate::decide::fresh_fence(fence_floor, now).map_err(exhausted)?,
            attempts: 1,
            steps: Vec::new(),
            created_at: now,
            updated_at: now,
        };
        return Ok(JobDecision { answer: JobAnswer::Claimed(lease(&record, expires_at)), write: Some(record) });
    };
    let now = now.max(record.updated_at);
    if record.fingerprint != *fingerprint {
        return Ok(JobDecision { answer: JobAnswer::Mismatch, write: None });
    }
    let expires_at = now.saturating_add(policy.lease_ttl());
    let next_fence = crate::decide::next_fence(record.fence).map_err(exhausted);
    Ok(match &record.state {
        JobState::Running { lease_expires_at }
        | JobState::Compensating { lease_expires_at: Some(lease_expires_at), .. }
            if now < *lease_expires_at =>
        {
            JobDecision {
                answer: JobAnswer::Running { retry_after: lease_expires_at.saturating_since(now) },
                write: None,
            }
        }
        JobState::Running { .. } => {
            let taken = JobRecord {
                state: JobState::Running { lease_expires_at: expires_at },
                fence: next_fence?,
                attempts: record.attempts.saturating_add(1),
                updated_at: now,
                ..record
            };
            JobDecision { answer: JobAnswer::Claimed(lease(&taken, expires_at)), write: Some(taken) }
        }
        JobState::Compensating { reason, .. } => {
            let taken = JobRecord {
                state: JobState::Compensating { reason: reason.clone(), lease_expires_at: Some(expires_at) },
                fence: next_fence?,
                attempts: record.attempts.saturating_add(1),
                updated_at: now,
                ..record.clone()
            };
            let pending = taken.pending_compensations();
            JobDecision {
                answer: JobAnswer::Compensate { lease: lease(&taken, expires_at), pending },
                write: Some(taken),
            }
        }
        JobState::Completed { result, .. } => {
            JobDecision { answer: JobAnswer::Completed { result: result.clone() }, write: None }
        }
        JobState::Compensated { reason, .. } => {
            JobDecision { answer: JobAnswer::Compensated { reason: reason.clone() }, write: None }
        }
    })
}

impl JobRecord {
    /// The result a finished step recorded, if `step` finished.
    pub fn step_result(&self, step: &EffectName) -> Option<&[u8]> {
        self.steps.iter().find(|done| done.name == *step).map(|done| done.result.as_slice())
    }

    /// Whether the record is forgotten at `now` (a redelivery then starts the job afresh).
    pub fn is_forgotten(&self, now: Timestamp) -> bool {
        self.due_at().is_some_and(|forget_at| now >= forget_at)
    }

    /// When retention removes the record (finished jobs only).
    pub fn due_at(&self) -> Option<Timestamp> {
        match &self.state {
            JobState::Completed { forget_at, .. } | JobState::Compensated { forget_at, .. } => Some(*forget_at),
            JobState::Running { .. } | JobState::Compensating { .. } => None,
        }
    }

    /// The state of the job as the idempotency vocabulary names it (for listings).
    pub fn state_kind(&self) -> StateKind {
        match self.state {
            JobState::Running { .. } | JobState::Compensating { .. } => StateKind::InProgress,
            JobState::Completed { .. } => StateKind::Completed,
            JobState::Compensated { .. } => StateKind::Failed,
        }
    }

    /// Whether the holder of `fence` may run a step now: the lease is the job's current one and
    /// the job is running. A worker checks this **before** it runs a step's work, so a stale
    /// worker's work never starts (checking only when recording would let it run, then refuse).
    ///
    /// # Errors
    /// [`JobRefusal::StaleLease`], [`JobRefusal::WrongState`].
    pub fn check_can_run(&self, fence: u64) -> Result<(), JobRefusal> {
        self.check_lease(fence, "run a step")
    }

    fn check_lease(&self, fence: u64, action: &'static str) -> Result<(), JobRefusal> {
        if fence != self.fence {
            return Err(JobRefusal::StaleLease { presented: fence, current: self.fence });
        }
        match self.state {
            JobState::Running { .. } => Ok(()),
            _ => Err(JobRefusal::WrongState { state: self.state.kind(), action }),
        }
    }

    /// Records that step `name` finished with `result` (and what its compensation needs).
    ///
    /// # Errors
    /// [`JobRefusal::StaleLease`], [`JobRefusal::WrongState`] when the job is not running,
    /// [`JobRefusal::StepDone`] when the step is on record already, [`JobRefusal::TooLarge`]
    /// when the result or the compensation is over the policy's result limit (the job record
    /// carries every step, so one oversized step would be rewritten at every later one).
    pub fn record_step(
        &self,
        fence: u64,
        name: &EffectName,
        result: Vec<u8>,
        compensation: Option<Vec<u8>>,
        now: Timestamp,
        policy: &Policy,
    ) -> Result<JobRecord, JobRefusal> {
        self.check_lease(fence, "record a step")?;
        check_size("step result", &result, policy)?;
        if let Some(compensation) = &compensation {
            check_size("step compensation", compensation, policy)?;
        }
        if self.steps.iter().any(|step| step.name == *name) {
            return Err(JobRefusal::StepDone(name.clone()));
        }
        let mut next = self.clone();
        next.steps.push(StepRecord { name: name.clone(), result, compensation, compensated: false });
        next.updated_at = now.max(self.updated_at);
        Ok(next)
    }

    /// Finishes the job with `result`.
    ///
    /// # Errors
    /// [`JobRefusal::StaleLease`], [`JobRefusal::WrongState`], [`JobRefusal::TooLarge`].
    pub fn finish(
        &self,
        fence: u64,
        result: Vec<u8>,
        now: Timestamp,
        policy: &Policy,
    ) -> Result<JobRecord, JobRefusal> {
        self.check_lease(fence, "finish")?;
        check_size("job result", &result, policy)?;
        let now = now.max(self.updated_at);
        let forget_at = now.saturating_add(policy.response_ttl()).saturating_add(policy.tombstone_ttl());
        Ok(JobRecord { state: JobState::Completed { result, forget_at }, updated_at: now, ..self.clone() })
    }

    /// Gives the saga up: the compensations of its finished steps are to run (newest first).
    /// With none to run, the job is compensated at once. Returns the record to write and the
    /// compensations, which the caller runs under the same lease (`fence` stays valid).
    ///
    /// # Errors
    /// [`JobRefusal::StaleLease`], [`JobRefusal::WrongState`], [`JobRefusal::TooLarge`] for a
    /// reason over the operation's result limit.
    pub fn abandon(
        &self,
        fence: u64,
        reason: &str,
        now: Timestamp,
        policy: &Policy,
    ) -> Result<(JobRecord, Vec<Compensation>), JobRefusal> {
        self.check_lease(fence, "abandon")?;
        check_size("abandon reason", reason.as_bytes(), policy)?;
        let now = now.max(self.updated_at);
        let lease_expires_at = match self.state {
            JobState::Running { lease_expires_at } => Some(lease_expires_at),
            _ => None,
        };
        let mut next = JobRecord {
            state: JobState::Compensating { reason: reason.to_string(), lease_expires_at },
            updated_at: now,
            ..self.clone()
        };
        let pending = next.pending_compensations();
        if pending.is_empty() {
            next = next.compensated(now, policy);
        }
        Ok((next, pending))
    }

    /// The compensations still to run, newest step first.
    pub fn pending_compensations(&self) -> Vec<Compensation> {
        self.steps
            .iter()
            .rev()
            .filter(|step| !step.compensated)
            .filter_map(|step| step.compensation.clone().map(|data| Compensation { step: step.name.clone(), data }))
            .collect()
    }

    /// Records that the compensation of `step` ran (in the transaction of its local effect,
    /// or once its outbox effect was enqueued). When none is left the job is compensated.
    ///
    /// # Errors
    /// [`JobRefusal::StaleLease`], [`JobRefusal::WrongState`] when the job is not
    /// compensating, [`JobRefusal::NoCompensation`] when the step has none left to run (it
    /// ran already, or the step never registered one).
    pub fn record_compensated(
        &self,
        fence: u64,
        step: &EffectName,
        now: Timestamp,
        policy: &Policy,
    ) -> Result<JobRecord, JobRefusal> {
        if fence != self.fence {
            return Err(JobRefusal::StaleLease { presented: fence, current: self.fence });
        }
        if !matches!(self.state, JobState::Compensating { .. }) {
            return Err(JobRefusal::WrongState { state: self.state.kind(), action: "record a compensation" });
        }
        // Newest first: only the most recent step's pending compensation may run.
        match self.pending_compensations().first() {
            Some(newest) if newest.step == *step => {}
            Some(newest)
                if self.steps.iter().any(|d| d.name == *step && d.compensation.is_some() && !d.compensated) =>
            {
                return Err(JobRefusal::CompensationOrder { step: step.clone(), newest: newest.step.clone() });
            }
            _ => return Err(JobRefusal::NoCompensation(step.clone())),
        }
        let mut next = self.clone();
        let target = next
            .steps
            .iter_mut()
            .find(|done| done.name == *step && done.compensation.is_some() && !done.compensated)
            .ok_or_else(|| JobRefusal::NoCompensation(step.clone()))?;
        target.compensated = true;
        let now = now.max(self.updated_at);
        next.updated_at = now;
        if next.pending_compensations().is_empty() {
            next = next.compensated(now, policy);
        }
        Ok(next)
    }

    fn compensated(self, now: Timestamp, policy: &Policy) -> JobRecord {
        let reason = match &self.state {
            JobState::Compensating { reason, .. } => reason.clone(),
            _ => String::new(),
        };
        let forget_at = now.saturating_add(policy.response_ttl()).saturating_add(policy.tombstone_ttl());
        JobRecord { state: JobState::Compensated { reason, forget_at }, updated_at: now, ..self }
    }

    /// The stored value.
    pub fn encode(&self) -> Vec<u8> {
        codec::encode_versioned(JOB_FORMAT, self)
    }

    /// Decodes a stored value.
    ///
    /// # Errors
    /// [`DecodeError`].
    pub fn decode(value: &[u8]) -> Result<JobRecord, DecodeError> {
        codec::decode_versioned(value, JOB_FORMAT)
    }
}

fn check_size(what: &'static str, bytes: &[u8], policy: &Policy) -> Result<(), JobRefusal> {
    if bytes.len() > policy.max_result_bytes() {
        return Err(JobRefusal::TooLarge { what, len: bytes.len(), max: policy.max_result_bytes() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u64) -> Timestamp {
        Timestamp::from_millis(1_000_000 + s * 1_000)
    }

    fn policy() -> Policy {
        Policy::default().with_lease_ttl(Duration::from_secs(10))
    }

    fn name(n: &str) -> EffectName {
        EffectName::new(n).unwrap()
    }

    fn claim(existing: Option<JobRecord>, fp: u8, now: Timestamp) -> JobDecision {
        let policy = policy();
        let (scope, job) = (Scope::new("acme", "fulfil").unwrap(), IdempotencyKey::new("order-842").unwrap());
        claim_job(existing, &scope, &job, &Fingerprint::from_bytes([fp; 32]), DecisionContext::new(now, &policy))
            .unwrap()
    }

    fn claimed(decision: JobDecision) -> (JobLease, JobRecord) {
        match decision.answer {
            JobAnswer::Claimed(lease) => (lease, decision.write.unwrap()),
            other => panic!("expected a claim, got {other:?}"),
        }
    }

    #[test]
    fn a_redelivered_job_resumes_after_its_finished_steps_with_a_higher_fence() {
        let (lease, job) = claimed(claim(None, 1, at(0)));
        let job = job.record_step(lease.fence, &name("reserve"), b"r1".to_vec(), None, at(1), &policy()).unwrap();
        assert_eq!((job.step_result(&name("reserve")), job.step_result(&name("ship"))), (Some(&b"r1"[..]), None));
        assert_eq!(
            job.record_step(lease.fence, &name("reserve"), b"again".to_vec(), None, at(1), &policy()),
            Err(JobRefusal::StepDone(name("reserve")))
        );
        assert!(matches!(claim(Some(job.clone()), 1, at(5)).answer, JobAnswer::Running { .. }));
        assert_eq!(claim(Some(job.clone()), 2, at(5)).answer, JobAnswer::Mismatch);
        let (again, taken) = claimed(claim(Some(job.clone()), 1, at(10)));
        assert_eq!((again.fence, again.attempt), (lease.fence + 1, 2));
        assert_eq!(again.result_of(&name("reserve")), Some(&b"r1"[..]));
        assert!(matches!(
            taken.record_step(lease.fence, &name("pay"), vec![], None, at(11), &policy()),
            Err(JobRefusal::StaleLease { .. })
        ));
        let done = taken.finish(again.fence, b"shipped".to_vec(), at(12), &policy()).unwrap();
        assert_eq!(claim(Some(done.clone()), 1, at(13)).answer, JobAnswer::Completed { result: b"shipped".to_vec() });
        assert!(done.is_forgotten(at(12).saturating_add(policy().response_ttl() + policy().tombstone_ttl())));
    }

    #[test]
    fn an_abandoned_saga_compensates_newest_first_and_each_once() {
        let (lease, job) = claimed(claim(None, 1, at(0)));
        let job = job.record_step(lease.fence, &name("a"), vec![], Some(b"undo-a".to_vec()), at(1), &policy()).unwrap();
        let job = job.record_step(lease.fence, &name("b"), vec![], None, at(2), &policy()).unwrap();
        let job = job.record_step(lease.fence, &name("c"), vec![], Some(b"undo-c".to_vec()), at(3), &policy()).unwrap();
        let (job, pending) = job.abandon(lease.fence, "payment declined", at(4), &policy()).unwrap();
        assert_eq!(pending.iter().map(|c| c.step.as_str()).collect::<Vec<_>>(), ["c", "a"]);
        // The older step's compensation may not run while the newer one's is pending.
        assert_eq!(
            job.record_compensated(lease.fence, &name("a"), at(5), &policy()),
            Err(JobRefusal::CompensationOrder { step: name("a"), newest: name("c") })
        );
        assert_eq!(
            job.record_compensated(lease.fence, &name("b"), at(5), &policy()),
            Err(JobRefusal::NoCompensation(name("b"))),
            "a step without a compensation has none to run"
        );
        let job = job.record_compensated(lease.fence, &name("c"), at(5), &policy()).unwrap();
        assert_eq!(
            job.record_compensated(lease.fence, &name("c"), at(5), &policy()),
            Err(JobRefusal::NoCompensation(name("c")))
        );
        assert_eq!(job.state.kind(), JobStateKind::Compensating);
        // The compensating worker dies; a redelivery takes over what is left.
        let JobAnswer::Compensate { lease: next, pending } = claim(Some(job.clone()), 1, at(20)).answer else {
            panic!()
        };
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].data, b"undo-a");
        let job = claim(Some(job), 1, at(20)).write.unwrap();
        let job = job.record_compensated(next.fence, &name("a"), at(21), &policy()).unwrap();
        assert_eq!(job.state.kind(), JobStateKind::Compensated);
        assert_eq!(
            claim(Some(job.clone()), 1, at(22)).answer,
            JobAnswer::Compensated { reason: "payment declined".into() }
        );
        assert_eq!(JobRecord::decode(&job.encode()), Ok(job));
    }

    #[test]
    fn step_results_and_compensations_over_the_result_limit_are_refused() {
        let small = Policy::default().with_max_result_bytes(16);
        let (lease, job) = claimed(claim(None, 1, at(0)));
        let refused = job.record_step(lease.fence, &name("big"), vec![0; 17], None, at(1), &small);
        assert_eq!(refused, Err(JobRefusal::TooLarge { what: "step result", len: 17, max: 16 }));
        let refused = job.record_step(lease.fence, &name("big"), vec![0; 16], Some(vec![0; 17]), at(1), &small);
        assert_eq!(refused, Err(JobRefusal::TooLarge { what: "step compensation", len: 17, max: 16 }));
        let fits = job.record_step(lease.fence, &name("big"), vec![0; 16], Some(vec![0; 16]), at(1), &small);
        assert_eq!(fits.unwrap().steps.len(), 1);
    }

    #[test]
    fn a_stale_or_finished_lease_may_not_run_a_step() {
        let (lease, job) = claimed(claim(None, 1, at(0)));
        assert_eq!(job.check_can_run(lease.fence), Ok(()));
        assert!(matches!(job.check_can_run(lease.fence - 1), Err(JobRefusal::StaleLease { .. })));
        let done = job.finish(lease.fence, b"ok".to_vec(), at(1), &policy()).unwrap();
        assert!(matches!(done.check_can_run(lease.fence), Err(JobRefusal::WrongState { .. })));
    }

    #[test]
    fn abandoning_without_compensations_is_compensated_at_once() {
        let (lease, job) = claimed(claim(None, 1, at(0)));
        let (job, pending) = job.abandon(lease.fence, "nothing to undo", at(1), &policy()).unwrap();
        assert!(pending.is_empty());
        assert_eq!(job.state.kind(), JobStateKind::Compensated);
        assert!(matches!(job.finish(lease.fence, vec![], at(2), &policy()), Err(JobRefusal::WrongState { .. })));
    }
}
