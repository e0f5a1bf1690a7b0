//! Row tables on PostgreSQL: a [`RowTable`] is a table of the store's schema,
//! `(partition text, id text, value bytea)` keyed by `(partition, id)`, both `COLLATE "C"` so
//! rows list in byte order of their ids, as on redb.
//!
//! A table is made on its first use by this store: `CREATE TABLE IF NOT EXISTS` under an
//! advisory lock on its name, so instances starting together take turns.
//! [`PgStore::commit_business`] makes its tables in a transaction of their own before the
//! business transaction begins (which then holds no catalog lock); a row written in an
//! application's own [`PgTxn`] makes a missing table inside that transaction (rolled back with
//! it). Once this store has seen a table committed, later uses skip all of that. Every
//! statement gives its parameter types, so it runs unnamed (one round trip) in both statement
//! modes, PgBouncer's transaction pooling included.

use std::sync::PoisonError;

use deadpool_postgres::tokio_postgres::Row as PgRow;
use deadpool_postgres::tokio_postgres::types::{ToSql, Type};

use idemdb_core::{BusinessWrite, OutboxItem, Row, RowTable, RowWrite, Settle, check_row};

use crate::PgStore;
use crate::engine::Engine;
use crate::error::Error;
use crate::txn::PgTxn;

/// SQLSTATE `undefined_table`.
const UNDEFINED_TABLE: &str = "42P01";

/// The qualified name of `table` in the store's schema.
fn qualified(inner: &Engine, table: RowTable) -> String {
    format!("\"{}\".{}", inner.sql.schema, table.name())
}

impl Engine {
    /// Whether this store has seen `table` committed.
    fn knows_row_table(&self, table: RowTable) -> bool {
        self.row_tables.lock().unwrap_or_else(PoisonError::into_inner).contains(&table)
    }

    fn learn_row_table(&self, table: RowTable) {
        self.row_tables.lock().unwrap_or_else(PoisonError::into_inner).insert(table);
    }

    /// The statement that makes `table` if it is missing.
    fn create_row_table(&self, table: RowTable) -> String {
        let name = qualified(self, table);
        format!(
            "CREATE TABLE IF NOT EXISTS {name} (
                partition text COLLATE \"C\" NOT NULL,
                id text COLLATE \"C\" NOT NULL,
                value bytea NOT NULL,
                PRIMARY KEY (partition, id)
            )"
        )
    }

    /// Makes `table`, in a transaction of its own on a pooled connection, unless this store
    /// has seen it committed.
    pub(crate) async fn ensure_row_table(&self, table: RowTable) -> Result<(), Error> {
        if self.knows_row_table(table) {
            return Ok(());
        }
        let (name, create) = (qualified(self, table), self.create_row_table(table));
        let connection = self.connection().await?;
        self.io(&connection, async {
            connection.batch_execute("BEGIN").await.map_err(Error::from_driver)?;
            let made = async {
                connection.query_typed("SELECT pg_advisory_xact_lock(hashtext($1))", &[(&name, Type::TEXT)]).await?;
                connection.batch_execute(&create).await?;
                connection.batch_execute("COMMIT").await
            }
            .await;
            if let Err(error) = made {
                let _ = connection.batch_execute("ROLLBACK").await;
                return Err(Error::from_driver(error));
            }
            Ok(())
        })
        .await?;
        self.learn_row_table(table);
        Ok(())
    }
}

impl PgTxn {
    /// Makes `table` inside this transaction if it is missing (rolled back with it), unless
    /// this store has seen it committed.
    async fn ensure_row_table_here(&self, table: RowTable) -> Result<(), Error> {
        let inner = self.inner_ref();
        if inner.knows_row_table(table) {
            return Ok(());
        }
        let name = qualified(inner, table);
        let found = self.row_statement("SELECT to_regclass($1) IS NOT NULL", &[(&name, Type::TEXT)]).await?;
        // Checked before this transaction made anything: a table found is someone's commit.
        if found.first().is_some_and(|row| row.get::<_, bool>(0)) {
            inner.learn_row_table(table);
            return Ok(());
        }
        self.row_statement("SELECT pg_advisory_xact_lock(hashtext($1))::text", &[(&name, Type::TEXT)]).await?;
        let create = inner.create_row_table(table);
        let connection = self.conn_ref()?;
        inner.io(connection, async { connection.batch_execute(&create).await.map_err(Error::from_driver) }).await
    }

    /// Runs one row statement (parameter types given: unnamed in every statement mode).
    async fn row_statement(&self, sql: &str, params: &[(&(dyn ToSql + Sync), Type)]) -> Result<Vec<PgRow>, Error> {
        let inner = self.inner_ref();
        let connection = self.conn_ref()?;
        inner.io(connection, async { connection.query_typed(sql, params).await.map_err(Error::from_driver) }).await
    }

    /// Puts the row `(partition, id)` of `table` in this transaction (replacing any row
    /// there). The table is made first if this store has not seen it.
    ///
    /// # Errors
    /// [`Refusal::Row`](idemdb_core::Refusal::Row) for a partition or id the limits refuse, or a value too large; database
    /// errors.
    pub async fn put_row(&mut self, table: RowTable, partition: &str, id: &str, value: &[u8]) -> Result<(), Error> {
        check_row(partition, id, Some(value))?;
        // A transaction of the store's own begins lazily: rows must not run before `BEGIN`.
        self.begin_now().await?;
        self.ensure_row_table_here(table).await?;
        let sql = format!(
            "INSERT INTO {} (partition, id, value) VALUES ($1, $2, $3) \
             ON CONFLICT (partition, id) DO UPDATE SET value = EXCLUDED.value",
            qualified(self.inner_ref(), table)
        );
        self.row_statement(&sql, &[(&partition, Type::TEXT), (&id, Type::TEXT), (&value, Type::BYTEA)]).await?;
        Ok(())
    }

    /// Deletes the row `(partition, id)` of `table` in this transaction; returns whether it
    /// was there.
    ///
    /// # Errors
    /// As [`PgTxn::put_row`].
    pub async fn delete_row(&mut self, table: RowTable, partition: &str, id: &str) -> Result<bool, Error> {
        check_row(partition, id, None)?;
        // A transaction of the store's own begins lazily: rows must not run before `BEGIN`.
        self.begin_now().await?;
        self.ensure_row_table_here(table).await?;
        let sql =
            format!("DELETE FROM {} WHERE partition = $1 AND id = $2 RETURNING 1", qualified(self.inner_ref(), table));
        Ok(!self.row_statement(&sql, &[(&partition, Type::TEXT), (&id, Type::TEXT)]).await?.is_empty())
    }

    /// Applies `write` in this transaction: every row change, then every settlement in order
    /// (see [`PgStore::commit_business`]). Returns the outbox items the effect settlements left.
    ///
    /// # Errors
    /// [`Refusal::Row`](idemdb_core::Refusal::Row) before anything is written; the first refused settlement (roll the
    /// transaction back).
    pub async fn apply_business(&mut self, write: &BusinessWrite) -> Result<Vec<OutboxItem>, Error> {
        write.check()?;
        for row in write.rows() {
            match row {
                RowWrite::Put { table, partition, id, value } => self.put_row(*table, partition, id, value).await?,
                RowWrite::Delete { table, partition, id } => drop(self.delete_row(*table, partition, id).await?),
            }
        }
        let mut items = Vec::new();
        for settle in write.settles() {
            match settle {
                Settle::Complete { lease, result } => self.complete(lease, result.clone()).await?,
                Settle::Fail { lease, failure } => self.fail(lease, failure.clone()).await?,
                Settle::ReportEffect { claim, report } => items.push(self.report_effect(claim, report.clone()).await?),
                Settle::ResolveEffect { scope, key, effect, state, cause } => {
                    items.push(self.resolve_effect(scope, key, effect, state.clone(), *cause).await?);
                }
            }
        }
        Ok(items)
    }
}

impl PgStore {
    /// Commits `write` — application rows, then the store's transitions — in one PostgreSQL
    /// transaction: all of it or none. Row tables are made in the store's schema on first use.
    /// The same call is
    /// [`BusinessStore::commit_business`](idemdb_interface::BusinessStore::commit_business)
    /// on every backend.
    ///
    /// ```no_run
    /// # async fn run(store: idemdb_postgres::PgStore, lease: idemdb_postgres::Lease) -> Result<(), idemdb_postgres::Error> {
    /// use idemdb_postgres::{BusinessWrite, RowTable};
    /// const ORDERS: RowTable = RowTable::new("app_orders");
    /// store
    ///     .commit_business(BusinessWrite::new().put(ORDERS, "acme", "order-842", b"1050".to_vec()).complete(&lease, b"placed".to_vec()))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Refusal::Row`](idemdb_core::Refusal::Row) for a row the limits refuse; the first settlement the store refuses
    /// ([`Refusal::Transition`](idemdb_core::Refusal::Transition), [`Refusal::Outbox`](idemdb_core::Refusal::Outbox)); [`Error::Unavailable`] and database errors.
    /// On any error nothing of the write was committed, except [`Error::CommitUnknown`] (repeat
    /// to learn what was stored).
    pub async fn commit_business(&self, write: BusinessWrite) -> Result<Vec<OutboxItem>, Error> {
        write.check()?;
        let mut tables: Vec<RowTable> = write.rows().iter().map(|row| row.target().0).collect();
        tables.sort_unstable();
        tables.dedup();
        for table in tables {
            self.inner.ensure_row_table(table).await?;
        }
        let write = &write;
        self.in_txn(|mut txn| async move {
            let outcome = txn.apply_business(write).await;
            (txn, outcome)
        })
        .await
    }

    /// Makes the row table `table` in the store's schema now, if it is missing (it is made on
    /// first use anyway): for an application that adds its own triggers, grants or indexes at
    /// start-up.
    ///
    /// # Errors
    /// [`Error::Unavailable`] and database errors (the role may not create tables).
    pub async fn create_row_table(&self, table: RowTable) -> Result<(), Error> {
        self.retrying(|| self.inner.ensure_row_table(table)).await
    }

    /// Runs one row read on a pooled connection; a table never made reads as empty.
    async fn read_rows(&self, sql: &str, params: &[(&(dyn ToSql + Sync), Type)]) -> Result<Vec<PgRow>, Error> {
        let inner = &self.inner;
        let read = self
            .retrying(|| async {
                let connection = inner.connection().await?;
                inner
                    .io(&connection, async { connection.query_typed(sql, params).await.map_err(Error::from_driver) })
                    .await
            })
            .await;
        match read {
            Err(Error::Database(db)) if db.sqlstate() == Some(UNDEFINED_TABLE) => Ok(Vec::new()),
            other => other,
        }
    }

    /// The row `(partition, id)` of `table`, if there is one.
    ///
    /// # Errors
    /// [`Error::Unavailable`] and database errors.
    pub async fn row(&self, table: RowTable, partition: &str, id: &str) -> Result<Option<Vec<u8>>, Error> {
        let sql = format!("SELECT value FROM {} WHERE partition = $1 AND id = $2", qualified(&self.inner, table));
        let rows = self.read_rows(&sql, &[(&partition, Type::TEXT), (&id, Type::TEXT)]).await?;
        rows.first().map(|row| row.try_get(0).map_err(Error::from_driver)).transpose()
    }

    /// The rows of `partition` in `table` whose ids come after `after` (`None`: from the
    /// first), in byte order of their ids, at most `limit` of them (`0`: all).
    ///
    /// # Errors
    /// [`Error::Unavailable`] and database errors.
    pub async fn rows(
        &self,
        table: RowTable,
        partition: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Row>, Error> {
        let sql = format!(
            "SELECT id, value FROM {} WHERE partition = $1 AND ($2::text IS NULL OR id > $2) ORDER BY id LIMIT $3",
            qualified(&self.inner, table)
        );
        // `LIMIT NULL` is no limit.
        let limit = (limit > 0).then(|| i64::try_from(limit).unwrap_or(i64::MAX));
        let rows =
            self.read_rows(&sql, &[(&partition, Type::TEXT), (&after, Type::TEXT), (&limit, Type::INT8)]).await?;
        rows.iter()
            .map(|row| {
                Ok(Row {
                    id: row.try_get(0).map_err(Error::from_driver)?,
                    value: row.try_get(1).map_err(Error::from_driver)?,
                })
            })
            .collect()
    }
}
