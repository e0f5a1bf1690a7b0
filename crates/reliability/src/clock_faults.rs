//! Clock faults: the wall clock jumps forward and back (by seconds to years) and is put right
//! later, while clients reserve, complete, retry and purge, and the store is reopened cleanly
//! or after a kill. The checked property holds in **true** time (the time that passed, which the
//! simulation knows): a key completed within its retention is never acquired again, no lease
//! the store once found expired is live again, and no intent has a second effect.
//!
//! Each scenario runs on the fault-injecting disk of [`crate::fault`] with a [`ManualClock`]
//! whose wall clock is set apart from its monotonic clock. A jump is put right within nine
//! minutes of true time, inside the store's ten-minute confirmation period
//! (`docs/design.md`, "Time"): that is the promise under test. A kill halts the machine
//! before the store's handle is dropped (nothing is written on close) and restarts with every
//! write the kernel had accepted.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idemdb::{
    Durability, FingerprintBuilder, IdempotencyKey, ManualClock, OutcomeClass, Policy, Reservation, Reserve,
    Resolution, Scope, Store,
};

use crate::fault::Disk;
use crate::rng::{Rng, mix};

const T0: u64 = 1_800_000_000_000;
const SECOND: u64 = 1_000;
const MINUTE: u64 = 60 * SECOND;
const YEAR: u64 = 365 * 24 * 60 * MINUTE;
const LEASE: u64 = 20 * SECOND;
const RESPONSE: u64 = 5 * MINUTE;
const TOMBSTONE: u64 = 10 * MINUTE;
/// A jump is put right within this much true time (below the store's confirmation period).
const CORRECTED_WITHIN: u64 = 9 * MINUTE;
const INTENTS: u64 = 8;

/// How many scenarios, on how many threads.
#[derive(Debug, Clone)]
pub struct ClockFaultConfig {
    /// Scenarios to run.
    pub scenarios: u64,
    /// Worker threads.
    pub threads: usize,
    /// Seed: every scenario derives from it.
    pub seed: u64,
    /// A broken clock for the harness's own check: the store gets the wall clock without its
    /// monotonic reading, so it cannot tell a jump from time passing (the harness must then
    /// report keys acquired early).
    pub wall_clock_only: bool,
}

/// What the clock-fault scenarios found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClockFaultReport {
    /// Scenarios run.
    pub scenarios: u64,
    /// Store calls made.
    pub calls: u64,
    /// Wall-clock jumps forward, and back.
    pub jumps_forward: u64,
    /// Wall-clock jumps back.
    pub jumps_back: u64,
    /// Jumps put right.
    pub corrections: u64,
    /// Reopens after a clean close, and after a kill.
    pub reopens_clean: u64,
    /// Reopens after a kill.
    pub reopens_killed: u64,
    /// Completions (and reconciliations to a result) acknowledged.
    pub completions: u64,
    /// Retries of a completed key within its retention (true time): each must not acquire.
    pub retries_within_retention: u64,
    /// Retries within retention that acquired the key again: a known key made unknown early.
    pub acquired_early: u64,
    /// In-progress answers for a lease the store had already found expired.
    pub leases_revived: u64,
    /// Effects beyond the first for one binding of an intent.
    pub double: u64,
    /// Calls that failed, replays of the wrong body, and other answers the protocol does not
    /// allow here.
    pub unexpected: u64,
    /// The largest time a completion was stamped behind true time (ms): the documented
    /// allowance for a restart while the wall clock was set back (info).
    pub max_stamp_lag_ms: u64,
    /// The first few failures.
    pub notes: Vec<String>,
}

impl ClockFaultReport {
    fn add(&mut self, other: &ClockFaultReport) {
        self.scenarios += other.scenarios;
        self.calls += other.calls;
        self.jumps_forward += other.jumps_forward;
        self.jumps_back += other.jumps_back;
        self.corrections += other.corrections;
        self.reopens_clean += other.reopens_clean;
        self.reopens_killed += other.reopens_killed;
        self.completions += other.completions;
        self.retries_within_retention += other.retries_within_retention;
        self.acquired_early += other.acquired_early;
        self.leases_revived += other.leases_revived;
        self.double += other.double;
        self.unexpected += other.unexpected;
        self.max_stamp_lag_ms = self.max_stamp_lag_ms.max(other.max_stamp_lag_ms);
        for note in &other.notes {
            self.note(note.clone());
        }
    }

    fn note(&mut self, note: String) {
        if self.notes.len() < 12 {
            self.notes.push(note);
        }
    }

    /// Whether nothing broke the promise.
    pub fn clean(&self) -> bool {
        self.acquired_early == 0 && self.leases_revived == 0 && self.double == 0 && self.unexpected == 0
    }
}

/// Runs the scenarios on `config.threads` threads.
pub fn run_clock_faults(config: &ClockFaultConfig) -> ClockFaultReport {
    let next = AtomicU64::new(0);
    let total = Mutex::new(ClockFaultReport::default());
    std::thread::scope(|scope| {
        for _ in 0..config.threads.max(1) {
            scope.spawn(|| {
                let mut local = ClockFaultReport::default();
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= config.scenarios {
                        break;
                    }
                    local.add(&scenario(mix(&[config.seed, 0xc10c, index]), config.wall_clock_only));
                }
                total.lock().unwrap_or_else(std::sync::PoisonError::into_inner).add(&local);
            });
        }
    });
    total.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Where an intent is, as the client knows it.
#[derive(Debug, Clone)]
enum Intent {
    /// Not bound, or released: the next reservation acquires.
    Free,
    /// An attempt holds (or held) the lease and died; the effect happened when `effect`.
    Abandoned { fence: u64, effect: bool, seen_expired: bool },
    /// Completed at true time `at` with `body`, stamped `lag` ms behind true time.
    Done { at: u64, body: Vec<u8>, lag: u64 },
}

/// The wall clock of a [`ManualClock`] without its monotonic reading.
#[derive(Debug, Clone)]
struct WallClockOnly(ManualClock);

impl idemdb::Clock for WallClockOnly {
    fn now(&self) -> idemdb::Timestamp {
        self.0.now()
    }
}

struct Sim {
    seed: u64,
    rng: Rng,
    disk: Disk,
    clock: ManualClock,
    wall_clock_only: bool,
    /// True time (what passed), and the wall clock's error.
    truth: u64,
    offset: i64,
    /// True time by which the current jump is put right.
    correct_at: Option<u64>,
    /// Whether the store has read the clock since the last correction: a new jump waits for
    /// it, or two jumps would look to the store like one wall-clock error kept for longer
    /// than the period under test.
    seen_since_correction: bool,
    store: Option<Store>,
    intents: Vec<Intent>,
    /// Effects per (intent, binding); a binding ends when its key is forgotten or released.
    effects: HashMap<(u64, u64), u64>,
    bindings: Vec<u64>,
    report: ClockFaultReport,
    allowance: u64,
}

fn policy() -> Policy {
    Policy::default()
        .with_lease_ttl(Duration::from_millis(LEASE))
        .with_response_ttl(Duration::from_millis(RESPONSE))
        .with_tombstone_ttl(Duration::from_millis(TOMBSTONE))
}

fn scope() -> Option<Scope> {
    Scope::new("acme", "clock-charge").ok()
}

fn key(intent: u64) -> Option<IdempotencyKey> {
    IdempotencyKey::new(format!("intent-{intent}")).ok()
}

fn fingerprint(intent: u64) -> idemdb::Fingerprint {
    FingerprintBuilder::new().str_field("clock fault intent").field(&intent.to_be_bytes()).finish()
}

impl Sim {
    fn open(&mut self) {
        let builder = if self.wall_clock_only {
            Store::builder().clock(WallClockOnly(self.clock.clone()))
        } else {
            Store::builder().clock(self.clock.clone())
        };
        let opened = builder
            .default_policy(policy())
            .durability(Durability::Immediate)
            .secret_seed([7; 32])
            .cache_bytes(1 << 20)
            .open_backend(self.disk.backend());
        match opened {
            Ok(store) => self.store = Some(store),
            Err(error) => {
                self.report.unexpected += 1;
                self.report.note(format!("open: {error}"));
            }
        }
    }

    fn wall(&self) -> u64 {
        self.truth.saturating_add_signed(self.offset)
    }

    /// True time passes: seconds mostly, minutes sometimes.
    fn pass_time(&mut self) {
        let step = match self.rng.below(10) {
            0..=5 => self.rng.below(5 * SECOND),
            6..=8 => 5 * SECOND + self.rng.below(2 * MINUTE),
            _ => 2 * MINUTE + self.rng.below(6 * MINUTE),
        };
        self.truth += step;
        self.clock.advance(Duration::from_millis(step));
        if self.correct_at.is_some_and(|at| self.truth >= at) {
            self.offset = 0;
            self.correct_at = None;
            self.clock.set_wall(self.wall());
            self.report.corrections += 1;
            self.seen_since_correction = false;
        }
    }

    /// The wall clock jumps by a second to three years, forward or back; it is put right later.
    fn jump(&mut self) {
        if self.correct_at.is_some() || !self.seen_since_correction {
            return;
        }
        let exponent = self.rng.below(1_000);
        // Log-uniform between 1 s and 3 years.
        let size = (SECOND as f64 * ((3 * YEAR / SECOND) as f64).powf(exponent as f64 / 1_000.0)) as i64;
        if self.rng.chance(50) {
            self.offset = size;
            self.report.jumps_forward += 1;
        } else {
            self.offset = -size.min(i64::try_from(self.truth / 2).unwrap_or(i64::MAX));
            self.report.jumps_back += 1;
        }
        self.correct_at = Some(self.truth + self.rng.below(CORRECTED_WITHIN));
        self.clock.set_wall(self.wall());
    }

    fn reopen(&mut self) {
        if self.rng.chance(50) {
            self.store = None;
            self.report.reopens_clean += 1;
        } else {
            // kill -9: nothing runs on close; every write the kernel accepted survives.
            self.disk.halt();
            self.store = None;
            self.disk.crash(1);
            self.report.reopens_killed += 1;
        }
        self.open();
    }

    fn purge(&mut self) {
        let Some(store) = &self.store else { return };
        self.report.calls += 1;
        if let Err(error) = store.purge_expired(1 + usize::try_from(self.rng.below(8)).unwrap_or(0)) {
            self.report.unexpected += 1;
            self.report.note(format!("purge: {error}"));
        }
    }

    fn effect(&mut self, intent: u64) {
        let binding = self.bindings[intent as usize];
        let count = self.effects.entry((intent, binding)).or_insert(0);
        *count += 1;
        if *count > 1 {
            self.report.double += 1;
            self.report.note(format!("intent {intent}: effect {count} of one binding"));
        }
    }

    fn new_binding(&mut self, intent: u64) {
        self.bindings[intent as usize] += 1;
    }

    fn deliver(&mut self, intent: u64) {
        let (Some(scope), Some(key)) = (scope(), key(intent)) else { return };
        let Some(store) = &self.store else { return };
        self.report.calls += 1;
        let answer = match store.reserve(Reserve::new(&scope, &key, &fingerprint(intent))) {
            Ok(answer) => answer,
            Err(error) => {
                self.report.unexpected += 1;
                self.report.note(format!("reserve {intent}: {error}"));
                return;
            }
        };
        let state = self.intents[intent as usize].clone();
        match (answer, state) {
            (Reservation::Acquired(lease), state @ (Intent::Free | Intent::Done { .. })) => {
                if let Intent::Done { at, lag, .. } = &state {
                    let retention = at + RESPONSE + TOMBSTONE;
                    if self.truth + self.allowance + lag < retention {
                        self.report.retries_within_retention += 1;
                        self.report.acquired_early += 1;
                        self.report.note(format!(
                            "scenario {:#x}: intent {intent} completed at +{} s acquired again at +{} s (retention {} s)",
                            self.seed,
                            (at - T0) / SECOND,
                            (self.truth - T0) / SECOND,
                            (RESPONSE + TOMBSTONE) / SECOND
                        ));
                        // The client would run it again; the harness does not, and carries on.
                        self.intents[intent as usize] =
                            Intent::Abandoned { fence: lease.fence(), effect: true, seen_expired: false };
                        return;
                    }
                }
                if matches!(state, Intent::Done { .. }) {
                    // Forgotten after its retention: a new binding of the key, a new intent.
                    self.new_binding(intent);
                }
                let body = format!("charge-{intent}-{}", self.bindings[intent as usize]).into_bytes();
                if self.rng.chance(80) {
                    self.effect(intent);
                    self.complete(intent, &lease, body);
                } else {
                    // The attempt dies, before or after its effect.
                    let effect = self.rng.chance(50);
                    if effect {
                        self.effect(intent);
                    }
                    self.intents[intent as usize] =
                        Intent::Abandoned { fence: lease.fence(), effect, seen_expired: false };
                }
            }
            (
                Reservation::Replay { outcome: OutcomeClass::Completed, body },
                Intent::Done { body: expected, at, lag },
            ) if body == expected => {
                if self.truth + self.allowance + lag < at + RESPONSE + TOMBSTONE {
                    self.report.retries_within_retention += 1;
                }
            }
            (Reservation::Expired { outcome: OutcomeClass::Completed }, Intent::Done { at, lag, .. }) => {
                if self.truth + self.allowance + lag < at + RESPONSE + TOMBSTONE {
                    self.report.retries_within_retention += 1;
                }
            }
            (Reservation::InProgress { .. }, Intent::Abandoned { seen_expired, fence, .. }) => {
                if seen_expired {
                    self.report.leases_revived += 1;
                    self.report.note(format!("intent {intent}: lease {fence} found expired, then in progress again"));
                }
            }
            (Reservation::NeedsReconciliation { .. }, Intent::Abandoned { effect, fence, .. }) => {
                self.intents[intent as usize] = Intent::Abandoned { fence, effect, seen_expired: true };
                self.reconcile(intent, effect);
            }
            (answer, state) => {
                self.report.unexpected += 1;
                self.report.note(format!("intent {intent} in {state:?} answered {answer:?}"));
            }
        }
    }

    fn complete(&mut self, intent: u64, lease: &idemdb::Lease, body: Vec<u8>) {
        let Some(store) = &self.store else { return };
        self.report.calls += 1;
        match store.complete(lease, body.clone()) {
            Ok(()) => self.done(intent, body),
            Err(error) => {
                self.report.unexpected += 1;
                self.report.note(format!("complete {intent}: {error}"));
            }
        }
    }

    fn reconcile(&mut self, intent: u64, effect: bool) {
        let (Some(scope), Some(key)) = (scope(), key(intent)) else { return };
        let Some(store) = &self.store else { return };
        self.report.calls += 1;
        let body = format!("charge-{intent}-{}", self.bindings[intent as usize]).into_bytes();
        let resolution = if effect { Resolution::Completed(body.clone()) } else { Resolution::Released };
        match store.reconcile(&scope, &key, resolution, idemdb::ResolutionCause::Application) {
            Ok(()) if effect => self.done(intent, body),
            Ok(()) => {
                self.intents[intent as usize] = Intent::Free;
                self.new_binding(intent);
            }
            Err(error) => {
                self.report.unexpected += 1;
                self.report.note(format!("reconcile {intent}: {error}"));
            }
        }
    }

    /// Records an acknowledged completion, and how far behind true time the store stamped it.
    fn done(&mut self, intent: u64, body: Vec<u8>) {
        let stamped = self.store.as_ref().map_or(self.truth, |store| store.now().as_millis());
        let lag = self.truth.saturating_sub(stamped);
        self.report.max_stamp_lag_ms = self.report.max_stamp_lag_ms.max(lag);
        self.report.completions += 1;
        self.intents[intent as usize] = Intent::Done { at: self.truth, body, lag };
    }
}

/// Runs the one scenario of seed `seed` (as a note names it), to reproduce a finding.
pub fn run_clock_fault_scenario(seed: u64, wall_clock_only: bool) -> ClockFaultReport {
    scenario(seed, wall_clock_only)
}

/// One scenario: 40 to 120 steps of time passing, jumps and corrections, deliveries, purges
/// and reopens.
fn scenario(seed: u64, wall_clock_only: bool) -> ClockFaultReport {
    let clock = ManualClock::new(T0);
    let mut sim = Sim {
        seed,
        rng: Rng::new(seed),
        disk: Disk::new(),
        clock,
        wall_clock_only,
        truth: T0,
        offset: 0,
        correct_at: None,
        seen_since_correction: true,
        store: None,
        intents: vec![Intent::Free; INTENTS as usize],
        effects: HashMap::new(),
        bindings: vec![0; INTENTS as usize],
        report: ClockFaultReport { scenarios: 1, ..ClockFaultReport::default() },
        allowance: 0,
    };
    sim.open();
    let steps = 40 + sim.rng.below(80);
    for _ in 0..steps {
        sim.pass_time();
        let calls = sim.report.calls;
        // The documented tolerance: one second, plus 0.1 % of the time since T0.
        sim.allowance = SECOND + (sim.truth - T0) / 1_000;
        match sim.rng.below(100) {
            0..=11 => sim.jump(),
            12..=17 => sim.reopen(),
            18..=29 => sim.purge(),
            _ => {
                let intent = sim.rng.below(INTENTS);
                sim.deliver(intent);
            }
        }
        if sim.report.calls > calls {
            sim.seen_since_correction = true;
        }
    }
    sim.store = None;
    sim.report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_jump_correct_reopen_complete_and_retry() {
        let report =
            run_clock_faults(&ClockFaultConfig { scenarios: 40, threads: 2, seed: 11, wall_clock_only: false });
        assert!(report.clean(), "{report:?}");
        assert_eq!(report.scenarios, 40);
        for (what, count) in [
            ("forward jumps", report.jumps_forward),
            ("jumps back", report.jumps_back),
            ("corrections", report.corrections),
            ("clean reopens", report.reopens_clean),
            ("killed reopens", report.reopens_killed),
            ("completions", report.completions),
            ("retries within retention", report.retries_within_retention),
        ] {
            assert!(count > 0, "no {what}: {report:?}");
        }
    }

    /// The harness bites: a store that cannot measure elapsed time believes every jump, and
    /// the scenarios report keys acquired within their retention.
    #[test]
    fn a_store_without_a_monotonic_clock_is_caught() {
        let report = run_clock_faults(&ClockFaultConfig { scenarios: 40, threads: 2, seed: 11, wall_clock_only: true });
        assert!(report.acquired_early > 0, "{report:?}");
    }
}
