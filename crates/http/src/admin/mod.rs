//! The operator's side of a service on idemdb: an axum [`Router`] that lists what waits for a
//! decision, shows one record, and resolves it — over any store of the interface traits, so it
//! serves the embedded redb store and PostgreSQL alike.
//!
//! **The router does no authentication or authorisation of its own.** Every route changes or
//! reveals other tenants' state: mount it behind the service's operator authentication (an
//! admin bearer token, mTLS, a network the public never reaches), never beside the public
//! routes unguarded.
//!
//! ```
//! use axum::Router;
//! use axum::http::{StatusCode, header};
//! use axum::middleware::{self, Next};
//! use axum::response::{IntoResponse, Response};
//! use idemdb_http::admin::AdminApi;
//!
//! # fn app(store: idemdb::Store, public: Router) -> Router {
//! async fn operators_only(request: axum::extract::Request, next: Next) -> Response {
//!     let token = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
//!     if token != Some("Bearer a-long-operator-secret") {
//!         return StatusCode::UNAUTHORIZED.into_response();
//!     }
//!     next.run(request).await
//! }
//! let admin = AdminApi::new(store.asynchronous()).router().layer(middleware::from_fn(operators_only));
//! public.nest("/v1/admin", admin)
//! # }
//! ```
//!
//! # Routes (relative to where the router is mounted)
//!
//! | route | answer |
//! |---|---|
//! | `GET /` | the operator's page (one HTML file, no external resources) |
//! | `GET /reconciliation?limit=N` | `{"entries": [...], "limit": N}`: the reconciliation queue, oldest first ([`attention_json`]) |
//! | `GET /record?tenant=&operation=&key=` | one record: state, fingerprint, fence, attempts, times, its effects and its audit history |
//! | `POST /resolve` | resolves one entry (body below); answers the record or item as it is now |
//! | `GET /effects?state=&limit=N` | outbox items (`state`: `pending`, `dispatching`, `confirmed`, `failed`, `uncertain`) |
//! | `GET /deliveries?limit=N` | inbox deliveries |
//!
//! `limit` is 1..=1000 (default 100). Errors are `application/problem+json` with the `code`
//! of the refusal (`IDEMDB_INVALID_ARGUMENT`, `IDEMDB_NOT_FOUND`, `IDEMDB_WRONG_STATE`, ...).
//! Both stores list their outbox, inbox and a key's audit history; a backend that does not
//! ([`InspectStore`](idemdb_interface::InspectStore)'s defaults) answers those routes with
//! `501` (`IDEMDB_UNSUPPORTED`). Every history event carries `cause`: for a resolution, who
//! decided on what fact (`operator`, `provider_confirmed`, `provider_not_found`, `effect_free`,
//! ...; [`ResolutionCause`](idemdb_core::ResolutionCause)), `null` for other events.
//!
//! # Resolving
//!
//! `POST /resolve` with `{"tenant", "operation", "key"}` and one of:
//!
//! * `"effect": NAME, "provider": "confirmed", "reference": REF` — the provider made the
//!   effect. The service's [`ConfirmHook`] may resolve it itself (the payments example writes
//!   its payment row and resolves the charge in one commit); otherwise the intent's record
//!   completes with the HTTP response of `status` (default 200), `content_type` (default
//!   `application/json`) and `body`, in the layer's own encoding ([`StoredResponse`](crate::StoredResponse)), so
//!   retries replay it;
//! * `"effect": NAME, "provider": "failed"` — nothing happened; the record fails with that
//!   response (`status` default 500);
//! * `"effect": NAME, "provider": "not_found"` — the provider has no trace: sent again with
//!   the same provider key, in a new window;
//! * `"effect": NAME, "retry": true` — sent again inside the provider's key-retention window;
//! * `"resolution": "completed" | "failed" | "released"` — an uncertain record without an
//!   effect; `released` frees the key so the retry runs.
//!
//! The core decides what may be resolved: a record or item that is not uncertain is `409
//! IDEMDB_WRONG_STATE` (or the store's refusal), and nothing changes. Each resolution is in the
//! store's audit trail (`reconciled`, `effect_resolved`) and in a `tracing` event (target
//! `idemdb_http::admin`) with `cause = "operator"`, the key's hash and the operator's `note`.

mod json;
mod routes;

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use idemdb_core::OutboxItem;
use idemdb_interface::InspectStore;

pub use json::{attention_json, delivery_json, effect_json, event_json, record_json};

/// An application's part in a confirmed resolution: its business rows written with the
/// resolution, in one commit of its backend.
pub trait ConfirmHook<S>: Send + Sync + 'static {
    /// Called when an operator says the provider made the uncertain effect `item` under
    /// `reference`. Return `Ok(true)` after resolving it (the application's rows and
    /// `resolve_effect` in one transaction), `Ok(false)` to let the router resolve it with the
    /// operator's response.
    ///
    /// # Errors
    /// [`HookError`]: the router answers `502` and changes nothing more.
    fn confirmed(
        &self,
        store: &S,
        item: &OutboxItem,
        reference: &str,
    ) -> impl Future<Output = Result<bool, HookError>> + Send;
}

/// No application part: every resolution is the router's.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHook;

impl<S: Sync> ConfirmHook<S> for NoHook {
    fn confirmed(
        &self,
        _store: &S,
        _item: &OutboxItem,
        _reference: &str,
    ) -> impl Future<Output = Result<bool, HookError>> + Send {
        std::future::ready(Ok(false))
    }
}

/// The application's hook failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the application's resolution failed: {0}")]
pub struct HookError(pub String);

/// The admin API over `store` (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct AdminApi<S, H = NoHook> {
    store: S,
    hook: H,
}

impl<S: InspectStore + Clone + 'static> AdminApi<S> {
    /// The admin API of `store`, with no application hook.
    pub fn new(store: S) -> Self {
        AdminApi { store, hook: NoHook }
    }
}

impl<S: InspectStore + Clone + 'static, H: ConfirmHook<S>> AdminApi<S, H> {
    /// The same API with `hook` for confirmed resolutions.
    pub fn hook<H2: ConfirmHook<S>>(self, hook: H2) -> AdminApi<S, H2> {
        AdminApi { store: self.store, hook }
    }

    /// The router; mount it behind operator authentication (it does none). It has no
    /// fallback of its own, so it can be merged with the service's other admin routes (an
    /// unknown path gets the service's fallback).
    pub fn router(self) -> Router {
        routes::router(Arc::new(self))
    }
}
