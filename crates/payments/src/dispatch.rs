//! The charge dispatcher: claims due charges from the outbox, calls the provider with each
//! item's provider key (`<key>:charge-v1`), and reports what the provider answered.
//!
//! A confirmed charge is reported in the same commit as its payment row
//! ([`crate::ledger::record_payment`]); the report completes the idempotency record with the payment's
//! `201`, so a retry replays it, and the waiting handler is handed the same response. A lost answer is reported unknown: the item and the record wait
//! in the reconciliation queue (`GET /v1/reconciliation`) and are never charged again blindly.
//! A dispatcher that dies mid-call leaves its claim to expire; the next claim (in this process
//! or after a restart) sends the same provider key again, inside the provider's key-retention
//! window only, and the provider answers with the first charge.

use std::sync::Arc;

use axum::http::StatusCode;
use idemdb_core::{EffectReport, OutboxItem};
use idemdb_http::StoredResponse;
use idemdb_interface::{IdempotencyStore, WorkflowStore};
use serde_json::json;

use crate::app::App;
use crate::backend::Backend;
use crate::charge::{ChargeOrder, confirmed_payment, stored};
use crate::ledger::Settlement;
use crate::provider::ChargeRequest;

/// How many charges one claim takes.
const BATCH: usize = 32;
/// The dispatcher of one service: run it beside the router ([`crate::router`]).
#[derive(Debug)]
pub struct Dispatcher<B> {
    pub(crate) app: Arc<App<B>>,
}

impl<B: Backend> Dispatcher<B> {
    /// The reconciler of the same service, with the default interval and budget (see
    /// [`Reconciler`](crate::Reconciler)); run it beside the dispatcher.
    pub fn reconciler(&self) -> crate::Reconciler<B> {
        crate::reconcile::reconciler(Arc::clone(&self.app))
    }

    /// Dispatches charges until the task is dropped: each claimed charge on a task of its own,
    /// so a slow provider call does not hold the others.
    pub async fn run(self) {
        let app = self.app;
        loop {
            let claims = match app.backend.store().claim_effects(BATCH).await {
                Ok(claims) => claims,
                Err(error) => {
                    eprintln!("payments-example: claiming charges failed: {error}");
                    Vec::new()
                }
            };
            if claims.is_empty() {
                tokio::select! {
                    () = app.charges.wake.notified() => {}
                    () = app.backend.wait_for_charges() => {}
                }
                continue;
            }
            for claim in claims {
                let app = Arc::clone(&app);
                tokio::spawn(async move {
                    // The answer of the payment comes with this dispatch: its key is held here.
                    let _held = app.charges.held.hold(app.backend.store().key_hash(&claim.scope, &claim.key));
                    let answer = dispatch(&app, &claim).await;
                    app.charges.dispatched(&claim, answer.as_ref());
                });
            }
        }
    }
}

/// One dispatch of one claimed charge. The response the payment's idempotency record was
/// finished with, when this dispatch's report committed (the waiting handler answers with it);
/// `None` when the charge is uncertain, due again, or its report's outcome is unknown.
async fn dispatch<B: Backend>(app: &App<B>, claim: &OutboxItem) -> Option<StoredResponse> {
    let store = app.backend.store();
    let tenant = claim.scope.tenant();
    let order = match ChargeOrder::from_payload(&claim.payload) {
        Ok(order) => order,
        Err(detail) => {
            // Nothing was sent: the payment fails for good, and its retries replay the failure.
            let body = json!({
                "type": "urn:payments-example:problem:invalid-charge",
                "title": "invalid charge",
                "status": 500,
                "detail": detail,
            });
            let failure = stored(StatusCode::INTERNAL_SERVER_ERROR, "application/problem+json", None, &body);
            return match store.report_effect(claim, EffectReport::Failed { body: failure.encode() }).await {
                Ok(_) => Some(failure),
                Err(error) => {
                    eprintln!("payments-example: reporting an invalid charge failed: {error}");
                    None
                }
            };
        }
    };
    let request = ChargeRequest {
        tenant: tenant.to_string(),
        provider_key: claim.provider_key.as_str().to_string(),
        payment: order.payment.clone(),
    };
    let charge = match app.provider.charge(request).await {
        Ok(charge) => charge,
        Err(error) => {
            // The provider may or may not have charged: never guess, never charge blindly again.
            let report = EffectReport::Unknown { reason: error.to_string() };
            if let Err(error) = store.report_effect(claim, report).await {
                eprintln!("payments-example: reporting an unknown charge outcome failed: {error}");
            }
            return None;
        }
    };
    let reference = charge["id"].as_str().unwrap_or_default().to_string();
    let (payment, response) = confirmed_payment(claim, &order, &reference);
    let report = EffectReport::Confirmed { reference, result: response.encode() };
    let Err(error) =
        crate::ledger::record_payment(app.backend.store(), tenant, &payment, claim, Settlement::Reported(report)).await
    else {
        return Some(response);
    };
    eprintln!("payments-example: recording a confirmed charge failed: {error}");
    if error.outcome_unknown() {
        // The payment row may be written: the claim runs out and the charge is sent again
        // with the same provider key, which the provider answers with this same charge.
        return None;
    }
    // Nothing was written (the store says so): the charge is due again after the first
    // backoff instead of when the claim runs out, and is sent again with the same provider key
    // (answered with this same charge), so the waiting request and its retries get the
    // payment in about a second, not after the lease.
    let retry = EffectReport::Retryable { reason: format!("the payment row was not written: {error}") };
    match store.report_effect(claim, retry).await {
        Ok(_) => {
            let pause = store.policy(claim.scope.operation()).dispatch_backoff().0;
            tokio::time::sleep(pause).await;
            app.charges.wake();
        }
        Err(error) => eprintln!("payments-example: making the charge due again failed: {error}"),
    }
    None
}
