//! The ledger on PostgreSQL: payment rows in table `app_payments` of the store's schema, written
//! in the same SQL transaction as the report that confirms their charge.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use idemdb_postgres::{OutboxItem, OutboxListener, PgStore, PgTxn};
use serde_json::Value;

use crate::ledger::{BackupOutcome, Ledger, LedgerError, Settlement};

/// The payments table on PostgreSQL, in the store's schema.
pub const PG_PAYMENTS_TABLE: &str = "app_payments";

/// The ledger on PostgreSQL ([`PgStore`]): payment rows in table [`PG_PAYMENTS_TABLE`] of the
/// store's schema, keyed `(tenant, id)`, the payment as `jsonb`. Instances of the service on
/// the same database and schema share the idempotency records, the outbox (each charge is
/// claimed by one dispatcher at a time) and the payments.
#[derive(Debug, Clone)]
pub struct PgLedger {
    store: PgStore,
    insert: String,
    list: String,
    /// The outbox listener, made on first use (and again after its connection was lost).
    listener: Arc<Mutex<Option<Arc<OutboxListener>>>>,
}

/// How long an idle dispatcher on PostgreSQL waits for a notification before it looks at the
/// outbox anyway (for items that became due without one: a retry after its back-off, an expired
/// claim).
pub const SAFETY_POLL: Duration = Duration::from_secs(5);

impl PgLedger {
    /// A ledger in `store`'s schema: creates table [`PG_PAYMENTS_TABLE`] there if it is missing.
    ///
    /// # Errors
    /// The table could not be created (the database is unavailable, or the role may not create
    /// tables in the schema).
    pub async fn new(store: PgStore) -> Result<PgLedger, LedgerError> {
        let table = format!("\"{}\".{PG_PAYMENTS_TABLE}", store.schema());
        let create = format!(
            "CREATE TABLE IF NOT EXISTS {table} (
                tenant text COLLATE \"C\" NOT NULL,
                id text COLLATE \"C\" NOT NULL,
                payment jsonb NOT NULL,
                PRIMARY KEY (tenant, id)
            )"
        );
        create_table(&store, &table, &create).await.map_err(LedgerError::of)?;
        // No `ON CONFLICT`: a second row for one payment is a bug, and aborts the transaction
        // (and with it the report).
        let insert = format!("INSERT INTO {table} (tenant, id, payment) VALUES ($1, $2, $3::text::jsonb)");
        let list = format!("SELECT payment::text FROM {table} WHERE tenant = $1 ORDER BY id");
        Ok(PgLedger { store, insert, list, listener: Arc::default() })
    }
}

impl PgLedger {
    /// The listener, made now if there is none or it lost its connection.
    async fn listener(&self) -> Option<Arc<OutboxListener>> {
        let current = self.listener.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if let Some(listener) = current.filter(|l| !l.is_closed()) {
            return Some(listener);
        }
        match self.store.outbox_listener().await {
            Ok(listener) => {
                let listener = Arc::new(listener);
                *self.listener.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&listener));
                Some(listener)
            }
            Err(error) => {
                eprintln!("payments-example: cannot listen for enqueued charges ({error}); polling the outbox");
                None
            }
        }
    }
}

impl Ledger for PgLedger {
    type Store = PgStore;

    async fn wait_for_charges(&self) {
        match self.listener().await {
            Some(listener) => {
                listener.wait(SAFETY_POLL).await;
            }
            None => tokio::time::sleep(crate::ledger::POLL).await,
        }
    }

    fn store(&self) -> &PgStore {
        &self.store
    }

    fn shared(&self) -> bool {
        true
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
        let row = payment.to_string();
        let ledger = self.clone();
        async move {
            let Some(id) = id else {
                return Err(LedgerError::of("a payment is a JSON object with a string `id`"));
            };
            let mut txn = ledger.store.begin().await.map_err(LedgerError::of)?;
            let written = match txn.client().execute(&ledger.insert, &[&tenant, &id, &row]).await {
                Ok(_) => match settlement {
                    Settlement::Reported(report) => txn.report_effect(&item, report).await.map(drop),
                    Settlement::Resolved(state, cause) => {
                        txn.resolve_effect(&item.scope, &item.key, &item.effect, state, cause).await.map(drop)
                    }
                }
                .map_err(LedgerError::of),
                Err(error) => Err(LedgerError::of(error)),
            };
            match written {
                // Only a commit whose answer was lost may have written the row.
                Ok(()) => txn.commit().await.map_err(LedgerError::of_store),
                Err(error) => {
                    rollback(txn).await;
                    Err(error)
                }
            }
        }
    }

    fn payments(&self, tenant: &str) -> impl Future<Output = Result<Vec<Value>, LedgerError>> + Send {
        let (ledger, tenant) = (self.clone(), tenant.to_string());
        async move {
            let txn = ledger.store.begin().await.map_err(LedgerError::of)?;
            let rows = txn.client().query(&ledger.list, &[&tenant]).await;
            rollback(txn).await;
            let mut payments = Vec::new();
            for row in rows.map_err(LedgerError::of)? {
                let payment: String = row.try_get(0).map_err(LedgerError::of)?;
                payments.push(serde_json::from_str(&payment).map_err(LedgerError::of)?);
            }
            Ok(payments)
        }
    }

    fn backup(&self, _path: std::path::PathBuf) -> impl Future<Output = Result<BackupOutcome, LedgerError>> + Send {
        std::future::ready(Ok(BackupOutcome::NotOnThisBackend))
    }
}

/// Ends a transaction that must not commit (a read, or one that failed). A failed rollback
/// closes the connection, which ends the transaction on the server too.
async fn rollback(txn: PgTxn) {
    let _ = txn.rollback().await;
}

/// Creates `table` with `create` (a `CREATE TABLE IF NOT EXISTS`) under a transaction-scoped
/// advisory lock on its name: instances starting together take turns instead of racing on the
/// catalog.
pub(crate) async fn create_table(store: &PgStore, table: &str, create: &str) -> Result<(), idemdb_postgres::Error> {
    let txn = store.begin().await?;
    let created = async {
        txn.client().execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&table]).await?;
        txn.client().batch_execute(create).await
    }
    .await;
    match created {
        Ok(()) => txn.commit().await,
        Err(error) => {
            rollback(txn).await;
            Err(idemdb_postgres::Error::from(error))
        }
    }
}
