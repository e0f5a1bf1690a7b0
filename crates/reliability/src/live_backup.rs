//! Live backup: a child process writes (two threads delivering intents, each outcome reported
//! as `C <intent> <body>` once it returned, as in [`crate::kill`]) and takes backups on request
//! (`B <path>` on its stdin, `K <path>` on its stdout once written); the parent asks for
//! backups at random moments and kills the child with SIGKILL at random moments, some of them
//! while a backup runs. Every backup that was reported, and every file found at a destination
//! after a kill, must open alone (a directory of its own, no journal), verify, and hold every
//! completion acknowledged before the backup was asked for, with the reported result. A
//! temporary file a kill left must never open as a store that lacks one of them.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemdb::{State, Store};

use crate::kill::{deliver, intent_key, policy, scope};
use crate::rng::Rng;

/// How many backups, and where the child binary is.
#[derive(Debug, Clone)]
pub struct LiveBackupConfig {
    /// The `reliability-child` executable.
    pub child: PathBuf,
    /// Backups to take (those a kill interrupted do not count).
    pub backups: u64,
    /// Backups per child before it is killed.
    pub backups_per_child: u64,
    /// A new store after this many children (bounds the store's size, so a backup's cost).
    pub children_per_file: u64,
    /// Schedule seed.
    pub seed: u64,
}

/// What the live-backup test found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveBackupReport {
    /// Backups written and checked.
    pub backups: u64,
    /// Writers killed (each restarted on the same store, until a new one).
    pub kills: u64,
    /// Stores used.
    pub files: u64,
    /// Of which while a backup was running.
    pub kills_mid_backup: u64,
    /// Temporary files those kills left (checked, then removed).
    pub temporaries_left: u64,
    /// Of which opened as a store (a copy killed after its last commit: checked as a backup);
    /// the others do not open as a store at all.
    pub temporaries_complete: u64,
    /// Acknowledged completions checked in backups (summed over backups).
    pub completions_checked: u64,
    /// Acknowledged completions a backup lacked (or held with another result).
    pub lost: u64,
    /// Backups (or leftovers) that did not open alone.
    pub unopenable: u64,
    /// Backups whose verification found problems.
    pub integrity_failures: u64,
    /// Children that reported an error.
    pub child_errors: u64,
    /// The first few failures.
    pub notes: Vec<String>,
}

impl LiveBackupReport {
    /// Whether every backup held what it must.
    pub fn clean(&self) -> bool {
        self.lost == 0 && self.unopenable == 0 && self.integrity_failures == 0 && self.child_errors == 0
    }

    /// One line for the report.
    pub fn summary(&self) -> String {
        format!(
            "{} backups ({} stores) beside two writer threads, {} writers killed ({} mid-backup; {} temporaries left, {} of them \
             complete copies, the others no store), {} acknowledged completions checked",
            self.backups,
            self.files,
            self.kills,
            self.kills_mid_backup,
            self.temporaries_left,
            self.temporaries_complete,
            self.completions_checked
        )
    }

    fn note(&mut self, note: String) {
        if self.notes.len() < 12 {
            self.notes.push(note);
        }
    }
}

/// The child: `reliability-child backup-writer <store> <ledger> <first intent>`.
///
/// # Errors
/// A description of what failed.
pub fn backup_writer_main(args: &[String]) -> Result<(), String> {
    let [store_path, ledger_path, first] = args else {
        return Err("usage: reliability-child backup-writer <store> <ledger> <first intent>".into());
    };
    let first: u64 = first.parse().map_err(|_| format!("bad intent {first}"))?;
    let store = Store::builder().default_policy(policy()).open(store_path).map_err(|e| format!("open: {e}"))?;
    let out = Arc::new(Mutex::new(std::io::stdout()));
    say(&out, "O")?;
    for thread in 0..2u64 {
        let (store, out, ledger_path) = (store.clone(), Arc::clone(&out), PathBuf::from(ledger_path));
        std::thread::spawn(move || {
            let written = (|| -> Result<(), String> {
                let mut ledger =
                    fs::OpenOptions::new().create(true).append(true).open(&ledger_path).map_err(|e| e.to_string())?;
                let mut i = first + thread;
                loop {
                    let mut line = Vec::new();
                    deliver(&store, &mut ledger, &ledger_path, i, &mut line)?;
                    say(&out, String::from_utf8_lossy(&line).trim_end())?;
                    i += 2;
                }
            })();
            if let Err(error) = written {
                let _ = say(&out, &format!("X {error}"));
            }
        });
    }
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let Some(path) = line.strip_prefix("B ") else { continue };
        let report = store.backup_to(path).map_err(|e| format!("backup {path}: {e}"))?;
        say(&out, &format!("K {path} {}", report.records))?;
    }
    Ok(())
}

fn say(out: &Mutex<std::io::Stdout>, line: &str) -> Result<(), String> {
    let mut out = out.lock().map_err(|_| "stdout lock poisoned".to_string())?;
    writeln!(out, "{line}").and_then(|()| out.flush()).map_err(|e| e.to_string())
}

/// Runs the live-backup test.
///
/// # Errors
/// I/O errors of the harness itself.
pub fn run_live_backups(config: &LiveBackupConfig) -> std::io::Result<LiveBackupReport> {
    let temp = tempfile::tempdir()?;
    let backups_dir = temp.path().join("backups");
    fs::create_dir_all(&backups_dir)?;
    let mut rng = Rng::new(config.seed);
    let mut report = LiveBackupReport::default();
    let mut acknowledged: BTreeMap<u64, String> = BTreeMap::new();
    let mut next_intent = 0u64;
    let mut attempts = 0;
    let (mut store, mut ledger) = (PathBuf::new(), PathBuf::new());
    while report.backups < config.backups && attempts < config.backups * 4 + 16 {
        if attempts % config.children_per_file.max(1) == 0 {
            report.files += 1;
            let dir = temp.path().join(format!("file-{}", report.files));
            fs::create_dir_all(&dir)?;
            (store, ledger) = (dir.join("store.idemdb"), dir.join("ledger.txt"));
            acknowledged.clear();
        }
        attempts += 1;
        let mut child = Command::new(&config.child)
            .args(["backup-writer".as_ref(), store.as_os_str(), ledger.as_os_str()])
            .arg(next_intent.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        // Each child starts on fresh intents: an earlier child's unsettled ones stay as they are.
        next_intent += 1_000_000;
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(std::io::Error::other("no child pipes"));
        };
        let (lines_tx, lines) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let read = |acknowledged: &mut BTreeMap<u64, String>, report: &mut LiveBackupReport, wait: Duration| {
            let line = lines.recv_timeout(wait).ok()?;
            let mut parts = line.splitn(3, ' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("C"), Some(i), Some(body)) => {
                    if let Ok(i) = i.parse() {
                        acknowledged.insert(i, body.to_string());
                    }
                }
                (Some("X"), ..) => {
                    report.child_errors += 1;
                    report.note(line.clone());
                }
                _ => {}
            }
            Some(line)
        };
        let mut in_flight: Option<(PathBuf, BTreeMap<u64, String>)> = None;
        let kill_after = rng.below(config.backups_per_child) + 1;
        for n in 0..kill_after {
            // Let the writers run a little, reading what they acknowledge.
            let until = std::time::Instant::now() + Duration::from_millis(rng.below(15));
            while std::time::Instant::now() < until {
                read(&mut acknowledged, &mut report, Duration::from_millis(1));
            }
            while let Some(_line) = read(&mut acknowledged, &mut report, Duration::ZERO) {}
            let path = backups_dir.join(format!("b-{}-{n}.idemdb", report.backups + report.kills));
            let expected = acknowledged.clone();
            if writeln!(stdin, "B {}", path.display()).and_then(|()| stdin.flush()).is_err() {
                break;
            }
            in_flight = Some((path.clone(), expected));
            // The last backup of this child may be interrupted by the kill.
            if n + 1 == kill_after && rng.chance(50) {
                std::thread::sleep(Duration::from_micros(rng.below(20_000)));
                break;
            }
            let done = loop {
                match read(&mut acknowledged, &mut report, Duration::from_secs(60)) {
                    Some(line) if line.starts_with(&format!("K {}", path.display())) => break true,
                    Some(line) if line.starts_with('X') => break false,
                    Some(_) => {}
                    None => break false,
                }
            };
            if let Some((path, expected)) = in_flight.take()
                && done
            {
                check_backup(&path, &expected, &mut report);
                report.backups += 1;
                let _ = fs::remove_file(&path);
                let _ = fs::remove_file(journal_of(&path));
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        report.kills += 1;
        if let Some((path, expected)) = in_flight {
            report.kills_mid_backup += 1;
            // The kill may have landed after the rename: then it is a whole backup.
            if path.exists() {
                check_backup(&path, &expected, &mut report);
                let _ = fs::remove_file(&path);
                let _ = fs::remove_file(journal_of(&path));
            }
            check_leftovers(&backups_dir, &expected, &mut report);
        }
    }
    Ok(report)
}

fn journal_of(path: &Path) -> PathBuf {
    PathBuf::from(format!("{}-journal", path.display()))
}

/// Opens the backup at `path` alone (no journal beside it), verifies it and checks that it
/// holds every completion of `expected` with its reported result.
fn check_backup(path: &Path, expected: &BTreeMap<u64, String>, report: &mut LiveBackupReport) {
    check_copy(path, expected, report, true);
}

/// [`check_backup`]; `fresh`: nothing has opened the file yet (no journal may be beside it).
fn check_copy(path: &Path, expected: &BTreeMap<u64, String>, report: &mut LiveBackupReport, fresh: bool) {
    if fresh && journal_of(path).exists() {
        report.unopenable += 1;
        report.note(format!("{}: a journal beside a fresh backup", path.display()));
    }
    let mut store = match Store::builder().default_policy(policy()).open(path) {
        Ok(store) => store,
        Err(error) => {
            report.unopenable += 1;
            report.note(format!("{}: does not open: {error}", path.display()));
            return;
        }
    };
    match store.verify() {
        Ok(verified) if verified.is_ok() => {}
        Ok(verified) => {
            report.integrity_failures += 1;
            report.note(format!("{}: {:?}", path.display(), verified.problems));
        }
        Err(error) => {
            report.integrity_failures += 1;
            report.note(format!("{}: verify: {error}", path.display()));
        }
    }
    let scope = scope();
    for (i, body) in expected {
        report.completions_checked += 1;
        let found = intent_key(*i).ok().and_then(|key| store.get(&scope, &key).ok().flatten());
        let held = matches!(&found, Some(record) if matches!(&record.state, State::Completed { result, .. } if result == body.as_bytes()));
        if !held {
            report.lost += 1;
            report.note(format!("{}: intent {i} acknowledged before the backup, not in it: {found:?}", path.display()));
        }
    }
}

/// Temporary files a kill left in `dir`: each must not open as a store, or hold everything
/// (a copy killed after its last commit). Removed afterwards.
fn check_leftovers(dir: &Path, expected: &BTreeMap<u64, String>, report: &mut LiveBackupReport) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.starts_with('.') && name.ends_with(".partial")) {
            continue;
        }
        report.temporaries_left += 1;
        // Not a store (a copy killed before its last commit) is what a temporary should be. An
        // empty file (killed right after it was created) is no store either; `Store::open` would
        // make a new one in it, as in any empty file, so it is not opened.
        let empty = fs::metadata(&path).map(|meta| meta.len() == 0).unwrap_or(true);
        let opened =
            if empty { Err(()) } else { Store::builder().default_policy(policy()).open(&path).map(drop).map_err(drop) };
        if opened.is_ok() {
            report.temporaries_complete += 1;
            check_copy(&path, expected, report, false);
        }
        let _ = fs::remove_file(&path);
        let _ = fs::remove_file(journal_of(&path));
    }
}
