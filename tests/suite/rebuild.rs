//! Rebuild compaction: a copy written in key order keeps everything and takes less space.

use std::fs;
use std::time::Duration;

use idemdb::{
    Canonicalizer, Failure, ManualClock, OpenError, RebuildError, Reservation, Resolution, Store, StoreBuilder, rebuild,
};
use idemdb_tests::{T0, fp, key, scope, snapshot};

fn builder(clock: &ManualClock) -> StoreBuilder {
    Store::builder().clock(clock.clone())
}

/// A store with records in every state, written in random key order, audit events, an
/// intent, and a purge behind it.
fn populate(store: &Store, clock: &ManualClock) {
    let scope = scope("acme", "create_payment");
    for i in 0..3_000u64 {
        let name = format!("{:016x}-{i}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let Reservation::Acquired(lease) = store.reserve(&scope, &key(&name), &fp(1)).expect("reserve") else {
            panic!("{name} was new");
        };
        match i % 5 {
            0 | 1 => store.complete(&lease, vec![b'r'; 300]).expect("complete"),
            2 => store.fail(&lease, Failure::Definitive(b"declined".to_vec())).expect("fail"),
            3 => {
                store.fail(&lease, Failure::Uncertain).expect("uncertain");
                if i % 2 == 0 {
                    store.reconcile(&scope, &key(&name), Resolution::Completed(b"found".to_vec())).expect("reconcile");
                }
            }
            _ => {}
        }
        clock.advance(Duration::from_millis(3));
    }
    store
        .create_intent(
            &idemdb_tests::scope("shop", "checkout"),
            &key("intent-1"),
            br#"{"cart":1}"#,
            &Canonicalizer::new(),
        )
        .expect("intent");
}

#[test]
fn a_rebuilt_copy_keeps_every_record_event_intent_and_secret_in_less_space() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::new(T0);
    let store = builder(&clock).open(dir.path().join("live.idemdb")).expect("open");
    populate(&store, &clock);
    let copy_path = dir.path().join("copy.idemdb");
    let report = store.rebuild_into(&copy_path).expect("rebuild");
    assert_eq!(report.records, 3_000);
    assert!(matches!(store.rebuild_into(&copy_path), Err(RebuildError::DestinationExists(_))));

    let copy = builder(&clock).open(&copy_path).expect("the copy opens");
    assert_eq!(snapshot(&copy), snapshot(&store), "records");
    assert_eq!(copy.audit_events(usize::MAX).expect("events"), store.audit_events(usize::MAX).expect("events"));
    assert_eq!(copy.all_intents().expect("intents"), store.all_intents().expect("intents"));
    let (before, after) = (store.stats().expect("stats"), copy.stats().expect("stats"));
    assert_eq!(after.index_entries, before.index_entries);
    assert!(
        after.allocated_bytes * 10 < before.allocated_bytes * 9,
        "pages in key order are fuller: {} vs {} bytes",
        after.allocated_bytes,
        before.allocated_bytes
    );
    // The same secret: listed key hashes are equal.
    let hashes = |s: &Store| {
        s.list(&idemdb::ListFilter::default()).expect("list").records.iter().map(|r| r.key_hash).collect::<Vec<_>>()
    };
    assert_eq!(hashes(&copy), hashes(&store));
    // It behaves as the original: a retry replays, a new key is reserved.
    let scope = scope("acme", "create_payment");
    let name = format!("{:016x}-{}", 0u64, 0);
    assert!(matches!(copy.reserve(&scope, &key(&name), &fp(1)).expect("retry"), Reservation::Replay { .. }));
    assert!(matches!(copy.reserve(&scope, &key("new"), &fp(1)).expect("new"), Reservation::Acquired(_)));
    drop(copy);
    let mut copy = builder(&clock).open(&copy_path).expect("reopen");
    assert!(copy.verify().expect("verify").is_ok());
}

#[test]
fn rebuild_replaces_a_store_file_in_place() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("store.idemdb");
    let clock = ManualClock::new(T0);
    let expected = {
        let store = builder(&clock).open(&path).expect("open");
        populate(&store, &clock);
        snapshot(&store)
    };
    let stale = dir.path().join("store.idemdb.rebuild");
    fs::write(&stale, b"left by an interrupted rebuild").expect("stale");
    let size = fs::metadata(&path).expect("size").len();

    let report = rebuild(&path).expect("rebuild");
    assert_eq!(report.bytes_before, Some(size));
    assert_eq!(report.bytes_after, fs::metadata(&path).expect("size").len());
    assert!(report.bytes_after < size, "{} < {size}", report.bytes_after);
    assert!(!stale.exists(), "the temporary file was renamed over the store");
    let store = builder(&clock).open(&path).expect("reopen");
    assert_eq!(snapshot(&store), expected);

    // Refusals: an open store, a missing file.
    assert!(matches!(rebuild(&path), Err(RebuildError::Open(OpenError::AlreadyOpen))));
    drop(store);
    assert!(matches!(rebuild(dir.path().join("missing.idemdb")), Err(RebuildError::Io { .. })));
}
