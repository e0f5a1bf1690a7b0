//! Where payments live, and how a payment row and the confirmation of its charge share one
//! commit: one [`BusinessWrite`] on whatever store the service runs on.
//!
//! A payment is a row of the row table [`PAYMENTS`] (`(tenant, payment id)` → the payment as
//! JSON). [`record_payment`] puts the row **and** settles the charge's outbox item (the
//! dispatcher's report, or what the reconciler or an operator learnt) in one transaction of the
//! backend: the report of a confirmed charge completes the idempotency record, so a payment
//! exists exactly when its key replays "paid". The same code runs on redb (one journal append)
//! and on PostgreSQL (one SQL transaction); only how the dispatcher is woken and how backups are
//! made differ by backend ([`crate::Backend`]).

use idemdb_core::{BusinessWrite, EffectReport, OutboxItem, ProviderState, ResolutionCause, RowTable};
use idemdb_interface::BusinessStore;
use serde_json::Value;

/// `(tenant, payment id)` → the payment as JSON: a row table of the store.
pub const PAYMENTS: RowTable = RowTable::new("app_payments");

/// The ledger failed.
#[derive(Debug, thiserror::Error)]
#[error("ledger failed: {message}")]
pub struct LedgerError {
    message: String,
    /// Whether the write may have committed (its commit's answer was lost).
    outcome_unknown: bool,
}

impl LedgerError {
    /// A failure that changed nothing (the write was rolled back, or never began).
    pub(crate) fn of(error: impl std::fmt::Display) -> Self {
        LedgerError { message: error.to_string(), outcome_unknown: false }
    }

    /// A failure of the store: unknown when the store says its commit's outcome is unknown.
    pub(crate) fn of_store(error: impl std::fmt::Display + idemdb_core::Coded) -> Self {
        let outcome_unknown = !crate::payment::nothing_changed(&error);
        LedgerError { message: error.to_string(), outcome_unknown }
    }

    /// Whether the write may have committed: `false` means the store said nothing changed
    /// (the payment row was not written and the charge's item is as it was).
    pub fn outcome_unknown(&self) -> bool {
        self.outcome_unknown
    }
}

/// How a charge's outbox item ends, beside its payment row: a report or a resolution.
#[derive(Debug, Clone)]
pub enum ChargeOutcome {
    /// The dispatcher's report of what the provider answered to its claim.
    Reported(EffectReport),
    /// What was learnt of an uncertain charge, and who learnt it (the reconciler asking the
    /// provider, or an operator).
    Resolved(ProviderState, ResolutionCause),
}

/// Writes `payment` (a JSON object with a string `id`) for `tenant` and settles `item` (the
/// charge's outbox item: as claimed for a report, as found for a resolution) in **one** commit
/// of `store`: both or neither. A confirmed charge completes the idempotency record with its
/// result.
///
/// # Errors
/// A payment without a string `id`; the store's refusal of the settlement (a claim another
/// dispatcher took since, an item already settled) or its failure.
pub async fn record_payment<S: BusinessStore>(
    store: &S,
    tenant: &str,
    payment: &Value,
    item: &OutboxItem,
    settlement: ChargeOutcome,
) -> Result<(), LedgerError> {
    let Some(id) = payment["id"].as_str() else {
        return Err(LedgerError::of("a payment is a JSON object with a string `id`"));
    };
    let write = BusinessWrite::new().put(PAYMENTS, tenant, id, payment.to_string().into_bytes());
    let write = match settlement {
        ChargeOutcome::Reported(report) => write.report_effect(item, report),
        ChargeOutcome::Resolved(state, cause) => write.resolve_effect(item, state, cause),
    };
    store.commit_business(write).await.map(drop).map_err(LedgerError::of_store)
}

/// Every payment of `tenant`, in order of their ids.
///
/// # Errors
/// The store could not be read, or a row is not JSON.
pub async fn payments<S: BusinessStore>(store: &S, tenant: &str) -> Result<Vec<Value>, LedgerError> {
    let rows = store.rows(PAYMENTS, tenant, None, 0).await.map_err(LedgerError::of)?;
    rows.iter().map(|row| serde_json::from_slice(&row.value).map_err(LedgerError::of)).collect()
}
