//! Values across the JS boundary: typed errors (real `Error` objects with a stable `code`),
//! plain result objects, option parsing.

use std::fmt::Display;
use std::time::Duration;

use idemdb::{
    AttemptOutcome, AttemptOutcomeKind, Canonicalizer, Coded, Error, ErrorCode, ExpiredLease, Intent, IntentError,
    IntentResponse, IntentState, Named, Normaliser, Policy, Record, Reservation, State,
};
use js_sys::{Array, Object, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;

/// A JS `Error` with `name = "IdemdbError"` and a stable `code`; the npm package turns it into
/// the subclass that matches the code.
pub(crate) fn js_error(code: ErrorCode, message: impl Display) -> JsValue {
    let error = js_sys::Error::new(&message.to_string());
    error.set_name("IdemdbError");
    let _ = Reflect::set(&error, &"code".into(), &code.as_str().into());
    error.into()
}

/// The JS error of any coded Rust error: its code, its message.
pub(crate) fn coded(error: impl Coded + Display) -> JsValue {
    js_error(error.code(), error)
}

pub(crate) fn invalid(message: impl Display) -> JsValue {
    js_error(ErrorCode::InvalidArgument, message)
}

/// A store error, with `reopenRequired` set.
pub(crate) fn from_store(error: Error) -> JsValue {
    let reopen = error.reopen_required();
    let value = coded(error);
    let _ = Reflect::set(&value, &"reopenRequired".into(), &reopen.into());
    value
}

pub(crate) fn from_intent(error: IntentError) -> JsValue {
    match error {
        IntentError::Store(error) => from_store(error),
        other => coded(other),
    }
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
    if let Some(rule) = get_string(options, "expiredLease")? {
        policy = policy.with_expired_lease(parse_name::<ExpiredLease>(&rule, "expiredLease")?);
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
            canon = canon.exclude(&pointer).map_err(coded)?;
        }
    }
    if let Some(normalise) = get(options, "normalise") {
        let normalise: Object = normalise.dyn_into().map_err(|_| invalid("normalise must be an object"))?;
        for entry in Object::entries(&normalise).iter() {
            let entry = Array::from(&entry);
            let pointer = entry.get(0).as_string().unwrap_or_default();
            let normaliser = name::<Normaliser>(&entry.get(1), &format!("normaliser of {pointer:?}"))?;
            canon = canon.normalise(&pointer, normaliser).map_err(coded)?;
        }
    }
    Ok(canon)
}

/// Parses a name of the vocabulary `T`; `what` names the argument in the error.
/// A name of the vocabulary `T`, parsed by the core; an unknown one is refused with the core's
/// `IDEMDB_UNKNOWN_NAME`, naming the names it accepts.
pub(crate) fn parse_name<T: Named>(name: &str, what: &str) -> Result<T, JsValue> {
    T::parse_name(name).map_err(|error| js_error(error.code(), format!("{what}: {error}")))
}

/// A JS string holding a name of the vocabulary `T`.
pub(crate) fn name<T: Named>(value: &JsValue, what: &str) -> Result<T, JsValue> {
    let text = value.as_string().ok_or_else(|| invalid(format!("{what} must be a string")))?;
    parse_name(&text, what)
}

pub(crate) fn attempt_outcome(kind: &str, status: Option<u16>) -> Result<AttemptOutcome, JsValue> {
    let kind = parse_name::<AttemptOutcomeKind>(kind, "attempt outcome")?;
    AttemptOutcome::of_kind(kind, status).ok_or_else(|| invalid("attempt outcome status needs a status"))
}

fn outcome_object(outcome: AttemptOutcome) -> Obj {
    let out = Obj::new().set("outcome", outcome.kind().as_str());
    match outcome.status() {
        Some(status) => out.set("status", status),
        None => out,
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
    out = out.set("budgetStart", intent.budget_start);
    match &intent.state {
        IntentState::Completed { response } => out.set("response", intent_response(response)).build(),
        IntentState::Abandoned { reason } => out.set("reason", reason.as_str()).build(),
        IntentState::NeedsAttention { cause, response } => {
            let response = response.as_ref().map(intent_response).unwrap_or(JsValue::NULL);
            out.set("cause", cause.as_str()).set("response", response).build()
        }
        _ => out.build(),
    }
}

fn intent_response(response: &IntentResponse) -> JsValue {
    let headers = Array::new();
    for (name, value) in &response.headers {
        headers.push(&Array::of2(&name.into(), &value.into()));
    }
    Obj::new().set("status", response.status).set("headers", headers).bytes("body", &response.body).build()
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
    let out = Obj::new().set("status", reservation.name());
    match reservation {
        Reservation::Acquired(l) => out.set("lease", lease(l)),
        Reservation::Replay { outcome, body } => out.set("outcome", outcome.as_str()).bytes("body", &body),
        Reservation::InProgress { retry_after } => out.set("retryAfterMs", retry_after.as_millis() as f64),
        Reservation::Mismatch { stored } => out.set("stored", stored.as_str()),
        Reservation::NeedsReconciliation { cause } => out.set("cause", cause.as_str()),
        Reservation::Expired { outcome } => out.set("outcome", outcome.as_str()),
        // A new answer this build's JS types do not know yet: its name is all it carries.
        _ => out,
    }
    .build()
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
