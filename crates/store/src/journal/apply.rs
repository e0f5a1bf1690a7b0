//! The tables a journal record may change, by their one-byte ids, and applying a mutation to
//! them: the same code writes a transaction's change and replays a record at recovery.
//!
//! Every table the store owns has an id here, so every write the store itself makes rides the
//! journal. The application's tables share one id, [`TableId::Application`]: their mutations carry
//! the table's name in front of the key (see [`crate::app_table`]), and are replayed through
//! the table types the application registered with
//! [`StoreBuilder::journaled_table`](crate::StoreBuilder::journaled_table). Row tables
//! ([`RowTable`](idemdb_core::RowTable)) share [`TableId::Rows`]: they all have one type, so they
//! replay without registration (see [`crate::rows`]).
//!
//! Adding an id changes no byte of the journal format (a mutation's table is one byte), so
//! journals written before an id existed read unchanged; a build that does not know an id
//! refuses to replay the record (it names no table of the store) instead of skipping it.

use redb::WriteTransaction;

use crate::Error;
use crate::app_table::ReplayError;
use crate::tables::{AUDIT, EXPIRY, INTENTS, META, RECONCILE, RECORDS};
#[cfg(feature = "workflow")]
use crate::tables::{DELIVERIES, JOBS, OBJECTS, OUTBOX, OUTBOX_DUE};

// The table ids are listed with the tables (`tables.rs`).
pub(crate) use crate::tables::TableId;

/// Writes one mutation into its table of `tx`. Application tables are looked up in `apps`.
pub(crate) fn apply_put(
    tx: &WriteTransaction,
    apps: &crate::app_table::AppTables,
    table: TableId,
    key: &[u8],
    value: &[u8],
) -> Result<(), Applied> {
    apply(tx, apps, table, key, Some(value))
}

/// Removes one key from its table of `tx`. Application tables are looked up in `apps`.
pub(crate) fn apply_remove(
    tx: &WriteTransaction,
    apps: &crate::app_table::AppTables,
    table: TableId,
    key: &[u8],
) -> Result<(), Applied> {
    apply(tx, apps, table, key, None)
}

/// Puts `key` → `value`, or removes `key` (`None`), in the table with id `table`.
fn apply(
    tx: &WriteTransaction,
    apps: &crate::app_table::AppTables,
    table: TableId,
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<(), Applied> {
    let bytes = |table| -> Result<(), Applied> {
        let mut table = tx.open_table(table)?;
        match value {
            Some(value) => drop(table.insert(key, value)?),
            None => drop(table.remove(key)?),
        }
        Ok(())
    };
    let index = |table| -> Result<(), Applied> {
        let mut table = tx.open_table(table)?;
        match value {
            Some([]) => drop(table.insert(key, ())?),
            Some(_) => return Err(Applied::Malformed),
            None => drop(table.remove(key)?),
        }
        Ok(())
    };
    match table {
        TableId::Meta => {
            let key = std::str::from_utf8(key).map_err(|_| Applied::Malformed)?;
            let mut meta = tx.open_table(META)?;
            match value {
                Some(value) => drop(meta.insert(key, value)?),
                None => drop(meta.remove(key)?),
            }
            Ok(())
        }
        TableId::Records => bytes(RECORDS),
        TableId::Expiry => index(EXPIRY),
        TableId::Audit => {
            let key: [u8; 16] = key.try_into().map_err(|_| Applied::Malformed)?;
            let mut audit = tx.open_table(AUDIT)?;
            match value {
                Some(value) => drop(audit.insert(key, value)?),
                None => drop(audit.remove(key)?),
            }
            Ok(())
        }
        TableId::Reconcile => bytes(RECONCILE),
        TableId::Intents => bytes(INTENTS),
        #[cfg(feature = "workflow")]
        TableId::Outbox => bytes(OUTBOX),
        #[cfg(feature = "workflow")]
        TableId::OutboxDue => index(OUTBOX_DUE),
        #[cfg(feature = "workflow")]
        TableId::Deliveries => bytes(DELIVERIES),
        #[cfg(feature = "workflow")]
        TableId::Objects => bytes(OBJECTS),
        #[cfg(feature = "workflow")]
        TableId::Jobs => bytes(JOBS),
        TableId::Application => Ok(apps.apply(tx, key, value)?),
        #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
        TableId::Rows => crate::rows::apply(tx, key, value).map_err(Applied::Storage)?.ok_or(Applied::Malformed),
        // Tables this build leaves out: a record naming one names no table of the store.
        #[cfg(not(feature = "workflow"))]
        TableId::Outbox | TableId::OutboxDue | TableId::Deliveries | TableId::Objects | TableId::Jobs => {
            Err(Applied::Malformed)
        }
        #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
        TableId::Rows => Err(Applied::Malformed),
    }
}

/// A mutation could not be applied.
pub(crate) enum Applied {
    Storage(Error),
    /// It names no table of the store, or a key of the wrong shape.
    Malformed,
    /// It names an application table that was not registered with the store.
    Unregistered(String),
}

macro_rules! applied_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Applied {
            fn from(error: $t) -> Self {
                Applied::Storage(error.into())
            }
        }
    )*};
}
applied_from!(redb::TableError, redb::StorageError);

impl From<ReplayError> for Applied {
    fn from(error: ReplayError) -> Self {
        match error {
            ReplayError::Malformed => Applied::Malformed,
            ReplayError::Unregistered(name) => Applied::Unregistered(name),
            ReplayError::Storage(error) => Applied::Storage(error),
        }
    }
}

impl From<Applied> for Error {
    fn from(applied: Applied) -> Self {
        match applied {
            Applied::Storage(error) => error,
            Applied::Malformed => Error::Internal("a journal mutation names no table of the store"),
            Applied::Unregistered(name) => Error::UnregisteredTable { name },
        }
    }
}
