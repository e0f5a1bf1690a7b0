//! Configuring and connecting a [`PgStore`].

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use deadpool_postgres::tokio_postgres::{Config, NoTls, Socket};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};

use idemdb_core::{DEFAULT_AUDIT_RETENTION, InvalidPolicy, Policies, Policy};
use idemdb_interface::{Clock, SystemClock};

use crate::engine::{Engine, Settings};
use crate::error::{ConnectError, DbError};
use crate::migrate;
use crate::schema::{Sql, reserved_schema_name, valid_schema_name};
use crate::stmt::Statements;
use crate::store::PgStore;
use crate::time::TimeSource;

/// Where the connection settings come from.
enum Source {
    Url(String),
    Config(Box<Config>),
}

/// Configures and connects a [`PgStore`].
///
/// Every setting has a default meant for production: 16 pooled connections, 5 s to connect or
/// to wait for a free connection, 10 s per statement on the server, 30 s for one whole call,
/// time from the database, migrations applied at connect.
///
/// ```no_run
/// # async fn run() -> Result<(), idemdb_postgres::ConnectError> {
/// use std::time::Duration;
/// use idemdb_postgres::{Policy, PgStore};
/// let store = PgStore::builder("postgresql://app@db.internal/payments")
///     .schema("idemdb")
///     .policy("create_payment", Policy::default().with_lease_ttl(Duration::from_secs(30)))
///     .pool_size(32)
///     .connect()
///     .await?;
/// # drop(store); Ok(()) }
/// ```
#[must_use]
pub struct PgStoreBuilder {
    source: Source,
    schema: String,
    policies: Policies,
    time_source: TimeSource,
    clock: Arc<dyn Clock>,
    audit: bool,
    audit_retention: Duration,
    pool_size: usize,
    connect_timeout: Duration,
    pool_wait_timeout: Duration,
    statement_timeout: Duration,
    operation_timeout: Duration,
    migrate: bool,
    application_name: Option<String>,
    transaction_pooling: bool,
}

impl std::fmt::Debug for PgStoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password: it is not shown.
        f.debug_struct("PgStoreBuilder")
            .field("schema", &self.schema)
            .field("policies", &self.policies)
            .field("time_source", &self.time_source)
            .field("pool_size", &self.pool_size)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// A builder for a store in the database at `url` (`postgresql://user:password@host:port/db`,
    /// or the `key=value` form; see [`tokio_postgres::Config`]).
    pub fn builder(url: impl Into<String>) -> PgStoreBuilder {
        PgStoreBuilder::new(Source::Url(url.into()))
    }

    /// A builder for a store reached with `config`: for example the settings
    /// [`connection_config`](crate::connection_config) reads from the `PG*` environment
    /// variables and a password file, so that no password is on a command line.
    pub fn builder_with_config(config: Config) -> PgStoreBuilder {
        PgStoreBuilder::new(Source::Config(Box::new(config)))
    }
}

impl PgStoreBuilder {
    fn new(source: Source) -> PgStoreBuilder {
        PgStoreBuilder {
            source,
            schema: "public".into(),
            policies: Policies::default(),
            time_source: TimeSource::Database,
            clock: Arc::new(SystemClock),
            audit: true,
            audit_retention: DEFAULT_AUDIT_RETENTION,
            pool_size: 16,
            connect_timeout: Duration::from_secs(5),
            pool_wait_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(10),
            operation_timeout: Duration::from_secs(30),
            migrate: true,
            application_name: None,
            transaction_pooling: false,
        }
    }
}

impl PgStore {
    /// Connects with the defaults (see [`PgStoreBuilder`]).
    ///
    /// # Errors
    /// As [`PgStoreBuilder::connect`].
    pub async fn connect(url: impl Into<String>) -> Result<PgStore, ConnectError> {
        PgStore::builder(url).connect().await
    }
}

impl PgStoreBuilder {
    /// The schema holding idemdb's tables (`public` by default): 1..=63 bytes of `[a-z0-9_]`,
    /// not starting with a digit, and not one PostgreSQL reserves (`information_schema`,
    /// `pg_*`: [`ConnectError::ReservedSchema`]). Several stores can share a database in different schemas.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The policy of one operation.
    pub fn policy(mut self, operation: impl Into<String>, policy: Policy) -> Self {
        self.policies.set(operation, policy);
        self
    }

    /// The policy of operations without their own.
    pub fn default_policy(mut self, policy: Policy) -> Self {
        self.policies.set_default(policy);
        self
    }

    /// Where decisions read `now` ([`TimeSource::Database`] by default).
    pub fn time_source(mut self, source: TimeSource) -> Self {
        self.time_source = source;
        self
    }

    /// This host's clock ([`SystemClock`] by default): decisions read it only with
    /// [`TimeSource::HostClock`]; otherwise it only measures [`PgStore::clock_skew`].
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Whether to keep the audit trail (on by default).
    pub fn audit(mut self, on: bool) -> Self {
        self.audit = on;
        self
    }

    /// How long audit events are kept before `purge_expired` removes them (90 days).
    pub fn audit_retention(mut self, retention: Duration) -> Self {
        self.audit_retention = retention;
        self
    }

    /// Connections in the pool (16). Each concurrent call holds one for its transaction.
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// How long opening one connection may take (5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long a call waits for a free pooled connection (5 s).
    pub fn pool_wait_timeout(mut self, timeout: Duration) -> Self {
        self.pool_wait_timeout = timeout;
        self
    }

    /// The server's `statement_timeout` for the adapter's connections (10 s): a statement that
    /// runs or waits for a lock longer is cancelled and the call fails as unavailable.
    pub fn statement_timeout(mut self, timeout: Duration) -> Self {
        self.statement_timeout = timeout;
        self
    }

    /// How long one call (`reserve`, `complete`, ...) may take in all, retries included (30 s).
    /// A call still running then fails: unavailable if it had not begun to commit, otherwise
    /// with the commit's outcome as the adapter learns it from the database.
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// Whether `connect` applies missing migrations (on by default). Off: an older schema is a
    /// [`ConnectError::SchemaMismatch`], and [`PgStoreBuilder::migrate`] applies them.
    pub fn migrate_on_connect(mut self, on: bool) -> Self {
        self.migrate = on;
        self
    }

    /// The `application_name` the adapter's connections report to the server (`idemdb`, unless
    /// the URL names one).
    pub fn application_name(mut self, name: impl Into<String>) -> Self {
        self.application_name = Some(name.into());
        self
    }

    /// For a connection pooler in transaction mode (PgBouncer `pool_mode = transaction`), which
    /// hands each transaction to whichever server connection is free (off by default): only
    /// unnamed statements (their parameter types are learnt once at connect, in one
    /// transaction), no startup `options` (PgBouncer refuses them), and `statement_timeout` set
    /// with `SET LOCAL` at the start of every transaction. Statements outside a transaction (a
    /// new key's one-statement reservation, lock-free reads) are bounded by the call's deadline
    /// and a cancel request, not by the server's `statement_timeout`. Session mode needs
    /// nothing of this.
    pub fn transaction_pooling(mut self, on: bool) -> Self {
        self.transaction_pooling = on;
        self
    }

    fn config(&self) -> Result<Config, ConnectError> {
        if reserved_schema_name(&self.schema) {
            return Err(ConnectError::ReservedSchema(self.schema.clone()));
        }
        if !valid_schema_name(&self.schema) {
            return Err(ConnectError::Config(format!(
                "schema name {:?} is not 1..=63 bytes of [a-z0-9_] starting with a letter or _",
                self.schema.chars().take(64).collect::<String>()
            )));
        }
        self.policies
            .validate()
            .map_err(|InvalidPolicy { operation, source }| ConnectError::Policy { operation, source })?;
        let mut config: Config = match &self.source {
            Source::Url(url) => {
                url.parse().map_err(|error| ConnectError::Config(format!("connection URL: {error}")))?
            }
            Source::Config(config) => (**config).clone(),
        };
        config.connect_timeout(self.connect_timeout);
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(10));
        config.keepalives_interval(Duration::from_secs(5));
        config.keepalives_retries(3);
        match &self.application_name {
            Some(name) => {
                config.application_name(name);
            }
            None if config.get_application_name().is_none() => {
                config.application_name("idemdb");
            }
            None => {}
        }
        if !self.transaction_pooling {
            let statement_ms = self.statement_timeout.as_millis().max(1);
            let options = match config.get_options() {
                Some(existing) => format!("{existing} -c statement_timeout={statement_ms}"),
                None => format!("-c statement_timeout={statement_ms}"),
            };
            config.options(&options);
        }
        Ok(config)
    }

    /// Applies the migrations this build has and the schema lacks, and returns the schema
    /// version. Safe to run from several instances at once (they take turns on an advisory
    /// lock); a schema written by a newer idemdb is left untouched.
    ///
    /// # Errors
    /// [`ConnectError::SchemaMismatch`] for a newer schema, [`ConnectError::Unavailable`],
    /// database errors.
    pub async fn migrate(self) -> Result<u32, ConnectError> {
        let config = self.config()?;
        let (mut client, connection) = config.connect(NoTls).await.map_err(ConnectError::from_driver)?;
        let task = tokio::spawn(connection);
        let result = migrate::run_migrations(&mut client, &self.schema).await;
        drop(client);
        let _ = task.await;
        result
    }

    /// Connects without TLS (a database on the same host or a private network), checks the
    /// schema version (applying migrations first when allowed) and reads the audit secret.
    ///
    /// Needs a Tokio runtime: the driver runs each connection as a task.
    ///
    /// # Errors
    /// [`ConnectError::Config`] for a bad URL or schema name, [`ConnectError::Policy`],
    /// [`ConnectError::Unavailable`] when the server cannot be reached in time,
    /// [`ConnectError::SchemaMismatch`], database errors.
    pub async fn connect(self) -> Result<PgStore, ConnectError> {
        self.connect_with_tls(NoTls).await
    }

    /// [`PgStoreBuilder::connect`] through a TLS connector (for example one of the
    /// `tokio-postgres-rustls` or `postgres-native-tls` crates).
    ///
    /// # Errors
    /// As [`PgStoreBuilder::connect`].
    pub async fn connect_with_tls<T>(self, tls: T) -> Result<PgStore, ConnectError>
    where
        T: MakeTlsConnect<Socket> + Clone + Sync + Send + 'static,
        T::Stream: Sync + Send,
        T::TlsConnect: Sync + Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        let config = self.config()?;
        let listener_config = config.clone();
        let manager = Manager::from_config(config, tls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(manager)
            .max_size(self.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(self.pool_wait_timeout))
            .create_timeout(Some(self.connect_timeout))
            .recycle_timeout(Some(self.connect_timeout))
            .build()
            .map_err(|error| ConnectError::Config(format!("connection pool: {error}")))?;
        let sql = Sql::new(&self.schema);
        let (secret, statements) = {
            let mut client = pool.get().await.map_err(|e| ConnectError::from_driver(DbError::from(e)))?;
            migrate::check(&mut client, &self.schema, self.migrate).await?;
            let secret = migrate::read_secret(&client, &self.schema).await?;
            let statements = if self.transaction_pooling {
                Statements::unnamed(&client, &sql.texts()).await.map_err(ConnectError::from_driver)?
            } else {
                Statements::named()
            };
            (secret, statements)
        };
        let store = PgStore::from_inner(Engine::new(
            pool,
            sql,
            secret,
            Settings {
                policies: self.policies,
                time_source: self.time_source,
                clock: self.clock,
                audit: self.audit,
                audit_retention: self.audit_retention,
                operation_timeout: self.operation_timeout,
                statement_timeout: self.statement_timeout,
                config: listener_config,
            },
            statements,
        ));
        store.warn_on_skew().await;
        Ok(store)
    }
}
