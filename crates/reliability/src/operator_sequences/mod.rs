//! Operator sequences: from a seed, a journaling writer process acknowledges completions on a
//! store file while a random sequence of operator steps happens beside it — `kill -9` of the
//! writer and its restart on some name, `mv`, `ln`, `ln -s` and `cp` of a store and of its
//! journal (`<store>-journal`), a new store at a name a store had (`idemdb import NAME
//! empty.jsonl`, or the writer creating one), `idemdb recover [--discard-journal]`, `idemdb
//! backup SRC DEST [--overwrite]` onto free and held names, and `idemdb compact --rebuild`.
//!
//! A model ([`model`]) follows which store each name leads to; each store writes keys of its
//! own prefix, so a key of another store is recognised anywhere. Checked:
//! * after the sequence, every store opens (or is recovered as an operator would after a
//!   refusal) and holds every completion acknowledged to it: **0 acknowledged writes lost**,
//!   unless the operator discarded that store's journal (`recover --discard-journal`) and the
//!   journal file set aside still holds them (counted apart);
//! * **0 foreign records**: no store holds a key it never had (another store's, or its
//!   original's written after it was copied);
//! * every refused command (and every refused open of the writer) is **typed** — the CLI's
//!   documented exit code and one `error: …` line — and **changes nothing**: the directory's
//!   files, sizes and bytes are the same after it.
//!
//! Every failing sequence is reported with its number, seed and steps, so it can be replayed.

mod check;
mod model;
mod steps;
pub(crate) mod writer;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

pub use writer::child_main;

use crate::rng::mix;

/// How many sequences, and where the binaries are.
#[derive(Debug, Clone)]
pub struct SequenceConfig {
    /// The `reliability-child` executable (the writer).
    pub child: PathBuf,
    /// The `idemdb` executable (the operator).
    pub cli: PathBuf,
    /// Sequences to run.
    pub sequences: u64,
    /// The number of the first sequence (sequence `n` of a seed is always the same steps, as
    /// far as the writer's timing allows).
    pub first: u64,
    /// Seed of every sequence.
    pub seed: u64,
    /// Sequences run at once.
    pub threads: usize,
    /// Where the files go (when `None`, a temporary directory in `/dev/shm` where it exists).
    pub dir: Option<PathBuf>,
}

/// What the sequences found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SequenceReport {
    /// Sequences run.
    pub sequences: u64,
    /// Steps run, by kind.
    pub steps: BTreeMap<&'static str, u64>,
    /// Completions the writers acknowledged.
    pub acknowledged: u64,
    /// Keys a store must hold found there (checked after every sequence).
    pub verified: u64,
    /// Acknowledged completions a store does not hold.
    pub lost: u64,
    /// Acknowledged completions given up by an explicit discard, still in a kept journal file.
    pub given_up: u64,
    /// Acknowledged completions of stores an operator replaced with `backup --overwrite`
    /// while nothing held them.
    pub replaced: u64,
    /// Keys found in a store that never had them.
    pub foreign: u64,
    /// Commands (and writer opens) refused.
    pub refusals: u64,
    /// Refused commands after which the directory was not as before.
    pub refusals_changed: u64,
    /// Those, by kind of step.
    pub changed_by: BTreeMap<&'static str, u64>,
    /// Refusals without the documented exit code and one-line report (or a writer that died
    /// opening the store).
    pub untyped: u64,
    /// Stores refused at the final check (then recovered with their journal given up).
    pub refused_at_check: u64,
    /// Harness failures: a writer that failed after it opened, a file operation that failed.
    pub failures: u64,
    /// Failing sequences: number, seed, steps and what was wrong (the first few).
    pub failing: Vec<String>,
    /// Sequences that failed.
    pub failed_sequences: u64,
}

impl SequenceReport {
    /// Whether every check held.
    pub fn clean(&self) -> bool {
        self.lost == 0 && self.foreign == 0 && self.refusals_changed == 0 && self.untyped == 0 && self.failures == 0
    }

    /// Steps run, all kinds.
    pub fn steps_run(&self) -> u64 {
        self.steps.values().sum()
    }

    fn merge(&mut self, other: SequenceReport) {
        self.sequences += other.sequences;
        for (kind, n) in other.steps {
            *self.steps.entry(kind).or_insert(0) += n;
        }
        self.acknowledged += other.acknowledged;
        self.verified += other.verified;
        self.lost += other.lost;
        self.given_up += other.given_up;
        self.replaced += other.replaced;
        self.foreign += other.foreign;
        self.refusals += other.refusals;
        self.refusals_changed += other.refusals_changed;
        for (kind, n) in other.changed_by {
            *self.changed_by.entry(kind).or_insert(0) += n;
        }
        self.untyped += other.untyped;
        self.refused_at_check += other.refused_at_check;
        self.failures += other.failures;
        self.failed_sequences += other.failed_sequences;
        for failing in other.failing {
            if self.failing.len() < 2_000 {
                self.failing.push(failing);
            }
        }
    }
}

/// Runs the sequences `first..first + sequences` of `seed`, `threads` at a time.
///
/// # Errors
/// I/O errors of the harness itself (the temporary directory).
pub fn run(config: &SequenceConfig) -> std::io::Result<SequenceReport> {
    let (_temp, root) = crate::kill::work_dir(config.dir.as_deref(), Some(Path::new("/dev/shm")))?;
    std::fs::write(root.join("empty.jsonl"), b"")?;
    let next = AtomicU64::new(config.first);
    let end = config.first + config.sequences;
    let total = Mutex::new(SequenceReport::default());
    std::thread::scope(|scope| {
        for _ in 0..config.threads.max(1) {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::SeqCst);
                    if index >= end {
                        break;
                    }
                    let seed = mix(&[config.seed, 0x05e9_0e4c, index]);
                    let report = steps::sequence(config, &root, index, seed);
                    total.lock().unwrap_or_else(std::sync::PoisonError::into_inner).merge(report);
                }
            });
        }
    });
    let mut report = total.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    report.failing.sort_by_key(|text| {
        text.strip_prefix("sequence ").and_then(|rest| rest.split(' ').next()).and_then(|n| n.parse::<u64>().ok())
    });
    Ok(report)
}
