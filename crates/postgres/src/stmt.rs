//! How the adapter's statements reach the server, in one of two modes:
//!
//! * **direct** (the default): named prepared statements, prepared once per connection and
//!   cached by the driver;
//! * **transaction pooling** ([`PgStoreBuilder::transaction_pooling`](crate::PgStoreBuilder::transaction_pooling),
//!   for PgBouncer in `pool_mode = transaction` and proxies like it): unnamed statements only
//!   (parse, bind and execute in one message sequence, so no statement outlives its round trip
//!   on whichever server connection the proxy picked), with the parameter types learnt once per
//!   store at connect, inside one transaction.

use std::collections::HashMap;

use deadpool_postgres::Client;
use deadpool_postgres::tokio_postgres::Row;
use deadpool_postgres::tokio_postgres::types::{ToSql, Type};
use futures_util::{TryStreamExt, pin_mut};

use crate::error::DbError;

/// The statement mode and, for unnamed statements, every statement's parameter types.
#[derive(Debug, Default)]
pub(crate) struct Statements {
    /// `None`: named prepared statements.
    unnamed: Option<HashMap<String, Vec<Type>>>,
}

impl Statements {
    /// Named prepared statements.
    pub(crate) fn named() -> Statements {
        Statements { unnamed: None }
    }

    /// Unnamed statements: prepares every text of `texts` in one transaction on `client` to
    /// learn its parameter types, then closes them before committing.
    pub(crate) async fn unnamed(client: &Client, texts: &[&str]) -> Result<Statements, DbError> {
        client.batch_execute("BEGIN").await?;
        let mut types = HashMap::new();
        for text in texts {
            let statement = client.prepare(text).await?;
            types.insert((*text).to_string(), statement.params().to_vec());
        }
        client.batch_execute("COMMIT").await?;
        Ok(Statements { unnamed: Some(types) })
    }

    /// Whether statements are unnamed.
    pub(crate) fn is_unnamed(&self) -> bool {
        self.unnamed.is_some()
    }

    /// The rows of `sql` with `params`.
    pub(crate) async fn query(
        &self,
        client: &Client,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, DbError> {
        match &self.unnamed {
            None => {
                let statement = client.prepare_cached(sql).await?;
                Ok(client.query(&statement, params).await?)
            }
            Some(types) => Ok(client.query_typed(sql, &typed(types, sql, params)?).await?),
        }
    }

    /// The rows `sql` changed.
    pub(crate) async fn execute(
        &self,
        client: &Client,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, DbError> {
        match &self.unnamed {
            None => {
                let statement = client.prepare_cached(sql).await?;
                Ok(client.execute(&statement, params).await?)
            }
            Some(types) => {
                let stream = client.query_typed_raw(sql, typed(types, sql, params)?).await?;
                pin_mut!(stream);
                while stream.try_next().await?.is_some() {}
                Ok(stream.rows_affected().unwrap_or(0))
            }
        }
    }

    /// The first row of `sql`, if any.
    pub(crate) async fn query_opt(
        &self,
        client: &Client,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, DbError> {
        Ok(self.query(client, sql, params).await?.into_iter().next())
    }
}

/// `params` paired with the learnt types of `sql`.
fn typed<'a>(
    types: &HashMap<String, Vec<Type>>,
    sql: &str,
    params: &[&'a (dyn ToSql + Sync)],
) -> Result<Vec<(&'a (dyn ToSql + Sync), Type)>, DbError> {
    let Some(types) = types.get(sql) else {
        return Err(DbError::schema(format!(
            "statement not prepared at connect: {}",
            sql.chars().take(60).collect::<String>()
        )));
    };
    Ok(params.iter().copied().zip(types.iter().cloned()).collect())
}
