//! Workflow primitives in the redb store: the outbox, the reconciliation queue, the webhook
//! inbox and queue jobs. The rules are the core's ([`idemdb_core::OutboxItem`],
//! [`idemdb_core::accept`], [`idemdb_core::claim_job`]); these modules store what they
//! decide, each change in one write transaction with the same audit trail as records.

mod inbox;
mod jobs;
mod outbox;
mod reconcile;
mod retention;

pub(crate) use retention::{forget_entry, verify_tables};

pub use outbox::EffectFilter;
