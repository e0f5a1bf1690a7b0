//! Shared pieces of the layer tests: stores, a counting handler, requests and answers.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use axum::body::Body;
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use idemdb::{
    AsyncStore, Failure, IdempotencyKey, KeyHash, Lease, ManualClock, Policy, PurgeReport, Record, Reservation,
    Reserve, Resolution, Scope, Store,
};
use idemdb_http::{IdempotencyLayer, Operation};
use idemdb_interface::IdempotencyStore;
use tower::{Layer, ServiceExt};

pub const T0: u64 = 1_700_000_000_000;

/// A store on a manual clock, and the clock.
pub fn store() -> (Store, ManualClock) {
    let clock = ManualClock::new(T0);
    (Store::builder().clock(clock.clone()).in_memory().unwrap(), clock)
}

/// The tenant of a test request: the `x-test-tenant` header (a stand-in for an authenticated
/// principal; real services take it from authentication).
pub fn tenant(parts: &Parts) -> Option<String> {
    parts.headers.get("x-test-tenant")?.to_str().ok().map(str::to_string)
}

pub type TestLayer<S> = IdempotencyLayer<S, fn(&Parts) -> Option<String>>;

/// A layer over `store` with `op` as the default operation.
pub fn layer<S: IdempotencyStore + Clone>(store: S, op: Operation) -> TestLayer<S> {
    IdempotencyLayer::new(store, tenant as fn(&Parts) -> Option<String>).default_operation(op)
}

/// A boxed service: the layer over `handler`.
pub type Svc = tower::util::BoxCloneSyncService<Request<Body>, Response<Body>, Infallible>;

pub fn service<S, H, F>(layer: TestLayer<S>, handler: H) -> Svc
where
    S: IdempotencyStore + Clone + 'static,
    H: Fn(Request<Body>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Response<Body>> + Send + 'static,
{
    let inner = tower::service_fn(move |request: Request<Body>| {
        let handler = handler.clone();
        async move { Ok::<_, Infallible>(handler(request).await) }
    });
    tower::util::BoxCloneSyncService::new(layer.layer(inner))
}

/// Counts the handler's runs (its effects).
#[derive(Clone, Default)]
pub struct Effects(Arc<AtomicUsize>);

impl Effects {
    pub fn add(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// A handler that counts its run and answers 201 with a JSON body and a few headers.
pub fn created(effects: Effects) -> impl Fn(Request<Body>) -> std::future::Ready<Response<Body>> + Clone + Send + Sync {
    move |request: Request<Body>| {
        effects.add();
        let n = effects.count();
        let _ = request;
        std::future::ready(
            Response::builder()
                .status(StatusCode::CREATED)
                .header("content-type", "application/json")
                .header("location", format!("/v1/things/{n}"))
                .header("set-cookie", "session=secret")
                .header("x-request-cost", "7")
                .body(Body::from(format!("{{\"thing\":{n}}}")))
                .unwrap(),
        )
    }
}

/// A POST request to `path` with a JSON body, a quoted key (when given) and tenant `acme`.
pub fn post(path: &str, key: Option<&str>, body: &str) -> Request<Body> {
    let mut builder = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header("content-type", "application/json")
        .header("x-test-tenant", "acme");
    if let Some(key) = key {
        builder = builder.header("idempotency-key", format!("\"{key}\""));
    }
    builder.body(Body::from(body.to_string())).unwrap()
}

/// A response with its body read.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// The problem `type` of a refusal (after checking it is problem JSON).
    pub fn problem(&self) -> String {
        assert_eq!(self.headers["content-type"], "application/problem+json", "{self:?}");
        let json = self.json();
        assert_eq!(json["status"], self.status.as_u16(), "{json}");
        json["type"].as_str().unwrap().to_string()
    }

    pub fn replayed(&self) -> bool {
        self.headers.get("idempotent-replayed").is_some_and(|v| v == "true")
    }
}

pub async fn send(svc: &Svc, request: Request<Body>) -> Answer {
    let response = svc.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    Answer { status: parts.status, headers: parts.headers, body: body.collect().await.unwrap().to_bytes() }
}

/// A store that counts the calls made through the interface and can be made to fail.
#[derive(Clone)]
pub struct Watched {
    handle: AsyncStore,
    pub down: Arc<AtomicBool>,
    pub completes: Arc<AtomicUsize>,
    pub fails: Arc<AtomicUsize>,
}

impl Watched {
    pub fn new(inner: Store) -> Self {
        Watched { handle: inner.asynchronous(), down: Arc::default(), completes: Arc::default(), fails: Arc::default() }
    }

    fn check(&self) -> Result<(), idemdb::Error> {
        if self.down.load(Ordering::SeqCst) {
            let io = std::io::Error::other("disk unplugged");
            return Err(idemdb::Error::from(idemdb::redb::StorageError::Io(io)));
        }
        Ok(())
    }
}

impl IdempotencyStore for Watched {
    type Error = idemdb::Error;

    fn policy(&self, operation: &str) -> &Policy {
        IdempotencyStore::policy(&self.handle, operation)
    }

    fn key_hash(&self, scope: &Scope, key: &IdempotencyKey) -> KeyHash {
        IdempotencyStore::key_hash(&self.handle, scope, key)
    }

    fn tenant_hash(&self, tenant: &str) -> KeyHash {
        IdempotencyStore::tenant_hash(&self.handle, tenant)
    }

    async fn reserve(&self, request: Reserve<'_>) -> Result<Reservation, idemdb::Error> {
        self.check()?;
        IdempotencyStore::reserve(&self.handle, request).await
    }

    async fn complete(&self, lease: &Lease, result: Vec<u8>) -> Result<(), idemdb::Error> {
        self.completes.fetch_add(1, Ordering::SeqCst);
        self.check()?;
        IdempotencyStore::complete(&self.handle, lease, result).await
    }

    async fn fail(&self, lease: &Lease, failure: Failure) -> Result<(), idemdb::Error> {
        self.fails.fetch_add(1, Ordering::SeqCst);
        self.check()?;
        IdempotencyStore::fail(&self.handle, lease, failure).await
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease, idemdb::Error> {
        self.check()?;
        IdempotencyStore::renew(&self.handle, lease).await
    }

    async fn reconcile(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        resolution: Resolution,
        cause: idemdb::ResolutionCause,
    ) -> Result<(), idemdb::Error> {
        IdempotencyStore::reconcile(&self.handle, scope, key, resolution, cause).await
    }

    async fn get(&self, scope: &Scope, key: &IdempotencyKey) -> Result<Option<Record>, idemdb::Error> {
        IdempotencyStore::get(&self.handle, scope, key).await
    }

    async fn purge_expired(&self, budget: usize) -> Result<PurgeReport, idemdb::Error> {
        IdempotencyStore::purge_expired(&self.handle, budget).await
    }
}

/// The record of `key` under tenant `acme` and `operation`.
pub fn record(store: &Store, operation: &str, key: &str) -> Option<Record> {
    store.get(&Scope::new("acme", operation).unwrap(), &IdempotencyKey::new(key).unwrap()).unwrap()
}
