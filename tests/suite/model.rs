//! Model-based test: random sequences of operations run against the store and against a
//! reference model written by hand from the state table in `DESIGN.md` (it never calls
//! `idemdb_core::decide` or the transitions). Every answer is compared, and after every step the
//! whole store content is compared with the model.
//!
//! Runs `PROPTEST_CASES` cases (default 1,000) of 50 steps each, from a fixed seed
//! (`PROPTEST_RNG_SEED` overrides it), against a file store (which is also closed and opened
//! again mid-sequence) and against an in-memory store. Each case picks `Durability::Immediate`
//! or `Durability::Eventual`. The file store lives on `/dev/shm` when there is one (set
//! `IDEMDB_MODEL_ON_DISK` to use the ordinary temporary directory); `IDEMDB_MODEL_COVERAGE`
//! prints how often each answer came up. A full run fails if some row of the state table was
//! never reached.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use idemdb::{
    Durability, Error, ExpiredLease, Failure, IdempotencyKey, Lease, ManualClock, OutcomeClass, Policy, Record,
    Refusal, Reservation, Reserve, Resolution, Scope, ScopedKey, State, StateKind, Store, StoreBuilder, Timestamp,
    TransitionError, UncertainCause,
};
use idemdb_tests::{T0, fp, snapshot};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngSeed, TestRunner};

const LEASE_MS: u64 = 10_000;
const RESPONSE_MS: u64 = 100_000;
const TOMBSTONE_MS: u64 = 1_000_000;
const MAX_RESULT: usize = 48;
const STEPS: usize = 50;
const DEFAULT_CASES: u32 = 1_000;
const DEFAULT_SEED: u64 = 0x1de3_db5e_ed00_0001;

const TENANTS: [&str; 2] = ["acme", "acme|pay"];
/// `charge` keeps the default rule (an expired lease makes the record uncertain); `local` is
/// configured to take expired leases over.
const OPERATIONS: [&str; 2] = ["charge", "local"];
const TAKEOVER_OPERATION: usize = 1;
const KEYS: [&str; 4] = ["k-1", "k-2", "k:3", "k|4"];
const FINGERPRINTS: u32 = 3;

// ---------------------------------------------------------------------------------------------
// Configuration shared by the store under test and the model.

fn policy() -> Policy {
    Policy::default()
        .with_lease_ttl(Duration::from_millis(LEASE_MS))
        .with_response_ttl(Duration::from_millis(RESPONSE_MS))
        .with_tombstone_ttl(Duration::from_millis(TOMBSTONE_MS))
        .with_max_result_bytes(MAX_RESULT)
}

fn builder(clock: &ManualClock, durability: Durability) -> StoreBuilder {
    Store::builder()
        .default_policy(policy())
        .policy(OPERATIONS[TAKEOVER_OPERATION], policy().with_expired_lease(ExpiredLease::Takeover))
        .clock(clock.clone())
        .durability(durability)
        .secret_seed([7; 32])
}

fn proptest_config() -> Config {
    let mut config = Config { failure_persistence: None, ..Config::default() };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = DEFAULT_CASES;
    }
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        config.rng_seed = RngSeed::Fixed(DEFAULT_SEED);
    }
    config
}

// ---------------------------------------------------------------------------------------------
// Identities.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Slot {
    tenant: usize,
    operation: usize,
    key: usize,
}

impl Slot {
    fn all() -> impl Iterator<Item = Slot> {
        (0..TENANTS.len()).flat_map(|tenant| {
            (0..OPERATIONS.len())
                .flat_map(move |operation| (0..KEYS.len()).map(move |key| Slot { tenant, operation, key }))
        })
    }

    fn of_lease(lease: &Lease) -> Slot {
        let find = |list: &[&str], value: &str| list.iter().position(|x| *x == value).expect("lease from the pools");
        Slot {
            tenant: find(&TENANTS, lease.scope().tenant()),
            operation: find(&OPERATIONS, lease.scope().operation()),
            key: find(&KEYS, lease.key().as_str()),
        }
    }

    fn scope(self) -> Scope {
        Scope::new(TENANTS[self.tenant], OPERATIONS[self.operation]).expect("pool scope")
    }

    fn key(self) -> IdempotencyKey {
        IdempotencyKey::new(KEYS[self.key]).expect("pool key")
    }

    fn takes_over(self) -> bool {
        self.operation == TAKEOVER_OPERATION
    }

    /// The storage order of records, written here from the documented layout
    /// (`len tenant len operation len key`), not taken from the library.
    fn order(self) -> Vec<u8> {
        let mut out = Vec::new();
        for part in [TENANTS[self.tenant], OPERATIONS[self.operation], KEYS[self.key]] {
            out.push(u8::try_from(part.len()).expect("short part"));
            out.extend_from_slice(part.as_bytes());
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// The reference model.

#[derive(Debug, Clone, PartialEq, Eq)]
enum MState {
    InProgress { lease_until: u64 },
    Completed { body: Vec<u8>, expires: u64, forget: u64 },
    Failed { body: Vec<u8>, expires: u64, forget: u64 },
    Released { forget: u64 },
    Uncertain { cause: UncertainCause },
    Tombstone { outcome: OutcomeClass, forget: u64 },
}

impl MState {
    fn kind(&self) -> StateKind {
        match self {
            MState::InProgress { .. } => StateKind::InProgress,
            MState::Completed { .. } => StateKind::Completed,
            MState::Failed { .. } => StateKind::Failed,
            MState::Released { .. } => StateKind::Released,
            MState::Uncertain { .. } => StateKind::Uncertain,
            MState::Tombstone { .. } => StateKind::Tombstone,
        }
    }

    /// When the record is forgotten (behaves as absent); in-progress and uncertain records wait
    /// for an attempt or a reconcile and are never forgotten.
    fn forget_at(&self) -> Option<u64> {
        match self {
            MState::Completed { forget, .. }
            | MState::Failed { forget, .. }
            | MState::Released { forget }
            | MState::Tombstone { forget, .. } => Some(*forget),
            MState::InProgress { .. } | MState::Uncertain { .. } => None,
        }
    }

    /// When purge has work on this record next: the body's expiry, else the forget time.
    fn due_at(&self) -> Option<u64> {
        match self {
            MState::Completed { expires, .. } | MState::Failed { expires, .. } => Some(*expires),
            other => other.forget_at(),
        }
    }
}

#[derive(Debug, Clone)]
struct MRecord {
    fingerprint: u32,
    state: MState,
    fence: u64,
    attempts: u32,
    created: u64,
    updated: u64,
    /// Which binding of the key this is (for the effect ledger).
    binding: u64,
}

impl MRecord {
    fn forgotten(&self, now: u64) -> bool {
        self.state.forget_at().is_some_and(|forget| now >= forget)
    }
}

/// What an operation answered, in a form both sides produce.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    /// `fence` is only a lower bound (exclusive) in the model's answer.
    Acquired {
        fence: u64,
        lease_until: u64,
        attempt: u32,
    },
    Replay {
        outcome: OutcomeClass,
        body: Vec<u8>,
    },
    InProgress {
        retry_after_ms: u64,
    },
    Mismatch {
        stored: StateKind,
    },
    NeedsReconciliation {
        cause: UncertainCause,
    },
    Expired {
        outcome: OutcomeClass,
    },
    Done,
    Renewed {
        lease_until: u64,
    },
    NotFound,
    StaleFence {
        presented: u64,
        current: u64,
    },
    WrongState {
        state: StateKind,
        action: &'static str,
    },
    LeaseLive {
        until: u64,
    },
    ResultTooLarge {
        len: usize,
        max: usize,
    },
}

impl Answer {
    fn of_reservation(reservation: Reservation) -> Answer {
        match reservation {
            Reservation::Acquired(lease) => Answer::Acquired {
                fence: lease.fence(),
                lease_until: lease.expires_at().as_millis(),
                attempt: lease.attempt(),
            },
            Reservation::Replay { outcome, body } => Answer::Replay { outcome, body },
            Reservation::InProgress { retry_after } => {
                Answer::InProgress { retry_after_ms: u64::try_from(retry_after.as_millis()).expect("small") }
            }
            Reservation::Mismatch { stored } => Answer::Mismatch { stored },
            Reservation::NeedsReconciliation { cause } => Answer::NeedsReconciliation { cause },
            Reservation::Expired { outcome } => Answer::Expired { outcome },
            other => panic!("a reservation this test does not know: {other:?}"),
        }
    }

    fn of_error(error: Error) -> Answer {
        match error {
            Error::Refused(Refusal::NotFound) => Answer::NotFound,
            Error::Refused(Refusal::Transition(TransitionError::StaleFence { presented, current })) => {
                Answer::StaleFence { presented, current }
            }
            Error::Refused(Refusal::Transition(TransitionError::WrongState { state, action })) => {
                Answer::WrongState { state, action }
            }
            Error::Refused(Refusal::Transition(TransitionError::LeaseLive { until })) => {
                Answer::LeaseLive { until: until.as_millis() }
            }
            Error::Refused(Refusal::Transition(TransitionError::ResultTooLarge { len, max })) => {
                Answer::ResultTooLarge { len, max }
            }
            other => panic!("the store failed instead of answering: {other}"),
        }
    }

    fn of_unit(result: Result<(), Error>) -> Answer {
        result.map_or_else(Answer::of_error, |()| Answer::Done)
    }
}

#[derive(Debug, Clone)]
enum MResolution {
    Completed(Vec<u8>),
    Failed(Vec<u8>),
    Released,
}

impl MResolution {
    fn to_store(&self) -> Resolution {
        match self {
            MResolution::Completed(body) => Resolution::Completed(body.clone()),
            MResolution::Failed(body) => Resolution::Failed(body.clone()),
            MResolution::Released => Resolution::Released,
        }
    }
}

#[derive(Debug, Clone)]
enum MFailure {
    Definitive(Vec<u8>),
    Retryable,
    Uncertain,
}

/// The state table of `DESIGN.md`, as a map from `(scope, key)` to a record.
#[derive(Debug, Default)]
struct Model {
    /// Records physically in the store (purge removes them), by storage order.
    records: BTreeMap<Vec<u8>, (Slot, MRecord)>,
    /// Highest fence ever issued per key; survives forgetting and purge.
    max_fence: HashMap<Slot, u64>,
    /// The store's time: the highest clock reading any write has seen. It never goes back.
    now: u64,
    next_binding: u64,
    /// How the last acquisition came about (for coverage).
    acquired_by: &'static str,
}

impl Model {
    /// Every write transaction reads the clock first; the store keeps the highest reading.
    fn tick(&mut self, clock: u64) -> u64 {
        self.now = self.now.max(clock);
        self.now
    }

    fn get(&self, slot: Slot) -> Option<&MRecord> {
        self.records.get(&slot.order()).map(|(_, record)| record)
    }

    fn get_mut(&mut self, slot: Slot) -> Option<&mut MRecord> {
        self.records.get_mut(&slot.order()).map(|(_, record)| record)
    }

    /// Returns the expected answer; for an acquisition, `fence` is the exclusive lower bound and
    /// the caller reports the real fence through [`Model::bind_fence`].
    fn reserve(&mut self, slot: Slot, fingerprint: u32) -> Answer {
        let now = self.now;
        let floor = self.max_fence.get(&slot).copied().unwrap_or(0);
        let fresh = |model: &mut Model, path: &'static str| {
            model.acquired_by = path;
            let binding = model.next_binding;
            model.next_binding += 1;
            let record = MRecord {
                fingerprint,
                state: MState::InProgress { lease_until: now + LEASE_MS },
                fence: 0,
                attempts: 1,
                created: now,
                updated: now,
                binding,
            };
            model.records.insert(slot.order(), (slot, record));
            Answer::Acquired { fence: floor, lease_until: now + LEASE_MS, attempt: 1 }
        };
        self.acquired_by = "again";
        let Some(record) = self.get_mut(slot) else {
            let path = if floor == 0 { "new" } else { "after-purge" };
            return fresh(self, path);
        };
        if record.forgotten(now) {
            return fresh(self, "forgotten-in-place");
        }
        if record.fingerprint != fingerprint {
            if let MState::Released { .. } = record.state {
                // A released key is bound to no request: the new one takes it.
                record.fingerprint = fingerprint;
            } else {
                return Answer::Mismatch { stored: record.state.kind() };
            }
        }
        let again = |record: &mut MRecord| {
            record.state = MState::InProgress { lease_until: now + LEASE_MS };
            record.attempts += 1;
            record.updated = now;
            Answer::Acquired { fence: floor, lease_until: now + LEASE_MS, attempt: record.attempts }
        };
        match record.state.clone() {
            MState::InProgress { lease_until } if now < lease_until => {
                Answer::InProgress { retry_after_ms: lease_until - now }
            }
            MState::InProgress { .. } if slot.takes_over() => again(record),
            MState::InProgress { .. } => {
                record.state = MState::Uncertain { cause: UncertainCause::LeaseExpired };
                record.updated = now;
                Answer::NeedsReconciliation { cause: UncertainCause::LeaseExpired }
            }
            MState::Completed { body, expires, .. } if now < expires => {
                Answer::Replay { outcome: OutcomeClass::Completed, body }
            }
            MState::Completed { .. } => Answer::Expired { outcome: OutcomeClass::Completed },
            MState::Failed { body, expires, .. } if now < expires => {
                Answer::Replay { outcome: OutcomeClass::Failed, body }
            }
            MState::Failed { .. } => Answer::Expired { outcome: OutcomeClass::Failed },
            MState::Released { .. } => again(record),
            MState::Uncertain { cause } => Answer::NeedsReconciliation { cause },
            MState::Tombstone { outcome, .. } => Answer::Expired { outcome },
        }
    }

    fn bind_fence(&mut self, slot: Slot, fence: u64) {
        self.get_mut(slot).expect("just acquired").fence = fence;
        self.max_fence.insert(slot, fence);
    }

    /// The checks every lease holder's transition makes: the record exists, the fence is
    /// current, and the record is one the holder may still finish.
    fn holder_check(&self, slot: Slot, fence: u64, action: &'static str) -> Result<(), Answer> {
        let Some(record) = self.get(slot) else { return Err(Answer::NotFound) };
        if record.fence != fence {
            return Err(Answer::StaleFence { presented: fence, current: record.fence });
        }
        let may_finish = match record.state {
            MState::InProgress { .. } => true,
            MState::Uncertain { cause } => action != "renew" && cause == UncertainCause::LeaseExpired,
            _ => false,
        };
        if may_finish { Ok(()) } else { Err(Answer::WrongState { state: record.state.kind(), action }) }
    }

    fn too_large(body: &[u8]) -> Option<Answer> {
        (body.len() > MAX_RESULT).then_some(Answer::ResultTooLarge { len: body.len(), max: MAX_RESULT })
    }

    fn finish(&mut self, slot: Slot, outcome: OutcomeClass, body: Vec<u8>) {
        let now = self.now;
        let record = self.get_mut(slot).expect("checked");
        let (expires, forget) = (now + RESPONSE_MS, now + RESPONSE_MS + TOMBSTONE_MS);
        record.state = match outcome {
            OutcomeClass::Completed => MState::Completed { body, expires, forget },
            OutcomeClass::Failed => MState::Failed { body, expires, forget },
        };
        record.updated = now;
    }

    fn release(&mut self, slot: Slot) {
        let now = self.now;
        let record = self.get_mut(slot).expect("checked");
        record.state = MState::Released { forget: now + RESPONSE_MS + TOMBSTONE_MS };
        record.updated = now;
    }

    fn complete(&mut self, slot: Slot, fence: u64, body: Vec<u8>) -> Answer {
        if let Err(refusal) = self.holder_check(slot, fence, "complete") {
            return refusal;
        }
        if let Some(refusal) = Model::too_large(&body) {
            return refusal;
        }
        self.finish(slot, OutcomeClass::Completed, body);
        Answer::Done
    }

    fn fail(&mut self, slot: Slot, fence: u64, failure: MFailure) -> Answer {
        if let Err(refusal) = self.holder_check(slot, fence, "fail") {
            return refusal;
        }
        match failure {
            MFailure::Definitive(body) => {
                if let Some(refusal) = Model::too_large(&body) {
                    return refusal;
                }
                self.finish(slot, OutcomeClass::Failed, body);
            }
            MFailure::Retryable => self.release(slot),
            MFailure::Uncertain => {
                let now = self.now;
                let record = self.get_mut(slot).expect("checked");
                record.state = MState::Uncertain { cause: UncertainCause::Reported };
                record.updated = now;
            }
        }
        Answer::Done
    }

    fn renew(&mut self, slot: Slot, fence: u64) -> Answer {
        if let Err(refusal) = self.holder_check(slot, fence, "renew") {
            return refusal;
        }
        let now = self.now;
        let record = self.get_mut(slot).expect("checked");
        let MState::InProgress { lease_until } = record.state else { unreachable!("holder_check for renew") };
        // Renewal never shortens a lease.
        let lease_until = (now + LEASE_MS).max(lease_until);
        record.state = MState::InProgress { lease_until };
        record.updated = now;
        Answer::Renewed { lease_until }
    }

    fn reconcile(&mut self, slot: Slot, resolution: MResolution) -> Answer {
        let now = self.now;
        let Some(record) = self.get(slot) else { return Answer::NotFound };
        match record.state {
            MState::Uncertain { .. } => {}
            MState::InProgress { lease_until } if now >= lease_until => {}
            MState::InProgress { lease_until } => return Answer::LeaseLive { until: lease_until },
            _ => return Answer::WrongState { state: record.state.kind(), action: "reconcile" },
        }
        match resolution {
            MResolution::Completed(body) | MResolution::Failed(body) if body.len() > MAX_RESULT => {
                return Answer::ResultTooLarge { len: body.len(), max: MAX_RESULT };
            }
            MResolution::Completed(body) => self.finish(slot, OutcomeClass::Completed, body),
            MResolution::Failed(body) => self.finish(slot, OutcomeClass::Failed, body),
            MResolution::Released => self.release(slot),
        }
        Answer::Done
    }

    /// Records purge has work on at `now`, in the order purge visits them (due time, then
    /// storage order).
    fn due(&self) -> Vec<(u64, Vec<u8>)> {
        let mut due: Vec<_> = self
            .records
            .iter()
            .filter_map(|(order, (_, record))| record.state.due_at().map(|at| (at, order.clone())))
            .filter(|(at, _)| *at <= self.now)
            .collect();
        due.sort();
        due
    }

    /// Returns (tombstoned, forgotten, more).
    fn purge(&mut self, budget: usize) -> (u64, u64, bool) {
        let now = self.now;
        let due = self.due();
        let more = due.len() > budget;
        let (mut tombstoned, mut forgotten) = (0, 0);
        for (_, order) in due.into_iter().take(budget) {
            let (_, record) = self.records.get_mut(&order).expect("due record exists");
            if record.forgotten(now) {
                self.records.remove(&order);
                forgotten += 1;
                continue;
            }
            let (outcome, forget) = match record.state {
                MState::Completed { forget, .. } => (OutcomeClass::Completed, forget),
                MState::Failed { forget, .. } => (OutcomeClass::Failed, forget),
                ref other => panic!("due but neither forgotten nor expired: {other:?}"),
            };
            record.state = MState::Tombstone { outcome, forget };
            record.updated = record.updated.max(now);
            tombstoned += 1;
        }
        (tombstoned, forgotten, more)
    }

    /// What an unlimited purge would do now: (tombstoned, forgotten).
    fn preview(&self) -> (u64, u64) {
        let due = self.due();
        let forgotten = due.iter().filter(|(_, order)| self.records[order].1.forgotten(self.now)).count() as u64;
        (due.len() as u64 - forgotten, forgotten)
    }

    /// The model's records as the store's types, in storage order.
    fn expected_contents(&self) -> Vec<(ScopedKey, Record)> {
        self.records
            .values()
            .map(|(slot, record)| (ScopedKey::new(slot.scope(), slot.key()), to_record(record)))
            .collect()
    }

    fn index_entries(&self) -> u64 {
        self.records.values().filter(|(_, record)| record.state.due_at().is_some()).count() as u64
    }
}

fn to_record(record: &MRecord) -> Record {
    let at = Timestamp::from_millis;
    let state = match &record.state {
        MState::InProgress { lease_until } => State::InProgress { lease_expires_at: at(*lease_until) },
        MState::Completed { body, expires, forget } => {
            State::Completed { result: body.clone(), expires_at: at(*expires), forget_at: at(*forget) }
        }
        MState::Failed { body, expires, forget } => {
            State::Failed { error: body.clone(), expires_at: at(*expires), forget_at: at(*forget) }
        }
        MState::Released { forget } => State::Released { forget_at: at(*forget) },
        MState::Uncertain { cause } => State::Uncertain { cause: *cause },
        MState::Tombstone { outcome, forget } => State::Tombstone { outcome: *outcome, forget_at: at(*forget) },
    };
    Record {
        fingerprint: fp(record.fingerprint),
        state,
        fence: record.fence,
        attempts: record.attempts,
        created_at: at(record.created),
        updated_at: at(record.updated),
    }
}

// ---------------------------------------------------------------------------------------------
// Operations.

#[derive(Debug, Clone)]
enum Op {
    Reserve { slot: Slot, fingerprint: u32 },
    Complete { lease: Index, body: Vec<u8> },
    Fail { lease: Index, failure: MFailure },
    Renew { lease: Index },
    Reconcile { slot: Slot, resolution: MResolution },
    Advance { ms: u64 },
    SetBack { ms: u64 },
    Purge { budget: usize },
    Preview,
    Reopen,
}

fn slot() -> impl Strategy<Value = Slot> {
    (0..TENANTS.len(), 0..OPERATIONS.len(), 0..KEYS.len()).prop_map(|(tenant, operation, key)| Slot {
        tenant,
        operation,
        key,
    })
}

/// Bodies up to a little over the result limit, so some are refused as too large.
fn body() -> impl Strategy<Value = Vec<u8>> {
    (0..=MAX_RESULT + 8, any::<u8>())
        .prop_map(|(len, seed)| (0..len).map(|i| seed.wrapping_add((i as u8).wrapping_mul(31))).collect())
}

/// Clock steps that land around each TTL (lease, response, response + tombstone).
fn advance_ms() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(1),
        0..3_000u64,
        Just(LEASE_MS),
        LEASE_MS - 1_000..=LEASE_MS + 1_000,
        Just(RESPONSE_MS),
        RESPONSE_MS - 5_000..=RESPONSE_MS + 5_000,
        Just(TOMBSTONE_MS),
        TOMBSTONE_MS - 10_000..=RESPONSE_MS + TOMBSTONE_MS + 10_000,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (slot(), 0..FINGERPRINTS).prop_map(|(slot, fingerprint)| Op::Reserve { slot, fingerprint }),
        10 => (any::<Index>(), body()).prop_map(|(lease, body)| Op::Complete { lease, body }),
        4 => (any::<Index>(), body()).prop_map(|(lease, body)| Op::Fail { lease, failure: MFailure::Definitive(body) }),
        3 => any::<Index>().prop_map(|lease| Op::Fail { lease, failure: MFailure::Retryable }),
        3 => any::<Index>().prop_map(|lease| Op::Fail { lease, failure: MFailure::Uncertain }),
        4 => any::<Index>().prop_map(|lease| Op::Renew { lease }),
        5 => (slot(), prop_oneof![
            body().prop_map(MResolution::Completed),
            body().prop_map(MResolution::Failed),
            Just(MResolution::Released),
        ]).prop_map(|(slot, resolution)| Op::Reconcile { slot, resolution }),
        10 => advance_ms().prop_map(|ms| Op::Advance { ms }),
        2 => (0..200_000u64).prop_map(|ms| Op::SetBack { ms }),
        4 => (0..6usize).prop_map(|budget| Op::Purge { budget }),
        1 => Just(Op::Preview),
        3 => Just(Op::Reopen),
    ]
}

// ---------------------------------------------------------------------------------------------
// The harness: runs one sequence against a store and the model.

enum Backend {
    /// A file store, with the path it lives at (the directory is kept alive by the caller).
    File(PathBuf),
    Memory,
}

struct Harness {
    backend: Backend,
    durability: Durability,
    clock: ManualClock,
    /// The wall clock.
    clock_ms: u64,
    /// Time that passed (the monotonic clock): `Advance` moves it, `SetBack` does not.
    passed_ms: u64,
    /// Store time and time passed when the store was opened: the store measures elapsed time
    /// from there (see `docs/design.md`, "Time").
    anchor: (u64, u64),
    store: Option<Store>,
    model: Model,
    /// Every lease handed out (renewed copies included), stale ones too.
    leases: Vec<Lease>,
    /// The effect ledger: successful finishes (complete, definitive fail, reconcile to an
    /// outcome) per binding of a key. Each binding is one intent: at most one.
    finishes: HashMap<u64, u32>,
    step: usize,
    coverage: Coverage,
}

impl Harness {
    fn new(backend: Backend, durability: Durability) -> Harness {
        let clock = ManualClock::new(T0);
        let mut harness = Harness {
            backend,
            durability,
            clock,
            clock_ms: T0,
            passed_ms: T0,
            anchor: (T0, T0),
            store: None,
            model: Model::default(),
            leases: Vec::new(),
            finishes: HashMap::new(),
            step: 0,
            coverage: Coverage::default(),
        };
        harness.store = Some(harness.open());
        // A new store starts at the wall clock.
        harness.model.tick(T0);
        harness
    }

    fn open(&self) -> Store {
        let builder = builder(&self.clock, self.durability);
        match &self.backend {
            Backend::File(path) => builder.open(path),
            Backend::Memory => builder.in_memory(),
        }
        .expect("open store")
    }

    fn store(&self) -> &Store {
        self.store.as_ref().expect("store is open")
    }

    fn tick(&mut self) -> u64 {
        let store_time = self.store_time();
        self.model.tick(store_time)
    }

    /// Store time as the store computes it: the time passed since it was opened, following
    /// the wall clock only within a second (plus 0.1 % of the time passed) of that. The wall
    /// clock of this test is never ahead of it, so no wall-clock gap is ever pending.
    fn store_time(&self) -> u64 {
        let elapsed = self.passed_ms - self.anchor.1;
        let projected = self.anchor.0 + elapsed;
        let tolerance = 1_000 + elapsed / 1_000;
        self.clock_ms.clamp(projected.saturating_sub(tolerance), projected + tolerance)
    }

    fn pick_lease(&self, index: &Index) -> Option<Lease> {
        (!self.leases.is_empty()).then(|| self.leases[index.index(self.leases.len())].clone())
    }

    fn record_finish(&mut self, slot: Slot, answer: &Answer) {
        if *answer != Answer::Done {
            return;
        }
        let record = self.model.get(slot).expect("finished record");
        if matches!(record.state, MState::Completed { .. } | MState::Failed { .. }) {
            let count = self.finishes.entry(record.binding).or_insert(0);
            *count += 1;
            assert_eq!(*count, 1, "step {}: one intent reached a final outcome twice", self.step);
        }
    }

    fn run(&mut self, op: &Op) {
        let step = self.step;
        match op {
            Op::Reserve { slot, fingerprint } => {
                self.tick();
                let expected = self.model.reserve(*slot, *fingerprint);
                let actual =
                    self.store().reserve(Reserve::new(&slot.scope(), &slot.key(), &fp(*fingerprint))).expect("reserve");
                self.coverage.add(match &expected {
                    Answer::Acquired { .. } => format!("reserve:acquired:{}", self.model.acquired_by),
                    other => format!("reserve:{}", label(other)),
                });
                match (expected, actual) {
                    (Answer::Acquired { fence: floor, lease_until, attempt }, Reservation::Acquired(lease)) => {
                        assert!(
                            lease.fence() > floor,
                            "step {step}: fence {} not above every earlier fence of the key ({floor})",
                            lease.fence()
                        );
                        assert_eq!(
                            (lease.expires_at().as_millis(), lease.attempt(), lease.scope(), lease.key()),
                            (lease_until, attempt, &slot.scope(), &slot.key()),
                            "step {step}: lease"
                        );
                        self.model.bind_fence(*slot, lease.fence());
                        self.leases.push(lease);
                    }
                    (expected, actual) => {
                        assert_eq!(
                            Answer::of_reservation(actual),
                            expected,
                            "step {step}: reserve {slot:?} fp {fingerprint}"
                        );
                    }
                }
            }
            Op::Complete { lease, body } => {
                let Some(lease) = self.pick_lease(lease) else { return };
                let slot = Slot::of_lease(&lease);
                self.tick();
                let expected = self.model.complete(slot, lease.fence(), body.clone());
                let actual = Answer::of_unit(self.store().complete(&lease, body.clone()));
                assert_eq!(actual, expected, "step {step}: complete {slot:?} fence {}", lease.fence());
                self.coverage.add(format!("complete:{}", label(&actual)));
                self.record_finish(slot, &actual);
            }
            Op::Fail { lease, failure } => {
                let Some(lease) = self.pick_lease(lease) else { return };
                let slot = Slot::of_lease(&lease);
                self.tick();
                let expected = self.model.fail(slot, lease.fence(), failure.clone());
                let store_failure = match failure {
                    MFailure::Definitive(body) => Failure::Definitive(body.clone()),
                    MFailure::Retryable => Failure::Retryable,
                    MFailure::Uncertain => Failure::Uncertain,
                };
                let actual = Answer::of_unit(self.store().fail(&lease, store_failure));
                assert_eq!(actual, expected, "step {step}: fail {slot:?} fence {} {failure:?}", lease.fence());
                self.coverage.add(format!("fail:{}", label(&actual)));
                self.record_finish(slot, &actual);
            }
            Op::Renew { lease } => {
                let Some(lease) = self.pick_lease(lease) else { return };
                let slot = Slot::of_lease(&lease);
                self.tick();
                let expected = self.model.renew(slot, lease.fence());
                self.coverage.add(format!("renew:{}", label(&expected)));
                match self.store().renew(&lease) {
                    Ok(renewed) => {
                        assert_eq!(
                            Answer::Renewed { lease_until: renewed.expires_at().as_millis() },
                            expected,
                            "step {step}: renew {slot:?}"
                        );
                        assert_eq!((renewed.fence(), renewed.attempt()), (lease.fence(), lease.attempt()));
                        self.leases.push(renewed);
                    }
                    Err(error) => assert_eq!(Answer::of_error(error), expected, "step {step}: renew {slot:?}"),
                }
            }
            Op::Reconcile { slot, resolution } => {
                self.tick();
                let expected = self.model.reconcile(*slot, resolution.clone());
                let actual = Answer::of_unit(self.store().reconcile(
                    &slot.scope(),
                    &slot.key(),
                    resolution.to_store(),
                    idemdb::ResolutionCause::Operator,
                ));
                assert_eq!(actual, expected, "step {step}: reconcile {slot:?} {resolution:?}");
                self.coverage.add(format!("reconcile:{}", label(&actual)));
                self.record_finish(*slot, &actual);
            }
            Op::Advance { ms } => {
                self.clock.advance(Duration::from_millis(*ms));
                self.clock_ms += ms;
                self.passed_ms += ms;
            }
            Op::SetBack { ms } => {
                self.clock_ms -= ms;
                self.clock.set(self.clock_ms);
            }
            Op::Purge { budget } => {
                self.tick();
                let (tombstoned, forgotten, more) = self.model.purge(*budget);
                let report = self.store().purge_expired(*budget).expect("purge");
                assert_eq!(
                    (
                        report.tombstoned,
                        report.forgotten,
                        report.stale_index_entries,
                        report.audit_removed,
                        report.more
                    ),
                    (tombstoned, forgotten, 0, 0, more),
                    "step {step}: purge with budget {budget}"
                );
                for (reached, name) in
                    [(tombstoned > 0, "purge:tombstoned"), (forgotten > 0, "purge:forgotten"), (more, "purge:more")]
                {
                    if reached {
                        self.coverage.add(name);
                    }
                }
            }
            Op::Preview => {
                // purge_preview reads the clock too, so it moves the store's time.
                self.tick();
                let (tombstoned, forgotten) = self.model.preview();
                let report = self.store().purge_preview().expect("preview");
                assert_eq!(
                    (report.tombstoned, report.forgotten, report.stale_index_entries),
                    (tombstoned, forgotten, 0),
                    "step {step}: purge preview"
                );
            }
            Op::Reopen => {
                if let Backend::File(_) = self.backend {
                    // Closing reads the clock once more and keeps that time.
                    let closed_at = self.tick();
                    drop(self.store.take());
                    self.anchor = (closed_at, self.passed_ms);
                    self.store = Some(self.open());
                    self.check_time_survived_restart();
                    self.verify();
                }
            }
        }
        self.compare_contents(step.is_multiple_of(10));
        self.step += 1;
    }

    /// The whole store against the model (through `list`, and through `get` for every key of
    /// the pools when `by_key`).
    fn compare_contents(&self, by_key: bool) {
        let step = self.step;
        assert_eq!(snapshot(self.store()), self.model.expected_contents(), "step {step}: store contents differ");
        if by_key {
            for slot in Slot::all() {
                let stored = self.store().get(&slot.scope(), &slot.key()).expect("get");
                assert_eq!(stored, self.model.get(slot).map(to_record), "step {step}: get {slot:?}");
            }
        }
    }

    /// The store's time after a restart: closing may record the clock once more (a flush on
    /// drop reads it), so the only sound expectation is the highest time seen before, or the
    /// clock if it is later. After the clock went back, this is the high-water mark read back
    /// from the file.
    fn check_time_survived_restart(&mut self) {
        if self.clock_ms < self.model.now {
            self.coverage.add("reopen:clock-behind");
        }
        let expected = self.tick();
        let now = self.store().now().as_millis();
        assert_eq!(now, expected, "step {}: store time after a restart", self.step);
    }

    fn verify(&mut self) {
        let records = self.model.records.len() as u64;
        let index_entries = self.model.index_entries();
        let step = self.step;
        let report = self.store.as_mut().expect("store is open").verify().expect("verify runs");
        assert!(report.is_ok(), "step {step}: verify found problems: {report:?}");
        assert_eq!((report.records, report.index_entries), (records, index_entries), "step {step}: verify counts");
    }
}

/// How often each kind of answer came up over a whole run: a generator that stopped reaching a
/// row of the state table would make the comparison vacuous, so a full run checks coverage.
#[derive(Debug, Default)]
struct Coverage(BTreeMap<String, u64>);

impl Coverage {
    fn add(&mut self, label: impl Into<String>) {
        *self.0.entry(label.into()).or_insert(0) += 1;
    }

    fn assert_reached(&self, labels: &[&str]) {
        let missing: Vec<_> = labels.iter().filter(|label| !self.0.contains_key(**label)).collect();
        assert!(missing.is_empty(), "the generated sequences never reached {missing:?}; reached {:?}", self.0);
    }
}

/// Labels every full run must reach (both backends).
const MUST_REACH: &[&str] = &[
    "reserve:acquired:new",
    "reserve:acquired:again",
    "reserve:acquired:forgotten-in-place",
    "reserve:acquired:after-purge",
    "reserve:replay:Completed",
    "reserve:replay:Failed",
    "reserve:in_progress",
    "reserve:mismatch:in_progress",
    "reserve:mismatch:completed",
    "reserve:mismatch:failed",
    "reserve:mismatch:uncertain",
    "reserve:mismatch:tombstone",
    "reserve:needs_reconciliation:LeaseExpired",
    "reserve:needs_reconciliation:Reported",
    "reserve:expired:Completed",
    "reserve:expired:Failed",
    "complete:done",
    "complete:stale_fence",
    "complete:wrong_state",
    "complete:result_too_large",
    "complete:not_found",
    "fail:done",
    "fail:stale_fence",
    "renew:renewed",
    "renew:stale_fence",
    "renew:wrong_state",
    "reconcile:done",
    "reconcile:lease_live",
    "reconcile:wrong_state",
    "reconcile:not_found",
    "purge:tombstoned",
    "purge:forgotten",
    "purge:more",
];

/// Labels only the file store can reach.
const MUST_REACH_FILE: &[&str] = &["reopen:clock-behind", "durability:Immediate", "durability:Eventual"];

fn label(answer: &Answer) -> String {
    match answer {
        Answer::Acquired { .. } => "acquired".into(),
        Answer::Replay { outcome, .. } => format!("replay:{outcome:?}"),
        Answer::InProgress { .. } => "in_progress".into(),
        Answer::Mismatch { stored } => format!("mismatch:{stored}"),
        Answer::NeedsReconciliation { cause } => format!("needs_reconciliation:{cause:?}"),
        Answer::Expired { outcome } => format!("expired:{outcome:?}"),
        Answer::Done => "done".into(),
        Answer::Renewed { .. } => "renewed".into(),
        Answer::NotFound => "not_found".into(),
        Answer::StaleFence { .. } => "stale_fence".into(),
        Answer::WrongState { .. } => "wrong_state".into(),
        Answer::LeaseLive { .. } => "lease_live".into(),
        Answer::ResultTooLarge { .. } => "result_too_large".into(),
    }
}

fn run_sequence(ops: &[Op], backend: Backend, durability: Durability, coverage: &mut Coverage) {
    let mut harness = Harness::new(backend, durability);
    for op in ops {
        harness.run(op);
    }
    harness.compare_contents(true);
    harness.verify();
    if let Backend::File(_) = harness.backend {
        // A last restart: everything the model holds is still there.
        drop(harness.store.take());
        harness.store = Some(harness.open());
        harness.check_time_survived_restart();
        harness.compare_contents(true);
        harness.verify();
    }
    for (name, count) in harness.coverage.0 {
        *coverage.0.entry(name).or_insert(0) += count;
    }
}

/// Where the model test puts its store files: a RAM file system when there is one. The model
/// test checks the state machine across close and reopen, not power-loss durability (the
/// durability tests in `seed.rs` use the ordinary temporary directory), and on a disk the
/// `fsync`s of 50,000 steps would dominate the run.
fn model_tempdir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if std::env::var_os("IDEMDB_MODEL_ON_DISK").is_none()
        && shm.is_dir()
        && let Ok(dir) = tempfile::tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().expect("temp dir")
}

fn run_model(backend: impl Fn(&Path) -> Backend, must_reach: &[&[&str]]) {
    let config = proptest_config();
    let check_coverage = config.cases >= 500;
    let mut runner = TestRunner::new(config);
    let coverage = std::cell::RefCell::new(Coverage::default());
    // Each case runs with one durability setting: flushed commits, or commits left to the
    // operating system (which a close and reopen must not lose either).
    let durability = prop_oneof![Just(Durability::Immediate), Just(Durability::Eventual)];
    let result = runner.run(&(proptest::collection::vec(op(), STEPS), durability), |(ops, durability)| {
        let dir = model_tempdir();
        let mut case = Coverage::default();
        case.add(format!("durability:{durability:?}"));
        run_sequence(&ops, backend(dir.path()), durability, &mut case);
        let mut total = coverage.borrow_mut();
        for (name, count) in case.0 {
            *total.0.entry(name).or_insert(0) += count;
        }
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    if std::env::var_os("IDEMDB_MODEL_COVERAGE").is_some() {
        eprintln!("coverage: {:#?}", coverage.borrow().0);
    }
    if check_coverage {
        for labels in must_reach {
            coverage.borrow().assert_reached(labels);
        }
    }
}

/// Reserve / complete / fail / renew / reconcile / purge / clock moves and restarts on a file
/// store answer exactly as the model of the state table says, and the stored records equal the
/// model's after every step.
#[test]
fn file_store_follows_the_state_table_model_across_restarts() {
    run_model(|dir| Backend::File(dir.join("model.idemdb")), &[MUST_REACH, MUST_REACH_FILE]);
}

/// The same sequences on an in-memory store (restarts are skipped: memory does not survive
/// them).
#[test]
fn memory_store_follows_the_state_table_model() {
    run_model(|_| Backend::Memory, &[MUST_REACH]);
}

/// The model itself: a fixed sequence whose answers are known by hand, so a model that drifted
/// from the state table (and from the store with it) would be caught here.
#[test]
fn model_answers_a_hand_checked_sequence() {
    let charge = Slot { tenant: 0, operation: 0, key: 0 };
    let local = Slot { tenant: 0, operation: TAKEOVER_OPERATION, key: 0 };
    let mut model = Model::default();
    model.tick(T0);
    assert_eq!(model.reserve(charge, 0), Answer::Acquired { fence: 0, lease_until: T0 + LEASE_MS, attempt: 1 });
    model.bind_fence(charge, 5);
    assert_eq!(model.reserve(charge, 1), Answer::Mismatch { stored: StateKind::InProgress });
    assert_eq!(model.reserve(charge, 0), Answer::InProgress { retry_after_ms: LEASE_MS });
    model.tick(T0 + LEASE_MS);
    assert_eq!(model.reserve(charge, 0), Answer::NeedsReconciliation { cause: UncertainCause::LeaseExpired });
    assert_eq!(model.renew(charge, 5), Answer::WrongState { state: StateKind::Uncertain, action: "renew" });
    assert_eq!(model.complete(charge, 4, b"x".to_vec()), Answer::StaleFence { presented: 4, current: 5 });
    assert_eq!(model.reconcile(charge, MResolution::Completed(b"r".to_vec())), Answer::Done);
    assert_eq!(model.reserve(charge, 0), Answer::Replay { outcome: OutcomeClass::Completed, body: b"r".to_vec() });
    model.tick(T0 + LEASE_MS + RESPONSE_MS);
    assert_eq!(model.reserve(charge, 0), Answer::Expired { outcome: OutcomeClass::Completed });
    assert_eq!(model.purge(10), (1, 0, false));
    model.tick(T0 + LEASE_MS + RESPONSE_MS + TOMBSTONE_MS);
    assert_eq!(model.purge(0), (0, 0, true));
    assert_eq!(model.purge(1), (0, 1, false));
    assert_eq!(model.reserve(charge, 2), Answer::Acquired { fence: 5, lease_until: model.now + LEASE_MS, attempt: 1 });

    assert_eq!(model.reserve(local, 0), Answer::Acquired { fence: 0, lease_until: model.now + LEASE_MS, attempt: 1 });
    model.bind_fence(local, 9);
    model.tick(model.now + LEASE_MS);
    assert_eq!(model.reserve(local, 0), Answer::Acquired { fence: 9, lease_until: model.now + LEASE_MS, attempt: 2 });
    model.bind_fence(local, 10);
    assert_eq!(model.complete(local, 9, Vec::new()), Answer::StaleFence { presented: 9, current: 10 });
    assert_eq!(
        model.complete(local, 10, vec![0; MAX_RESULT + 1]),
        Answer::ResultTooLarge { len: MAX_RESULT + 1, max: MAX_RESULT }
    );
    assert_eq!(model.fail(local, 10, MFailure::Retryable), Answer::Done);
    assert_eq!(model.reserve(local, 0), Answer::Acquired { fence: 10, lease_until: model.now + LEASE_MS, attempt: 3 });
}
