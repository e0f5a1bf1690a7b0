//! The webhook inbox in the redb store: deliveries in `idemdb_deliveries`, the objects they
//! describe in `idemdb_objects`, both written in the transaction that accepts a delivery,
//! together with the application's own effect when the update is applied.

use redb::{ReadableTable, WriteTransaction};

use idemdb_core::{
    AuditKind, Corrupt, Delivery, DeliveryRecord, DomainGuard, InboxAnswer, ObjectRecord, ScopedKey, accept,
    delivery_policy_name,
};

use crate::journal::apply::TableId;
use crate::tables::{DELIVERIES, EXPIRY_DELIVERY, OBJECTS, marked_expiry_key, open_optional};
use crate::txn::{Begun, Txn};
use crate::{Error, ExecuteError, Store};

impl Txn<'_> {
    /// Accepts a delivery in this transaction (see [`Store::accept_delivery_with`]); returns the
    /// answer and, when the update was applied, the object as written.
    ///
    /// # Errors
    /// [`InboxRefusal::DeliveryMismatch`](idemdb_core::InboxRefusal::DeliveryMismatch) when the
    /// delivery id was seen with another payload; storage errors.
    pub fn accept_delivery(
        &mut self,
        delivery: &Delivery,
        guard: &impl DomainGuard,
    ) -> Result<(InboxAnswer, Option<ObjectRecord>), Error> {
        let (delivery_key, object_key) = (delivery.delivery_key(), delivery.object_key());
        let existing = match self.tx_closing_kept_tables().open_table(DELIVERIES)?.get(delivery_key.as_slice())? {
            Some(value) => Some(DeliveryRecord::decode(value.value()).map_err(Corrupt::of("delivery"))?),
            None => None,
        };
        let object = match self.tx_closing_kept_tables().open_table(OBJECTS)?.get(object_key.as_slice())? {
            Some(value) => Some(ObjectRecord::decode(value.value()).map_err(Corrupt::of("object"))?),
            None => None,
        };
        let decision = accept(existing, object.as_ref(), delivery, guard, self.now())?;
        if let Some(record) = &decision.delivery {
            self.put_logged(TableId::Deliveries, &delivery_key, &record.encode())?;
            let policy = self.engine().policy(&delivery_policy_name(&delivery.source)).clone();
            let entry = marked_expiry_key(record.forget_at(&policy), EXPIRY_DELIVERY, &delivery_key);
            self.put_logged(TableId::Expiry, &entry, &[])?;
        }
        if let Some(object) = &decision.object {
            self.put_logged(TableId::Objects, &object_key, &object.encode())?;
        }
        if let Some((scope, key)) = delivery.audit_identity() {
            let encoded = ScopedKey::encode_parts(&scope, &key);
            self.event(
                AuditKind::DeliveryAccepted,
                &scope,
                &encoded,
                delivery.version,
                Some(&delivery.fingerprint),
                None,
            );
        }
        Ok((decision.answer, decision.object))
    }
}

impl Store {
    /// Accepts a webhook delivery: a redelivery gets the earlier outcome and changes nothing;
    /// otherwise the delivery is recorded, and the object it describes is updated only when
    /// `guard` admits the update — all in one transaction.
    ///
    /// ```
    /// use idemdb::{Delivery, Fingerprint, InboxAnswer, NewerVersion, Store};
    /// let store = Store::in_memory()?;
    /// let newer = Delivery::new("stripe", "evt_2", "sub_1", 2, "active", Fingerprint::from_bytes([2; 32]), vec![])?;
    /// let older = Delivery::new("stripe", "evt_1", "sub_1", 1, "trialing", Fingerprint::from_bytes([1; 32]), vec![])?;
    /// assert_eq!(store.accept_delivery(&newer, &NewerVersion)?, InboxAnswer::Applied);
    /// assert_eq!(store.accept_delivery(&older, &NewerVersion)?, InboxAnswer::Stale { current_version: 2 });
    /// assert!(matches!(store.accept_delivery(&newer, &NewerVersion)?, InboxAnswer::Duplicate { .. }));
    /// assert_eq!(store.object("stripe", "sub_1")?.map(|o| o.state), Some("active".to_string()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`Txn::accept_delivery`].
    pub fn accept_delivery(&self, delivery: &Delivery, guard: &impl DomainGuard) -> Result<InboxAnswer, Error> {
        self.write(|txn| txn.accept_delivery(delivery, guard).map(|(answer, _)| answer))
    }

    /// [`Store::accept_delivery`], running the application's own effect (`apply`, given the
    /// object as updated) in the same transaction when — and only when — the update is
    /// applied. If `apply` fails, nothing is stored (not even the delivery), so a redelivery
    /// tries again.
    ///
    /// # Errors
    /// [`ExecuteError::Operation`] with `apply`'s error; [`ExecuteError::Store`].
    pub fn accept_delivery_with<E>(
        &self,
        delivery: &Delivery,
        guard: &impl DomainGuard,
        apply: impl FnOnce(&WriteTransaction, &ObjectRecord) -> Result<(), E>,
    ) -> Result<InboxAnswer, ExecuteError<E>> {
        let begun = Begun::new(&self.engine)?;
        let mut txn = begun.txn();
        let (answer, object) = txn.accept_delivery(delivery, guard)?;
        if let Some(object) = &object {
            apply(txn.tables_checkpointing(), object).map_err(ExecuteError::Operation)?;
        }
        let finished = txn.finish()?;
        begun.commit(finished)?;
        Ok(answer)
    }

    /// The object `object_id` of `source`, as the applied deliveries left it.
    ///
    /// # Errors
    /// Storage errors; [`Error::Corrupt`].
    pub fn object(&self, source: &str, object_id: &str) -> Result<Option<ObjectRecord>, Error> {
        let key = Delivery::object_key_of(source, object_id)?;
        self.read_value(OBJECTS, &key, "object", ObjectRecord::decode)
    }

    /// The record of delivery `delivery_id` of `source`.
    ///
    /// # Errors
    /// Storage errors; [`Error::Corrupt`].
    pub fn delivery(&self, source: &str, delivery_id: &str) -> Result<Option<DeliveryRecord>, Error> {
        let key = Delivery::delivery_key_of(source, delivery_id)?;
        self.read_value(DELIVERIES, &key, "delivery", DeliveryRecord::decode)
    }

    /// Recorded deliveries in key order (source, delivery id), at most `limit` (0: all).
    ///
    /// # Errors
    /// Storage errors; [`Error::Corrupt`].
    pub fn deliveries(&self, limit: usize) -> Result<Vec<(String, String, DeliveryRecord)>, Error> {
        let read = self.engine.db.begin_read()?;
        let Some(table) = open_optional(&read, DELIVERIES)? else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (key, value) = entry?;
            let corrupt = |reason: &str| {
                Error::Corrupt(Corrupt {
                    what: "delivery",
                    source: idemdb_core::DecodeError::Malformed { reason: reason.to_string() },
                })
            };
            let (source, id) = DeliveryRecord::split_key(key.value()).ok_or_else(|| corrupt("key"))?;
            let record = DeliveryRecord::decode(value.value()).map_err(Corrupt::of("delivery"))?;
            out.push((source.to_string(), id.to_string(), record));
            if limit != 0 && out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// Reads one value of a workflow table.
    pub(crate) fn read_value<T>(
        &self,
        table: redb::TableDefinition<&[u8], &[u8]>,
        key: &[u8],
        what: &'static str,
        decode: impl FnOnce(&[u8]) -> Result<T, idemdb_core::DecodeError>,
    ) -> Result<Option<T>, Error> {
        let read = self.engine.db.begin_read()?;
        let Some(table) = open_optional(&read, table)? else { return Ok(None) };
        let Some(value) = table.get(key)? else { return Ok(None) };
        decode(value.value()).map(Some).map_err(|source| Error::Corrupt(Corrupt { what, source }))
    }
}
