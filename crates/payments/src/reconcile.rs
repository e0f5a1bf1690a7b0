//! `GET /v1/reconciliation`: the reconciliation queue of the bearer's tenant, oldest first —
//! charges whose outcome is unknown (the provider's answer was lost) and payments whose attempt
//! ended without a known outcome — and the [`Reconciler`] that drives them to a fact by asking
//! the provider. Retries of a waiting key get `409 needs-reconciliation` meanwhile.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use idemdb_core::{
    Attention, ExpiredLease, IdempotencyKey, OutboxItem, ProviderState, Resolution, Scope, State as RecordState,
};
use idemdb_http::admin::attention_json;
use idemdb_interface::{IdempotencyStore, WorkflowStore};
use serde_json::{Value, json};

use crate::dispatch::{ChargeOrder, confirmed_payment};
use crate::ledger::{Ledger, Settlement};
use crate::payment::{payment_operation_name, problem};
use crate::{App, bearer};

/// Where the queue is listed.
pub const RECONCILIATION_PATH: &str = "/v1/reconciliation";

/// One entry as JSON (the admin API's spelling), or `None` for another tenant's.
fn entry<S: IdempotencyStore>(store: &S, tenant: &str, attention: &Attention) -> Option<Value> {
    let (scope, key) = match attention {
        Attention::Effect { item, .. } => (&item.scope, &item.key),
        Attention::Record { scoped, .. } => (&scoped.scope, &scoped.key),
        _ => return None,
    };
    (scope.tenant() == tenant).then(|| attention_json(attention, store.key_hash(scope, key), true))
}

/// The handler.
pub(crate) async fn list<L: Ledger>(State(app): State<Arc<App<L>>>, headers: HeaderMap) -> Response {
    let Some(tenant) = bearer(&headers) else {
        return problem(StatusCode::UNAUTHORIZED, "unauthorized", "Authorization: Bearer <tenant> required");
    };
    let queue = match app.ledger.store().reconciliation_queue(0).await {
        Ok(queue) => queue,
        Err(_) => {
            let detail = "the reconciliation queue could not be read";
            return problem(StatusCode::SERVICE_UNAVAILABLE, "store-unavailable", detail);
        }
    };
    let entries: Vec<Value> =
        queue.iter().filter_map(|attention| entry(app.ledger.store(), &tenant, attention)).collect();
    let body = json!({ "entries": entries });
    ([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// How often the reconciler looks at the queue, by default.
pub const DEFAULT_RECONCILE_INTERVAL: Duration = Duration::from_secs(5);
/// How many queue entries one round decides, by default.
pub const DEFAULT_RECONCILE_BUDGET: usize = 64;

/// What one reconciliation round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Round {
    /// Charges the provider had made: the payment row written and the record completed.
    pub confirmed: usize,
    /// Charges the provider has no trace of: sent again under the same provider key.
    pub not_found: usize,
    /// Payments whose attempt ended uncertain with no charge enqueued: released, so the retry
    /// runs.
    pub released: usize,
    /// Entries no fact could decide this round (the provider or the store failed): left for
    /// the next round, or for a person.
    pub left: usize,
}

/// The reconciler of one service: run it beside the router and the dispatcher. Every
/// `interval` it takes up to `budget` entries of the reconciliation queue and drives each to a
/// fact:
///
/// * an **uncertain charge** is looked up at the provider by its provider key — found: the
///   payment row is written and the charge resolved confirmed in one commit (the record
///   completes with the payment's `201`, which retries replay); not found: resolved
///   `not_found`, which sends it again with the same provider key;
/// * an **uncertain payment record with no charge enqueued** (its attempt died or failed before
///   the outbox had the charge, and the operation declares every effect through the outbox) is
///   released: the retry runs.
///
/// Every resolution is in the store's audit trail (`effect_resolved`, `reconciled`) and in the
/// service's log with its cause. What no fact decides stays listed at
/// [`RECONCILIATION_PATH`].
#[derive(Debug)]
pub struct Reconciler<L> {
    pub(crate) app: Arc<App<L>>,
    /// Time between rounds.
    pub interval: Duration,
    /// Entries per round.
    pub budget: usize,
}

impl<L: Ledger> Reconciler<L> {
    /// Runs rounds until the task is dropped.
    pub async fn run(self) {
        loop {
            tokio::time::sleep(self.interval).await;
            let round = self.round().await;
            if round != Round::default() {
                eprintln!(
                    "payments-example: reconciled {} confirmed, {} not found (sent again), {} released; {} left",
                    round.confirmed, round.not_found, round.released, round.left
                );
            }
        }
    }

    /// One round (see the type's docs).
    pub async fn round(&self) -> Round {
        let app = &self.app;
        let store = app.ledger.store();
        let mut round = Round::default();
        let Ok(queue) = store.reconciliation_queue(self.budget).await else {
            return round;
        };
        for attention in queue {
            let decided = match &attention {
                Attention::Effect { item, .. } if item.effect == app.charges.effect => self.charge(item).await,
                Attention::Record { scoped, record, .. }
                    if scoped.scope.operation() == payment_operation_name()
                        && matches!(record.state, RecordState::Uncertain { .. }) =>
                {
                    self.record(&scoped.scope, &scoped.key).await
                }
                _ => None,
            };
            match decided {
                Some(Decided::Confirmed) => round.confirmed += 1,
                Some(Decided::NotFound) => round.not_found += 1,
                Some(Decided::Released) => round.released += 1,
                None => round.left += 1,
            }
        }
        if round.not_found > 0 {
            app.charges.wake();
        }
        round
    }

    async fn charge(&self, item: &OutboxItem) -> Option<Decided> {
        let app = &self.app;
        let tenant = item.scope.tenant();
        let found = app.provider.find(tenant, item.provider_key.as_str()).await.ok()?;
        let Some(charge) = found else {
            let resolved =
                app.ledger.store().resolve_effect(&item.scope, &item.key, &item.effect, ProviderState::NotFound).await;
            return resolved.ok().map(|_| Decided::NotFound);
        };
        let order = ChargeOrder::from_payload(&item.payload).ok()?;
        let reference = charge["id"].as_str()?.to_string();
        let (payment, result) = confirmed_payment(item, &order, &reference);
        let state = ProviderState::Confirmed { reference, result };
        app.ledger.record_payment(tenant, &payment, item, Settlement::Resolved(state)).await.ok()?;
        Some(Decided::Confirmed)
    }

    async fn record(&self, scope: &Scope, key: &IdempotencyKey) -> Option<Decided> {
        let store = self.app.ledger.store();
        let policy = store.policy(scope.operation());
        if policy.expired_lease() != ExpiredLease::TakeoverIfNoEffect {
            return None;
        }
        // Effects are enqueued only while the record is in progress, by its holder: an
        // uncertain record with no charge now will never get one.
        if store.effect(scope, key, &self.app.charges.effect).await.ok()?.is_some() {
            return None;
        }
        store.reconcile(scope, key, Resolution::Released).await.ok()?;
        Some(Decided::Released)
    }
}

enum Decided {
    Confirmed,
    NotFound,
    Released,
}
