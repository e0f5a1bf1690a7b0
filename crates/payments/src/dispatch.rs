//! The charge dispatcher: claims due charges from the outbox, calls the provider with each
//! item's provider key (`<key>:charge-v1`), and reports what the provider answered.
//!
//! A confirmed charge is reported in the same commit as its payment row
//! ([`Ledger::record_payment`]); the report completes the idempotency record with the payment's
//! `201`, so a retry replays it. A lost answer is reported unknown: the item and the record wait
//! in the reconciliation queue (`GET /v1/reconciliation`) and are never charged again blindly.
//! A dispatcher that dies mid-call leaves its claim to expire; the next claim (in this process
//! or after a restart) sends the same provider key again, inside the provider's key-retention
//! window only, and the provider answers with the first charge.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use idemdb_core::{EffectName, EffectReport, KeyError, OutboxItem, OutboxStateKind};
use idemdb_http::{DEFAULT_REPLAY_HEADERS, StoredResponse};
use idemdb_interface::{IdempotencyStore, WorkflowStore};
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

use crate::App;
use crate::ledger::{Ledger, Settlement};
use crate::provider::ChargeRequest;

/// The outbox effect of a payment: its provider key is `<key>:charge-v1`.
pub const CHARGE_EFFECT: &str = "charge";
/// The version of the charge's contract with the provider (part of the provider key).
pub const CHARGE_VERSION: u16 = 1;
/// How many charges one claim takes.
const BATCH: usize = 32;
/// How often the dispatcher looks for due charges when nobody woke it (items whose backoff or
/// whose dead dispatcher's claim ran out, items another instance enqueued).
pub(crate) const POLL: Duration = Duration::from_millis(100);

/// What a payment's handler and the dispatcher share: the effect's name, a wake-up for the
/// dispatcher, and a counter of settled charges the handlers watch.
#[derive(Debug)]
pub(crate) struct Charges {
    pub(crate) effect: EffectName,
    wake: Notify,
    settled: watch::Sender<u64>,
}

impl Charges {
    pub(crate) fn new() -> Result<Charges, KeyError> {
        Ok(Charges { effect: EffectName::new(CHARGE_EFFECT)?, wake: Notify::new(), settled: watch::Sender::new(0) })
    }

    /// Tells the dispatcher that a charge was enqueued (or is due again).
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    /// Waits until `item` is finished or uncertain (its state then), at most `limit`.
    /// `Ok(None)`: it is still pending or dispatching (or gone); `Err`: the store could not be
    /// read.
    pub(crate) async fn settled<S: WorkflowStore>(
        &self,
        store: &S,
        item: &OutboxItem,
        limit: Duration,
    ) -> Result<Option<OutboxStateKind>, S::Error> {
        let mut settled = self.settled.subscribe();
        let until = tokio::time::Instant::now() + limit;
        loop {
            settled.borrow_and_update();
            let Some(current) = store.effect(&item.scope, &item.key, &item.effect).await? else { return Ok(None) };
            match current.state.kind() {
                OutboxStateKind::Pending | OutboxStateKind::Dispatching => {}
                finished => return Ok(Some(finished)),
            }
            if tokio::time::Instant::now() >= until {
                return Ok(None);
            }
            // Another instance's dispatcher does not notify: look again after a while anyway.
            let _ = tokio::time::timeout_at(until.min(tokio::time::Instant::now() + POLL), settled.changed()).await;
        }
    }
}

/// What the outbox item of a payment carries: what to charge, and the payment's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChargeOrder {
    pub(crate) payment_id: String,
    pub(crate) amount: String,
    pub(crate) currency: String,
    pub(crate) destination: String,
}

impl ChargeOrder {
    /// The charge of a validated payment request, its payment id made from the key's hash
    /// (the same on every retry).
    pub(crate) fn for_request(request: crate::PaymentRequest, key_hash: idemdb_core::KeyHash) -> ChargeOrder {
        ChargeOrder {
            payment_id: format!("pay_{key_hash}"),
            amount: request.amount,
            currency: request.currency,
            destination: request.destination,
        }
    }

    pub(crate) fn to_payload(&self) -> Vec<u8> {
        json!({
            "payment_id": self.payment_id,
            "amount": self.amount,
            "currency": self.currency,
            "destination": self.destination,
        })
        .to_string()
        .into_bytes()
    }

    pub(crate) fn from_payload(payload: &[u8]) -> Result<ChargeOrder, String> {
        let value: Value = serde_json::from_slice(payload).map_err(|e| format!("the charge is not JSON: {e}"))?;
        let field = |name: &str| {
            value.get(name).and_then(Value::as_str).map(str::to_string).ok_or(format!("the charge has no `{name}`"))
        };
        Ok(ChargeOrder {
            payment_id: field("payment_id")?,
            amount: field("amount")?,
            currency: field("currency")?,
            destination: field("destination")?,
        })
    }
}

/// The dispatcher of one service: run it beside the router ([`crate::router`]).
#[derive(Debug)]
pub struct Dispatcher<L> {
    pub(crate) app: Arc<App<L>>,
}

impl<L: Ledger> Dispatcher<L> {
    /// The reconciler of the same service, with the default interval and budget (see
    /// [`Reconciler`](crate::Reconciler)); run it beside the dispatcher.
    pub fn reconciler(&self) -> crate::Reconciler<L> {
        crate::reconcile::reconciler(Arc::clone(&self.app))
    }

    /// Dispatches charges until the task is dropped: each claimed charge on a task of its own,
    /// so a slow provider call does not hold the others.
    pub async fn run(self) {
        let app = self.app;
        loop {
            let claims = match app.ledger.store().claim_effects(BATCH).await {
                Ok(claims) => claims,
                Err(error) => {
                    eprintln!("payments-example: claiming charges failed: {error}");
                    Vec::new()
                }
            };
            if claims.is_empty() {
                tokio::select! {
                    () = app.charges.wake.notified() => {}
                    () = app.ledger.wait_for_charges() => {}
                }
                continue;
            }
            for claim in claims {
                let app = Arc::clone(&app);
                tokio::spawn(async move {
                    dispatch(&app, &claim).await;
                    app.charges.settled.send_modify(|settled| *settled = settled.wrapping_add(1));
                });
            }
        }
    }
}

/// One dispatch of one claimed charge.
async fn dispatch<L: Ledger>(app: &App<L>, claim: &OutboxItem) {
    let store = app.ledger.store();
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
            if let Err(error) = store.report_effect(claim, EffectReport::Failed { body: failure }).await {
                eprintln!("payments-example: reporting an invalid charge failed: {error}");
            }
            return;
        }
    };
    let request = ChargeRequest {
        tenant: tenant.to_string(),
        provider_key: claim.provider_key.as_str().to_string(),
        amount: order.amount.clone(),
        currency: order.currency.clone(),
        destination: order.destination.clone(),
    };
    let charge = match app.provider.charge(request).await {
        Ok(charge) => charge,
        Err(error) => {
            // The provider may or may not have charged: never guess, never charge blindly again.
            let report = EffectReport::Unknown { reason: error.to_string() };
            if let Err(error) = store.report_effect(claim, report).await {
                eprintln!("payments-example: reporting an unknown charge outcome failed: {error}");
            }
            return;
        }
    };
    let reference = charge["id"].as_str().unwrap_or_default().to_string();
    let (payment, result) = confirmed_payment(claim, &order, &reference);
    let report = EffectReport::Confirmed { reference, result };
    let Err(error) = app.ledger.record_payment(tenant, &payment, claim, Settlement::Reported(report)).await else {
        return;
    };
    eprintln!("payments-example: recording a confirmed charge failed: {error}");
    if error.outcome_unknown() {
        // The payment row may be written: the claim runs out and the charge is sent again
        // with the same provider key, which the provider answers with this same charge.
        return;
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
}

/// The payment row of a confirmed charge, and the `201` its idempotency record completes with.
pub(crate) fn confirmed_payment(item: &OutboxItem, order: &ChargeOrder, reference: &str) -> (Value, Vec<u8>) {
    let payment = json!({
        "id": order.payment_id,
        "idempotency_key": item.key.as_str(),
        "amount": order.amount,
        "currency": order.currency,
        "destination": order.destination,
        "provider_key": item.provider_key.as_str(),
        "provider_charge": reference,
        "status": "succeeded",
    });
    let location = format!("/v1/payments/{}", order.payment_id);
    let result = stored(StatusCode::CREATED, "application/json", Some(&location), &payment);
    (payment, result)
}

/// The bytes the idempotency record is completed (or failed) with: the response a retry
/// replays, as the layer stores responses.
fn stored(status: StatusCode, content_type: &'static str, location: Option<&str>, body: &Value) -> Vec<u8> {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Some(location) = location.and_then(|l| HeaderValue::from_str(l).ok()) {
        headers.insert(header::LOCATION, location);
    }
    StoredResponse::new(status, &headers, DEFAULT_REPLAY_HEADERS, body.to_string()).encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_order_survives_its_payload_and_a_bad_payload_is_refused() {
        let order = ChargeOrder {
            payment_id: "pay_1".into(),
            amount: "10.50".into(),
            currency: "BRL".into(),
            destination: "acct_x".into(),
        };
        assert_eq!(ChargeOrder::from_payload(&order.to_payload()), Ok(order));
        assert!(ChargeOrder::from_payload(b"not json").is_err());
        assert!(ChargeOrder::from_payload(br#"{"payment_id":"pay_1","amount":"1"}"#).is_err());
    }
}
