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
use std::time::Duration;

use axum::http::StatusCode;
use idemdb_core::{EffectReport, OutboxItem};
use idemdb_http::StoredResponse;
use idemdb_interface::{IdempotencyStore, WorkflowStore};
use serde_json::json;

use crate::app::App;
use crate::backend::Backend;
use crate::charge::{ChargeOrder, confirmed_payment, stored};
use crate::ledger::ChargeOutcome;
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
        self.run_until(std::future::pending()).await;
    }

    /// Dispatches charges until `stop` resolves with a deadline, then claims nothing more and
    /// waits until that deadline for the dispatches in progress to report. A dispatch still
    /// running then is stopped and its charge reported unknown (its provider call may have
    /// landed): the next process's reconciler asks the provider about it at once, instead of
    /// a claim blocking the key until its lease runs out.
    pub async fn run_until(self, stop: impl std::future::Future<Output = tokio::time::Instant>) {
        let app = self.app;
        let mut running = tokio::task::JoinSet::new();
        let mut claimed = std::collections::HashMap::new();
        tokio::pin!(stop);
        let deadline = loop {
            while let Some(Ok((id, ()))) = running.try_join_next_with_id() {
                claimed.remove(&id);
            }
            let claims = match app.backend.store().claim_effects(BATCH).await {
                Ok(claims) => claims,
                Err(error) => {
                    eprintln!("payments-example: claiming charges failed: {error}");
                    Vec::new()
                }
            };
            for claim in &claims {
                let (app, item) = (Arc::clone(&app), claim.clone());
                let task = running.spawn(async move {
                    // The answer of the payment comes with this dispatch: its key is held here.
                    let _held = app.charges.held.hold(app.backend.store().key_hash(&item.scope, &item.key));
                    let answer = dispatch(&app, &item).await;
                    app.charges.dispatched(&item, answer.as_ref());
                });
                claimed.insert(task.id(), claim.clone());
            }
            if claims.is_empty() {
                tokio::select! {
                    () = app.charges.wake.notified() => {}
                    () = app.backend.wait_for_charges() => {}
                    deadline = &mut stop => break deadline,
                }
            }
        };
        let finished = tokio::time::timeout_at(deadline, async {
            while let Some(joined) = running.join_next_with_id().await {
                if let Ok((id, ())) = joined {
                    claimed.remove(&id);
                }
            }
        })
        .await;
        if finished.is_err() {
            running.abort_all();
            for claim in claimed.values() {
                let reason = "the service stopped while the provider call was in flight".to_string();
                report_unknown(app.backend.store(), claim, reason).await;
            }
            eprintln!("payments-example: {} charge(s) in flight at shutdown reported unknown", claimed.len());
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
    let charge = match earlier_charge(app, claim).await {
        Earlier::Found(charge) => charge,
        Earlier::Unknown(reason) => {
            // Nothing is sent while an earlier call may still land: due again after a backoff.
            if let Err(error) = store.report_effect(claim, EffectReport::Retryable { reason }).await {
                eprintln!("payments-example: making the charge due again failed: {error}");
            }
            return None;
        }
        Earlier::None => {
            let deadline = call_deadline(store.policy(claim.scope.operation()).lease_ttl());
            match tokio::time::timeout(deadline, app.provider.charge(request)).await {
                Ok(Ok(charge)) => charge,
                Ok(Err(error)) => {
                    // The provider may or may not have charged: never guess, never charge
                    // blindly again.
                    report_unknown(store, claim, error.to_string()).await;
                    return None;
                }
                Err(_) => {
                    // The call outlived its deadline, so its claim would soon run out: the
                    // charge may still land at the provider. The reconciler asks the provider
                    // (a lookup) before anything is sent again.
                    let reason = format!(
                        "the provider did not answer within {} ms (the call's deadline, below the claim's lease); \
                         asked about before any resend",
                        deadline.as_millis()
                    );
                    report_unknown(store, claim, reason).await;
                    return None;
                }
            }
        }
    };
    let reference = charge["id"].as_str().unwrap_or_default().to_string();
    let (payment, response) = confirmed_payment(claim, &order, &reference);
    let report = EffectReport::Confirmed { reference, result: response.encode() };
    let Err(error) =
        crate::ledger::record_payment(app.backend.store(), tenant, &payment, claim, ChargeOutcome::Reported(report))
            .await
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

/// How long one provider call may take: three quarters of the claim's lease, so the call ends
/// (and its outcome is reported) while this dispatcher still holds the claim, and no other
/// claim sends the charge again while it runs.
pub(crate) fn call_deadline(lease: Duration) -> Duration {
    (lease - lease / 4).max(Duration::from_millis(10))
}

/// What an earlier dispatch of a claimed charge did, as far as the provider says.
enum Earlier {
    /// No earlier dispatch is in doubt, or the provider has no charge under its key: send.
    None,
    /// The provider made the charge (an earlier call that outlived its claim landed).
    Found(serde_json::Value),
    /// The provider could not be asked: why.
    Unknown(String),
}

/// Asks the provider (a lookup, not a call) about a charge whose earlier dispatch is in doubt
/// — its claim ran out mid-call (a dispatcher that died, a call that outlived its lease) or
/// its outcome was reported unknown — before it is sent again.
async fn earlier_charge<B: Backend>(app: &App<B>, claim: &OutboxItem) -> Earlier {
    if !claim.in_doubt {
        return Earlier::None;
    }
    match app.provider.find(claim.scope.tenant(), claim.provider_key.as_str()).await {
        Ok(Some(charge)) => Earlier::Found(charge),
        Ok(None) => Earlier::None,
        Err(error) => {
            Earlier::Unknown(format!("an earlier dispatch is in doubt and the provider could not be asked: {error}"))
        }
    }
}

/// Reports a charge whose outcome is unknown: it waits in the reconciliation queue.
async fn report_unknown<S: WorkflowStore>(store: &S, claim: &OutboxItem, reason: String) {
    if let Err(error) = store.report_effect(claim, EffectReport::Unknown { reason }).await {
        eprintln!("payments-example: reporting an unknown charge outcome failed: {error}");
    }
}
