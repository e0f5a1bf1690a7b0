//! What runs found, added up over a sweep.

/// What runs found. Added up over a sweep.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Runs.
    pub runs: u64,
    /// Faults that fired (crash, fail once, fail forever).
    pub faults_fired: u64,
    /// Power cuts simulated (including crashes during recovery and the final one).
    pub power_cuts: u64,
    /// Reopens after a power cut.
    pub reopens: u64,
    /// Seen outcomes that were not replayed (promise 2, durable mode).
    pub lost: u64,
    /// Seen outcomes rolled back by a crash under `Durability::Eventual` (allowed; reconciled).
    pub rolled_back: u64,
    /// Effects beyond the first for an intent.
    pub double: u64,
    /// Disks that did not open as a store any more.
    pub reopen_failures: u64,
    /// `verify` problems or torn same-database commits.
    pub integrity_failures: u64,
    /// Seen outcomes checked after a reopen and found replayed.
    pub completions_verified: u64,
    /// Answers the protocol does not allow here (mismatch, an intent that never settles).
    pub unexpected: u64,
    /// The first few failures, for a human.
    pub notes: Vec<String>,
}

const MAX_NOTES: usize = 12;

impl Counts {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &Counts) {
        self.runs += other.runs;
        self.faults_fired += other.faults_fired;
        self.power_cuts += other.power_cuts;
        self.reopens += other.reopens;
        self.lost += other.lost;
        self.rolled_back += other.rolled_back;
        self.double += other.double;
        self.reopen_failures += other.reopen_failures;
        self.integrity_failures += other.integrity_failures;
        self.completions_verified += other.completions_verified;
        self.unexpected += other.unexpected;
        for note in &other.notes {
            if self.notes.len() < MAX_NOTES {
                self.notes.push(note.clone());
            }
        }
    }

    /// Whether nothing that breaks a promise was found.
    pub fn clean(&self) -> bool {
        self.lost == 0
            && self.double == 0
            && self.reopen_failures == 0
            && self.integrity_failures == 0
            && self.unexpected == 0
    }

    pub(super) fn note(&mut self, note: String) {
        if self.notes.len() < MAX_NOTES {
            self.notes.push(note);
        }
    }
}
