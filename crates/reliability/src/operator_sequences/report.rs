//! What a run of operator sequences is given and what it reports.

use std::collections::BTreeMap;
use std::path::PathBuf;

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

    pub(super) fn merge(&mut self, other: SequenceReport) {
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
