//! The outbox on PostgreSQL: items in `idemdb_outbox` with their due, retention and
//! reconciliation columns; every change is one transaction that also moves the intent's record
//! along ([`OutboxItem::record_after`]).

use deadpool_postgres::tokio_postgres::types::ToSql;

use futures_util::future::try_join;

use idemdb_core::{
    AuditKind, Claim, Corrupt, EffectName, EffectReport, IdempotencyKey, Lease, OutboxItem, OutboxRefusal, Policy,
    ProviderState, Refusal, Reservation, Reserve, Scope, Timestamp,
};

use crate::audit::to_sql_ms;
use crate::error::Error;
use crate::store::PgStore;
use crate::txn::PgTxn;
use idemdb_core::{AuditEvent, ResolutionCause};

/// The derived columns of an item's row.
struct ItemRow {
    state: &'static str,
    due_at: Option<i64>,
    forget_at: Option<i64>,
    reconcile_since: Option<i64>,
    item: Vec<u8>,
}

impl ItemRow {
    fn of(item: &OutboxItem, policy: &Policy) -> ItemRow {
        ItemRow {
            state: item.state.kind().as_str(),
            due_at: item.due_at().map(|at| to_sql_ms(at.as_millis())),
            forget_at: item.forget_at(policy).map(|at| to_sql_ms(at.as_millis())),
            reconcile_since: item.needs_reconciliation().then(|| to_sql_ms(item.updated_at.as_millis())),
            item: item.encode(),
        }
    }
}

/// Decodes an item row's value.
pub(crate) fn decode_item(
    scope: &Scope,
    key: &IdempotencyKey,
    effect: &EffectName,
    value: &[u8],
) -> Result<OutboxItem, Error> {
    OutboxItem::decode(&OutboxItem::key_of(scope, key, effect), value)
        .map_err(|source| Error::Corrupt(Corrupt { what: "outbox item", source }))
}

/// The identity columns of a row (`tenant, operation, key, effect` first).
pub(crate) fn item_identity(
    row: &deadpool_postgres::tokio_postgres::Row,
) -> Result<(Scope, IdempotencyKey, EffectName), Error> {
    let malformed = |reason: String| {
        Error::Corrupt(Corrupt { what: "outbox item", source: idemdb_core::DecodeError::Malformed { reason } })
    };
    let tenant: String = row.try_get(0).map_err(Error::from_driver)?;
    let operation: String = row.try_get(1).map_err(Error::from_driver)?;
    let key: String = row.try_get(2).map_err(Error::from_driver)?;
    let effect: String = row.try_get(3).map_err(Error::from_driver)?;
    let scope = Scope::new(tenant, operation).map_err(|e| malformed(e.to_string()))?;
    let key = IdempotencyKey::new(key).map_err(|e| malformed(e.to_string()))?;
    let effect = EffectName::new(effect).map_err(|e| malformed(e.to_string()))?;
    Ok((scope, key, effect))
}

impl PgTxn {
    /// Enqueues an external effect of the intent `lease` holds, **in this transaction**: the
    /// effect is on record exactly when the transaction's other writes are (the reservation,
    /// the application's business row). Its provider key is `<key>:<effect>-v<version>`.
    /// Enqueuing the same effect again with the same payload returns the stored item.
    ///
    /// ```no_run
    /// # async fn run(store: idemdb_postgres::PgStore, lease: idemdb_postgres::Lease) -> Result<(), Box<dyn std::error::Error>> {
    /// use idemdb_postgres::EffectName;
    /// let mut txn = store.begin().await?;
    /// txn.client().execute("INSERT INTO orders (id, amount) VALUES ($1, $2)", &[&842_i64, &1050_i64]).await?;
    /// let item = txn.enqueue_effect(&lease, &EffectName::new("authorize")?, 1, br#"{"amount":"10.50"}"#.to_vec()).await?;
    /// assert_eq!(item.provider_key.as_str(), "order-842:authorize-v1");
    /// txn.commit().await?; // the order row and its effect: both, or neither
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Refusal::Key`](idemdb_core::Refusal::Key) when the provider key would be over 255 bytes;
    /// [`OutboxRefusal::PayloadMismatch`] when the effect was enqueued with another payload;
    /// database errors.
    pub async fn enqueue_effect(
        &mut self,
        lease: &Lease,
        effect: &EffectName,
        version: u16,
        payload: Vec<u8>,
    ) -> Result<OutboxItem, Error> {
        let (scope, key) = (lease.scope(), lease.key());
        // Only the current holder adds effects (the record's row stays locked until the
        // transaction ends): once a record is taken over, the old holder's effects are refused.
        let (record, _, _) = self.lock_record(scope, key).await?;
        let record = record.ok_or(Refusal::NotFound)?;
        idemdb_core::check_holder(&record, lease.fence(), "enqueue an effect").map_err(OutboxRefusal::from)?;
        for _ in 0..2 {
            let existing = self.load_effect(scope, key, effect, true).await?;
            let now = self.time().await?;
            let new = OutboxItem::new(lease, effect.clone(), version, payload.clone(), now)?;
            let (item, write) = OutboxItem::enqueue(existing, new)?;
            if !write {
                return Ok(item);
            }
            if self.put_effect(None, &item).await? == 0 {
                // Another transaction enqueued it after our read: compare with what it wrote.
                continue;
            }
            self.effect_event(AuditKind::EffectEnqueued, &item, None);
            return Ok(item);
        }
        Err(Error::Contention)
    }

    /// The outbox item of `effect` for `(scope, key)`, inside this transaction (its row locked
    /// until the transaction ends).
    ///
    /// # Errors
    /// Database errors; [`Error::Corrupt`].
    pub async fn effect(
        &mut self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
    ) -> Result<Option<OutboxItem>, Error> {
        self.load_effect(scope, key, effect, true).await
    }

    pub(crate) async fn load_effect(
        &mut self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
        lock: bool,
    ) -> Result<Option<OutboxItem>, Error> {
        self.begin_now().await?;
        let inner = self.inner_arc();
        let sql = if lock { &inner.sql.wf.outbox_lock } else { &inner.sql.wf.outbox_get };
        let params: [&(dyn ToSql + Sync); 4] = [&scope.tenant(), &scope.operation(), &key.as_str(), &effect.as_str()];
        let rows = self.query(sql, &params).await?;
        let Some(row) = rows.first() else { return Ok(None) };
        let value: Vec<u8> = row.try_get(0).map_err(Error::from_driver)?;
        decode_item(scope, key, effect, &value).map(Some)
    }

    /// Writes `item` (inserting when there was no `previous`; nothing on conflict). Returns
    /// the rows written.
    async fn put_effect(&mut self, previous: Option<&OutboxItem>, item: &OutboxItem) -> Result<u64, Error> {
        let inner = self.inner_arc();
        let policy = inner.policy(item.scope.operation());
        let row = ItemRow::of(item, policy);
        let sql = if previous.is_some() { &inner.sql.wf.outbox_update } else { &inner.sql.wf.outbox_insert };
        let params: [&(dyn ToSql + Sync); 9] = [
            &item.scope.tenant(),
            &item.scope.operation(),
            &item.key.as_str(),
            &item.effect.as_str(),
            &row.state,
            &row.due_at,
            &row.forget_at,
            &row.reconcile_since,
            &row.item,
        ];
        if row.due_at.is_none() {
            return self.execute(sql, &params).await;
        }
        // A due item: wake the listening dispatchers when this commits (same round trip).
        let channel = crate::workflow::channel(&inner.sql.schema);
        let notify: [&(dyn ToSql + Sync); 1] = [&channel];
        let (written, _) =
            try_join(self.execute(sql, &params), self.query(&inner.sql.wf.outbox_notify, &notify)).await?;
        Ok(written)
    }

    /// Moves the intent's record along after its effect changed (see
    /// [`OutboxItem::record_after`]).
    async fn follow_effect(&mut self, item: &OutboxItem, result: Option<Vec<u8>>) -> Result<(), Error> {
        let (record, bytes, now) = self.lock_record(&item.scope, &item.key).await?;
        let Some(record) = record else { return Ok(()) };
        let inner = self.inner_arc();
        let policy = inner.policy(item.scope.operation());
        let Some(next) = item.record_after(&record, result, now, policy).map_err(OutboxRefusal::from)? else {
            return Ok(());
        };
        let kind = AuditKind::after_effect(next.state.kind());
        self.write(&inner.sql.update, &item.scope, &item.key, &next, bytes.as_deref()).await?;
        let row = inner.event(now, kind, &item.scope, &item.key, next.fence, Some(&next.fingerprint), None);
        self.push_event(row);
        Ok(())
    }

    /// Records `kind` for `item`: its correlation is the effect's name, and the cause of a
    /// resolution after it.
    fn effect_event(&mut self, kind: AuditKind, item: &OutboxItem, cause: Option<ResolutionCause>) {
        let at = self.now().unwrap_or(item.updated_at);
        let correlation = match cause {
            Some(cause) => AuditEvent::resolution_correlation(Some(item.effect.as_str()), cause),
            None => item.effect.as_str().to_string(),
        };
        let row = self.inner_arc().event(at, kind, &item.scope, &item.key, item.fence, None, Some(&correlation));
        self.push_event(row);
    }

    /// Applies `change` to the stored item, writes it, and moves the record along.
    async fn change_effect(
        &mut self,
        (scope, key, effect): (&Scope, &IdempotencyKey, &EffectName),
        (kind, cause): (AuditKind, Option<ResolutionCause>),
        result: Option<Vec<u8>>,
        change: impl FnOnce(&OutboxItem, Timestamp) -> Result<OutboxItem, OutboxRefusal>,
    ) -> Result<OutboxItem, Error> {
        let item = self.load_effect(scope, key, effect, true).await?.ok_or(OutboxRefusal::NotFound)?;
        let now = self.time().await?;
        let next = change(&item, now)?;
        self.put_effect(Some(&item), &next).await?;
        self.follow_effect(&next, result).await?;
        self.effect_event(kind, &next, cause);
        Ok(next)
    }

    /// [`PgStore::claim_effects`] inside this transaction.
    ///
    /// # Errors
    /// As [`PgStore::claim_effects`].
    pub async fn claim_effects(&mut self, limit: usize) -> Result<Vec<OutboxItem>, Error> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.begin_now().await?;
        let now = self.time().await?;
        let inner = self.inner_arc();
        let limit_sql = i64::try_from(limit).unwrap_or(i64::MAX);
        let params: [&(dyn ToSql + Sync); 2] = [&to_sql_ms(now.as_millis()), &limit_sql];
        let rows = self.query(&inner.sql.wf.outbox_due, &params).await?;
        let mut claimed = Vec::new();
        for row in &rows {
            let (scope, key, effect) = item_identity(row)?;
            let value: Vec<u8> = row.try_get(4).map_err(Error::from_driver)?;
            let item = decode_item(&scope, &key, &effect, &value)?;
            let policy = inner.policy(scope.operation());
            match item.claim(now, policy) {
                Claim::Claimed(next) => {
                    self.put_effect(Some(&item), &next).await?;
                    self.follow_effect(&next, None).await?;
                    self.effect_event(AuditKind::EffectClaimed, &next, None);
                    claimed.push(next);
                }
                Claim::ToReconcile(next) => {
                    self.put_effect(Some(&item), &next).await?;
                    self.follow_effect(&next, None).await?;
                    self.effect_event(AuditKind::EffectReported, &next, None);
                }
                // Not due (a live claim), or finished: nothing to dispatch.
                _ => {}
            }
        }
        Ok(claimed)
    }

    /// [`PgStore::report_effect`] inside this transaction.
    ///
    /// # Errors
    /// As [`PgStore::report_effect`].
    pub async fn report_effect(&mut self, claim: &OutboxItem, report: EffectReport) -> Result<OutboxItem, Error> {
        let inner = self.inner_arc();
        let policy = inner.policy(claim.scope.operation());
        let result = match &report {
            EffectReport::Confirmed { result, .. } => Some(result.clone()),
            _ => None,
        };
        let fence = claim.fence;
        self.change_effect(
            (&claim.scope, &claim.key, &claim.effect),
            (AuditKind::EffectReported, None),
            result,
            |item, now| item.report(fence, report, now, policy),
        )
        .await
    }

    /// [`PgStore::retry_effect`] inside this transaction.
    ///
    /// # Errors
    /// As [`PgStore::retry_effect`].
    pub async fn retry_effect(
        &mut self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
        cause: ResolutionCause,
    ) -> Result<OutboxItem, Error> {
        let inner = self.inner_arc();
        let policy = inner.policy(scope.operation());
        let kind = (AuditKind::EffectResolved, Some(cause));
        self.change_effect((scope, key, effect), kind, None, |item, now| item.retry(now, policy)).await
    }

    /// [`PgStore::resolve_effect`] inside this transaction.
    ///
    /// # Errors
    /// As [`PgStore::resolve_effect`].
    pub async fn resolve_effect(
        &mut self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
        state: ProviderState,
        cause: ResolutionCause,
    ) -> Result<OutboxItem, Error> {
        let result = state.result();
        let kind = (AuditKind::EffectResolved, Some(cause));
        let inner = self.inner_arc();
        let policy = inner.policy(scope.operation());
        self.change_effect((scope, key, effect), kind, result, |item, now| item.resolve(state, now, policy)).await
    }
}

impl PgStore {
    /// [`PgStore::reserve`] of a request with effects: when it acquires the key, they are
    /// enqueued in the outbox in the same transaction; on an error it is rolled back.
    pub(crate) async fn reserve_enqueuing(&self, request: Reserve<'_>) -> Result<Reservation, Error> {
        let request = &request;
        self.in_txn(|mut txn| async move {
            let lease = match txn
                .reserve_with(request.scope(), request.key(), request.fingerprint(), request.correlation())
                .await
            {
                Ok(Reservation::Acquired(lease)) => lease,
                other => return (txn, other),
            };
            for effect in request.effects() {
                if let Err(error) =
                    txn.enqueue_effect(&lease, &effect.effect, effect.version, effect.payload.clone()).await
                {
                    return (txn, Err(error));
                }
            }
            (txn, Ok(Reservation::Acquired(lease)))
        })
        .await
    }

    /// [`PgTxn::enqueue_effect`] in a transaction of its own.
    ///
    /// # Errors
    /// As [`PgTxn::enqueue_effect`].
    pub async fn enqueue_effect(
        &self,
        lease: &Lease,
        effect: &EffectName,
        version: u16,
        payload: Vec<u8>,
    ) -> Result<OutboxItem, Error> {
        let payload = &payload;
        self.in_txn(|mut txn| async move {
            let outcome = txn.enqueue_effect(lease, effect, version, payload.clone()).await;
            (txn, outcome)
        })
        .await
    }

    /// Claims up to `limit` due outbox items for dispatch, in one transaction: pending items
    /// whose time has come, and dispatching ones whose dispatcher's claim expired. Rows another
    /// instance is claiming are skipped (`FOR UPDATE SKIP LOCKED`), so dispatchers on many
    /// instances share the work. Each returned item holds its claim (`fence`): call the
    /// provider with its `provider_key` and `payload`, then [`PgStore::report_effect`]. An item
    /// whose earlier outcome is unknown and whose provider window has passed is not returned:
    /// it goes to the reconciliation queue.
    ///
    /// # Errors
    /// [`Error::Unavailable`], [`Error::CommitUnknown`] (the claims may stand: their leases
    /// run out and the items are claimed again, in doubt), database errors; [`Error::Corrupt`].
    pub async fn claim_effects(&self, limit: usize) -> Result<Vec<OutboxItem>, Error> {
        self.in_txn(|mut txn| async move {
            let outcome = txn.claim_effects(limit).await;
            (txn, outcome)
        })
        .await
    }

    /// Reports what the provider answered for a claimed item; the intent's record follows in
    /// the same transaction: confirmed → completed with the report's result, failed → failed
    /// definitively, unknown → uncertain (reconciliation queue), retryable → dispatched again
    /// after a backoff.
    ///
    /// # Errors
    /// [`OutboxRefusal::StaleClaim`] (as [`Refusal::Outbox`](idemdb_core::Refusal::Outbox)) when another dispatcher claimed the
    /// item since; [`OutboxRefusal::WrongState`]; database errors.
    pub async fn report_effect(&self, claim: &OutboxItem, report: EffectReport) -> Result<OutboxItem, Error> {
        let report = &report;
        self.in_txn(|mut txn| async move {
            let outcome = txn.report_effect(claim, report.clone()).await;
            (txn, outcome)
        })
        .await
    }

    /// Sends an uncertain item again with the same provider key, inside the provider's
    /// key-retention window only.
    ///
    /// # Errors
    /// [`OutboxRefusal::ProviderKeyExpired`] past the window (query the provider and
    /// [`PgStore::resolve_effect`]); [`OutboxRefusal::NotFound`], [`OutboxRefusal::WrongState`].
    pub async fn retry_effect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
        cause: ResolutionCause,
    ) -> Result<OutboxItem, Error> {
        self.in_txn(|mut txn| async move {
            let outcome = txn.retry_effect(scope, key, effect, cause).await;
            (txn, outcome)
        })
        .await
    }

    /// Records what the provider says about an uncertain item (query first, then resolve).
    ///
    /// # Errors
    /// [`OutboxRefusal::NotFound`], [`OutboxRefusal::WrongState`] when the item is not
    /// uncertain, [`OutboxRefusal::InvalidReference`]; database errors.
    pub async fn resolve_effect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
        state: ProviderState,
        cause: ResolutionCause,
    ) -> Result<OutboxItem, Error> {
        let state = &state;
        self.in_txn(|mut txn| async move {
            let outcome = txn.resolve_effect(scope, key, effect, state.clone(), cause).await;
            (txn, outcome)
        })
        .await
    }

    /// The outbox item of `effect` for `(scope, key)` (one lock-free read).
    ///
    /// # Errors
    /// [`Error::Unavailable`] and database errors; [`Error::Corrupt`].
    pub async fn effect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
    ) -> Result<Option<OutboxItem>, Error> {
        let params: [&(dyn ToSql + Sync); 4] = [&scope.tenant(), &scope.operation(), &key.as_str(), &effect.as_str()];
        let Some(row) = self.read_one(|sql| &sql.wf.outbox_get, &params).await? else { return Ok(None) };
        let value: Vec<u8> = row.try_get(0).map_err(Error::from_driver)?;
        decode_item(scope, key, effect, &value).map(Some)
    }
}
