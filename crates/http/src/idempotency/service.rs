//! [`IdempotencyService`]: one request's way through the layer, steps 1 to 6 of the
//! [module docs](super).

use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response, StatusCode, header};
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use idemdb_core::{
    CanonicalError, Coded, ErrorCode, Failure, Fingerprint, IdempotencyKey, Lease, NewEffect, Reservation, Reserve,
    Scope, validate_correlation,
};
use idemdb_interface::IdempotencyStore;
use tower_service::Service;
use tracing::Instrument;

use super::config::{Config, OnResponse, Operation, Resolved};
use super::future::{CatchUnwind, ResponseFuture};
use super::handle::LeaseHandle;
use super::refusal::{refusal, scope_problem};
use super::settled::Settled;
use super::tenant::TenantSource;
use crate::key::{IDEMPOTENCY_KEY, parse_key_header};
use crate::metrics::{self, Settlement};
use crate::problem::Problem;
use crate::response::StoredResponse;

/// The errors bodies may fail with.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request or response body the layer can read and rebuild: any [`Body`] whose data is
/// `Send`, whose error boxes, and that can be made from [`Bytes`] — axum's `Body` and
/// `http_body_util::Full<Bytes>` among them. Implemented for every such type.
pub trait LayerBody: Body<Data: Send, Error: Into<BoxError>> + From<Bytes> + Send + 'static {}

impl<B> LayerBody for B where B: Body<Data: Send, Error: Into<BoxError>> + From<Bytes> + Send + 'static {}

/// The service [`IdempotencyLayer`](super::IdempotencyLayer) wraps around a handler (see the `idempotency` module docs).
pub struct IdempotencyService<Svc, S, T> {
    inner: Svc,
    store: S,
    tenant: Arc<T>,
    config: Arc<Config>,
}

impl<Svc: Clone, S: Clone, T> Clone for IdempotencyService<Svc, S, T> {
    fn clone(&self) -> Self {
        IdempotencyService {
            inner: self.inner.clone(),
            store: self.store.clone(),
            tenant: Arc::clone(&self.tenant),
            config: Arc::clone(&self.config),
        }
    }
}

impl<Svc, S, T> std::fmt::Debug for IdempotencyService<Svc, S, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyService").field("config", &self.config).finish_non_exhaustive()
    }
}

impl<Svc, S, T> IdempotencyService<Svc, S, T> {
    pub(crate) fn new(inner: Svc, store: S, tenant: Arc<T>, config: Arc<Config>) -> Self {
        IdempotencyService { inner, store, tenant, config }
    }
}

impl<Svc, S, T, ReqB, ResB> Service<Request<ReqB>> for IdempotencyService<Svc, S, T>
where
    Svc: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    Svc::Future: Send + 'static,
    Svc::Error: Send + 'static,
    S: IdempotencyStore + Clone + 'static,
    T: TenantSource,
    ReqB: LayerBody,
    ResB: LayerBody,
{
    type Response = Response<ResB>;
    type Error = Svc::Error;
    type Future = ResponseFuture<ResB, Svc::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        // The clone that was driven to readiness serves this request; the fresh clone stays.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let ctx = Ctx { store: self.store.clone(), tenant: Arc::clone(&self.tenant), config: Arc::clone(&self.config) };
        let flow = Flow { inner, ctx, bodies: PhantomData };
        ResponseFuture::new(Box::pin(flow.run(request)))
    }
}

/// One request's way through the layer.
struct Flow<Svc, S, T, ReqB, ResB> {
    inner: Svc,
    ctx: Ctx<S, T>,
    bodies: PhantomData<fn(ReqB) -> ResB>,
}

/// What a request's flow needs besides the handler (shared by reference across awaits, so it
/// must be `Sync`; the handler's service need not be).
struct Ctx<S, T> {
    store: S,
    tenant: Arc<T>,
    config: Arc<Config>,
}

/// What checking a request's head decided.
enum Head {
    /// Not covered: hand the request to the handler untouched.
    PassThrough,
    /// Refused before anything was stored.
    Refuse(Problem),
    /// Covered, with a key and a scope.
    Keyed { key: IdempotencyKey, scope: Scope, operation: Arc<Resolved> },
}

impl<Svc, S, T, ReqB, ResB> Flow<Svc, S, T, ReqB, ResB>
where
    Svc: Service<Request<ReqB>, Response = Response<ResB>> + Send + 'static,
    Svc::Future: Send + 'static,
    Svc::Error: Send + 'static,
    S: IdempotencyStore + Clone + 'static,
    T: TenantSource,
    ReqB: LayerBody,
    ResB: LayerBody,
{
    async fn run(mut self, request: Request<ReqB>) -> Result<Response<ResB>, Svc::Error> {
        let (parts, body) = request.into_parts();
        let (key, scope, operation) = match self.head(&parts) {
            Head::PassThrough => return self.inner.call(Request::from_parts(parts, body)).await,
            Head::Refuse(problem) => {
                metrics::refused(problem.code);
                return Ok(self.ctx.refuse(problem));
            }
            Head::Keyed { key, scope, operation } => (key, scope, operation),
        };
        // From here on the request runs on a task of its own: once a key is reserved the
        // handler and the settlement run to their end whatever the connection does. A client
        // that hangs up drops this future, not the task, so no effect is cut half-way and no
        // key is left in progress by a disconnect.
        let problems = Arc::clone(&self.ctx.config);
        match tokio::spawn(self.keyed(parts, body, key, scope, operation)).await {
            Ok(result) => result,
            Err(error) => {
                // The task panicked outside the guarded steps (its lease, if any, was settled
                // there) or the runtime is shutting down.
                tracing::error!(target: "idemdb_http", %error, "the request's task ended without an answer");
                Ok(Problem::new(
                    ErrorCode::Internal,
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the request could not be processed to its end",
                )
                .into_response(&problems.problems))
            }
        }
    }

    /// Steps 4 onwards for a covered request, on a task of its own.
    async fn keyed(
        self,
        parts: Parts,
        body: ReqB,
        key: IdempotencyKey,
        scope: Scope,
        operation: Arc<Resolved>,
    ) -> Result<Response<ResB>, Svc::Error> {
        let key_hash = self.ctx.store.key_hash(&scope, &key);
        let span = tracing::info_span!(
            target: "idemdb_http",
            "idempotency",
            key_hash = %key_hash,
            tenant_hash = %self.ctx.store.tenant_hash(scope.tenant()),
            operation = scope.operation(),
            answer = tracing::field::Empty,
        );
        let recorder = span.clone();
        async move {
            let (bytes, fingerprint) = match read_and_fingerprint(&parts, body, &operation.operation).await {
                Ok(read) => read,
                Err(problem) => {
                    metrics::refused(problem.code);
                    return Ok(self.ctx.refuse(problem));
                }
            };
            let correlation = self.correlation(&parts);
            // The effects enqueued with the reservation, made from the body before anything is
            // stored.
            let effects: Vec<NewEffect> = operation
                .operation
                .effects
                .iter()
                .filter_map(|spec| {
                    let payload = (spec.payload)(&bytes, key_hash)?;
                    Some(NewEffect { effect: spec.effect.clone(), version: spec.version, payload })
                })
                .collect();
            let reservation = match reserve(
                &self.ctx.store,
                &scope,
                &key,
                &fingerprint,
                correlation.as_deref(),
                &operation.operation,
                effects,
            )
            .await
            {
                Ok(reservation) => reservation,
                Err(error) => {
                    tracing::warn!(target: "idemdb_http", code = error.code().as_str(), %error, "reservation failed");
                    metrics::refused(error.code());
                    return Ok(self.ctx.refuse(Problem::store_failed(error.code())));
                }
            };
            recorder.record("answer", reservation.name());
            metrics::answer(scope.operation(), &reservation);
            match reservation {
                Reservation::Acquired(lease) => {
                    // Held until this task ends: a duplicate meanwhile knows its holder works.
                    let _held = self.ctx.config.holders.hold(key_hash);
                    let handle =
                        LeaseHandle::new(self.ctx.store.clone(), lease, key_hash, operation.replay_headers.clone());
                    let mut request = Request::from_parts(parts, ReqB::from(bytes));
                    request.extensions_mut().insert(handle.clone());
                    let ctx = self.ctx.share();
                    match CatchUnwind::new(self.execute(request, handle.clone(), &operation)).await {
                        Ok(result) => result,
                        Err(_panic) => Ok(ctx.settle_after_panic(&handle).await),
                    }
                }
                Reservation::Replay { body, .. } => Ok(self.ctx.replay(&body)),
                other => {
                    let config = &self.ctx.config;
                    let holder_gone = !config.shared_store && !config.holders.holds(&key_hash);
                    let gone_holder = holder_gone.then(|| self.ctx.store.policy(scope.operation()).lease_ttl());
                    Ok(self.ctx.refuse(refusal(&other, &operation.operation, gone_holder)))
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Steps 1–3: operation, key, tenant.
    fn head(&self, parts: &Parts) -> Head {
        let route = route_of(parts);
        let Some(operation) = self.ctx.config.operation(&parts.method, &route) else { return Head::PassThrough };
        let op = &operation.operation;
        let mut values = parts.headers.get_all(IDEMPOTENCY_KEY).iter();
        let key = match (values.next(), values.next()) {
            (None, _) if op.key_required => {
                return Head::Refuse(Problem::new(
                    ErrorCode::KeyMissing,
                    StatusCode::BAD_REQUEST,
                    "this operation requires an Idempotency-Key header",
                ));
            }
            (None, _) => return Head::PassThrough,
            (Some(_), Some(_)) => {
                return Head::Refuse(Problem::new(
                    ErrorCode::InvalidKey,
                    StatusCode::BAD_REQUEST,
                    "Idempotency-Key was sent more than once",
                ));
            }
            (Some(value), None) => match parse_key_header(value, op.key_forms) {
                Ok(key) => key,
                Err(error) => {
                    return Head::Refuse(Problem::new(
                        ErrorCode::InvalidKey,
                        StatusCode::BAD_REQUEST,
                        error.to_string(),
                    ));
                }
            },
        };
        let Some(tenant) = self.ctx.tenant.tenant(parts) else {
            return Head::Refuse(Problem::new(
                ErrorCode::Unauthenticated,
                StatusCode::UNAUTHORIZED,
                "the request has no principal to scope its Idempotency-Key by",
            ));
        };
        let name = op.name.clone().unwrap_or_else(|| format!("{} {route}", parts.method));
        match Scope::new(tenant, name) {
            Ok(scope) => Head::Keyed { key, scope, operation: Arc::clone(operation) },
            Err(error) => Head::Refuse(scope_problem(&error)),
        }
    }

    fn correlation(&self, parts: &Parts) -> Option<String> {
        let name = self.ctx.config.correlation_header.as_ref()?;
        let value = parts.headers.get(name)?.to_str().ok()?;
        validate_correlation(value).ok().map(|()| value.to_string())
    }

    /// Step 5 onwards for the request that holds the lease: run the handler, then settle.
    async fn execute(
        mut self,
        request: Request<ReqB>,
        handle: LeaseHandle<S>,
        operation: &Resolved,
    ) -> Result<Response<ResB>, Svc::Error> {
        let called = std::panic::catch_unwind(AssertUnwindSafe(|| self.inner.call(request)));
        let outcome = match called {
            Ok(future) => CatchUnwind::new(future).await,
            Err(panic) => Err(panic),
        };
        match outcome {
            Ok(Ok(response)) => Ok(self.ctx.settle(response, &handle, operation).await),
            Ok(Err(error)) => {
                // The handler ran and failed without a response: what it did is unknown.
                self.ctx.settle_uncertain(&handle, "the handler returned an error").await;
                Err(error)
            }
            Err(_panic) => {
                self.ctx.settle_uncertain(&handle, "the handler panicked").await;
                Ok(self.ctx.refuse(Problem::new(
                    ErrorCode::Internal,
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the handler failed while processing this request; its outcome is unknown and retries are \
                     refused until it is reconciled",
                )))
            }
        }
    }
}

impl<S: Clone, T> Ctx<S, T> {
    /// Another handle on the same store, tenant source and configuration.
    fn share(&self) -> Self {
        Ctx { store: self.store.clone(), tenant: Arc::clone(&self.tenant), config: Arc::clone(&self.config) }
    }
}

impl<S: IdempotencyStore, T> Ctx<S, T> {
    /// After a panic anywhere past the reservation (the layer's own settlement, collecting the
    /// response body): the outcome is unknown, so the record is marked uncertain whoever had
    /// claimed its settlement. A record the handler or the layer already settled refuses the
    /// change (its fence is no longer in progress), and it keeps its settlement.
    async fn settle_after_panic<B: From<Bytes>>(&self, handle: &LeaseHandle<S>) -> Response<B> {
        let _ = handle.claim(Settled::ByLayer);
        tracing::error!(target: "idemdb_http", "a panic after the reservation; the key is marked uncertain unless it was settled");
        let lease = handle.lease();
        match metrics::timed("fail", self.store.fail(&lease, Failure::Uncertain)).await {
            Ok(()) => metrics::settled(lease.scope().operation(), Settlement::Uncertain),
            Err(error) => {
                tracing::debug!(target: "idemdb_http", code = error.code().as_str(), %error, "the key was settled before the panic");
            }
        }
        self.refuse(Problem::new(
            ErrorCode::Internal,
            StatusCode::INTERNAL_SERVER_ERROR,
            "the response could not be produced; the outcome of this request is unknown and retries are refused \
             until it is reconciled",
        ))
    }

    /// Marks the lease uncertain unless the handler settled it.
    async fn settle_uncertain(&self, handle: &LeaseHandle<S>, why: &'static str) {
        if handle.claim(Settled::ByLayer).is_err() {
            return;
        }
        tracing::error!(target: "idemdb_http", why, "the outcome is unknown; the key is marked uncertain");
        let lease = handle.lease();
        let marked = metrics::timed("fail", self.store.fail(&lease, Failure::Uncertain)).await;
        if marked.is_ok() {
            metrics::settled(lease.scope().operation(), Settlement::Uncertain);
        }
        if let Err(error) = marked {
            tracing::error!(target: "idemdb_http", code = error.code().as_str(), %error, "could not mark the key uncertain; it becomes uncertain when its lease expires");
        }
    }

    /// Step 6: settle the lease by the operation's response policy.
    async fn settle<B>(&self, response: Response<B>, handle: &LeaseHandle<S>, operation: &Resolved) -> Response<B>
    where
        B: Body + From<Bytes>,
        B::Error: Into<BoxError>,
    {
        if handle.claim(Settled::ByLayer).is_err() {
            return response;
        }
        let lease = handle.lease();
        match operation.operation.responses.on(response.status()) {
            OnResponse::Release => {
                self.report(&lease, Settlement::Released, self.store.fail(&lease, Failure::Retryable)).await;
                response
            }
            OnResponse::Uncertain => {
                self.report(&lease, Settlement::Uncertain, self.store.fail(&lease, Failure::Uncertain)).await;
                response
            }
            OnResponse::Store => self.store_response(response, &lease, &operation.replay_headers).await,
        }
    }

    async fn store_response<B>(&self, response: Response<B>, lease: &Lease, replay: &[String]) -> Response<B>
    where
        B: Body + From<Bytes>,
        B::Error: Into<BoxError>,
    {
        let (parts, body) = response.into_parts();
        let limit = self.store.policy(lease.scope().operation()).max_result_bytes();
        let head = StoredResponse::new(parts.status, &parts.headers, replay, Bytes::new()).encode().len();
        let room = limit.saturating_sub(head);
        let fits = body.size_hint().upper().is_some_and(|upper| upper <= room as u64);
        if !fits {
            // Streamed (no known length) or larger than the store keeps: the first client gets
            // it as it is, and the key can never run again — it becomes uncertain.
            tracing::warn!(target: "idemdb_http", limit, "response too large or streamed; not stored, the key is marked uncertain");
            self.report(lease, Settlement::Uncertain, self.store.fail(lease, Failure::Uncertain)).await;
            return Response::from_parts(parts, body);
        }
        let bytes = match Limited::new(body, room).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(_) => {
                // The body failed (or outgrew its size hint) after the handler ran.
                self.report(lease, Settlement::Uncertain, self.store.fail(lease, Failure::Uncertain)).await;
                return self.refuse(Problem::new(
                    ErrorCode::Internal,
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the response could not be produced; the outcome of this request is unknown and retries are \
                     refused until it is reconciled",
                ));
            }
        };
        let stored = StoredResponse::new(parts.status, &parts.headers, replay, bytes.clone()).encode();
        if parts.status.as_u16() < 400 {
            self.report(lease, Settlement::Completed, self.store.complete(lease, stored)).await;
        } else {
            self.report(lease, Settlement::Failed, self.store.fail(lease, Failure::Definitive(stored))).await;
        }
        Response::from_parts(parts, B::from(bytes))
    }

    /// Awaits the settling store call, counting it as `settlement`, or logging why it failed.
    async fn report(
        &self,
        lease: &Lease,
        settlement: Settlement,
        call: impl std::future::Future<Output = Result<(), S::Error>>,
    ) {
        let name = if settlement == Settlement::Completed { "complete" } else { "fail" };
        match metrics::timed(name, call).await {
            Ok(()) => metrics::settled(lease.scope().operation(), settlement),
            Err(error) => {
                // The response still goes to the client; the record stays in progress and
                // becomes uncertain when its lease expires, so the handler is not run again.
                tracing::error!(target: "idemdb_http", ?settlement, code = error.code().as_str(), %error, "could not settle the key");
            }
        }
    }

    fn replay<B: From<Bytes>>(&self, stored: &[u8]) -> Response<B> {
        match StoredResponse::decode(stored) {
            Ok(response) => response.into_response(true),
            Err(error) => {
                tracing::error!(target: "idemdb_http", %error, "stored response unreadable");
                self.refuse(Problem::new(error.code(), StatusCode::INTERNAL_SERVER_ERROR, error.to_string()))
            }
        }
    }

    fn refuse<B: From<Bytes>>(&self, problem: Problem) -> Response<B> {
        tracing::debug!(target: "idemdb_http", code = problem.code.as_str(), status = problem.status.as_u16(), "refused");
        problem.into_response(&self.config.problems)
    }
}

/// The route that names an operation: axum's matched route template when there is one,
/// else the request path.
fn route_of(parts: &Parts) -> String {
    #[cfg(feature = "axum")]
    if let Some(matched) = parts.extensions.get::<axum::extract::MatchedPath>() {
        return matched.as_str().to_string();
    }
    parts.uri.path().to_string()
}

/// Step 4: the body (within the limit) and the fingerprint.
async fn read_and_fingerprint<B>(parts: &Parts, body: B, operation: &Operation) -> Result<(Bytes, Fingerprint), Problem>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    let limit = operation.max_body_bytes;
    let too_large = |len: Option<u64>| {
        let detail = match len {
            Some(len) => format!("the request body is {len} bytes; this operation accepts at most {limit}"),
            None => format!("the request body is over the limit of {limit} bytes"),
        };
        Problem::new(ErrorCode::TooLarge, StatusCode::PAYLOAD_TOO_LARGE, detail)
    };
    let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(too_large(declared));
    }
    let bytes = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) if error.is::<LengthLimitError>() => return Err(too_large(None)),
        Err(error) if crate::deadline::is_deadline(error.as_ref()) => {
            return Err(Problem::new(ErrorCode::InvalidRequest, StatusCode::REQUEST_TIMEOUT, error.to_string()));
        }
        Err(_) => {
            return Err(Problem::new(
                ErrorCode::InvalidRequest,
                StatusCode::BAD_REQUEST,
                "the request body could not be read",
            ));
        }
    };
    let path = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
    match operation.fingerprint(&parts.method, path, &parts.headers, &bytes) {
        Ok(fingerprint) => Ok((bytes, fingerprint)),
        Err(error @ CanonicalError::BodyTooLarge { .. }) => {
            Err(Problem::new(ErrorCode::TooLarge, StatusCode::PAYLOAD_TOO_LARGE, error.to_string()))
        }
        Err(error) => Err(Problem::new(ErrorCode::InvalidRequest, StatusCode::BAD_REQUEST, error.to_string())),
    }
}

/// The reservation; with a bounded wait, an in-progress answer is asked again until it
/// changes or the wait is over.
async fn reserve<S: IdempotencyStore>(
    store: &S,
    scope: &Scope,
    key: &IdempotencyKey,
    fingerprint: &Fingerprint,
    correlation: Option<&str>,
    operation: &Operation,
    effects: Vec<NewEffect>,
) -> Result<Reservation, S::Error> {
    let deadline = operation.wait.map(|wait| Instant::now() + wait);
    let mut pause = Duration::from_millis(5);
    let request = Reserve::new(scope, key, fingerprint).enqueuing(effects);
    // The header's correlation id was validated when it was read (an invalid one is dropped),
    // so `traced` takes it; were it refused, the request would go without one.
    let request = request.clone().traced(correlation).unwrap_or(request);
    loop {
        let call = store.reserve(request.clone());
        let reservation = metrics::timed("reserve", call).await?;
        let (Reservation::InProgress { .. }, Some(deadline)) = (&reservation, deadline) else { return Ok(reservation) };
        let now = Instant::now();
        if now >= deadline {
            return Ok(reservation);
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}
