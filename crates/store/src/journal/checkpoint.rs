//! Checkpoints: the rule for when one is due, and the checkpoint commit itself — a durable
//! redb commit that records the last journal sequence number it covers and the next
//! generation, after which the journal starts over (see `commit.rs` for why that keeps the
//! file plus the journal exactly the acknowledged state).

use std::sync::atomic::Ordering;

use redb::WriteTransaction;

use super::commit::{CommitFailure, OpenJournal, OpenJournalState};
use super::format::Generation;
use crate::Error;
use crate::tables::META;

/// Checkpoint after this many journal records...
pub const CHECKPOINT_RECORDS: u64 = 1024;
/// ...or this many journal bytes (and always before the journal is full)...
pub const CHECKPOINT_BYTES: u64 = 4 * 1024 * 1024;
/// ...or at the first commit this long (store time) after the last checkpoint.
pub const CHECKPOINT_MS: u64 = 10_000;

impl OpenJournal {
    /// Whether the next journaled commit should be a checkpoint instead (the store is
    /// closing, or the journal holds enough records, bytes or time since the last one).
    pub(super) fn checkpoint_due(&self, state: &OpenJournalState, now: u64) -> bool {
        self.closing.load(Ordering::SeqCst)
            || state.journal.last_seq() - state.journal.checkpointed() >= CHECKPOINT_RECORDS
            || state.journal.used() >= CHECKPOINT_BYTES.min(state.journal.capacity() / 2)
            || now.saturating_sub(state.checkpoint_at) >= CHECKPOINT_MS
    }

    pub(super) fn checkpoint_locked(
        &self,
        state: &mut OpenJournalState,
        mut tx: WriteTransaction,
        now: u64,
    ) -> Result<(), CommitFailure> {
        let last = state.journal.last_seq();
        let current = state.journal.generation();
        let next = match current.epoch.checked_add(1) {
            Some(epoch) => Generation { epoch, salt: super::format::fresh_salt(current, last) },
            None => return Err(CommitFailure::Commit(Error::Internal("the journal's generations are exhausted"))),
        };
        let closing = self.closing.load(Ordering::SeqCst);
        let prepared = (|| -> Result<(), Error> {
            let mut meta = tx.open_table(META)?;
            super::meta::write_checkpoint(&mut meta, last, next)?;
            if closing {
                super::meta::write_closed(&mut meta)?;
            }
            drop(meta);
            tx.set_durability(redb::Durability::Immediate)?;
            Ok(())
        })();
        if let Err(error) = prepared {
            return Err(CommitFailure::Commit(error));
        }
        match tx.commit() {
            Ok(()) => {
                self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
                state.checkpoint_at = now;
                if let Err(error) = state.journal.restart(last, next) {
                    // The checkpoint took effect; the journal's header could not be written, so
                    // nothing more is appended until the store is reopened.
                    tracing::error!(target: "idemdb::journal", %error, "journal header write failed after a checkpoint");
                    self.fail();
                }
                Ok(())
            }
            Err(error) => {
                // redb refuses every later commit after a failed flush; so does the journal.
                self.fail();
                Err(CommitFailure::Commit(error.into()))
            }
        }
    }
}
