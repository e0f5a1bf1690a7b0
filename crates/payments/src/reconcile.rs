//! `GET /v1/reconciliation`: the reconciliation queue of the bearer's tenant, oldest first —
//! charges whose outcome is unknown (the provider's answer was lost) and payments whose attempt
//! ended without a known outcome — and the [`Reconciler`] (the library's task with
//! [`ChargeLookup`]) that drives them to a fact by asking the provider. Retries of a waiting key get `409 needs-reconciliation` meanwhile.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use idemdb_core::{Attention, OutboxItem, ProviderState, ResolutionCause};
use idemdb_http::admin::attention_json;
use idemdb_http::reconcile::{EffectDecision, EffectLookup};
use idemdb_interface::{IdempotencyStore, WorkflowStore};
use serde_json::{Value, json};

use crate::app::{App, bearer};
use crate::backend::Backend;
use crate::charge::{ChargeOrder, confirmed_payment};
use crate::ledger::ChargeOutcome;
use crate::payment::{payment_operation_name, problem};

/// Where the queue is listed.
pub const RECONCILIATION_PATH: &str = "/v1/reconciliation";

/// One entry as JSON (the admin API's spelling), or `None` for another tenant's.
fn entry<S: IdempotencyStore>(store: &S, tenant: &str, attention: &Attention) -> Option<Value> {
    let (scope, key) = attention.scoped_key();
    (scope.tenant() == tenant)
        .then(|| attention_json(attention, store.key_hash(scope, key), store.tenant_hash(scope.tenant()), true))
}

/// The handler.
pub(crate) async fn list<B: Backend>(State(app): State<Arc<App<B>>>, headers: HeaderMap) -> Response {
    let Some(tenant) = bearer(&headers) else {
        return problem(StatusCode::UNAUTHORIZED, "unauthorized", "Authorization: Bearer <tenant> required");
    };
    let queue = match app.backend.store().reconciliation_queue(0).await {
        Ok(queue) => queue,
        Err(_) => {
            let detail = "the reconciliation queue could not be read";
            return problem(StatusCode::SERVICE_UNAVAILABLE, "store-unavailable", detail);
        }
    };
    let entries: Vec<Value> =
        queue.iter().filter_map(|attention| entry(app.backend.store(), &tenant, attention)).collect();
    let body = json!({ "entries": entries });
    ([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// The payments' side of reconciliation, for the library's
/// [`Reconciler`](idemdb_http::reconcile::Reconciler): an uncertain charge is looked up at the
/// provider by its provider key — found: the payment row is written and the charge resolved
/// confirmed in one commit (the record completes with the payment's `201`, which retries
/// replay); not found: resolved `not_found`, and the dispatcher woken to send it again under
/// the same provider key.
#[derive(Debug)]
pub struct ChargeLookup<B> {
    pub(crate) app: Arc<App<B>>,
}

/// The reconciler of the payments service: the library's task with [`ChargeLookup`], the
/// payment operation declared to charge only through the outbox (an uncertain payment with no
/// charge enqueued is released, so its retry runs). Every resolution is in the store's audit
/// trail (`effect_resolved`, `reconciled`), the log and the metrics; what no fact decides stays
/// listed at [`RECONCILIATION_PATH`].
pub type Reconciler<B> = idemdb_http::reconcile::Reconciler<<B as Backend>::Store, ChargeLookup<B>>;

/// The service's reconciler over `app`, every `DEFAULT_RECONCILE_INTERVAL`.
pub(crate) fn reconciler<B: Backend>(app: Arc<App<B>>) -> Reconciler<B> {
    let store = app.backend.store().clone();
    let charge = app.charges.effect.clone();
    idemdb_http::reconcile::Reconciler::new(store, ChargeLookup { app }).declare(payment_operation_name(), [charge])
}

impl<B: Backend> EffectLookup<B::Store> for ChargeLookup<B> {
    async fn decide(&self, store: &B::Store, item: &OutboxItem) -> EffectDecision {
        let app = &self.app;
        if item.effect != app.charges.effect {
            return EffectDecision::Undecided;
        }
        let tenant = item.scope.tenant();
        let Ok(found) = app.provider.find(tenant, item.provider_key.as_str()).await else {
            return EffectDecision::Undecided;
        };
        let Some(charge) = found else {
            if store
                .resolve_effect(
                    &item.scope,
                    &item.key,
                    &item.effect,
                    ProviderState::NotFound,
                    ResolutionCause::ProviderNotFound,
                )
                .await
                .is_err()
            {
                return EffectDecision::Undecided;
            }
            app.charges.wake();
            return EffectDecision::NotFound;
        };
        let Ok(order) = ChargeOrder::from_payload(&item.payload) else { return EffectDecision::Undecided };
        let Some(reference) = charge["id"].as_str().map(str::to_string) else { return EffectDecision::Undecided };
        let (payment, response) = confirmed_payment(item, &order, &reference);
        let state = ProviderState::Confirmed { reference, result: response.encode() };
        match crate::ledger::record_payment(
            app.backend.store(),
            tenant,
            &payment,
            item,
            ChargeOutcome::Resolved(state, ResolutionCause::ProviderConfirmed),
        )
        .await
        {
            Ok(_) => EffectDecision::Confirmed,
            Err(_) => EffectDecision::Undecided,
        }
    }
}
