//! Races: many threads deliver the same intents at once, over memory and file stores. Every
//! (thread, intent) delivery is one race attempt; each intent must end with exactly one effect,
//! and every thread must get the one result (or the tombstone, once purged).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::Duration;

use idemdb::redb::{ReadableTable, TableDefinition};
use idemdb::{
    Durability, Error, Executed, FingerprintBuilder, IdempotencyKey, ManualClock, Policy, Reservation, Reserve, Scope,
    Store,
};

use crate::rng::Rng;
use crate::workload::T0;
use idemdb_fake_provider::EffectLedger;

const APP_EFFECTS: TableDefinition<u64, u64> = TableDefinition::new("app_race_effects");

/// Size of the race test.
#[derive(Debug, Clone)]
pub struct RaceConfig {
    /// Race attempts to make at least.
    pub attempts: u64,
    /// Threads per round.
    pub threads: usize,
    /// Intents per round (every thread delivers every one of them, in its own order).
    pub keys: usize,
    /// One round in this many runs on a file store (the rest in memory).
    pub file_every: u64,
    /// Schedule seed.
    pub seed: u64,
}

/// What the races found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RaceReport {
    /// (thread, intent) deliveries made while racing.
    pub attempts: u64,
    /// Rounds (one store each).
    pub rounds: u64,
    /// Rounds on a file store.
    pub file_rounds: u64,
    /// Effects beyond the first for an intent.
    pub double: u64,
    /// Intents that ended with no effect.
    pub missing: u64,
    /// Threads that got a different result than the one stored.
    pub wrong_answers: u64,
    /// Store errors or answers the protocol does not allow.
    pub unexpected: u64,
    /// The first few failures.
    pub notes: Vec<String>,
}

impl RaceReport {
    fn note(&mut self, note: String) {
        if self.notes.len() < 12 {
            self.notes.push(note);
        }
    }

    /// Whether nothing breaks a promise.
    pub fn clean(&self) -> bool {
        self.double == 0 && self.missing == 0 && self.wrong_answers == 0 && self.unexpected == 0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// reserve → remote effect → complete.
    Charge,
    /// `execute`, the effect in the same commit.
    Execute,
    /// reserve → effect → complete while a purge thread moves the clock and tombstones results.
    ChargeWithPurge,
}

/// What one thread saw for one intent.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Got {
    Body(Vec<u8>),
    Expired,
    Failed(String),
}

fn key(i: usize) -> Result<IdempotencyKey, Error> {
    Ok(IdempotencyKey::new(format!("race-{i}"))?)
}

fn deliver(store: &Store, provider: &EffectLedger, kind: Kind, scope: &Scope, i: usize) -> Result<Got, Error> {
    let key = key(i)?;
    let fp = FingerprintBuilder::new().str_field("race").field(&(i as u64).to_be_bytes()).finish();
    for _ in 0..1_000_000 {
        if kind == Kind::Execute {
            let executed =
                store.execute(Reserve::new(scope, &key, &fp), |txn| -> Result<Vec<u8>, idemdb::redb::Error> {
                    let mut table = txn.tables_checkpointing().open_table(APP_EFFECTS)?;
                    let n = table.get(i as u64)?.map_or(0, |v| v.value()) + 1;
                    table.insert(i as u64, n)?;
                    Ok(format!("credit:{i}:{n}").into_bytes())
                });
            return match executed {
                Ok(Executed::Ran { result }) => Ok(Got::Body(result)),
                Ok(Executed::Answered(Reservation::Replay { body, .. })) => Ok(Got::Body(body)),
                Ok(other) => Ok(Got::Failed(format!("{other:?}"))),
                Err(error) => Ok(Got::Failed(error.to_string())),
            };
        }
        match store.reserve(Reserve::new(scope, &key, &fp))? {
            Reservation::Acquired(lease) => {
                let body = provider.perform(&format!("race-{i}")).body;
                store.complete(&lease, body.clone())?;
                return Ok(Got::Body(body));
            }
            Reservation::Replay { body, .. } => return Ok(Got::Body(body)),
            Reservation::InProgress { .. } => std::thread::yield_now(),
            Reservation::Expired { .. } => return Ok(Got::Expired),
            other => return Ok(Got::Failed(format!("{other:?}"))),
        }
    }
    Ok(Got::Failed("never settled".into()))
}

fn open(kind: Kind, file: Option<&std::path::Path>, clock: &ManualClock) -> Result<Store, idemdb::OpenError> {
    let response = if kind == Kind::ChargeWithPurge { Duration::from_millis(5) } else { Duration::from_secs(3600) };
    let builder = Store::builder()
        .default_policy(
            Policy::default()
                .with_lease_ttl(Duration::from_secs(3600))
                .with_response_ttl(response)
                .with_tombstone_ttl(Duration::from_secs(3600)),
        )
        .clock(clock.clone())
        .durability(Durability::Immediate)
        .secret_seed([3; 32]);
    match file {
        Some(path) => builder.open(path),
        None => builder.in_memory(),
    }
}

fn round(config: &RaceConfig, number: u64, dir: &std::path::Path, report: &mut RaceReport) {
    let mut rng = Rng::new(crate::rng::mix(&[config.seed, number]));
    let kind = match number % 3 {
        0 => Kind::Charge,
        1 => Kind::Execute,
        _ => Kind::ChargeWithPurge,
    };
    let on_file = config.file_every > 0 && number.is_multiple_of(config.file_every);
    let path = dir.join(format!("race-{number}.idemdb"));
    let clock = ManualClock::new(T0);
    let store = match open(kind, on_file.then_some(path.as_path()), &clock) {
        Ok(store) => store,
        Err(error) => {
            report.unexpected += 1;
            report.note(format!("open: {error}"));
            return;
        }
    };
    let scope = match Scope::new("acme", "race") {
        Ok(scope) => scope,
        Err(_) => return,
    };
    let provider = EffectLedger::new();
    let barrier = Barrier::new(config.threads + 1);
    let running = AtomicBool::new(true);
    let attempts = AtomicU64::new(0);
    let answers: Mutex<Vec<(usize, Got)>> = Mutex::new(Vec::new());
    let orders: Vec<Vec<usize>> = (0..config.threads)
        .map(|_| {
            let mut order: Vec<usize> = (0..config.keys).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, usize::try_from(rng.below(i as u64 + 1)).unwrap_or(0));
            }
            order
        })
        .collect();
    std::thread::scope(|threads| {
        for order in &orders {
            let (store, provider, barrier, attempts, answers, scope) =
                (&store, &provider, &barrier, &attempts, &answers, &scope);
            threads.spawn(move || {
                barrier.wait();
                let mut got = Vec::new();
                for &i in order {
                    attempts.fetch_add(1, Ordering::Relaxed);
                    let answer =
                        deliver(store, provider, kind, scope, i).unwrap_or_else(|e| Got::Failed(e.to_string()));
                    got.push((i, answer));
                }
                answers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(got);
            });
        }
        if kind == Kind::ChargeWithPurge {
            let (store, clock, running) = (&store, &clock, &running);
            threads.spawn(move || {
                while running.load(Ordering::Relaxed) {
                    clock.advance(Duration::from_millis(1));
                    let _ = store.purge_expired(4);
                    std::thread::yield_now();
                }
            });
        }
        barrier.wait();
        // The purge thread stops once every delivery thread is done.
        while attempts.load(Ordering::Relaxed) < (config.threads * config.keys) as u64 {
            std::thread::yield_now();
        }
        loop {
            let done = answers.lock().map(|a| a.len()).unwrap_or(0);
            if done >= config.threads * config.keys {
                break;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        running.store(false, Ordering::Relaxed);
    });
    report.rounds += 1;
    report.file_rounds += u64::from(on_file);
    report.attempts += attempts.load(Ordering::Relaxed);
    // Effects per intent.
    let effects: BTreeMap<usize, u64> = match kind {
        Kind::Execute => store
            .write(|txn| -> Result<BTreeMap<usize, u64>, Error> {
                let table = txn.tables_checkpointing().open_table(APP_EFFECTS)?;
                let mut out = BTreeMap::new();
                for entry in table.iter()? {
                    let (k, v) = entry?;
                    out.insert(usize::try_from(k.value()).unwrap_or(usize::MAX), v.value());
                }
                Ok(out)
            })
            .unwrap_or_default(),
        _ => (0..config.keys).map(|i| (i, provider.count(&format!("race-{i}")) as u64)).collect(),
    };
    for i in 0..config.keys {
        let n = effects.get(&i).copied().unwrap_or(0);
        if n > 1 {
            report.double += n - 1;
            report.note(format!("{kind:?} round {number}: intent {i} has {n} effects"));
        }
        if n == 0 {
            report.missing += 1;
            report.note(format!("{kind:?} round {number}: intent {i} has no effect"));
        }
    }
    let answers = answers.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut first: BTreeMap<usize, Vec<u8>> = BTreeMap::new();
    for (i, got) in answers {
        match got {
            Got::Body(body) => {
                let expected = first.entry(i).or_insert_with(|| body.clone());
                if *expected != body {
                    report.wrong_answers += 1;
                    report.note(format!("{kind:?} round {number}: intent {i}: two different results"));
                }
            }
            Got::Expired if kind == Kind::ChargeWithPurge => {}
            other => {
                report.unexpected += 1;
                report.note(format!("{kind:?} round {number}: intent {i}: {other:?}"));
            }
        }
    }
    drop(store);
    let _ = std::fs::remove_file(&path);
}

/// Runs rounds until `config.attempts` race attempts were made.
///
/// # Errors
/// The temporary directory could not be made.
pub fn run_races(config: &RaceConfig) -> std::io::Result<RaceReport> {
    let dir = tempfile::tempdir()?;
    let mut report = RaceReport::default();
    let mut number = 0;
    while report.attempts < config.attempts {
        round(config, number, dir.path(), &mut report);
        number += 1;
    }
    Ok(report)
}
