//! A payment request, its operation's name, and the problems (RFC 9457) the service answers
//! with.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use idemdb_core::{Coded, ErrorCode};
use serde_json::{Value, json};

/// The path of the payments route (`POST`).
pub const PAYMENTS_PATH: &str = "/v1/payments";

/// The operation name of `POST /v1/payments` (its scope's operation and policy name).
pub fn payment_operation_name() -> &'static str {
    "create_payment"
}

/// A validated payment request: the one payment type the handler, the outbox's charge order,
/// the provider's charge request and the payment row carry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
