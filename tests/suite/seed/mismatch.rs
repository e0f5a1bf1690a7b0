//! The seed note's test list: same key, different body.

use super::*;

/// Brings `key` (bound to `fp(1)`) into a named state on a fresh store.
fn store_with_record_in(state: &str) -> (Fixture, Scope, IdempotencyKey) {
    let fixture = Fixture::new();
    let (scope, key) = (scope("acme", CHARGE), key("order-842"));
    let store = fixture.store();
    let lease = acquired(store.reserve(Reserve::new(&scope, &key, &fp(1))).expect("reserve"));
    match state {
        "in_progress" => {}
        "in_progress, lease expired" => fixture.advance(LEASE_MS),
        "completed" => store.complete(&lease, b"ok".to_vec()).expect("complete"),
        "completed, response expired" => {
            store.complete(&lease, b"ok".to_vec()).expect("complete");
            fixture.advance(RESPONSE_MS);
        }
        "failed" => store.fail(&lease, Failure::Definitive(b"declined".to_vec())).expect("fail"),
        "released" => store.fail(&lease, Failure::Retryable).expect("fail"),
        "uncertain, reported" => store.fail(&lease, Failure::Uncertain).expect("fail"),
        "uncertain, lease expired" => {
            fixture.advance(LEASE_MS);
            let answer = store.reserve(Reserve::new(&scope, &key, &fp(1))).expect("reserve");
            assert_eq!(answer, Reservation::NeedsReconciliation { cause: UncertainCause::LeaseExpired });
        }
        "tombstone" | "tombstone, failed" => {
            if state == "tombstone" {
                store.complete(&lease, b"ok".to_vec()).expect("complete");
            } else {
                store.fail(&lease, Failure::Definitive(b"declined".to_vec())).expect("fail");
            }
            fixture.advance(RESPONSE_MS);
            assert_eq!(store.purge_expired(10).expect("purge").tombstoned, 1);
        }
        other => panic!("unknown state {other}"),
    }
    (fixture, scope, key)
}

#[test]
fn a_released_key_is_bound_to_no_request_so_a_different_body_takes_it() {
    let (fixture, scope, key) = store_with_record_in("released");
    let store = fixture.store();
    let before = store.get(&scope, &key).expect("get").expect("the released record");
    let ledger = EffectLedger::new();
    let answer = deliver(store, &ledger, &scope, &key, &fp(2), "the corrected request");
    assert!(matches!(answer, Delivery::Ran(_)), "{answer:?}");
    assert_eq!(ledger.total(), 1, "the corrected request runs once");
    let after = store.get(&scope, &key).expect("get").expect("record");
    assert_eq!(after.fingerprint, fp(2), "now bound to the corrected request");
    assert!(after.fence > before.fence, "a new fence");
    // The first body is now the different request.
    let other = deliver(store, &ledger, &scope, &key, &fp(1), "the first body again");
    assert!(matches!(other, Delivery::Answered(Reservation::Mismatch { .. })), "{other:?}");
    assert_eq!(ledger.total(), 1);
}

#[test]
fn a_different_body_under_a_used_key_is_a_mismatch_in_every_state_and_changes_nothing() {
    let cases = [
        ("in_progress", StateKind::InProgress),
        ("in_progress, lease expired", StateKind::InProgress),
        ("completed", StateKind::Completed),
        ("completed, response expired", StateKind::Completed),
        ("failed", StateKind::Failed),
        ("uncertain, reported", StateKind::Uncertain),
        ("uncertain, lease expired", StateKind::Uncertain),
        ("tombstone", StateKind::Tombstone),
        ("tombstone, failed", StateKind::Tombstone),
    ];
    for (state, kind) in cases {
        let (fixture, scope, key) = store_with_record_in(state);
        let store = fixture.store();
        let ledger = EffectLedger::new();
        let before = snapshot(store);
        assert_eq!(before.len(), 1);
        assert_eq!(before[0].1.state.kind(), kind, "{state}: set-up");

        for other in [fp(2), fp(3)] {
            let answer = deliver(store, &ledger, &scope, &key, &other, "other request");
            assert_eq!(answer, Delivery::Answered(Reservation::Mismatch { stored: kind }), "{state}");
            let traced = Reserve::new(&scope, &key, &other).traced("req-1").expect("a valid id");
            let traced = store.reserve(traced).expect("reserve");
            assert_eq!(traced, Reservation::Mismatch { stored: kind }, "{state}");
        }
        assert_eq!(ledger.total(), 0, "{state}: a conflicting request never runs");
        assert_eq!(snapshot(store), before, "{state}: the stored record is unchanged");
        assert_eq!(store.get(&scope, &key).expect("get").as_ref(), Some(&before[0].1), "{state}");
    }
}
