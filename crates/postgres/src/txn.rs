//! One PostgreSQL transaction: lock the record's row, decide with the core, write — then
//! commit once, learning the commit's outcome from the database when the connection drops.

use std::sync::Arc;

use deadpool_postgres::tokio_postgres::types::ToSql;
use deadpool_postgres::tokio_postgres::{Client, Row};
use futures_util::future::{join, try_join3};

use idemdb_core::{
    AuditEvent, AuditKind, Corrupt, DecisionContext, Failure, Fingerprint, IdempotencyKey, Lease, LeaseStep, Record,
    Refusal, Reservation, Reserve, Resolution, ResolutionCause, Scope, Timestamp, decide, decode_record, encode_record,
    needs_effect_census,
};

use crate::audit::{self, to_sql_ms};
use crate::conn::Conn;
use crate::engine::Engine;
use crate::error::{DbError, Error};
use crate::outcome::{Before, Identity, Written};

/// Decisions that found the row inserted by a concurrent transaction and read again.
const MAX_DECISION_ROUNDS: usize = 8;

/// What the decision statement returns besides the record.
struct Context {
    now: Timestamp,
    fence_floor: u64,
}

/// A locked record: decoded, and the bytes it was read from.
struct Locked {
    record: Option<Record>,
    bytes: Option<Vec<u8>>,
    context: Context,
}

/// An open PostgreSQL transaction: the application's own statements (through
/// [`PgTxn::client`]) and idempotency decisions, committed together by [`PgTxn::commit`].
///
/// Obtained from [`PgStore::begin`](crate::PgStore::begin). Every decision locks its record's
/// row until the transaction ends, and reads the time once, with the lock held.
pub struct PgTxn {
    inner: Arc<Engine>,
    /// Present until the transaction ends.
    connection: Option<Conn>,
    begun: bool,
    now: Option<Timestamp>,
    /// Who this transaction is, for learning a lost commit's outcome.
    identity: Option<Identity>,
    /// The record rows this transaction wrote, before and after.
    written: Vec<Written>,
    audit: Vec<AuditEvent>,
}

impl std::fmt::Debug for PgTxn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTxn").field("now", &self.now).finish_non_exhaustive()
    }
}

/// The columns a record row carries besides its key.
pub(crate) fn row_values(record: &Record) -> (&'static str, Option<i64>, Vec<u8>) {
    (record.state.kind().as_str(), record.due_at().map(|at| to_sql_ms(at.as_millis())), encode_record(record))
}

impl PgTxn {
    pub(crate) fn new(inner: Arc<Engine>, connection: Conn, begun: bool) -> PgTxn {
        PgTxn {
            inner,
            connection: Some(connection),
            begun,
            now: None,
            identity: None,
            written: Vec::new(),
            audit: Vec::new(),
        }
    }

    /// The adapter's engine.
    pub(crate) fn inner_ref(&self) -> &Engine {
        &self.inner
    }

    /// The connection, while the transaction is open.
    pub(crate) fn conn_ref(&self) -> Result<&Conn, Error> {
        self.conn()
    }

    fn conn(&self) -> Result<&Conn, Error> {
        self.connection.as_ref().ok_or(Error::Unavailable(DbError::unreachable("the transaction has ended")))
    }

    /// Sends `BEGIN` now (the application's statements must run inside the transaction).
    pub(crate) async fn begin_now(&mut self) -> Result<(), Error> {
        if !self.begun {
            self.begun = true;
            let connection = self.conn()?;
            let inner = &self.inner;
            inner
                .io(connection, async { connection.batch_execute(&inner.begin).await.map_err(Error::from_driver) })
                .await?;
        }
        Ok(())
    }

    /// The connection, inside the open transaction: the application's own statements run here
    /// and commit (or roll back) with the idempotency record.
    ///
    /// Do not run `COMMIT`, `ROLLBACK` or `BEGIN` on it; use [`PgTxn::commit`]. Do not write
    /// the `idemdb_` tables: they belong to the store.
    pub fn client(&self) -> &Client {
        match &self.connection {
            Some(connection) => connection,
            // `commit` and `rollback` take the transaction by value, so no caller can hold it
            // after the connection went.
            None => unreachable!("a PgTxn holds its connection until it is consumed"),
        }
    }

    /// The time of this transaction's decisions, once one was made.
    pub fn now(&self) -> Option<Timestamp> {
        self.now
    }

    /// Locks `(scope, key)`'s row (when given) and reads the time and fence floor after the
    /// lock. The statements are pipelined: one round trip, `BEGIN` included on the first.
    async fn lock(&mut self, target: Option<(&Scope, &IdempotencyKey)>) -> Result<Locked, Error> {
        let inner = Arc::clone(&self.inner);
        let send_begin = !self.begun;
        // From here on BEGIN may have reached the server: an error makes the connection roll
        // back or close, never go back to the pool inside a transaction.
        self.begun = true;
        let connection = self.conn()?;
        let (row, context) = inner
            .io(connection, async {
                let statements = &inner.statements;
                let begin = async {
                    if send_begin {
                        connection.batch_execute(&inner.begin).await.map_err(DbError::from)
                    } else {
                        Ok(())
                    }
                };
                let locked = async {
                    match target {
                        None => Ok(None),
                        Some((scope, key)) => {
                            let params: [&(dyn ToSql + Sync); 3] = [&scope.tenant(), &scope.operation(), &key.as_str()];
                            statements.query_opt(connection, &inner.sql.lock, &params).await
                        }
                    }
                };
                let context = async {
                    statements
                        .query_opt(connection, &inner.sql.context, &[])
                        .await?
                        .ok_or_else(|| DbError::schema("the idemdb_meta row is missing"))
                };
                try_join3(begin, locked, context)
                    .await
                    .map(|((), row, context)| (row, context))
                    .map_err(Error::from_driver)
            })
            .await?;
        let database_ms: i64 = context.try_get(0).map_err(Error::from_driver)?;
        let floor: i64 = context.try_get(1).map_err(Error::from_driver)?;
        inner.observe(database_ms, floor);
        self.identity = Some(Identity::from_row(&context, 2)?);
        let now = inner.now(database_ms).max(self.now.unwrap_or(Timestamp::ZERO));
        self.now = Some(now);
        let bytes: Option<Vec<u8>> = row.as_ref().map(|row| row.try_get(0)).transpose().map_err(Error::from_driver)?;
        let record = bytes.as_deref().map(decode_record).transpose().map_err(Corrupt::of("record"))?;
        Ok(Locked { record, bytes, context: Context { now, fence_floor: u64::try_from(floor).unwrap_or(0) } })
    }

    /// Writes a record row (`sql` takes `$1..$6` = key and row values) and remembers it, with
    /// the bytes it replaced, to read back if the commit's answer is lost.
    pub(crate) async fn write(
        &mut self,
        sql: &str,
        scope: &Scope,
        key: &IdempotencyKey,
        record: &Record,
        before: Option<&[u8]>,
    ) -> Result<u64, Error> {
        let (written, after) = self.write_row(sql, scope, key, record).await?;
        if written > 0 {
            self.remember(scope, key, Before::Known(before.map(<[u8]>::to_vec)), Some(after));
        }
        Ok(written)
    }

    /// Removes a record row, remembering the bytes it held.
    pub(crate) async fn delete(&mut self, scope: &Scope, key: &IdempotencyKey, before: &[u8]) -> Result<(), Error> {
        let inner = Arc::clone(&self.inner);
        self.execute_keyed(&inner.sql.delete, scope, key).await?;
        self.remember(scope, key, Before::Known(Some(before.to_vec())), None);
        Ok(())
    }

    /// Remembers a row written once in this transaction (no search for an earlier write).
    pub(crate) fn remember_new(&mut self, scope: &Scope, key: &IdempotencyKey, before: Before, after: Option<Vec<u8>>) {
        self.written.push(Written { scope: scope.clone(), key: key.clone(), before, after });
    }

    pub(crate) fn remember(&mut self, scope: &Scope, key: &IdempotencyKey, before: Before, after: Option<Vec<u8>>) {
        match self.written.iter_mut().find(|w| w.scope == *scope && w.key == *key) {
            // A second write of the same row in this transaction: the row held `before` when
            // the transaction began.
            Some(earlier) => earlier.after = after,
            None => self.written.push(Written { scope: scope.clone(), key: key.clone(), before, after }),
        }
    }

    /// Runs one statement of the record writes (`$1..$6` = key and row values); returns the
    /// rows it changed and the record's bytes.
    pub(crate) async fn write_row(
        &self,
        sql: &str,
        scope: &Scope,
        key: &IdempotencyKey,
        record: &Record,
    ) -> Result<(u64, Vec<u8>), Error> {
        let connection = self.conn()?;
        let (state, due_at, bytes) = row_values(record);
        let written = self
            .inner
            .io(connection, async {
                let params: [&(dyn ToSql + Sync); 6] =
                    [&scope.tenant(), &scope.operation(), &key.as_str(), &state, &due_at, &bytes];
                self.inner.statements.execute(connection, sql, &params).await.map_err(Error::from_driver)
            })
            .await?;
        Ok((written, bytes))
    }

    /// Runs one statement on `(scope, key)` (`$1..$3`).
    pub(crate) async fn execute_keyed(&self, sql: &str, scope: &Scope, key: &IdempotencyKey) -> Result<u64, Error> {
        let connection = self.conn()?;
        self.inner
            .io(connection, async {
                let params: [&(dyn ToSql + Sync); 3] = [&scope.tenant(), &scope.operation(), &key.as_str()];
                self.inner.statements.execute(connection, sql, &params).await.map_err(Error::from_driver)
            })
            .await
    }

    /// Runs one statement with the given parameters, returning its rows.
    pub(crate) async fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, Error> {
        let connection = self.conn()?;
        self.inner
            .io(connection, async {
                self.inner.statements.query(connection, sql, params).await.map_err(Error::from_driver)
            })
            .await
    }

    /// Runs one statement with the given parameters, returning the rows it changed.
    pub(crate) async fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, Error> {
        let connection = self.conn()?;
        self.inner
            .io(connection, async {
                self.inner.statements.execute(connection, sql, params).await.map_err(Error::from_driver)
            })
            .await
    }

    /// Reads the time (for work that locks no single record first: purge).
    pub(crate) async fn time(&mut self) -> Result<Timestamp, Error> {
        Ok(self.lock(None).await?.context.now)
    }

    /// Reads the time and the fence floor (for work that locks its own rows first).
    pub(crate) async fn time_and_floor(&mut self) -> Result<(Timestamp, u64), Error> {
        let context = self.lock(None).await?.context;
        Ok((context.now, context.fence_floor))
    }

    /// Locks `(scope, key)`'s record row and reads the time: the record (if any) and the
    /// bytes it was read from.
    pub(crate) async fn lock_record(
        &mut self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> Result<(Option<Record>, Option<Vec<u8>>, Timestamp), Error> {
        let Locked { record, bytes, context } = self.lock(Some((scope, key))).await?;
        Ok((record, bytes, context.now))
    }

    pub(crate) fn push_event(&mut self, row: Option<AuditEvent>) {
        self.audit.extend(row);
    }

    pub(crate) fn inner_arc(&self) -> Arc<Engine> {
        Arc::clone(&self.inner)
    }

    /// [`PgStore::reserve`](crate::PgStore::reserve) inside this transaction: with effects,
    /// they are enqueued in it when the key is acquired.
    ///
    /// # Errors
    /// As [`PgStore::reserve`](crate::PgStore::reserve).
    pub async fn reserve(&mut self, request: Reserve<'_>) -> Result<Reservation, Error> {
        let answer =
            self.reserve_with(request.scope(), request.key(), request.fingerprint(), request.correlation()).await?;
        if let Reservation::Acquired(lease) = &answer {
            for effect in request.effects() {
                self.enqueue_effect(lease, &effect.effect, effect.version, effect.payload.clone()).await?;
            }
        }
        Ok(answer)
    }

    /// The reservation of [`PgTxn::reserve`]. The correlation id, when given, is recorded; it
    /// was checked by [`Reserve::traced`].
    pub(crate) async fn reserve_with(
        &mut self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        correlation: Option<&str>,
    ) -> Result<Reservation, Error> {
        for _ in 0..MAX_DECISION_ROUNDS {
            let Locked { record: existing, bytes, context } = self.lock(Some((scope, key))).await?;
            let inner = Arc::clone(&self.inner);
            let policy = inner.policy(scope.operation());
            let mut at = DecisionContext::new(context.now, policy).with_fence_floor(context.fence_floor);
            if needs_effect_census(existing.as_ref(), &at) {
                // The record's row is locked, and an effect is enqueued only under that lock
                // by the current holder: the answer cannot change before this transaction ends.
                let params: [&(dyn ToSql + Sync); 3] = [&scope.tenant(), &scope.operation(), &key.as_str()];
                let rows = self.query(&inner.sql.wf.outbox_any, &params).await?;
                let any: bool = rows.first().map_or(Ok(false), |row| row.try_get(0)).map_err(Error::from_driver)?;
                at = at.with_no_effect_enqueued(!any);
            }
            let decision = decide(existing, scope, key, fingerprint, at)?;
            if let Some(record) = &decision.write {
                let sql = if bytes.is_some() { &inner.sql.update } else { &inner.sql.insert };
                let written = self.write(sql, scope, key, record, bytes.as_deref()).await?;
                if written == 0 {
                    // Another transaction inserted the row after our read (and committed):
                    // decide again on what it wrote.
                    continue;
                }
            }
            let kind = decision.audit_kind();
            let answer = decision.answer;
            let row = self.inner.event(context.now, kind, scope, key, answer.fence(), Some(fingerprint), correlation);
            self.push_event(row);
            return Ok(answer);
        }
        Err(Error::Contention)
    }

    /// Applies a lease holder's transition to the locked record.
    async fn transition(&mut self, lease: &Lease, step: LeaseStep) -> Result<Record, Error> {
        let (scope, key) = (lease.scope(), lease.key());
        let Locked { record, bytes, context } = self.lock(Some((scope, key))).await?;
        let record = record.ok_or(Refusal::NotFound)?;
        let inner = Arc::clone(&self.inner);
        let kind = step.audit_kind();
        let next = step.apply(&record, lease, context.now, inner.policy(scope.operation()))?;
        self.write(&inner.sql.update, scope, key, &next, bytes.as_deref()).await?;
        let row = self.inner.event(context.now, kind, scope, key, lease.fence(), Some(&next.fingerprint), None);
        self.push_event(row);
        Ok(next)
    }

    /// [`PgStore::complete`](crate::PgStore::complete) inside this transaction.
    ///
    /// # Errors
    /// As [`PgStore::complete`](crate::PgStore::complete).
    pub async fn complete(&mut self, lease: &Lease, result: Vec<u8>) -> Result<(), Error> {
        self.transition(lease, LeaseStep::Complete(result)).await.map(drop)
    }

    /// [`PgStore::fail`](crate::PgStore::fail) inside this transaction.
    ///
    /// # Errors
    /// As [`PgStore::fail`](crate::PgStore::fail).
    pub async fn fail(&mut self, lease: &Lease, failure: Failure) -> Result<(), Error> {
        self.transition(lease, LeaseStep::Fail(failure)).await.map(drop)
    }

    /// [`PgStore::renew`](crate::PgStore::renew) inside this transaction.
    ///
    /// # Errors
    /// As [`PgStore::renew`](crate::PgStore::renew).
    pub async fn renew(&mut self, lease: &Lease) -> Result<Lease, Error> {
        self.transition(lease, LeaseStep::Renew).await.map(|record| lease.renewed_by(&record))
    }

    /// [`PgStore::reconcile`](crate::PgStore::reconcile) inside this transaction.
    ///
    /// # Errors
    /// As [`PgStore::reconcile`](crate::PgStore::reconcile).
    pub async fn reconcile(
        &mut self,
        scope: &Scope,
        key: &IdempotencyKey,
        resolution: Resolution,
        cause: ResolutionCause,
    ) -> Result<(), Error> {
        let Locked { record, bytes, context } = self.lock(Some((scope, key))).await?;
        let record = record.ok_or(Refusal::NotFound)?;
        let inner = Arc::clone(&self.inner);
        // The record's row is locked, and effects change only under that lock or a claim
        // whose report takes it: the states read here hold until this transaction ends.
        let params: [&(dyn ToSql + Sync); 3] = [&scope.tenant(), &scope.operation(), &key.as_str()];
        let mut effects = Vec::new();
        for row in self.query(&inner.sql.wf.outbox_of_key, &params).await? {
            let (effect, state): (String, String) =
                (row.try_get(0).map_err(Error::from_driver)?, row.try_get(1).map_err(Error::from_driver)?);
            let corrupt = |reason: String| {
                Error::Corrupt(idemdb_core::Corrupt {
                    what: "outbox item",
                    source: idemdb_core::DecodeError::Malformed { reason },
                })
            };
            let effect = idemdb_core::EffectName::new(effect).map_err(|e| corrupt(e.to_string()))?;
            let state: idemdb_core::OutboxStateKind = state.parse().map_err(|_| corrupt(format!("state {state:?}")))?;
            effects.push((effect, state));
        }
        idemdb_core::check_effects_settled(effects.iter().map(|(effect, state)| (effect, *state)))?;
        let next = idemdb_core::reconcile(&record, resolution, context.now, inner.policy(scope.operation()))?;
        self.write(&inner.sql.update, scope, key, &next, bytes.as_deref()).await?;
        let correlation = AuditEvent::resolution_correlation(None, cause);
        let row =
            self.inner.event(context.now, AuditKind::Reconciled, scope, key, next.fence, None, Some(&correlation));
        self.push_event(row);
        Ok(())
    }

    /// Reads the record of `(scope, key)` inside this transaction (and locks its row).
    ///
    /// # Errors
    /// [`Error::Unavailable`] and database errors; [`Error::Corrupt`].
    pub async fn get(&mut self, scope: &Scope, key: &IdempotencyKey) -> Result<Option<Record>, Error> {
        Ok(self.lock(Some((scope, key))).await?.record)
    }

    /// Rolls the transaction back: nothing of it is stored.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when the connection failed (the server rolls the transaction
    /// back when the connection ends; nothing was stored either way).
    pub async fn rollback(mut self) -> Result<(), Error> {
        let result = self.rollback_inner().await;
        if result.is_err() {
            // The connection is in doubt: close it rather than hand it back.
            self.discard();
        }
        result
    }

    async fn rollback_inner(&mut self) -> Result<(), Error> {
        if self.begun {
            let connection = self.conn()?;
            self.inner
                .io(connection, async { connection.batch_execute("ROLLBACK").await.map_err(Error::from_driver) })
                .await?;
            self.begun = false;
        }
        Ok(())
    }

    /// Rolls back after an error, closing the connection if even that fails.
    pub(crate) async fn rollback_quietly(self) {
        let _ = self.rollback().await;
    }

    fn discard(&mut self) {
        if let Some(connection) = self.connection.take() {
            connection.discard();
        }
    }

    /// Commits the application's statements and the decisions together.
    ///
    /// If the connection is lost while committing, the adapter asks the database (on another
    /// connection) whether the transaction committed — by its transaction id — and answers
    /// accordingly; only when the database cannot be asked within a few seconds is the outcome
    /// [`Error::CommitUnknown`].
    ///
    /// # Errors
    /// [`Error::Unavailable`] (rolled back: nothing stored), [`Error::CommitUnknown`], database
    /// errors (rolled back).
    pub async fn commit(mut self) -> Result<(), Error> {
        if !self.begun {
            return Ok(());
        }
        let inner = Arc::clone(&self.inner);
        // The events of this transaction's decisions, and those of earlier answers.
        let mut rows = inner.audit.take();
        let carried = rows.len();
        rows.append(&mut self.audit);
        let result = self.commit_with(&rows).await;
        if result.is_err() {
            rows.truncate(carried);
            inner.audit.restore(rows);
        }
        result
    }

    async fn commit_with(&mut self, rows: &[AuditEvent]) -> Result<(), Error> {
        let inner = Arc::clone(&self.inner);
        let connection = self.conn()?;
        // The audit rows (or the identity alone) go out in the same round trip as COMMIT, and
        // return the transaction's identity as it is now (its id assigned by the writes); if
        // they fail, the transaction is aborted and COMMIT rolls it back.
        let committed = inner
            .io(connection, async {
                let guard = async {
                    let row = if inner.settings.audit && !rows.is_empty() {
                        audit::insert(&inner.statements, connection, &inner.sql.audit_insert, rows).await?
                    } else {
                        inner
                            .statements
                            .query_opt(connection, &inner.sql.identity, &[])
                            .await
                            .map_err(Error::from_driver)?
                    };
                    row.map(|row| Identity::from_row(&row, 0)).transpose()
                };
                let commit = async { connection.batch_execute("COMMIT").await.map_err(Error::from_driver) };
                Ok(join(guard, commit).await)
            })
            .await;
        // The identity, when its answer came back (even if COMMIT's did not).
        let committed = match committed {
            Ok((guard, commit)) => {
                if let Ok(Some(identity)) = &guard {
                    self.identity = Some(*identity);
                }
                guard.and(commit)
            }
            Err(error) => Err(error),
        };
        match committed {
            Ok(_) => {
                self.begun = false;
                if let Some(connection) = self.connection.take() {
                    drop(connection); // back to the pool
                }
                Ok(())
            }
            // The server refused a statement of the transaction (an aborted transaction, a
            // failed audit insert, a serialization failure at commit): COMMIT rolled it back.
            Err(error @ Error::Database(_)) if error.server_refused() => {
                self.discard();
                Err(error)
            }
            Err(error) => {
                self.discard();
                match &self.identity {
                    Some(identity) => crate::outcome::learn(&inner, identity, &self.written, error).await,
                    None => Err(crate::outcome::unknown(error)),
                }
            }
        }
    }
}

impl Drop for PgTxn {
    /// A transaction dropped while open is rolled back by closing its connection (the server
    /// aborts it); a connection whose transaction never began goes back to the pool.
    fn drop(&mut self) {
        if self.begun {
            self.discard();
        }
    }
}
