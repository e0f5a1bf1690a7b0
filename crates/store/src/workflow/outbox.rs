//! The outbox in the redb store: items in `idemdb_outbox`, a due index for dispatchers, the
//! reconciliation queue for uncertain ones; every change is one write transaction that also
//! moves the intent's record along ([`OutboxItem::record_after`]).

use redb::ReadableTable;

use idemdb_core::{
    AuditKind, Claim, Corrupt, EffectName, EffectReport, IdempotencyKey, Lease, OutboxItem, OutboxRefusal,
    OutboxStateKind, ProviderState, Refusal, Reservation, Reserve, Scope, ScopedKey, Timestamp,
};

use crate::journal::apply::TableId;
use crate::tables::{
    EXPIRY_OUTBOX, OUTBOX, OUTBOX_DUE, RECONCILE_EFFECT, expiry_key, marked_expiry_key, open_optional, reconcile_key,
    split_expiry_key,
};
use crate::txn::Txn;
use crate::{Error, Store};
use idemdb_core::{AuditEvent, ResolutionCause};

/// Which outbox items a listing returns.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct EffectFilter {
    /// Only items in this state.
    pub state: Option<OutboxStateKind>,
    /// Only items of this tenant.
    pub tenant: Option<String>,
    /// At most this many (0: no limit).
    pub limit: usize,
}

impl Txn<'_> {
    /// Enqueues an external effect of the intent `lease` holds, **in this transaction**: the
    /// effect is on record exactly when the transaction's other writes are (the reservation,
    /// the business row). Its provider key is `<key>:<effect>-v<version>`. Enqueuing the same
    /// effect again with the same payload returns the stored item.
    ///
    /// # Errors
    /// [`Refusal::Key`](idemdb_core::Refusal::Key) when the provider key would be over 255 bytes;
    /// [`OutboxRefusal::PayloadMismatch`] when the effect was enqueued with another payload;
    /// storage errors.
    pub fn enqueue_effect(
        &mut self,
        lease: &Lease,
        effect: &EffectName,
        version: u16,
        payload: Vec<u8>,
    ) -> Result<OutboxItem, Error> {
        // Only the current holder adds effects: once a record is taken over (its attempt found
        // effect-free), the old holder's effects are refused.
        let record = self.load(&ScopedKey::encode_parts(lease.scope(), lease.key()))?.ok_or(Refusal::NotFound)?;
        idemdb_core::check_holder(&record, lease.fence(), "enqueue an effect").map_err(OutboxRefusal::from)?;
        let new = OutboxItem::new(lease, effect.clone(), version, payload, self.now())?;
        let existing = self.load_effect(&new.storage_key())?;
        let (item, write) = OutboxItem::enqueue(existing, new)?;
        if write {
            self.put_effect(None, &item)?;
            self.effect_event(AuditKind::EffectEnqueued, &item, None);
        }
        Ok(item)
    }

    /// The outbox item of `effect` for `(scope, key)`, inside this transaction.
    ///
    /// # Errors
    /// Storage errors; [`Error::Corrupt`].
    pub fn effect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
    ) -> Result<Option<OutboxItem>, Error> {
        self.load_effect(&OutboxItem::key_of(scope, key, effect))
    }

    pub(crate) fn load_effect(&self, storage_key: &[u8]) -> Result<Option<OutboxItem>, Error> {
        let table = self.tx_closing_kept_tables().open_table(OUTBOX)?;
        let Some(value) = table.get(storage_key)? else { return Ok(None) };
        OutboxItem::decode(storage_key, value.value())
            .map(Some)
            .map_err(|source| Error::Corrupt(Corrupt { what: "outbox item", source }))
    }

    /// Writes `item` over `previous`, moving its due-index, reconciliation-queue and
    /// retention entries.
    pub(crate) fn put_effect(&mut self, previous: Option<&OutboxItem>, item: &OutboxItem) -> Result<(), Error> {
        let key = item.storage_key();
        self.put_logged(TableId::Outbox, &key, &item.encode())?;
        let (old_due, new_due) = (previous.and_then(OutboxItem::due_at), item.due_at());
        self.move_entry(
            TableId::OutboxDue,
            old_due.map(|old| expiry_key(old, &key)),
            new_due.map(|new| expiry_key(new, &key)),
        )?;
        let (was, is) = (previous.is_some_and(OutboxItem::needs_reconciliation), item.needs_reconciliation());
        if was != is {
            let entry = reconcile_key(RECONCILE_EFFECT, &key);
            if is {
                self.put_logged(TableId::Reconcile, &entry, &item.updated_at.as_millis().to_be_bytes())?;
            } else {
                self.remove_logged(TableId::Reconcile, &entry)?;
            }
        }
        let policy = self.engine().policy(item.scope.operation()).clone();
        let (old_forget, new_forget) = (previous.and_then(|p| p.forget_at(&policy)), item.forget_at(&policy));
        self.move_entry(
            TableId::Expiry,
            old_forget.map(|old| marked_expiry_key(old, EXPIRY_OUTBOX, &key)),
            new_forget.map(|new| marked_expiry_key(new, EXPIRY_OUTBOX, &key)),
        )
    }

    /// Moves the intent's record along after its effect changed (see
    /// [`OutboxItem::record_after`]).
    fn follow_effect(&mut self, item: &OutboxItem, result: Option<Vec<u8>>) -> Result<(), Error> {
        let encoded = ScopedKey::encode_parts(&item.scope, &item.key);
        let Some(record) = self.load(&encoded)? else { return Ok(()) };
        let policy = self.engine().policy(item.scope.operation()).clone();
        if let Some(next) = item.record_after(&record, result, self.now(), &policy).map_err(OutboxRefusal::from)? {
            let kind = AuditKind::after_effect(next.state.kind());
            self.put(&encoded, Some(&record), &next)?;
            self.event(kind, &item.scope, &encoded, next.fence, Some(&next.fingerprint), None);
        }
        Ok(())
    }

    /// Records `kind` for `item`: its correlation is the effect's name, and the cause of a
    /// resolution after it.
    fn effect_event(&mut self, kind: AuditKind, item: &OutboxItem, cause: Option<ResolutionCause>) {
        let encoded = ScopedKey::encode_parts(&item.scope, &item.key);
        let correlation = match cause {
            Some(cause) => AuditEvent::resolution_correlation(Some(item.effect.as_str()), cause),
            None => item.effect.as_str().to_string(),
        };
        self.event(kind, &item.scope, &encoded, item.fence, None, Some(&correlation));
    }

    /// [`Store::report_effect`] **in this transaction**: the report, the intent's record that
    /// follows it, and the application's own rows written beside them commit together (a
    /// payment row and the confirmation of its charge: both, or neither).
    ///
    /// # Errors
    /// As [`Store::report_effect`].
    pub fn report_effect(&mut self, claim: &OutboxItem, report: EffectReport) -> Result<OutboxItem, Error> {
        let storage_key = claim.storage_key();
        let fence = claim.fence;
        let result = match &report {
            EffectReport::Confirmed { result, .. } => Some(result.clone()),
            _ => None,
        };
        let policy = self.engine().policy(claim_operation(&storage_key)?.as_str()).clone();
        self.change_effect(&storage_key, (AuditKind::EffectReported, None), result, |item, now| {
            item.report(fence, report, now, &policy)
        })
    }

    /// [`Store::resolve_effect`] **in this transaction**: what the provider says of an
    /// uncertain effect, written with the application's own rows (a payment row beside its
    /// confirmed charge).
    ///
    /// # Errors
    /// As [`Store::resolve_effect`].
    pub fn resolve_effect(
        &mut self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
        state: ProviderState,
        cause: ResolutionCause,
    ) -> Result<OutboxItem, Error> {
        let storage_key = OutboxItem::key_of(scope, key, effect);
        let result = state.result();
        let kind = (AuditKind::EffectResolved, Some(cause));
        let policy = self.engine().policy(scope.operation()).clone();
        self.change_effect(&storage_key, kind, result, |item, now| item.resolve(state, now, &policy))
    }

    /// Applies `change` to the stored item of `(scope, key, effect)`, writes it, and moves the
    /// record along.
    fn change_effect(
        &mut self,
        storage_key: &[u8],
        (kind, cause): (AuditKind, Option<ResolutionCause>),
        result: Option<Vec<u8>>,
        change: impl FnOnce(&OutboxItem, Timestamp) -> Result<OutboxItem, OutboxRefusal>,
    ) -> Result<OutboxItem, Error> {
        let item = self.load_effect(storage_key)?.ok_or(OutboxRefusal::NotFound)?;
        let next = change(&item, self.now())?;
        self.put_effect(Some(&item), &next)?;
        self.follow_effect(&next, result)?;
        self.effect_event(kind, &next, cause);
        Ok(next)
    }
}

impl Store {
    /// [`Store::reserve`] of a request with effects: when it acquires the key, the effects
    /// are enqueued in the outbox in the same commit; on an error nothing is committed.
    pub(crate) fn reserve_enqueuing(&self, request: Reserve<'_>) -> Result<Reservation, Error> {
        let (scope, key, fingerprint) = (request.scope().clone(), request.key().clone(), *request.fingerprint());
        let correlation = request.correlation().map(str::to_string);
        let effects = request.into_effects();
        self.group.run(&self.engine, move |txn| {
            txn.reserve(Reserve::new(&scope, &key, &fingerprint).traced(correlation.as_deref())?.enqueuing(effects))
        })
    }

    /// [`Txn::enqueue_effect`] in a transaction of its own.
    ///
    /// # Errors
    /// As [`Txn::enqueue_effect`].
    pub fn enqueue_effect(
        &self,
        lease: &Lease,
        effect: &EffectName,
        version: u16,
        payload: Vec<u8>,
    ) -> Result<OutboxItem, Error> {
        let (lease, effect) = (lease.clone(), effect.clone());
        self.group.run(&self.engine, move |txn| txn.enqueue_effect(&lease, &effect, version, payload))
    }

    /// Claims up to `limit` due outbox items for dispatch, in one transaction: pending items
    /// whose time has come, and dispatching ones whose dispatcher's claim expired. Each
    /// returned item holds its claim (`fence`): call the provider with its `provider_key` and
    /// `payload`, then [`Store::report_effect`]. An item whose earlier outcome is unknown and
    /// whose provider window has passed is not returned: it goes to the reconciliation queue.
    ///
    /// ```
    /// use idemdb::{EffectName, EffectReport, Fingerprint, IdempotencyKey, OutboxStateKind, Reservation, Reserve, Scope, Store};
    ///
    /// let store = Store::in_memory()?;
    /// let (scope, key) = (Scope::new("acme", "pay")?, IdempotencyKey::new("order-842")?);
    /// let Reservation::Acquired(lease) = store.reserve(Reserve::new(&scope, &key, &Fingerprint::from_bytes([1; 32])))? else { panic!() };
    /// // In the reserving transaction (or the one that writes the business row):
    /// store.enqueue_effect(&lease, &EffectName::new("authorize")?, 1, b"{\"amount\":\"10.50\"}".to_vec())?;
    ///
    /// // The dispatcher:
    /// for claim in store.claim_effects(16)? {
    ///     assert_eq!(claim.provider_key.as_str(), "order-842:authorize-v1");
    ///     // ... call the provider with claim.provider_key ...
    ///     let report = EffectReport::Confirmed { reference: "auth_1".into(), result: b"{\"authorized\":true}".to_vec() };
    ///     store.report_effect(&claim, report)?;
    /// }
    /// // The intent's record completed with the result.
    /// assert!(matches!(store.reserve(Reserve::new(&scope, &key, &Fingerprint::from_bytes([1; 32])))?, Reservation::Replay { .. }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// Storage errors; [`Error::Corrupt`] for an undecodable item (nothing is claimed).
    pub fn claim_effects(&self, limit: usize) -> Result<Vec<OutboxItem>, Error> {
        self.write(|txn| {
            let now = txn.now();
            let upper = expiry_key(Timestamp::from_millis(now.as_millis().saturating_add(1)), &[]);
            let due: Vec<Vec<u8>> = {
                let index = txn.tx_closing_kept_tables().open_table(OUTBOX_DUE)?;
                let mut keys = Vec::new();
                for entry in index.range(..upper.as_slice())? {
                    keys.push(entry?.0.value().to_vec());
                    if keys.len() >= limit.saturating_mul(2).max(limit.saturating_add(16)) {
                        break;
                    }
                }
                keys
            };
            let mut claimed = Vec::new();
            for entry in due {
                if claimed.len() >= limit {
                    break;
                }
                let Some((_, storage_key)) = split_expiry_key(&entry) else { continue };
                let Some(item) = txn.load_effect(storage_key)? else {
                    txn.remove_logged(TableId::OutboxDue, &entry)?;
                    continue;
                };
                let policy = txn.engine().policy(item.scope.operation()).clone();
                match item.claim(now, &policy) {
                    Claim::Claimed(next) => {
                        txn.put_effect(Some(&item), &next)?;
                        txn.follow_effect(&next, None)?;
                        txn.effect_event(AuditKind::EffectClaimed, &next, None);
                        claimed.push(next);
                    }
                    Claim::ToReconcile(next) => {
                        txn.put_effect(Some(&item), &next)?;
                        txn.follow_effect(&next, None)?;
                        txn.effect_event(AuditKind::EffectReported, &next, None);
                    }
                    // Not due (a live claim), or finished: nothing to dispatch.
                    _ => {}
                }
            }
            Ok::<_, Error>(claimed)
        })
    }

    /// Reports what the provider answered for a claimed item; the intent's record follows:
    /// confirmed → completed with the report's result, failed → failed definitively, unknown
    /// → uncertain (reconciliation queue), retryable → dispatched again after a backoff.
    ///
    /// # Errors
    /// [`OutboxRefusal::StaleClaim`] when another dispatcher claimed the item since;
    /// [`OutboxRefusal::WrongState`]; storage errors.
    pub fn report_effect(&self, claim: &OutboxItem, report: EffectReport) -> Result<OutboxItem, Error> {
        let claim = claim.clone();
        self.group.run(&self.engine, move |txn| txn.report_effect(&claim, report))
    }

    /// Sends an uncertain item again with the same provider key, inside the provider's
    /// key-retention window (the provider answers a repeat with the first effect's result).
    ///
    /// # Errors
    /// [`OutboxRefusal::ProviderKeyExpired`] past the window (query the provider and
    /// [`Store::resolve_effect`]); [`OutboxRefusal::NotFound`], [`OutboxRefusal::WrongState`].
    pub fn retry_effect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
        cause: ResolutionCause,
    ) -> Result<OutboxItem, Error> {
        let storage_key = OutboxItem::key_of(scope, key, effect);
        let policy = self.policy(scope.operation()).clone();
        self.group.run(&self.engine, move |txn| {
            let kind = (AuditKind::EffectResolved, Some(cause));
            txn.change_effect(&storage_key, kind, None, |item, now| item.retry(now, &policy))
        })
    }

    /// Records what the provider says about an uncertain item (query first, then resolve):
    /// confirmed or failed finishes the item and the intent's record; not found sends it
    /// again, in a new provider window.
    ///
    /// # Errors
    /// [`OutboxRefusal::NotFound`], [`OutboxRefusal::WrongState`] when the item is not
    /// uncertain, [`OutboxRefusal::InvalidReference`]; storage errors.
    pub fn resolve_effect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
        state: ProviderState,
        cause: ResolutionCause,
    ) -> Result<OutboxItem, Error> {
        let (scope, key, effect) = (scope.clone(), key.clone(), effect.clone());
        self.group.run(&self.engine, move |txn| txn.resolve_effect(&scope, &key, &effect, state, cause))
    }

    /// The outbox item of `effect` for `(scope, key)`.
    ///
    /// # Errors
    /// Storage errors; [`Error::Corrupt`].
    pub fn effect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        effect: &EffectName,
    ) -> Result<Option<OutboxItem>, Error> {
        let storage_key = OutboxItem::key_of(scope, key, effect);
        let read = self.engine.db.begin_read()?;
        let Some(table) = open_optional(&read, OUTBOX)? else { return Ok(None) };
        let Some(value) = table.get(storage_key.as_slice())? else { return Ok(None) };
        OutboxItem::decode(&storage_key, value.value())
            .map(Some)
            .map_err(|source| Error::Corrupt(Corrupt { what: "outbox item", source }))
    }

    /// Outbox items in key order, filtered.
    ///
    /// # Errors
    /// Storage errors; [`Error::Corrupt`].
    pub fn effects(&self, filter: &EffectFilter) -> Result<Vec<OutboxItem>, Error> {
        let read = self.engine.db.begin_read()?;
        let Some(table) = open_optional(&read, OUTBOX)? else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (key, value) = entry?;
            let item = OutboxItem::decode(key.value(), value.value()).map_err(Corrupt::of("outbox item"))?;
            let state_ok = filter.state.is_none_or(|state| item.state.kind() == state);
            let tenant_ok = filter.tenant.as_deref().is_none_or(|tenant| item.scope.tenant() == tenant);
            if state_ok && tenant_ok {
                out.push(item);
                if filter.limit != 0 && out.len() >= filter.limit {
                    break;
                }
            }
        }
        Ok(out)
    }
}

/// The operation of an outbox key (its policy applies).
fn claim_operation(storage_key: &[u8]) -> Result<String, Error> {
    let (scoped, _) = ScopedKey::decode_prefix(storage_key)?;
    Ok(scoped.scope.operation().to_string())
}
