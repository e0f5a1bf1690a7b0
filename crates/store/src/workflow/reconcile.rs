//! The reconciliation queue: what waits for a person or a provider query — records whose
//! outcome is uncertain, and outbox effects whose outcome is unknown — oldest first; and the
//! link an application records when it starts a new intent in place of a refused one.

use redb::ReadableTable;

use idemdb_core::{Attention, AuditKind, Corrupt, IdempotencyKey, OutboxItem, Refusal, Scope, ScopedKey, Timestamp};

use crate::tables::{OUTBOX, RECONCILE, RECONCILE_EFFECT, RECONCILE_RECORD, open_optional};
use crate::{Error, Store};

impl Store {
    /// The reconciliation queue, oldest first (at most `limit` entries; 0: all).
    ///
    /// ```
    /// use idemdb::{Attention, Failure, Fingerprint, IdempotencyKey, Reservation, Reserve, Resolution, ResolutionCause, Scope, Store};
    /// let store = Store::in_memory()?;
    /// let (scope, key) = (Scope::new("acme", "pay")?, IdempotencyKey::new("k-1")?);
    /// let Reservation::Acquired(lease) = store.reserve(Reserve::new(&scope, &key, &Fingerprint::from_bytes([1; 32])))? else { panic!() };
    /// store.fail(&lease, Failure::Uncertain)?; // a timeout after sending
    /// let queue = store.reconciliation_queue(0)?;
    /// assert!(matches!(&queue[..], [Attention::Record { .. }]));
    /// store.reconcile(&scope, &key, Resolution::Completed(b"found it".to_vec()), ResolutionCause::Operator)?;
    /// assert!(store.reconciliation_queue(0)?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// Storage errors; [`Error::Corrupt`].
    pub fn reconciliation_queue(&self, limit: usize) -> Result<Vec<Attention>, Error> {
        let read = self.engine.db.begin_read()?;
        let Some(queue) = open_optional(&read, RECONCILE)? else { return Ok(Vec::new()) };
        let mut entries = Vec::new();
        for entry in queue.iter()? {
            let (key, since) = entry?;
            let since = since.value().try_into().map(u64::from_be_bytes).unwrap_or(0);
            entries.push((key.value().to_vec(), Timestamp::from_millis(since)));
        }
        entries.sort_by_key(|(key, since)| (*since, key.clone()));
        // A record that is uncertain because its outbox effect is: resolving the effect
        // resolves it, so it is listed once, as the effect.
        let mut with_effect = std::collections::HashSet::new();
        for (key, _) in &entries {
            if let Some((&RECONCILE_EFFECT, item_key)) = key.split_first()
                && let Ok((scoped, _)) = ScopedKey::decode_prefix(item_key)
            {
                with_effect.insert(scoped.encode());
            }
        }
        let mut out = Vec::new();
        for (key, since) in entries {
            if limit != 0 && out.len() >= limit {
                break;
            }
            let Some((&kind, stored_key)) = key.split_first() else { continue };
            match kind {
                RECONCILE_RECORD if with_effect.contains(stored_key) => {}
                RECONCILE_RECORD => {
                    let scoped = ScopedKey::decode(stored_key)?;
                    if let Some(record) = self.engine.get_encoded(stored_key)? {
                        out.push(Attention::Record { scoped, record, since });
                    }
                }
                RECONCILE_EFFECT => {
                    let table = read.open_table(OUTBOX)?;
                    if let Some(value) = table.get(stored_key)? {
                        let item = OutboxItem::decode(stored_key, value.value()).map_err(Corrupt::of("outbox item"))?;
                        out.push(Attention::Effect { item, since });
                    }
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// Records that a deliberate new attempt (after a refusal, or with a changed amount) is a
    /// new intent under `new_key`, replacing the intent of `old_key`: an audit event
    /// `superseded` on the new key whose correlation names the old key's hash.
    ///
    /// # Errors
    /// [`Refusal::NotFound`](idemdb_core::Refusal::NotFound) when no record exists for the old key; storage errors.
    pub fn supersede(&self, scope: &Scope, old_key: &IdempotencyKey, new_key: &IdempotencyKey) -> Result<(), Error> {
        let old = ScopedKey::encode_parts(scope, old_key);
        let new = ScopedKey::encode_parts(scope, new_key);
        let link = format!("supersedes:{}", self.engine.key_hash_of(&old));
        self.write(|txn| {
            let record = txn.load(&old)?.ok_or(Refusal::NotFound)?;
            txn.event(AuditKind::Superseded, scope, &new, record.fence, None, Some(&link));
            Ok::<(), Error>(())
        })
    }
}
