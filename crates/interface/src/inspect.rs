//! What an operator reads besides the reconciliation queue: the outbox, the inbox and one
//! key's audit history. Every method has a default that says "this backend does not list
//! these" (`Ok(None)`), so a backend implements what it can; the admin API answers `501` for
//! the rest.

use std::future::Future;

use idemdb_core::{AuditEvent, DeliveryRecord, IdempotencyKey, OutboxItem, OutboxStateKind, Scope};

use crate::WorkflowStore;

/// One accepted webhook delivery, as listed: its source, its id and its record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedDelivery {
    /// Who sent it.
    pub source: String,
    /// The sender's delivery id.
    pub delivery_id: String,
    /// What its acceptance recorded.
    pub record: DeliveryRecord,
}

/// The listings of a backend for operators.
pub trait InspectStore: WorkflowStore {
    /// Outbox items in key order, in `state` only when given, at most `limit` (0: all);
    /// `None` when the backend does not list its outbox.
    fn list_effects(
        &self,
        state: Option<OutboxStateKind>,
        limit: usize,
    ) -> impl Future<Output = Result<Option<Vec<OutboxItem>>, Self::Error>> + Send {
        let _ = (state, limit);
        std::future::ready(Ok(None))
    }

    /// At most `limit` inbox deliveries (0: all), in the backend's order (redb: source, then
    /// delivery id); `None` when the backend does not list its inbox.
    fn list_deliveries(
        &self,
        limit: usize,
    ) -> impl Future<Output = Result<Option<Vec<ListedDelivery>>, Self::Error>> + Send {
        let _ = limit;
        std::future::ready(Ok(None))
    }

    /// The audit events of `(scope, key)` among the newest `window` events of the trail,
    /// oldest first; `None` when the backend does not read its audit trail back.
    fn key_history(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        window: usize,
    ) -> impl Future<Output = Result<Option<Vec<AuditEvent>>, Self::Error>> + Send {
        let _ = (scope, key, window);
        std::future::ready(Ok(None))
    }
}
