//! The published idempotency policy (the IETF draft asks a server to publish its expiry
//! policy): served at [`POLICY_PATH`].

use idemdb_core::Policy;
use idemdb_http::Operation;
use serde_json::{Value, json};

/// Where the policy is published.
pub const POLICY_PATH: &str = "/v1/idempotency-policy";

/// The policy document for `POST /v1/payments` under the store's `policy` and the layer's
/// `operation`: every limit either enforces.
pub fn published_policy(policy: &Policy, operation: &Operation) -> Value {
    let response_ttl = policy.response_ttl().as_secs();
    let limits = operation.published_limits();
    let mut key = limits["key"].clone();
    key["recommended"] = "a UUID v4 made when the intent is created and reused by every retry".into();
    key["derived_provider_key"] = "<key>:charge-v1, or its hashed form when that is over 255 bytes".into();
    json!({
        "header": "Idempotency-Key",
        "key": key,
        "operations": [{
            "method": "POST",
            "path": crate::payment::PAYMENTS_PATH,
            "key_required": limits["key"]["required"].clone(),
            "scope": "the tenant of the bearer token and the operation create_payment",
            "fingerprint": {
                "of": "method, path and the RFC 8785 canonical JSON body; currency case and amount spelling normalised; trace_id excluded",
                "caveats": limits["fingerprint"]["caveats"].clone(),
            },
            "max_body_bytes": limits["max_body_bytes"].clone(),
            "retry_after": limits["retry_after"].clone(),
            "lease_ttl_seconds": policy.lease_ttl().as_secs(),
            "response_ttl_seconds": response_ttl,
            "tombstone_ttl_seconds": policy.tombstone_ttl().as_secs(),
            "expired_lease": policy.expired_lease().as_str(),
            "max_stored_response_bytes": policy.max_result_bytes(),
            "stored_responses": "the first response, 5xx included; a 400 (the body failed validation, nothing was done) releases the key; refusals before the handler ran are never stored",
        }],
        "expiry": format!(
            "a response is replayed for {} days; then only a tombstone remains for {} more days, and a retry gets 410 instead of a second execution",
            response_ttl / 86_400,
            policy.tombstone_ttl().as_secs() / 86_400
        ),
        "answers": {
            "replay": "the stored status, headers and body, with Idempotent-Replayed: true",
            "400": "key missing or invalid (the detail says what to send), or the body failed validation (the key stays free)",
            "409": "a request with this key is in progress (Retry-After), or its outcome is uncertain (needs-reconciliation)",
            "410": "the stored response expired",
            "413": "the body is over max_body_bytes",
            "422": "the key was used for a different request",
        },
    })
}
