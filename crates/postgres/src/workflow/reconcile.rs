//! The reconciliation queue on PostgreSQL — uncertain records (a partial index on
//! `idemdb_records`) and uncertain outbox items (`reconcile_since`, indexed), oldest first —
//! and the link an application records when it starts a new intent in place of a refused one.

use std::collections::HashSet;

use idemdb_core::{Attention, AuditKind, Corrupt, IdempotencyKey, Refusal, Scope, ScopedKey, Timestamp, decode_record};

use super::outbox::{decode_item, item_identity};
use crate::error::Error;
use crate::store::PgStore;

impl PgStore {
    /// The reconciliation queue, oldest first (at most `limit` entries; 0: all): records whose
    /// outcome is uncertain and outbox effects whose outcome is unknown. A record that is
    /// uncertain because its effect is, is listed once, as the effect. Both reads go through
    /// partial indexes, so the cost follows the queue's length, not the tables'.
    ///
    /// # Errors
    /// [`Error::Unavailable`] and database errors; [`Error::Corrupt`].
    pub async fn reconciliation_queue(&self, limit: usize) -> Result<Vec<Attention>, Error> {
        let (effects, records) = self.read_queue().await?;
        let mut entries: Vec<(Timestamp, Vec<u8>, Attention)> = Vec::new();
        let mut with_effect = HashSet::new();
        for row in &effects {
            let (scope, key, effect) = item_identity(row)?;
            let value: Vec<u8> = row.try_get(4).map_err(Error::from_driver)?;
            let item = decode_item(&scope, &key, &effect, &value)?;
            let since: i64 = row.try_get(5).map_err(Error::from_driver)?;
            let since = Timestamp::from_millis(u64::try_from(since).unwrap_or(0));
            with_effect.insert(ScopedKey::encode_parts(&scope, &key));
            entries.push((since, item.storage_key(), Attention::Effect { item, since }));
        }
        for row in &records {
            let corrupt = |reason: String| {
                Error::Corrupt(Corrupt { what: "record", source: idemdb_core::DecodeError::Malformed { reason } })
            };
            let tenant: String = row.try_get(0).map_err(Error::from_driver)?;
            let operation: String = row.try_get(1).map_err(Error::from_driver)?;
            let key: String = row.try_get(2).map_err(Error::from_driver)?;
            let scope = Scope::new(tenant, operation).map_err(|e| corrupt(e.to_string()))?;
            let key = IdempotencyKey::new(key).map_err(|e| corrupt(e.to_string()))?;
            let encoded = ScopedKey::encode_parts(&scope, &key);
            if with_effect.contains(&encoded) {
                continue;
            }
            let bytes: Vec<u8> = row.try_get(3).map_err(Error::from_driver)?;
            let record = decode_record(&bytes).map_err(Corrupt::of("record"))?;
            let since = record.updated_at;
            entries.push((since, encoded, Attention::Record { scoped: ScopedKey::new(scope, key), record, since }));
        }
        entries.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        if limit != 0 {
            entries.truncate(limit);
        }
        Ok(entries.into_iter().map(|(_, _, attention)| attention).collect())
    }

    /// Outbox items in key order, in `state` only when given, at most `limit` (0: all): an
    /// operator's listing (the admin API's `GET /effects`).
    ///
    /// # Errors
    /// [`Error::Unavailable`] and database errors; [`Error::Corrupt`].
    pub async fn effects(
        &self,
        state: Option<idemdb_core::OutboxStateKind>,
        limit: usize,
    ) -> Result<Vec<idemdb_core::OutboxItem>, Error> {
        let state = state.map(|state| state.as_str());
        let limit = (limit != 0).then(|| i64::try_from(limit).unwrap_or(i64::MAX));
        let rows = self.read_all(|sql| &sql.wf.outbox_list, &[&state, &limit]).await?;
        let mut items = Vec::with_capacity(rows.len());
        for row in &rows {
            let (scope, key, effect) = item_identity(row)?;
            let value: Vec<u8> = row.try_get(4).map_err(Error::from_driver)?;
            items.push(decode_item(&scope, &key, &effect, &value)?);
        }
        Ok(items)
    }

    async fn read_queue(
        &self,
    ) -> Result<(Vec<deadpool_postgres::tokio_postgres::Row>, Vec<deadpool_postgres::tokio_postgres::Row>), Error> {
        let effects = self.read_all(|sql| &sql.wf.outbox_uncertain, &[]).await?;
        let records = self.read_all(|sql| &sql.wf.records_uncertain, &[]).await?;
        Ok((effects, records))
    }

    /// Records that a deliberate new attempt (after a refusal, or with a changed amount) is a
    /// new intent under `new_key`, replacing the intent of `old_key`: an audit event
    /// `superseded` on the new key whose correlation names the old key's hash.
    ///
    /// # Errors
    /// [`Refusal::NotFound`](idemdb_core::Refusal::NotFound) when no record exists for the old key; database errors.
    pub async fn supersede(
        &self,
        scope: &Scope,
        old_key: &IdempotencyKey,
        new_key: &IdempotencyKey,
    ) -> Result<(), Error> {
        let link = format!("supersedes:{}", self.key_hash(scope, old_key));
        let link = &link;
        self.in_txn(|mut txn| async move {
            let outcome = async {
                let (record, _, now) = txn.lock_record(scope, old_key).await?;
                let record = record.ok_or(Refusal::NotFound)?;
                let row =
                    txn.inner_arc().event(now, AuditKind::Superseded, scope, new_key, record.fence, None, Some(link));
                txn.push_event(row);
                Ok(())
            }
            .await;
            (txn, outcome)
        })
        .await
    }
}
