//! The tables a journal record may change, by their one-byte ids, and applying a mutation to
//! them: the same code writes a transaction's change and replays a record at recovery.

use redb::WriteTransaction;

use crate::Error;
use crate::tables::{AUDIT, EXPIRY, META, RECONCILE, RECORDS};

/// Table ids in journal records.
pub(crate) const T_META: u8 = 1;
pub(crate) const T_RECORDS: u8 = 2;
pub(crate) const T_EXPIRY: u8 = 3;
pub(crate) const T_AUDIT: u8 = 4;
pub(crate) const T_RECONCILE: u8 = 5;

/// Writes one mutation into its table of `tx`.
pub(crate) fn apply_put(tx: &WriteTransaction, table: u8, key: &[u8], value: &[u8]) -> Result<(), Applied> {
    match table {
        T_META => {
            let key = std::str::from_utf8(key).map_err(|_| Applied::Malformed)?;
            tx.open_table(META)?.insert(key, value)?;
        }
        T_RECORDS => {
            tx.open_table(RECORDS)?.insert(key, value)?;
        }
        T_EXPIRY => {
            if !value.is_empty() {
                return Err(Applied::Malformed);
            }
            tx.open_table(EXPIRY)?.insert(key, ())?;
        }
        T_AUDIT => {
            let key: [u8; 16] = key.try_into().map_err(|_| Applied::Malformed)?;
            tx.open_table(AUDIT)?.insert(key, value)?;
        }
        T_RECONCILE => {
            tx.open_table(RECONCILE)?.insert(key, value)?;
        }
        _ => return Err(Applied::Malformed),
    }
    Ok(())
}

/// Removes one key from its table of `tx`.
pub(crate) fn apply_remove(tx: &WriteTransaction, table: u8, key: &[u8]) -> Result<(), Applied> {
    match table {
        T_META => {
            let key = std::str::from_utf8(key).map_err(|_| Applied::Malformed)?;
            tx.open_table(META)?.remove(key)?;
        }
        T_RECORDS => {
            tx.open_table(RECORDS)?.remove(key)?;
        }
        T_EXPIRY => {
            tx.open_table(EXPIRY)?.remove(key)?;
        }
        T_AUDIT => {
            let key: [u8; 16] = key.try_into().map_err(|_| Applied::Malformed)?;
            tx.open_table(AUDIT)?.remove(key)?;
        }
        T_RECONCILE => {
            tx.open_table(RECONCILE)?.remove(key)?;
        }
        _ => return Err(Applied::Malformed),
    }
    Ok(())
}

/// A mutation could not be applied.
pub(crate) enum Applied {
    Storage(Error),
    /// It names no table of the store, or a key of the wrong shape.
    Malformed,
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

impl From<Applied> for Error {
    fn from(applied: Applied) -> Self {
        match applied {
            Applied::Storage(error) => error,
            Applied::Malformed => Error::Internal("a journal mutation names no table of the store"),
        }
    }
}
