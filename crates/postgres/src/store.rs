//! The handle: [`PgStore`], a cheap-to-clone reference to the pool, the settings and the
//! audit buffer, with the operations applications call. Every decision runs in a
//! [`PgTxn`](crate::PgTxn); this module adds the read-only answers, bounded retries of calls
//! that failed before anything was committed, and the transaction API.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::tokio_postgres::Row;
use deadpool_postgres::tokio_postgres::types::ToSql;

use idemdb_core::{
    AuditEvent, Corrupt, DecisionContext, Failure, Fingerprint, IdempotencyKey, KeyHash, Lease, Policy, PurgeReport,
    Record, Reservation, Reserve, Resolution, Scope, Timestamp, decide, decode_record,
};

use crate::audit;
use crate::engine::Engine;
use crate::error::{DbError, Error};
use crate::schema::Sql;
use crate::time::TimeSource;
use crate::txn::PgTxn;
use idemdb_core::ResolutionCause;

/// Attempts of one call whose earlier attempts failed before anything was committed.
const MAX_ATTEMPTS: u32 = 4;
/// Pause before the second attempt (doubled for each further one).
const FIRST_BACKOFF: Duration = Duration::from_millis(25);

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
    pub(crate) inner: Arc<Engine>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("schema", &self.inner.sql.schema).finish_non_exhaustive()
    }
}

impl PgStore {
    pub(crate) fn from_inner(inner: Engine) -> PgStore {
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

    pub(crate) fn inner_config(&self) -> &deadpool_postgres::tokio_postgres::Config {
        &self.inner.settings.config
    }

    /// The keyed hash that logs and the audit trail use for `(scope, key)`: the same secret
    /// for every instance (it lives in the database), so their logs correlate.
    pub fn key_hash(&self, scope: &Scope, key: &IdempotencyKey) -> KeyHash {
        self.inner.key_hash(scope, key)
    }

    /// The keyed hash that log events show for a tenant ([`KeyHash::tenant`] under the shared
    /// secret, so every instance logs one tenant alike): the raw tenant never reaches a log.
    pub fn tenant_hash(&self, tenant: &str) -> KeyHash {
        KeyHash::tenant(&self.inner.secret, tenant)
    }

    /// Runs `attempt` until it succeeds, fails for good, has failed [`MAX_ATTEMPTS`] times in
    /// a way that left nothing committed, or the call's deadline (`operation_timeout`, for the
    /// whole call, retries included) would pass before the next attempt.
    pub(crate) async fn retrying<T, F, Fut>(&self, attempt: F) -> Result<T, Error>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        self.inner
            .within_call(async {
                let mut backoff = FIRST_BACKOFF;
                let mut tries = 1;
                loop {
                    match attempt().await {
                        Err(error)
                            if error.retry_safe()
                                && tries < MAX_ATTEMPTS
                                && tokio::time::Instant::now() + backoff < self.inner.deadline() =>
                        {
                            tracing::debug!(target: "idemdb", %error, tries, "retrying a call that committed nothing");
                            tokio::time::sleep(backoff).await;
                            backoff *= 2;
                            tries += 1;
                        }
                        other => return other,
                    }
                }
            })
            .await
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

    /// Reserves `(scope, key)` for a request with `fingerprint`, or says why not: the one
    /// reservation call ([`Reserve`]: a correlation id, checked when given to it, and effects
    /// to enqueue in the outbox in the same transaction when the key is acquired).
    ///
    /// Without effects: one statement, one round trip, for a new key and for every answer that changes nothing
    /// (replay, in progress, mismatch, expired, already uncertain): an autocommit
    /// `INSERT … ON CONFLICT DO NOTHING` of the new record (with its audit row) that also
    /// returns the existing record. Only when a record exists and the decision changes it (an
    /// expired lease, a released key, a forgotten one), or when the statement could not insert
    /// (the predicted time was off, a concurrent insert), is the decision made in a transaction
    /// holding the row. With effects it takes the locked path, in one transaction.
    ///
    /// # Errors
    /// [`Error::Unavailable`], [`Error::CommitUnknown`] and database errors; [`Error::Corrupt`];
    /// with effects, as [`PgTxn::enqueue_effect`](crate::PgTxn::enqueue_effect) (the
    /// transaction is then rolled back, or its commit's outcome is unknown: `CommitUnknown`).
    pub async fn reserve(&self, request: Reserve<'_>) -> Result<Reservation, Error> {
        if request.effects().is_empty() {
            return self
                .reserve_with(request.scope(), request.key(), request.fingerprint(), request.correlation())
                .await;
        }
        self.reserve_enqueuing(request).await
    }

    /// A reservation without effects: the correlation id (checked by [`Reserve::traced`]),
    /// when given, is recorded.
    pub(crate) async fn reserve_with(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        correlation: Option<&str>,
    ) -> Result<Reservation, Error> {
        self.inner
            .within_call(async {
                if let Some(answer) =
                    self.retrying(|| self.reserve_in_one(scope, key, fingerprint, correlation)).await?
                {
                    return Ok(answer);
                }
                self.in_txn(|mut txn| async move {
                    let result = txn.reserve_with(scope, key, fingerprint, correlation).await;
                    (txn, result)
                })
                .await
            })
            .await
    }

    /// The one-statement half of a reservation: `Some(answer)` for a new key it inserted and
    /// for an answer that changes nothing; `None` when the locked path must decide.
    async fn reserve_in_one(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        correlation: Option<&str>,
    ) -> Result<Option<Reservation>, Error> {
        let inner = &self.inner;
        let connection = inner.connection().await?;
        // The new key's record, decided at the predicted time (before the first reading of
        // the database's clock, a time that never passes the statement's bound).
        let (predicted, floor, tolerance) = inner.predicted().unwrap_or((Timestamp::ZERO, 0, 0));
        let policy = inner.policy(scope.operation());
        let fresh =
            decide(None, scope, key, fingerprint, DecisionContext::new(predicted, policy).with_fence_floor(floor))?;
        let Some(record) = &fresh.write else { return Ok(None) };
        let (state, due_at, bytes) = crate::txn::row_values(record);
        let fence = audit::to_sql_ms(record.fence);
        let at = audit::to_sql_ms(predicted.as_millis());
        let row = audit::event(
            predicted,
            fresh.audit_kind(),
            scope,
            key,
            &inner.secret,
            record.fence,
            Some(fingerprint),
            correlation,
        );
        let (kind, key_hash, prefix, correlation_column) = audit::columns(&row);
        let audit_on = inner.settings.audit;
        // Who runs the statement: if its answer is lost, only that process's end makes "no
        // row" a fact (a commit may wait for a synchronous standby long after any timeout).
        let backend = inner.backend_of(&connection).await;
        let reply = inner
            .io(&connection, async {
                let params: [&(dyn ToSql + Sync); 14] = [
                    &scope.tenant(),
                    &scope.operation(),
                    &key.as_str(),
                    &state,
                    &due_at,
                    &bytes,
                    &fence,
                    &at,
                    &tolerance,
                    &kind,
                    &key_hash,
                    &prefix,
                    &correlation_column,
                    &audit_on,
                ];
                Ok(inner.statements.query_opt(&connection, &inner.sql.reserve_new, &params).await)
            })
            .await;
        let reply = match reply {
            Ok(Ok(Some(reply))) => reply,
            // The statement selects from the metadata row: it always returns one row.
            Ok(Ok(None)) => return Err(Error::Database(DbError::schema("the idemdb_meta row is missing"))),
            // The server refused the statement: it was rolled back as a whole. Except a statement
            // cancelled or ended by the operator's class of errors (57: a statement timeout,
            // a terminated process): that may have interrupted its commit's wait for a
            // synchronous standby, and such a commit stands. Those are learnt like a lost answer.
            Ok(Err(db)) if db.sqlstate().is_some_and(|state| !state.starts_with("57")) => {
                return Err(Error::from_driver(db));
            }
            // The connection failed or the deadline passed with the statement perhaps applied.
            Ok(Err(db)) => {
                connection.discard();
                return self
                    .resolve_lost_insert(scope, key, &bytes, backend, Error::from_driver(db))
                    .await
                    .map(|()| Some(fresh.answer));
            }
            Err(error) => {
                return self.resolve_lost_insert(scope, key, &bytes, backend, error).await.map(|()| Some(fresh.answer));
            }
        };
        drop(connection);
        let inserted: i64 = reply.try_get(0).map_err(Error::from_driver)?;
        let database_ms: i64 = reply.try_get(1).map_err(Error::from_driver)?;
        let floor: i64 = reply.try_get(2).map_err(Error::from_driver)?;
        let existing: Option<Vec<u8>> = reply.try_get(3).map_err(Error::from_driver)?;
        inner.observe(database_ms, floor);
        if inserted == 1 {
            inner.used(predicted);
            return Ok(Some(fresh.answer));
        }
        // Not inserted and no row seen: the prediction was off, or another transaction's
        // insert of this key committed during the statement. The locked path decides.
        let Some(stored) = existing else { return Ok(None) };
        let record = decode_record(&stored).map_err(Corrupt::of("record"))?;
        let now = inner.now(database_ms);
        let context = DecisionContext::new(now, policy).with_fence_floor(u64::try_from(floor).unwrap_or(0));
        let decision = decide(Some(record), scope, key, fingerprint, context)?;
        let kind = decision.audit_kind();
        let Some(answer) = decision.unchanged() else { return Ok(None) };
        if let Some(row) = inner.event(now, kind, scope, key, answer.fence(), Some(fingerprint), correlation) {
            let waiting = inner.audit.push(row);
            if waiting.due {
                // The answer stands even if this fails; the events wait for the next write.
                let _ = inner.write_buffered(inner.audit.take()).await;
            } else if waiting.first {
                crate::engine::write_audit_later(inner);
            }
        }
        Ok(Some(answer))
    }

    /// Learns whether a one-statement reservation whose answer was lost inserted its row:
    /// `Ok(())` when the row holds exactly the bytes it wrote; the original error (nothing
    /// changed) when another row is there, or when no row is there once the process that ran
    /// the statement (`backend`) is gone — a running one is terminated, since its client is
    /// gone — so the statement can no longer commit; [`Error::CommitUnknown`] when that cannot
    /// be learnt by the call's deadline (always so without a known process: under transaction
    /// pooling, where no timeout proves anything, a commit waiting for a synchronous standby
    /// being the case in point).
    async fn resolve_lost_insert(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        bytes: &[u8],
        backend: Option<crate::engine::Backend>,
        error: Error,
    ) -> Result<(), Error> {
        let inner = &self.inner;
        let read = || async {
            let connection = inner.connection().await?;
            let row = inner.query_keyed(&connection, &inner.sql.get, scope, key).await?;
            row.map(|row| row.try_get::<_, Vec<u8>>(0)).transpose().map_err(Error::from_driver)
        };
        let mut pause = Duration::from_millis(20);
        while tokio::time::Instant::now() < inner.deadline() {
            match read().await {
                Ok(Some(current)) if current == bytes => return Ok(()),
                Ok(Some(_)) => return Err(error),
                Ok(None) => {
                    if let Some(backend) = backend
                        && let Ok(crate::engine::BackendState::Gone) = inner.end_backend(backend).await
                    {
                        // Gone before this read: what it ran is decided for good.
                        match read().await {
                            Ok(Some(current)) if current == bytes => return Ok(()),
                            Ok(_) => return Err(error),
                            Err(_) => {}
                        }
                    }
                }
                Err(_) => {}
            }
            tokio::time::sleep(pause.min(inner.deadline().saturating_duration_since(tokio::time::Instant::now())))
                .await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
        tracing::warn!(target: "idemdb", "connection lost during a reservation; outcome unknown");
        Err(crate::outcome::unknown(error))
    }

    /// Stores the result of the lease's attempt; retries replay it byte for byte.
    ///
    /// # Errors
    /// [`Refusal::Transition`](idemdb_core::Refusal::Transition) for a stale fence, a finished record or a result over the limit;
    /// [`Refusal::NotFound`](idemdb_core::Refusal::NotFound); [`Error::Unavailable`], [`Error::CommitUnknown`], database errors.
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
    /// [`Refusal::Transition`](idemdb_core::Refusal::Transition) when the lease is stale or the record is no longer in progress;
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
    /// [`Refusal::Transition`](idemdb_core::Refusal::Transition) when the record is not uncertain or its lease is still live;
    /// [`Refusal::NotFound`](idemdb_core::Refusal::NotFound); as [`PgStore::complete`].
    pub async fn reconcile(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        resolution: Resolution,
        cause: ResolutionCause,
    ) -> Result<(), Error> {
        let resolution = &resolution;
        self.in_txn(|mut txn| async move {
            let outcome = txn.reconcile(scope, key, resolution.clone(), cause).await;
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
            decode_record(&bytes).map(Some).map_err(|source| Error::Corrupt(Corrupt { what: "record", source }))
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

    /// Runs a read-only statement (chosen from the store's SQL by `sql`) on a pooled
    /// connection, retried like every call that changes nothing; its first row, if any.
    pub(crate) async fn read_one(
        &self,
        sql: impl Fn(&Sql) -> &String,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Error> {
        Ok(self.read_all(sql, params).await?.into_iter().next())
    }

    /// [`PgStore::read_one`], every row.
    pub(crate) async fn read_all(
        &self,
        sql: impl Fn(&Sql) -> &String,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Error> {
        let inner = &self.inner;
        let text = sql(&inner.sql);
        self.retrying(|| async {
            let connection = inner.connection().await?;
            inner
                .io(&connection, async {
                    inner.statements.query(&connection, text, params).await.map_err(Error::from_driver)
                })
                .await
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
            .io(&connection, async {
                inner
                    .statements
                    .query(&connection, &inner.sql.audit_read, &[&limit_sql])
                    .await
                    .map_err(Error::from_driver)
            })
            .await?;
        let mut events = rows.iter().map(audit::decode).collect::<Result<Vec<_>, _>>()?;
        events.extend(inner.audit.snapshot());
        events.truncate(limit);
        Ok(events)
    }

    /// The audit events of `(scope, key)` among the newest `window` events of the trail
    /// (written ones, then buffered ones), oldest first: one key's history for an operator.
    ///
    /// # Errors
    /// [`Error::Unavailable`] and database errors; [`Error::Corrupt`].
    pub async fn key_history(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        window: usize,
    ) -> Result<Vec<AuditEvent>, Error> {
        let inner = &self.inner;
        let hash = self.key_hash(scope, key);
        let connection = inner.connection().await?;
        let window_sql = i64::try_from(window).unwrap_or(i64::MAX);
        let hash_bytes = hash.as_bytes().as_slice();
        let tenant = scope.tenant();
        let params: [&(dyn ToSql + Sync); 3] = [&hash_bytes, &tenant, &window_sql];
        let rows = inner
            .io(&connection, async {
                inner
                    .statements
                    .query(&connection, &inner.sql.audit_key_history, &params)
                    .await
                    .map_err(Error::from_driver)
            })
            .await?;
        let mut events = rows.iter().map(audit::decode).collect::<Result<Vec<_>, _>>()?;
        let buffered = inner.audit.snapshot();
        let newest = buffered.len().saturating_sub(window);
        events.extend(buffered.into_iter().skip(newest).filter(|e| e.key_hash == hash && e.tenant == tenant));
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
        let row = inner
            .io(&connection, async {
                let rows =
                    inner.statements.query(&connection, &inner.sql.now, &[]).await.map_err(Error::from_driver)?;
                rows.into_iter().next().ok_or_else(|| Error::Database(DbError::schema("SELECT returned no row")))
            })
            .await?;
        let database_ms: i64 = row.try_get(0).map_err(Error::from_driver)?;
        inner.observe(database_ms, 0);
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
