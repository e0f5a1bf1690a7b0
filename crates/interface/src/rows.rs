//! The application's rows and the store's transitions in one transaction, on every backend.
//!
//! [`BusinessStore::commit_business`] takes a [`BusinessWrite`] (rows to put or delete, then
//! settlements: complete, fail, report or resolve an effect) and commits it in one transaction
//! of the backend: all of it or none. The HTTP layer's handlers, the workflow code and the
//! application then write a payment row and the confirmation of its charge once, for redb and
//! PostgreSQL alike. Why the write is a value rather than a closure over a transaction is said
//! in [`idemdb_core::BusinessWrite`]'s module.
//!
//! ```
//! use idemdb_core::{BusinessWrite, Lease, Row, RowTable};
//! use idemdb_interface::BusinessStore;
//!
//! const ORDERS: RowTable = RowTable::new("app_orders");
//!
//! /// Places the order and completes its key in one commit, on any backend.
//! async fn place<S: BusinessStore>(store: &S, lease: &Lease, tenant: &str, id: &str) -> Result<Vec<Row>, S::Error> {
//!     let write = BusinessWrite::new().put(ORDERS, tenant, id, b"{\"amount\":1050}".to_vec()).complete(lease, b"placed".to_vec());
//!     store.commit_business(write).await?;
//!     store.rows(ORDERS, tenant, None, 0).await
//! }
//! ```

use std::future::Future;

use idemdb_core::{BusinessWrite, OutboxItem, Row, RowTable};

use crate::IdempotencyStore;

/// A store that keeps the application's rows ([`RowTable`]s) beside its own records and
/// commits them together ([`BusinessStore::commit_business`]).
///
/// Row tables need no set-up: a backend makes a table on its first write (redb: a table of
/// the store's database, journaled like the store's own; PostgreSQL: a table in the store's
/// schema). Backups, rebuilds and crash recovery keep them with the store's tables.
pub trait BusinessStore: IdempotencyStore {
    /// Commits `write` in one transaction: its rows, then its settlements in order. A
    /// settlement the store refuses (a stale lease, an effect already reported) or a row the
    /// limits refuse ([`BusinessWrite::check`]) fails the call with nothing written. Returns
    /// the outbox items as the write's effect settlements left them, in the write's order.
    fn commit_business(
        &self,
        write: BusinessWrite,
    ) -> impl Future<Output = Result<Vec<OutboxItem>, Self::Error>> + Send;

    /// The row `(partition, id)` of `table`, if there is one.
    fn row(
        &self,
        table: RowTable,
        partition: &str,
        id: &str,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, Self::Error>> + Send;

    /// The rows of `partition` in `table` whose ids come after `after` (`None`: from the
    /// first), in byte order of their ids, at most `limit` of them (`0`: all).
    fn rows(
        &self,
        table: RowTable,
        partition: &str,
        after: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Row>, Self::Error>> + Send;
}
