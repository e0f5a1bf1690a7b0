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
    AuditEvent, AuditKind, Fingerprint, IdempotencyKey, KeyHash, Policies, Policy, Scope, ScopedKey, Timestamp,
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
pub(crate) struct Inner {
    pub(crate) pool: Pool,
    pub(crate) sql: Sql,
    pub(crate) secret: [u8; 32],
    pub(crate) settings: Settings,
    /// The highest decision time this instance has used: time never goes back within it.
    high_water: AtomicU64,
    /// What predicts the database's clock from this host's monotonic clock: the database's
    /// milliseconds minus [`Inner::started`]'s elapsed milliseconds, at the last reading
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
}

/// How far the database's clock may be from the predicted decision time of a new key's
/// one-statement reservation; further, the statement inserts nothing and the locked path
/// decides at the database's time.
pub(crate) const PREDICTION_TOLERANCE_MS: i64 = 250;

impl Inner {
    pub(crate) fn new(pool: Pool, sql: Sql, secret: [u8; 32], settings: Settings, statements: Statements) -> Inner {
        let begin = if statements.is_unnamed() {
            format!(
                "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL statement_timeout = {}",
                settings.statement_timeout.as_millis().max(1)
            )
        } else {
            "BEGIN ISOLATION LEVEL READ COMMITTED".to_string()
        };
        Inner {
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
        }
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

    /// The deadline of the running call (a call outside [`Inner::within_call`] gets a fresh
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
