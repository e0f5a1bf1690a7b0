//! Aliases and twins: a store written through one name and crashed (a child process that
//! aborts after its acknowledgements: no destructor runs, nothing is closed), then opened
//! through another — a symlink, a hard link, the file renamed after the crash — or a copy of
//! the crashed file given another store's journal. Checked: every acknowledged completion is
//! there once the store is opened through any of its names, a copy never takes the original's
//! journal, and a swapped journal is refused, never applied (0 foreign records applied).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use idemdb::{
    Fingerprint, IdempotencyKey, ManualClock, OpenError, Reservation, Reserve, Scope, StateKind, Store, StoreBuilder,
};

use crate::rng::Rng;

/// What the section found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AliasReport {
    /// Scenarios run, by kind: symlink, hard link, rename, copy, swapped journals.
    pub scenarios: [u64; 5],
    /// Acknowledged completions checked present.
    pub verified: u64,
    /// Acknowledged completions missing.
    pub lost: u64,
    /// Records of another store (or of the original, in a copy) applied.
    pub foreign_applied: u64,
    /// Opens that should have opened and did not, or children that failed.
    pub failures: u64,
    /// Typed refusals where a refusal is the right answer (a copy, a swapped journal).
    pub refused: u64,
    /// The first few failures.
    pub notes: Vec<String>,
}

impl AliasReport {
    /// Scenarios over every kind.
    pub fn total(&self) -> u64 {
        self.scenarios.iter().sum()
    }

    /// Whether every check held.
    pub fn clean(&self) -> bool {
        self.lost == 0 && self.foreign_applied == 0 && self.failures == 0
    }

    fn note(&mut self, text: String) {
        if self.notes.len() < 8 {
            self.notes.push(text);
        }
    }
}

const T0: u64 = 1_700_000_000_000;

pub(crate) fn builder() -> StoreBuilder {
    Store::builder().clock(ManualClock::new(T0)).journal(true).journal_bytes(256 * 1024)
}

fn scope() -> Scope {
    Scope::new("acme", "pay").unwrap_or_else(|_| unreachable!("a valid scope"))
}

fn key(name: &str) -> Option<IdempotencyKey> {
    IdempotencyKey::new(name).ok()
}

/// `reliability-child journal-writer <store> <prefix> <n> [wait]`: opens the store (with
/// `wait`, retrying while another handle holds it or replaced it), completes `<prefix>-0..n`
/// with body = the key, printing `A <key>` after each acknowledgement, then aborts (a crash:
/// nothing is closed).
///
/// # Errors
/// A message for the parent (printed as `X …`).
pub fn child_main(args: &[String]) -> Result<(), String> {
    let (path, prefix, n, wait) = match args {
        [path, prefix, n] => (path, prefix, n, false),
        [path, prefix, n, wait] if wait == "wait" => (path, prefix, n, true),
        _ => return Err("usage: journal-writer <store> <prefix> <n> [wait]".into()),
    };
    let n: u32 = n.parse().map_err(|_| "bad count".to_string())?;
    let started = std::time::Instant::now();
    let store = loop {
        match builder().open(path) {
            Ok(store) => break store,
            Err(OpenError::AlreadyOpen | OpenError::Replaced { .. })
                if wait && started.elapsed() < std::time::Duration::from_secs(30) =>
            {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            Err(error) => return Err(format!("open: {error}")),
        }
    };
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        let key = key(&name).ok_or("bad key")?;
        let Reservation::Acquired(lease) = store
            .reserve(Reserve::new(&scope(), &key, &Fingerprint::from_bytes([1; 32])))
            .map_err(|e| e.to_string())?
        else {
            return Err(format!("{name} was not new"));
        };
        store.complete(&lease, name.clone().into_bytes()).map_err(|e| e.to_string())?;
        println!("A {name}");
    }
    std::process::abort();
}

/// Runs the crashing writer on `path`; returns the keys it acknowledged.
fn crash_writer(child: &Path, path: &Path, prefix: &str, n: u32) -> Result<Vec<String>, String> {
    crash_writer_output(Command::new(child).arg("journal-writer").arg(path).arg(prefix).arg(n.to_string()))
}

/// The keys a crashing writer acknowledged (or the error it reported).
pub(crate) fn crash_writer_output(command: &mut Command) -> Result<Vec<String>, String> {
    let output = command.output().map_err(|error| format!("spawn: {error}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if let Some(error) = stdout.lines().find_map(|line| line.strip_prefix("X ")) {
        return Err(error.to_string());
    }
    Ok(stdout.lines().filter_map(|line| line.strip_prefix("A ")).map(str::to_string).collect())
}

/// Counts which of `acked` the store holds completed with their own body; `others` must not be
/// there at all (another store's keys).
pub(crate) fn check(report: &mut AliasReport, store: &Store, acked: &[String], others: &[String], what: &str) {
    for name in acked {
        let Some(key) = key(name) else { continue };
        let ok = matches!(
            store.get(&scope(), &key),
            Ok(Some(ref record)) if record.state.kind() == StateKind::Completed
        ) && matches!(
            store.reserve(Reserve::new(&scope(), &key, &Fingerprint::from_bytes([1; 32]))),
            Ok(Reservation::Replay { ref body, .. }) if *body == name.as_bytes()
        );
        if ok {
            report.verified += 1;
        } else {
            report.lost += 1;
            report.note(format!("{what}: {name} acknowledged, not found"));
        }
    }
    for name in others {
        let Some(key) = key(name) else { continue };
        if !matches!(store.get(&scope(), &key), Ok(None)) {
            report.foreign_applied += 1;
            report.note(format!("{what}: {name} of another store applied"));
        }
    }
}

fn journal_of(path: &Path) -> PathBuf {
    PathBuf::from(format!("{}-journal", path.display()))
}

fn open(report: &mut AliasReport, path: &Path, what: &str) -> Option<Store> {
    match builder().open(path) {
        Ok(store) => Some(store),
        Err(error) => {
            report.failures += 1;
            report.note(format!("{what}: open {}: {error}", path.display()));
            None
        }
    }
}

fn refused(report: &mut AliasReport, path: &Path, what: &str) {
    match builder().open(path) {
        Err(OpenError::JournalMissing { .. } | OpenError::JournalForeign { .. } | OpenError::JournalDamaged { .. }) => {
            report.refused += 1;
        }
        Ok(_) => {
            report.foreign_applied += 1;
            report.note(format!("{what}: {} opened with a journal that is not its own", path.display()));
        }
        Err(error) => {
            report.failures += 1;
            report.note(format!("{what}: an unexpected refusal: {error}"));
        }
    }
}

/// One scenario of kind `kind` (0 symlink, 1 hard link, 2 rename, 3 copy, 4 swapped journals)
/// in `dir`.
fn scenario(report: &mut AliasReport, child: &Path, dir: &Path, kind: usize, n: u32) -> Result<(), String> {
    let io = |error: std::io::Error| error.to_string();
    let real = dir.join("data").join("store.idemdb");
    fs::create_dir_all(dir.join("data")).map_err(io)?;
    drop(builder().open(&real).map_err(|e| e.to_string())?);
    let what = ["symlink", "hard link", "rename", "copy", "swapped journals"][kind];
    match kind {
        0 => {
            let link = dir.join("app.idemdb");
            #[cfg(unix)]
            std::os::unix::fs::symlink(&real, &link).map_err(io)?;
            let by_app = crash_writer(child, &link, "app", n)?;
            // The operator, through the real path, after the crash: then the app again.
            let Some(store) = open(report, &real, what) else { return Ok(()) };
            check(report, &store, &by_app, &[], what);
            let by_operator = write_one(&store, "op")?;
            drop(store);
            let by_app2 = crash_writer(child, &link, "again", n)?;
            let Some(store) = open(report, &link, what) else { return Ok(()) };
            let all: Vec<String> = by_app.iter().chain(&by_operator).chain(&by_app2).cloned().collect();
            check(report, &store, &all, &[], what);
        }
        1 => {
            let other = dir.join("other-name.idemdb");
            fs::hard_link(&real, &other).map_err(io)?;
            let first = crash_writer(child, &real, "first", n)?;
            let second_by_other = {
                let Some(store) = open(report, &other, what) else { return Ok(()) };
                check(report, &store, &first, &[], what);
                drop(store);
                crash_writer(child, &other, "second", n)?
            };
            let Some(store) = open(report, &real, what) else { return Ok(()) };
            let all: Vec<String> = first.iter().chain(&second_by_other).cloned().collect();
            check(report, &store, &all, &[], what);
        }
        2 => {
            let acked = crash_writer(child, &real, "k", n)?;
            let renamed = dir.join("renamed.idemdb");
            fs::rename(&real, &renamed).map_err(io)?;
            let Some(store) = open(report, &renamed, what) else { return Ok(()) };
            check(report, &store, &acked, &[], what);
        }
        3 => {
            let acked = crash_writer(child, &real, "k", n)?;
            let copy = dir.join("copy.idemdb");
            fs::copy(&real, &copy).map_err(io)?;
            // A copy without its journal never takes the original's.
            refused(report, &copy, what);
            let Some(store) = open(report, &real, what) else { return Ok(()) };
            check(report, &store, &acked, &[], what);
        }
        _ => {
            // Two stores with one secret: b's journal swapped beside a.
            let seed = [5u8; 32];
            let (a, b) = (dir.join("a.idemdb"), dir.join("b.idemdb"));
            drop(builder().secret_seed(seed).open(&a).map_err(|e| e.to_string())?);
            fs::copy(&a, &b).map_err(io)?;
            let in_a = crash_writer(child, &a, "a", n)?;
            let in_b = crash_writer(child, &b, "b", n)?;
            let (a_journal, b_journal) = (journal_of(&a), journal_of(&b));
            let keep = dir.join("a-journal.keep");
            fs::rename(&a_journal, &keep).map_err(io)?;
            fs::copy(&b_journal, &a_journal).map_err(io)?;
            refused(report, &a, what);
            fs::rename(&keep, &a_journal).map_err(io)?;
            let Some(store) = open(report, &a, what) else { return Ok(()) };
            check(report, &store, &in_a, &in_b, what);
            drop(store);
            let Some(store) = open(report, &b, what) else { return Ok(()) };
            check(report, &store, &in_b, &in_a, what);
        }
    }
    report.scenarios[kind] += 1;
    Ok(())
}

fn write_one(store: &Store, prefix: &str) -> Result<Vec<String>, String> {
    let name = format!("{prefix}-0");
    let key = key(&name).ok_or("bad key")?;
    if let Reservation::Acquired(lease) =
        store.reserve(Reserve::new(&scope(), &key, &Fingerprint::from_bytes([1; 32]))).map_err(|e| e.to_string())?
    {
        store.complete(&lease, name.clone().into_bytes()).map_err(|e| e.to_string())?;
    }
    Ok(vec![name])
}

/// Runs `count` scenarios (kinds in turn) with the `reliability-child` binary `child`.
pub fn run(child: &Path, count: u64, seed: u64) -> AliasReport {
    let mut report = AliasReport::default();
    let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let mut rng = Rng::new(seed ^ 0xa11a5);
    for i in 0..count {
        let Ok(dir) = tempfile::Builder::new().prefix("idemdb-aliases-").tempdir_in(&base) else {
            report.failures += 1;
            continue;
        };
        let kind = (i % 5) as usize;
        let n = 1 + rng.below(12) as u32;
        if let Err(error) = scenario(&mut report, child, dir.path(), kind, n) {
            report.failures += 1;
            report.note(format!("scenario {i} (kind {kind}): {error}"));
        }
    }
    report
}
