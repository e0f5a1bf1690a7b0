//! The seed note's test list: dropping the store before commit, after commit, before the response.

use super::*;

#[test]
fn a_transaction_that_fails_before_commit_stores_neither_the_reservation_nor_the_app_write() {
    let fixture = Fixture::new();
    let store = fixture.store();
    let (scope, key) = (scope("acme", "place_order"), key("order-842"));
    let before = snapshot(store);

    let result: Result<(), AppError> = store.write(|txn| {
        let lease = acquired(txn.reserve(Reserve::new(&scope, &key, &fp(1)))?);
        txn.tables_checkpointing()
            .open_table(ORDERS)
            .map_err(Error::from)?
            .insert("order-842", 1050)
            .map_err(Error::from)?;
        txn.complete(&lease, b"placed".to_vec())?;
        Err(AppError::Declined)
    });
    let error = result.expect_err("the closure's error rolls back");
    assert!(matches!(error, AppError::Declined), "the closure's own error comes back: {error}");
    assert_eq!(snapshot(store), before, "no record");
    assert_eq!(read_order(store, "order-842"), None, "no app write");

    // The key is free: the next try is the first attempt.
    let lease = acquired(store.reserve(Reserve::new(&scope, &key, &fp(1))).expect("reserve"));
    assert_eq!(lease.attempt(), 1);
}

#[test]
fn a_reservation_survives_a_crash_before_completion_and_is_never_run_again_blindly() {
    let mut fixture = Fixture::new();
    let ledger = EffectLedger::new();
    let (scope, key, fingerprint) = (scope("acme", CHARGE), key("order-842"), fp(1));

    let lease = acquired(fixture.store().reserve(Reserve::new(&scope, &key, &fingerprint)).expect("reserve"));
    ledger.perform("842"); // the request left for the provider; then the process died
    let crash_image = fixture.open_crash_image("crash.idemdb");
    fixture.restart();

    for store in [fixture.store(), &crash_image] {
        let record = store.get(&scope, &key).expect("get").expect("the reservation was not lost");
        assert_eq!(record.state, State::InProgress { lease_expires_at: lease.expires_at() });
        assert_eq!(record.fence, lease.fence());
        assert!(matches!(
            store.reserve(Reserve::new(&scope, &key, &fingerprint)).expect("reserve"),
            Reservation::InProgress { .. }
        ));
    }
    fixture.advance(LEASE_MS);
    for store in [fixture.store(), &crash_image] {
        for _retry in 0..3 {
            let answer = deliver(store, &ledger, &scope, &key, &fingerprint, "842");
            assert_eq!(
                answer,
                Delivery::Answered(Reservation::NeedsReconciliation { cause: UncertainCause::LeaseExpired })
            );
        }
    }
    assert_eq!(ledger.count("842"), 1, "the unknown outcome is never re-executed");
}

#[test]
fn a_result_committed_before_a_crash_is_replayed_after_restart() {
    let mut fixture = Fixture::new();
    let ledger = EffectLedger::new();
    let (scope, key, fingerprint) = (scope("acme", CHARGE), key("order-842"), fp(1));
    let Delivery::Ran(result) = deliver(fixture.store(), &ledger, &scope, &key, &fingerprint, "842") else {
        panic!("the first delivery runs");
    };
    let crash_image = fixture.open_crash_image("crash.idemdb");
    fixture.restart();
    for store in [fixture.store(), &crash_image] {
        let answer = deliver(store, &ledger, &scope, &key, &fingerprint, "842");
        assert_eq!(
            answer,
            Delivery::Answered(Reservation::Replay { outcome: OutcomeClass::Completed, body: result.clone() })
        );
    }
    assert_eq!(ledger.count("842"), 1);
}

#[test]
fn a_result_the_caller_never_saw_is_replayed_after_restart_without_a_second_charge() {
    let mut fixture = Fixture::new();
    let ledger = EffectLedger::new();
    let (scope, key, fingerprint) = (scope("acme", CHARGE), key("order-842"), fp(1));

    // The server charges and stores the result; the connection drops before the response is
    // sent, and the server restarts. The client saw nothing.
    let lease = acquired(fixture.store().reserve(Reserve::new(&scope, &key, &fingerprint)).expect("reserve"));
    let stored = charge_result("842", ledger.perform("842").ordinal);
    fixture.store().complete(&lease, stored.clone()).expect("complete");
    fixture.restart();

    // The client retries with the same key, several times.
    for _retry in 0..3 {
        fixture.advance(2_000);
        let answer = deliver(fixture.store(), &ledger, &scope, &key, &fingerprint, "842");
        assert_eq!(
            answer,
            Delivery::Answered(Reservation::Replay { outcome: OutcomeClass::Completed, body: stored.clone() })
        );
    }
    assert_eq!(ledger.count("842"), 1);
}
