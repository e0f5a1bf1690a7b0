//! The handle: [`PgStore`], a cheap-to-clone reference to the pool, the settings and the
//! audit buffer, with the operations applications call. Every decision runs in a
//! [`PgTxn`](crate::PgTxn); this module adds the read-only answers, bounded retries of calls
//! that failed before anything was committed, and the transaction API.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadpool_postgres::tokio_postgres::Row;
use deadpool_postgres::tokio_postgres::types::ToSql;
use deadpool_postgres::{Object, Pool};

use idemdb_core::{
    AuditEvent, AuditKind, DecisionContext, Failure, Fingerprint, IdempotencyKey, KeyHash, Lease, Policy, PurgeReport,
    Record, Reservation, Resolution, Scope, ScopedKey, Timestamp, decide, decode_record, validate_correlation,
};
use idemdb_interface::Clock;

use crate::audit::{self, AuditRow, Buffer};
use crate::error::{DbError, Error};
use crate::schema::Sql;
use crate::time::TimeSource;
use crate::txn::PgTxn;

/// Attempts of one call whose earlier attempts failed before anything was committed.
const MAX_ATTEMPTS: u32 = 4;
/// Pause before the second attempt (doubled for each further one).
const FIRST_BACKOFF: Duration = Duration::from_millis(25);

/// Settings fixed at connect.
pub(crate) struct Settings {
    pub(crate) policies: HashMap<String, Policy>,
    pub(crate) default_policy: Policy,
    pub(crate) time_source: TimeSource,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) audit: bool,
    pub(crate) audit_retention: Duration,
    pub(crate) operation_timeout: Duration,
}

/// What every handle shares.
pub(crate) struct Inner {
    pub(crate) pool: Pool,
    pub(crate) sql: Sql,
    secret: [u8; 32],
    pub(crate) settings: Settings,
    /// The highest decision time this instance has used: time never goes back within it.
    high_water: AtomicU64,
    pub(crate) audit: Buffer,
}

impl Inner {
    pub(crate) fn new(pool: Pool, sql: Sql, secret: [u8; 32], settings: Settings) -> Inner {
        Inner { pool, sql, secret, settings, high_water: AtomicU64::new(0), audit: Buffer::default() }
    }

    pub(crate) fn policy(&self, operation: &str) -> &Policy {
        self.settings.policies.get(operation).unwrap_or(&self.settings.default_policy)
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
    ) -> Option<AuditRow> {
        let row = AuditRow::new(at, kind, scope, self.key_hash(scope, key), fence, fingerprint, correlation);
        self.settings.audit.then_some(row)
    }

    /// Runs a statement on `(scope, key)` (`$1..$3`) on `connection`; its row, if any.
    pub(crate) async fn query_keyed(
        &self,
        connection: &Object,
        sql: &str,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> Result<Option<Row>, Error> {
        self.io(async {
            let statement = connection.prepare_cached(sql).await.map_err(Error::from_driver)?;
            let params: [&(dyn ToSql + Sync); 3] = [&scope.tenant(), &scope.operation(), &key.as_str()];
            connection.query_opt(&statement, &params).await.map_err(Error::from_driver)
        })
        .await
    }

    /// Writes audit rows outside any transaction (buffered answers' events); on failure they
    /// go back to the buffer.
    pub(crate) async fn write_buffered(&self, rows: Vec<AuditRow>) -> Result<(), Error> {
        if rows.is_empty() {
            return Ok(());
        }
        let written = async {
            let connection = self.connection().await?;
            self.io(audit::insert(&connection, &self.sql.audit_insert, &rows)).await
        }
        .await;
        if written.is_err() {
            self.audit.restore(rows);
        }
        written
    }

    /// A pooled connection, or [`Error::Unavailable`].
    pub(crate) async fn connection(&self) -> Result<Object, Error> {
        self.pool.get().await.map_err(Error::from)
    }

    /// Bounds one round trip to the database.
    pub(crate) async fn io<T>(&self, work: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
        let limit = self.settings.operation_timeout;
        match tokio::time::timeout(limit, work).await {
            Ok(result) => result,
            Err(_) => Err(Error::Unavailable(DbError::unreachable(format!(
                "no answer from the database within {} ms",
                limit.as_millis()
            )))),
        }
    }
}

/// A PostgreSQL-backed idempotency store: the same decisions, records and audit trail as the
/// embedded store, shared by every instance of a service that points at the same database.
///
/// Every decision is one PostgreSQL transaction: lock the record's row (`SELECT … FOR UPDATE`,
/// or insert it with `ON CONFLICT DO NOTHING` when it does not exist), decide with the core's
/// [`decide`] or transition, write, commit. Answers that change nothing are read without a
/// transaction or a lock. `PgStore` is a handle: `Send + Sync`, cheap to clone, and it
/// implements [`IdempotencyStore`](idemdb_interface::IdempotencyStore). It needs a Tokio runtime.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("schema", &self.inner.sql.schema).finish_non_exhaustive()
    }
}

impl PgStore {
    pub(crate) fn from_inner(inner: Inner) -> PgStore {
        PgStore { inner: Arc::new(inner) }
    }

    /// The schema holding the store's tables.
    pub fn schema(&self) -> &str {
        &self.inner.sql.schema
    }

    /// The policy that applies to `operation`.
    pub fn policy(&self, operation: &str) -> &Policy {
        self.inner.policy(operation)
    }

    /// The keyed hash that logs and the audit trail use for `(scope, key)`: the same secret
    /// for every instance (it lives in the database), so their logs correlate.
    pub fn key_hash(&self, scope: &Scope, key: &IdempotencyKey) -> KeyHash {
        self.inner.key_hash(scope, key)
    }

    /// Runs `attempt` until it succeeds, fails for good, or has failed [`MAX_ATTEMPTS`] times
    /// in a way that left nothing committed.
    async fn retrying<T, F, Fut>(&self, attempt: F) -> Result<T, Error>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let mut backoff = FIRST_BACKOFF;
        let mut tries = 1;
        loop {
            match attempt().await {
                Err(error) if error.retry_safe() && tries < MAX_ATTEMPTS => {
                    tracing::debug!(target: "idemdb", %error, tries, "retrying a call that committed nothing");
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                    tries += 1;
                }
                other => return other,
            }
        }
    }

    /// Begins a transaction for the adapter's own use (`BEGIN` goes out with its first
    /// statement).
    async fn begin_internal(&self) -> Result<PgTxn, Error> {
        let connection = self.inner.connection().await?;
        Ok(PgTxn::new(Arc::clone(&self.inner), connection, false))
    }

    /// Runs one decision in its own transaction: begin, `step`, commit (or roll back on error).
    pub(crate) async fn in_txn<T, F, Fut>(&self, step: F) -> Result<T, Error>
    where
        F: Fn(PgTxn) -> Fut,
        Fut: Future<Output = (PgTxn, Result<T, Error>)>,
    {
        self.retrying(|| async {
            let txn = self.begin_internal().await?;
            let (txn, result) = step(txn).await;
            match result {
                Ok(value) => txn.commit().await.map(|()| value),
                Err(error) => {
                    txn.rollback_quietly().await;
                    Err(error)
                }
            }
        })
        .await
    }

    /// Begins a transaction in which the application writes its own rows (through
    /// [`PgTxn::client`]) and completes the record: **one PostgreSQL transaction**, committed by
    /// [`PgTxn::commit`] — both, or neither. Dropping the transaction without committing rolls
    /// it back (the connection is closed rather than reused).
    ///
    /// ```no_run
    /// # async fn run(store: idemdb_postgres::PgStore, lease: idemdb_postgres::Lease) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut txn = store.begin().await?;
    /// txn.client().execute("INSERT INTO orders (id, amount) VALUES ($1, $2)", &[&842_i64, &1050_i64]).await?;
    /// txn.complete(&lease, br#"{"order":842}"#.to_vec()).await?;
    /// txn.commit().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Unavailable`] when no connection could be had or `BEGIN` failed.
    pub async fn begin(&self) -> Result<PgTxn, Error> {
        self.retrying(|| async {
            let mut txn = self.begin_internal().await?;
            txn.begin_now().await?;
            Ok(txn)
        })
        .await
    }

    /// Reserves `(scope, key)` for a request with `fingerprint`, or says why not.
    /// `correlation` is recorded in the audit trail and log events when given.
    ///
    /// Answers that change nothing (replay, in progress, mismatch, expired, already uncertain)
    /// come from one lock-free read; the rest are decided in a transaction holding the row.
    ///
    /// # Errors
    /// [`Error::Key`] for an invalid correlation id; [`Error::Unavailable`],
    /// [`Error::CommitUnknown`] and database errors; [`Error::Corrupt`].
    pub async fn reserve(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        correlation: Option<&str>,
    ) -> Result<Reservation, Error> {
        if let Some(correlation) = correlation {
            validate_correlation(correlation)?;
        }
        if let Some(answer) = self.retrying(|| self.answer_without_lock(scope, key, fingerprint, correlation)).await? {
            return Ok(answer);
        }
        self.in_txn(|mut txn| async move {
            let result = txn.reserve_traced(scope, key, fingerprint, correlation).await;
            (txn, result)
        })
        .await
    }

    /// The read-only half of a reservation: `Some(answer)` when the answer changes nothing.
    async fn answer_without_lock(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        correlation: Option<&str>,
    ) -> Result<Option<Reservation>, Error> {
        let inner = &self.inner;
        let connection = inner.connection().await?;
        // The lookup always returns one row (the metadata row, joined with the record if any).
        let Some(row) = inner.query_keyed(&connection, &inner.sql.lookup, scope, key).await? else {
            return Err(Error::Database(DbError::schema("the idemdb_meta row is missing")));
        };
        drop(connection);
        let record: Option<Vec<u8>> = row.try_get(0).map_err(Error::from_driver)?;
        let database_ms: i64 = row.try_get(1).map_err(Error::from_driver)?;
        let floor: i64 = row.try_get(2).map_err(Error::from_driver)?;
        let Some(bytes) = record else { return Ok(None) };
        let record = decode_record(&bytes).map_err(|source| Error::Corrupt { what: "record", source })?;
        let now = inner.now(database_ms);
        let context = DecisionContext::new(now, inner.policy(scope.operation()))
            .with_fence_floor(u64::try_from(floor).unwrap_or(0));
        let decision = decide(Some(record), scope, key, fingerprint, context)?;
        if decision.write.is_some() {
            return Ok(None);
        }
        let answer = decision.answer;
        let kind = AuditKind::from(answer.kind());
        if let Some(row) = inner.event(now, kind, scope, key, answer.fence(), Some(fingerprint), correlation)
            && inner.audit.push(row)
        {
            // The answer stands even if this fails; the events wait for the next write.
            let _ = inner.write_buffered(inner.audit.take()).await;
        }
        Ok(Some(answer))
    }

    /// Stores the result of the lease's attempt; retries replay it byte for byte.
    ///
    /// # Errors
    /// [`Error::Transition`] for a stale fence, a finished record or a result over the limit;
    /// [`Error::NotFound`]; [`Error::Unavailable`], [`Error::CommitUnknown`], database errors.
    pub async fn complete(&self, lease: &Lease, result: Vec<u8>) -> Result<(), Error> {
        let result = &result;
        self.in_txn(|mut txn| async move {
            let outcome = txn.complete(lease, result.clone()).await;
            (txn, outcome)
        })
        .await
    }

    /// Records that the lease's attempt failed.
    ///
    /// # Errors
    /// As [`PgStore::complete`].
    pub async fn fail(&self, lease: &Lease, failure: Failure) -> Result<(), Error> {
        let failure = &failure;
        self.in_txn(|mut txn| async move {
            let outcome = txn.fail(lease, failure.clone()).await;
            (txn, outcome)
        })
        .await
    }

    /// Extends the lease; returns the renewed lease.
    ///
    /// # Errors
    /// [`Error::Transition`] when the lease is stale or the record is no longer in progress;
    /// as [`PgStore::complete`].
    pub async fn renew(&self, lease: &Lease) -> Result<Lease, Error> {
        self.in_txn(|mut txn| async move {
            let outcome = txn.renew(lease).await;
            (txn, outcome)
        })
        .await
    }

    /// Resolves an uncertain record.
    ///
    /// # Errors
    /// [`Error::Transition`] when the record is not uncertain or its lease is still live;
    /// [`Error::NotFound`]; as [`PgStore::complete`].
    pub async fn reconcile(&self, scope: &Scope, key: &IdempotencyKey, resolution: Resolution) -> Result<(), Error> {
        let resolution = &resolution;
        self.in_txn(|mut txn| async move {
            let outcome = txn.reconcile(scope, key, resolution.clone()).await;
            (txn, outcome)
        })
        .await
    }

    /// Reads the record of `(scope, key)`.
    ///
    /// # Errors
    /// [`Error::Unavailable`] and database errors; [`Error::Corrupt`].
    pub async fn get(&self, scope: &Scope, key: &IdempotencyKey) -> Result<Option<Record>, Error> {
        self.retrying(|| async {
            let inner = &self.inner;
            let connection = inner.connection().await?;
            let Some(row) = inner.query_keyed(&connection, &inner.sql.get, scope, key).await? else { return Ok(None) };
            let bytes: Vec<u8> = row.try_get(0).map_err(Error::from_driver)?;
            decode_record(&bytes).map(Some).map_err(|source| Error::Corrupt { what: "record", source })
        })
        .await
    }

    /// Applies retention to at most `budget` due records (and at most `budget` audit events
    /// past their retention) in one transaction. Call it again while [`PurgeReport::more`] is
    /// set. Several instances may purge at once: each skips the rows another has locked.
    ///
    /// # Errors
    /// [`Error::Unavailable`], [`Error::CommitUnknown`], database errors.
    pub async fn purge_expired(&self, budget: usize) -> Result<PurgeReport, Error> {
        self.in_txn(|mut txn| async move {
            let outcome = crate::purge::purge(&mut txn, budget).await;
            (txn, outcome)
        })
        .await
    }

    /// Writes every buffered audit event (of answers that changed nothing). Call it before a
    /// planned shutdown; otherwise the next write carries them.
    ///
    /// # Errors
    /// [`Error::Unavailable`] and database errors (the events stay buffered).
    pub async fn flush(&self) -> Result<(), Error> {
        self.inner.write_buffered(self.inner.audit.take()).await
    }

    /// The audit trail, oldest first, at most `limit` events (written ones, then buffered ones).
    ///
    /// # Errors
    /// [`Error::Unavailable`] and database errors; [`Error::Corrupt`].
    pub async fn audit_events(&self, limit: usize) -> Result<Vec<AuditEvent>, Error> {
        let inner = &self.inner;
        let connection = inner.connection().await?;
        let limit_sql = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = inner
            .io(async { connection.query(&inner.sql.audit_read, &[&limit_sql]).await.map_err(Error::from_driver) })
            .await?;
        let mut events = rows.iter().map(audit::decode).collect::<Result<Vec<_>, _>>()?;
        events.extend(inner.audit.snapshot().iter().map(AuditEvent::from));
        events.truncate(limit);
        Ok(events)
    }

    /// How far the database's clock is ahead of this host's clock (negative: behind), in
    /// milliseconds, measured now (the error is about one round trip). With
    /// [`TimeSource::Database`] the skew does not matter to any decision; `connect` logs a
    /// warning (`tracing`, target `idemdb`) when it is over a second.
    ///
    /// # Errors
    /// [`Error::Unavailable`] and database errors.
    pub async fn clock_skew(&self) -> Result<i64, Error> {
        let inner = &self.inner;
        let connection = inner.connection().await?;
        let row =
            inner.io(async { connection.query_one(&inner.sql.now, &[]).await.map_err(Error::from_driver) }).await?;
        let database_ms: i64 = row.try_get(0).map_err(Error::from_driver)?;
        let host_ms = i64::try_from(inner.settings.clock.now().as_millis()).unwrap_or(i64::MAX);
        Ok(database_ms.saturating_sub(host_ms))
    }

    pub(crate) async fn warn_on_skew(&self) {
        if let Ok(skew) = self.clock_skew().await
            && skew.unsigned_abs() > 1_000
        {
            let decisions = match self.inner.settings.time_source {
                TimeSource::Database => "decisions use the database's clock",
                TimeSource::HostClock => "decisions use this host's clock: instances will disagree on leases",
            };
            tracing::warn!(target: "idemdb", skew_ms = skew, "this host's clock differs from the database's; {decisions}");
        }
    }
}
