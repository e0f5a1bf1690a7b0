//! The service on PostgreSQL: instances on one database and schema share the idempotency
//! records, the outbox (each charge is claimed by one dispatcher at a time) and the payments
//! (row table [`PAYMENTS`](crate::PAYMENTS), a table of the store's schema); a dispatcher
//! learns of charges other instances enqueue by `LISTEN`.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use idemdb_postgres::{OutboxListener, PgStore, PgTxn};

use crate::backend::{Backend, BackupOutcome, POLL};
use crate::ledger::{LedgerError, PAYMENTS};

/// The service on PostgreSQL ([`PgStore`]).
#[derive(Debug, Clone)]
pub struct PgBackend {
    store: PgStore,
    /// The outbox listener, made on first use (and again after its connection was lost).
    listener: Arc<Mutex<Option<Arc<OutboxListener>>>>,
}

/// How long an idle dispatcher on PostgreSQL waits for a notification before it looks at the
/// outbox anyway (for items that became due without one: a retry after its back-off, an expired
/// claim).
pub const SAFETY_POLL: Duration = Duration::from_secs(5);

impl PgBackend {
    /// The service on `store`, with the payments table made (if missing) before the first
    /// request.
    ///
    /// # Errors
    /// The table could not be made (the database is unavailable, or the role may not create
    /// it); nothing was changed.
    pub async fn new(store: PgStore) -> Result<PgBackend, LedgerError> {
        store.create_row_table(PAYMENTS).await.map_err(LedgerError::of)?;
        Ok(PgBackend { store, listener: Arc::default() })
    }

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

impl Backend for PgBackend {
    type Store = PgStore;

    fn store(&self) -> &PgStore {
        &self.store
    }

    fn shared(&self) -> bool {
        true
    }

    async fn wait_for_charges(&self) {
        match self.listener().await {
            Some(listener) => {
                listener.wait(SAFETY_POLL).await;
            }
            None => tokio::time::sleep(POLL).await,
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
