//! What every test needs: the server's URL, a runtime, an administrative connection, fresh
//! schemas and stores.

use std::future::Future;
use std::time::Duration;

use idemdb_interface::conformance::Backend;
use idemdb_postgres::tokio_postgres::{self, NoTls};
use idemdb_postgres::{ManualClock, PgStore, PgStoreBuilder, Policy, TimeSource};

/// The server the tests run against (from the environment).
#[derive(Debug, Clone)]
pub struct Env {
    /// `IDEMDB_PG_URL`.
    pub url: String,
    /// `IDEMDB_PG_RESTART`: a shell command restarting the server in immediate mode.
    pub restart: Option<String>,
    /// `IDEMDB_PGBOUNCER_URL`: the same database through PgBouncer in transaction pooling mode.
    pub pgbouncer: Option<String>,
    /// Whether stores connect with `transaction_pooling` (the PgBouncer test).
    pub transaction_pooling: bool,
}

impl Env {
    /// The environment, or why there is none.
    pub fn from_env() -> Result<Env, String> {
        match std::env::var("IDEMDB_PG_URL") {
            Ok(url) if !url.is_empty() => {
                let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
                Ok(Env {
                    url,
                    restart: var("IDEMDB_PG_RESTART"),
                    pgbouncer: var("IDEMDB_PGBOUNCER_URL"),
                    transaction_pooling: false,
                })
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
        .transaction_pooling(env.transaction_pooling)
}

/// Counts rows of a query returning one `bigint`.
pub async fn count(client: &tokio_postgres::Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap_or_else(|e| panic!("{sql}: {e}")).get(0)
}

/// A conformance backend on PostgreSQL: a fresh schema `<prefix>_<n>` per store the runner
/// opens, every store on one manual clock (the runners move time through each boundary, which
/// the database's clock cannot do). [`Schemas::drop_all`] removes them afterwards.
pub struct Schemas {
    env: Env,
    pub admin: tokio_postgres::Client,
    clock: ManualClock,
    prefix: &'static str,
    pool_size: usize,
    /// Stores opened so far.
    pub opened: usize,
}

impl Schemas {
    pub async fn new(env: &Env, prefix: &'static str, pool_size: usize, clock: ManualClock) -> Self {
        Schemas { env: env.clone(), admin: admin(&env.url).await, clock, prefix, pool_size, opened: 0 }
    }

    /// Drops every schema this backend made.
    pub async fn drop_all(&self) {
        for n in 1..=self.opened {
            self.admin.batch_execute(&format!("DROP SCHEMA {}_{n} CASCADE", self.prefix)).await.expect("drop schema");
        }
    }
}

impl Backend for Schemas {
    type Store = PgStore;

    async fn open(&mut self, operations: &[(&'static str, Policy)]) -> PgStore {
        self.opened += 1;
        let schema = format!("{}_{}", self.prefix, self.opened);
        self.admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await.expect("drop schema");
        let mut store = builder(&self.env, &schema)
            .clock(self.clock.clone())
            .time_source(TimeSource::HostClock)
            .pool_size(self.pool_size);
        for (operation, policy) in operations {
            store = store.policy(*operation, policy.clone());
        }
        store.connect().await.expect("connect")
    }

    fn set_time(&mut self, millis: u64) {
        self.clock.set(millis);
    }
}
