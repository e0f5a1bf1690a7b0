//! [`IdempotencyLayer`]: the tower layer and its configuration.

use std::sync::Arc;

use http::{HeaderName, Method};
use idemdb_interface::IdempotencyStore;
use tower_layer::Layer;

use super::config::{Config, Operation, Resolved};
use super::holders::HeldKeys;
use super::service::IdempotencyService;
use super::tenant::TenantSource;
use crate::problem::ProblemTypes;

/// A tower [`Layer`] that gives routes the IETF `Idempotency-Key` semantics on any
/// [`IdempotencyStore`].
///
/// For each request with a covered method (POST and PATCH by default) it finds the
/// [`Operation`] of the route, reads and checks the key, takes the tenant from the
/// application's [`TenantSource`], reads the body (up to the operation's limit) and
/// fingerprints it, and **reserves the key atomically before the handler runs**. Only the
/// request that acquired the reservation reaches the handler; every other one is answered by
/// the layer: a replay of the stored response, or a refusal as `application/problem+json`.
/// See the [crate documentation](crate) for the status table.
///
/// In axum, add it with `Router::layer` (it runs after routing, so the matched route names
/// the operation) or on one route.
///
/// ```
/// use axum::{Router, routing::post};
/// use idemdb_http::{IdempotencyLayer, Operation, SingleTenant};
/// use http::Method;
///
/// # fn app(store: idemdb::Store) -> Router {
/// let idempotency = IdempotencyLayer::new(store.asynchronous(), SingleTenant::new("acme"))
///     .route(Method::POST, "/v1/orders", Operation::named("place_order"));
/// Router::new()
///     .route("/v1/orders", post(|| async { "placed" }))
///     .layer(idempotency)
/// # }
/// ```
pub struct IdempotencyLayer<S, T> {
    store: S,
    tenant: Arc<T>,
    config: Arc<Config>,
}

impl<S: Clone, T> Clone for IdempotencyLayer<S, T> {
    fn clone(&self) -> Self {
        IdempotencyLayer {
            store: self.store.clone(),
            tenant: Arc::clone(&self.tenant),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S, T> std::fmt::Debug for IdempotencyLayer<S, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyLayer").field("config", &self.config).finish_non_exhaustive()
    }
}

impl<S: IdempotencyStore + Clone, T: TenantSource> IdempotencyLayer<S, T> {
    /// A layer over `store`, taking tenants from `tenant`, that covers POST and PATCH with the
    /// default [`Operation`] (a key is required; the operation is named by the method and
    /// matched route).
    pub fn new(store: S, tenant: T) -> Self {
        let config = Config {
            methods: vec![Method::POST, Method::PATCH],
            routes: Vec::new(),
            default: Some(Resolved::new(Operation::default())),
            problems: ProblemTypes::default(),
            correlation_header: None,
            holders: Arc::default(),
            shared_store: false,
        };
        IdempotencyLayer { store, tenant: Arc::new(tenant), config: Arc::new(config) }
    }

    fn edit(mut self, change: impl FnOnce(&mut Config)) -> Self {
        change(Arc::make_mut(&mut self.config));
        self
    }

    /// The settings of requests with `method` whose matched route is `route` (axum's route
    /// template, such as `/v1/orders/{id}`; outside axum the request path). Listed routes are
    /// covered whatever their method.
    #[must_use]
    pub fn route(self, method: Method, route: impl Into<String>, operation: Operation) -> Self {
        let route = route.into();
        self.edit(|config| {
            config.routes.retain(|(m, r, _)| !(*m == method && *r == route));
            config.routes.push((method, route, Resolved::new(operation)));
        })
    }

    /// The settings of covered requests whose route is not listed (the default is
    /// [`Operation::default`]).
    #[must_use]
    pub fn default_operation(self, operation: Operation) -> Self {
        self.edit(|config| config.default = Some(Resolved::new(operation)))
    }

    /// Lets requests to routes not listed with [`IdempotencyLayer::route`] through untouched.
    #[must_use]
    pub fn only_listed_routes(self) -> Self {
        self.edit(|config| config.default = None)
    }

    /// The methods covered by the default operation (default POST and PATCH: the draft's
    /// non-idempotent methods).
    #[must_use]
    pub fn methods(self, methods: impl IntoIterator<Item = Method>) -> Self {
        let methods = methods.into_iter().collect();
        self.edit(|config| config.methods = methods)
    }

    /// How problem `type` URIs are built (default `urn:idemdb:problem:<slug>`).
    #[must_use]
    pub fn problem_types(self, types: ProblemTypes) -> Self {
        self.edit(|config| config.problems = types)
    }

    /// A request header whose value (when it is a valid correlation id: 1..=128 visible ASCII
    /// bytes) is recorded with the reservation in the audit trail, such as `x-request-id`.
    #[must_use]
    pub fn correlation_header(self, name: HeaderName) -> Self {
        self.edit(|config| config.correlation_header = Some(name))
    }
}

impl<S: IdempotencyStore + Clone, T: TenantSource> IdempotencyLayer<S, T> {
    /// Says that other processes reserve keys in the same store (several instances of a
    /// service on one PostgreSQL database). Without it, a key in progress that no request of
    /// this layer holds has a holder that is gone (a process that died; the store is this
    /// process's alone), and its 409 carries the lease's real remaining time as `Retry-After`
    /// instead of the operation's cap; with it, every 409 in progress uses the cap, since the
    /// holder may be working in another instance.
    #[must_use]
    pub fn shared_store(self) -> Self {
        self.edit(|config| config.shared_store = true)
    }

    /// The register of keys this process works on, shared with every clone of this layer: a
    /// service whose dispatcher finishes records (sending the effect a request enqueued with
    /// its reservation) holds each key there while it dispatches, so that a duplicate meanwhile
    /// is told the operation's short `Retry-After` rather than the time a dead holder's lease
    /// would need.
    pub fn held_keys(&self) -> HeldKeys {
        HeldKeys { holders: Arc::clone(&self.config.holders) }
    }
}

impl<Svc, S: Clone, T> Layer<Svc> for IdempotencyLayer<S, T> {
    type Service = IdempotencyService<Svc, S, T>;

    fn layer(&self, inner: Svc) -> Self::Service {
        IdempotencyService::new(inner, self.store.clone(), Arc::clone(&self.tenant), Arc::clone(&self.config))
    }
}
