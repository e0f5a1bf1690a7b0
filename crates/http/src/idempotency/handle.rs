//! The handler's access to its lease: [`LeaseHandle`], in the request extensions.

use crate::metrics::{self, Settlement};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use idemdb_core::{Coded, ErrorCode, Failure, IdempotencyKey, KeyHash, Lease, Scope, StateKind};
use idemdb_interface::IdempotencyStore;

use super::error::HandleError;
use super::settled::Settled;
use crate::response::StoredResponse;

/// The lease of the request being handled, as the layer inserts it into the request
/// extensions (axum: `Extension<LeaseHandle<S>>`). Only requests that acquired a reservation
/// carry one; clones share the same lease.
///
/// Through it a handler can
/// * [renew](LeaseHandle::renew) the lease during a long operation;
/// * [mark the outcome uncertain](LeaseHandle::mark_uncertain) when an external effect may
///   have happened without confirmation (a provider call timed out): retries are then refused
///   until the record is reconciled;
/// * [release](LeaseHandle::release) the key when it failed before any effect (its own input
///   validation): a retry of the same request runs the handler again;
/// * **complete the record inside its own transaction**, its business rows and the completion
///   in one commit: it encodes its response with [`LeaseHandle::stored_response`], completes
///   the [lease](LeaseHandle::lease) with those bytes in its transaction, then calls
///   [`LeaseHandle::completed_by_handler`] and returns the same response. The layer then does
///   not complete again.
///
/// The first of these settlements wins; a later one fails with an error whose
/// [`is_settled`](HandleError::is_settled) is true.
pub struct LeaseHandle<S> {
    inner: Arc<Inner<S>>,
}

struct Inner<S> {
    store: S,
    lease: Mutex<Lease>,
    settled: Mutex<Option<Settled>>,
    key_hash: KeyHash,
    replay_headers: Arc<[String]>,
}

impl<S> Clone for LeaseHandle<S> {
    fn clone(&self) -> Self {
        LeaseHandle { inner: Arc::clone(&self.inner) }
    }
}

impl<S> std::fmt::Debug for LeaseHandle<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseHandle")
            .field("key_hash", &self.inner.key_hash)
            .field("settled", &self.settled())
            .finish_non_exhaustive()
    }
}

impl<S: IdempotencyStore> LeaseHandle<S> {
    pub(crate) fn new(store: S, lease: Lease, key_hash: KeyHash, replay_headers: Arc<[String]>) -> Self {
        let inner = Inner { store, lease: Mutex::new(lease), settled: Mutex::new(None), key_hash, replay_headers };
        LeaseHandle { inner: Arc::new(inner) }
    }

    /// The current lease (renewals update it).
    pub fn lease(&self) -> Lease {
        self.inner.lease.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The scope: the tenant and the operation.
    pub fn scope(&self) -> Scope {
        self.lease().scope().clone()
    }

    /// The idempotency key (for deriving keys of downstream calls, such as a payment
    /// provider's `<key>:charge-v1`; never log it: log [`LeaseHandle::key_hash`]).
    pub fn key(&self) -> IdempotencyKey {
        self.lease().key().clone()
    }

    /// The keyed hash of the scope and key, safe to log.
    pub fn key_hash(&self) -> KeyHash {
        self.inner.key_hash
    }

    /// Extends the lease by the operation's lease TTL and returns the renewed lease.
    ///
    /// # Errors
    /// The store's error (a stale lease, a record no longer in progress), or a settled
    /// handle.
    pub async fn renew(&self) -> Result<Lease, HandleError> {
        if let Some(settled) = self.settled() {
            return Err(HandleError::settled(settled));
        }
        let renewed = self.inner.store.renew(&self.lease()).await.map_err(HandleError::store)?;
        *self.inner.lease.lock().unwrap_or_else(PoisonError::into_inner) = renewed.clone();
        Ok(renewed)
    }

    /// Records that the outcome is uncertain (an external effect may have happened), now.
    /// Retries get 409 with the problem type `needs-reconciliation` until the record is
    /// reconciled; the layer stores no response.
    ///
    /// A record that is uncertain already, under this lease's attempt, is not an error: the
    /// outbox's report of an effect whose answer was lost makes the record uncertain in its
    /// own commit, before the handler hears of it. It counts as one uncertain settlement.
    ///
    /// # Errors
    /// The store's error, or a settled handle. If the store failed, the layer still stores
    /// nothing: the record stays in progress and becomes uncertain when its lease expires.
    pub async fn mark_uncertain(&self) -> Result<(), HandleError> {
        self.claim(Settled::Uncertain)?;
        let lease = self.lease();
        let marked = metrics::timed_only("fail", self.inner.store.fail(&lease, Failure::Uncertain)).await;
        if let Err(error) = marked
            && !(error.code() == ErrorCode::WrongState && self.uncertain_already(&lease).await)
        {
            metrics::store_error("fail", error.code());
            return Err(HandleError::store(error));
        }
        metrics::settled(lease.scope().operation(), Settlement::Uncertain);
        Ok(())
    }

    /// Whether the record is uncertain under `lease`'s attempt (its fence).
    async fn uncertain_already(&self, lease: &Lease) -> bool {
        let record = self.inner.store.get(lease.scope(), lease.key()).await;
        matches!(record, Ok(Some(record)) if record.fence == lease.fence() && record.state.kind() == StateKind::Uncertain)
    }

    /// Releases the key: the request failed before any effect, and a retry of the same
    /// request may run the handler again. The layer stores no response.
    ///
    /// # Errors
    /// The store's error, or a settled handle.
    pub async fn release(&self) -> Result<(), HandleError> {
        self.claim(Settled::Released)?;
        let lease = self.lease();
        metrics::timed("fail", self.inner.store.fail(&lease, Failure::Retryable)).await.map_err(HandleError::store)?;
        metrics::settled(lease.scope().operation(), Settlement::Released);
        Ok(())
    }

    /// The bytes the layer would store for this response (its status, the headers on the
    /// operation's replay list, the body byte for byte): complete the lease with them inside
    /// the handler's own transaction, so a replay is exactly what the layer would have replayed.
    pub fn stored_response(&self, status: StatusCode, headers: &HeaderMap, body: impl Into<Bytes>) -> Vec<u8> {
        StoredResponse::new(status, headers, &self.inner.replay_headers, body).encode()
    }

    /// Tells the layer that the handler completed the lease inside its own transaction (and
    /// that transaction committed): the layer will not complete it again.
    ///
    /// # Errors
    /// A handle settled otherwise before.
    pub fn completed_by_handler(&self) -> Result<(), HandleError> {
        self.claim(Settled::ByHandler)?;
        metrics::settled(self.lease().scope().operation(), Settlement::Completed);
        Ok(())
    }
}

impl<S> LeaseHandle<S> {
    pub(crate) fn settled(&self) -> Option<Settled> {
        *self.inner.settled.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Settles the handle as `how` unless it is settled already.
    pub(crate) fn claim(&self, how: Settled) -> Result<(), HandleError> {
        let mut settled = self.inner.settled.lock().unwrap_or_else(PoisonError::into_inner);
        match *settled {
            Some(already) => Err(HandleError::settled(already)),
            None => {
                *settled = Some(how);
                Ok(())
            }
        }
    }
}
