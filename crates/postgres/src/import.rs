//! Moving records in: the records of an embedded store, as the `idemdb export` JSON Lines
//! carry them (parsed and checked by the CLI, the same code that imports into a store file),
//! written in one transaction.

use futures_util::future::try_join_all;

use idemdb_core::{Record, ScopedKey};

use crate::error::Error;
use crate::outcome::Before;
use crate::store::PgStore;

/// Statements sent in one round trip during an import.
const PIPELINE: usize = 64;

/// What [`PgStore::import`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImportReport {
    /// Records written.
    pub imported: u64,
    /// Records skipped because the key already had one (without `overwrite`).
    pub skipped: u64,
}

impl PgStore {
    /// Writes `records` as given, in **one transaction**: all of them or, on any error, none.
    /// A key that already has a record keeps it unless `overwrite` is set. Import bypasses the
    /// state machine, so records must come from a store that made them (the CLI's
    /// `idemdb import --postgres URL FILE` reads an `idemdb export` file and checks every line
    /// first).
    ///
    /// # Errors
    /// [`Error::Unavailable`], [`Error::CommitUnknown`] and database errors.
    pub async fn import(&self, records: &[(ScopedKey, Record)], overwrite: bool) -> Result<ImportReport, Error> {
        self.in_txn(|mut txn| async move {
            let written = async {
                txn.begin_now().await?;
                let inner = txn.inner_arc();
                let sql = if overwrite { &inner.sql.upsert } else { &inner.sql.insert };
                let mut report = ImportReport::default();
                for chunk in records.chunks(PIPELINE) {
                    let rows = try_join_all(
                        chunk.iter().map(|(scoped, record)| txn.write_row(sql, &scoped.scope, &scoped.key, record)),
                    )
                    .await?;
                    for ((scoped, _), (written, bytes)) in chunk.iter().zip(rows) {
                        if written > 0 {
                            report.imported += 1;
                            txn.remember(&scoped.scope, &scoped.key, Before::Unknown, Some(bytes));
                        } else {
                            report.skipped += 1;
                        }
                    }
                }
                Ok::<_, Error>(report)
            }
            .await;
            (txn, written)
        })
        .await
    }
}
