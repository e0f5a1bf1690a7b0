//! Moving records in: the records of an embedded store, as the `idemdb export` JSON Lines
//! carry them (parsed and checked by the CLI, the same code that imports into a store file),
//! written in one transaction.

use std::collections::HashSet;

use deadpool_postgres::tokio_postgres::types::ToSql;

use idemdb_core::{Record, ScopedKey};

use crate::error::Error;
use crate::outcome::Before;
use crate::store::PgStore;
use crate::txn::row_values;

/// Records written by one statement during an import (arrays the server unnests): the cost is
/// linear in the records, a few thousand statements for a million.
const BATCH: usize = 1_000;

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
                let sql = if overwrite { &inner.sql.import_upsert } else { &inner.sql.import_insert };
                let mut report = ImportReport::default();
                for chunk in records.chunks(BATCH) {
                    let rows: Vec<_> = chunk.iter().map(|(_, record)| row_values(record)).collect();
                    let tenants: Vec<&str> = chunk.iter().map(|(s, _)| s.scope.tenant()).collect();
                    let operations: Vec<&str> = chunk.iter().map(|(s, _)| s.scope.operation()).collect();
                    let keys: Vec<&str> = chunk.iter().map(|(s, _)| s.key.as_str()).collect();
                    let states: Vec<&str> = rows.iter().map(|(state, _, _)| *state).collect();
                    let due: Vec<Option<i64>> = rows.iter().map(|(_, due, _)| *due).collect();
                    let bytes: Vec<&[u8]> = rows.iter().map(|(_, _, bytes)| bytes.as_slice()).collect();
                    let params: [&(dyn ToSql + Sync); 6] = [&tenants, &operations, &keys, &states, &due, &bytes];
                    let inserted = txn.query(sql, &params).await?;
                    let inserted: HashSet<(String, String, String)> = inserted
                        .iter()
                        .filter_map(|row| Some((row.try_get(0).ok()?, row.try_get(1).ok()?, row.try_get(2).ok()?)))
                        .collect();
                    for ((scoped, _), (_, _, bytes)) in chunk.iter().zip(rows) {
                        let identity = (
                            scoped.scope.tenant().to_string(),
                            scoped.scope.operation().to_string(),
                            scoped.key.as_str().to_string(),
                        );
                        if inserted.contains(&identity) {
                            report.imported += 1;
                            // Keys are distinct (the CLI checks), so no search for an earlier write.
                            txn.remember_new(&scoped.scope, &scoped.key, Before::Unknown, Some(bytes));
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
