//! The seed note's test list: the clock going backwards.

use super::*;

#[test]
fn a_lease_seen_expired_is_not_revived_when_the_clock_goes_back_even_across_a_restart() {
    let mut fixture = Fixture::new();
    let provider = EffectLedger::new();
    let (charge, local, key, fingerprint) = (scope("acme", CHARGE), scope("acme", LOCAL), key("order-842"), fp(1));

    acquired(fixture.store().reserve(Reserve::new(&charge, &key, &fingerprint)).expect("reserve"));
    let local_lease = acquired(fixture.store().reserve(Reserve::new(&local, &key, &fingerprint)).expect("reserve"));
    provider.perform("842");
    fixture.advance(LEASE_MS + 1);
    let answer = fixture.store().reserve(Reserve::new(&charge, &key, &fingerprint)).expect("reserve");
    assert_eq!(answer, Reservation::NeedsReconciliation { cause: UncertainCause::LeaseExpired });

    for restart in [false, true] {
        if restart {
            fixture.restart();
        }
        fixture.clock.set(T0); // the wall clock jumps back to when the leases were live
        let answer = deliver(fixture.store(), &provider, &charge, &key, &fingerprint, "842");
        assert_eq!(
            answer,
            Delivery::Answered(Reservation::NeedsReconciliation { cause: UncertainCause::LeaseExpired })
        );
        let record = fixture.store().get(&charge, &key).expect("get").expect("record");
        assert_eq!(record.state, State::Uncertain { cause: UncertainCause::LeaseExpired });
    }
    // Under the takeover policy the expired lease is taken over, not reported as in progress.
    let takeover = acquired(fixture.store().reserve(Reserve::new(&local, &key, &fingerprint)).expect("reserve"));
    assert!(takeover.fence() > local_lease.fence());
    assert!(
        takeover.expires_at() > Timestamp::from_millis(T0 + LEASE_MS),
        "the new lease is counted from the latest time seen"
    );
    assert_eq!(provider.count("842"), 1);
}

#[test]
fn a_result_completed_while_the_clock_is_behind_keeps_its_full_ttl() {
    let fixture = Fixture::new();
    let store = fixture.store();
    let (scope, key, fingerprint) = (scope("acme", CHARGE), key("order-842"), fp(1));
    let latest = T0 + 50_000;

    fixture.clock.set(latest);
    let lease = acquired(store.reserve(Reserve::new(&scope, &key, &fingerprint)).expect("reserve"));
    fixture.clock.set(T0); // back by 50 s
    store.complete(&lease, b"ok".to_vec()).expect("complete");
    let record = store.get(&scope, &key).expect("get").expect("record");
    let State::Completed { expires_at, forget_at, .. } = record.state else { panic!("completed: {record:?}") };
    assert_eq!(expires_at, Timestamp::from_millis(latest + RESPONSE_MS), "counted from the latest time seen");
    assert_eq!(forget_at, Timestamp::from_millis(latest + RESPONSE_MS + TOMBSTONE_MS));

    fixture.clock.set(latest + RESPONSE_MS - 1);
    assert!(matches!(
        store.reserve(Reserve::new(&scope, &key, &fingerprint)).expect("reserve"),
        Reservation::Replay { .. }
    ));
    assert_eq!(store.purge_expired(10).expect("purge").tombstoned, 0);
    fixture.clock.set(latest + RESPONSE_MS);
    assert_eq!(
        store.reserve(Reserve::new(&scope, &key, &fingerprint)).expect("reserve"),
        Reservation::Expired { outcome: OutcomeClass::Completed }
    );
}
