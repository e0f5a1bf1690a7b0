//! The decision table (`tests/testdata/decisions.json`), run against the pure `decide()` and,
//! through the store interface, against the redb store in memory and on a file. One table,
//! every backend (the PostgreSQL adapter and the wasm32 build run the same runner).

use idemdb::{AsyncStore, Durability, ManualClock, Policy, Store};
use idemdb_core::{
    DecisionContext, Failure, IdempotencyKey, Record, Reservation, Retention, Scope, Timestamp, complete, decide, fail,
};
use idemdb_interface::conformance::{self, Backend, Case, DECLINED, Observed, PolicyMs, RESULT, T, fingerprint};

// ---- the pure decision -------------------------------------------------------------------

/// The record a case starts from, built with the core's functions alone.
fn core_setup(stored: &str, policy: &Policy, limits: PolicyMs, scope: &Scope, key: &IdempotencyKey) -> Option<Record> {
    let fp = fingerprint("same");
    let at = Timestamp::from_millis(T);
    let decide_at =
        |existing, time| decide(existing, scope, key, &fp, DecisionContext::new(time, policy)).expect("decide");
    let reserved = |time| decide_at(None, time).write.expect("reservation writes");
    let record = match stored {
        "none" => return None,
        "in_progress" => reserved(at),
        "completed" | "tombstone_completed" => {
            let r = reserved(at);
            complete(&r, r.fence, RESULT.to_vec(), at, policy).expect("complete")
        }
        "failed" | "tombstone_failed" => {
            let r = reserved(at);
            fail(&r, r.fence, Failure::Definitive(DECLINED.to_vec()), at, policy).expect("fail")
        }
        "released" => {
            let r = reserved(at);
            fail(&r, r.fence, Failure::Retryable, at, policy).expect("release")
        }
        "uncertain_reported" => {
            let r = reserved(at);
            fail(&r, r.fence, Failure::Uncertain, at, policy).expect("uncertain")
        }
        "uncertain_lease_expired" => {
            let r = reserved(Timestamp::from_millis(T - limits.lease_ms));
            let observed = decide_at(Some(r), at);
            assert!(matches!(observed.answer, Reservation::NeedsReconciliation { .. }), "{observed:?}");
            observed.write.expect("expiry writes uncertain")
        }
        other => panic!("unknown stored state {other}"),
    };
    if stored.starts_with("tombstone_") {
        match record.retention(Timestamp::from_millis(T + limits.response_ms)) {
            Retention::Tombstone(tombstone) => Some(tombstone),
            other => panic!("expected a tombstone, got {other:?}"),
        }
    } else {
        Some(record)
    }
}

fn decide_case(case: &Case, limits: PolicyMs) -> (Observed, u64, u64) {
    let policy = limits.policy(&case.expired_lease);
    let (scope, key) = (Scope::new("tenant-a", "op").expect("scope"), IdempotencyKey::new("k").expect("key"));
    let existing = core_setup(&case.stored, &policy, limits, &scope, &key);
    let previous_fence = existing.as_ref().map_or(0, |record| record.fence);
    let at_ms = limits.query_time(case);
    let context = DecisionContext::new(Timestamp::from_millis(at_ms), &policy);
    let decision = decide(existing.clone(), &scope, &key, &fingerprint(&case.request), context).expect("decide");
    let then = decision
        .write
        .as_ref()
        .or(existing.as_ref())
        .map(|record| record.state.kind().as_str().to_string())
        .unwrap_or_else(|| "absent".into());
    (Observed::of(decision.answer, then), previous_fence, at_ms)
}

#[test]
fn decision_table_against_pure_decide() {
    let table = conformance::table();
    assert!(table.cases.len() >= 50, "the table covers every state");
    for case in &table.cases {
        let (observed, previous_fence, at_ms) = decide_case(case, table.policy);
        conformance::check(case, "decide()", &observed, previous_fence, at_ms);
    }
}

// ---- the redb store, through the store interface -----------------------------------------

/// Fresh stores on one manual clock, in memory or in files.
struct Stores {
    clock: ManualClock,
    dir: Option<tempfile::TempDir>,
    opened: usize,
}

impl Stores {
    fn new(dir: Option<tempfile::TempDir>) -> Self {
        Stores { clock: ManualClock::new(T), dir, opened: 0 }
    }
}

impl Backend for Stores {
    type Store = AsyncStore;

    async fn open(&mut self, operations: &[(&'static str, Policy)]) -> AsyncStore {
        // A clock of its own per store: time only goes forward from its open.
        self.clock = ManualClock::new(idemdb::Clock::now(&self.clock).as_millis());
        let mut builder = Store::builder().clock(self.clock.clone());
        for (operation, policy) in operations {
            builder = builder.policy(*operation, policy.clone());
        }
        self.opened += 1;
        let store = match &self.dir {
            None => builder.in_memory().expect("open memory store"),
            Some(dir) => builder
                .durability(Durability::Eventual)
                .open(dir.path().join(format!("case-{}.idemdb", self.opened)))
                .expect("open file store"),
        };
        store.asynchronous()
    }

    fn set_time(&mut self, millis: u64) {
        self.clock.set(millis);
    }
}

#[test]
fn decision_table_against_memory_store() {
    let mut stores = Stores::new(None);
    let cases = pollster::block_on(conformance::run_decision_table(&mut stores, "memory store"));
    assert_eq!(cases, stores.opened, "one fresh store per case");
    assert!(cases >= 50);
}

#[test]
fn decision_table_against_file_store() {
    let mut stores = Stores::new(Some(tempfile::tempdir().expect("tempdir")));
    let cases = pollster::block_on(conformance::run_decision_table(&mut stores, "file store"));
    assert_eq!(cases, stores.opened, "one fresh store per case");
}

#[test]
fn workflow_stories_against_memory_and_file_stores() {
    for dir in [None, Some(tempfile::tempdir().expect("tempdir"))] {
        let name = if dir.is_some() { "file store" } else { "memory store" };
        let mut stores = Stores::new(dir);
        assert_eq!(pollster::block_on(conformance::run_workflow_stories(&mut stores, name)), 6);
    }
}

#[test]
fn business_writes_against_memory_and_file_stores() {
    for dir in [None, Some(tempfile::tempdir().expect("tempdir"))] {
        let name = if dir.is_some() { "file store" } else { "memory store" };
        let mut stores = Stores::new(dir);
        assert_eq!(pollster::block_on(conformance::run_business_writes(&mut stores, name)), 6);
    }
}

#[test]
fn failed_operations_write_nothing_on_memory_and_file_stores() {
    for dir in [None, Some(tempfile::tempdir().expect("tempdir"))] {
        let name = if dir.is_some() { "file store" } else { "memory store" };
        let mut stores = Stores::new(dir);
        assert_eq!(pollster::block_on(conformance::run_failed_operations_write_nothing(&mut stores, name)), 3);
    }
}
