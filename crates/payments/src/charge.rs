//! The charge of a payment as the outbox carries it: what to charge (its payload), the
//! effect's name and version, and the payment row and stored `201` a confirmed charge makes.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use idemdb_core::OutboxItem;
use idemdb_http::{DEFAULT_REPLAY_HEADERS, StoredResponse};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::payment::PaymentRequest;

/// The outbox effect of a payment: its provider key is `<key>:charge-v1`.
pub const CHARGE_EFFECT: &str = "charge";
/// The version of the charge's contract with the provider (part of the provider key).
pub const CHARGE_VERSION: u16 = 1;
/// What the outbox item of a payment carries: the payment request and the payment's id (its
/// payload is this as JSON: `payment_id` beside the request's fields).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ChargeOrder {
    pub(crate) payment_id: String,
    #[serde(flatten)]
    pub(crate) payment: PaymentRequest,
}

impl ChargeOrder {
    /// The charge of a validated payment request, its payment id made from the key's hash
    /// (the same on every retry).
    pub(crate) fn for_request(payment: PaymentRequest, key_hash: idemdb_core::KeyHash) -> ChargeOrder {
        ChargeOrder { payment_id: format!("pay_{key_hash}"), payment }
    }

    pub(crate) fn to_payload(&self) -> Vec<u8> {
        // Through a JSON value, so the payload's keys are in the order they always had.
        serde_json::to_value(self).map(|value| value.to_string().into_bytes()).unwrap_or_default()
    }

    pub(crate) fn from_payload(payload: &[u8]) -> Result<ChargeOrder, String> {
        serde_json::from_slice(payload).map_err(|e| format!("the charge is not a charge order: {e}"))
    }
}

/// A confirmed payment, as the ledger keeps it and the `201` shows it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Payment<'a> {
    id: &'a str,
    idempotency_key: &'a str,
    #[serde(flatten)]
    payment: &'a PaymentRequest,
    provider_key: &'a str,
    provider_charge: &'a str,
    status: &'static str,
}

/// The payment row of a confirmed charge, and the `201` its idempotency record completes with
/// (stored encoded; retries replay it).
pub(crate) fn confirmed_payment(item: &OutboxItem, order: &ChargeOrder, reference: &str) -> (Value, StoredResponse) {
    let payment = Payment {
        id: &order.payment_id,
        idempotency_key: item.key.as_str(),
        payment: &order.payment,
        provider_key: item.provider_key.as_str(),
        provider_charge: reference,
        status: "succeeded",
    };
    let payment = serde_json::to_value(&payment).unwrap_or_default();
    let location = format!("{}/{}", crate::payment::PAYMENTS_PATH, order.payment_id);
    let response = stored(StatusCode::CREATED, "application/json", Some(&location), &payment);
    (payment, response)
}

/// The response the idempotency record is completed (or failed) with, as the layer stores
/// responses (`encode` gives its bytes): what a retry replays.
pub(crate) fn stored(
    status: StatusCode,
    content_type: &'static str,
    location: Option<&str>,
    body: &Value,
) -> StoredResponse {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Some(location) = location.and_then(|l| HeaderValue::from_str(l).ok()) {
        headers.insert(header::LOCATION, location);
    }
    StoredResponse::new(status, &headers, DEFAULT_REPLAY_HEADERS, body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_order_survives_its_payload_and_a_bad_payload_is_refused() {
        let payment = PaymentRequest { amount: "10.50".into(), currency: "BRL".into(), destination: "acct_x".into() };
        let order = ChargeOrder { payment_id: "pay_1".into(), payment };
        let payload = order.to_payload();
        // The payload's form, as stored outbox items have it.
        assert_eq!(
            String::from_utf8(payload.clone()).unwrap(),
            r#"{"amount":"10.50","currency":"BRL","destination":"acct_x","payment_id":"pay_1"}"#
        );
        assert_eq!(ChargeOrder::from_payload(&payload), Ok(order));
        assert!(ChargeOrder::from_payload(b"not json").is_err());
        assert!(ChargeOrder::from_payload(br#"{"payment_id":"pay_1","amount":"1"}"#).is_err());
    }
}
