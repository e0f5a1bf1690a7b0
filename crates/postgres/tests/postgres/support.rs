//! What every test needs: the server's URL, a runtime, an administrative connection, fresh
//! schemas and stores.

use std::future::Future;
use std::time::Duration;

use idemdb_postgres::tokio_postgres::{self, NoTls};
use idemdb_postgres::{PgStore, PgStoreBuilder};

/// The server the tests run against (from the environment).
#[derive(Debug, Clone)]
pub struct Env {
    /// `IDEMDB_PG_URL`.
    pub url: String,
    /// `IDEMDB_PG_RESTART`: a shell command restarting the server in immediate mode.
    pub restart: Option<String>,
}

impl Env {
    /// The environment, or why there is none.
    pub fn from_env() -> Result<Env, String> {
        match std::env::var("IDEMDB_PG_URL") {
            Ok(url) if !url.is_empty() => {
                Ok(Env { url, restart: std::env::var("IDEMDB_PG_RESTART").ok().filter(|c| !c.is_empty()) })
            }
            _ => Err("IDEMDB_PG_URL is not set".into()),
        }
    }
}

/// A multi-threaded runtime for one test (two workers: the machine has two cores).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

/// Runs a test body on a fresh runtime.
pub fn block_on<T>(work: impl Future<Output = T>) -> T {
    runtime().block_on(work)
}

/// A plain driver connection (not through the adapter), for setting up and checking.
pub async fn admin(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.expect("administrative connection");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// Drops `schema` if a previous run left it, so the test starts from nothing.
pub async fn fresh_schema(url: &str, schema: &str) -> String {
    admin(url).await.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE")).await.expect("drop schema");
    schema.to_string()
}

/// A builder for a store in `schema`, with short timeouts (a test fails fast).
pub fn builder(env: &Env, schema: &str) -> PgStoreBuilder {
    PgStore::builder(env.url.clone())
        .schema(schema)
        .connect_timeout(Duration::from_secs(5))
        .pool_wait_timeout(Duration::from_secs(10))
        .operation_timeout(Duration::from_secs(10))
}

/// Counts rows of a query returning one `bigint`.
pub async fn count(client: &tokio_postgres::Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap_or_else(|e| panic!("{sql}: {e}")).get(0)
}
