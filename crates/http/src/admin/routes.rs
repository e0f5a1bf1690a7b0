//! The handlers of the admin router.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use idemdb_core::{
    Attention, Coded, EffectName, ErrorCode, IdempotencyKey, OutboxStateKind, ProviderState, ProviderStateKind,
    Resolution, ResolutionCause, ResolutionKind, Scope, ScopedKey,
};
use idemdb_interface::InspectStore;
use serde_json::{Value, json};

use super::api::{AdminApi, ConfirmHook, ProviderFact};
use super::json::{attention_json, delivery_json, effect_json, event_json, record_json};
use crate::StoredResponse;
use crate::problem::{Problem, ProblemTypes};

/// The page: one HTML file with its script inline.
const PAGE: &str = include_str!("page.html");
/// Default and largest page of a listing.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;
/// How many of the newest audit events a record's history is looked for in.
const HISTORY_WINDOW: usize = 10_000;
/// The largest body a resolution request may have.
const MAX_RESOLVE_BYTES: usize = 1024 * 1024;

type Api<S, H> = Arc<AdminApi<S, H>>;

impl<S: InspectStore + Clone + 'static, H: ConfirmHook<S>> AdminApi<S, H> {
    /// The router; mount it behind operator authentication (it does none). It has no
    /// fallback of its own, so it can be merged with the service's other admin routes (an
    /// unknown path gets the service's fallback).
    pub fn router(self) -> Router {
        router(Arc::new(self))
    }
}

fn router<S: InspectStore + Clone + 'static, H: ConfirmHook<S>>(api: Api<S, H>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/reconciliation", get(queue::<S, H>))
        .route("/record", get(record::<S, H>))
        .route("/resolve", post(resolve::<S, H>))
        .route("/lookup", get(lookup::<S, H>))
        .route("/effects", get(effects::<S, H>))
        .route("/deliveries", get(deliveries::<S, H>))
        .with_state(api)
}

fn refuse(code: ErrorCode, status: StatusCode, detail: &str) -> Response {
    Problem::new(code, status, detail).into_response::<axum::body::Body>(&ProblemTypes::default())
}

fn invalid(detail: &str) -> Response {
    answer(bad(detail))
}

/// An invalid argument, as a problem (small enough to return as an error).
fn bad(detail: &str) -> Problem {
    Problem::new(ErrorCode::InvalidArgument, StatusCode::BAD_REQUEST, detail)
}

fn answer(problem: Problem) -> Response {
    problem.into_response::<axum::body::Body>(&ProblemTypes::default())
}

/// A store error as a problem: the core's refusals keep their code, storage trouble is 503.
fn store_failed(error: &(impl Coded + std::fmt::Display)) -> Response {
    let code = error.code();
    let status = match code {
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::WrongState
        | ErrorCode::IntentFinished
        | ErrorCode::ProviderKeyExpired
        | ErrorCode::LeaseLive
        | ErrorCode::StaleLease => StatusCode::CONFLICT,
        ErrorCode::InvalidArgument
        | ErrorCode::InvalidKey
        | ErrorCode::InvalidRequest
        | ErrorCode::TooLarge
        | ErrorCode::KeyMismatch => StatusCode::UNPROCESSABLE_ENTITY,
        _ => {
            return Problem::store_failed(code).into_response::<axum::body::Body>(&ProblemTypes::default());
        }
    };
    refuse(code, status, &error.to_string())
}

fn unsupported(what: &str) -> Response {
    refuse(ErrorCode::Unsupported, StatusCode::NOT_IMPLEMENTED, &format!("this backend does not list {what} here"))
}

fn ok(value: Value) -> Response {
    let mut response = (StatusCode::OK, value.to_string()).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn page() -> Response {
    let mut response = PAGE.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Everything is inline: nothing may load from elsewhere, and no other site may frame it.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'",
        ),
    );
    response
}

/// `?limit=` (1..=1000, default 100) and the other query fields, as text.
fn param<'a>(query: &'a [(String, String)], name: &str) -> Option<&'a str> {
    query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn limit(query: &[(String, String)]) -> Result<usize, Problem> {
    match param(query, "limit") {
        None => Ok(DEFAULT_LIMIT),
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
            _ => Err(bad(&format!("`limit` is a whole number from 1 to {MAX_LIMIT}"))),
        },
    }
}

async fn queue<S: InspectStore + Clone + 'static, H: ConfirmHook<S>>(
    State(api): State<Api<S, H>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let limit = match limit(&query) {
        Ok(limit) => limit,
        Err(refusal) => return answer(refusal),
    };
    match api.store.reconciliation_queue(limit).await {
        Ok(queue) => {
            let entries: Vec<Value> = queue
                .iter()
                .map(|entry| {
                    let (scope, key) = entry.scoped_key();
                    attention_json(entry, api.store.key_hash(scope, key), api.store.tenant_hash(scope.tenant()), true)
                })
                .collect();
            ok(json!({ "entries": entries, "limit": limit }))
        }
        Err(error) => store_failed(&error),
    }
}

/// The record a query or body names: by `tenant`, `operation` and `key`, or by `key_hash`
/// alone, as the listings give it (they never spell the tenant in clear) — the entry of the
/// reconciliation queue with that hash.
async fn named<S: InspectStore>(
    store: &S,
    tenant: Option<&str>,
    operation: Option<&str>,
    key: Option<&str>,
    key_hash: Option<&str>,
) -> Result<(Scope, IdempotencyKey), Response> {
    let Some(key_hash) = key_hash else { return identity(tenant, operation, key).map_err(answer) };
    if tenant.is_some() || operation.is_some() || key.is_some() {
        return Err(invalid("give `key_hash`, or `tenant`, `operation` and `key`, not both"));
    }
    let queue = store.reconciliation_queue(0).await.map_err(|e| store_failed(&e))?;
    queue
        .iter()
        .map(Attention::scoped_key)
        .find(|(scope, key)| store.key_hash(scope, key).to_string() == key_hash)
        .map(|(scope, key)| (scope.clone(), key.clone()))
        .ok_or_else(|| {
            let detail = "no entry of the reconciliation queue has this `key_hash`; name the record by `tenant`, \
                          `operation` and `key`";
            refuse(ErrorCode::NotFound, StatusCode::NOT_FOUND, detail)
        })
}

/// `tenant`, `operation` and `key` of a query or body, validated.
fn identity(
    tenant: Option<&str>,
    operation: Option<&str>,
    key: Option<&str>,
) -> Result<(Scope, IdempotencyKey), Problem> {
    let (Some(tenant), Some(operation), Some(key)) = (tenant, operation, key) else {
        return Err(bad("`tenant`, `operation` and `key` are required"));
    };
    let scope = Scope::new(tenant, operation).map_err(|error| bad(&format!("invalid scope: {error}")))?;
    let key = IdempotencyKey::new(key).map_err(|error| bad(&format!("invalid key: {error}")))?;
    Ok((scope, key))
}

async fn record<S: InspectStore + Clone + 'static, H: ConfirmHook<S>>(
    State(api): State<Api<S, H>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let name = |field| param(&query, field);
    let (scope, key) = match named(&api.store, name("tenant"), name("operation"), name("key"), name("key_hash")).await {
        Ok(identity) => identity,
        Err(refusal) => return refusal,
    };
    match record_view(&api, &scope, &key).await {
        Ok(Some(view)) => ok(view),
        Ok(None) => refuse(ErrorCode::NotFound, StatusCode::NOT_FOUND, "no record for this tenant, operation and key"),
        Err(refusal) => refusal,
    }
}

/// A record with its effects (each with the application's `summary`, when it gives one) and
/// history; `None` when there is neither a record nor an effect.
async fn record_view<S: InspectStore + Clone + 'static, H: ConfirmHook<S>>(
    api: &AdminApi<S, H>,
    scope: &Scope,
    key: &IdempotencyKey,
) -> Result<Option<Value>, Response> {
    let store = &api.store;
    let (key_hash, tenant_hash) = (store.key_hash(scope, key), store.tenant_hash(scope.tenant()));
    let record = store.get(scope, key).await.map_err(|e| store_failed(&e))?;
    let effects = store.list_effects(None, 0).await.map_err(|e| store_failed(&e))?;
    let effects: Option<Vec<Value>> = effects.map(|items| {
        items
            .iter()
            .filter(|item| item.scope == *scope && item.key == *key)
            .map(|item| {
                let mut effect = effect_json(item, key_hash, tenant_hash, true);
                effect["summary"] = api.hook.describe(item).unwrap_or(Value::Null);
                effect
            })
            .collect()
    });
    if record.is_none() && effects.as_ref().is_none_or(Vec::is_empty) {
        return Ok(None);
    }
    let history = store.key_history(scope, key, HISTORY_WINDOW).await.map_err(|e| store_failed(&e))?;
    let scoped = ScopedKey::new(scope.clone(), key.clone());
    Ok(Some(json!({
        "tenant_hash": tenant_hash.to_string(),
        "operation": scope.operation(),
        "idempotency_key": key.as_str(),
        "key_hash": key_hash.to_string(),
        "record": record.map(|record| record_json(&scoped, &record, key_hash, tenant_hash)),
        "effects": effects,
        "history": history.map(|events| events.iter().map(event_json).collect::<Vec<_>>()),
    })))
}

async fn effects<S: InspectStore + Clone + 'static, H: ConfirmHook<S>>(
    State(api): State<Api<S, H>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let limit = match limit(&query) {
        Ok(limit) => limit,
        Err(refusal) => return answer(refusal),
    };
    let state = match param(&query, "state").map(str::parse::<OutboxStateKind>) {
        None => None,
        Some(Ok(state)) => Some(state),
        Some(Err(_)) => return invalid("`state` is pending, dispatching, confirmed, failed or uncertain"),
    };
    match api.store.list_effects(state, limit).await {
        Ok(Some(items)) => {
            let items: Vec<Value> = items
                .iter()
                .map(|item| {
                    let key_hash = api.store.key_hash(&item.scope, &item.key);
                    effect_json(item, key_hash, api.store.tenant_hash(item.scope.tenant()), true)
                })
                .collect();
            ok(json!({ "items": items, "limit": limit }))
        }
        Ok(None) => unsupported("its outbox"),
        Err(error) => store_failed(&error),
    }
}

async fn deliveries<S: InspectStore + Clone + 'static, H: ConfirmHook<S>>(
    State(api): State<Api<S, H>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let limit = match limit(&query) {
        Ok(limit) => limit,
        Err(refusal) => return answer(refusal),
    };
    match api.store.list_deliveries(limit).await {
        Ok(Some(deliveries)) => {
            let deliveries: Vec<Value> = deliveries.iter().map(delivery_json).collect();
            ok(json!({ "deliveries": deliveries, "limit": limit }))
        }
        Ok(None) => unsupported("its inbox"),
        Err(error) => store_failed(&error),
    }
}

/// The HTTP response a resolution stores: the layer's own encoding.
fn stored(request: &Value, default_status: u16) -> Result<Vec<u8>, Problem> {
    let status = match request.get("status") {
        None | Some(Value::Null) => default_status,
        Some(value) => match value.as_u64().and_then(|n| u16::try_from(n).ok()) {
            Some(status) if (200..=599).contains(&status) => status,
            _ => return Err(bad("`status` is an HTTP status from 200 to 599")),
        },
    };
    let content_type = match request.get("content_type") {
        None | Some(Value::Null) => "application/json",
        Some(Value::String(text)) => text.as_str(),
        Some(_) => return Err(bad("`content_type` is a string")),
    };
    let body = match request.get("body") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        // A JSON value other than a string is the body as JSON.
        Some(value) => value.to_string(),
    };
    StoredResponse::build(status, content_type, None, body)
        .map(|response| response.encode())
        .map_err(|error| bad(&error.to_string()))
}

fn text<'a>(request: &'a Value, name: &str) -> Result<Option<&'a str>, Problem> {
    match request.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.as_str())),
        Some(_) => Err(bad(&format!("`{name}` is a string"))),
    }
}

async fn resolve<S: InspectStore + Clone + 'static, H: ConfirmHook<S>>(
    State(api): State<Api<S, H>>,
    body: Bytes,
) -> Response {
    if body.len() > MAX_RESOLVE_BYTES {
        return refuse(ErrorCode::TooLarge, StatusCode::PAYLOAD_TOO_LARGE, "a resolution is at most 1 MiB");
    }
    let request: Value = match serde_json::from_slice(&body) {
        Ok(value @ Value::Object(_)) => value,
        _ => return invalid("the body is a JSON object"),
    };
    match resolve_request(&api, &request).await {
        Ok(response) => response,
        Err(refusal) => refusal,
    }
}

async fn resolve_request<S: InspectStore + Clone + 'static, H: ConfirmHook<S>>(
    api: &AdminApi<S, H>,
    request: &Value,
) -> Result<Response, Response> {
    let store = &api.store;
    let (tenant, operation) = (text(request, "tenant").map_err(answer)?, text(request, "operation").map_err(answer)?);
    let (key, key_hash) = (text(request, "key").map_err(answer)?, text(request, "key_hash").map_err(answer)?);
    let (scope, key) = named(store, tenant, operation, key, key_hash).await?;
    let note = text(request, "note").map_err(answer)?.unwrap_or_default();
    let key_hash = store.key_hash(&scope, &key);
    let effect = text(request, "effect").map_err(answer)?;
    let resolution = text(request, "resolution").map_err(answer)?;
    let provider = text(request, "provider").map_err(answer)?;
    let retry = request.get("retry").and_then(Value::as_bool).unwrap_or(false);
    let what = match (effect, resolution) {
        (Some(_), Some(_)) => {
            return Err(invalid("give `effect` (with `provider` or `retry`) or `resolution`, not both"));
        }
        (None, Some(resolution)) => {
            let kind: ResolutionKind =
                resolution.parse().map_err(|_| invalid("`resolution` is completed, failed or released"))?;
            let resolution = match kind {
                ResolutionKind::Released => Resolution::Released,
                ResolutionKind::Completed => Resolution::Completed(stored(request, 200).map_err(answer)?),
                _ => Resolution::Failed(stored(request, 500).map_err(answer)?),
            };
            store.reconcile(&scope, &key, resolution, ResolutionCause::Operator).await.map_err(|e| store_failed(&e))?;
            format!("record {}", kind.as_str())
        }
        (Some(effect), None) => {
            let effect = EffectName::new(effect).map_err(|error| invalid(&format!("invalid effect: {error}")))?;
            // The provider's answer by the core's names (`ProviderStateKind`).
            let provider = provider
                .map(|provider| provider.parse::<ProviderStateKind>())
                .transpose()
                .map_err(|_| invalid("`provider` is confirmed, failed or not_found"))?;
            match (provider, retry) {
                (Some(_), true) => return Err(invalid("give `provider` or `retry`, not both")),
                (None, true) => {
                    store
                        .retry_effect(&scope, &key, &effect, ResolutionCause::Operator)
                        .await
                        .map_err(|e| store_failed(&e))?;
                    format!("effect {effect} sent again")
                }
                (Some(ProviderStateKind::Confirmed), false) => {
                    let Some(reference) = text(request, "reference").map_err(answer)? else {
                        return Err(invalid("a confirmed effect needs the provider's `reference`"));
                    };
                    let item = store.effect(&scope, &key, &effect).await.map_err(|e| store_failed(&e))?;
                    let Some(item) = item else {
                        return Err(refuse(ErrorCode::NotFound, StatusCode::NOT_FOUND, "no such effect"));
                    };
                    if item.state.kind() != OutboxStateKind::Uncertain {
                        let detail = format!("the effect is {}, not uncertain", item.state.kind().as_str());
                        return Err(refuse(ErrorCode::WrongState, StatusCode::CONFLICT, &detail));
                    }
                    check_fact(api, &item, &Claim::Confirmed(reference)).await?;
                    let handled = api.hook.confirmed(store, &item, reference).await.map_err(|error| {
                        refuse(ErrorCode::OperationFailed, StatusCode::BAD_GATEWAY, &error.to_string())
                    })?;
                    if !handled {
                        let state = ProviderState::Confirmed {
                            reference: reference.to_string(),
                            result: stored(request, 200).map_err(answer)?,
                        };
                        store
                            .resolve_effect(&scope, &key, &effect, state, ResolutionCause::Operator)
                            .await
                            .map_err(|e| store_failed(&e))?;
                    }
                    format!("effect {effect} confirmed")
                }
                (Some(ProviderStateKind::Failed), false) => {
                    check_fact(api, &effect_of(store, &scope, &key, &effect).await?, &Claim::Failed).await?;
                    let state = ProviderState::Failed { body: stored(request, 500).map_err(answer)? };
                    store
                        .resolve_effect(&scope, &key, &effect, state, ResolutionCause::Operator)
                        .await
                        .map_err(|e| store_failed(&e))?;
                    format!("effect {effect} failed")
                }
                (Some(ProviderStateKind::NotFound), false) => {
                    check_fact(api, &effect_of(store, &scope, &key, &effect).await?, &Claim::NotFound).await?;
                    store
                        .resolve_effect(&scope, &key, &effect, ProviderState::NotFound, ResolutionCause::Operator)
                        .await
                        .map_err(|e| store_failed(&e))?;
                    format!("effect {effect} not found, sent again")
                }
                (None, false) => return Err(invalid("an effect needs `provider` or `retry`")),
                // A state a later core adds: not one an operator gives here.
                (Some(_), false) => return Err(invalid("`provider` is confirmed, failed or not_found")),
            }
        }
        (None, None) => return Err(invalid("give `effect` (with `provider` or `retry`) or `resolution`")),
    };
    tracing::info!(
        target: "idemdb_http::admin",
        cause = "operator",
        tenant_hash = %store.tenant_hash(scope.tenant()),
        operation = scope.operation(),
        key_hash = %key_hash,
        resolved = what.as_str(),
        note,
        "resolved by an operator"
    );
    let view = record_view(api, &scope, &key).await?;
    Ok(ok(json!({ "resolved": what, "cause": "operator", "note": note, "now": view })))
}

/// The effect `effect` of `(scope, key)`, or a 404 problem.
async fn effect_of<S: InspectStore>(
    store: &S,
    scope: &Scope,
    key: &IdempotencyKey,
    effect: &EffectName,
) -> Result<idemdb_core::OutboxItem, Response> {
    match store.effect(scope, key, effect).await {
        Ok(Some(item)) => Ok(item),
        Ok(None) => Err(refuse(ErrorCode::NotFound, StatusCode::NOT_FOUND, "no such effect")),
        Err(error) => Err(store_failed(&error)),
    }
}

/// What an operator says the provider did with an effect.
enum Claim<'a> {
    Confirmed(&'a str),
    Failed,
    NotFound,
}

/// Checks an operator's `claim` about `item` against the provider, when the application can
/// ask it ([`ConfirmHook::lookup`]): a claim the provider contradicts is refused (422) with
/// what the provider says, and nothing changes; a provider that cannot be asked is a 502.
async fn check_fact<S: InspectStore + Clone + 'static, H: ConfirmHook<S>>(
    api: &AdminApi<S, H>,
    item: &idemdb_core::OutboxItem,
    claim: &Claim<'_>,
) -> Result<(), Response> {
    let fact = api.hook.lookup(&api.store, item).await.map_err(|error| {
        let detail = format!("the provider could not be asked, nothing changed: {error}");
        refuse(ErrorCode::OperationFailed, StatusCode::BAD_GATEWAY, &detail)
    })?;
    let contradiction = match (claim, fact) {
        (_, None) => None,
        (Claim::Confirmed(given), Some(ProviderFact::Made { reference })) if *given != reference => {
            Some(format!("the provider made this effect under reference {reference}, not {given}"))
        }
        (Claim::Confirmed(_), Some(ProviderFact::NotMade)) => {
            Some("the provider has no trace of this effect: resolve it not_found, so it is sent again".to_string())
        }
        (Claim::Failed | Claim::NotFound, Some(ProviderFact::Made { reference })) => {
            Some(format!("the provider made this effect (reference {reference}): resolve it confirmed"))
        }
        _ => None,
    };
    match contradiction {
        Some(detail) => Err(refuse(ErrorCode::InvalidArgument, StatusCode::UNPROCESSABLE_ENTITY, &detail)),
        None => Ok(()),
    }
}

/// `GET /lookup?key_hash=&effect=` (or `tenant`, `operation`, `key`): what the provider says
/// of the effect — `{"provider": "confirmed", "reference": REF}` or `{"provider":
/// "not_found"}` — through the application's lookup; `501` where it has none.
async fn lookup<S: InspectStore + Clone + 'static, H: ConfirmHook<S>>(
    State(api): State<Api<S, H>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    match ask(&api, &query).await {
        Ok(response) | Err(response) => response,
    }
}

async fn ask<S: InspectStore + Clone + 'static, H: ConfirmHook<S>>(
    api: &AdminApi<S, H>,
    query: &[(String, String)],
) -> Result<Response, Response> {
    let name = |field| param(query, field);
    let (scope, key) = named(&api.store, name("tenant"), name("operation"), name("key"), name("key_hash")).await?;
    let Some(effect) = name("effect") else { return Err(invalid("`effect` is required")) };
    let effect = EffectName::new(effect).map_err(|error| invalid(&format!("invalid effect: {error}")))?;
    let item = effect_of(&api.store, &scope, &key, &effect).await?;
    let fact = api.hook.lookup(&api.store, &item).await.map_err(|error| {
        refuse(
            ErrorCode::OperationFailed,
            StatusCode::BAD_GATEWAY,
            &format!("the provider could not be asked: {error}"),
        )
    })?;
    Ok(match fact {
        Some(ProviderFact::Made { reference }) => {
            ok(json!({ "provider": ProviderStateKind::Confirmed.as_str(), "reference": reference }))
        }
        Some(ProviderFact::NotMade) => {
            ok(json!({ "provider": ProviderStateKind::NotFound.as_str(), "reference": null }))
        }
        None => refuse(ErrorCode::Unsupported, StatusCode::NOT_IMPLEMENTED, "this service has no provider lookup"),
    })
}
