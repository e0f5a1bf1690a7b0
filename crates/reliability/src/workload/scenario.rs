//! What one run exercises: the workload's script, the client (correct or deliberately
//! broken), the store's durability and journal, and the fault.

use idemdb::{Durability, Timestamp};

use crate::fault::FaultPlan;

/// Start of the simulated clock: 2023-11-14T22:13:20Z.
pub const T0: u64 = 1_700_000_000_000;
pub(super) const LEASE_MS: u64 = 10_000;
pub(super) const RESPONSE_MS: u64 = 3_600_000;
pub(super) const PURGE_RESPONSE_MS: u64 = 2_000;
pub(super) const TOMBSTONE_MS: u64 = 86_400_000;

/// A workload: a short script of intents (a few, so that each crash point is cheap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Workload {
    /// reserve → remote effect → complete, for three intents.
    Charge,
    /// `Store::execute`: the business write and the completion in one commit, three intents.
    SameDb,
    /// First attempts time out after the effect, time out before it, are declined, or fail
    /// before any effect; retries reconcile with the provider; four intents.
    Uncertain,
    /// Results expire and are purged (tombstoned) between deliveries; a late retry meets the
    /// tombstone; three intents.
    Purge,
}

impl Workload {
    /// Every workload.
    pub const ALL: [Workload; 4] = [Workload::Charge, Workload::SameDb, Workload::Uncertain, Workload::Purge];

    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Charge => "charge",
            Workload::SameDb => "same-db",
            Workload::Uncertain => "uncertain",
            Workload::Purge => "purge",
        }
    }

    pub(super) fn intents(self) -> usize {
        match self {
            Workload::Uncertain => 4,
            _ => 3,
        }
    }

    pub(super) fn response_ms(self) -> u64 {
        match self {
            Workload::Purge => PURGE_RESPONSE_MS,
            _ => RESPONSE_MS,
        }
    }

    pub(super) fn script(self) -> Vec<Action> {
        let n = self.intents();
        match self {
            Workload::Charge | Workload::Uncertain => (0..n).map(Action::Deliver).collect(),
            Workload::SameDb => (0..n).map(Action::Execute).collect(),
            Workload::Purge => vec![
                Action::Deliver(0),
                Action::Deliver(1),
                Action::Advance(PURGE_RESPONSE_MS + 1),
                Action::Purge,
                Action::Deliver(2),
                Action::Deliver(0),
                Action::Advance(PURGE_RESPONSE_MS + 1),
                Action::Purge,
            ],
        }
    }
}

/// One step of a workload's script.
#[derive(Debug, Clone, Copy)]
pub(super) enum Action {
    Deliver(usize),
    Execute(usize),
    Advance(u64),
    Purge,
}

/// How the client (or the storage under it) behaves. Everything but [`Adapter::Correct`] is
/// deliberately broken, to prove that the harness reports what it is meant to catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Adapter {
    /// The documented client protocol.
    Correct,
    /// Broken: commits without durability (the store runs with `Durability::Eventual`) but
    /// treats every completion as durable and does not flush before the remote effect.
    CompleteWithoutDurability,
    /// Broken: after a crash, an attempt whose outcome is unknown is run again without asking
    /// the provider (reconciles as released blindly).
    RerunInProgress,
    /// Broken storage: the disk's `sync_data` reports success and makes nothing durable.
    LyingDisk,
}

/// What one run exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scenario {
    /// The script.
    pub workload: Workload,
    /// The store's durability. With [`Durability::Eventual`] the correct client flushes after
    /// reserving and before the remote effect, and a completion rolled back by a crash is
    /// allowed (counted as `rolled_back`, then reconciled).
    pub durability: Durability,
    /// The client.
    pub adapter: Adapter,
    /// Whether the store journals its commits (on the disk's second file; Immediate only).
    pub journal: bool,
}

/// The journal size of journaled scenarios: small, so checkpoints happen inside the scripts.
pub const JOURNAL_BYTES: u64 = 64 * 1024;

impl Scenario {
    /// The correct client on `workload` with `durability`, without a journal.
    pub fn new(workload: Workload, durability: Durability) -> Self {
        Scenario { workload, durability, adapter: Adapter::Correct, journal: false }
    }

    /// [`Scenario::new`] with [`Durability::Immediate`] and the journal on.
    pub fn journaled(workload: Workload) -> Self {
        Scenario { journal: true, ..Scenario::new(workload, Durability::Immediate) }
    }

    /// "Immediate", "Eventual" or "Journal" (immediate, journaled), for reports.
    pub fn mode(self) -> &'static str {
        match (self.journal, self.durability) {
            (true, _) => "Journal",
            (false, Durability::Immediate) => "Immediate",
            (false, _) => "Eventual",
        }
    }

    pub(super) fn store_durability(self) -> Durability {
        match self.adapter {
            Adapter::CompleteWithoutDurability => Durability::Eventual,
            _ => self.durability,
        }
    }

    /// Whether the client relies on a completion being durable once it returned.
    pub(super) fn claims_durable(self) -> bool {
        self.durability == Durability::Immediate || self.adapter == Adapter::CompleteWithoutDurability
    }

    pub(super) fn flushes_before_effect(self) -> bool {
        self.adapter == Adapter::Correct && self.store_durability() == Durability::Eventual
    }
}

/// The fault of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Injection {
    /// The fault, counted from the first operation of store creation; `None` for a run whose
    /// only crash is the final power cut.
    pub plan: Option<FaultPlan>,
    /// Chooses which unsynced writes a power cut keeps and tears.
    pub damage_seed: u64,
    /// How many more crashes happen while the store recovers (each at a random early operation
    /// of the reopen).
    pub recovery_crashes: u32,
}

/// A timestamp helper for reports.
pub fn start_time() -> Timestamp {
    Timestamp::from_millis(T0)
}
