//! The seed note's test list: durability.

use super::*;

#[test]
fn a_completion_with_immediate_durability_is_on_disk_when_complete_returns() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("durable.idemdb");
    let clock = ManualClock::new(T0);
    let store = builder(&clock).durability(Durability::Immediate).open(&path).expect("store");
    let (scope, fingerprint) = (scope("acme", CHARGE), fp(1));
    let ledger = EffectLedger::new();
    let mut results = Vec::new();
    for n in 0..5 {
        let key = key(&format!("order-{n}"));
        let Delivery::Ran(result) = deliver(&store, &ledger, &scope, &key, &fingerprint, &n.to_string()) else {
            panic!("runs");
        };
        results.push((key, result));
        // What a crash right after `complete` returned would leave: a copy of the file now.
        let image = dir.path().join(format!("crash-{n}.idemdb"));
        fs::copy(&path, &image).expect("copy");
        copy_journal(&path, &image);
        let crashed = builder(&clock).open(&image).expect("open crash image");
        for (key, result) in &results {
            assert_eq!(
                crashed.get(&scope, key).expect("get").map(|record| record.state.kind()),
                Some(StateKind::Completed),
                "result {n} is durable"
            );
            assert_eq!(
                crashed.reserve(Reserve::new(&scope, key, &fingerprint)).expect("reserve"),
                Reservation::Replay { outcome: OutcomeClass::Completed, body: result.clone() }
            );
        }
    }
    drop(store);
    let store = builder(&clock).open(&path).expect("reopen");
    for (key, result) in &results {
        assert_eq!(
            store.reserve(Reserve::new(&scope, key, &fingerprint)).expect("reserve"),
            Reservation::Replay { outcome: OutcomeClass::Completed, body: result.clone() }
        );
    }
    assert_eq!(ledger.total(), 5);
}

/// Promise 5 across a purge. A fresh binding's fence is `max(previous + 1, now in ms)`, and the
/// previous fence is lost when purge removes the record; takeovers and re-reservations after a
/// release add one per lease without waiting for the clock, so fences can run ahead of the
/// clock. When the record is forgotten soon enough (zero or tiny response and tombstone TTLs,
/// which `Policy::validate` accepts), the next binding reuses a fence of the previous one, and
/// a late `complete` from that lease (a retry after `CommitUnknown`, say) overwrites the new
/// request's record with the old request's result. Fix: never derive a fresh fence from the
/// clock alone; keep a store-wide fence high-water mark (like the clock's, in `idemdb_meta`)
/// and issue `max(previous + 1, now, high_water + 1)`.
#[test]
fn a_lease_of_a_purged_binding_cannot_complete_the_next_binding_even_with_zero_ttls() {
    let clock = ManualClock::new(T0);
    let zero = Policy::default()
        .with_lease_ttl(Duration::from_millis(1))
        .with_response_ttl(Duration::ZERO)
        .with_tombstone_ttl(Duration::ZERO)
        .with_expired_lease(ExpiredLease::Takeover);
    let store = Store::builder().default_policy(zero).clock(clock.clone()).in_memory().expect("store");
    let (scope, key) = (scope("acme", LOCAL), key("job-1"));
    acquired(store.reserve(Reserve::new(&scope, &key, &fp(1))).expect("reserve"));
    clock.advance(Duration::from_millis(1));
    let old = acquired(store.reserve(Reserve::new(&scope, &key, &fp(1))).expect("takeover"));
    store.complete(&old, b"old".to_vec()).expect("complete");
    assert_eq!(store.purge_expired(10).expect("purge").forgotten, 1);

    let new = acquired(store.reserve(Reserve::new(&scope, &key, &fp(2))).expect("a new binding"));
    assert!(new.fence() > old.fence(), "fence {} reissued after {}", new.fence(), old.fence());
    let before = store.get(&scope, &key).expect("get");
    assert!(
        store.complete(&old, b"old again".to_vec()).is_err(),
        "a lease of the purged binding completed the new one"
    );
    assert_eq!(store.get(&scope, &key).expect("get"), before);
}
