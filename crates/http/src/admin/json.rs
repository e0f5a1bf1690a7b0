//! The one JSON spelling of the queue, records, effects, deliveries and audit events: the
//! admin API, the payments example's `GET /v1/reconciliation` and the `idemdb` CLI all use
//! these. Times are milliseconds since the Unix epoch (`*_ms`); names are the core's
//! (`StateKind`, `OutboxStateKind`, `EffectDoubt`, `AuditKind`, `DeliveryOutcomeKind`).
//!
//! The tenant is never spelled in clear: it is often a credential or a customer's identity
//! (the payments example's tenant is the client's bearer token), so every spelling carries
//! its keyed hash, `tenant_hash` ([`IdempotencyStore::tenant_hash`]), as the logs do.
//!
//! [`IdempotencyStore::tenant_hash`]: idemdb_interface::IdempotencyStore::tenant_hash

use idemdb_core::{Attention, AuditEvent, KeyHash, OutboxItem, OutboxState, Record, ScopedKey, State, UncertainCause};
use idemdb_interface::ListedDelivery;
use serde_json::{Value, json};

use crate::StoredResponse;

/// One entry of the reconciliation queue: `kind` ([`AttentionKind`]: `"effect"` or
/// `"record"`), `tenant_hash`, `operation`, `key_hash`, `idempotency_key` (with `show_key`), `state`,
/// `cause`, `since_ms`; an effect adds `effect`, `provider_key` (with `show_key`),
/// `dispatches`, `last_reason`, `first_sent_at_ms`. The one spelling of an entry: the admin
/// API, the payments example and the CLI print it as it is.
///
/// [`AttentionKind`]: idemdb_core::AttentionKind
pub fn attention_json(entry: &Attention, key_hash: KeyHash, tenant_hash: KeyHash, show_key: bool) -> Value {
    let (scope, key) = entry.scoped_key();
    let mut out = json!({
        "kind": entry.kind().as_str(),
        "tenant_hash": tenant_hash.to_string(),
        "operation": scope.operation(),
        "key_hash": key_hash.to_string(),
        "since_ms": entry.since().as_millis(),
    });
    if show_key {
        out["idempotency_key"] = json!(key.as_str());
    }
    match entry {
        Attention::Effect { item, .. } => {
            out["effect"] = json!(item.effect.as_str());
            out["state"] = json!(item.state.kind().as_str());
            out["cause"] = json!(effect_cause(&item.state));
            out["dispatches"] = json!(item.dispatches);
            out["last_reason"] = json!(item.last_reason);
            out["first_sent_at_ms"] = json!(item.first_sent_at.map(|at| at.as_millis()));
            if show_key {
                out["provider_key"] = json!(item.provider_key.as_str());
            }
        }
        Attention::Record { record, .. } => {
            out["state"] = json!(record.state.kind().as_str());
            out["cause"] = json!(record_cause(&record.state));
        }
        _ => {}
    }
    out
}

fn effect_cause(state: &OutboxState) -> Option<&'static str> {
    match state {
        OutboxState::Uncertain { cause } => Some(cause.as_str()),
        _ => None,
    }
}

fn record_cause(state: &State) -> Option<&'static str> {
    match state {
        State::Uncertain { cause } => Some(UncertainCause::as_str(*cause)),
        _ => None,
    }
}

/// One outbox item: `tenant_hash`, `operation`, `key_hash`, `effect`, `version`, `state`,
/// `reference` (confirmed), `cause` (uncertain), `dispatches`, `in_doubt`, `last_reason`,
/// `first_sent_at_ms`, `created_at_ms`, `updated_at_ms`, `payload_bytes`; with `show_key`
/// also `idempotency_key` and `provider_key`.
pub fn effect_json(item: &OutboxItem, key_hash: KeyHash, tenant_hash: KeyHash, show_key: bool) -> Value {
    let reference = match &item.state {
        OutboxState::Confirmed { reference } => Some(reference.as_str()),
        _ => None,
    };
    let mut out = json!({
        "tenant_hash": tenant_hash.to_string(),
        "operation": item.scope.operation(),
        "key_hash": key_hash.to_string(),
        "effect": item.effect.as_str(),
        "version": item.version,
        "state": item.state.kind().as_str(),
        "reference": reference,
        "cause": effect_cause(&item.state),
        "dispatches": item.dispatches,
        "in_doubt": item.in_doubt,
        "last_reason": item.last_reason,
        "first_sent_at_ms": item.first_sent_at.map(|at| at.as_millis()),
        "created_at_ms": item.created_at.as_millis(),
        "updated_at_ms": item.updated_at.as_millis(),
        "payload_bytes": item.payload.len(),
    });
    if show_key {
        out["idempotency_key"] = json!(item.key.as_str());
        out["provider_key"] = json!(item.provider_key.as_str());
    }
    out
}

/// One record: `tenant_hash`, `operation`, `key_hash`, `idempotency_key`, `state`, `cause`,
/// `fingerprint` (64 hex digits), `fence`, `attempts`, `created_at_ms`, `updated_at_ms`,
/// `lease_expires_at_ms` (in progress), `expires_at_ms` (completed, failed), `stored_bytes`,
/// and `response` (`status`, `headers`, `body` as text) when the stored result is an HTTP
/// response of the layer.
pub fn record_json(scoped: &ScopedKey, record: &Record, key_hash: KeyHash, tenant_hash: KeyHash) -> Value {
    let (stored, expires_at, lease_expires_at) = match &record.state {
        State::Completed { result, expires_at, .. } => (Some(result), Some(expires_at.as_millis()), None),
        State::Failed { error, expires_at, .. } => (Some(error), Some(expires_at.as_millis()), None),
        State::InProgress { lease_expires_at } => (None, None, Some(lease_expires_at.as_millis())),
        _ => (None, None, None),
    };
    let response = stored.and_then(|bytes| StoredResponse::decode(bytes).ok()).map(|response| {
        let headers: serde_json::Map<String, Value> = response
            .headers()
            .iter()
            .map(|(name, value)| (name.as_str().to_string(), json!(String::from_utf8_lossy(value.as_bytes()))))
            .collect();
        json!({
            "status": response.status().as_u16(),
            "headers": headers,
            "body": String::from_utf8_lossy(response.body()),
        })
    });
    json!({
        "tenant_hash": tenant_hash.to_string(),
        "operation": scoped.scope.operation(),
        "key_hash": key_hash.to_string(),
        "idempotency_key": scoped.key.as_str(),
        "state": record.state.kind().as_str(),
        "cause": record_cause(&record.state),
        "fingerprint": record.fingerprint.to_hex(),
        "fence": record.fence,
        "attempts": record.attempts,
        "created_at_ms": record.created_at.as_millis(),
        "updated_at_ms": record.updated_at.as_millis(),
        "lease_expires_at_ms": lease_expires_at,
        "expires_at_ms": expires_at,
        "stored_bytes": stored.map(Vec::len),
        "response": response,
    })
}

/// One audit event: `at_ms`, `kind`, `fence`, `correlation`, and `cause` (a resolution's
/// [`ResolutionCause`](idemdb_core::ResolutionCause) name, `null` for other events).
pub fn event_json(event: &AuditEvent) -> Value {
    json!({
        "at_ms": event.at.as_millis(),
        "kind": event.kind.as_str(),
        "fence": event.fence,
        "correlation": event.correlation,
        "cause": event.cause().map(|cause| cause.as_str()),
    })
}

/// One inbox delivery: `source`, `delivery_id`, `object_id`, `version`, `state`, `outcome`,
/// `received_at_ms`.
pub fn delivery_json(delivery: &ListedDelivery) -> Value {
    json!({
        "source": delivery.source,
        "delivery_id": delivery.delivery_id,
        "object_id": delivery.record.object_id,
        "version": delivery.record.version,
        "state": delivery.record.state,
        "outcome": delivery.record.outcome.kind().as_str(),
        "received_at_ms": delivery.record.received_at.as_millis(),
    })
}
