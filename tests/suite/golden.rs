//! Golden store files: a store written by format 1 must open and read back unchanged by every
//! later build. `tests/testdata/golden/store-v1.idemdb` was written by `write_golden_store`
//! (run it with `--ignored` only when adding a new format's fixture, never to "fix" this test).
//! Format 1 is the first release's: the fixture was written again before it, when the code that
//! read stores of earlier development builds (no reconciliation queue) was removed. It is
//! written with the journal off, so the file alone is the store (no journal path of the
//! machine that wrote it).

use std::path::{Path, PathBuf};

use idemdb::{
    Failure, Fingerprint, IdempotencyKey, ManualClock, OutcomeClass, Reservation, Reserve, Resolution, Scope,
    StateKind, Store,
};

const T: u64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/golden/store-v1.idemdb")
}

fn key(name: &str) -> IdempotencyKey {
    IdempotencyKey::new(name).expect("key")
}

fn fp(n: u8) -> Fingerprint {
    Fingerprint::from_bytes([n; 32])
}

#[test]
#[ignore = "writes the golden fixture; run only when a new format is released"]
fn write_golden_store() {
    let path = fixture();
    let _ = std::fs::remove_file(&path);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    let clock = ManualClock::new(T);
    let store = Store::builder().clock(clock.clone()).secret_seed([7; 32]).journal(false).open(&path).expect("create");
    let scope = Scope::new("acme", "create_payment").expect("scope");
    let lease = |k: &str, f: u8| match store.reserve(Reserve::new(&scope, &key(k), &fp(f))).expect("reserve") {
        Reservation::Acquired(lease) => lease,
        other => panic!("{other:?}"),
    };
    lease("in-progress", 1);
    store.complete(&lease("completed", 2), b"{\"charge\":\"ch_1\"}".to_vec()).expect("complete");
    store.fail(&lease("failed", 3), Failure::Definitive(b"declined".to_vec())).expect("fail");
    store.fail(&lease("released", 4), Failure::Retryable).expect("release");
    store.fail(&lease("uncertain", 5), Failure::Uncertain).expect("uncertain");
    store.fail(&lease("reconciled", 6), Failure::Uncertain).expect("uncertain");
    store
        .reconcile(
            &scope,
            &key("reconciled"),
            Resolution::Completed(b"found".to_vec()),
            idemdb::ResolutionCause::Operator,
        )
        .expect("reconcile");
    drop(store);
}

#[test]
fn golden_store_v1_opens_and_reads_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("store-v1.idemdb");
    std::fs::copy(fixture(), &copy).expect("copy fixture");
    let clock = ManualClock::new(T + 1_000);
    let mut store = Store::builder().clock(clock).open(&copy).expect("format 1 opens");
    let scope = Scope::new("acme", "create_payment").expect("scope");
    let state = |k: &str| store.get(&scope, &key(k)).expect("get").expect("present").state.kind();
    assert_eq!(state("in-progress"), StateKind::InProgress);
    assert_eq!(state("completed"), StateKind::Completed);
    assert_eq!(state("failed"), StateKind::Failed);
    assert_eq!(state("released"), StateKind::Released);
    assert_eq!(state("uncertain"), StateKind::Uncertain);
    assert_eq!(state("reconciled"), StateKind::Completed);
    assert_eq!(
        store.reserve(Reserve::new(&scope, &key("completed"), &fp(2))).expect("reserve"),
        Reservation::Replay { outcome: OutcomeClass::Completed, body: b"{\"charge\":\"ch_1\"}".to_vec() }
    );
    assert_eq!(
        store.reserve(Reserve::new(&scope, &key("failed"), &fp(3))).expect("reserve"),
        Reservation::Replay { outcome: OutcomeClass::Failed, body: b"declined".to_vec() }
    );
    // The audit secret was kept: the key hash is the one the fixture's writer computed.
    let events = store.audit_events(100).expect("audit");
    assert!(events.len() >= 14, "audit trail survived: {}", events.len());
    assert!(events.iter().any(|e| e.key_hash == store.key_hash(&scope, &key("completed"))));
    // Its reconciliation queue was written with it: the uncertain record is listed.
    let queue = store.reconciliation_queue(10).expect("queue");
    assert_eq!(queue.len(), 1, "{queue:?}");
    let report = store.verify().expect("verify");
    assert!(report.is_ok(), "{report:?}");
}
