//! Queue jobs: a worker killed after each step, redeliveries that resume at the next step,
//! each step's effect once, and an abandoned saga's compensations once, newest first.

use std::time::Duration;

use idemdb::{
    EffectName, Fingerprint, IdempotencyKey, JobAnswer, JobLease, JobStateKind, ManualClock, Refusal, Scope, Store,
};
use idemdb_fake_provider::EffectLedger;

use super::{LEASE_MS, T0, store};

const STEPS: [&str; 4] = ["reserve_stock", "charge", "pack", "ship"];

fn step(name: &str) -> EffectName {
    EffectName::new(name).unwrap()
}

/// Runs the job's steps in order, stopping (the worker "dies") after `die_after` steps.
fn work(store: &Store, lease: &JobLease, ledger: &EffectLedger, die_after: usize) -> bool {
    for (n, name) in STEPS.iter().enumerate() {
        if n == die_after {
            return false;
        }
        store
            .run_step(lease, &step(name), |_txn| {
                let effect = ledger.perform(name);
                Ok::<_, idemdb::Error>((effect.body, Some(format!("undo {name}").into_bytes())))
            })
            .expect("run a step");
    }
    store.finish_job(lease, b"shipped".to_vec()).expect("finish");
    true
}

#[test]
fn a_worker_killed_after_each_step_is_resumed_and_every_step_runs_once() {
    for die_after in 0..=STEPS.len() {
        let clock = ManualClock::new(T0);
        let store = store(&clock);
        let ledger = EffectLedger::new();
        let (scope, job) = (Scope::new("acme", "fulfil").unwrap(), IdempotencyKey::new("order-842").unwrap());
        let message = Fingerprint::from_bytes([4; 32]);
        let JobAnswer::Claimed(first) = store.claim_job(&scope, &job, &message).unwrap() else { panic!() };
        let finished = work(&store, &first, &ledger, die_after);
        // The message comes back (redelivered to every worker, again and again).
        assert!(matches!(
            store.claim_job(&scope, &job, &message).unwrap(),
            JobAnswer::Running { .. } | JobAnswer::Completed { .. }
        ));
        clock.advance(Duration::from_millis(LEASE_MS));
        match store.claim_job(&scope, &job, &message).unwrap() {
            JobAnswer::Claimed(lease) => {
                assert!(!finished);
                assert_eq!(lease.done.len(), die_after, "resumes after the finished steps");
                assert_eq!(lease.attempt, 2);
                // The dead worker's lease can no longer record anything.
                let stale = store.finish_job(&first, b"late".to_vec());
                assert!(
                    matches!(stale, Err(idemdb::Error::Refused(Refusal::Job(idemdb::JobRefusal::StaleLease { .. })))),
                    "{stale:?}"
                );
                assert!(work(&store, &lease, &ledger, usize::MAX));
            }
            JobAnswer::Completed { result } => {
                assert!(finished);
                assert_eq!(result, b"shipped");
            }
            other => panic!("unexpected {other:?}"),
        }
        for name in STEPS {
            assert_eq!(ledger.count(name), 1, "{name} ran once (worker died after {die_after} steps)");
        }
        let answer = store.claim_job(&scope, &job, &message).unwrap();
        assert_eq!(answer, JobAnswer::Completed { result: b"shipped".to_vec() });
        assert_eq!(store.claim_job(&scope, &job, &Fingerprint::from_bytes([5; 32])).unwrap(), JobAnswer::Mismatch);
    }
}

#[test]
fn an_abandoned_saga_runs_its_compensations_once_in_reverse_order() {
    let clock = ManualClock::new(T0);
    let store = store(&clock);
    let ledger = EffectLedger::new();
    let (scope, job) = (Scope::new("acme", "fulfil").unwrap(), IdempotencyKey::new("order-7").unwrap());
    let message = Fingerprint::from_bytes([4; 32]);
    let JobAnswer::Claimed(lease) = store.claim_job(&scope, &job, &message).unwrap() else { panic!() };
    assert!(!work(&store, &lease, &ledger, 3), "three steps done, then the saga fails");
    let pending = store.abandon_job(&lease, "payment reversed").unwrap();
    let order: Vec<&str> = pending.iter().map(|c| c.step.as_str()).collect();
    assert_eq!(order, ["pack", "charge", "reserve_stock"]);
    // The compensating worker runs the first compensation, then dies.
    let compensations = EffectLedger::new();
    store
        .compensate(&lease, &pending[0].step, |_txn, compensation| {
            compensations.perform(compensation.step.as_str());
            Ok::<(), idemdb::Error>(())
        })
        .unwrap();
    clock.advance(Duration::from_millis(LEASE_MS));
    let JobAnswer::Compensate { lease: next, pending } = store.claim_job(&scope, &job, &message).unwrap() else {
        panic!()
    };
    assert_eq!(pending.iter().map(|c| c.step.as_str()).collect::<Vec<_>>(), ["charge", "reserve_stock"]);
    for compensation in &pending {
        store
            .compensate(&next, &compensation.step, |_txn, compensation| {
                assert_eq!(compensation.data, format!("undo {}", compensation.step).into_bytes());
                compensations.perform(compensation.step.as_str());
                Ok::<(), idemdb::Error>(())
            })
            .unwrap();
    }
    // A compensation recorded already is refused without running.
    let again =
        store.compensate(&next, &step("charge"), |_txn, _| -> Result<(), idemdb::Error> { panic!("ran twice") });
    assert!(again.is_err());
    assert_eq!(compensations.total(), 3);
    assert_eq!(compensations.doubles(), 0);
    let record = store.job(&scope, &job).unwrap().unwrap();
    assert_eq!(record.state.kind(), JobStateKind::Compensated);
    assert_eq!(
        store.claim_job(&scope, &job, &message).unwrap(),
        JobAnswer::Compensated { reason: "payment reversed".into() }
    );
    assert_eq!(ledger.total(), 3, "the steps themselves ran once each");
}

#[test]
fn a_stale_workers_step_never_starts() {
    let clock = ManualClock::new(T0);
    let store = store(&clock);
    let ledger = EffectLedger::new();
    let (scope, job) = (Scope::new("acme", "fulfil").unwrap(), IdempotencyKey::new("order-9").unwrap());
    let message = Fingerprint::from_bytes([5; 32]);
    let JobAnswer::Claimed(stale) = store.claim_job(&scope, &job, &message).unwrap() else { panic!() };
    clock.advance(Duration::from_millis(LEASE_MS));
    let JobAnswer::Claimed(current) = store.claim_job(&scope, &job, &message).unwrap() else { panic!() };
    // The worker that lost the job tries a step: refused before its work runs.
    let refused = store.run_step(&stale, &step("charge"), |_txn| {
        let effect = ledger.perform("charge");
        Ok::<_, idemdb::Error>((effect.body, None))
    });
    assert!(
        matches!(
            refused,
            Err(idemdb::ExecuteError::Store(idemdb::Error::Refused(Refusal::Job(
                idemdb::JobRefusal::StaleLease { .. }
            ))))
        ),
        "{refused:?}"
    );
    assert_eq!(ledger.count("charge"), 0, "the stale worker's step never ran");
    // The current worker's step runs once.
    assert!(work(&store, &current, &ledger, usize::MAX));
    assert_eq!(ledger.count("charge"), 1);
}
