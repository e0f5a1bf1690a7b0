//! Where payments live, and how a payment row and the confirmation of its charge share one
//! commit.
//!
//! The service is generic over [`Ledger`]: its [`store`](Ledger::store) is any
//! [`WorkflowStore`] (idempotency records and the outbox), and [`Ledger::record_payment`]
//! writes the payment row **and** reports the charge's outbox item confirmed (which completes
//! the idempotency record) in one transaction of that backend. [`RedbLedger`] does it with a
//! redb write transaction beside the idemdb tables; [`PgLedger`](crate::PgLedger) does the same with
//! one SQL transaction (`INSERT INTO app_payments ...` and `PgTxn::report_effect`), and slots in
//! here without touching the handlers.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use idemdb::redb::TableDefinition;
use idemdb::{
    AsyncStore, BackupError, BackupOptions, BackupReport, EffectReport, OutboxItem, ProviderState, ResolutionCause,
    Store,
};
use idemdb_interface::InspectStore;
use serde_json::Value;

/// How often the dispatcher looks for due charges when nobody woke it (items whose backoff or
/// whose dead dispatcher's claim ran out, items another instance enqueued).
pub(crate) const POLL: Duration = Duration::from_millis(100);

/// `(tenant, payment id)` → the payment as JSON.
pub const PAYMENTS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("app_payments");

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

/// How a charge's outbox item is settled beside its payment row.
#[derive(Debug, Clone)]
pub enum Settlement {
    /// The dispatcher's report of what the provider answered to its claim.
    Reported(EffectReport),
    /// What was learnt of an uncertain charge, and who learnt it (the reconciler asking the
    /// provider, or an operator).
    Resolved(ProviderState, ResolutionCause),
}

/// A payments backend: an idempotency store with an outbox, plus payment rows written in the
/// same transaction as the report that confirms their charge.
pub trait Ledger: Clone + Send + Sync + 'static {
    /// The store the layer reserves keys in and the charges are enqueued in.
    type Store: InspectStore + Clone + 'static;

    /// The store.
    fn store(&self) -> &Self::Store;

    /// Whether other instances of the service share the store (PostgreSQL): a key in progress
    /// may then be held by a live request elsewhere (see `IdempotencyLayer::shared_store`).
    fn shared(&self) -> bool {
        false
    }

    /// Writes `payment` (a JSON object with `id`) for `tenant` and settles `item` (the
    /// charge's outbox item: as claimed for a report, as found for a resolution) in **one**
    /// commit: both or neither. A confirmed charge completes the idempotency record with its
    /// result.
    fn record_payment(
        &self,
        tenant: &str,
        payment: &Value,
        item: &OutboxItem,
        settlement: Settlement,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send;

    /// Every payment of `tenant`.
    fn payments(&self, tenant: &str) -> impl Future<Output = Result<Vec<Value>, LedgerError>> + Send;

    /// Waits while no charge is known to have been enqueued elsewhere: returns when another
    /// instance's enqueue may have made one due, or after this backend's poll interval (the
    /// dispatcher also wakes at once for this process's own enqueues).
    fn wait_for_charges(&self) -> impl Future<Output = ()> + Send;

    /// Writes a verified backup of the store and the payments to `path` (a new file), while
    /// requests carry on.
    fn backup(&self, path: PathBuf) -> impl Future<Output = Result<BackupOutcome, LedgerError>> + Send;
}

/// What [`Ledger::backup`] did.
#[derive(Debug)]
#[non_exhaustive]
pub enum BackupOutcome {
    /// The backup was written and verified.
    Written(BackupReport),
    /// A file exists at the path: nothing was written.
    Exists,
    /// This backend has no backup of its own here (PostgreSQL has its tools).
    NotOnThisBackend,
}

/// The ledger on the embedded redb store: payment rows in table `app_payments` of the store's
/// own database. With the table registered when the store was opened
/// ([`RedbLedger::store_builder`], as the binary opens it) a payment row rides the store's
/// journal with the report; otherwise its commit is a checkpoint of the store file. A store
/// whose journal holds writes of the table (after a crash) opens only with the table
/// registered: the service's next start replays them, and until then the `idemdb` CLI is
/// refused with `OpenError::JournalNeedsTable`, which names the table.
#[derive(Debug, Clone)]
pub struct RedbLedger {
    store: Store,
    /// The same store through the async interface the service is generic over.
    handle: AsyncStore,
    /// Whether [`PAYMENTS`] was registered when the store was opened (fixed from then on).
    journaled: bool,
}

impl RedbLedger {
    /// A ledger in `store`'s database; payment rows are journaled when `store` was opened
    /// from [`RedbLedger::store_builder`].
    pub fn new(store: Store) -> Self {
        let journaled = store.journals_table(PAYMENTS);
        RedbLedger { handle: store.asynchronous(), store, journaled }
    }

    /// The store's builder with the payments table registered for journaled writes: every
    /// commit of a payment is then one journal append. Every later open of the store, the
    /// `idemdb` CLI's included, must then register the table too while the journal holds its
    /// writes.
    pub fn store_builder() -> idemdb::StoreBuilder {
        Store::builder().journaled_table(PAYMENTS)
    }
}

impl Ledger for RedbLedger {
    type Store = AsyncStore;

    fn wait_for_charges(&self) -> impl Future<Output = ()> + Send {
        // One process owns the file: only items that become due later (a retry after its
        // back-off, an expired claim) need the poll.
        tokio::time::sleep(POLL)
    }

    fn store(&self) -> &AsyncStore {
        &self.handle
    }

    fn record_payment(
        &self,
        tenant: &str,
        payment: &Value,
        item: &OutboxItem,
        settlement: Settlement,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send {
        let (tenant, item) = (tenant.to_string(), item.clone());
        let id = payment["id"].as_str().map(str::to_string);
        let row = serde_json::to_vec(payment);
        let (store, journaled) = (self.store.clone(), self.journaled);
        async move {
            let (Some(id), Ok(row)) = (id, row) else {
                return Err(LedgerError::of("a payment is a JSON object with a string `id`"));
            };
            store
                .write_async(move |txn| {
                    let payment = (tenant.as_str(), id.as_str());
                    if journaled {
                        txn.table(PAYMENTS)?.insert(payment, row.as_slice())?;
                    } else {
                        let mut payments =
                            txn.tables_checkpointing().open_table(PAYMENTS).map_err(idemdb::Error::from)?;
                        payments.insert(payment, row.as_slice()).map_err(idemdb::Error::from)?;
                    }
                    match settlement {
                        Settlement::Reported(report) => txn.report_effect(&item, report).map(drop),
                        Settlement::Resolved(state, cause) => {
                            txn.resolve_effect(&item.scope, &item.key, &item.effect, state, cause).map(drop)
                        }
                    }
                })
                .await
                .map_err(LedgerError::of_store)
        }
    }

    fn payments(&self, tenant: &str) -> impl Future<Output = Result<Vec<Value>, LedgerError>> + Send {
        let (store, tenant) = (self.store.clone(), tenant.to_string());
        async move {
            blocking::unblock(move || {
                store.read(|tx| {
                    let table = match tx.open_table(PAYMENTS) {
                        Ok(table) => table,
                        Err(idemdb::redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                        Err(error) => return Err(LedgerError::of(error)),
                    };
                    let mut payments = Vec::new();
                    for entry in table.range((tenant.as_str(), "")..).map_err(LedgerError::of)? {
                        let (key, value) = entry.map_err(LedgerError::of)?;
                        if key.value().0 != tenant {
                            break;
                        }
                        payments.push(serde_json::from_slice(value.value()).map_err(LedgerError::of)?);
                    }
                    Ok(payments)
                })
            })
            .await
        }
    }

    fn backup(&self, path: PathBuf) -> impl Future<Output = Result<BackupOutcome, LedgerError>> + Send {
        let ledger = self.clone();
        async move {
            blocking::unblock(move || match ledger.backup_blocking(&path) {
                Ok(report) => Ok(BackupOutcome::Written(report)),
                Err(BackupError::DestinationExists(_)) => Ok(BackupOutcome::Exists),
                Err(error) => Err(LedgerError::of(error)),
            })
            .await
        }
    }
}

impl RedbLedger {
    /// The backup of [`Ledger::backup`], blocking: the idemdb tables and the payments table
    /// from one snapshot.
    ///
    /// # Errors
    /// As [`Store::backup_with`].
    pub fn backup_blocking(&self, path: &std::path::Path) -> Result<BackupReport, BackupError> {
        self.store.backup_with(path, BackupOptions::new().table(PAYMENTS))
    }
}

impl From<idemdb::Error> for LedgerError {
    fn from(error: idemdb::Error) -> Self {
        LedgerError::of_store(error)
    }
}
