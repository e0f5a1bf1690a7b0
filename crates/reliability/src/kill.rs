//! Multi-process `kill -9`: a child process works on a file store and reports every outcome it
//! returned; the parent kills it with SIGKILL at random moments (including while the store file
//! is being created), reopens the file and checks that nothing reported is lost, that no intent
//! has two effects and that the file always opens and verifies.
//!
//! The provider is a ledger file beside the store. Its effect is one `write(2)` of a line
//! `E <intent> <body>` in append mode, which a SIGKILL cannot split. The child reports
//! `C <intent> <body>` on stdout once `complete` (or a replay) returned; the parent reads those
//! lines from the pipe, which keeps them after the child is gone.
//!
//! A SIGKILL loses no write the kernel accepted (the page cache survives): this test covers the
//! process dying at any instruction, the power-cut cases are covered by [`crate::sweep`].

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use idemdb::{
    FingerprintBuilder, IdempotencyKey, OutcomeClass, Policy, Reservation, Reserve, Resolution, Scope, State, Store,
};

use crate::rng::Rng;

/// Lease of the child's attempts: short, so an attempt killed while holding it is reconciled
/// soon by the next child.
pub const CHILD_LEASE_MS: u64 = 40;

pub(crate) fn policy() -> Policy {
    Policy::default().with_lease_ttl(Duration::from_millis(CHILD_LEASE_MS))
}

pub(crate) fn scope() -> Scope {
    Scope::new("acme", "kill-charge").unwrap_or_else(|_| fallback_scope())
}

#[cold]
fn fallback_scope() -> Scope {
    Scope::new("x", "x").unwrap_or_else(|_| fallback_scope())
}

pub(crate) fn intent_key(i: u64) -> Result<IdempotencyKey, String> {
    IdempotencyKey::new(format!("kill-{i}")).map_err(|e| e.to_string())
}

fn fingerprint(i: u64) -> idemdb::Fingerprint {
    FingerprintBuilder::new().str_field("kill intent").field(&i.to_be_bytes()).finish()
}

/// The ledger: the first effect's body per intent, and effects per intent.
pub(crate) fn read_ledger(path: &Path) -> (BTreeMap<u64, String>, BTreeMap<u64, u64>) {
    let mut first = BTreeMap::new();
    let mut count = BTreeMap::new();
    let text = fs::read_to_string(path).unwrap_or_default();
    for line in text.lines() {
        let mut parts = line.splitn(3, ' ');
        if let (Some("E"), Some(intent), Some(body)) = (parts.next(), parts.next(), parts.next())
            && let Ok(intent) = intent.parse::<u64>()
        {
            first.entry(intent).or_insert_with(|| body.to_string());
            *count.entry(intent).or_insert(0) += 1;
        }
    }
    (first, count)
}

/// The child process: `reliability-child <store> <ledger> <intent>...`. Delivers every intent
/// until it settles, printing `O` once the store is open and `C <intent> <body>` for each
/// outcome returned.
///
/// # Errors
/// A description of what failed (printed by the binary as `X <error>`).
pub fn child_main(args: &[String]) -> Result<(), String> {
    let [store_path, ledger_path, intents @ ..] = args else {
        return Err("usage: reliability-child <store> <ledger> <intent>...".into());
    };
    let store = Store::builder().default_policy(policy()).open(store_path).map_err(|e| format!("open: {e}"))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "O").and_then(|()| out.flush()).map_err(|e| e.to_string())?;
    let mut ledger = OpenOptions::new().create(true).append(true).open(ledger_path).map_err(|e| e.to_string())?;
    for intent in intents {
        let i: u64 = intent.parse().map_err(|_| format!("bad intent {intent}"))?;
        deliver(&store, &mut ledger, Path::new(ledger_path), i, &mut out)?;
    }
    Ok(())
}

/// Delivers intent `i` until it settles: reserve, the effect (one append to the ledger), complete
/// (or reconcile an attempt killed mid-effect against the ledger), printing `C <intent> <body>`
/// once the outcome returned.
///
/// # Errors
/// A description of what failed.
pub(crate) fn deliver(
    store: &Store,
    ledger: &mut std::fs::File,
    ledger_path: &Path,
    i: u64,
    out: &mut impl Write,
) -> Result<(), String> {
    let scope = scope();
    let (key, fp) = (intent_key(i)?, fingerprint(i));
    for _ in 0..64 {
        match store.reserve(Reserve::new(&scope, &key, &fp)).map_err(|e| format!("reserve {i}: {e}"))? {
            Reservation::Acquired(lease) => {
                let body = format!("ch-{i}-{}", std::process::id());
                // The effect: one append, which a SIGKILL cannot split.
                ledger.write_all(format!("E {i} {body}\n").as_bytes()).map_err(|e| e.to_string())?;
                store.complete(&lease, body.clone().into_bytes()).map_err(|e| format!("complete {i}: {e}"))?;
                writeln!(out, "C {i} {body}").and_then(|()| out.flush()).map_err(|e| e.to_string())?;
                return Ok(());
            }
            Reservation::Replay { outcome: OutcomeClass::Completed, body } => {
                writeln!(out, "C {i} {}", String::from_utf8_lossy(&body))
                    .and_then(|()| out.flush())
                    .map_err(|e| e.to_string())?;
                return Ok(());
            }
            Reservation::InProgress { retry_after } => std::thread::sleep(retry_after + Duration::from_millis(1)),
            Reservation::NeedsReconciliation { .. } => {
                let (first, _) = read_ledger(ledger_path);
                let resolution = match first.get(&i) {
                    Some(body) => Resolution::Completed(body.clone().into_bytes()),
                    None => Resolution::Released,
                };
                store
                    .reconcile(&scope, &key, resolution, idemdb::ResolutionCause::Application)
                    .map_err(|e| format!("reconcile {i}: {e}"))?;
            }
            other => return Err(format!("intent {i}: unexpected answer {other:?}")),
        }
    }
    Err(format!("intent {i} did not settle"))
}

/// How many kills, and where the child binary is.
#[derive(Debug, Clone)]
pub struct KillConfig {
    /// The `reliability-child` executable.
    pub child: PathBuf,
    /// Kills to perform (children that finished before the kill do not count).
    pub kills: u64,
    /// A new store file after this many kills (the first kill on each file may land during
    /// its creation).
    pub kills_per_file: u64,
    /// New intents per child.
    pub intents_per_child: u64,
    /// Schedule seed.
    pub seed: u64,
    /// Where the files go (a temporary directory when `None`).
    pub dir: Option<PathBuf>,
}

/// What the kill test found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KillReport {
    /// Children killed while running.
    pub kills: u64,
    /// Of which while the store was still being opened or created (before the child said `O`).
    pub kills_before_open: u64,
    /// Of which while the store file was being created: the temporary file it is created under
    /// was left beside it.
    pub kills_during_creation: u64,
    /// Children that finished before their kill (not counted as kills).
    pub finished_early: u64,
    /// Store files used.
    pub files: u64,
    /// Outcomes reported by children.
    pub completions_reported: u64,
    /// Reported outcomes found stored after a kill (checked after every kill).
    pub completions_verified: u64,
    /// Reported outcomes not found as reported.
    pub lost: u64,
    /// Effects beyond the first for an intent.
    pub double: u64,
    /// Reopens that failed.
    pub unopenable: u64,
    /// `verify` problems after a reopen.
    pub integrity_failures: u64,
    /// Children that reported an error (`X ...`).
    pub child_errors: u64,
    /// The first few failures.
    pub notes: Vec<String>,
}

impl KillReport {
    fn note(&mut self, note: String) {
        if self.notes.len() < 12 {
            self.notes.push(note);
        }
    }

    /// Whether nothing breaks a promise.
    pub fn clean(&self) -> bool {
        self.lost == 0
            && self.double == 0
            && self.unopenable == 0
            && self.integrity_failures == 0
            && self.child_errors == 0
    }
}

struct FileState {
    store: PathBuf,
    ledger: PathBuf,
    reported: BTreeMap<u64, String>,
    pending: BTreeSet<u64>,
    next: u64,
    kills: u64,
    doubles_counted: u64,
}

/// Runs the kill test.
///
/// # Errors
/// I/O errors of the harness itself (temporary directory, spawning the child).
pub fn run_kills(config: &KillConfig) -> std::io::Result<KillReport> {
    let (_temp, root) = work_dir(config.dir.as_deref(), None)?;
    let mut rng = Rng::new(config.seed);
    let mut report = KillReport::default();
    let mut file: Option<FileState> = None;
    let mut attempts = 0u64;
    // How long a child takes from spawn to an open store on a new file (fsync latency varies
    // a lot): creation-time kills are drawn within it.
    let mut creation_us: u64 = 5_000;
    while report.kills < config.kills && attempts < config.kills * 4 + 16 {
        attempts += 1;
        let state = match &mut file {
            Some(state) if state.kills < config.kills_per_file => state,
            _ => {
                report.files += 1;
                let dir = root.join(format!("file-{}", report.files));
                if dir.exists() {
                    fs::remove_dir_all(&dir)?;
                }
                fs::create_dir_all(&dir)?;
                file.insert(FileState {
                    store: dir.join("store.idemdb"),
                    ledger: dir.join("ledger.txt"),
                    reported: BTreeMap::new(),
                    pending: BTreeSet::new(),
                    next: 0,
                    kills: 0,
                    doubles_counted: 0,
                })
            }
        };
        let fresh = !state.store.exists();
        let mut intents: Vec<u64> = state.pending.iter().copied().collect();
        for _ in 0..config.intents_per_child {
            intents.push(state.next);
            state.pending.insert(state.next);
            state.next += 1;
        }
        let spawned = std::time::Instant::now();
        let mut child = Command::new(&config.child)
            .arg(&state.store)
            .arg(&state.ledger)
            .args(intents.iter().map(u64::to_string))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let Some(stdout) = child.stdout.take() else { return Err(std::io::Error::other("no child stdout")) };
        let mut reader = BufReader::new(stdout);
        let mut lines = Vec::new();
        // When to kill: during creation/open of a fresh file, after a random number of
        // reported outcomes, or after a random time.
        // A file that is not in place yet (new, or its creation was killed) is killed during
        // its creation half of the time; otherwise the child is left to create it, and the time
        // it takes is measured.
        let mode = if fresh && rng.chance(50) { 0 } else { 1 + rng.below(2) };
        match mode {
            0 => std::thread::sleep(Duration::from_micros(rng.below(creation_us + 1))),
            _ if fresh => {
                let mut line = String::new();
                if reader.read_line(&mut line)? > 0 && line.trim_end() == "O" {
                    let took = u64::try_from(spawned.elapsed().as_micros()).unwrap_or(u64::MAX);
                    creation_us = (creation_us * 3 + took) / 4;
                }
                lines.push(line.trim_end().to_string());
                std::thread::sleep(Duration::from_micros(rng.below(3_000)));
            }
            1 => {
                let wait_for = rng.below(config.intents_per_child + 1);
                let mut seen = 0;
                let mut line = String::new();
                while seen < wait_for {
                    line.clear();
                    if reader.read_line(&mut line)? == 0 {
                        break;
                    }
                    if line.starts_with('C') {
                        seen += 1;
                    }
                    lines.push(line.trim_end().to_string());
                }
                std::thread::sleep(Duration::from_micros(rng.below(3_000)));
            }
            _ => std::thread::sleep(Duration::from_micros(rng.below(40_000))),
        }
        let running = child.try_wait()?.is_none();
        child.kill()?;
        child.wait()?;
        let mut rest = String::new();
        reader.read_to_string(&mut rest)?;
        lines.extend(rest.lines().map(str::to_string));
        if running {
            report.kills += 1;
            state.kills += 1;
            if !lines.iter().any(|l| l == "O") {
                report.kills_before_open += 1;
                if fresh && creation_interrupted(&state.store) {
                    report.kills_during_creation += 1;
                }
            }
        } else {
            report.finished_early += 1;
        }
        for line in &lines {
            let mut parts = line.splitn(3, ' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("C"), Some(intent), Some(body)) => {
                    if let Ok(intent) = intent.parse::<u64>() {
                        report.completions_reported += 1;
                        state.pending.remove(&intent);
                        if let Some(before) = state.reported.insert(intent, body.to_string())
                            && before != body
                        {
                            report.lost += 1;
                            report.note(format!("intent {intent} reported {before} then {body}"));
                        }
                    }
                }
                (Some("X"), _, _) => {
                    report.child_errors += 1;
                    report.note(format!("child error: {line}"));
                }
                _ => {}
            }
        }
        check_file(state, &mut report);
    }
    Ok(report)
}

/// Where a test's files go: `dir`, or a new temporary directory (in `prefer` when it exists),
/// which is removed when the returned guard is dropped.
pub(crate) fn work_dir(
    dir: Option<&Path>,
    prefer: Option<&Path>,
) -> std::io::Result<(Option<tempfile::TempDir>, PathBuf)> {
    if let Some(dir) = dir {
        fs::create_dir_all(dir)?;
        return Ok((None, dir.to_path_buf()));
    }
    let temp = match prefer.filter(|place| place.is_dir()) {
        Some(place) => tempfile::tempdir_in(place)?,
        None => tempfile::tempdir()?,
    };
    let root = temp.path().to_path_buf();
    Ok((Some(temp), root))
}

/// Whether the store's creation was cut short: the temporary file the store is created under
/// (`.<name>.tmp-*`) was left beside it. (A kill before the child began creating leaves no
/// temporary file and does not count.)
fn creation_interrupted(store: &Path) -> bool {
    let name = store.file_name().map(|n| format!(".{}.tmp-", n.to_string_lossy())).unwrap_or_default();
    store
        .parent()
        .and_then(|dir| fs::read_dir(dir).ok())
        .is_some_and(|entries| entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with(&name)))
}

/// After a kill: the file opens and verifies, every reported outcome is stored as reported,
/// and the ledger has at most one effect per intent.
fn check_file(state: &mut FileState, report: &mut KillReport) {
    let check = check_outcomes(&state.store, &state.ledger, &state.reported, &mut state.doubles_counted);
    report.lost += check.lost;
    report.double += check.double;
    report.unopenable += check.unopenable;
    report.integrity_failures += check.integrity_failures;
    report.completions_verified += check.verified;
    for note in check.notes {
        report.note(note);
    }
}

/// What one check of a store file found (see [`check_outcomes`]).
#[derive(Default)]
pub(crate) struct FileCheck {
    pub(crate) lost: u64,
    pub(crate) double: u64,
    pub(crate) unopenable: u64,
    pub(crate) integrity_failures: u64,
    pub(crate) verified: u64,
    pub(crate) notes: Vec<String>,
    /// The store, opened, for further checks.
    pub(crate) store: Option<Store>,
}

/// Opens the store file (it must open) and verifies it, checks that every outcome in
/// `reported` is stored as reported, and counts effects in the ledger beyond one per intent
/// that are new since `doubles_counted`.
pub(crate) fn check_outcomes(
    store_path: &Path,
    ledger: &Path,
    reported: &BTreeMap<u64, String>,
    doubles_counted: &mut u64,
) -> FileCheck {
    let mut check = FileCheck::default();
    if !store_path.exists() {
        // Killed before the new file was moved into place: nothing was reported.
        if !reported.is_empty() {
            check.lost += reported.len() as u64;
            check.notes.push("store file vanished".into());
        }
        return check;
    }
    let mut store = match Store::builder().default_policy(policy()).open(store_path) {
        Ok(store) => store,
        Err(error) => {
            check.unopenable += 1;
            check.notes.push(format!("{}: {error}", store_path.display()));
            return check;
        }
    };
    match store.verify() {
        Ok(verify) if verify.is_ok() => {}
        Ok(verify) => {
            check.integrity_failures += 1;
            check.notes.push(format!("verify: {:?}", verify.problems));
        }
        Err(error) => {
            check.integrity_failures += 1;
            check.notes.push(format!("verify: {error}"));
        }
    }
    let scope = scope();
    for (intent, body) in reported {
        let Ok(key) = intent_key(*intent) else { continue };
        match store.get(&scope, &key) {
            Ok(Some(record)) if matches!(&record.state, State::Completed { result, .. } if result == body.as_bytes()) =>
            {
                check.verified += 1;
            }
            other => {
                check.lost += 1;
                check.notes.push(format!("intent {intent} reported {body}, stored {other:?}"));
            }
        }
    }
    let (_, counts) = read_ledger(ledger);
    // Effect counts only grow; add what is new since this file's previous check.
    let doubles: u64 = counts.values().map(|n| n.saturating_sub(1)).sum();
    if doubles > *doubles_counted {
        check.double += doubles - *doubles_counted;
        check.notes.push(format!("{}: {doubles} double effects", ledger.display()));
        *doubles_counted = doubles;
    }
    check.store = Some(store);
    check
}
