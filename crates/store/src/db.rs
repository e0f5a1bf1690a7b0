//! The redb database behind a store: opened for writing, or read-only.

use redb::{Database, ReadOnlyDatabase, ReadTransaction, ReadableDatabase, TransactionError};

use crate::Error;

/// A store's database. A read-only one serves every lookup and listing and refuses every
/// write with [`Error::ReadOnly`]; it never changes a byte of the file.
pub(crate) enum Db {
    Writable(Database),
    ReadOnly(ReadOnlyDatabase),
}

impl Db {
    pub(crate) fn begin_read(&self) -> Result<ReadTransaction, TransactionError> {
        match self {
            Db::Writable(db) => db.begin_read(),
            Db::ReadOnly(db) => db.begin_read(),
        }
    }

    pub(crate) fn writable(&self) -> Result<&Database, Error> {
        match self {
            Db::Writable(db) => Ok(db),
            Db::ReadOnly(_) => Err(Error::ReadOnly),
        }
    }

    pub(crate) fn writable_mut(&mut self) -> Result<&mut Database, Error> {
        match self {
            Db::Writable(db) => Ok(db),
            Db::ReadOnly(_) => Err(Error::ReadOnly),
        }
    }

    pub(crate) fn is_read_only(&self) -> bool {
        matches!(self, Db::ReadOnly(_))
    }
}
