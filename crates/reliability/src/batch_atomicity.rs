//! Batch atomicity: operations that fail after writing, mixed into concurrent group commits.
//!
//! Each round opens a store and lets threads call, at once, reservations with effects that
//! succeed, reservations whose later effect is refused after the reservation and earlier
//! effects were written (the same effect with another payload or version), and completions of
//! leases that completed already. Concurrent callers share group commits, so refused calls sit
//! in the same batches as successful ones. Afterwards every key is checked: a call that
//! succeeded left its record, each of its effects and its audit events; a call that returned an
//! error left nothing (no record, no outbox item, no audit event). Anything else is a partial
//! write. The file is verified (indexes agree with records) at the end of each round.
//!
//! The same contract on PostgreSQL is the conformance story
//! `run_failed_operations_write_nothing`, run by the adapter's tests against a server.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use idemdb::{
    EffectFilter, EffectName, Fingerprint, IdempotencyKey, NewEffect, Policy, Reservation, Reserve, Scope, Store,
};

use crate::rng::Rng;

/// What a run found.
#[derive(Debug, Default, Clone)]
pub struct AtomicityReport {
    /// Rounds (stores) run.
    pub rounds: u64,
    /// Calls made.
    pub calls: u64,
    /// Calls that returned an error after writing (refused enqueues).
    pub failed_after_writing: u64,
    /// Calls refused before writing (a lease that completed already).
    pub refused: u64,
    /// Calls that succeeded.
    pub succeeded: u64,
    /// Keys whose stored state is not all of a successful call or none of a failed one.
    pub partial_writes: u64,
    /// Calls whose answer was not the expected one (a refusal that should have succeeded, …).
    pub unexpected: u64,
    /// Rounds whose store did not verify (or could not run).
    pub failures: u64,
    /// The first problems, for the report.
    pub notes: Vec<String>,
}

impl AtomicityReport {
    fn note(&mut self, note: String) {
        if self.notes.len() < 8 {
            self.notes.push(note);
        }
    }
}

/// What one call was.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Call {
    /// A reservation with `n` distinct effects: succeeds.
    Good(usize),
    /// A reservation with `n` effects, the last of which repeats the first with another
    /// payload: refused after writing.
    Conflicting(usize),
    /// A completion of a lease completed already: refused before writing.
    Stale,
}

fn scope() -> Scope {
    Scope::new("acme", "batch").unwrap_or_else(|_| unreachable!("a valid scope"))
}

fn effects(call: Call, rng_payload: u64) -> Vec<NewEffect> {
    let name = |i: usize| EffectName::new(format!("effect-{i}")).unwrap_or_else(|_| unreachable!("a valid name"));
    let payload = |i: usize| format!("{rng_payload}-{i}").into_bytes();
    match call {
        Call::Good(n) => (0..n).map(|i| NewEffect { effect: name(i), version: 1, payload: payload(i) }).collect(),
        Call::Conflicting(n) => {
            let mut list: Vec<NewEffect> =
                (0..n.max(1)).map(|i| NewEffect { effect: name(i), version: 1, payload: payload(i) }).collect();
            list.push(NewEffect { effect: name(0), version: 1, payload: b"another payload".to_vec() });
            list
        }
        Call::Stale => Vec::new(),
    }
}

/// Runs `rounds` rounds of `threads` threads making `calls` calls each.
pub fn run(rounds: u64, threads: usize, calls: usize, seed: u64) -> AtomicityReport {
    let mut report = AtomicityReport::default();
    let base = if Path::new("/dev/shm").is_dir() { std::path::PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    for round in 0..rounds {
        let Ok(dir) = tempfile::Builder::new().prefix("idemdb-batch-").tempdir_in(&base) else {
            report.failures += 1;
            continue;
        };
        if let Err(error) = one_round(&mut report, &dir.path().join("s.idemdb"), threads, calls, seed ^ round) {
            report.failures += 1;
            report.note(format!("round {round}: {error}"));
        }
        report.rounds += 1;
    }
    report
}

fn one_round(report: &mut AtomicityReport, path: &Path, threads: usize, calls: usize, seed: u64) -> Result<(), String> {
    let policy = Policy::default().with_lease_ttl(Duration::from_secs(600));
    let store = Arc::new(Store::builder().policy("batch", policy).open(path).map_err(|e| e.to_string())?);
    let fp = Fingerprint::from_bytes([7; 32]);
    // A completed lease, for the refused completions.
    let done = IdempotencyKey::new("done").map_err(|e| e.to_string())?;
    let Reservation::Acquired(lease) = store.reserve(Reserve::new(&scope(), &done, &fp)).map_err(|e| e.to_string())?
    else {
        return Err("a new key was not acquired".into());
    };
    store.complete(&lease, b"done".to_vec()).map_err(|e| e.to_string())?;
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (store, lease) = (Arc::clone(&store), lease.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::new(seed.wrapping_mul(31).wrapping_add(t as u64));
                let mut outcomes = Vec::with_capacity(calls);
                for c in 0..calls {
                    let call = match rng.below(3) {
                        0 => Call::Good(1 + rng.below(3) as usize),
                        1 => Call::Conflicting(1 + rng.below(3) as usize),
                        _ => Call::Stale,
                    };
                    let name = format!("t{t}-c{c}");
                    let outcome = match (call, IdempotencyKey::new(name.clone())) {
                        (Call::Stale, _) => store.complete(&lease, b"again".to_vec()).err().map(|e| e.to_string()),
                        (_, Ok(key)) => {
                            let scope = scope();
                            let request = Reserve::new(&scope, &key, &fp)
                                .traced("batch")
                                .expect("a valid id")
                                .enqueuing(effects(call, rng.next_u64()));
                            store.reserve(request).err().map(|e| e.to_string())
                        }
                        (_, Err(error)) => Some(error.to_string()),
                    };
                    outcomes.push((name, call, outcome));
                }
                outcomes
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for worker in workers {
        outcomes.extend(worker.join().map_err(|_| "a worker panicked".to_string())?);
    }
    check(report, &store, &outcomes)?;
    let mut store = Arc::into_inner(store).ok_or("another handle is alive")?;
    let verified = store.verify().map_err(|e| e.to_string())?;
    if !verified.problems.is_empty() || !verified.storage_ok {
        report.failures += 1;
        report.note(format!("verify: {:?}", verified.problems));
    }
    Ok(())
}

fn check(
    report: &mut AtomicityReport,
    store: &Store,
    outcomes: &[(String, Call, Option<String>)],
) -> Result<(), String> {
    let items = store.effects(&EffectFilter::default()).map_err(|e| e.to_string())?;
    let mut items_per_key: HashMap<String, usize> = HashMap::new();
    for item in &items {
        *items_per_key.entry(item.key.as_str().to_string()).or_default() += 1;
    }
    let events = store.audit_events(usize::MAX).map_err(|e| e.to_string())?;
    let mut events_per_hash: HashMap<idemdb::KeyHash, usize> = HashMap::new();
    for event in &events {
        *events_per_hash.entry(event.key_hash).or_default() += 1;
    }
    for (name, call, outcome) in outcomes {
        report.calls += 1;
        if *call == Call::Stale {
            if outcome.is_some() {
                report.refused += 1;
            } else {
                report.unexpected += 1;
                report.note(format!("{name}: a second completion succeeded"));
            }
            continue;
        }
        let key = IdempotencyKey::new(name.clone()).map_err(|e| e.to_string())?;
        let record = store.get(&scope(), &key).map_err(|e| e.to_string())?.is_some();
        let effects = items_per_key.get(name).copied().unwrap_or(0);
        let events = events_per_hash.get(&store.key_hash(&scope(), &key)).copied().unwrap_or(0);
        match (call, outcome) {
            (Call::Good(n), None) => {
                report.succeeded += 1;
                // The reservation's event and one per enqueued effect.
                if !record || effects != *n || events != n + 1 {
                    report.partial_writes += 1;
                    report.note(format!(
                        "{name}: succeeded, stored record {record}, {effects} of {n} effects, {events} events"
                    ));
                }
            }
            (Call::Conflicting(_), Some(_)) => {
                report.failed_after_writing += 1;
                if record || effects > 0 || events > 0 {
                    report.partial_writes += 1;
                    report.note(format!("{name}: refused, left record {record}, {effects} effects, {events} events"));
                }
            }
            (_, outcome) => {
                report.unexpected += 1;
                report.note(format!("{name}: unexpected answer {outcome:?}"));
            }
        }
    }
    Ok(())
}
