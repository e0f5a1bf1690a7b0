//! Audit durability under `kill -9`: a child process makes decisions (reservations,
//! completions, failures), resolutions (an operator's reconciliation of an uncertain record)
//! and lock-free answers (replays), printing each once its call returned; the parent kills it
//! with SIGKILL at a random moment, reopens the store and looks for every event.
//!
//! Checked: **no decision or resolution event of an acknowledged call is lost** (they are
//! written by the decision's own commit, which the journal makes durable before the call
//! returns); lock-free answers' events may be lost only within the core's bound
//! ([`idemdb_core::AuditBatch`]: they are written once 256 wait or the oldest has waited a
//! second), so a lost one acknowledged more than that second (plus a scheduling margin) before
//! the kill counts against the store. The child idles at random between calls, so events also
//! age with no commit coming.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idemdb::{
    AuditKind, Failure, Fingerprint, IdempotencyKey, Policy, Reservation, Reserve, Resolution, ResolutionCause, Scope,
    Store,
};
use idemdb_core::AuditBatch;

use crate::rng::Rng;

/// Margin over [`AuditBatch::DELAY_MS`] for a lock-free event to be written (the writer's
/// commit, a loaded machine's scheduling).
pub const SLACK_MS: u64 = 500;

/// What a run found.
#[derive(Debug, Default, Clone)]
pub struct AuditDurabilityReport {
    /// Children killed.
    pub kills: u64,
    /// Acknowledged decision events looked for (reserved, completed, failed).
    pub decisions: u64,
    /// Acknowledged resolution events looked for (reconciled).
    pub resolutions: u64,
    /// Decision or resolution events lost.
    pub decisions_lost: u64,
    /// Lock-free answers' events looked for (replays).
    pub lock_free: u64,
    /// Lock-free events lost (within the bound).
    pub lock_free_lost: u64,
    /// Lock-free events lost that were acknowledged longer than the bound before the kill.
    pub lock_free_lost_beyond_bound: u64,
    /// Runs that could not run or reopen.
    pub failures: u64,
    /// The first problems, for the report.
    pub notes: Vec<String>,
}

impl AuditDurabilityReport {
    fn note(&mut self, note: String) {
        if self.notes.len() < 8 {
            self.notes.push(note);
        }
    }
}

fn scope() -> Scope {
    Scope::new("acme", "audit").unwrap_or_else(|_| unreachable!("a valid scope"))
}

fn builder() -> idemdb::StoreBuilder {
    Store::builder().policy("audit", Policy::default().with_lease_ttl(Duration::from_secs(600)))
}

fn key(i: u64) -> Result<IdempotencyKey, String> {
    IdempotencyKey::new(format!("a-{i}")).map_err(|e| e.to_string())
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `reliability-child audit-writer <store> <seed>`: decides, resolves and replays until killed,
/// printing `D <kind> <i>` after each decision or resolution returned and `L <i>-<k> <unix ms>`
/// after each replay.
///
/// # Errors
/// A message for the parent (printed as `X …`).
pub fn child_main(args: &[String]) -> Result<(), String> {
    let [path, seed] = args else { return Err("usage: audit-writer <store> <seed>".into()) };
    let seed: u64 = seed.parse().map_err(|_| "bad seed".to_string())?;
    let store = builder().open(path).map_err(|e| format!("open: {e}"))?;
    let mut rng = Rng::new(seed);
    let fp = Fingerprint::from_bytes([5; 32]);
    let scope = scope();
    for i in 0u64.. {
        let key = key(i)?;
        let Reservation::Acquired(lease) = store
            .reserve(Reserve::new(&scope, &key, &fp).traced(&*format!("d-{i}")).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?
        else {
            return Err(format!("a-{i} was not new"));
        };
        println!("D reserved {i}");
        if rng.chance(30) {
            store.fail(&lease, Failure::Uncertain).map_err(|e| e.to_string())?;
            println!("D failed {i}");
            let resolution = Resolution::Completed(b"resolved".to_vec());
            store.reconcile(&scope, &key, resolution, ResolutionCause::Operator).map_err(|e| e.to_string())?;
            println!("D reconciled {i}");
        } else {
            store.complete(&lease, b"done".to_vec()).map_err(|e| e.to_string())?;
            println!("D completed {i}");
        }
        for k in 0..rng.below(4) {
            let correlation = format!("l-{i}-{k}");
            let request = Reserve::new(&scope, &key, &fp).traced(correlation.as_str()).map_err(|e| e.to_string())?;
            let answer = store.reserve(request).map_err(|e| e.to_string())?;
            if !matches!(answer, Reservation::Replay { .. }) {
                return Err(format!("a-{i} was not replayed: {answer:?}"));
            }
            println!("L {i}-{k} {}", unix_ms());
        }
        // Idle now and then: waiting events age with no commit coming.
        if rng.chance(10) {
            std::thread::sleep(Duration::from_millis(rng.below(1_500)));
        }
    }
    Ok(())
}

/// Runs `kills` children with the `reliability-child` binary `child`, each killed after a
/// random time up to `max_ms`.
pub fn run(child: &Path, kills: u64, max_ms: u64, seed: u64) -> AuditDurabilityReport {
    let mut report = AuditDurabilityReport::default();
    let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let mut rng = Rng::new(seed ^ 0xa0d1);
    for i in 0..kills {
        let Ok(dir) = tempfile::Builder::new().prefix("idemdb-audit-").tempdir_in(&base) else {
            report.failures += 1;
            continue;
        };
        let after = Duration::from_millis(100 + rng.below(max_ms.max(1)));
        if let Err(error) = one_kill(&mut report, child, &dir.path().join("s.idemdb"), after, rng.next_u64()) {
            report.failures += 1;
            report.note(format!("kill {i}: {error}"));
        }
    }
    report
}

fn one_kill(
    report: &mut AuditDurabilityReport,
    child: &Path,
    path: &Path,
    after: Duration,
    seed: u64,
) -> Result<(), String> {
    let mut process = Command::new(child)
        .arg("audit-writer")
        .arg(path)
        .arg(seed.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawn: {e}"))?;
    let stdout = process.stdout.take().ok_or("no stdout")?;
    let reader = std::thread::spawn(move || BufReader::new(stdout).lines().map_while(Result::ok).collect::<Vec<_>>());
    std::thread::sleep(after);
    let killed_at = unix_ms();
    process.kill().map_err(|e| format!("kill: {e}"))?;
    process.wait().map_err(|e| format!("wait: {e}"))?;
    let lines = reader.join().map_err(|_| "the reader panicked".to_string())?;
    if let Some(error) = lines.iter().find_map(|line| line.strip_prefix("X ")) {
        return Err(format!("child: {error}"));
    }
    report.kills += 1;
    let store = builder().open(path).map_err(|e| format!("reopen: {e}"))?;
    let events = store.audit_events(usize::MAX).map_err(|e| format!("audit: {e}"))?;
    let mut decided: HashSet<(AuditKind, idemdb::KeyHash)> = HashSet::new();
    let mut answered: HashSet<String> = HashSet::new();
    for event in events {
        if event.kind == AuditKind::Replayed {
            answered.extend(event.correlation);
        } else {
            decided.insert((event.kind, event.key_hash));
        }
    }
    for line in &lines {
        let mut parts = line.split(' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("D"), Some(kind), Some(i)) => {
                let (kind, resolution) = match kind {
                    "reserved" => (AuditKind::Reserved, false),
                    "completed" => (AuditKind::Completed, false),
                    "failed" => (AuditKind::Failed, false),
                    "reconciled" => (AuditKind::Reconciled, true),
                    _ => continue,
                };
                let i: u64 = i.parse().map_err(|_| format!("bad line {line}"))?;
                if resolution {
                    report.resolutions += 1;
                } else {
                    report.decisions += 1;
                }
                if !decided.contains(&(kind, store.key_hash(&scope(), &key(i)?))) {
                    report.decisions_lost += 1;
                    report.note(format!("{} of a-{i} acknowledged, its event lost", kind.as_str()));
                }
            }
            (Some("L"), Some(answer), Some(at)) => {
                report.lock_free += 1;
                if !answered.contains(&format!("l-{answer}")) {
                    report.lock_free_lost += 1;
                    let at: u64 = at.parse().map_err(|_| format!("bad line {line}"))?;
                    let age = killed_at.saturating_sub(at);
                    if age > AuditBatch::DELAY_MS + SLACK_MS {
                        report.lock_free_lost_beyond_bound += 1;
                        report.note(format!("replay l-{answer} acknowledged {age} ms before the kill, its event lost"));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}
