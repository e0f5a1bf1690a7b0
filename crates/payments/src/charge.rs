//! The charge of a payment as the outbox carries it: what to charge (its payload), the
//! effect's name and version, and the payment row and stored `201` a confirmed charge makes.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use idemdb_core::OutboxItem;
use idemdb_http::{DEFAULT_REPLAY_HEADERS, StoredResponse};
use serde_json::{Value, json};

use crate::payment::PaymentRequest;

/// The outbox effect of a payment: its provider key is `<key>:charge-v1`.
pub const CHARGE_EFFECT: &str = "charge";
/// The version of the charge's contract with the provider (part of the provider key).
pub const CHARGE_VERSION: u16 = 1;
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
    pub(crate) fn for_request(request: PaymentRequest, key_hash: idemdb_core::KeyHash) -> ChargeOrder {
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
pub(crate) fn stored(status: StatusCode, content_type: &'static str, location: Option<&str>, body: &Value) -> Vec<u8> {
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
