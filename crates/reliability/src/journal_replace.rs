//! Replace beside a writer: `rebuild` (what `idemdb compact --rebuild` runs) replacing the
//! store file while a writer process tries to open it, with the rebuild's narrowest window —
//! after the copy has replaced the original, before the old handle closes — widened by a
//! random pause of up to 5 ms; the writer completes a few keys and crashes (aborts). Checked:
//! every completion any writer acknowledged is in the store at the end (a writer that opened
//! the new file in that window once lost all of them to the old handle's close).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use idemdb::OpenError;

use crate::journal_aliases::{AliasReport, builder, check, crash_writer_output};
use crate::rng::Rng;

/// What the section found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplaceReport {
    /// Races run (one writer process and one rebuild each).
    pub races: u64,
    /// Rebuilds that replaced the file.
    pub rebuilds: u64,
    /// The checks of the final opens (verified, lost, failures).
    pub checks: AliasReport,
}

/// Runs `races` races with the `reliability-child` binary `child`, a new store file every 25.
pub fn run(child: &Path, races: u64, seed: u64) -> ReplaceReport {
    let mut report = ReplaceReport::default();
    let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let mut rng = Rng::new(seed ^ 0x2e9_1ace);
    let mut dir = None;
    let mut acked: Vec<String> = Vec::new();
    for race in 0..races {
        if race % 25 == 0 {
            dir = tempfile::Builder::new().prefix("idemdb-replace-").tempdir_in(&base).ok();
            acked.clear();
        }
        let Some(dir) = dir.as_ref() else {
            report.checks.failures += 1;
            continue;
        };
        let path = dir.path().join("store.idemdb");
        if race % 25 == 0 && builder().open(&path).map(drop).is_err() {
            report.checks.failures += 1;
            continue;
        }
        let pause = Duration::from_micros(rng.below(5_000));
        let n = 1 + rng.below(6) as u32;
        let prefix = format!("r{race}");
        let rebuild = {
            let path = path.clone();
            std::thread::spawn(move || {
                loop {
                    match idemdb::rebuild_with_pause(&path, pause) {
                        Err(idemdb::RebuildError::Open(OpenError::AlreadyOpen | OpenError::Replaced { .. })) => {
                            std::thread::sleep(Duration::from_micros(300));
                        }
                        other => return other.map(drop).map_err(|error| error.to_string()),
                    }
                }
            })
        };
        // The writer starts while the rebuild runs: it tries to open the file in its window.
        std::thread::sleep(Duration::from_micros(rng.below(3_000)));
        let written = crash_writer_output(
            Command::new(child).arg("journal-writer").arg(&path).arg(&prefix).arg(n.to_string()).arg("wait"),
        );
        match rebuild.join() {
            Ok(Ok(())) => report.rebuilds += 1,
            Ok(Err(error)) => {
                report.checks.failures += 1;
                report.checks.notes.push(format!("race {race}: rebuild: {error}"));
            }
            Err(_) => report.checks.failures += 1,
        }
        match written {
            Ok(keys) => acked.extend(keys),
            Err(error) => {
                report.checks.failures += 1;
                if report.checks.notes.len() < 8 {
                    report.checks.notes.push(format!("race {race}: writer: {error}"));
                }
            }
        }
        report.races += 1;
        if race % 25 == 24 || race + 1 == races {
            match builder().open(&path) {
                Ok(store) => check(&mut report.checks, &store, &acked, &[], "replace"),
                Err(error) => {
                    report.checks.failures += 1;
                    report.checks.notes.push(format!("race {race}: final open: {error}"));
                }
            }
        }
    }
    report
}
