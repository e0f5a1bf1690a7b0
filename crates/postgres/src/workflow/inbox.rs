//! The webhook inbox on PostgreSQL: deliveries in `idemdb_deliveries`, the objects they
//! describe in `idemdb_objects`, both written in the transaction that accepts a delivery —
//! with the application's own statements when it accepts through [`PgTxn::accept_delivery`].

use deadpool_postgres::tokio_postgres::types::ToSql;

use idemdb_core::{
    AuditKind, Corrupt, Delivery, DeliveryRecord, DomainGuard, InboxAnswer, ObjectRecord, accept, delivery_policy_name,
};

use super::{LOCK_DELIVERY, LOCK_OBJECT};
use crate::audit::to_sql_ms;
use crate::error::Error;
use crate::store::PgStore;
use crate::txn::PgTxn;

impl PgStore {
    /// At most `limit` accepted deliveries (0: all), by source, then delivery id — what an
    /// operator lists (one lock-free read).
    ///
    /// # Errors
    /// [`Error::Unavailable`] and database errors; [`Error::Corrupt`].
    pub async fn deliveries(&self, limit: usize) -> Result<Vec<idemdb_interface::ListedDelivery>, Error> {
        let limit = (limit != 0).then(|| i64::try_from(limit).unwrap_or(i64::MAX));
        let rows = self.read_all(|sql| &sql.wf.delivery_list, &[&limit]).await?;
        let mut listed = Vec::with_capacity(rows.len());
        for row in &rows {
            let source: String = row.try_get(0).map_err(Error::from_driver)?;
            let delivery_id: String = row.try_get(1).map_err(Error::from_driver)?;
            let bytes: Vec<u8> = row.try_get(2).map_err(Error::from_driver)?;
            let record = DeliveryRecord::decode(&bytes).map_err(Corrupt::of("delivery"))?;
            listed.push(idemdb_interface::ListedDelivery { source, delivery_id, record });
        }
        Ok(listed)
    }
}

impl PgTxn {
    /// Accepts a webhook delivery in this transaction: a redelivery gets the earlier outcome
    /// and changes nothing; otherwise the delivery is recorded and the object it describes is
    /// updated only when `guard` admits the update. Returns the answer and, when the update
    /// was applied, the object as written — run the application's own statements for it on
    /// [`PgTxn::client`] before committing, so they commit with the delivery (or not at all).
    ///
    /// Concurrent deliveries of one delivery id, or of one object, wait for each other
    /// (transaction-scoped advisory locks), so the guard always decides on the latest object.
    ///
    /// # Errors
    /// [`InboxRefusal::DeliveryMismatch`](idemdb_core::InboxRefusal::DeliveryMismatch) (as
    /// [`Refusal::Inbox`](idemdb_core::Refusal::Inbox)) when the delivery id was seen with another payload; database errors;
    /// [`Error::Corrupt`].
    pub async fn accept_delivery(
        &mut self,
        delivery: &Delivery,
        guard: &impl DomainGuard,
    ) -> Result<(InboxAnswer, Option<ObjectRecord>), Error> {
        let (source, id, object_id) =
            (delivery.source.as_str(), delivery.delivery_id.as_str(), delivery.object_id.as_str());
        self.advisory_lock(LOCK_DELIVERY, &[source, id]).await?;
        self.advisory_lock(LOCK_OBJECT, &[source, object_id]).await?;
        let now = self.time().await?;
        let inner = self.inner_arc();
        let wf = &inner.sql.wf;
        let existing = {
            let params: [&(dyn ToSql + Sync); 2] = [&source, &id];
            match self.query(&wf.delivery_get, &params).await?.first() {
                Some(row) => Some(
                    DeliveryRecord::decode(&row.try_get::<_, Vec<u8>>(0).map_err(Error::from_driver)?)
                        .map_err(Corrupt::of("delivery"))?,
                ),
                None => None,
            }
        };
        let object = {
            let params: [&(dyn ToSql + Sync); 2] = [&source, &object_id];
            match self.query(&wf.object_get, &params).await?.first() {
                Some(row) => Some(
                    ObjectRecord::decode(&row.try_get::<_, Vec<u8>>(0).map_err(Error::from_driver)?)
                        .map_err(Corrupt::of("object"))?,
                ),
                None => None,
            }
        };
        let decision = accept(existing, object.as_ref(), delivery, guard, now)?;
        if let Some(record) = &decision.delivery {
            let policy = inner.policy(&delivery_policy_name(source));
            let forget_at = record.forget_at(policy);
            let (outcome, received_at, forget_at) = (
                record.outcome.kind().as_str(),
                to_sql_ms(record.received_at.as_millis()),
                to_sql_ms(forget_at.as_millis()),
            );
            let bytes = record.encode();
            let params: [&(dyn ToSql + Sync); 6] = [&source, &id, &outcome, &received_at, &forget_at, &bytes];
            self.execute(&wf.delivery_insert, &params).await?;
        }
        if let Some(object) = &decision.object {
            let version = i64::try_from(object.version).unwrap_or(i64::MAX);
            let (state, bytes) = (object.state.as_str(), object.encode());
            let params: [&(dyn ToSql + Sync); 5] = [&source, &object_id, &version, &state, &bytes];
            self.execute(&wf.object_upsert, &params).await?;
        }
        if let Some((scope, key)) = delivery.audit_identity() {
            let row = inner.event(
                now,
                AuditKind::DeliveryAccepted,
                &scope,
                &key,
                delivery.version,
                Some(&delivery.fingerprint),
                None,
            );
            self.push_event(row);
        }
        Ok((decision.answer, decision.object))
    }
}

impl PgStore {
    /// Accepts a webhook delivery under `guard`, in a transaction of its own (see
    /// [`PgTxn::accept_delivery`], which also runs the application's statements in it).
    ///
    /// # Errors
    /// As [`PgTxn::accept_delivery`].
    pub async fn accept_delivery(&self, delivery: &Delivery, guard: &impl DomainGuard) -> Result<InboxAnswer, Error> {
        self.in_txn(|mut txn| async move {
            let outcome = txn.accept_delivery(delivery, guard).await.map(|(answer, _)| answer);
            (txn, outcome)
        })
        .await
    }

    /// The object `object_id` of `source`, as the applied deliveries left it.
    ///
    /// # Errors
    /// [`Error::Unavailable`] and database errors; [`Error::Corrupt`].
    pub async fn object(&self, source: &str, object_id: &str) -> Result<Option<ObjectRecord>, Error> {
        let params: [&(dyn ToSql + Sync); 2] = [&source, &object_id];
        let Some(row) = self.read_one(|sql| &sql.wf.object_get, &params).await? else { return Ok(None) };
        let value: Vec<u8> = row.try_get(0).map_err(Error::from_driver)?;
        ObjectRecord::decode(&value).map(Some).map_err(|source| Error::Corrupt(Corrupt { what: "object", source }))
    }

    /// The record of delivery `delivery_id` of `source`.
    ///
    /// # Errors
    /// [`Error::Unavailable`] and database errors; [`Error::Corrupt`].
    pub async fn delivery(&self, source: &str, delivery_id: &str) -> Result<Option<DeliveryRecord>, Error> {
        let params: [&(dyn ToSql + Sync); 2] = [&source, &delivery_id];
        let Some(row) = self.read_one(|sql| &sql.wf.delivery_get, &params).await? else { return Ok(None) };
        let value: Vec<u8> = row.try_get(0).map_err(Error::from_driver)?;
        DeliveryRecord::decode(&value).map(Some).map_err(|source| Error::Corrupt(Corrupt { what: "delivery", source }))
    }
}
