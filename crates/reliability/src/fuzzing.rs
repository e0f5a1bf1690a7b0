//! The bodies of the cargo-fuzz targets in `fuzz/` (one function per target). They live here so
//! that the regression tests in `tests/harness.rs` run exactly the code the fuzzer ran, and so
//! that `cargo xtask reliability` can feed them its own bad inputs.
//!
//! Each function panics on a finding (that is what the fuzzer detects) and otherwise returns
//! whether the input was accepted (`false`: refused with a typed error).

use std::collections::BTreeMap;
use std::time::Duration;

use idemdb::{
    DecisionTime, Durability, Error, ExpiredLease, Failure, Fingerprint, FingerprintBuilder, IdempotencyKey, Lease,
    ListFilter, ManualClock, Policy, Record, Refusal, Reservation, Reserve, Resolution, Scope, ScopedKey, State, Store,
    Timestamp, TransitionError,
};
use idemdb_core::{
    Canonicalizer, DecisionContext, Normaliser, RECORD_FORMAT, Retention, decide, decode_record, encode_record,
};

use crate::fault::{Disk, FaultKind, FaultPlan};

/// The body of a fuzz target: panics on a finding, returns whether the input was accepted.
pub type Target = fn(&[u8]) -> bool;

/// Every fuzz target by name, as in `fuzz/fuzz_targets/`.
pub const TARGETS: [(&str, Target); 6] = [
    ("record_decode", record_decode),
    ("canonical", canonical),
    ("keys", keys),
    ("ops", ops),
    ("journal_records", journal_records),
    ("journal_header", journal_header),
];

/// A crashed journaled store: its file and its journal (a valid header, then records of
/// small and large completions, one of them after a checkpoint), made once.
fn crashed_journal() -> &'static (Vec<u8>, Vec<u8>) {
    static IMAGES: std::sync::OnceLock<(Vec<u8>, Vec<u8>)> = std::sync::OnceLock::new();
    IMAGES.get_or_init(|| {
        use crate::journal_damage::Image;
        let (file, journal) = (Image::default(), Image::default());
        let store = journal_builder().open_backend_with_journal(file.clone(), journal.clone()).expect("a new store");
        let scope = fuzz_scope();
        for i in 0..12u32 {
            let key = IdempotencyKey::new(format!("k-{i}")).expect("a valid key");
            if let Ok(Reservation::Acquired(lease)) =
                store.reserve(Reserve::new(&scope, &key, &Fingerprint::from_bytes([1; 32])))
            {
                let body = vec![b'r'; if i.is_multiple_of(3) { 5000 } else { 60 }];
                let _ = store.complete(&lease, body);
            }
            if i == 3 {
                let _ = store.flush();
            }
        }
        let images = (file.bytes(), journal.bytes());
        drop(store);
        images
    })
}

fn journal_builder() -> idemdb::StoreBuilder {
    Store::builder()
        .clock(ManualClock::new(1_700_000_000_000))
        .secret_seed([3; 32])
        .journal(true)
        .journal_bytes(256 * 1024)
}

/// Opens the crashed store with `journal` beside it: `Ok` or a typed error, never a panic; an
/// opened store answers reads. Returns whether it opened.
fn open_with_journal(journal: Vec<u8>) -> bool {
    use crate::journal_damage::Image;
    let (file, _) = crashed_journal();
    let opened = journal_builder().open_backend_with_journal(Image::from(file.clone()), Image::from(journal));
    let Ok(store) = opened else { return false };
    let scope = fuzz_scope();
    for i in 0..12u32 {
        let key = IdempotencyKey::new(format!("k-{i}")).expect("a valid key");
        let _ = store.get(&scope, &key);
    }
    true
}

/// Target `journal_records`: recovery reads the crashed store's journal with a valid header
/// and the input written over its records (from the first record block on), so the record
/// parser is reached.
pub fn journal_records(data: &[u8]) -> bool {
    let (_, journal) = crashed_journal();
    let mut bytes = journal.clone();
    let end = (4096 + data.len()).min(bytes.len());
    bytes[4096..end].copy_from_slice(&data[..end - 4096]);
    open_with_journal(bytes)
}

/// Target `journal_header`: the input written over the journal's header block (and, past
/// 4 KiB, over its records), or a journal that is the input alone when it is short.
pub fn journal_header(data: &[u8]) -> bool {
    let (_, journal) = crashed_journal();
    if data.first().is_some_and(|byte| *byte == 0xff) {
        return open_with_journal(data[1..].to_vec());
    }
    let mut bytes = journal.clone();
    let end = data.len().min(bytes.len());
    bytes[..end].copy_from_slice(&data[..end]);
    open_with_journal(bytes)
}

/// Target `record_decode`: the input is the body of a stored record behind a valid format byte,
/// so the bincode body parser is reached. A decoded record must encode back to a record that
/// decodes equal, and every pure function of the state machine must handle it without panic
/// (saturating time arithmetic, whatever the stored instants).
pub fn record_decode(data: &[u8]) -> bool {
    let mut bytes = Vec::with_capacity(data.len() + 1);
    bytes.push(RECORD_FORMAT);
    bytes.extend_from_slice(data);
    let _ = decode_record(data);
    let Ok(record) = decode_record(&bytes) else { return false };
    let again = encode_record(&record);
    assert_eq!(decode_record(&again).as_ref(), Ok(&record), "a decoded record must round-trip");
    // Exercise the state machine on the hostile record at a few instants.
    let policy =
        Policy::default().with_lease_ttl(Duration::from_millis(u64::from(data.first().copied().unwrap_or(1)) + 1));
    let takeover = policy.clone().with_expired_lease(ExpiredLease::Takeover);
    for now in [0, record.updated_at.as_millis(), record.updated_at.as_millis().saturating_add(1), u64::MAX] {
        let now = Timestamp::from_millis(now);
        let _ = record.due_at();
        let _ = record.is_forgotten(now);
        if let Retention::Tombstone(tombstone) = record.retention(now) {
            assert_eq!(tombstone.fingerprint, record.fingerprint, "a tombstone keeps the fingerprint");
        }
        let (scope, key) = (fuzz_scope(), fuzz_key());
        for policy in [&policy, &takeover] {
            let at = DecisionContext::new(now, policy);
            let _ = decide(Some(record.clone()), &scope, &key, &record.fingerprint, at.with_fence_floor(record.fence));
            let _ = decide(
                Some(record.clone()),
                &scope,
                &key,
                &Fingerprint::from_bytes([0; 32]),
                at.with_fence_floor(u64::MAX),
            );
            let _ = idemdb_core::complete(&record, record.fence, b"r".to_vec(), now, policy);
            let _ = idemdb_core::fail(&record, record.fence, Failure::Uncertain, now, policy);
            let _ = idemdb_core::renew(&record, record.fence, now, policy);
            let _ = idemdb_core::reconcile(&record, Resolution::Released, now, policy);
        }
    }
    true
}

fn fuzz_scope() -> Scope {
    Scope::new("fuzz", "decode").expect("a valid scope")
}

fn fuzz_key() -> IdempotencyKey {
    IdempotencyKey::new("k").expect("a valid key")
}

/// Target `canonical`: RFC 8785 canonicalisation of an arbitrary body, plain and with
/// exclusions and normalisers. The canonical form must be a fixed point (canonicalising it
/// again changes nothing) and the fingerprint must be the hash of that form.
pub fn canonical(data: &[u8]) -> bool {
    let plain = Canonicalizer::new();
    let configured = configured_canonicalizer();
    let mut accepted = false;
    for canon in [&plain, &configured] {
        let Ok(out) = canon.canonicalize(data) else { continue };
        accepted = true;
        let again = canon.canonicalize(&out);
        assert_eq!(
            again.as_ref(),
            Ok(&out),
            "the canonical form of {:?} is not a fixed point",
            String::from_utf8_lossy(data)
        );
        assert_eq!(canon.fingerprint(data).ok(), Some(Fingerprint::of_canonical_json(&out)));
    }
    accepted
}

fn configured_canonicalizer() -> Canonicalizer {
    let build = || -> Result<Canonicalizer, idemdb::CanonicalError> {
        Canonicalizer::new()
            .exclude("/trace_id")?
            .exclude("/items/*/client_line_id")?
            .normalise("/currency", Normaliser::Uppercase)?
            .normalise("/items/*/sku", Normaliser::Trim)?
            .normalise("/email", Normaliser::Lowercase)?
            .normalise("/amount", Normaliser::DecimalAmount)
    };
    build().unwrap_or_default()
}

/// Target `keys`: key and scope validation and the storage encoding. The input is split into
/// tenant, operation and key at `0xff` bytes. A valid triple must encode injectively and
/// round-trip; decoding arbitrary bytes must either fail or re-encode to the same bytes.
pub fn keys(data: &[u8]) -> bool {
    if let Ok(decoded) = ScopedKey::decode(data) {
        assert_eq!(decoded.encode(), data, "decode accepted a non-canonical encoding");
    }
    let parts: Vec<&[u8]> = data.splitn(3, |b| *b == 0xff).collect();
    let text = |i: usize| String::from_utf8_lossy(parts.get(i).copied().unwrap_or_default()).into_owned();
    let (tenant, operation, key) = (text(0), text(1), text(2));
    let _ = idemdb_core::validate_correlation(&key);
    let (Ok(scope), Ok(key)) = (Scope::new(tenant.clone(), operation.clone()), IdempotencyKey::new(key.clone())) else {
        return false;
    };
    let scoped = ScopedKey::new(scope, key);
    let encoded = scoped.encode();
    assert_eq!(ScopedKey::decode(&encoded).as_ref(), Ok(&scoped), "a valid identity must round-trip");
    assert!(encoded.starts_with(&ScopedKey::prefix(&tenant, Some(&operation))));
    assert!(encoded.starts_with(&ScopedKey::prefix(&tenant, None)));
    // Injectivity: move the boundaries between the three parts; a different triple that is
    // also valid must encode differently.
    let joined = format!("{tenant}{operation}{}", scoped.key.as_str());
    let cut = usize::from(data.last().copied().unwrap_or(0)) % (joined.len() + 1);
    for (a, b) in [(cut.min(tenant.len()), tenant.len() + operation.len()), (tenant.len(), cut.max(tenant.len()))] {
        let (Some(t), Some(o), Some(k)) = (joined.get(..a), joined.get(a..b), joined.get(b..)) else { continue };
        if let (Ok(scope), Ok(key)) = (Scope::new(t, o), IdempotencyKey::new(k)) {
            let other = ScopedKey::new(scope, key);
            if other != scoped {
                assert_ne!(other.encode(), encoded, "two identities share an encoding");
            }
        }
    }
    true
}

// ---------------------------------------------------------------------------------------------
// Target `ops`: operation sequences against a reference model, with failing I/O.

const TENANTS: [&str; 2] = ["acme", "acme|pay"];
const OPERATIONS: [&str; 2] = ["charge", "local"];
const KEYS: [&str; 3] = ["k-1", "k:2", "k|3"];
const MAX_RESULT: usize = 24;

fn ops_policy(operation: usize) -> Policy {
    let policy = Policy::default()
        .with_lease_ttl(Duration::from_secs(10))
        .with_response_ttl(Duration::from_secs(100))
        .with_tombstone_ttl(Duration::from_secs(1000))
        .with_max_result_bytes(MAX_RESULT);
    if operation == 1 { policy.with_expired_lease(ExpiredLease::Takeover) } else { policy }
}

/// The reference model: the records the store must hold, kept by applying the pure state
/// machine of `idemdb_core` to a map, as a storage adapter must. (`tests/suite/model.rs` in the
/// workspace checks the state machine itself against a model written from the design's table.)
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Model {
    records: BTreeMap<Vec<u8>, (usize, Record)>,
    fence_floor: u64,
}

/// What one call is expected to return, as comparable text, and the model after it.
struct Expected {
    answer: String,
    after: Model,
}

fn reservation_text(reservation: &Reservation) -> String {
    match reservation {
        Reservation::Acquired(lease) => {
            format!("acquired fence={} until={} attempt={}", lease.fence(), lease.expires_at(), lease.attempt())
        }
        other => format!("{other:?}"),
    }
}

fn error_text(error: &Error) -> Option<String> {
    match error.refusal()? {
        Refusal::Transition(transition) => Some(format!("transition {transition:?}")),
        Refusal::NotFound => Some("not found".into()),
        _ => None,
    }
}

struct Slot {
    operation: usize,
    scoped: ScopedKey,
}

fn slot(byte: u8) -> Option<Slot> {
    let tenant = usize::from(byte) % TENANTS.len();
    let operation = usize::from(byte / 2) % OPERATIONS.len();
    let key = usize::from(byte / 4) % KEYS.len();
    let scope = Scope::new(TENANTS[tenant], OPERATIONS[operation]).ok()?;
    Some(Slot { operation, scoped: ScopedKey::new(scope, IdempotencyKey::new(KEYS[key]).ok()?) })
}

fn operation_of(lease: &Lease) -> usize {
    OPERATIONS.iter().position(|o| *o == lease.scope().operation()).unwrap_or(0)
}

impl Model {
    fn reserve(&self, slot: &Slot, fingerprint: &Fingerprint, now: DecisionTime) -> Expected {
        let encoded = slot.scoped.encode();
        let existing = self.records.get(&encoded).map(|(_, record)| record.clone());
        let policy = ops_policy(slot.operation);
        let context = DecisionContext::at(now, &policy).with_fence_floor(self.fence_floor);
        let decision = match decide(existing, &slot.scoped.scope, &slot.scoped.key, fingerprint, context) {
            Ok(decision) => decision,
            Err(error) => return Expected { answer: format!("transition {error:?}"), after: self.clone() },
        };
        let mut after = self.clone();
        if let Some(record) = &decision.write {
            after.records.insert(encoded, (slot.operation, record.clone()));
        }
        Expected { answer: reservation_text(&decision.answer), after }
    }

    fn transition(
        &self,
        encoded: Vec<u8>,
        apply: impl FnOnce(&Record) -> Result<Record, TransitionError>,
        ok: impl FnOnce(&Record) -> String,
    ) -> Expected {
        let Some((operation, record)) = self.records.get(&encoded) else {
            return Expected { answer: "not found".into(), after: self.clone() };
        };
        match apply(record) {
            Ok(next) => {
                let answer = ok(&next);
                let mut after = self.clone();
                after.records.insert(encoded, (*operation, next));
                Expected { answer, after }
            }
            Err(error) => Expected { answer: format!("transition {error:?}"), after: self.clone() },
        }
    }

    fn purge(&self, budget: usize, now: Timestamp) -> Expected {
        let mut due: Vec<(Timestamp, Vec<u8>)> = self
            .records
            .iter()
            .filter_map(|(key, (_, record))| record.due_at().filter(|due| *due <= now).map(|due| (due, key.clone())))
            .collect();
        due.sort();
        let mut after = self.clone();
        let (mut tombstoned, mut forgotten) = (0u64, 0u64);
        for (_, key) in due.iter().take(budget) {
            let Some((operation, record)) = self.records.get(key) else { continue };
            match record.retention(now) {
                Retention::Keep => {}
                Retention::Tombstone(tombstone) => {
                    after.records.insert(key.clone(), (*operation, tombstone));
                    tombstoned += 1;
                }
                Retention::Forget => {
                    after.records.remove(key);
                    after.fence_floor = after.fence_floor.max(record.fence);
                    forgotten += 1;
                }
            }
        }
        Expected { answer: format!("purged {tombstoned} {forgotten} more={}", due.len() > budget), after }
    }
}

struct OpsRun {
    disk: Disk,
    clock: ManualClock,
    store: Option<Store>,
    model: Model,
    leases: Vec<Lease>,
    cut_seed: u64,
}

impl OpsRun {
    fn open(&mut self) -> Result<(), String> {
        self.store = None;
        let opened = Store::builder()
            .default_policy(ops_policy(0))
            .policy(OPERATIONS[1], ops_policy(1))
            .clock(self.clock.clone())
            .durability(Durability::Immediate)
            .secret_seed([9; 32])
            .cache_bytes(1 << 20)
            .open_backend(self.disk.backend());
        match opened {
            Ok(store) => {
                self.store = Some(store);
                Ok(())
            }
            Err(error) => Err(error.to_string()),
        }
    }

    /// Reopens after a failed call (a power cut first when the machine died), crashing again
    /// during recovery never; then the store must hold either the state before the call or the
    /// state after it, and verify clean.
    fn recover(&mut self, after: Option<Model>) {
        let crashed = self.disk.crashed();
        self.disk.halt();
        self.store = None;
        if crashed {
            self.cut_seed = self.cut_seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            self.disk.crash(self.cut_seed);
        } else {
            // No power cut: the live image stays as the failed call left it.
            self.disk.crash(1);
        }
        self.disk.disarm();
        if let Err(error) = self.open() {
            panic!("the store did not reopen after a fault: {error}");
        }
        let stored = self.contents();
        let before = self.model_contents(&self.model);
        if stored != before {
            let after = after.unwrap_or_else(|| self.model.clone());
            assert_eq!(
                stored,
                self.model_contents(&after),
                "after a fault the store holds neither the state before the call nor after it"
            );
            self.model = after;
        }
        // A reopen forgets fences of removed records only if the floor was not persisted; the
        // model keeps the floor it knows.
        let report = self.store.as_mut().map(Store::verify);
        match report {
            Some(Ok(report)) => assert!(report.is_ok(), "verify after a fault: {:?}", report.problems),
            Some(Err(error)) => panic!("verify failed: {error}"),
            None => {}
        }
    }

    fn contents(&self) -> Vec<(Vec<u8>, Record)> {
        let Some(store) = &self.store else { return Vec::new() };
        let mut out = Vec::new();
        let mut filter = ListFilter::default();
        filter.limit = 1000;
        match store.list(&filter) {
            Ok(listing) => out.extend(listing.records.into_iter().map(|r| (r.scoped.encode(), r.record))),
            Err(error) => panic!("listing failed after recovery: {error}"),
        }
        out
    }

    fn model_contents(&self, model: &Model) -> Vec<(Vec<u8>, Record)> {
        model.records.iter().map(|(key, (_, record))| (key.clone(), record.clone())).collect()
    }

    /// Compares a call's outcome with the model's expectation.
    fn settle<T>(&mut self, result: Result<T, Error>, text: impl Fn(&T) -> String, expected: Expected) -> Option<T> {
        if self.disk.crashed() {
            self.recover(Some(expected.after));
            return None;
        }
        match result {
            Ok(value) => {
                assert_eq!(text(&value), expected.answer, "store and model disagree");
                self.model = expected.after;
                Some(value)
            }
            Err(error) => match error_text(&error) {
                Some(answer) => {
                    assert_eq!(answer, expected.answer, "store and model disagree");
                    None
                }
                None => {
                    self.recover(Some(expected.after));
                    None
                }
            },
        }
    }

    fn lease(&self, byte: u8) -> Option<Lease> {
        if self.leases.is_empty() {
            return None;
        }
        self.leases.get(usize::from(byte) % self.leases.len()).cloned()
    }

    /// The times the store will decide with: its store time and retention time (which may
    /// lag the wall clock after a reopen, until the time since the last persisted clock is
    /// confirmed), read from the store itself; the model checks decisions, not the clock.
    fn now(&self) -> DecisionTime {
        match &self.store {
            Some(store) => store.decision_time(),
            None => DecisionTime::from(idemdb::Clock::now(&self.clock)),
        }
    }

    fn step(&mut self, op: u8, a: u8, b: u8) {
        if self.store.is_none() && self.open().is_err() {
            self.recover(None);
        }
        let at = self.now();
        let now = at.now;
        let fingerprint = |n: u8| FingerprintBuilder::new().str_field("ops").field(&[n % 3]).finish();
        let body = |n: u8| vec![n; usize::from(n) % (MAX_RESULT + 4)];
        match op % 10 {
            0 => {
                let Some(slot) = slot(a) else { return };
                let expected = self.model.reserve(&slot, &fingerprint(b), at);
                let Some(store) = &self.store else { return };
                let result = store.reserve(Reserve::new(&slot.scoped.scope, &slot.scoped.key, &fingerprint(b)));
                if let Some(Reservation::Acquired(lease)) = self.settle(result, reservation_text, expected) {
                    self.leases.push(lease);
                }
            }
            1 | 2 => {
                let Some(lease) = self.lease(a) else { return };
                let policy = ops_policy(operation_of(&lease));
                let fence = lease.fence();
                let (expected, result) = if op % 10 == 1 {
                    let expected = self.model.transition(
                        ScopedKey::new(lease.scope().clone(), lease.key().clone()).encode(),
                        |r| idemdb_core::complete(r, fence, body(b), now, &policy),
                        |_| "ok".into(),
                    );
                    (expected, self.store.as_ref().map(|s| s.complete(&lease, body(b))))
                } else {
                    let failure = match b % 3 {
                        0 => Failure::Definitive(body(b)),
                        1 => Failure::Retryable,
                        _ => Failure::Uncertain,
                    };
                    let expected = self.model.transition(
                        ScopedKey::new(lease.scope().clone(), lease.key().clone()).encode(),
                        |r| idemdb_core::fail(r, fence, failure.clone(), now, &policy),
                        |_| "ok".into(),
                    );
                    (expected, self.store.as_ref().map(|s| s.fail(&lease, failure.clone())))
                };
                if let Some(result) = result {
                    self.settle(result, |()| "ok".to_string(), expected);
                }
            }
            3 => {
                let Some(lease) = self.lease(a) else { return };
                let policy = ops_policy(operation_of(&lease));
                let fence = lease.fence();
                let expected = self.model.transition(
                    ScopedKey::new(lease.scope().clone(), lease.key().clone()).encode(),
                    |r| idemdb_core::renew(r, fence, now, &policy).map(|(record, _)| record),
                    |r| match r.state {
                        State::InProgress { lease_expires_at } => format!("renewed {lease_expires_at}"),
                        _ => "renewed".into(),
                    },
                );
                let Some(store) = &self.store else { return };
                let result = store.renew(&lease);
                if let Some(renewed) = self.settle(result, |l| format!("renewed {}", l.expires_at()), expected) {
                    self.leases.push(renewed);
                }
            }
            4 => {
                let Some(slot) = slot(a) else { return };
                let resolution = match b % 3 {
                    0 => Resolution::Completed(body(b)),
                    1 => Resolution::Failed(body(b)),
                    _ => Resolution::Released,
                };
                let policy = ops_policy(slot.operation);
                let expected = self.model.transition(
                    slot.scoped.encode(),
                    |r| idemdb_core::reconcile(r, resolution.clone(), now, &policy),
                    |_| "ok".into(),
                );
                let Some(store) = &self.store else { return };
                let result = store.reconcile(
                    &slot.scoped.scope,
                    &slot.scoped.key,
                    resolution.clone(),
                    idemdb::ResolutionCause::Application,
                );
                self.settle(result, |()| "ok".to_string(), expected);
            }
            5 => self.clock.advance(Duration::from_millis(u64::from(a) * u64::from(b) * 10 + 1)),
            6 => {
                let budget = usize::from(a % 4) + 1;
                let expected = self.model.purge(budget, at.retention);
                let Some(store) = &self.store else { return };
                let result = store.purge_expired(budget);
                self.settle(result, |r| format!("purged {} {} more={}", r.tombstoned, r.forgotten, r.more), expected);
            }
            7 => {
                let kind = match b % 3 {
                    0 => FaultKind::FailOnce,
                    1 => FaultKind::FailForever,
                    _ => FaultKind::Crash,
                };
                self.disk.arm(&[FaultPlan { at: u64::from(a % 16) + 1, kind }]);
            }
            8 => {
                // A graceful restart.
                self.disk.disarm();
                self.store = None;
                if self.open().is_err() {
                    self.recover(None);
                }
                assert_eq!(self.contents(), self.model_contents(&self.model), "a restart changed the records");
            }
            _ => {
                // A power cut between calls: everything returned so far was durable.
                self.disk.disarm();
                self.disk.halt();
                self.store = None;
                self.disk.crash(u64::from(a) << 8 | u64::from(b));
                if let Err(error) = self.open() {
                    panic!("the store did not reopen after a power cut: {error}");
                }
                assert_eq!(self.contents(), self.model_contents(&self.model), "a power cut lost or changed records");
            }
        }
    }
}

/// Target `ops`: a sequence of reserve / complete / fail / renew / reconcile / clock / purge /
/// fault / restart / power-cut operations (three input bytes each, at most 64) on a store over
/// the fault-injecting backend with durable commits, compared after every call with the
/// reference model: same answers; after a fault, the store holds the state before or after the
/// failed call and verifies clean; after a power cut, everything that returned is there.
pub fn ops(data: &[u8]) -> bool {
    let mut run = OpsRun {
        disk: Disk::new(),
        clock: ManualClock::new(crate::workload::T0),
        store: None,
        model: Model::default(),
        leases: Vec::new(),
        cut_seed: 7,
    };
    for chunk in data.chunks_exact(3).take(64) {
        run.step(chunk[0], chunk[1], chunk[2]);
    }
    run.disk.disarm();
    if run.store.is_some() {
        assert_eq!(run.contents(), run.model_contents(&run.model), "final contents differ from the model");
    }
    data.len() >= 3
}
