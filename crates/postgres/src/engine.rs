//! What every [`PgStore`](crate::PgStore) handle shares: the pool, the SQL text, the settings,
//! the audit buffer and the clock readings, with the helpers decisions use (the call's
//! deadline, round trips ended by it, the decision time). It knows nothing of transactions
//! (`txn.rs`) or of the handle (`store.rs`).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use deadpool_postgres::Pool;
use deadpool_postgres::tokio_postgres::types::ToSql;
use deadpool_postgres::tokio_postgres::{NoTls, Row};

use idemdb_core::{
    AuditBatch, AuditEvent, AuditKind, Fingerprint, IdempotencyKey, KeyHash, Policies, Policy, Scope, ScopedKey,
    Timestamp,
};
use idemdb_interface::Clock;

use crate::audit::{self, Buffer};
use crate::conn::Conn;
use crate::error::{DbError, Error};
use crate::schema::Sql;
use crate::stmt::Statements;
use crate::time::TimeSource;

/// How long a cancel request for a round trip cut short may take.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

tokio::task_local! {
    /// The deadline of the call running in this task: every round trip, pool wait and pause
    /// between attempts of one call ends by it.
    static DEADLINE: tokio::time::Instant;
}

/// Settings fixed at connect.
pub(crate) struct Settings {
    pub(crate) policies: Policies,
    pub(crate) time_source: TimeSource,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) audit: bool,
    pub(crate) audit_retention: Duration,
    pub(crate) operation_timeout: Duration,
    pub(crate) statement_timeout: Duration,
    /// The connection settings (for a listener's own connection).
    pub(crate) config: deadpool_postgres::tokio_postgres::Config,
}

/// What every handle shares.
pub(crate) struct Engine {
    pub(crate) pool: Pool,
    pub(crate) sql: Sql,
    pub(crate) secret: [u8; 32],
    pub(crate) settings: Settings,
    /// The highest decision time this instance has used: time never goes back within it.
    high_water: AtomicU64,
    /// What predicts the database's clock from this host's monotonic clock: the database's
    /// milliseconds minus [`Engine::started`]'s elapsed milliseconds, at the last reading
    /// (`i64::MIN`: never read).
    offset: AtomicI64,
    started: std::time::Instant,
    /// The fence floor at the last reading.
    floor: AtomicU64,
    pub(crate) audit: Buffer,
    /// Named or unnamed statements.
    pub(crate) statements: Statements,
    /// What begins a transaction (with `SET LOCAL statement_timeout` under transaction
    /// pooling, where the connection's startup options cannot carry it).
    pub(crate) begin: String,
    /// The row tables this store made or used (`rows.rs`): made once, then taken as there.
    pub(crate) row_tables: std::sync::Mutex<std::collections::HashSet<idemdb_core::RowTable>>,
    /// The server process behind each pooled connection, read once per connection.
    backends: std::sync::Mutex<std::collections::HashMap<deadpool_postgres::ObjectId, Backend>>,
}

/// A server process: what tells whether a statement it ran can still commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backend {
    pid: i32,
    /// `backend_start` in µs: with the pid, this process and no later one.
    started: i64,
    /// `pg_postmaster_start_time()` in µs: a restart ends every process.
    server_start: i64,
}

/// Whether a [`Backend`] can still commit what it was running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BackendState {
    /// It is gone (ended, or the server restarted): whatever it ran is committed or not, for good.
    Gone,
    /// It still runs (for example a commit waiting for a synchronous standby, its client gone).
    Running,
}

/// At most this many connections' processes are remembered (then the map starts again).
const MAX_BACKENDS: usize = 1024;

/// How far the database's clock may be from the predicted decision time of a new key's
/// one-statement reservation; further, the statement inserts nothing and the locked path
/// decides at the database's time.
pub(crate) const PREDICTION_TOLERANCE_MS: i64 = 250;

impl Engine {
    pub(crate) fn new(pool: Pool, sql: Sql, secret: [u8; 32], settings: Settings, statements: Statements) -> Engine {
        let begin = if statements.is_unnamed() {
            format!(
                "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL statement_timeout = {}",
                settings.statement_timeout.as_millis().max(1)
            )
        } else {
            "BEGIN ISOLATION LEVEL READ COMMITTED".to_string()
        };
        Engine {
            statements,
            begin,
            pool,
            sql,
            secret,
            settings,
            high_water: AtomicU64::new(0),
            offset: AtomicI64::new(i64::MIN),
            started: std::time::Instant::now(),
            floor: AtomicU64::new(0),
            audit: Buffer::default(),
            row_tables: std::sync::Mutex::default(),
            backends: std::sync::Mutex::default(),
        }
    }

    /// The server process behind `connection` (read once per connection, one round trip), or
    /// `None` under transaction pooling (each transaction may run on another process) or when
    /// it cannot be read.
    pub(crate) async fn backend_of(&self, connection: &Conn) -> Option<Backend> {
        if self.statements.is_unnamed() {
            return None;
        }
        let id = deadpool_postgres::Object::id(connection);
        let known = self.backends.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&id).copied();
        if known.is_some() {
            return known;
        }
        let row = self
            .io(connection, async {
                self.statements.query_opt(connection, crate::schema::BACKEND, &[]).await.map_err(Error::from_driver)
            })
            .await
            .ok()??;
        let backend =
            Backend { pid: row.try_get(0).ok()?, started: row.try_get(1).ok()?, server_start: row.try_get(2).ok()? };
        let mut backends = self.backends.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if backends.len() >= MAX_BACKENDS {
            backends.clear();
        }
        backends.insert(id, backend);
        Some(backend)
    }

    /// Whether `backend` still runs, asked on another connection; a running one is asked to
    /// end (`pg_terminate_backend`: its client is gone, and what it was committing then lands
    /// or rolls back for good), so a later question finds it gone.
    pub(crate) async fn end_backend(&self, backend: Backend) -> Result<BackendState, Error> {
        let connection = self.connection().await?;
        let row = self
            .io(&connection, async {
                let params: [&(dyn ToSql + Sync); 2] = [&backend.pid, &backend.started];
                let rows = self
                    .statements
                    .query(&connection, crate::schema::BACKEND_STATE, &params)
                    .await
                    .map_err(Error::from_driver)?;
                rows.into_iter().next().ok_or(Error::Refused(idemdb_core::Refusal::NotFound))
            })
            .await?;
        let server_start: i64 = row.try_get(0).map_err(Error::from_driver)?;
        let running: bool = row.try_get(1).map_err(Error::from_driver)?;
        if server_start != backend.server_start || !running {
            return Ok(BackendState::Gone);
        }
        self.io(&connection, async {
            let params: [&(dyn ToSql + Sync); 2] = [&backend.pid, &backend.started];
            self.statements
                .query(&connection, crate::schema::TERMINATE_BACKEND, &params)
                .await
                .map_err(Error::from_driver)
        })
        .await?;
        Ok(BackendState::Running)
    }

    fn elapsed_ms(&self) -> i64 {
        i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    /// Remembers a reading of the database's clock and fence floor, for predictions.
    pub(crate) fn observe(&self, database_ms: i64, floor: i64) {
        self.offset.store(database_ms.saturating_sub(self.elapsed_ms()), Ordering::SeqCst);
        self.floor.fetch_max(u64::try_from(floor).unwrap_or(0), Ordering::SeqCst);
    }

    /// The decision time and fence floor a new key's one-statement reservation uses, and how
    /// far the database's clock may be from that time (`None` before the first reading).
    pub(crate) fn predicted(&self) -> Option<(Timestamp, u64, i64)> {
        let (read, tolerance) = match self.settings.time_source {
            TimeSource::Database => {
                let offset = self.offset.load(Ordering::SeqCst);
                if offset == i64::MIN {
                    return None;
                }
                (u64::try_from(self.elapsed_ms().saturating_add(offset)).unwrap_or(0), PREDICTION_TOLERANCE_MS)
            }
            TimeSource::HostClock => (self.settings.clock.now().as_millis(), i64::MAX),
        };
        let now = read.max(self.high_water.load(Ordering::SeqCst));
        Some((Timestamp::from_millis(now), self.floor.load(Ordering::SeqCst), tolerance))
    }

    /// Records a decision time this instance used (time never goes back within it).
    pub(crate) fn used(&self, now: Timestamp) {
        self.high_water.fetch_max(now.as_millis(), Ordering::SeqCst);
    }

    pub(crate) fn policy(&self, operation: &str) -> &Policy {
        self.settings.policies.get(operation)
    }

    /// The time of a decision: the database's clock as read in the decision's statement (or
    /// the host clock, if configured), never earlier than a time this instance already used.
    pub(crate) fn now(&self, database_ms: i64) -> Timestamp {
        let read = match self.settings.time_source {
            TimeSource::Database => u64::try_from(database_ms).unwrap_or(0),
            TimeSource::HostClock => self.settings.clock.now().as_millis(),
        };
        let previous = self.high_water.fetch_max(read, Ordering::SeqCst);
        Timestamp::from_millis(previous.max(read))
    }

    pub(crate) fn key_hash(&self, scope: &Scope, key: &IdempotencyKey) -> KeyHash {
        KeyHash::compute(&self.secret, &ScopedKey::encode_parts(scope, key))
    }

    /// The audit row of an event (`None` with the audit trail off; the `tracing` event is
    /// emitted either way).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn event(
        &self,
        at: Timestamp,
        kind: AuditKind,
        scope: &Scope,
        key: &IdempotencyKey,
        fence: u64,
        fingerprint: Option<&Fingerprint>,
        correlation: Option<&str>,
    ) -> Option<AuditEvent> {
        let row = audit::event(at, kind, scope, key, &self.secret, fence, fingerprint, correlation);
        self.settings.audit.then_some(row)
    }

    /// Runs a statement on `(scope, key)` (`$1..$3`) on `connection`; its row, if any.
    pub(crate) async fn query_keyed(
        &self,
        connection: &Conn,
        sql: &str,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> Result<Option<Row>, Error> {
        self.io(connection, async {
            let params: [&(dyn ToSql + Sync); 3] = [&scope.tenant(), &scope.operation(), &key.as_str()];
            self.statements.query_opt(connection, sql, &params).await.map_err(Error::from_driver)
        })
        .await
    }

    /// Writes audit rows outside any transaction (buffered answers' events); on failure they
    /// go back to the buffer.
    pub(crate) async fn write_buffered(&self, rows: Vec<AuditEvent>) -> Result<(), Error> {
        if rows.is_empty() {
            return Ok(());
        }
        let written = async {
            let connection = self.connection().await?;
            self.io(&connection, audit::insert(&self.statements, &connection, &self.sql.audit_insert, &rows))
                .await
                .map(drop)
        }
        .await;
        if written.is_err() {
            self.audit.restore(rows);
        }
        written
    }

    /// A pooled connection, or [`Error::Unavailable`] (no connection free or made by the
    /// call's deadline).
    pub(crate) async fn connection(&self) -> Result<Conn, Error> {
        let deadline = self.deadline();
        match tokio::time::timeout_at(deadline, self.pool.get()).await {
            Ok(got) => got.map(Conn::new).map_err(Error::from),
            Err(_) => Err(self.timed_out()),
        }
    }

    /// The deadline of the running call (a call outside [`Engine::within_call`] gets a fresh
    /// one of `operation_timeout`).
    pub(crate) fn deadline(&self) -> tokio::time::Instant {
        DEADLINE
            .try_with(|deadline| *deadline)
            .unwrap_or_else(|_| tokio::time::Instant::now() + self.settings.operation_timeout)
    }

    /// Runs one call under one deadline (`operation_timeout` from now), retries included; a
    /// call nested in another keeps the outer deadline.
    pub(crate) async fn within_call<T>(&self, call: impl Future<Output = T>) -> T {
        if DEADLINE.try_with(|_| ()).is_ok() {
            call.await
        } else {
            DEADLINE.scope(tokio::time::Instant::now() + self.settings.operation_timeout, call).await
        }
    }

    fn timed_out(&self) -> Error {
        Error::Unavailable(DbError::unreachable(format!(
            "no answer from the database within the call's deadline ({} ms)",
            self.settings.operation_timeout.as_millis()
        )))
    }

    /// One round trip on `connection`, ended by the call's deadline. A round trip cut short
    /// leaves the connection marked in flight: it is closed, never reused.
    pub(crate) async fn io<T>(
        &self,
        connection: &Conn,
        work: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        connection.set_in_flight(true);
        match tokio::time::timeout_at(self.deadline(), work).await {
            Ok(result) => {
                connection.set_in_flight(false);
                result
            }
            Err(_) => {
                // The statement may still run (or wait for a lock) on the server, holding its
                // locks: ask the server to cancel it, best effort, without waiting. The
                // connection itself is closed when dropped.
                let token = connection.cancel_token();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(CANCEL_WAIT, token.cancel_query(NoTls)).await;
                });
                Err(self.timed_out())
            }
        }
    }
}

/// Writes the buffer of `inner` once [`AuditBatch::DELAY_MS`] have passed, on a task of the
/// current tokio runtime (none: the next call or commit writes it). Holds the store weakly: a
/// store dropped meanwhile is not kept open.
pub(crate) fn write_audit_later(inner: &std::sync::Arc<Engine>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
    let inner = std::sync::Arc::downgrade(inner);
    runtime.spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(AuditBatch::DELAY_MS)).await;
        if let Some(inner) = inner.upgrade() {
            // On failure the events go back to the buffer; the next call or commit writes them.
            let _ = inner.write_buffered(inner.audit.take()).await;
        }
    });
}
