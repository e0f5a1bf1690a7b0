//! What differs between the service's backends — and only that: which store, whether other
//! instances share it, how the dispatcher learns of charges enqueued elsewhere, and backups.
//! Payments themselves are written the same way on every backend ([`crate::ledger`]).

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use idemdb::{AsyncStore, BackupError, BackupOptions, BackupReport, Store};
use idemdb_interface::{BusinessStore, InspectStore};

use crate::ledger::LedgerError;

/// How often the dispatcher looks for due charges when nobody woke it (items whose backoff or
/// whose dead dispatcher's claim ran out, items another instance enqueued).
pub(crate) const POLL: Duration = Duration::from_millis(100);

/// A backend of the service: an idempotency store with an outbox and row tables, and what the
/// backend does its own way.
pub trait Backend: Clone + Send + Sync + 'static {
    /// The store the layer reserves keys in, the charges are enqueued in and payments are
    /// written to.
    type Store: InspectStore + BusinessStore + Clone + 'static;

    /// The store.
    fn store(&self) -> &Self::Store;

    /// Whether other instances of the service share the store (PostgreSQL): a key in progress
    /// may then be held by a live request elsewhere (see `IdempotencyLayer::shared_store`).
    fn shared(&self) -> bool {
        false
    }

    /// Waits while no charge is known to have been enqueued elsewhere: returns when another
    /// instance's enqueue may have made one due, or after this backend's poll interval (the
    /// dispatcher also wakes at once for this process's own enqueues).
    fn wait_for_charges(&self) -> impl Future<Output = ()> + Send;

    /// Writes a verified backup of the store, payments included, to `path` (a new file), while
    /// requests carry on.
    fn backup(&self, path: PathBuf) -> impl Future<Output = Result<BackupOutcome, LedgerError>> + Send;
}

/// What [`Backend::backup`] did.
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

/// The embedded redb store: payments are rows of the store's own database, journaled with the
/// reports that confirm their charges; backups copy them with the store.
#[derive(Debug, Clone)]
pub struct RedbBackend {
    store: Store,
    /// The same store through the async interface the service is generic over.
    handle: AsyncStore,
}

impl RedbBackend {
    /// The service on `store`.
    pub fn new(store: Store) -> Self {
        RedbBackend { handle: store.asynchronous(), store }
    }

    /// The backup of [`Backend::backup`], blocking: every table of the store, payments
    /// included, from one snapshot.
    ///
    /// # Errors
    /// As [`Store::backup_with`].
    pub fn backup_blocking(&self, path: &std::path::Path) -> Result<BackupReport, BackupError> {
        self.store.backup_with(path, BackupOptions::new())
    }
}

impl Backend for RedbBackend {
    type Store = AsyncStore;

    fn store(&self) -> &AsyncStore {
        &self.handle
    }

    fn wait_for_charges(&self) -> impl Future<Output = ()> + Send {
        // One process owns the file: only items that become due later (a retry after its
        // back-off, an expired claim) need the poll.
        tokio::time::sleep(POLL)
    }

    fn backup(&self, path: PathBuf) -> impl Future<Output = Result<BackupOutcome, LedgerError>> + Send {
        let backend = self.clone();
        async move {
            blocking::unblock(move || match backend.backup_blocking(&path) {
                Ok(report) => Ok(BackupOutcome::Written(report)),
                Err(BackupError::DestinationExists(_)) => Ok(BackupOutcome::Exists),
                Err(error) => Err(LedgerError::of(error)),
            })
            .await
        }
    }
}
