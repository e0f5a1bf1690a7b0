//! IETF `Idempotency-Key` semantics for HTTP services and clients, on idemdb.
//!
//! * [`IdempotencyLayer`]: a tower layer (it works in axum) that reserves the key **before the
//!   handler runs**, replays the stored response to true retries, and refuses everything
//!   else — 400, 409, 422 — as `application/problem+json`. It runs on any
//!   [`IdempotencyStore`](idemdb_interface::IdempotencyStore): the embedded redb store today,
//!   the PostgreSQL adapter when a service outgrows one machine.
//! * `IdempotentClient` (feature `client`): the client side for desktop and mobile apps. The
//!   intent and its key are persisted in the embedded store before the first send; retries
//!   reuse the key; pending intents are resumed at start-up.
//!
//! The bar is the IETF httpapi draft "The Idempotency-Key HTTP Header Field" (-07) and what
//! Stripe's API taught its users. The README has a complete axum service; in short:
//!
//! ```
//! use axum::{Router, routing::post};
//! use http::Method;
//! use http::request::Parts;
//! use idemdb_http::{IdempotencyLayer, Operation};
//!
//! # fn app(store: idemdb::Store) -> Router {
//! // The tenant comes from what authentication established, never from a client's header.
//! #[derive(Clone)]
//! struct Account(String);
//! let tenant = |parts: &Parts| parts.extensions.get::<Account>().map(|a| a.0.clone());
//!
//! let idempotency = IdempotencyLayer::new(store.asynchronous(), tenant)
//!     .route(Method::POST, "/v1/orders", Operation::named("place_order"));
//! Router::new().route("/v1/orders", post(|| async { "placed" })).layer(idempotency)
//! # }
//! ```
//!
//! # What each request gets
//!
//! | situation | status | problem `type` (slug) | stored? |
//! |---|---|---|---|
//! | method or route not covered, or key optional and absent | the handler's | — | no record |
//! | key required and absent | 400 | `key-missing` | no |
//! | key empty, over 255 bytes, non-ASCII, a space, sent twice, or not an sf-string under [`KeyForms::Strict`] | 400 | `invalid-key` | no |
//! | no tenant from the [`TenantSource`] (or an invalid one) | 401 | `unauthenticated` | no |
//! | body over the operation's limit | 413 | `too-large` | no |
//! | JSON body without a canonical form | 400 | `invalid-request` | no |
//! | new key (or a released one) | the handler runs; its response per the [`ResponsePolicy`] | — | by policy |
//! | same key, same request, finished | the stored status, allow-listed headers and body, byte for byte, plus `Idempotent-Replayed: true` | — | (replay) |
//! | same key while the first request runs | 409 + `Retry-After` (or the first's replay after an opt-in [wait](Operation::wait_for_first)) | `in-progress` | no |
//! | same key, different request | 422 | `key-mismatch` | no |
//! | earlier outcome uncertain (lease expired mid-request, handler panicked, marked uncertain, response too large or streamed) | 409 | `needs-reconciliation` | no |
//! | response purged, only the tombstone left | 410 | `expired` | no |
//! | the store failed or is unreachable; a commit's outcome unknown | 503 + `Retry-After: 1` | `storage`, `unavailable`, `store-busy`, `commit-unknown` | no |
//! | the stored response does not decode | 500 | `corrupt` | — |
//!
//! Problem `type` URIs are `urn:idemdb:problem:<slug>` by default, or under a base the service
//! documents ([`ProblemTypes`]); the body also has `code` (`IDEMDB_KEY_MISMATCH`). A 409 for
//! `needs-reconciliation` carries no `Retry-After`: retrying helps only once the record has been
//! reconciled (`reconcile` on the store, or the CLI).
//!
//! # Which responses are stored (per operation)
//!
//! | response | default ([`OnResponse::Store`]) | may be set to |
//! |---|---|---|
//! | 1xx–3xx | completed, replayed | `Release`, `Uncertain` |
//! | 400 from the handler | **released**: no binding; the corrected request may use the key (a 400 refuses the request before any effect, Stripe's rule) | `Store`, `Uncertain` |
//! | other 4xx from the handler | failed definitively, replayed | `Release` (the handler changed nothing), `Uncertain` |
//! | 5xx from the handler | failed definitively, replayed (Stripe's rule) | `Release`, `Uncertain` |
//! | refusals of the layer before the handler ran (400, 401, 413, 409, 422, 410) | never stored | — |
//! | the handler called [`LeaseHandle::release`] (its own validation failed) | released, not stored, no binding | — |
//! | the handler [completed in its own transaction](LeaseHandle::completed_by_handler) | what it stored | — |
//! | too large for the store (1 MiB by default) or streamed (no known length) | sent to the first client as is; the key becomes **uncertain** | — |
//! | the handler panicked, or its service returned an error | 500 problem `internal` (or the error) to the first client; the key becomes **uncertain** | — |
//!
//! An uncertain key is never run again by itself: its retries get 409 `needs-reconciliation`
//! until someone reconciles it (completed, failed or released). That is the price of never
//! running a handler twice when the layer cannot say what the first run did.
//!
//! # Logs
//! Each covered request runs in a `tracing` span `idempotency` (target `idemdb_http`) with the
//! store's keyed hash of the key (`key_hash`), the tenant, the operation and the answer; never
//! the raw key, the body or a credential.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(feature = "axum")]
pub mod admin;
#[cfg(feature = "client")]
pub mod client;
mod deadline;
mod idempotency;
mod key;
pub mod metrics;
mod problem;
pub mod reconcile;
mod response;
mod webhook;

pub use deadline::{BodyDeadlineElapsed, DeadlineBody};
pub use idempotency::{
    DEFAULT_IN_PROGRESS_RETRY_AFTER, DEFAULT_MAX_BODY_BYTES, EffectPayload, HandleError, HeldKeys, IdempotencyLayer,
    IdempotencyService, KeyHold, LeaseHandle, OnResponse, Operation, ResponseFuture, ResponsePolicy, SingleTenant,
    TenantSource,
};
pub use key::{IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED, KeyForms, KeyHeaderError, key_header_value, parse_key_header};
pub use problem::{DEFAULT_PROBLEM_BASE, PROBLEM_JSON, ProblemTypes};
pub use response::{DEFAULT_REPLAY_HEADERS, RESPONSE_FORMAT, ResponseBuildError, ResponseDecodeError, StoredResponse};
pub use webhook::{
    DEFAULT_WEBHOOK_TOLERANCE, VerifiedWebhook, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP,
    WebhookSignatureError, WebhookSigner, WebhookVerifier,
};

#[cfg(feature = "client")]
pub use client::IdempotentClient;

/// The README's examples, compiled as doctests.
#[cfg(all(doctest, feature = "axum"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
