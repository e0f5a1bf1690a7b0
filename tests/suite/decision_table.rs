//! The decision table (`tests/testdata/decisions.json`), run against the pure `decide()` and
//! against the redb store, in memory and on a file. One table, every backend.

use std::time::Duration;

use idemdb::{
    Failure, Fingerprint, IdempotencyKey, ManualClock, OutcomeClass, Reservation, Scope, StateKind, Store,
    UncertainCause,
};
use idemdb_core::{ExpiredLease, Policy, Record, Retention, Timestamp, Verdict, complete, decide, fail};
use serde::Deserialize;

const TABLE: &str = include_str!("../testdata/decisions.json");
/// The instant every stored state is reached.
const T: u64 = 1_000_000_000;
const RESULT: &[u8] = b"{\"charge\":\"ch_1\"}";
const DECLINED: &[u8] = b"{\"error\":\"card_declined\"}";

#[derive(Deserialize)]
struct Table {
    policy: PolicyMs,
    cases: Vec<Case>,
}

#[derive(Deserialize, Clone, Copy)]
struct PolicyMs {
    lease_ms: u64,
    response_ms: u64,
    tombstone_ms: u64,
}

#[derive(Deserialize, Debug)]
struct Case {
    name: String,
    stored: String,
    request: String,
    at: String,
    delta_ms: i64,
    expired_lease: String,
    verdict: String,
    then: String,
    fence: Option<String>,
    attempt: Option<u32>,
    retry_after_ms: Option<u64>,
    outcome: Option<String>,
    cause: Option<String>,
    stored_kind: Option<String>,
}

/// What a backend answered, in the table's vocabulary.
#[derive(Debug, PartialEq, Eq, Default)]
struct Observed {
    verdict: String,
    then: String,
    fence: Option<u64>,
    attempt: Option<u32>,
    retry_after_ms: Option<u64>,
    outcome: Option<String>,
    cause: Option<String>,
    stored_kind: Option<String>,
    body: Option<Vec<u8>>,
}

fn table() -> Table {
    serde_json::from_str(TABLE).expect("decisions.json parses")
}

impl PolicyMs {
    fn policy(&self, rule: &str) -> Policy {
        let rule = match rule {
            "uncertain" => ExpiredLease::Uncertain,
            "takeover" => ExpiredLease::Takeover,
            other => panic!("unknown expired_lease rule {other}"),
        };
        Policy::default()
            .with_lease_ttl(Duration::from_millis(self.lease_ms))
            .with_response_ttl(Duration::from_millis(self.response_ms))
            .with_tombstone_ttl(Duration::from_millis(self.tombstone_ms))
            .with_expired_lease(rule)
    }

    fn query_time(&self, case: &Case) -> u64 {
        let base = match case.at.as_str() {
            "start" => T,
            "lease" => T + self.lease_ms,
            "response" => T + self.response_ms,
            "forget" => T + self.response_ms + self.tombstone_ms,
            other => panic!("unknown time point {other}"),
        };
        base.checked_add_signed(case.delta_ms).expect("time in range")
    }
}

fn fingerprint(request: &str) -> Fingerprint {
    match request {
        "same" => Fingerprint::from_bytes([1; 32]),
        "different" => Fingerprint::from_bytes([2; 32]),
        other => panic!("unknown request {other}"),
    }
}

fn outcome_name(outcome: OutcomeClass) -> String {
    match outcome {
        OutcomeClass::Completed => "completed".into(),
        OutcomeClass::Failed => "failed".into(),
    }
}

fn cause_name(cause: UncertainCause) -> String {
    match cause {
        UncertainCause::LeaseExpired => "lease_expired".into(),
        UncertainCause::Reported => "reported".into(),
    }
}

fn check(case: &Case, backend: &str, observed: &Observed, previous_fence: u64, at_ms: u64) {
    let context = format!("{backend}: {} ({case:?})", case.name);
    assert_eq!(observed.verdict, case.verdict, "verdict, {context}");
    assert_eq!(observed.then, case.then, "state afterwards, {context}");
    let expected_fence = case.fence.as_deref().map(|rule| match rule {
        "fresh" => at_ms.max(previous_fence + 1),
        "previous+1" => previous_fence + 1,
        other => panic!("unknown fence rule {other}"),
    });
    assert_eq!(observed.fence, expected_fence, "fence, {context}");
    assert_eq!(observed.attempt, case.attempt, "attempt, {context}");
    assert_eq!(observed.retry_after_ms, case.retry_after_ms, "retry-after, {context}");
    assert_eq!(observed.outcome, case.outcome, "outcome, {context}");
    assert_eq!(observed.cause, case.cause, "cause, {context}");
    assert_eq!(observed.stored_kind, case.stored_kind, "stored state in a mismatch, {context}");
    if case.verdict == "replay" {
        let expected: &[u8] = if case.outcome.as_deref() == Some("failed") { DECLINED } else { RESULT };
        assert_eq!(observed.body.as_deref(), Some(expected), "replayed body, {context}");
    }
}

// ---- the pure decision -------------------------------------------------------------------

fn core_setup(stored: &str, policy: &Policy, limits: PolicyMs) -> Option<Record> {
    let fp = fingerprint("same");
    let at = Timestamp::from_millis(T);
    let reserved =
        |time: Timestamp| decide(None, &fp, time, policy).expect("decide").write.expect("reservation writes");
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
            let observed = decide(Some(&r), &fp, at, policy).expect("decide");
            assert!(matches!(observed.verdict, Verdict::NeedsReconciliation { .. }));
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

#[test]
fn decision_table_against_pure_decide() {
    let table = table();
    assert!(table.cases.len() >= 50, "the table covers every state");
    for case in &table.cases {
        let policy = table.policy.policy(&case.expired_lease);
        let existing = core_setup(&case.stored, &policy, table.policy);
        let at_ms = table.policy.query_time(case);
        let decision = decide(existing.as_ref(), &fingerprint(&case.request), Timestamp::from_millis(at_ms), &policy)
            .expect("decide");
        let then = decision
            .write
            .as_ref()
            .or(existing.as_ref())
            .map(|record| record.state.kind().as_str().to_string())
            .unwrap_or_else(|| "absent".into());
        let mut observed = Observed { then, ..Observed::default() };
        match decision.verdict {
            Verdict::Acquired { fence, attempt, .. } => {
                observed.verdict = "acquired".into();
                observed.fence = Some(fence);
                observed.attempt = Some(attempt);
            }
            Verdict::Replay { outcome } => {
                observed.verdict = "replay".into();
                observed.outcome = Some(outcome_name(outcome));
                observed.body = existing.as_ref().map(|record| match &record.state {
                    idemdb::State::Completed { result, .. } => result.clone(),
                    idemdb::State::Failed { error, .. } => error.clone(),
                    _ => Vec::new(),
                });
            }
            Verdict::InProgress { retry_after } => {
                observed.verdict = "in_progress".into();
                observed.retry_after_ms = Some(retry_after.as_millis() as u64);
            }
            Verdict::Mismatch { stored } => {
                observed.verdict = "mismatch".into();
                observed.stored_kind = Some(stored.as_str().into());
            }
            Verdict::NeedsReconciliation { cause } => {
                observed.verdict = "needs_reconciliation".into();
                observed.cause = Some(cause_name(cause));
            }
            Verdict::Expired { outcome } => {
                observed.verdict = "expired".into();
                observed.outcome = Some(outcome_name(outcome));
            }
            other => panic!("unknown verdict {other:?}"),
        }
        let previous_fence = existing.map_or(0, |record| record.fence);
        check(case, "decide()", &observed, previous_fence, at_ms);
    }
}

// ---- the redb store ----------------------------------------------------------------------

fn store_setup(
    store: &Store,
    clock: &ManualClock,
    scope: &Scope,
    key: &IdempotencyKey,
    stored: &str,
    limits: PolicyMs,
) {
    let fp = fingerprint("same");
    let acquire = || match store.reserve(scope, key, &fp).expect("reserve") {
        Reservation::Acquired(lease) => lease,
        other => panic!("setup expected a lease, got {other:?}"),
    };
    match stored {
        "none" => {}
        "in_progress" => {
            acquire();
        }
        "completed" | "tombstone_completed" => store.complete(&acquire(), RESULT.to_vec()).expect("complete"),
        "failed" | "tombstone_failed" => store.fail(&acquire(), Failure::Definitive(DECLINED.to_vec())).expect("fail"),
        "released" => store.fail(&acquire(), Failure::Retryable).expect("release"),
        "uncertain_reported" => store.fail(&acquire(), Failure::Uncertain).expect("uncertain"),
        "uncertain_lease_expired" => {
            // The store was opened a lease TTL before T (see `run_on_store`): the lease runs out
            // as time passes.
            acquire();
            clock.set(T);
            let observed = store.reserve(scope, key, &fp).expect("reserve");
            assert!(matches!(observed, Reservation::NeedsReconciliation { .. }), "got {observed:?}");
        }
        other => panic!("unknown stored state {other}"),
    }
    if stored.starts_with("tombstone_") {
        clock.set(T + limits.response_ms);
        let report = store.purge_expired(100).expect("purge");
        assert_eq!(report.tombstoned, 1, "purge made the tombstone");
    }
}

fn run_on_store(backend: &str, open: impl Fn(ManualClock, &Table, &Case) -> Store) {
    let table = table();
    let scope_for = |case: &Case| Scope::new("tenant-a", format!("op-{}", case.expired_lease)).expect("scope");
    let key = IdempotencyKey::new("order-842:authorize-v1").expect("key");
    for case in &table.cases {
        // Every setup runs at T; an expired lease was taken a lease TTL earlier.
        let clock = ManualClock::new(T - table.policy.lease_ms);
        let store = open(clock.clone(), &table, case);
        if case.stored != "uncertain_lease_expired" {
            clock.set(T);
        }
        let scope = scope_for(case);
        store_setup(&store, &clock, &scope, &key, &case.stored, table.policy);
        let previous_fence = store.get(&scope, &key).expect("get").map_or(0, |record| record.fence);
        let at_ms = table.policy.query_time(case);
        clock.set(at_ms);
        let answer = store.reserve(&scope, &key, &fingerprint(&case.request)).expect("reserve");
        let then = store
            .get(&scope, &key)
            .expect("get")
            .map(|record| record.state.kind().as_str().to_string())
            .unwrap_or_else(|| "absent".into());
        let mut observed = Observed { then, ..Observed::default() };
        observed.verdict = answer.name().to_string();
        match answer {
            Reservation::Acquired(lease) => {
                observed.fence = Some(lease.fence());
                observed.attempt = Some(lease.attempt());
            }
            Reservation::Replay { outcome, body } => {
                observed.outcome = Some(outcome_name(outcome));
                observed.body = Some(body);
            }
            Reservation::InProgress { retry_after } => observed.retry_after_ms = Some(retry_after.as_millis() as u64),
            Reservation::Mismatch { stored } => observed.stored_kind = Some(stored.as_str().into()),
            Reservation::NeedsReconciliation { cause } => observed.cause = Some(cause_name(cause)),
            Reservation::Expired { outcome } => observed.outcome = Some(outcome_name(outcome)),
            other => panic!("unknown reservation {other:?}"),
        }
        check(case, backend, &observed, previous_fence, at_ms);
        let kinds: Vec<StateKind> =
            store.list(&Default::default()).expect("list").records.iter().map(|r| r.record.state.kind()).collect();
        assert!(kinds.len() <= 1, "{backend}: one record per key, {}", case.name);
    }
}

fn builder(clock: ManualClock, table: &Table) -> idemdb::StoreBuilder {
    Store::builder()
        .clock(clock)
        .policy("op-uncertain", table.policy.policy("uncertain"))
        .policy("op-takeover", table.policy.policy("takeover"))
}

#[test]
fn decision_table_against_memory_store() {
    run_on_store("memory store", |clock, table, _| builder(clock, table).in_memory().expect("open memory store"));
}

#[test]
fn decision_table_against_file_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let counter = std::cell::Cell::new(0);
    run_on_store("file store", |clock, table, _| {
        counter.set(counter.get() + 1);
        let path = dir.path().join(format!("case-{}.idemdb", counter.get()));
        builder(clock, table).durability(idemdb::Durability::Eventual).open(path).expect("open file store")
    });
}
