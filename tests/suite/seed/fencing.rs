//! The seed note's test list: fencing.

use super::*;

#[test]
fn a_stale_lease_cannot_complete_fail_or_renew_after_a_takeover() {
    let fixture = Fixture::new();
    let store = fixture.store();
    let (scope, key, fingerprint) = (scope("acme", LOCAL), key("job-17"), fp(1));

    let old = acquired(store.reserve(Reserve::new(&scope, &key, &fingerprint)).expect("reserve"));
    fixture.advance(LEASE_MS);
    let new = acquired(store.reserve(Reserve::new(&scope, &key, &fingerprint)).expect("takeover"));
    assert!(new.fence() > old.fence());
    assert_eq!(new.attempt(), 2);

    let before = store.get(&scope, &key).expect("get");
    let stale = TransitionError::StaleFence { presented: old.fence(), current: new.fence() };
    assert_eq!(refused(store.complete(&old, b"old result".to_vec())), stale);
    assert_eq!(refused(store.fail(&old, Failure::Definitive(b"old failure".to_vec()))), stale);
    assert_eq!(refused(store.fail(&old, Failure::Retryable)), stale);
    assert_eq!(refused(store.fail(&old, Failure::Uncertain)), stale);
    assert_eq!(refused(store.renew(&old)), stale);
    assert_eq!(store.get(&scope, &key).expect("get"), before, "the record is unchanged");

    store.complete(&new, b"new result".to_vec()).expect("the current lease completes");
    assert_eq!(
        store.reserve(Reserve::new(&scope, &key, &fingerprint)).expect("reserve"),
        Reservation::Replay { outcome: OutcomeClass::Completed, body: b"new result".to_vec() }
    );
    assert_eq!(refused(store.complete(&old, b"old result".to_vec())), stale);
}
