//! A payments service on the idemdb HTTP layer: the seed's `POST /payments` story, to run on
//! the embedded redb store ([`RedbBackend`]) or on PostgreSQL ([`PgBackend`], many instances on
//! one database).
//!
//! * `POST /v1/payments` with `Idempotency-Key` and a JSON body
//!   `{"amount": "10.50", "currency": "BRL", "destination": "acct_x"}`; the tenant is the
//!   bearer token of `Authorization: Bearer <tenant>` (a stand-in for real authentication).
//!   The handler enqueues the charge in the outbox (provider key `<key>:charge-v1`, derived from
//!   the idempotency key); the [`Dispatcher`] charges a simulated provider with it, then writes
//!   the payment row **and** reports the charge confirmed (which completes the idempotency
//!   record) in one transaction, and the handler answers 201 with the payment.
//! * `POST /v1/webhooks/provider`: the provider's webhooks through the inbox — a repeated
//!   delivery id gets the earlier outcome, and an object only moves to a newer version.
//! * `GET /v1/reconciliation` (same bearer): the tenant's reconciliation queue (charges whose
//!   outcome is unknown, payments whose attempt ended without a known outcome).
//! * `GET /v1/ledger` (same bearer): every effect of the tenant's requests — `payments` and
//!   `provider_charges` (each with its `calls`) — so a client can count effects per key.
//! * `GET /v1/idempotency-policy`: the published expiry policy (the draft asks servers to
//!   publish it).
//! * `POST /v1/admin/backup` (`Authorization: Bearer <admin token>`, enabled by [`Admin`]): a
//!   verified backup of the embedded store, payments included, into the backup directory,
//!   while requests carry on; on PostgreSQL a `501 not-on-this-backend` problem.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod admin;
mod app;
mod backend;
mod charge;
mod create;
mod dispatch;
mod ledger;
pub mod metrics;
mod payment;
mod pg_backend;
mod policy;
mod provider;
mod purge;
mod reconcile;
mod refusals;
mod serve;
mod webhook;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::request::Parts;
use idemdb_core::{Canonicalizer, KeyError, Normaliser};
use idemdb_http::{IdempotencyLayer, Operation, WebhookVerifier};

use crate::app::Charges;

pub use admin::{ADMIN_API_PATH, BACKUP_PATH, timestamped_backup_name, valid_backup_name};
pub use app::{Admin, App, bearer};
pub use charge::{CHARGE_EFFECT, CHARGE_VERSION};
pub use dispatch::Dispatcher;

pub use backend::{Backend, BackupOutcome, RedbBackend};
pub use ledger::{ChargeOutcome, LedgerError, PAYMENTS, payments, record_payment};
pub use metrics::METRICS_PATH;
pub use payment::{PAYMENTS_PATH, PaymentRequest, payment_operation_name};
pub use pg_backend::{PgBackend, SAFETY_POLL};
pub use policy::{POLICY_PATH, published_policy};
pub use provider::{ChargeRequest, PG_PROVIDER_TABLE, Provider, ProviderError, SETTLE_MARGIN};
pub use purge::{DEFAULT_PURGE_BATCH, DEFAULT_PURGE_INTERVAL, Purging, purge_postgres, purge_rounds};
pub use reconcile::{ChargeLookup, RECONCILIATION_PATH, Reconciler};
pub use refusals::{HYPER_MAX_HEADER_BYTES, HYPER_MAX_HEADERS, MAX_HEADER_BYTES, MAX_HEADERS};
pub use serve::{Drained, ReadTimeouts, serve};
pub use webhook::{MAX_VERSION_STEP, MAX_WEBHOOK_BYTES, WEBHOOK_PATH, WEBHOOK_SOURCE, parse_delivery};

/// The canonical form of a payment request: currency case and amount spelling do not make
/// another request, and a client's `trace_id` is a transport field. (The pointers are
/// constants and valid, so the fallback to no rules is never taken.)
pub fn payment_canonicalizer() -> Canonicalizer {
    let canon = Canonicalizer::new()
        .exclude("/trace_id")
        .and_then(|c| c.normalise("/currency", Normaliser::Uppercase))
        .and_then(|c| c.normalise("/amount", Normaliser::DecimalAmount));
    canon.unwrap_or_default()
}

/// The layer's settings of `POST /v1/payments`: its name, canonical form, a 16 KiB body limit,
/// the charge enqueued with the reservation (one commit), and the default key forms and
/// response policy (a handler's 400 releases the key).
pub fn payment_operation() -> Operation {
    let operation =
        Operation::named(payment_operation_name()).canonicalizer(payment_canonicalizer()).max_body_bytes(16 * 1024);
    match idemdb_core::EffectName::new(CHARGE_EFFECT) {
        // The charge goes into the outbox in the reserving commit; a body the handler will
        // refuse enqueues nothing.
        Ok(charge) => operation.enqueue_on_reserve(charge, CHARGE_VERSION, |body, key_hash| {
            let request = PaymentRequest::parse(body).ok()?;
            Some(charge::ChargeOrder::for_request(request, key_hash).to_payload())
        }),
        Err(_) => operation,
    }
}

/// The service's router over `backend` and `provider`, and the dispatcher of its charges (run
/// it beside the router, for example with `tokio::spawn(dispatcher.run())`; without it,
/// payments wait in the outbox).
///
/// # Errors
/// Never in practice: the charge's effect name is a valid constant ([`CHARGE_EFFECT`]).
pub fn router<B: Backend>(backend: B, provider: Provider) -> Result<(Router, Dispatcher<B>), KeyError> {
    router_with_admin(backend, provider, None)
}

/// [`router`] with admin requests ([`BACKUP_PATH`]) enabled by `admin`.
///
/// # Errors
/// As [`router`].
pub fn router_with_admin<B: Backend>(
    backend: B,
    provider: Provider,
    admin: Option<Admin>,
) -> Result<(Router, Dispatcher<B>), KeyError> {
    router_with(backend, provider, admin, None)
}

/// [`router_with_admin`] whose webhooks must be signed: with `webhooks`, every delivery to
/// [`WEBHOOK_PATH`] is verified first (Standard Webhooks `v1`), and an unsigned or forged one
/// gets 401 `invalid-signature`.
///
/// # Errors
/// As [`router`].
pub fn router_with<B: Backend>(
    backend: B,
    provider: Provider,
    admin: Option<Admin>,
    webhooks: Option<WebhookVerifier>,
) -> Result<(Router, Dispatcher<B>), KeyError> {
    let tenant = |parts: &Parts| bearer(&parts.headers);
    let idempotency = IdempotencyLayer::new(backend.store().clone(), tenant)
        .route(Method::POST, PAYMENTS_PATH, payment_operation())
        .only_listed_routes();
    let idempotency = if backend.shared() { idempotency.shared_store() } else { idempotency };
    let charges = Charges::new(backend.shared(), idempotency.held_keys())?;
    let app = Arc::new(App { backend, provider, charges, admin, webhooks });
    let router = Router::new()
        .route(PAYMENTS_PATH, post(create::create::<B>))
        .route(WEBHOOK_PATH, post(webhook::receive::<B>).layer(DefaultBodyLimit::max(MAX_WEBHOOK_BYTES)))
        .route(RECONCILIATION_PATH, get(reconcile::list::<B>))
        .route("/v1/ledger", get(ledger_of::<B>))
        .route(POLICY_PATH, get(policy_of::<B>))
        .route(METRICS_PATH, get(metrics::render))
        .nest(ADMIN_API_PATH, admin::routes(&app).with_state(()))
        .fallback(refusals::not_found)
        .layer(idempotency)
        .layer(axum::middleware::map_response(refusals::as_problem))
        .layer(axum::middleware::from_fn(refusals::header_limits))
        .with_state(Arc::clone(&app));
    Ok((router, Dispatcher { app }))
}

async fn ledger_of<B: Backend>(State(app): State<Arc<App<B>>>, headers: HeaderMap) -> Response {
    let Some(tenant) = bearer(&headers) else {
        return payment::problem(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "Authorization: Bearer <tenant> required",
        );
    };
    let payments = match crate::ledger::payments(app.backend.store(), &tenant).await {
        Ok(payments) => payments,
        Err(_) => {
            return payment::problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "ledger-unavailable",
                "the ledger could not be read",
            );
        }
    };
    let charges = match app.provider.charges(&tenant).await {
        Ok(charges) => charges,
        Err(_) => {
            return payment::problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "ledger-unavailable",
                "the provider could not be read",
            );
        }
    };
    let body = serde_json::json!({ "payments": payments, "provider_charges": charges });
    ([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

async fn policy_of<B: Backend>(State(app): State<Arc<App<B>>>) -> Response {
    let policy = idemdb_interface::IdempotencyStore::policy(app.backend.store(), payment_operation_name());
    ([(header::CONTENT_TYPE, "application/json")], published_policy(policy, &payment_operation()).to_string())
        .into_response()
}
