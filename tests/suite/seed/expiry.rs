//! The seed note's test list: expiry, tombstones, forgetting.

use super::*;

#[test]
fn a_result_replays_until_its_ttl_then_expires_then_tombstones_then_is_forgotten_with_a_higher_fence() {
    let fixture = Fixture::new();
    let store = fixture.store();
    let ledger = EffectLedger::new();
    let (scope, key, fingerprint) = (scope("acme", CHARGE), key("order-842"), fp(1));

    let lease = acquired(store.reserve(Reserve::new(&scope, &key, &fingerprint)).expect("reserve"));
    let first_fence = lease.fence();
    let done_at = T0;
    store.complete(&lease, b"ok".to_vec()).expect("complete");
    let replay = Delivery::Answered(Reservation::Replay { outcome: OutcomeClass::Completed, body: b"ok".to_vec() });
    let expired = Delivery::Answered(Reservation::Expired { outcome: OutcomeClass::Completed });

    fixture.clock.set(done_at + RESPONSE_MS - 1);
    assert_eq!(deliver(store, &ledger, &scope, &key, &fingerprint, "842"), replay, "just before the response TTL");
    fixture.clock.set(done_at + RESPONSE_MS);
    assert_eq!(deliver(store, &ledger, &scope, &key, &fingerprint, "842"), expired, "at the TTL, even before purge");
    assert_eq!(store.get(&scope, &key).expect("get").expect("record").state.kind(), StateKind::Completed);

    let report = store.purge_expired(100).expect("purge");
    assert_eq!((report.tombstoned, report.forgotten), (1, 0));
    let tombstone = store.get(&scope, &key).expect("get").expect("record");
    assert_eq!(
        tombstone.state,
        State::Tombstone {
            outcome: OutcomeClass::Completed,
            forget_at: Timestamp::from_millis(done_at + RESPONSE_MS + TOMBSTONE_MS)
        }
    );
    assert_eq!(deliver(store, &ledger, &scope, &key, &fingerprint, "842"), expired, "the tombstone refuses");

    fixture.clock.set(done_at + RESPONSE_MS + TOMBSTONE_MS - 1);
    let report = store.purge_expired(100).expect("purge");
    assert_eq!((report.tombstoned, report.forgotten), (0, 0), "purge never forgets a key early");
    assert_eq!(deliver(store, &ledger, &scope, &key, &fingerprint, "842"), expired);

    fixture.clock.set(done_at + RESPONSE_MS + TOMBSTONE_MS);
    let report = store.purge_expired(100).expect("purge");
    assert_eq!((report.tombstoned, report.forgotten), (0, 1));
    assert_eq!(store.get(&scope, &key).expect("get"), None, "forgotten");
    assert_eq!(ledger.count("842"), 0, "nothing ran in all that time");

    let lease = acquired(store.reserve(Reserve::new(&scope, &key, &fingerprint)).expect("reserve"));
    assert!(lease.fence() > first_fence, "fence {} must exceed the forgotten record's {first_fence}", lease.fence());
    assert_eq!(lease.attempt(), 1);
}

#[test]
fn a_tombstone_after_purge_refuses_to_run_the_intent_again() {
    for outcome in [OutcomeClass::Completed, OutcomeClass::Failed] {
        let mut fixture = Fixture::new();
        let ledger = EffectLedger::new();
        let (scope, key, fingerprint) = (scope("acme", CHARGE), key("order-842"), fp(1));
        let lease = acquired(fixture.store().reserve(Reserve::new(&scope, &key, &fingerprint)).expect("reserve"));
        ledger.perform("842");
        match outcome {
            OutcomeClass::Completed => fixture.store().complete(&lease, b"ok".to_vec()).expect("complete"),
            OutcomeClass::Failed => fixture.store().fail(&lease, Failure::Definitive(b"no".to_vec())).expect("fail"),
        }
        fixture.advance(RESPONSE_MS + 1);
        assert_eq!(fixture.store().purge_expired(10).expect("purge").tombstoned, 1);
        fixture.restart();

        for _retry in 0..5 {
            fixture.advance(TOMBSTONE_MS / 10);
            let answer = deliver(fixture.store(), &ledger, &scope, &key, &fingerprint, "842");
            assert_eq!(answer, Delivery::Answered(Reservation::Expired { outcome }), "{outcome:?}");
            assert_eq!(fixture.store().purge_expired(10).expect("purge").forgotten, 0);
        }
        assert_eq!(ledger.count("842"), 1, "{outcome:?}: never executed again");
    }
}
