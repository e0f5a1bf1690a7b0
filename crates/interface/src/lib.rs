//! The one store interface of idemdb.
//!
//! The HTTP layer, the workflow primitives and any code that should run on every backend call
//! [`IdempotencyStore`]; the embedded redb store (`idemdb::Store`) implements it now and the
//! PostgreSQL adapter implements it the same way. Every implementation decides with the core's
//! pure [`decide`](idemdb_core::decide) and transitions inside one transaction of its own
//! storage, so every backend answers alike — the shared decision table
//! (`conformance`, behind the `conformance` feature) checks that on each of them.
//!
//! Beside it: [`WorkflowStore`] (the outbox, reconciliation queue, inbox and jobs),
//! [`BusinessStore`] (the application's rows committed with the store's transitions, one
//! [`BusinessWrite`](idemdb_core::BusinessWrite) per transaction) and [`InspectStore`]
//! (listings for operators).
//!
//! # Why the methods return futures
//!
//! A SQL backend answers over the network, while redb answers a replay in microseconds and a
//! durable write in about one `fsync`. The methods return `Send` futures so that one shape
//! serves both: the PostgreSQL adapter awaits its driver, and the redb store answers lookups
//! inline and runs writes (which wait for a flush) on a blocking thread pool, so an async
//! runtime's worker threads never wait on an `fsync`. On `wasm32` the redb store answers inline
//! (there are no threads), and its futures are ready when first polled.
//!
//! ```
//! use idemdb_core::{Fingerprint, IdempotencyKey, Reservation, Reserve, Scope};
//! use idemdb_interface::IdempotencyStore;
//!
//! /// Runs `effect` at most once per key, on any backend.
//! async fn once<S: IdempotencyStore>(
//!     store: &S,
//!     scope: &Scope,
//!     key: &IdempotencyKey,
//!     fingerprint: &Fingerprint,
//!     effect: impl FnOnce() -> Vec<u8>,
//! ) -> Result<Option<Vec<u8>>, S::Error> {
//!     match store.reserve(Reserve::new(scope, key, fingerprint)).await? {
//!         Reservation::Acquired(lease) => {
//!             let result = effect();
//!             store.complete(&lease, result.clone()).await?;
//!             Ok(Some(result))
//!         }
//!         Reservation::Replay { body, .. } => Ok(Some(body)),
//!         _refused => Ok(None),
//!     }
//! }
//! // The redb store (`idemdb::Store`) and the PostgreSQL adapter both fit `S`.
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::future::Future;

use idemdb_core::{
    Coded, Failure, IdempotencyKey, KeyHash, Lease, Policy, PurgeReport, Record, Reservation, Reserve, Resolution,
    ResolutionCause, Scope,
};

mod clock;
#[cfg(feature = "conformance")]
pub mod conformance;
mod inspect;
mod rows;
mod workflow;

pub use inspect::{InspectStore, ListedDelivery};
pub use rows::BusinessStore;
pub use workflow::WorkflowStore;

#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
pub use clock::SystemClock;
pub use clock::{Clock, ManualClock};

/// An idempotency store: reserve a key for a request, complete or fail the attempt, replay
/// true retries and refuse everything else — the same answers on every backend.
///
/// Every call is one transaction of the backend's storage, made with the core's pure
/// functions. A call whose outcome is unknown (the connection dropped during a commit) fails
/// with an error whose [`code`](Coded::code) is
/// [`CommitUnknown`](idemdb_core::ErrorCode::CommitUnknown); every call is idempotent, so
/// repeating it tells what was stored. A backend that cannot be reached fails with
/// [`Unavailable`](idemdb_core::ErrorCode::Unavailable) or
/// [`Storage`](idemdb_core::ErrorCode::Storage), never with an answer.
pub trait IdempotencyStore: Send + Sync {
    /// The backend's error type. Its [`Coded::code`] classifies it for callers that are
    /// generic over the backend (an HTTP layer mapping errors to statuses).
    type Error: std::error::Error + Coded + Send + Sync + 'static;

    /// The policy that applies to `operation`.
    fn policy(&self, operation: &str) -> &Policy;

    /// The keyed hash that logs and the audit trail use for `(scope, key)`: safe to log, never
    /// the raw key.
    fn key_hash(&self, scope: &Scope, key: &IdempotencyKey) -> KeyHash;

    /// The keyed hash that logs use for a tenant ([`KeyHash::tenant`] under the store's
    /// secret): safe to log, never the raw tenant.
    fn tenant_hash(&self, tenant: &str) -> KeyHash;

    /// Reserves `(scope, key)` for a request with `fingerprint`, or says why not: the one
    /// reservation call. The [`Reserve`] request may carry a correlation id (recorded in the
    /// audit trail and log events; checked when it was given to the request) and effects to
    /// enqueue in the outbox **in the same transaction** when the key is acquired: an acquired
    /// reservation has its effects in the outbox, any other answer enqueued nothing. For
    /// operations whose external effects all go through the outbox, this closes the window in
    /// which a record is in progress with its effect not yet written (a process that dies there
    /// leaves nothing to classify).
    fn reserve(&self, request: Reserve<'_>) -> impl Future<Output = Result<Reservation, Self::Error>> + Send;

    /// Stores the result of the lease's attempt; retries replay it byte for byte.
    fn complete(&self, lease: &Lease, result: Vec<u8>) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Records that the lease's attempt failed.
    fn fail(&self, lease: &Lease, failure: Failure) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Extends the lease; returns the renewed lease.
    fn renew(&self, lease: &Lease) -> impl Future<Output = Result<Lease, Self::Error>> + Send;

    /// Resolves an uncertain record; `cause` says who decided, on what fact (the audit trail
    /// records it).
    fn reconcile(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        resolution: Resolution,
        cause: ResolutionCause,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Reads the record of `(scope, key)`.
    fn get(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> impl Future<Output = Result<Option<Record>, Self::Error>> + Send;

    /// Applies retention to at most `budget` due records: results past their response TTL
    /// become tombstones, tombstones past their tombstone TTL are forgotten.
    fn purge_expired(&self, budget: usize) -> impl Future<Output = Result<PurgeReport, Self::Error>> + Send;
}
