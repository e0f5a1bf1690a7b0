//! The published idempotency policy (the IETF draft asks a server to publish its expiry
//! policy): served at [`POLICY_PATH`].

use idemdb_core::Policy;
use serde_json::{Value, json};

/// Where the policy is published.
pub const POLICY_PATH: &str = "/v1/idempotency-policy";

/// The policy document for `POST /v1/payments` under `policy`.
pub fn published_policy(policy: &Policy) -> Value {
    let response_ttl = policy.response_ttl().as_secs();
    json!({
        "header": "Idempotency-Key",
        "key": {
            "syntax": "RFC 8941 structured-field string, for example \"8e03978e-40d5-43e8-bc93-6894a57f9324\"",
            "bytes": {"min": 1, "max": 255},
            "alphabet": "visible ASCII (0x21-0x7E)",
            "recommended": "a UUID v4 made when the intent is created and reused by every retry",
        },
        "operations": [{
            "method": "POST",
            "path": "/v1/payments",
            "key_required": true,
            "scope": "the tenant of the bearer token and the operation create_payment",
            "fingerprint": "method, path and the RFC 8785 canonical JSON body; currency case and amount spelling normalised; trace_id excluded",
            "lease_ttl_seconds": policy.lease_ttl().as_secs(),
            "response_ttl_seconds": response_ttl,
            "tombstone_ttl_seconds": policy.tombstone_ttl().as_secs(),
            "expired_lease": policy.expired_lease().as_str(),
            "max_stored_response_bytes": policy.max_result_bytes(),
            "stored_responses": "the first response, 5xx included; refusals before the handler ran are never stored",
        }],
        "expiry": format!(
            "a response is replayed for {} days; then only a tombstone remains for {} more days, and a retry gets 410 instead of a second execution",
            response_ttl / 86_400,
            policy.tombstone_ttl().as_secs() / 86_400
        ),
        "answers": {
            "replay": "the stored status, headers and body, with Idempotent-Replayed: true",
            "400": "key missing or invalid",
            "409": "a request with this key is in progress (Retry-After), or its outcome is uncertain (needs-reconciliation)",
            "410": "the stored response expired",
            "422": "the key was used for a different request",
        },
    })
}
