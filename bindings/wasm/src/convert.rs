//! Values across the JS boundary: typed errors (real `Error` objects with a stable `code`),
//! plain result objects, option parsing.

use std::fmt::Display;
use std::time::Duration;

use idemdb::{
    AttemptOutcome, CanonicalError, Canonicalizer, Error, ExpiredLease, Intent, IntentError, IntentState, KeyError,
    Normaliser, OpenError, Policy, Record, Reservation, State, TransitionError,
};
use js_sys::{Array, Object, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;

/// A JS `Error` with `name = "IdemdbError"` and a stable `code`; the npm package turns it into
/// the subclass that matches the code.
pub(crate) fn js_error(code: &str, message: impl Display) -> JsValue {
    let error = js_sys::Error::new(&message.to_string());
    error.set_name("IdemdbError");
    let _ = Reflect::set(&error, &"code".into(), &code.into());
    error.into()
}

pub(crate) fn invalid(message: impl Display) -> JsValue {
    js_error("IDEMDB_INVALID_ARGUMENT", message)
}

pub(crate) fn from_key(error: KeyError) -> JsValue {
    js_error("IDEMDB_INVALID_KEY", error)
}

pub(crate) fn from_canonical(error: CanonicalError) -> JsValue {
    js_error("IDEMDB_INVALID_REQUEST", error)
}

pub(crate) fn from_transition(error: TransitionError) -> JsValue {
    let code = match &error {
        TransitionError::StaleFence { .. } => "IDEMDB_STALE_LEASE",
        TransitionError::WrongState { .. } => "IDEMDB_WRONG_STATE",
        TransitionError::LeaseLive { .. } => "IDEMDB_LEASE_LIVE",
        TransitionError::ResultTooLarge { .. } => "IDEMDB_TOO_LARGE",
        _ => "IDEMDB_WRONG_STATE",
    };
    js_error(code, error)
}

pub(crate) fn from_store(error: Error) -> JsValue {
    let reopen = error.reopen_required();
    let value = match error {
        Error::Transition(error) => return from_transition(error),
        Error::Key(error) => return from_key(error),
        Error::NotFound => js_error("IDEMDB_NOT_FOUND", "no record for this key"),
        Error::Corrupt { .. } => js_error("IDEMDB_CORRUPT", error),
        Error::CommitUnknown(_) => js_error("IDEMDB_COMMIT_UNKNOWN", error),
        Error::NoRandomness => js_error("IDEMDB_NO_RANDOMNESS", error),
        other => js_error("IDEMDB_STORAGE", other),
    };
    let _ = Reflect::set(&value, &"reopenRequired".into(), &reopen.into());
    value
}

pub(crate) fn from_intent(error: IntentError) -> JsValue {
    match error {
        IntentError::Store(error) => from_store(error),
        IntentError::Request(error) => from_canonical(error),
        IntentError::NotFound => js_error("IDEMDB_NOT_FOUND", "no intent for this key"),
        IntentError::KeyReused => js_error("IDEMDB_KEY_REUSED", IntentError::KeyReused),
        error @ IntentError::Finished { .. } => js_error("IDEMDB_INTENT_FINISHED", error),
        IntentError::Invalid(message) => invalid(message),
        other => js_error("IDEMDB_STORAGE", other),
    }
}

pub(crate) fn from_open(error: OpenError) -> JsValue {
    let code = match &error {
        OpenError::AlreadyOpen => "IDEMDB_STORE_BUSY",
        OpenError::NotAStore { .. } | OpenError::CorruptMeta(_) => "IDEMDB_NOT_A_STORE",
        OpenError::Foreign { .. } => "IDEMDB_FOREIGN",
        OpenError::NewerFormat { .. } => "IDEMDB_NEWER_FORMAT",
        OpenError::OlderFormat { .. } => "IDEMDB_OLDER_FORMAT",
        OpenError::Policy { .. } => "IDEMDB_INVALID_POLICY",
        _ => "IDEMDB_STORAGE",
    };
    js_error(code, error)
}

/// Builds a plain JS object.
pub(crate) struct Obj(Object);

impl Obj {
    pub(crate) fn new() -> Self {
        Obj(Object::new())
    }

    pub(crate) fn set(self, key: &str, value: impl Into<JsValue>) -> Self {
        // Defining a property of a fresh plain object cannot fail.
        let _ = Reflect::set(&self.0, &key.into(), &value.into());
        self
    }

    pub(crate) fn bytes(self, key: &str, bytes: &[u8]) -> Self {
        self.set(key, Uint8Array::from(bytes))
    }

    pub(crate) fn build(self) -> JsValue {
        self.0.into()
    }
}

/// A property of an options object; `None` when absent, `undefined` or `null`.
pub(crate) fn get(options: &JsValue, key: &str) -> Option<JsValue> {
    if !options.is_object() {
        return None;
    }
    Reflect::get(options, &key.into()).ok().filter(|v| !v.is_undefined() && !v.is_null())
}

fn get_number(options: &JsValue, key: &str) -> Result<Option<f64>, JsValue> {
    match get(options, key) {
        None => Ok(None),
        Some(value) => match value.as_f64() {
            Some(n) if n.is_finite() && n >= 0.0 => Ok(Some(n)),
            _ => Err(invalid(format!("option {key} must be a non-negative number"))),
        },
    }
}

fn get_string(options: &JsValue, key: &str) -> Result<Option<String>, JsValue> {
    match get(options, key) {
        None => Ok(None),
        Some(value) => value.as_string().map(Some).ok_or_else(|| invalid(format!("option {key} must be a string"))),
    }
}

fn millis(ms: f64) -> Duration {
    Duration::from_millis(ms as u64)
}

/// Parses `{ leaseTtlMs, responseTtlMs, tombstoneTtlMs, maxResultBytes, expiredLease }`.
pub(crate) fn policy(options: &JsValue) -> Result<Policy, JsValue> {
    let mut policy = Policy::default();
    if let Some(ms) = get_number(options, "leaseTtlMs")? {
        policy = policy.with_lease_ttl(millis(ms));
    }
    if let Some(ms) = get_number(options, "responseTtlMs")? {
        policy = policy.with_response_ttl(millis(ms));
    }
    if let Some(ms) = get_number(options, "tombstoneTtlMs")? {
        policy = policy.with_tombstone_ttl(millis(ms));
    }
    if let Some(bytes) = get_number(options, "maxResultBytes")? {
        policy = policy.with_max_result_bytes(bytes as usize);
    }
    match get_string(options, "expiredLease")?.as_deref() {
        None | Some("uncertain") => {}
        Some("takeover") => policy = policy.with_expired_lease(ExpiredLease::Takeover),
        Some(other) => return Err(invalid(format!("expiredLease must be 'uncertain' or 'takeover', not {other:?}"))),
    }
    Ok(policy)
}

/// Parses `{ exclude: string[], normalise: { [pointer]: 'trim' | 'uppercase' | 'lowercase' |
/// 'decimal' }, maxBodyBytes }`.
pub(crate) fn canonicalizer(options: &JsValue) -> Result<Canonicalizer, JsValue> {
    let mut canon = Canonicalizer::new();
    if let Some(bytes) = get_number(options, "maxBodyBytes")? {
        canon = canon.max_body_bytes(bytes as usize);
    }
    if let Some(exclude) = get(options, "exclude") {
        let exclude: Array = exclude.dyn_into().map_err(|_| invalid("exclude must be an array of JSON pointers"))?;
        for pointer in exclude.iter() {
            let pointer = pointer.as_string().ok_or_else(|| invalid("exclude must be an array of JSON pointers"))?;
            canon = canon.exclude(&pointer).map_err(from_canonical)?;
        }
    }
    if let Some(normalise) = get(options, "normalise") {
        let normalise: Object = normalise.dyn_into().map_err(|_| invalid("normalise must be an object"))?;
        for entry in Object::entries(&normalise).iter() {
            let entry = Array::from(&entry);
            let pointer = entry.get(0).as_string().unwrap_or_default();
            let normaliser = match entry.get(1).as_string().as_deref() {
                Some("trim") => Normaliser::Trim,
                Some("uppercase") => Normaliser::Uppercase,
                Some("lowercase") => Normaliser::Lowercase,
                Some("decimal") => Normaliser::DecimalAmount,
                _ => {
                    return Err(invalid(format!(
                        "normaliser of {pointer:?} must be trim, uppercase, lowercase or decimal"
                    )));
                }
            };
            canon = canon.normalise(&pointer, normaliser).map_err(from_canonical)?;
        }
    }
    Ok(canon)
}

pub(crate) fn attempt_outcome(kind: &str, status: Option<u16>) -> Result<AttemptOutcome, JsValue> {
    Ok(match (kind, status) {
        ("sent", _) => AttemptOutcome::Sent,
        ("network_error", _) => AttemptOutcome::NetworkError,
        ("timeout", _) => AttemptOutcome::Timeout,
        ("status", Some(status)) => AttemptOutcome::Status(status),
        _ => {
            return Err(invalid(format!(
                "attempt outcome must be sent, network_error, timeout or status (with a status), not {kind:?}"
            )));
        }
    })
}

fn outcome_object(outcome: AttemptOutcome) -> Obj {
    match outcome {
        AttemptOutcome::Sent => Obj::new().set("outcome", "sent"),
        AttemptOutcome::NetworkError => Obj::new().set("outcome", "network_error"),
        AttemptOutcome::Timeout => Obj::new().set("outcome", "timeout"),
        AttemptOutcome::Status(status) => Obj::new().set("outcome", "status").set("status", status),
        _ => Obj::new().set("outcome", "unknown"),
    }
}

pub(crate) fn intent(intent: &Intent) -> JsValue {
    let mut out = Obj::new()
        .set("tenant", intent.scope.tenant())
        .set("operation", intent.scope.operation())
        .set("key", intent.key.as_str())
        .bytes("request", &intent.request)
        .set("fingerprint", intent.fingerprint.to_hex())
        .set("state", intent.state.name())
        .set("attempts", intent.attempts)
        .set("createdAt", intent.created_at.as_millis() as f64)
        .set("updatedAt", intent.updated_at.as_millis() as f64);
    out = match &intent.last_attempt {
        Some(attempt) => {
            out.set("lastAttempt", outcome_object(attempt.outcome).set("at", attempt.at.as_millis() as f64).build())
        }
        None => out.set("lastAttempt", JsValue::NULL),
    };
    match &intent.state {
        IntentState::Completed { response } => {
            let headers = Array::new();
            for (name, value) in &response.headers {
                headers.push(&Array::of2(&name.into(), &value.into()));
            }
            let response =
                Obj::new().set("status", response.status).set("headers", headers).bytes("body", &response.body).build();
            out.set("response", response).build()
        }
        IntentState::Abandoned { reason } => out.set("reason", reason.as_str()).build(),
        _ => out.build(),
    }
}

pub(crate) fn headers(value: &JsValue) -> Result<Vec<(String, String)>, JsValue> {
    if value.is_undefined() || value.is_null() {
        return Ok(Vec::new());
    }
    let message = "headers must be an array of [name, value] string pairs";
    let array: Array = value.clone().dyn_into().map_err(|_| invalid(message))?;
    array
        .iter()
        .map(|pair| {
            let pair: Array = pair.dyn_into().map_err(|_| invalid(message))?;
            match (pair.get(0).as_string(), pair.get(1).as_string()) {
                (Some(name), Some(value)) => Ok((name, value)),
                _ => Err(invalid(message)),
            }
        })
        .collect()
}

pub(crate) fn reservation(reservation: Reservation, lease: impl FnOnce(idemdb::Lease) -> JsValue) -> JsValue {
    match reservation {
        Reservation::Acquired(l) => Obj::new().set("status", "acquired").set("lease", lease(l)).build(),
        Reservation::Replay { outcome, body } => {
            Obj::new().set("status", "replay").set("outcome", outcome.to_string()).bytes("body", &body).build()
        }
        Reservation::InProgress { retry_after } => {
            Obj::new().set("status", "in_progress").set("retryAfterMs", retry_after.as_millis() as f64).build()
        }
        Reservation::Mismatch { stored } => Obj::new().set("status", "mismatch").set("stored", stored.as_str()).build(),
        Reservation::NeedsReconciliation { cause } => {
            let cause = match cause {
                idemdb::UncertainCause::LeaseExpired => "lease_expired",
                idemdb::UncertainCause::Reported => "reported",
            };
            Obj::new().set("status", "needs_reconciliation").set("cause", cause).build()
        }
        Reservation::Expired { outcome } => {
            Obj::new().set("status", "expired").set("outcome", outcome.to_string()).build()
        }
        other => Obj::new().set("status", other.name()).build(),
    }
}

pub(crate) fn record(record: &Record) -> JsValue {
    let out = Obj::new()
        .set("state", record.state.kind().as_str())
        .set("fingerprint", record.fingerprint.to_hex())
        .set("fence", record.fence)
        .set("attempts", record.attempts)
        .set("createdAt", record.created_at.as_millis() as f64)
        .set("updatedAt", record.updated_at.as_millis() as f64);
    match &record.state {
        State::Completed { result, .. } => out.bytes("body", result).build(),
        State::Failed { error, .. } => out.bytes("body", error).build(),
        _ => out.build(),
    }
}
