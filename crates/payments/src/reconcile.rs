//! `GET /v1/reconciliation`: the reconciliation queue of the bearer's tenant, oldest first —
//! charges whose outcome is unknown (the provider's answer was lost) and payments whose attempt
//! ended without a known outcome. Each waits for someone to query the provider and resolve it;
//! retries of its key get `409 needs-reconciliation` meanwhile.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use idemdb_core::{Attention, OutboxState};
use idemdb_interface::WorkflowStore;
use serde_json::{Value, json};

use crate::ledger::Ledger;
use crate::payment::problem;
use crate::{App, bearer};

/// Where the queue is listed.
pub const RECONCILIATION_PATH: &str = "/v1/reconciliation";

/// One entry as JSON, or `None` for another tenant's.
fn entry(tenant: &str, attention: &Attention) -> Option<Value> {
    match attention {
        Attention::Effect { item, since } if item.scope.tenant() == tenant => {
            let cause = match &item.state {
                OutboxState::Uncertain { cause } => Some(cause.as_str()),
                _ => None,
            };
            Some(json!({
                "kind": "effect",
                "operation": item.scope.operation(),
                "idempotency_key": item.key.as_str(),
                "effect": item.effect.as_str(),
                "provider_key": item.provider_key.as_str(),
                "state": item.state.kind().as_str(),
                "cause": cause,
                "dispatches": item.dispatches,
                "last_reason": item.last_reason,
                "first_sent_at_ms": item.first_sent_at.map(|at| at.as_millis()),
                "since_ms": since.as_millis(),
            }))
        }
        Attention::Record { scoped, record, since } if scoped.scope.tenant() == tenant => Some(json!({
            "kind": "record",
            "operation": scoped.scope.operation(),
            "idempotency_key": scoped.key.as_str(),
            "state": record.state.kind().as_str(),
            "since_ms": since.as_millis(),
        })),
        _ => None,
    }
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
    let entries: Vec<Value> = queue.iter().filter_map(|attention| entry(&tenant, attention)).collect();
    let body = json!({ "entries": entries });
    ([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}
