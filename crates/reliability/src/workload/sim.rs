//! One run: the client, its store on the fault-injecting disk, the provider's ledger, power
//! cuts and recovery, and the three phases of [`run`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use idemdb::redb::{ReadableTable, TableDefinition};
use idemdb::{
    Error, Executed, Failure, Fingerprint, FingerprintBuilder, IdempotencyKey, Lease, ManualClock, OutcomeClass,
    Policy, Reservation, Reserve, Resolution, Scope, State, Store,
};

use super::counts::Counts;
use super::scenario::{Action, Adapter, Injection, JOURNAL_BYTES, LEASE_MS, Scenario, T0, TOMBSTONE_MS, Workload};
use crate::fault::{Disk, FaultKind, FaultPlan};
use crate::rng::{Rng, mix};
use idemdb_fake_provider::EffectLedger;

/// The application table of the same-database workload: effects per intent.
const APP_EFFECTS: TableDefinition<u64, u64> = TableDefinition::new("app_effects");

/// Why the client stopped.
#[derive(Debug)]
enum Stop {
    /// The machine died during the call: nothing the call returned can be observed.
    Crashed,
    /// The call failed (an injected I/O error); the client reopens and retries.
    Failed(String),
}

/// What the client saw for an intent.
#[derive(Debug, Clone)]
struct Seen {
    outcome: OutcomeClass,
    body: Vec<u8>,
    at: u64,
}

/// What the provider does on an intent's first attempt (the uncertain workload).
enum Fate {
    Succeed,
    TimeoutAfterEffect,
    TimeoutBeforeEffect,
    Decline,
    Retryable,
}

fn intent_name(i: usize) -> String {
    format!("intent-{i}")
}

fn key(i: usize) -> IdempotencyKey {
    IdempotencyKey::new(intent_name(i)).unwrap_or_else(|_| unreachable_key())
}

#[cold]
fn unreachable_key() -> IdempotencyKey {
    IdempotencyKey::from_random_bytes([0; 16]) // "intent-N" is always valid: a fallback, no panic
}

fn fingerprint(i: usize) -> Fingerprint {
    FingerprintBuilder::new().str_field("reliability intent").field(&(i as u64).to_be_bytes()).finish()
}

/// The simulation of one run.
struct Sim {
    scenario: Scenario,
    scope: Scope,
    disk: Disk,
    clock: ManualClock,
    provider: EffectLedger,
    store: Option<Store>,
    seen: BTreeMap<usize, Seen>,
    done: BTreeSet<usize>,
    counts: Counts,
    rng: Rng,
}

fn check<T, E: std::fmt::Display>(disk: &Disk, result: Result<T, E>) -> Result<T, Stop> {
    if disk.crashed() {
        return Err(Stop::Crashed);
    }
    result.map_err(|error| Stop::Failed(error.to_string()))
}

impl Sim {
    fn new(scenario: Scenario, seed: u64) -> Sim {
        let disk = Disk::new();
        disk.set_lying_sync(scenario.adapter == Adapter::LyingDisk);
        Sim {
            scenario,
            scope: Scope::new("acme", scenario.workload.name()).unwrap_or_else(|_| unreachable_scope()),
            disk,
            clock: ManualClock::new(T0),
            provider: EffectLedger::new(),
            store: None,
            seen: BTreeMap::new(),
            done: BTreeSet::new(),
            counts: Counts { runs: 1, ..Counts::default() },
            rng: Rng::new(seed),
        }
    }

    fn policy(&self) -> Policy {
        Policy::default()
            .with_lease_ttl(Duration::from_millis(LEASE_MS))
            .with_response_ttl(Duration::from_millis(self.scenario.workload.response_ms()))
            .with_tombstone_ttl(Duration::from_millis(TOMBSTONE_MS))
    }

    fn open(&mut self) -> Result<(), Stop> {
        self.store = None;
        let opened = Store::builder()
            .default_policy(self.policy())
            .clock(self.clock.clone())
            .durability(self.scenario.store_durability())
            .secret_seed([7; 32])
            .cache_bytes(1 << 20);
        let opened = if self.scenario.journal {
            opened
                .journal_bytes(JOURNAL_BYTES)
                .open_backend_with_journal(self.disk.backend(), self.disk.journal_backend())
        } else {
            opened.journal(false).open_backend(self.disk.backend())
        };
        let store = check(&self.disk, opened)?;
        self.store = Some(store);
        Ok(())
    }

    fn store(&self) -> Result<&Store, Stop> {
        self.store.as_ref().ok_or_else(|| Stop::Failed("store is not open".into()))
    }

    fn now(&self) -> u64 {
        idemdb::Clock::now(&self.clock).as_millis()
    }

    fn saw(&mut self, i: usize, outcome: OutcomeClass, body: Vec<u8>) {
        let at = self.now();
        if let Some(before) = self.seen.get(&i)
            && (before.outcome != outcome || before.body != body)
        {
            self.counts.lost += 1;
            self.counts.note(format!(
                "{:?}: intent {i} replayed {outcome} {:?} after the client saw {} {:?}",
                self.scenario,
                String::from_utf8_lossy(&body),
                before.outcome,
                String::from_utf8_lossy(&before.body)
            ));
        }
        self.seen.insert(i, Seen { outcome, body, at });
        self.done.insert(i);
    }

    fn fate(&self, i: usize, lease: &Lease) -> Fate {
        if self.scenario.workload != Workload::Uncertain || lease.attempt() != 1 {
            return Fate::Succeed;
        }
        match i % 4 {
            0 => Fate::TimeoutAfterEffect,
            1 => Fate::TimeoutBeforeEffect,
            2 => Fate::Decline,
            _ => Fate::Retryable,
        }
    }

    /// One intent, delivered until it settles: what a client does with an intent it has not
    /// seen finished.
    fn deliver(&mut self, i: usize) -> Result<(), Stop> {
        let (key, fingerprint, name) = (key(i), fingerprint(i), intent_name(i));
        for _ in 0..16 {
            self.clock.advance(Duration::from_millis(1));
            let store = self.store()?;
            match check(&self.disk, store.reserve(Reserve::new(&self.scope, &key, &fingerprint)))? {
                Reservation::Acquired(lease) => {
                    if self.scenario.flushes_before_effect() {
                        // Persist the key before the request leaves.
                        check(&self.disk, store.flush())?;
                    }
                    match self.fate(i, &lease) {
                        Fate::Succeed => {
                            let body = self.provider.perform(&name).body;
                            check(&self.disk, store.complete(&lease, body.clone()))?;
                            self.saw(i, OutcomeClass::Completed, body);
                            return Ok(());
                        }
                        Fate::TimeoutAfterEffect => {
                            self.provider.perform(&name);
                            check(&self.disk, store.fail(&lease, Failure::Uncertain))?;
                        }
                        Fate::TimeoutBeforeEffect => check(&self.disk, store.fail(&lease, Failure::Uncertain))?,
                        Fate::Decline => {
                            let body = format!("declined:{i}").into_bytes();
                            check(&self.disk, store.fail(&lease, Failure::Definitive(body.clone())))?;
                            self.saw(i, OutcomeClass::Failed, body);
                            return Ok(());
                        }
                        Fate::Retryable => check(&self.disk, store.fail(&lease, Failure::Retryable))?,
                    }
                }
                Reservation::Replay { outcome, body } => {
                    self.saw(i, outcome, body);
                    return Ok(());
                }
                Reservation::InProgress { retry_after } => {
                    self.clock.advance(retry_after + Duration::from_millis(1));
                }
                Reservation::NeedsReconciliation { .. } => {
                    let resolution = match (self.scenario.adapter, self.provider.first(&name).map(|effect| effect.body))
                    {
                        (Adapter::RerunInProgress, _) | (_, None) => Resolution::Released,
                        (_, Some(body)) => Resolution::Completed(body),
                    };
                    check(
                        &self.disk,
                        store.reconcile(&self.scope, &key, resolution, idemdb::ResolutionCause::Application),
                    )?;
                }
                Reservation::Expired { .. } => {
                    self.done.insert(i);
                    return Ok(());
                }
                other => {
                    self.counts.unexpected += 1;
                    self.counts.note(format!("{:?}: intent {i} answered {other:?}", self.scenario));
                    self.done.insert(i);
                    return Ok(());
                }
            }
        }
        self.counts.unexpected += 1;
        self.counts.note(format!("{:?}: intent {i} did not settle in 16 deliveries", self.scenario));
        self.done.insert(i);
        Ok(())
    }

    /// One same-database intent: the business write and the completion in one commit.
    fn execute(&mut self, i: usize) -> Result<(), Stop> {
        self.clock.advance(Duration::from_millis(1));
        let (key, fingerprint) = (key(i), fingerprint(i));
        let store = self.store()?;
        let request = Reserve::new(&self.scope, &key, &fingerprint);
        let executed = store.execute(request, |txn| -> Result<Vec<u8>, idemdb::redb::Error> {
            let mut effects = txn.tables_checkpointing().open_table(APP_EFFECTS)?;
            let n = effects.get(i as u64)?.map_or(0, |v| v.value()) + 1;
            effects.insert(i as u64, n)?;
            Ok(format!("credit:{i}:{n}").into_bytes())
        });
        match check(&self.disk, executed)? {
            Executed::Ran { result } => self.saw(i, OutcomeClass::Completed, result),
            Executed::Answered(Reservation::Replay { outcome, body }) => self.saw(i, outcome, body),
            Executed::Answered(other) => {
                self.counts.unexpected += 1;
                self.counts.note(format!("{:?}: execute {i} answered {other:?}", self.scenario));
                self.done.insert(i);
            }
            _ => {
                self.counts.unexpected += 1;
                self.done.insert(i);
            }
        }
        Ok(())
    }

    fn perform(&mut self, action: Action) -> Result<(), Stop> {
        match action {
            Action::Deliver(i) => self.deliver(i),
            Action::Execute(i) => self.execute(i),
            Action::Advance(ms) => {
                self.clock.advance(Duration::from_millis(ms));
                Ok(())
            }
            Action::Purge => {
                let store = self.store()?;
                check(&self.disk, store.purge_expired(16)).map(drop)
            }
        }
    }

    /// Effects per intent of the same-database workload, read from the application's table.
    fn app_effects(&self) -> Result<BTreeMap<usize, u64>, String> {
        let store = self.store.as_ref().ok_or("store is not open")?;
        store
            .write(|txn| -> Result<BTreeMap<usize, u64>, Error> {
                let mut out = BTreeMap::new();
                let table = txn.tables_checkpointing().open_table(APP_EFFECTS)?;
                for entry in table.iter().map_err(Error::from)? {
                    let (k, v) = entry.map_err(Error::from)?;
                    out.insert(usize::try_from(k.value()).unwrap_or(usize::MAX), v.value());
                }
                Ok(out)
            })
            .map_err(|error| error.to_string())
    }

    /// Power cut, then reopen until the store opens (crashing again during recovery as
    /// planned); then integrity and seen-outcome checks. `Err` when the disk no longer opens.
    fn power_cut(&mut self, injection: &Injection, cut: u64) -> Result<(), ()> {
        self.disk.halt();
        self.store = None;
        let mut seed = mix(&[injection.damage_seed, cut]);
        self.disk.crash(seed);
        self.counts.power_cuts += 1;
        let mut crashes_left = injection.recovery_crashes;
        loop {
            if crashes_left > 0 {
                let at = 1 + self.rng.below(12);
                self.disk.arm(&[FaultPlan { at, kind: FaultKind::Crash }]);
            } else {
                self.disk.disarm();
            }
            self.counts.reopens += 1;
            match self.open() {
                Ok(()) => {
                    self.disk.disarm();
                    break;
                }
                Err(Stop::Crashed) => {
                    crashes_left = crashes_left.saturating_sub(1);
                    self.disk.halt();
                    self.store = None;
                    seed = mix(&[seed, 1]);
                    self.disk.crash(seed);
                    self.counts.power_cuts += 1;
                }
                Err(Stop::Failed(error)) => {
                    self.disk.disarm();
                    // A crash planned for recovery that did not fire leaves the open to fail on
                    // its own merits: the disk does not open.
                    self.counts.reopen_failures += 1;
                    self.counts.note(format!("{:?} {injection:?}: reopen failed: {error}", self.scenario));
                    return Err(());
                }
            }
        }
        self.verify(injection);
        self.check_seen(injection);
        Ok(())
    }

    fn verify(&mut self, injection: &Injection) {
        let Some(store) = self.store.as_mut() else { return };
        match store.verify() {
            Ok(report) if report.is_ok() => {}
            Ok(report) => {
                self.counts.integrity_failures += 1;
                let problems: Vec<String> =
                    report.problems.iter().map(|p| format!("{}: {}", p.table, p.detail)).collect();
                self.counts.note(format!(
                    "{:?} {injection:?}: verify: storage_ok={} {problems:?}",
                    self.scenario, report.storage_ok
                ));
            }
            Err(error) => {
                self.counts.integrity_failures += 1;
                self.counts.note(format!("{:?} {injection:?}: verify failed: {error}", self.scenario));
            }
        }
        if self.scenario.workload == Workload::SameDb {
            self.check_same_db(injection);
        }
    }

    /// The business write and the completion commit together: an intent has one application
    /// effect exactly when its record is completed.
    fn check_same_db(&mut self, injection: &Injection) {
        let effects = match self.app_effects() {
            Ok(effects) => effects,
            Err(error) => {
                self.counts.integrity_failures += 1;
                self.counts.note(format!("{:?} {injection:?}: reading the app table: {error}", self.scenario));
                return;
            }
        };
        for i in 0..self.scenario.workload.intents() {
            let Some(store) = self.store.as_ref() else { return };
            let completed = matches!(
                store.get(&self.scope, &key(i)),
                Ok(Some(record)) if record.state.kind() == idemdb::StateKind::Completed
            );
            let n = effects.get(&i).copied().unwrap_or(0);
            if n > 1 || completed != (n == 1) {
                self.counts.integrity_failures += 1;
                self.counts.note(format!(
                    "{:?} {injection:?}: intent {i}: {n} app effects, record completed: {completed}",
                    self.scenario
                ));
            }
        }
    }

    /// Every outcome the client saw must be replayed byte for byte (or be expired after its
    /// response TTL).
    fn check_seen(&mut self, injection: &Injection) {
        let response_ms = self.scenario.workload.response_ms();
        let seen: Vec<(usize, Seen)> = self.seen.iter().map(|(i, s)| (*i, s.clone())).collect();
        for (i, seen) in seen {
            let Some(store) = self.store.as_ref() else { return };
            // Read, not reserve: checking must not take a lease the client would then wait on.
            let answer = store.get(&self.scope, &key(i));
            let now = self.now();
            let kept = match answer.as_ref().map(|record| record.as_ref().map(|r| (&r.state, r.fingerprint))) {
                Ok(Some((State::Completed { result, .. }, fp))) => {
                    seen.outcome == OutcomeClass::Completed && *result == seen.body && fp == fingerprint(i)
                }
                Ok(Some((State::Failed { error, .. }, fp))) => {
                    seen.outcome == OutcomeClass::Failed && *error == seen.body && fp == fingerprint(i)
                }
                Ok(Some((State::Tombstone { outcome, .. }, _))) => {
                    *outcome == seen.outcome && now >= seen.at + response_ms
                }
                _ => false,
            };
            if kept {
                self.counts.completions_verified += 1;
                continue;
            }
            if self.scenario.claims_durable() {
                self.counts.lost += 1;
                self.counts.note(format!(
                    "{:?} {injection:?}: intent {i} saw {} {:?}, after reopen {answer:?}",
                    self.scenario,
                    seen.outcome,
                    String::from_utf8_lossy(&seen.body)
                ));
            } else {
                self.counts.rolled_back += 1;
            }
            // The client retries it (an eventual-mode rollback is reconciled with the provider).
            self.seen.remove(&i);
            self.done.remove(&i);
        }
    }

    /// After a crash: the client retries every intent it has not seen finished.
    fn settle(&mut self) -> Result<(), Stop> {
        for i in 0..self.scenario.workload.intents() {
            if self.done.contains(&i) {
                continue;
            }
            match self.scenario.workload {
                Workload::SameDb => self.execute(i)?,
                _ => self.deliver(i)?,
            }
        }
        Ok(())
    }

    fn count_doubles(&mut self) {
        let doubles = match self.scenario.workload {
            Workload::SameDb => match self.app_effects() {
                Ok(effects) => effects.values().map(|n| n.saturating_sub(1)).sum(),
                Err(_) => 0,
            },
            _ => self.provider.doubles(),
        };
        if doubles > 0 {
            self.counts.note(format!("{:?}: {doubles} double effects", self.scenario));
        }
        self.counts.double += doubles;
    }
}

#[cold]
fn unreachable_scope() -> Scope {
    Scope::new("x", "x").unwrap_or_else(|_| unreachable_scope())
}

/// Counts the storage operations (writes, length changes, syncs) of a fault-free run of the
/// scenario's script, from store creation: the operation indices a sweep can crash at.
pub fn probe_ops(scenario: Scenario) -> u64 {
    let mut sim = Sim::new(scenario, 0);
    sim.disk.arm(&[]);
    if sim.open().is_err() {
        return 0;
    }
    for action in scenario.workload.script() {
        if sim.perform(action).is_err() {
            break;
        }
    }
    sim.disk.ops()
}

/// Runs the scenario once with `injection` and returns what it found.
pub fn run(scenario: Scenario, injection: &Injection) -> Counts {
    let mut sim = Sim::new(scenario, mix(&[injection.damage_seed, 0x5eed]));
    sim.disk.arm(injection.plan.as_slice());
    let mut cuts = 0u64;
    let mut crashed = false;
    // Phase 1: the script, with the fault armed from store creation on. A failed call is
    // retried after a reopen (up to three times); a crash, or a device that keeps failing,
    // ends the phase with a power cut.
    'script: for action in scenario.workload.script() {
        let mut failures = 0;
        loop {
            let result = match sim.store {
                None => sim.open().and_then(|()| sim.perform(action)),
                Some(_) => sim.perform(action),
            };
            match result {
                Ok(()) => break,
                Err(Stop::Crashed) => {
                    crashed = true;
                    break 'script;
                }
                Err(Stop::Failed(_)) => {
                    failures += 1;
                    sim.store = None;
                    if failures >= 3 {
                        crashed = true;
                        break 'script;
                    }
                }
            }
        }
    }
    // Phase 2: power cut, recovery, retries of everything unfinished (more faults only while
    // the store recovers).
    if crashed {
        cuts += 1;
        if sim.power_cut(injection, cuts).is_err() {
            return finish(sim);
        }
        if let Err(stop) = sim.settle() {
            sim.counts.unexpected += 1;
            sim.counts.note(format!("{scenario:?} {injection:?}: retries after recovery failed: {stop:?}"));
        }
    } else if sim.store.is_none() && sim.open().is_err() {
        sim.counts.reopen_failures += 1;
        sim.counts.note(format!("{scenario:?} {injection:?}: reopen after a failed call failed"));
        return finish(sim);
    }
    for i in 0..scenario.workload.intents() {
        if !sim.done.contains(&i) {
            sim.counts.unexpected += 1;
            sim.counts.note(format!("{scenario:?} {injection:?}: intent {i} never settled"));
        }
    }
    // Phase 3: a last power cut with everything settled; every seen outcome must survive it
    // (with durable commits), then the effects are counted.
    cuts += 1;
    let last = Injection { recovery_crashes: 0, ..*injection };
    if sim.power_cut(&last, cuts).is_ok()
        && let Err(stop) = sim.settle()
    {
        sim.counts.unexpected += 1;
        sim.counts.note(format!("{scenario:?} {injection:?}: retries after the last cut failed: {stop:?}"));
    }
    finish(sim)
}

fn finish(mut sim: Sim) -> Counts {
    sim.count_doubles();
    sim.counts.faults_fired = sim.disk.faults_fired();
    sim.store = None;
    sim.counts
}
