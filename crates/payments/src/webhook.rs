//! `POST /v1/webhooks/provider`: the provider's webhooks through the inbox. A delivery id seen
//! before gets its earlier outcome back and changes nothing; a new delivery is applied to its
//! object only when it carries a newer version of it ([`NewerVersion`]), so deliveries that
//! arrive out of order never move an object back.
//!
//! The body: `{"delivery_id": "evt_1", "object_id": "ch_...", "version": 2, "state":
//! "refunded", ...}` (other fields are kept with the object). With a webhook secret
//! (`--webhook-secret` or `PAYMENTS_WEBHOOK_SECRET`) every delivery is verified first
//! (Standard Webhooks `v1`: `webhook-id`, `webhook-timestamp` within 5 minutes,
//! `webhook-signature`), and its `delivery_id` must be its `webhook-id`. Versions more than
//! [`MAX_VERSION_STEP`] ahead of the applied one are refused (recorded as an invalid
//! transition, never applied), so a forged `2^63` cannot make every later version stale.

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use idemdb_core::{Canonicalizer, Coded, Delivery, DeliveryOutcome, ErrorCode, InboxAnswer, NewerVersionWithin};
use idemdb_interface::WorkflowStore;
use serde_json::{Map, Value, json};

use crate::app::App;
use crate::backend::Backend;
use crate::payment::problem;

/// Where the provider delivers its webhooks.
pub const WEBHOOK_PATH: &str = "/v1/webhooks/provider";
/// The inbox's source name of the provider's deliveries.
pub const WEBHOOK_SOURCE: &str = "provider";
/// Largest webhook body accepted, in bytes.
pub const MAX_WEBHOOK_BYTES: usize = 16 * 1024;
/// The largest step ahead of an object's applied version that a delivery may take.
pub const MAX_VERSION_STEP: u64 = 1_000_000;

/// Parses a webhook body into a delivery of [`WEBHOOK_SOURCE`]: `delivery_id` and `object_id`
/// strings (1..=255 bytes of visible ASCII), `version` an integer, `state` a string; the
/// fingerprint is the body's canonical JSON (RFC 8785), so a redelivery with its fields in
/// another order or spacing is the same delivery.
///
/// # Errors
/// A message saying what is wrong.
pub fn parse_delivery(body: &[u8]) -> Result<Delivery, String> {
    let fingerprint =
        Canonicalizer::new().fingerprint(body).map_err(|e| format!("the body is not canonical JSON: {e}"))?;
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let text = |name: &str| value.get(name).and_then(Value::as_str).ok_or(format!("`{name}` must be a string"));
    let version = value
        .get("version")
        .and_then(Value::as_u64)
        .ok_or("`version` must be a non-negative integer (the provider's version of the object)")?;
    Delivery::new(
        WEBHOOK_SOURCE,
        text("delivery_id")?,
        text("object_id")?,
        version,
        text("state")?,
        fingerprint,
        body.to_vec(),
    )
    .map_err(|e| e.to_string())
}

/// The handler.
pub(crate) async fn receive<B: Backend>(State(app): State<Arc<App<B>>>, headers: HeaderMap, body: Bytes) -> Response {
    let verified = match &app.webhooks {
        Some(verifier) => match verifier.verify(&headers, &body, SystemTime::now()) {
            Ok(verified) => Some(verified),
            Err(error) => return problem(StatusCode::UNAUTHORIZED, "invalid-signature", &error.to_string()),
        },
        None => None,
    };
    let delivery = match parse_delivery(&body) {
        Ok(delivery) => delivery,
        Err(detail) => return problem(StatusCode::BAD_REQUEST, "invalid-webhook", &detail),
    };
    if verified.is_some_and(|verified| verified.id() != delivery.delivery_id) {
        return problem(StatusCode::BAD_REQUEST, "invalid-webhook", "`delivery_id` must be the delivery's webhook-id");
    }
    let store = app.backend.store();
    let guard = NewerVersionWithin { max_step: MAX_VERSION_STEP };
    let answer = match store.accept_delivery(&delivery, guard).await {
        Ok(answer) => answer,
        Err(error) if error.code() == ErrorCode::DeliveryMismatch => {
            let detail = "this delivery id was delivered before with a different body";
            return problem(StatusCode::UNPROCESSABLE_ENTITY, "delivery-mismatch", detail);
        }
        Err(_) => {
            return problem(StatusCode::SERVICE_UNAVAILABLE, "inbox-unavailable", "the delivery could not be recorded");
        }
    };
    let mut body = Map::new();
    body.insert("delivery_id".into(), delivery.delivery_id.clone().into());
    match &answer {
        InboxAnswer::Applied => {
            body.insert("outcome".into(), "applied".into());
        }
        InboxAnswer::Duplicate { earlier } => {
            body.insert("outcome".into(), "duplicate".into());
            body.insert("earlier".into(), outcome(earlier));
        }
        InboxAnswer::Stale { current_version } => {
            body.insert("outcome".into(), "stale".into());
            body.insert("current_version".into(), (*current_version).into());
        }
        InboxAnswer::InvalidTransition { from, to } => {
            body.insert("outcome".into(), "invalid_transition".into());
            body.insert("from".into(), from.clone().into());
            body.insert("to".into(), to.clone().into());
        }
        _ => {
            body.insert("outcome".into(), "other".into());
        }
    }
    // The object as the applied deliveries left it (after this one, if it applied).
    let object = match store.object(WEBHOOK_SOURCE, &delivery.object_id).await {
        Ok(Some(object)) => json!({
            "id": delivery.object_id,
            "version": object.version,
            "state": object.state,
            "applied_delivery_id": object.delivery_id,
        }),
        Ok(None) => Value::Null,
        Err(_) => {
            return problem(StatusCode::SERVICE_UNAVAILABLE, "inbox-unavailable", "the object could not be read");
        }
    };
    body.insert("object".into(), object);
    ([(header::CONTENT_TYPE, "application/json")], Value::Object(body).to_string()).into_response()
}

fn outcome(earlier: &DeliveryOutcome) -> Value {
    match earlier {
        DeliveryOutcome::Applied => json!({"outcome": "applied"}),
        DeliveryOutcome::Stale { current_version } => json!({"outcome": "stale", "current_version": current_version}),
        DeliveryOutcome::InvalidTransition { from } => json!({"outcome": "invalid_transition", "from": from}),
        _ => json!({"outcome": "other"}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_bodies_are_validated_and_fingerprinted_canonically() {
        let a =
            parse_delivery(br#"{"delivery_id":"evt_1","object_id":"ch_1","version":2,"state":"refunded"}"#).unwrap();
        let b =
            parse_delivery(br#"{ "state": "refunded", "version": 2, "object_id": "ch_1", "delivery_id": "evt_1" }"#)
                .unwrap();
        assert_eq!((a.delivery_id.as_str(), a.object_id.as_str(), a.version), ("evt_1", "ch_1", 2));
        assert_eq!(a.fingerprint, b.fingerprint, "the same delivery, spelled differently");
        let c =
            parse_delivery(br#"{"delivery_id":"evt_1","object_id":"ch_1","version":3,"state":"refunded"}"#).unwrap();
        assert_ne!(a.fingerprint, c.fingerprint);
        for bad in [
            "not json",
            r#"{"object_id":"ch_1","version":2,"state":"refunded"}"#,
            r#"{"delivery_id":"evt_1","object_id":"ch_1","version":"2","state":"refunded"}"#,
            r#"{"delivery_id":"evt_1","object_id":"ch_1","version":-1,"state":"refunded"}"#,
            r#"{"delivery_id":"","object_id":"ch_1","version":2,"state":"refunded"}"#,
            r#"{"delivery_id":"evt 1","object_id":"ch_1","version":2,"state":"refunded"}"#,
        ] {
            assert!(parse_delivery(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
