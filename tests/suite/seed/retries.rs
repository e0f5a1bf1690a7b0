//! The seed note's test list: same key and body.

use super::*;

#[test]
fn sequential_retries_with_the_same_key_and_body_charge_once_and_replay_identical_bytes() {
    let fixture = Fixture::new();
    let ledger = EffectLedger::new();
    let (scope, key, fingerprint) = (scope("acme", CHARGE), key("order-842"), fp(1));

    let Delivery::Ran(first) = deliver(fixture.store(), &ledger, &scope, &key, &fingerprint, "842") else {
        panic!("the first delivery runs");
    };
    for _retry in 0..20 {
        fixture.advance(1_000);
        let answer = deliver(fixture.store(), &ledger, &scope, &key, &fingerprint, "842");
        assert_eq!(
            answer,
            Delivery::Answered(Reservation::Replay { outcome: OutcomeClass::Completed, body: first.clone() })
        );
    }
    assert_eq!(ledger.count("842"), 1, "twenty retries, one charge");
}

#[test]
fn concurrent_retries_of_the_same_keys_acquire_once_and_charge_once_per_key() {
    const THREADS: usize = 16;
    const KEYS: usize = 50;
    let fixture = Fixture::new();
    let store = Arc::new(builder(&fixture.clock).open(fixture.dir.path().join("race.idemdb")).expect("store"));
    let ledger = Arc::new(EffectLedger::new());
    let scope = scope("acme", CHARGE);
    let acquired_count: Arc<Vec<AtomicU32>> = Arc::new((0..KEYS).map(|_| AtomicU32::new(0)).collect());
    let refused_count: Arc<Vec<AtomicU32>> = Arc::new((0..KEYS).map(|_| AtomicU32::new(0)).collect());
    let barrier = Arc::new(Barrier::new(THREADS));

    let threads: Vec<_> = (0..THREADS)
        .map(|thread| {
            let (store, ledger, scope, barrier) =
                (Arc::clone(&store), Arc::clone(&ledger), scope.clone(), Arc::clone(&barrier));
            let (acquired_count, refused_count) = (Arc::clone(&acquired_count), Arc::clone(&refused_count));
            thread::spawn(move || {
                barrier.wait();
                // Half the threads walk the keys forwards, half backwards: every key is raced.
                let order: Vec<usize> = if thread % 2 == 0 { (0..KEYS).collect() } else { (0..KEYS).rev().collect() };
                for k in order {
                    let intent = format!("order-{k}");
                    match store.reserve(Reserve::new(&scope, &key(&intent), &fp(7))).expect("reserve") {
                        Reservation::Acquired(lease) => {
                            acquired_count[k].fetch_add(1, Ordering::SeqCst);
                            ledger.perform(&intent);
                            store.complete(&lease, intent.clone().into_bytes()).expect("complete");
                        }
                        Reservation::InProgress { .. } => {
                            refused_count[k].fetch_add(1, Ordering::SeqCst);
                        }
                        Reservation::Replay { outcome, body } => {
                            assert_eq!((outcome, body), (OutcomeClass::Completed, intent.clone().into_bytes()));
                            refused_count[k].fetch_add(1, Ordering::SeqCst);
                        }
                        other => panic!("a racing retry got {other:?}"),
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("racing thread");
    }

    for k in 0..KEYS {
        let intent = format!("order-{k}");
        assert_eq!(acquired_count[k].load(Ordering::SeqCst), 1, "{intent}: exactly one lease");
        assert_eq!(refused_count[k].load(Ordering::SeqCst), THREADS as u32 - 1, "{intent}: every other try refused");
        assert_eq!(ledger.count(&intent), 1, "{intent}: exactly one charge");
        assert_eq!(
            store.reserve(Reserve::new(&scope, &key(&intent), &fp(7))).expect("reserve"),
            Reservation::Replay { outcome: OutcomeClass::Completed, body: intent.clone().into_bytes() }
        );
        let record = store.get(&scope, &key(&intent)).expect("get").expect("record");
        assert_eq!(record.attempts, 1, "{intent}");
    }
    assert_eq!(ledger.total(), KEYS as u64);
    assert!(ledger.duplicates().is_empty());
}
