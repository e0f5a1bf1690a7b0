//! Crash points under concurrency: several client threads share one store (their calls share
//! group commits) while a fault — crash, fail once, fail for ever — lands at a random storage
//! operation. Unlike the sweep this is not deterministic (the scheduler decides which calls
//! share a commit), so it runs random points only.
//!
//! A thread's observation counts only if the machine was still up when the call had returned
//! (checked after the call): that call's commit finished before the crash. After the power cut:
//! reopen, verify, every counted outcome must be stored as seen, then every intent is settled
//! (reconciling with the provider) and effects are counted in the provider's ledger.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use idemdb::{
    Fingerprint, FingerprintBuilder, IdempotencyKey, ManualClock, OpenError, Policy, Reservation, Reserve, Resolution,
    Scope, State, Store,
};

use crate::fault::{Disk, FaultKind, FaultPlan};
use crate::rng::{Rng, mix};
use crate::workload::{Counts, JOURNAL_BYTES, T0};
use idemdb_fake_provider::EffectLedger;

const THREADS: u32 = 4;
const PER_THREAD: u32 = 4;
/// Intents shared by the threads (thread t delivers intents 2t .. 2t+3, mod 8): neighbours
/// race on two of them.
const INTENTS: u32 = 8;
const LEASE: Duration = Duration::from_secs(10);

fn open(disk: &Disk, clock: &ManualClock, journal: bool) -> Result<Store, OpenError> {
    let builder = Store::builder()
        .secret_seed([4; 32])
        .clock(clock.clone())
        .cache_bytes(1 << 20)
        .default_policy(Policy::default().with_lease_ttl(LEASE));
    if journal {
        builder.journal_bytes(JOURNAL_BYTES).open_backend_with_journal(disk.backend(), disk.journal_backend())
    } else {
        builder.journal(false).open_backend(disk.backend())
    }
}

fn name(i: u32) -> String {
    format!("shared-{i}")
}

fn key(i: u32) -> Option<IdempotencyKey> {
    IdempotencyKey::new(name(i)).ok()
}

fn fingerprint(i: u32) -> Fingerprint {
    FingerprintBuilder::new().str_field("concurrent").field(&i.to_be_bytes()).finish()
}

/// One client thread: delivers its intents until the first failure or crash.
fn client(
    store: &Store,
    disk: &Disk,
    provider: &EffectLedger,
    seen: &Mutex<BTreeMap<u32, Vec<u8>>>,
    scope: &Scope,
    t: u32,
) {
    for j in 0..PER_THREAD {
        let i = (t * 2 + j) % INTENTS;
        let Some(key) = key(i) else { return };
        loop {
            let answer = store.reserve(Reserve::new(scope, &key, &fingerprint(i)));
            if disk.crashed() {
                return;
            }
            match answer {
                Ok(Reservation::Acquired(lease)) => {
                    let body = provider.perform(&name(i)).body;
                    let completed = store.complete(&lease, body.clone());
                    if disk.crashed() || completed.is_err() {
                        return;
                    }
                    seen.lock().unwrap_or_else(PoisonError::into_inner).insert(i, body);
                    break;
                }
                Ok(Reservation::Replay { body, .. }) => {
                    seen.lock().unwrap_or_else(PoisonError::into_inner).insert(i, body);
                    break;
                }
                // Another thread holds the key. Its call may have failed on the fault (a failed
                // operation leaves the key in progress, and the manual clock never lets the
                // lease run out): once a fault fired, stop waiting; settling covers the key.
                Ok(Reservation::InProgress { .. }) if disk.faults_fired() > 0 => return,
                Ok(Reservation::InProgress { .. }) => std::thread::yield_now(),
                Ok(_) | Err(_) => return,
            }
        }
    }
}

/// One concurrent crash point, on a journaled store or not.
fn point(seed: u64, journal: bool) -> Counts {
    let mut counts = Counts { runs: 1, ..Counts::default() };
    let mut rng = Rng::new(seed);
    let (disk, clock) = (Disk::new(), ManualClock::new(T0));
    let Ok(scope) = Scope::new("acme", "concurrent") else { return counts };
    let store = match open(&disk, &clock, journal) {
        Ok(store) => store,
        Err(error) => {
            counts.unexpected += 1;
            counts.notes.push(format!("concurrent {seed:#x}: create: {error}"));
            return counts;
        }
    };
    let provider = EffectLedger::new();
    let seen = Mutex::new(BTreeMap::new());
    let kind = match rng.below(10) {
        0 => FaultKind::FailOnce,
        1 => FaultKind::FailForever,
        _ => FaultKind::Crash,
    };
    // Creating the store took its operations before the fault is armed; the threads' calls
    // take about 60 together.
    disk.arm(&[FaultPlan { at: 1 + rng.below(64), kind }]);
    std::thread::scope(|threads| {
        for t in 0..THREADS {
            let (store, disk, provider, seen, scope) = (&store, &disk, &provider, &seen, &scope);
            threads.spawn(move || client(store, disk, provider, seen, scope, t));
        }
    });
    counts.faults_fired = disk.faults_fired();
    disk.halt();
    drop(store);
    disk.crash(rng.next_u64());
    counts.power_cuts += 1;
    counts.reopens += 1;
    let mut store = match open(&disk, &clock, journal) {
        Ok(store) => store,
        Err(error) => {
            counts.reopen_failures += 1;
            counts.notes.push(format!("concurrent {seed:#x}: reopen: {error}"));
            return counts;
        }
    };
    match store.verify() {
        Ok(report) if report.is_ok() => {}
        other => {
            counts.integrity_failures += 1;
            counts.notes.push(format!("concurrent {seed:#x}: verify: {other:?}"));
        }
    }
    for (i, body) in seen.into_inner().unwrap_or_else(PoisonError::into_inner) {
        let Some(key) = key(i) else { continue };
        match store.get(&scope, &key) {
            Ok(Some(record)) if matches!(&record.state, State::Completed { result, .. } if *result == body) => {
                counts.completions_verified += 1;
            }
            other => {
                counts.lost += 1;
                counts.notes.push(format!("concurrent {seed:#x}: {} saw {body:?}, stored {other:?}", name(i)));
            }
        }
    }
    // Settle every intent as a client would, after the leases of killed attempts ran out.
    clock.advance(LEASE + Duration::from_millis(1));
    for i in 0..INTENTS {
        let Some(key) = key(i) else { continue };
        let mut settled = false;
        for _ in 0..6 {
            let step = match store.reserve(Reserve::new(&scope, &key, &fingerprint(i))) {
                Ok(Reservation::Acquired(lease)) => store.complete(&lease, provider.perform(&name(i)).body),
                Ok(Reservation::NeedsReconciliation { .. }) => {
                    let resolution = provider
                        .first(&name(i))
                        .map(|effect| effect.body)
                        .map_or(Resolution::Released, Resolution::Completed);
                    store.reconcile(&scope, &key, resolution, idemdb::ResolutionCause::Application)
                }
                Ok(Reservation::Replay { .. }) => {
                    settled = true;
                    break;
                }
                other => {
                    counts.notes.push(format!("concurrent {seed:#x}: {} answered {other:?}", name(i)));
                    break;
                }
            };
            if let Err(error) = step {
                counts.notes.push(format!("concurrent {seed:#x}: settling {}: {error}", name(i)));
                break;
            }
        }
        if !settled {
            counts.unexpected += 1;
        }
    }
    counts.double += provider.doubles();
    if provider.doubles() > 0 {
        counts.notes.push(format!("concurrent {seed:#x}: {} double effects", provider.doubles()));
    }
    counts.notes.truncate(12);
    counts
}

/// Runs `points` concurrent crash points (each one store, four client threads); every other
/// point journals its commits, so faults land in shared journal records and checkpoints too.
pub fn run_concurrent(points: u64, seed: u64) -> Counts {
    let mut total = Counts::default();
    for n in 0..points {
        total.add(&point(mix(&[seed, 0xc0c0, n]), n % 2 == 0));
    }
    total
}
