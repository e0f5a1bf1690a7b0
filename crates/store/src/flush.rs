//! Making earlier commits durable: [`flush`] (`Store::flush`, and before an offline
//! inspection), and the close of a store's last handle (`Drop for Engine`), which flushes what
//! the engine still holds and, with a journal, checkpoints and marks it closed.
//!
//! Its own module because it is the one place that runs a transaction on the engine itself:
//! `engine.rs` cannot use `txn.rs` (which uses the engine) without a circle.

use crate::Error;
use crate::engine::Engine;
use crate::txn::Begun;

/// Makes every earlier commit durable (needed only with
/// [`Durability::Eventual`](crate::Durability::Eventual)), writing buffered audit events and
/// the clock high-water mark.
pub(crate) fn flush(engine: &Engine) -> Result<(), Error> {
    let begun = Begun::new(engine)?;
    let mut txn = begun.txn();
    txn.make_durable();
    txn.persist_clock_logged(true)?;
    let finished = txn.finish()?;
    begun.commit(finished)
}

impl Drop for Engine {
    /// Best effort, when the last handle goes: keep the clock state (as of now) and the
    /// buffered audit events; with a journal, checkpoint and mark it closed, so a closed store
    /// is one complete file. A read-only store writes nothing.
    fn drop(&mut self) {
        if self.is_read_only() {
            return;
        }
        match self.open_journal() {
            // The close's checkpoint applies everything journaled and clears the "records may
            // be pending" marker: the file alone is then the whole store.
            Some(wal) if !wal.failed() => {
                wal.begin_close();
                let _ = flush(self);
            }
            // A failed journal is replayed at the next open.
            Some(_) => {}
            None => {
                if self.has_unwritten_state() {
                    let _ = flush(self);
                }
            }
        }
    }
}
