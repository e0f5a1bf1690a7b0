//! `POST /v1/payments`: validate, find the charge the layer enqueued in the outbox with the
//! reservation (one commit; provider key `<key>:charge-v1`), and answer once the dispatcher has
//! settled it (the dispatcher writes the payment row and completes the idempotency record in
//! one commit).

use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use idemdb_core::{Coded, ErrorCode, OutboxStateKind, State as RecordState};
use idemdb_http::{LeaseHandle, StoredResponse};
use idemdb_interface::{IdempotencyStore, WorkflowStore};
use serde_json::{Value, json};

use crate::App;
use crate::dispatch::{CHARGE_VERSION, ChargeOrder};
use crate::ledger::Ledger;

/// The operation name of `POST /v1/payments` (its scope's operation and policy name).
pub fn payment_operation_name() -> &'static str {
    "create_payment"
}

/// A validated payment request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentRequest {
    /// Decimal amount, as sent (`"10.50"`).
    pub amount: String,
    /// ISO 4217 code, upper case.
    pub currency: String,
    /// Destination account.
    pub destination: String,
}

impl PaymentRequest {
    /// Parses and validates a JSON body: `amount` a positive decimal string with at most two
    /// decimals, `currency` three letters, `destination` a non-empty string.
    ///
    /// # Errors
    /// A message saying what is wrong.
    pub fn parse(body: &[u8]) -> Result<PaymentRequest, String> {
        let value: Value = serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
        let field = |name: &str| value.get(name).and_then(Value::as_str).map(str::trim);
        let amount = field("amount").ok_or("`amount` must be a decimal string such as \"10.50\"")?;
        let (units, cents) = amount.split_once('.').unwrap_or((amount, ""));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(units) || (!cents.is_empty() && !digits(cents)) || cents.len() > 2 || units.len() > 12 {
            return Err(format!("`amount` {amount:?} is not a decimal with at most two decimals"));
        }
        if amount.bytes().all(|b| b == b'0' || b == b'.') {
            return Err("`amount` must be positive".into());
        }
        let currency = field("currency").ok_or("`currency` is required")?.to_ascii_uppercase();
        if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(format!("`currency` {currency:?} is not an ISO 4217 code"));
        }
        let destination = field("destination").filter(|d| !d.is_empty()).ok_or("`destination` is required")?;
        if destination.len() > 64 {
            return Err("`destination` is longer than 64 bytes".into());
        }
        Ok(PaymentRequest { amount: amount.to_string(), currency, destination: destination.to_string() })
    }
}

/// An application problem (RFC 9457), for what the handler itself refuses. A 503 carries
/// `Retry-After: 1` (and `retry_after` in the body): it says "nothing was decided, ask again".
pub(crate) fn problem(status: StatusCode, slug: &str, detail: &str) -> Response {
    let mut body = json!({
        "type": format!("urn:payments-example:problem:{slug}"),
        "title": slug.replace('-', " "),
        "status": status.as_u16(),
        "detail": detail,
    });
    if status == StatusCode::SERVICE_UNAVAILABLE {
        body["retry_after"] = json!(RETRY_AFTER_SECONDS);
        let headers = [(header::CONTENT_TYPE, "application/problem+json"), (header::RETRY_AFTER, "1")];
        return (status, headers, body.to_string()).into_response();
    }
    (status, [(header::CONTENT_TYPE, "application/problem+json")], body.to_string()).into_response()
}

/// The `Retry-After` of every 503 the example answers.
const RETRY_AFTER_SECONDS: u64 = 1;

/// Whether a failed store call is known to have changed nothing (the database was unreachable,
/// refused or rolled back): only a commit whose outcome is unknown may have.
pub(crate) fn nothing_changed(error: &impl Coded) -> bool {
    error.code() != ErrorCode::CommitUnknown
}

/// The handler. The layer has reserved the key before it runs, so it runs at most once per
/// key. It enqueues the charge and waits (at most the operation's lease TTL) for the
/// dispatcher: a confirmed charge has completed the record with the payment's `201`, which the
/// handler answers with as a retry would replay it.
pub(crate) async fn create<L: Ledger>(
    State(app): State<Arc<App<L>>>,
    Extension(handle): Extension<LeaseHandle<L::Store>>,
    body: Bytes,
) -> Response {
    let request = match PaymentRequest::parse(&body) {
        Ok(request) => request,
        Err(detail) => {
            // Nothing happened: release the key so the corrected request may use it.
            let _ = handle.release().await;
            return problem(StatusCode::BAD_REQUEST, "invalid-payment", &detail);
        }
    };
    let (scope, key) = (handle.scope(), handle.key());
    let store = app.ledger.store();
    let order = ChargeOrder::for_request(request, handle.key_hash());
    if app.provider.crashes_after_reserve(&order.destination) {
        eprintln!("payments-example: fault injection: aborting after the reservation, before the charge is sent");
        std::process::abort();
    }
    // The layer enqueued the charge with the reservation (`payment_operation`); a router
    // whose operation does not has the handler enqueue it, in a commit of its own.
    let enqueued = match store.effect(&scope, &key, &app.charges.effect).await {
        Ok(Some(item)) => Ok(item),
        Ok(None) => {
            store.enqueue_effect(&handle.lease(), &app.charges.effect, CHARGE_VERSION, order.to_payload()).await
        }
        Err(error) => Err(error),
    };
    let item = match enqueued {
        Ok(item) => item,
        Err(error) if nothing_changed(&error) => {
            // Nothing was enqueued (the store says so): release the key, a retry runs again.
            let _ = handle.release().await;
            return problem(StatusCode::SERVICE_UNAVAILABLE, "outbox-unavailable", "the charge could not be enqueued");
        }
        Err(_) => {
            // Whether the charge was enqueued is not known: never guess.
            let _ = handle.mark_uncertain().await;
            return problem(StatusCode::SERVICE_UNAVAILABLE, "outbox-unavailable", "the charge could not be enqueued");
        }
    };
    app.charges.wake();
    let limit = store.policy(scope.operation()).lease_ttl();
    let unreadable = || async {
        // The charge is enqueued and the dispatcher settles it: the layer must not store this
        // 503 as the payment's answer. Marked uncertain (or, if the store cannot even do that,
        // left in progress), the record is completed by the dispatcher's report, and the
        // reconciler decides what the provider did if that report is lost.
        let _ = handle.mark_uncertain().await;
        problem(StatusCode::SERVICE_UNAVAILABLE, "store-unavailable", "the payment's state could not be read")
    };
    let settled = match app.charges.settled(store, &item, limit).await {
        Ok(settled) => settled,
        Err(_) => return unreadable().await,
    };
    if let Some(OutboxStateKind::Confirmed | OutboxStateKind::Failed) = settled {
        let record = match store.get(&scope, &key).await {
            Ok(record) => record,
            Err(_) => return unreadable().await,
        };
        if let Some(record) = record
            && let RecordState::Completed { result: stored, .. } | RecordState::Failed { error: stored, .. } =
                &record.state
            && let Ok(response) = StoredResponse::decode(stored)
        {
            let _ = handle.completed_by_handler();
            return response.into_response::<axum::body::Body>(false);
        }
    }
    // Unknown (the provider's answer was lost), or not settled in time: retries are refused
    // until the charge is reconciled; the dispatcher's later report settles the record.
    let _ = handle.mark_uncertain().await;
    problem(StatusCode::BAD_GATEWAY, "provider-uncertain", "the provider did not confirm the charge")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payment_requests_are_validated() {
        let ok = PaymentRequest::parse(br#"{"amount":"10.50","currency":"brl","destination":"acct_x"}"#).unwrap();
        assert_eq!(ok, PaymentRequest { amount: "10.50".into(), currency: "BRL".into(), destination: "acct_x".into() });
        for bad in [
            r#"{"amount":10.5,"currency":"BRL","destination":"a"}"#,
            r#"{"amount":"10.505","currency":"BRL","destination":"a"}"#,
            r#"{"amount":"0.00","currency":"BRL","destination":"a"}"#,
            r#"{"amount":"-1","currency":"BRL","destination":"a"}"#,
            r#"{"amount":"1","currency":"REAL","destination":"a"}"#,
            r#"{"amount":"1","currency":"BRL","destination":""}"#,
            r#"{"amount":"1","currency":"BRL"}"#,
            "not json",
        ] {
            assert!(PaymentRequest::parse(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
