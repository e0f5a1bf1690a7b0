//! The seed note's test list. Every test keeps an effect ledger (the payment provider, outside
//! the store) and asserts how many effects happened, not only what the store answered.

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use idemdb::redb::{ReadableTable, TableDefinition};
use idemdb::{
    Durability, Error, ExecuteError, Executed, ExpiredLease, Failure, Fingerprint, IdempotencyKey, Lease, ManualClock,
    OutcomeClass, Policy, Reservation, Resolution, Scope, ScopedKey, State, StateKind, Store, StoreBuilder, Timestamp,
    TransitionError, UncertainCause,
};
use idemdb_tests::{EffectLedger, T0, fp, key, scope, snapshot};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use tempfile::TempDir;

const LEASE_MS: u64 = 10_000;
const RESPONSE_MS: u64 = 100_000;
const TOMBSTONE_MS: u64 = 1_000_000;
/// An operation whose effects are local, configured to take expired leases over.
const LOCAL: &str = "local_ledger";
/// The default-policy operation: an external charge.
const CHARGE: &str = "create_payment";

fn policy() -> Policy {
    Policy::default()
        .with_lease_ttl(Duration::from_millis(LEASE_MS))
        .with_response_ttl(Duration::from_millis(RESPONSE_MS))
        .with_tombstone_ttl(Duration::from_millis(TOMBSTONE_MS))
}

fn builder(clock: &ManualClock) -> StoreBuilder {
    Store::builder()
        .default_policy(policy())
        .policy(LOCAL, policy().with_expired_lease(ExpiredLease::Takeover))
        .clock(clock.clone())
}

/// A file store in a temporary directory, with a clock the test moves by hand.
struct Fixture {
    dir: TempDir,
    path: PathBuf,
    clock: ManualClock,
    store: Option<Store>,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("payments.idemdb");
        let clock = ManualClock::new(T0);
        let store = builder(&clock).open(&path).expect("create store");
        Fixture { dir, path, clock, store: Some(store) }
    }

    fn store(&self) -> &Store {
        self.store.as_ref().expect("store is open")
    }

    /// The process goes away (the store is dropped without any further call) and starts again.
    fn restart(&mut self) {
        drop(self.store.take());
        self.store = Some(builder(&self.clock).open(&self.path).expect("reopen store"));
    }

    /// The bytes a crash at this instant would leave behind (every completed call's commit is
    /// in the file), opened as a store: redb runs its recovery on it.
    fn open_crash_image(&self, name: &str) -> Store {
        let copy = self.dir.path().join(name);
        fs::copy(&self.path, &copy).expect("copy the live file");
        builder(&self.clock).open(&copy).expect("open the crash image")
    }

    fn advance(&self, ms: u64) {
        self.clock.advance(Duration::from_millis(ms));
    }
}

fn acquired(reservation: Reservation) -> Lease {
    match reservation {
        Reservation::Acquired(lease) => lease,
        other => panic!("expected a lease, got {other:?}"),
    }
}

fn refused<T: std::fmt::Debug>(result: Result<T, Error>) -> TransitionError {
    match result {
        Err(Error::Transition(error)) => error,
        other => panic!("expected a refused transition, got {other:?}"),
    }
}

fn charge_result(intent: &str, n: u32) -> Vec<u8> {
    // Not UTF-8 at the end, so a replay that went through a text conversion would differ.
    let mut body = format!("{{\"charge\":\"ch_{intent}_{n}\"}}").into_bytes();
    body.extend_from_slice(&[0xff, 0x00, 0xfe]);
    body
}

/// What a client saw for one delivery.
#[derive(Debug, PartialEq, Eq)]
enum Delivery {
    /// This delivery held the lease, performed the charge and stored its result.
    Ran(Vec<u8>),
    /// The store answered without running anything.
    Answered(Reservation),
}

/// One delivery of an intent: reserve; with a lease, charge the provider once and store the
/// result.
fn deliver(
    store: &Store,
    ledger: &EffectLedger,
    scope: &Scope,
    key: &IdempotencyKey,
    fingerprint: &Fingerprint,
    intent: &str,
) -> Delivery {
    match store.reserve(scope, key, fingerprint).expect("reserve") {
        Reservation::Acquired(lease) => {
            let n = ledger.perform(intent);
            let result = charge_result(intent, n);
            store.complete(&lease, result.clone()).expect("complete");
            Delivery::Ran(result)
        }
        other => Delivery::Answered(other),
    }
}

// ---------------------------------------------------------------------------------------------
// Same key and body.

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
                    match store.reserve(&scope, &key(&intent), &fp(7)).expect("reserve") {
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
            store.reserve(&scope, &key(&intent), &fp(7)).expect("reserve"),
            Reservation::Replay { outcome: OutcomeClass::Completed, body: intent.clone().into_bytes() }
        );
        let record = store.get(&scope, &key(&intent)).expect("get").expect("record");
        assert_eq!(record.attempts, 1, "{intent}");
    }
    assert_eq!(ledger.total(), KEYS as u32);
    assert!(ledger.duplicates().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Same key, different body.

/// Brings `key` (bound to `fp(1)`) into a named state on a fresh store.
fn store_with_record_in(state: &str) -> (Fixture, Scope, IdempotencyKey) {
    let fixture = Fixture::new();
    let (scope, key) = (scope("acme", CHARGE), key("order-842"));
    let store = fixture.store();
    let lease = acquired(store.reserve(&scope, &key, &fp(1)).expect("reserve"));
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
            let answer = store.reserve(&scope, &key, &fp(1)).expect("reserve");
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
fn a_different_body_under_a_used_key_is_a_mismatch_in_every_state_and_changes_nothing() {
    let cases = [
        ("in_progress", StateKind::InProgress),
        ("in_progress, lease expired", StateKind::InProgress),
        ("completed", StateKind::Completed),
        ("completed, response expired", StateKind::Completed),
        ("failed", StateKind::Failed),
        ("released", StateKind::Released),
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
            let traced = store.reserve_traced(&scope, &key, &other, "req-1").expect("reserve");
            assert_eq!(traced, Reservation::Mismatch { stored: kind }, "{state}");
        }
        assert_eq!(ledger.total(), 0, "{state}: a conflicting request never runs");
        assert_eq!(snapshot(store), before, "{state}: the stored record is unchanged");
        assert_eq!(store.get(&scope, &key).expect("get").as_ref(), Some(&before[0].1), "{state}");
    }
}

// ---------------------------------------------------------------------------------------------
// Dropping the store before commit, after commit, before the response.

#[derive(Debug)]
enum AppError {
    Store(Error),
    Declined,
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppError::Store(error) => write!(f, "store: {error}"),
            AppError::Declined => f.write_str("declined"),
        }
    }
}

impl From<Error> for AppError {
    fn from(error: Error) -> Self {
        AppError::Store(error)
    }
}

const ORDERS: TableDefinition<&str, u64> = TableDefinition::new("app_orders");
const BALANCES: TableDefinition<&str, i64> = TableDefinition::new("app_balances");

fn read_order(store: &Store, order: &str) -> Option<u64> {
    store
        .write(|txn| -> Result<_, Error> {
            let table = txn.tables().open_table(ORDERS)?;
            let value = table.get(order)?.map(|guard| guard.value());
            Ok(value)
        })
        .expect("read app table")
}

fn read_balance(store: &Store, account: &str) -> i64 {
    store
        .write(|txn| -> Result<_, Error> {
            let table = txn.tables().open_table(BALANCES)?;
            let value = table.get(account)?.map(|guard| guard.value());
            Ok(value.unwrap_or(0))
        })
        .expect("read app table")
}

#[test]
fn a_transaction_that_fails_before_commit_stores_neither_the_reservation_nor_the_app_write() {
    let fixture = Fixture::new();
    let store = fixture.store();
    let (scope, key) = (scope("acme", "place_order"), key("order-842"));
    let before = snapshot(store);

    let result: Result<(), AppError> = store.write(|txn| {
        let lease = acquired(txn.reserve(&scope, &key, &fp(1))?);
        txn.tables().open_table(ORDERS).map_err(Error::from)?.insert("order-842", 1050).map_err(Error::from)?;
        txn.complete(&lease, b"placed".to_vec())?;
        Err(AppError::Declined)
    });
    let error = result.expect_err("the closure's error rolls back");
    assert!(matches!(error, AppError::Declined), "the closure's own error comes back: {error}");
    assert_eq!(snapshot(store), before, "no record");
    assert_eq!(read_order(store, "order-842"), None, "no app write");

    // The key is free: the next try is the first attempt.
    let lease = acquired(store.reserve(&scope, &key, &fp(1)).expect("reserve"));
    assert_eq!(lease.attempt(), 1);
}

#[test]
fn a_reservation_survives_a_crash_before_completion_and_is_never_run_again_blindly() {
    let mut fixture = Fixture::new();
    let ledger = EffectLedger::new();
    let (scope, key, fingerprint) = (scope("acme", CHARGE), key("order-842"), fp(1));

    let lease = acquired(fixture.store().reserve(&scope, &key, &fingerprint).expect("reserve"));
    ledger.perform("842"); // the request left for the provider; then the process died
    let crash_image = fixture.open_crash_image("crash.idemdb");
    fixture.restart();

    for store in [fixture.store(), &crash_image] {
        let record = store.get(&scope, &key).expect("get").expect("the reservation was not lost");
        assert_eq!(record.state, State::InProgress { lease_expires_at: lease.expires_at() });
        assert_eq!(record.fence, lease.fence());
        assert!(matches!(store.reserve(&scope, &key, &fingerprint).expect("reserve"), Reservation::InProgress { .. }));
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
    let lease = acquired(fixture.store().reserve(&scope, &key, &fingerprint).expect("reserve"));
    let stored = charge_result("842", ledger.perform("842"));
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

// ---------------------------------------------------------------------------------------------
// Uncertain outcomes and reconciliation.

#[test]
fn a_timeout_after_remote_success_is_reconciled_to_the_provider_result_and_never_charged_twice() {
    let fixture = Fixture::new();
    let store = fixture.store();
    let provider = EffectLedger::new();
    let (scope, key, fingerprint) = (scope("acme", CHARGE), key("order-842"), fp(1));

    let lease = acquired(store.reserve(&scope, &key, &fingerprint).expect("reserve"));
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
    store.reconcile(&scope, &key, Resolution::Completed(provider_result.clone())).expect("reconcile");

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

    let lease = acquired(store.reserve(&scope, &key, &fingerprint).expect("reserve"));
    provider.perform("842"); // then the worker hangs and never reports

    // While the lease is live, reconciling could contradict the running attempt.
    assert_eq!(
        refused(store.reconcile(&scope, &key, Resolution::Released)),
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

    store.reconcile(&scope, &key, Resolution::Completed(charge_result("842", 1))).expect("reconcile");
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

    let lease = acquired(store.reserve(&scope, &key, &fingerprint).expect("reserve"));
    store.fail(&lease, Failure::Uncertain).expect("report uncertain"); // the request never left
    assert_eq!(provider.count("842"), 0);
    store.reconcile(&scope, &key, Resolution::Released).expect("reconcile");

    let Delivery::Ran(result) = deliver(store, &provider, &scope, &key, &fingerprint, "842") else {
        panic!("a released key runs again");
    };
    let answer = deliver(store, &provider, &scope, &key, &fingerprint, "842");
    assert_eq!(answer, Delivery::Answered(Reservation::Replay { outcome: OutcomeClass::Completed, body: result }));
    assert_eq!(provider.count("842"), 1);
    // The old lease (same fence, but the record moved on) cannot finish anything.
    assert!(store.complete(&lease, b"late".to_vec()).is_err());
}

// ---------------------------------------------------------------------------------------------
// Expiry, tombstones, forgetting.

#[test]
fn a_result_replays_until_its_ttl_then_expires_then_tombstones_then_is_forgotten_with_a_higher_fence() {
    let fixture = Fixture::new();
    let store = fixture.store();
    let ledger = EffectLedger::new();
    let (scope, key, fingerprint) = (scope("acme", CHARGE), key("order-842"), fp(1));

    let lease = acquired(store.reserve(&scope, &key, &fingerprint).expect("reserve"));
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

    let lease = acquired(store.reserve(&scope, &key, &fingerprint).expect("reserve"));
    assert!(lease.fence() > first_fence, "fence {} must exceed the forgotten record's {first_fence}", lease.fence());
    assert_eq!(lease.attempt(), 1);
}

#[test]
fn a_tombstone_after_purge_refuses_to_run_the_intent_again() {
    for outcome in [OutcomeClass::Completed, OutcomeClass::Failed] {
        let mut fixture = Fixture::new();
        let ledger = EffectLedger::new();
        let (scope, key, fingerprint) = (scope("acme", CHARGE), key("order-842"), fp(1));
        let lease = acquired(fixture.store().reserve(&scope, &key, &fingerprint).expect("reserve"));
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

// ---------------------------------------------------------------------------------------------
// Fencing.

#[test]
fn a_stale_lease_cannot_complete_fail_or_renew_after_a_takeover() {
    let fixture = Fixture::new();
    let store = fixture.store();
    let (scope, key, fingerprint) = (scope("acme", LOCAL), key("job-17"), fp(1));

    let old = acquired(store.reserve(&scope, &key, &fingerprint).expect("reserve"));
    fixture.advance(LEASE_MS);
    let new = acquired(store.reserve(&scope, &key, &fingerprint).expect("takeover"));
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
        store.reserve(&scope, &key, &fingerprint).expect("reserve"),
        Reservation::Replay { outcome: OutcomeClass::Completed, body: b"new result".to_vec() }
    );
    assert_eq!(refused(store.complete(&old, b"old result".to_vec())), stale);
}

// ---------------------------------------------------------------------------------------------
// Tenant isolation.

fn part(allow_space: bool) -> impl Strategy<Value = String> {
    let separators: Vec<char> =
        if allow_space { vec![':', '/', '|', ' ', 'a', 'b', '0'] } else { vec![':', '/', '|', 'a', 'b', '0'] };
    let regex = if allow_space { "[ -~]{1,12}" } else { "[!-~]{1,12}" };
    prop_oneof![
        proptest::collection::vec(proptest::sample::select(separators), 1..8)
            .prop_map(|chars| chars.into_iter().collect()),
        proptest::string::string_regex(regex).expect("regex"),
    ]
}

fn triple() -> impl Strategy<Value = (String, String, String)> {
    (part(true), part(true), part(false))
}

/// Cuts the concatenation of a triple at other places: under `tenant:operation:key`-style
/// concatenation these would all name the same record.
fn resplit((tenant, operation, key): &(String, String, String), cut1: usize, cut2: usize) -> Option<ScopedKey> {
    let joined = format!("{tenant}{operation}{key}");
    let len = joined.len();
    let (a, b) = (1 + cut1 % (len - 1).max(1), 1 + cut2 % (len - 1).max(1));
    let (a, b) = (a.min(b), a.max(b));
    let scope = Scope::new(&joined[..a], &joined[a..b]).ok()?;
    Some(ScopedKey::new(scope, IdempotencyKey::new(&joined[b..]).ok()?))
}

fn scoped((tenant, operation, key): &(String, String, String)) -> ScopedKey {
    ScopedKey::new(
        Scope::new(tenant.clone(), operation.clone()).expect("scope"),
        IdempotencyKey::new(key.clone()).expect("key"),
    )
}

fn isolation_config() -> Config {
    let mut config = Config { failure_persistence: None, ..Config::default() };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 512;
    }
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        config.rng_seed = RngSeed::Fixed(0x7e4a_4715_0001);
    }
    config
}

#[test]
fn scoped_key_encoding_is_injective_and_round_trips_whatever_separators_the_parts_hold() {
    let mut runner = TestRunner::new(isolation_config());
    let result = runner.run(&(triple(), triple(), any::<usize>(), any::<usize>()), |(x, y, cut1, cut2)| {
        let x_key = scoped(&x);
        for y_key in std::iter::once(scoped(&y)).chain(resplit(&x, cut1, cut2)) {
            prop_assert_eq!(x_key.encode() == y_key.encode(), x_key == y_key, "{:?} vs {:?}", x_key, y_key);
            prop_assert_eq!(ScopedKey::decode(&y_key.encode()).expect("decode"), y_key.clone());
        }
        prop_assert_eq!(ScopedKey::decode(&x_key.encode()).expect("decode"), x_key);
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

#[test]
fn a_record_of_one_tenant_is_never_reachable_from_another_tenant() {
    let clock = ManualClock::new(T0);
    let mut runner = TestRunner::new(isolation_config());
    let strategy = (triple(), triple(), any::<usize>(), any::<usize>(), any::<bool>());
    let result = runner.run(&strategy, |(a, b, cut1, cut2, same_body)| {
        let store = builder(&clock).audit(false).in_memory().expect("store");
        let ledger = EffectLedger::new();
        let a_key = scoped(&a);
        // Tenant A has a completed record and an in-progress one.
        let Delivery::Ran(a_result) = deliver(&store, &ledger, &a_key.scope, &a_key.key, &fp(1), "a") else {
            return Err(TestCaseError::fail("the first request of tenant A runs"));
        };
        let a_probe = acquired(store.reserve(&a_key.scope, &key("probe"), &fp(1)).expect("reserve"));
        let fingerprint = if same_body { fp(1) } else { fp(2) };

        let mut seen = std::collections::HashSet::new();
        for b_key in std::iter::once(scoped(&b)).chain(resplit(&a, cut1, cut2)) {
            if b_key.scope.tenant() == a_key.scope.tenant() {
                continue;
            }
            for probe in [b_key.key.clone(), key("probe"), a_key.key.clone()] {
                if !seen.insert((b_key.scope.clone(), probe.clone())) {
                    continue;
                }
                prop_assert_eq!(store.get(&b_key.scope, &probe).expect("get"), None, "tenant B reads nothing of A");
                let answer = store.reserve(&b_key.scope, &probe, &fingerprint).expect("reserve");
                prop_assert!(
                    matches!(&answer, Reservation::Acquired(lease) if lease.attempt() == 1),
                    "tenant {:?} key {:?} reached a record of tenant {:?}: {:?}",
                    b_key.scope.tenant(),
                    probe,
                    a_key.scope.tenant(),
                    answer
                );
            }
        }
        // Tenant A's records are as they were.
        prop_assert_eq!(
            store.reserve(&a_key.scope, &a_key.key, &fp(1)).expect("reserve"),
            Reservation::Replay { outcome: OutcomeClass::Completed, body: a_result }
        );
        let probe_record = store.get(&a_key.scope, &key("probe")).expect("get").expect("record");
        prop_assert_eq!(probe_record.state, State::InProgress { lease_expires_at: a_probe.expires_at() });
        prop_assert_eq!(ledger.count("a"), 1);
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

// ---------------------------------------------------------------------------------------------
// The same-database path.

fn credit(by: i64, runs: &AtomicU32) -> impl FnOnce(&idemdb::redb::WriteTransaction) -> Result<Vec<u8>, Error> + '_ {
    move |tables| {
        runs.fetch_add(1, Ordering::SeqCst);
        let mut balances = tables.open_table(BALANCES)?;
        let old = balances.get("alice")?.map(|guard| guard.value()).unwrap_or(0);
        balances.insert("alice", old + by)?;
        Ok((old + by).to_string().into_bytes())
    }
}

#[test]
fn execute_credits_a_balance_once_across_retries_and_restarts() {
    let mut fixture = Fixture::new();
    let runs = AtomicU32::new(0);
    let (scope, key, fingerprint) = (scope("acme", "credit"), key("credit-17"), fp(1));

    let first = fixture.store().execute(&scope, &key, &fingerprint, credit(100, &runs)).expect("execute");
    assert_eq!(first, Executed::Ran { result: b"100".to_vec() });
    for attempt in 0..4 {
        if attempt == 2 {
            fixture.restart();
        }
        let again = fixture.store().execute(&scope, &key, &fingerprint, credit(100, &runs)).expect("execute");
        assert_eq!(
            again,
            Executed::Answered(Reservation::Replay { outcome: OutcomeClass::Completed, body: b"100".to_vec() })
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the operation ran once");
    assert_eq!(read_balance(fixture.store(), "alice"), 100, "credited once");
}

#[test]
fn an_operation_error_in_execute_rolls_back_the_reservation_and_the_app_write() {
    let fixture = Fixture::new();
    let store = fixture.store();
    let runs = AtomicU32::new(0);
    let (scope, key, fingerprint) = (scope("acme", "credit"), key("credit-17"), fp(1));
    let before = snapshot(store);

    let failed = store.execute(&scope, &key, &fingerprint, |tables| -> Result<Vec<u8>, AppError> {
        runs.fetch_add(1, Ordering::SeqCst);
        let mut balances = tables.open_table(BALANCES).map_err(|e| AppError::Store(e.into()))?;
        balances.insert("alice", 100).map_err(|e| AppError::Store(e.into()))?;
        Err(AppError::Declined)
    });
    assert!(matches!(failed, Err(ExecuteError::Operation(AppError::Declined))), "{failed:?}");
    assert_eq!(snapshot(store), before, "no reservation left behind");
    assert_eq!(read_balance(store, "alice"), 0, "the app write was rolled back");

    // The key is free, and the next try is a first attempt that credits once.
    let ran = store.execute(&scope, &key, &fingerprint, credit(100, &runs)).expect("execute");
    assert_eq!(ran, Executed::Ran { result: b"100".to_vec() });
    assert_eq!(read_balance(store, "alice"), 100);
    assert_eq!(store.get(&scope, &key).expect("get").expect("record").attempts, 1);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[test]
fn an_app_write_and_the_completion_commit_together_in_one_write() {
    let mut fixture = Fixture::new();
    let (scope, key, fingerprint) = (scope("acme", "place_order"), key("order-842"), fp(1));
    let lease = acquired(fixture.store().reserve(&scope, &key, &fingerprint).expect("reserve"));

    // A completion refused (over the result limit) takes the app write down with it.
    let oversized = vec![b'x'; idemdb::Policy::default().max_result_bytes() + 1];
    let refused_write: Result<(), Error> = fixture.store().write(|txn| {
        txn.tables().open_table(ORDERS)?.insert("order-842", 1050)?;
        txn.complete(&lease, oversized)
    });
    assert!(
        matches!(refused_write, Err(Error::Transition(TransitionError::ResultTooLarge { .. }))),
        "{refused_write:?}"
    );
    assert_eq!(read_order(fixture.store(), "order-842"), None);
    assert_eq!(fixture.store().get(&scope, &key).expect("get").expect("record").state.kind(), StateKind::InProgress);

    fixture
        .store()
        .write(|txn| -> Result<(), Error> {
            txn.tables().open_table(ORDERS)?.insert("order-842", 1050)?;
            txn.complete(&lease, b"order placed".to_vec())
        })
        .expect("one commit");
    fixture.restart();
    assert_eq!(read_order(fixture.store(), "order-842"), Some(1050));
    assert_eq!(
        fixture.store().reserve(&scope, &key, &fingerprint).expect("reserve"),
        Reservation::Replay { outcome: OutcomeClass::Completed, body: b"order placed".to_vec() }
    );
}

// ---------------------------------------------------------------------------------------------
// The clock going backwards.

#[test]
fn a_lease_seen_expired_is_not_revived_when_the_clock_goes_back_even_across_a_restart() {
    let mut fixture = Fixture::new();
    let provider = EffectLedger::new();
    let (charge, local, key, fingerprint) = (scope("acme", CHARGE), scope("acme", LOCAL), key("order-842"), fp(1));

    acquired(fixture.store().reserve(&charge, &key, &fingerprint).expect("reserve"));
    let local_lease = acquired(fixture.store().reserve(&local, &key, &fingerprint).expect("reserve"));
    provider.perform("842");
    fixture.advance(LEASE_MS + 1);
    let answer = fixture.store().reserve(&charge, &key, &fingerprint).expect("reserve");
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
    let takeover = acquired(fixture.store().reserve(&local, &key, &fingerprint).expect("reserve"));
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
    let lease = acquired(store.reserve(&scope, &key, &fingerprint).expect("reserve"));
    fixture.clock.set(T0); // back by 50 s
    store.complete(&lease, b"ok".to_vec()).expect("complete");
    let record = store.get(&scope, &key).expect("get").expect("record");
    let State::Completed { expires_at, forget_at, .. } = record.state else { panic!("completed: {record:?}") };
    assert_eq!(expires_at, Timestamp::from_millis(latest + RESPONSE_MS), "counted from the latest time seen");
    assert_eq!(forget_at, Timestamp::from_millis(latest + RESPONSE_MS + TOMBSTONE_MS));

    fixture.clock.set(latest + RESPONSE_MS - 1);
    assert!(matches!(store.reserve(&scope, &key, &fingerprint).expect("reserve"), Reservation::Replay { .. }));
    assert_eq!(store.purge_expired(10).expect("purge").tombstoned, 0);
    fixture.clock.set(latest + RESPONSE_MS);
    assert_eq!(
        store.reserve(&scope, &key, &fingerprint).expect("reserve"),
        Reservation::Expired { outcome: OutcomeClass::Completed }
    );
}

// ---------------------------------------------------------------------------------------------
// Durability.

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
        let crashed = builder(&clock).open(&image).expect("open crash image");
        for (key, result) in &results {
            assert_eq!(
                crashed.get(&scope, key).expect("get").map(|record| record.state.kind()),
                Some(StateKind::Completed),
                "result {n} is durable"
            );
            assert_eq!(
                crashed.reserve(&scope, key, &fingerprint).expect("reserve"),
                Reservation::Replay { outcome: OutcomeClass::Completed, body: result.clone() }
            );
        }
    }
    drop(store);
    let store = builder(&clock).open(&path).expect("reopen");
    for (key, result) in &results {
        assert_eq!(
            store.reserve(&scope, key, &fingerprint).expect("reserve"),
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
    acquired(store.reserve(&scope, &key, &fp(1)).expect("reserve"));
    clock.advance(Duration::from_millis(1));
    let old = acquired(store.reserve(&scope, &key, &fp(1)).expect("takeover"));
    store.complete(&old, b"old".to_vec()).expect("complete");
    assert_eq!(store.purge_expired(10).expect("purge").forgotten, 1);

    let new = acquired(store.reserve(&scope, &key, &fp(2)).expect("a new binding"));
    assert!(new.fence() > old.fence(), "fence {} reissued after {}", new.fence(), old.fence());
    let before = store.get(&scope, &key).expect("get");
    assert!(
        store.complete(&old, b"old again".to_vec()).is_err(),
        "a lease of the purged binding completed the new one"
    );
    assert_eq!(store.get(&scope, &key).expect("get"), before);
}
