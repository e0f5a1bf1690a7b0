//! The operator's side of a service on idemdb: an axum [`Router`](axum::Router) that lists what waits for a
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

mod api;
mod json;
mod routes;

pub use api::{AdminApi, ConfirmHook, HookError, NoHook, ProviderFact};
pub use json::{attention_json, delivery_json, effect_json, event_json, record_json};
