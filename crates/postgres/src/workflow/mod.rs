//! Workflow primitives on PostgreSQL: the outbox, the reconciliation queue, the webhook inbox
//! and queue jobs (tables of migration 2). The rules are the core's
//! ([`OutboxItem`](idemdb_core::OutboxItem), [`accept`](idemdb_core::accept),
//! [`claim_job`](idemdb_core::claim_job)); these modules store what they decide, each change
//! in one transaction with the same audit trail as records, exactly as the embedded store
//! does.
//!
//! Locks: an outbox change locks the item's row, then the intent's record row (the record
//! follows its effect in the same transaction); a delivery takes transaction-scoped advisory
//! locks on its delivery id, then on its object; a job change takes one on the job. Every
//! change reads the time after its locks.

mod inbox;
mod jobs;
mod listen;
mod outbox;
mod reconcile;

pub use listen::OutboxListener;
pub(crate) use listen::channel;

use deadpool_postgres::tokio_postgres::types::ToSql;

use crate::error::Error;
use crate::txn::PgTxn;

/// Seeds of the advisory-lock hashes, one per kind of thing locked.
pub(crate) const LOCK_DELIVERY: i64 = 0x1de3_0001;
pub(crate) const LOCK_OBJECT: i64 = 0x1de3_0002;
pub(crate) const LOCK_JOB: i64 = 0x1de3_0003;

/// The text an advisory lock hashes: the parts, each prefixed by its length (so that no two
/// identities share a text; a hash collision only makes two transactions wait on each other).
pub(crate) fn lock_text(parts: &[&str]) -> String {
    let mut text = String::new();
    for part in parts {
        text.push_str(&part.len().to_string());
        text.push(':');
        text.push_str(part);
    }
    text
}

impl PgTxn {
    /// Takes the transaction-scoped advisory lock of `parts` (held until commit or rollback).
    pub(crate) async fn advisory_lock(&mut self, seed: i64, parts: &[&str]) -> Result<(), Error> {
        self.begin_now().await?;
        let inner = self.inner_arc();
        let text = lock_text(parts);
        let params: [&(dyn ToSql + Sync); 2] = [&text, &seed];
        self.query(&inner.sql.wf.advisory_lock, &params).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::lock_text;

    #[test]
    fn lock_texts_are_unambiguous() {
        assert_ne!(lock_text(&["a/b", "c"]), lock_text(&["a", "b/c"]));
        assert_ne!(lock_text(&["1:a", ""]), lock_text(&["", "1:a"]));
        assert_eq!(lock_text(&["psp", "evt_1"]), "3:psp5:evt_1");
    }
}
