//! Crash points of the outbox flow: one logical effect per provider key under power cuts at
//! every storage operation.
//!
//! The flow, for a handful of intents on a store over a [`Disk`]: the service reserves each
//! key and enqueues its external effect in the same transaction; a dispatcher claims the due
//! effects, calls a [`Provider`] that keeps idempotency keys for a window (and lives outside
//! the crashing machine), and reports — some responses are lost (reported unknown), some
//! answers are retryable. A crash at operation N kills the machine; the image a power cut
//! leaves is reopened and recovery runs as a service would: clients retry their requests,
//! dispatchers take over expired claims, uncertain effects are sent again inside the provider's
//! window, and — in half the runs, which jump past the window first — are resolved by querying
//! the provider instead. Checked afterwards:
//!
//! * no provider key produced two effects (the provider's ledger counts them);
//! * every intent ends completed or failed (replayed to its client), or waits in the
//!   reconciliation queue — none is lost or left running;
//! * the store reopens and verifies.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idemdb::{
    Attention, Clock, EffectName, EffectReport, Fingerprint, IdempotencyKey, ManualClock, Policy, ProviderState,
    Reservation, Reserve, Scope, Store,
};
use idemdb_fake_provider::Provider;

use crate::fault::{Disk, FaultKind, FaultPlan};
use crate::rng::Rng;

const T0: u64 = 1_700_000_000_000;
const LEASE_MS: u64 = 5_000;
const WINDOW_MS: u64 = 600_000;
/// Intents per run.
const INTENTS: usize = 4;

/// How big a sweep is.
#[derive(Debug, Clone, Copy)]
pub struct OutboxSweepConfig {
    /// Distinct seeds; each one is swept at every operation index of its fault-free run.
    pub seeds: u64,
    /// Seed of the seeds.
    pub seed: u64,
    /// Threads to run on.
    pub threads: usize,
}

/// What a sweep found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutboxSweepReport {
    /// Crash points run.
    pub crash_points: u64,
    /// Runs whose fault fired (a crash point inside the run).
    pub crashes: u64,
    /// Provider keys that produced more than one effect (must be 0).
    pub double_effects: u64,
    /// Intents that ended neither completed, failed nor in the reconciliation queue (must be 0).
    pub unresolved: u64,
    /// Intents resolved through the reconciliation queue (a provider query).
    pub reconciled: u64,
    /// Effects the provider performed in all runs.
    pub effects: u64,
    /// Stores that did not reopen or verify after a crash (must be 0).
    pub reopen_failures: u64,
    /// The first few findings, for the report.
    pub notes: Vec<String>,
}

impl OutboxSweepReport {
    /// Whether every promise held.
    pub fn clean(&self) -> bool {
        self.double_effects == 0 && self.unresolved == 0 && self.reopen_failures == 0
    }

    fn add(&mut self, other: &OutboxSweepReport) {
        self.crash_points += other.crash_points;
        self.crashes += other.crashes;
        self.double_effects += other.double_effects;
        self.unresolved += other.unresolved;
        self.reconciled += other.reconciled;
        self.effects += other.effects;
        self.reopen_failures += other.reopen_failures;
        for note in &other.notes {
            if self.notes.len() < 8 {
                self.notes.push(note.clone());
            }
        }
    }
}

/// Runs every crash point of `config.seeds` seeded runs.
pub fn outbox_sweep(config: &OutboxSweepConfig) -> OutboxSweepReport {
    let next = AtomicU64::new(0);
    let total = Mutex::new(OutboxSweepReport::default());
    std::thread::scope(|scope| {
        for _ in 0..config.threads.max(1) {
            scope.spawn(|| {
                let mut local = OutboxSweepReport::default();
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= config.seeds {
                        break;
                    }
                    let seed = crate::rng::mix(&[config.seed, index]);
                    let ops = probe(seed);
                    for at in 1..=ops {
                        local.add(&run(seed, Some(at)));
                    }
                }
                total.lock().unwrap_or_else(std::sync::PoisonError::into_inner).add(&local);
            });
        }
    });
    total.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Storage operations of the fault-free run of `seed`.
pub fn probe(seed: u64) -> u64 {
    let mut sim = Sim::new(seed);
    sim.disk.arm(&[]);
    let _ = sim.flow();
    sim.disk.ops()
}

/// How recovery treats an uncertain effect past the provider's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// Query the provider, then resolve (what the outbox requires).
    QueryFirst,
    /// A broken service that declares every uncertain effect "not found" without asking, so
    /// it is sent again: the sweep must see the double effects this causes.
    Reckless,
}

/// One run of the flow of `seed`, with a crash at operation `crash_at` (if any), then recovery
/// and the checks.
pub fn run(seed: u64, crash_at: Option<u64>) -> OutboxSweepReport {
    run_with(seed, crash_at, Recovery::QueryFirst)
}

/// [`run`] with a chosen recovery.
pub fn run_with(seed: u64, crash_at: Option<u64>, recovery: Recovery) -> OutboxSweepReport {
    let mut sim = Sim::new(seed);
    sim.recovery = recovery;
    let mut report = OutboxSweepReport { crash_points: u64::from(crash_at.is_some()), ..Default::default() };
    sim.disk.arm(&crash_at.map(|at| FaultPlan { at, kind: FaultKind::Crash }).into_iter().collect::<Vec<_>>());
    let finished = sim.flow().is_ok();
    if sim.disk.crashed() || !finished {
        report.crashes += 1;
        sim.disk.halt();
        sim.store = None;
        sim.disk.crash(crate::rng::mix(&[seed, crash_at.unwrap_or(0)]));
    }
    sim.disk.disarm();
    if let Err(error) = sim.open() {
        report.reopen_failures += 1;
        report.notes.push(format!("seed {seed:#x} crash {crash_at:?}: reopen failed: {error}"));
        return report;
    }
    if let Err(error) = sim.recover(&mut report) {
        report.reopen_failures += 1;
        report.notes.push(format!("seed {seed:#x} crash {crash_at:?}: recovery failed: {error}"));
        return report;
    }
    sim.check(seed, crash_at, &mut report);
    report
}

struct Sim {
    disk: Disk,
    clock: ManualClock,
    provider: Provider,
    store: Option<Store>,
    scope: Scope,
    rng: Rng,
    /// Whether recovery jumps past the provider's window first (then uncertain effects must be
    /// resolved by a query, never sent again).
    late_recovery: bool,
    recovery: Recovery,
}

fn key(i: usize) -> IdempotencyKey {
    IdempotencyKey::new(format!("order-{i}")).unwrap_or_else(|_| unreachable_key())
}

fn unreachable_key() -> IdempotencyKey {
    IdempotencyKey::from_random_bytes([0; 16])
}

fn shop() -> Scope {
    // A valid literal: the fallback never runs.
    Scope::new("shop", "pay").unwrap_or_else(|_| shop())
}

fn effect() -> EffectName {
    EffectName::new("charge").unwrap_or_else(|_| effect())
}

fn request() -> Fingerprint {
    Fingerprint::from_bytes([1; 32])
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = Rng::new(seed);
        let late_recovery = rng.below(2) == 1;
        Sim {
            disk: Disk::new(),
            clock: ManualClock::new(T0),
            provider: Provider::new(WINDOW_MS),
            store: None,
            scope: shop(),
            rng,
            late_recovery,
            recovery: Recovery::QueryFirst,
        }
    }

    fn policy() -> Policy {
        Policy::default()
            .with_lease_ttl(Duration::from_millis(LEASE_MS))
            .with_provider_key_retention(Duration::from_millis(WINDOW_MS))
            .with_dispatch_backoff(Duration::from_millis(100), Duration::from_millis(1_000))
    }

    fn open(&mut self) -> Result<(), String> {
        self.store = None;
        let store = Store::builder()
            .default_policy(Self::policy())
            .clock(self.clock.clone())
            .secret_seed([7; 32])
            .cache_bytes(1 << 20)
            .open_backend(self.disk.backend())
            .map_err(|error| error.to_string())?;
        self.store = Some(store);
        Ok(())
    }

    fn store(&self) -> Result<&Store, String> {
        self.store.as_ref().ok_or_else(|| "store is not open".to_string())
    }

    fn now(&self) -> u64 {
        self.clock.now().as_millis()
    }

    /// Reserves the intent and enqueues its effect in one transaction (a retry of a placed
    /// intent changes nothing).
    fn place(&self, i: usize) -> Result<(), String> {
        let scope = &self.scope;
        self.store()?
            .write(|txn| {
                if let Reservation::Acquired(lease) = txn.reserve(Reserve::new(scope, &key(i), &request()))? {
                    txn.enqueue_effect(&lease, &effect(), 1, format!("charge {i}").into_bytes())?;
                }
                Ok::<(), idemdb::Error>(())
            })
            .map_err(|error| error.to_string())
    }

    /// One dispatcher pass; `faulty` lets the seed lose responses and answer retryable.
    fn dispatch(&mut self, faulty: bool) -> Result<usize, String> {
        let claims = self.store()?.claim_effects(16).map_err(|error| error.to_string())?;
        for claim in &claims {
            let roll = if faulty { self.rng.below(6) } else { 5 };
            let report = if roll == 0 {
                EffectReport::Retryable { reason: "429".into() }
            } else {
                let answer = self.provider.call(claim.provider_key.as_str(), self.now());
                if roll == 1 {
                    EffectReport::Unknown { reason: "response lost".into() }
                } else {
                    EffectReport::Confirmed {
                        reference: answer.reference().to_string(),
                        result: answer.body().to_vec(),
                    }
                }
            };
            self.store()?.report_effect(claim, report).map_err(|error| error.to_string())?;
        }
        Ok(claims.len())
    }

    /// The service's normal run, which the fault may stop at any storage operation.
    fn flow(&mut self) -> Result<(), String> {
        self.open()?;
        for i in 0..INTENTS {
            self.place(i)?;
            if i % 2 == 1 {
                self.dispatch(true)?;
            }
        }
        for _ in 0..3 {
            self.clock.advance(Duration::from_millis(200));
            self.dispatch(true)?;
        }
        Ok(())
    }

    /// What a restarted service does until nothing is left to do.
    fn recover(&mut self, report: &mut OutboxSweepReport) -> Result<(), String> {
        let jump = if self.late_recovery { WINDOW_MS + LEASE_MS } else { LEASE_MS };
        self.clock.advance(Duration::from_millis(jump));
        for round in 0..20 {
            // Clients retry every request; a reservation that never committed is placed again.
            for i in 0..INTENTS {
                self.place(i)?;
            }
            while self.dispatch(false)? > 0 {}
            // What waits in the reconciliation queue: sent again inside the window, otherwise
            // resolved by asking the provider.
            let queue = self.store()?.reconciliation_queue(0).map_err(|error| error.to_string())?;
            if queue.is_empty() {
                return Ok(());
            }
            for entry in queue {
                let Attention::Effect { item, .. } = entry else {
                    return Err(format!("a record waits without its effect (round {round})"));
                };
                let store = self.store()?;
                let within = item.window_ends_at(&Self::policy()).is_none_or(|end| self.clock.now() < end);
                if within {
                    store
                        .retry_effect(&item.scope, &item.key, &item.effect, idemdb::ResolutionCause::Application)
                        .map_err(|error| error.to_string())?;
                } else {
                    report.reconciled += 1;
                    let found = match self.recovery {
                        Recovery::QueryFirst => self.provider.query(item.provider_key.as_str()),
                        Recovery::Reckless => None,
                    };
                    let state = match found {
                        Some(found) => ProviderState::Confirmed { reference: found.id, result: found.body },
                        None => ProviderState::NotFound,
                    };
                    store
                        .resolve_effect(
                            &item.scope,
                            &item.key,
                            &item.effect,
                            state,
                            idemdb::ResolutionCause::ProviderConfirmed,
                        )
                        .map_err(|error| error.to_string())?;
                }
            }
            self.clock.advance(Duration::from_millis(1_000));
        }
        Ok(())
    }

    fn check(&mut self, seed: u64, crash_at: Option<u64>, report: &mut OutboxSweepReport) {
        let doubles = self.provider.ledger().doubles();
        report.double_effects += doubles;
        report.effects += self.provider.ledger().total();
        if doubles > 0 {
            report.notes.push(format!("seed {seed:#x} crash {crash_at:?}: {:?}", self.provider.ledger().duplicates()));
        }
        let Ok(store) = self.store() else { return };
        let queued: Vec<IdempotencyKey> = store
            .reconciliation_queue(0)
            .map(|queue| {
                queue
                    .into_iter()
                    .filter_map(|entry| match entry {
                        Attention::Effect { item, .. } => Some(item.key),
                        Attention::Record { scoped, .. } => Some(scoped.key),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        for i in 0..INTENTS {
            let answer = store.reserve(Reserve::new(&self.scope, &key(i), &request()));
            let settled = matches!(answer, Ok(Reservation::Replay { .. })) || queued.contains(&key(i));
            if !settled {
                report.unresolved += 1;
                report.notes.push(format!("seed {seed:#x} crash {crash_at:?}: order-{i} ended {answer:?}"));
            }
        }
        if let Some(store) = self.store.as_mut()
            && let Ok(verified) = store.verify()
            && !verified.is_ok()
        {
            report.reopen_failures += 1;
            report.notes.push(format!("seed {seed:#x} crash {crash_at:?}: verify: {:?}", verified.problems));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_free_run_settles_every_intent_with_one_effect_each() {
        for seed in 0..8 {
            let report = run(seed, None);
            assert!(report.clean(), "{report:?}");
            assert_eq!(report.effects, INTENTS as u64, "seed {seed}: one effect per intent");
            assert!(probe(seed) > 20);
        }
    }
}

#[cfg(test)]
mod sweep_tests {
    use super::*;

    /// Every storage operation of two seeded runs: no provider key with two effects, every
    /// intent settled, every store reopened. (`cargo xtask reliability` runs thousands more.)
    #[test]
    fn crash_at_every_operation_of_the_outbox_flow() {
        let report = outbox_sweep(&OutboxSweepConfig { seeds: 2, seed: 42, threads: 2 });
        assert!(report.crash_points > 100, "{report:?}");
        assert!(report.crashes > 0);
        assert!(report.clean(), "{report:?}");
        assert!(report.reconciled > 0, "some runs resolve through a provider query: {report:?}");
    }

    /// The sweep sees what a service that skips the provider query does: second effects.
    #[test]
    fn a_reckless_recovery_is_caught() {
        let mut doubles = 0;
        for seed in 0..16u64 {
            for at in 1..=probe(seed) {
                doubles += run_with(seed, Some(at), Recovery::Reckless).double_effects;
            }
        }
        assert!(doubles > 0, "resending uncertain effects past the window must show as double effects");
    }
}
