//! The seed note's test list: uncertain outcomes and reconciliation.

use super::*;

#[test]
fn a_timeout_after_remote_success_is_reconciled_to_the_provider_result_and_never_charged_twice() {
    let fixture = Fixture::new();
    let store = fixture.store();
    let provider = EffectLedger::new();
    let (scope, key, fingerprint) = (scope("acme", CHARGE), key("order-842"), fp(1));

    let lease = acquired(store.reserve(Reserve::new(&scope, &key, &fingerprint)).expect("reserve"));
    provider.perform("842"); // the charge went through, but the response timed out
    store.fail(&lease, Failure::Uncertain).expect("report uncertain");

    for _retry in 0..5 {
        fixture.advance(LEASE_MS);
        let answer = deliver(store, &provider, &scope, &key, &fingerprint, "842");
        assert_eq!(answer, Delivery::Answered(Reservation::NeedsReconciliation { cause: UncertainCause::Reported }));
    }
    // The attempt that reported the uncertainty cannot change its mind afterwards.
    assert_eq!(
        refused(store.complete(&lease, b"late".to_vec())),
        TransitionError::WrongState { state: StateKind::Uncertain, action: "complete" }
    );

    // Reconciliation asks the provider, which has exactly one charge.
    assert_eq!(provider.count("842"), 1);
    let provider_result = charge_result("842", 1);
    store
        .reconcile(&scope, &key, Resolution::Completed(provider_result.clone()), idemdb::ResolutionCause::Operator)
        .expect("reconcile");

    let answer = deliver(store, &provider, &scope, &key, &fingerprint, "842");
    assert_eq!(
        answer,
        Delivery::Answered(Reservation::Replay { outcome: OutcomeClass::Completed, body: provider_result })
    );
    assert_eq!(provider.count("842"), 1, "never a second charge");
}

#[test]
fn an_expired_lease_under_the_default_policy_needs_reconciliation_not_a_second_attempt() {
    let fixture = Fixture::new();
    let store = fixture.store();
    let provider = EffectLedger::new();
    let (scope, key, fingerprint) = (scope("acme", CHARGE), key("order-842"), fp(1));

    let lease = acquired(store.reserve(Reserve::new(&scope, &key, &fingerprint)).expect("reserve"));
    provider.perform("842"); // then the worker hangs and never reports

    // While the lease is live, reconciling could contradict the running attempt.
    assert_eq!(
        refused(store.reconcile(&scope, &key, Resolution::Released, idemdb::ResolutionCause::Operator)),
        TransitionError::LeaseLive { until: lease.expires_at() }
    );
    fixture.advance(LEASE_MS);
    for _retry in 0..3 {
        let answer = deliver(store, &provider, &scope, &key, &fingerprint, "842");
        assert_eq!(
            answer,
            Delivery::Answered(Reservation::NeedsReconciliation { cause: UncertainCause::LeaseExpired })
        );
        fixture.advance(LEASE_MS);
    }
    assert_eq!(provider.count("842"), 1);

    store
        .reconcile(&scope, &key, Resolution::Completed(charge_result("842", 1)), idemdb::ResolutionCause::Operator)
        .expect("reconcile");
    let answer = deliver(store, &provider, &scope, &key, &fingerprint, "842");
    assert_eq!(
        answer,
        Delivery::Answered(Reservation::Replay { outcome: OutcomeClass::Completed, body: charge_result("842", 1) })
    );
    assert_eq!(provider.count("842"), 1);
}

#[test]
fn an_uncertain_attempt_the_provider_never_saw_is_released_and_then_runs_exactly_once() {
    let fixture = Fixture::new();
    let store = fixture.store();
    let provider = EffectLedger::new();
    let (scope, key, fingerprint) = (scope("acme", CHARGE), key("order-842"), fp(1));

    let lease = acquired(store.reserve(Reserve::new(&scope, &key, &fingerprint)).expect("reserve"));
    store.fail(&lease, Failure::Uncertain).expect("report uncertain"); // the request never left
    assert_eq!(provider.count("842"), 0);
    store.reconcile(&scope, &key, Resolution::Released, idemdb::ResolutionCause::Operator).expect("reconcile");

    let Delivery::Ran(result) = deliver(store, &provider, &scope, &key, &fingerprint, "842") else {
        panic!("a released key runs again");
    };
    let answer = deliver(store, &provider, &scope, &key, &fingerprint, "842");
    assert_eq!(answer, Delivery::Answered(Reservation::Replay { outcome: OutcomeClass::Completed, body: result }));
    assert_eq!(provider.count("842"), 1);
    // The old lease (same fence, but the record moved on) cannot finish anything.
    assert!(store.complete(&lease, b"late".to_vec()).is_err());
}
