//! Per-operation settings: whether a key is required, how the request is fingerprinted,
//! which responses are stored, which headers are replayed, and how long a duplicate waits;
//! and everything a layer was configured with, which its services share.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use idemdb_core::{CanonicalError, Canonicalizer, EffectName, Fingerprint, FingerprintBuilder, KeyHash};

use super::holders::Holders;
use crate::key::KeyForms;
use crate::problem::ProblemTypes;
use crate::response::DEFAULT_REPLAY_HEADERS;

/// Default limit on a request body the layer reads to fingerprint it: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// Default cap on the `Retry-After` of a 409 in progress: 1 second.
pub const DEFAULT_IN_PROGRESS_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Domain tag of request fingerprints, the first field hashed.
const FINGERPRINT_TAG: &str = "idemdb-http request v1";

/// What the layer does with a response the handler returned (see [`ResponsePolicy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnResponse {
    /// Store it and replay it to every retry (below 400 the record completes; from 400 on it
    /// fails definitively, and the failure is replayed the same way).
    Store,
    /// Release the key: the handler promises that this response means *no effect happened*,
    /// so a retry of the same request runs the handler again. Nothing is stored.
    Release,
    /// Mark the outcome uncertain: retries are refused (409, reconcile first) until the
    /// record is reconciled. Nothing is stored.
    Uncertain,
}

/// Which responses are stored, per status class, with per-status overrides.
///
/// The default is Stripe's rule: **the first response the handler produced is stored and
/// replayed, 5xx included**. A 500 then means "this request failed; a new attempt needs a new
/// key", and no retry can run the handler twice. Refusals made before the handler ran (a
/// missing or invalid key, a body over the limit or not canonicalisable, no tenant, a
/// conflict) are never stored.
///
/// One status is an exception by default: a handler's **`400 Bad Request` releases the key**
/// ([`OnResponse::Release`]). A 400 says the request itself was refused — its validation
/// failed before any effect — so, as in Stripe's API, it leaves no binding: the corrected
/// request may use the same key (it is bound to the corrected body from then on), and the
/// same request runs the validation again. A handler whose 400 can follow an effect says
/// `.status(StatusCode::BAD_REQUEST, OnResponse::Store)`.
///
/// ```
/// use http::StatusCode;
/// use idemdb_http::{OnResponse, ResponsePolicy};
/// // A handler whose 503 always means "nothing was done": let retries run it again.
/// let policy = ResponsePolicy::default().status(StatusCode::SERVICE_UNAVAILABLE, OnResponse::Release);
/// assert_eq!(policy.on(StatusCode::SERVICE_UNAVAILABLE), OnResponse::Release);
/// assert_eq!(policy.on(StatusCode::INTERNAL_SERVER_ERROR), OnResponse::Store);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponsePolicy {
    success: OnResponse,
    client_errors: OnResponse,
    server_errors: OnResponse,
    overrides: Vec<(StatusCode, OnResponse)>,
}

impl Default for ResponsePolicy {
    /// Store everything but a `400 Bad Request`, which releases the key.
    fn default() -> Self {
        ResponsePolicy {
            success: OnResponse::Store,
            client_errors: OnResponse::Store,
            server_errors: OnResponse::Store,
            overrides: vec![(StatusCode::BAD_REQUEST, OnResponse::Release)],
        }
    }
}

impl ResponsePolicy {
    /// Sets the rule for statuses below 400.
    #[must_use]
    pub fn success(mut self, rule: OnResponse) -> Self {
        self.success = rule;
        self
    }

    /// Sets the rule for 4xx statuses.
    #[must_use]
    pub fn client_errors(mut self, rule: OnResponse) -> Self {
        self.client_errors = rule;
        self
    }

    /// Sets the rule for 5xx statuses.
    #[must_use]
    pub fn server_errors(mut self, rule: OnResponse) -> Self {
        self.server_errors = rule;
        self
    }

    /// Sets the rule for one status, over its class's rule.
    #[must_use]
    pub fn status(mut self, status: StatusCode, rule: OnResponse) -> Self {
        self.overrides.retain(|(s, _)| *s != status);
        self.overrides.push((status, rule));
        self
    }

    /// The rule for `status`.
    pub fn on(&self, status: StatusCode) -> OnResponse {
        if let Some((_, rule)) = self.overrides.iter().find(|(s, _)| *s == status) {
            return *rule;
        }
        if status.is_server_error() {
            self.server_errors
        } else if status.is_client_error() {
            self.client_errors
        } else {
            self.success
        }
    }
}

/// The settings of one operation.
///
/// ```
/// use std::time::Duration;
/// use idemdb_core::{Canonicalizer, Normaliser};
/// use idemdb_http::Operation;
///
/// let canon = Canonicalizer::new()
///     .exclude("/trace_id")?
///     .normalise("/currency", Normaliser::Uppercase)?;
/// let create_payment = Operation::named("create_payment")
///     .canonicalizer(canon)
///     .max_body_bytes(64 * 1024)
///     .wait_for_first(Duration::from_secs(2));
/// # Ok::<(), idemdb_core::CanonicalError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Operation {
    pub(crate) name: Option<String>,
    pub(crate) key_required: bool,
    pub(crate) key_forms: KeyForms,
    pub(crate) canonicalizer: Canonicalizer,
    pub(crate) max_body_bytes: usize,
    pub(crate) responses: ResponsePolicy,
    pub(crate) replay_headers: Vec<String>,
    pub(crate) wait: Option<Duration>,
    pub(crate) retry_after: Duration,
    pub(crate) effects: Vec<ReserveEffect>,
}

/// Makes an effect's payload from a request's body (and its key's hash, an id that is the
/// same for every retry and safe to show); `None` enqueues nothing.
pub type EffectPayload = dyn Fn(&[u8], KeyHash) -> Option<Vec<u8>> + Send + Sync;

/// An effect the layer enqueues with the reservation (see [`Operation::enqueue_on_reserve`]).
#[derive(Clone)]
pub(crate) struct ReserveEffect {
    pub(crate) effect: EffectName,
    pub(crate) version: u16,
    pub(crate) payload: Arc<EffectPayload>,
}

impl std::fmt::Debug for ReserveEffect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReserveEffect")
            .field("effect", &self.effect)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl Default for Operation {
    /// No name (the method and matched route name it), a required key in any of the
    /// [lenient](KeyForms::Lenient) spellings, JSON bodies
    /// canonicalised without exclusions, a 1 MiB body limit, Stripe's response policy, the
    /// [default replay headers](crate::DEFAULT_REPLAY_HEADERS), and an immediate 409 for a
    /// duplicate in progress with `Retry-After` of at most a second.
    fn default() -> Self {
        Operation {
            name: None,
            key_required: true,
            key_forms: KeyForms::Lenient,
            canonicalizer: Canonicalizer::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            responses: ResponsePolicy::default(),
            replay_headers: DEFAULT_REPLAY_HEADERS.iter().map(|name| (*name).to_string()).collect(),
            wait: None,
            retry_after: DEFAULT_IN_PROGRESS_RETRY_AFTER,
            effects: Vec::new(),
        }
    }
}

impl Operation {
    /// The defaults, named by the method and matched route (`POST /v1/payments`).
    pub fn new() -> Self {
        Operation::default()
    }

    /// Enqueues the outbox effect `effect` (provider-key version `version`) **in the same
    /// transaction as the reservation** that acquires the key
    /// ([`Reserve::enqueuing`](idemdb_core::Reserve::enqueuing)),
    /// with the payload `payload` makes from the request's body and the key's hash: once the
    /// key is acquired the effect is in the outbox, so no process death between the two can
    /// leave a record in progress with its effect unwritten. The handler then finds the effect
    /// with `WorkflowStore::effect` rather than enqueueing it. `payload` returning `None` (a
    /// body the handler will refuse) enqueues nothing for that request; the handler's own
    /// validation decides, and its 400 releases the key as usual.
    ///
    /// ```
    /// use idemdb_core::EffectName;
    /// use idemdb_http::Operation;
    ///
    /// let charge = EffectName::new("charge").expect("a valid effect name");
    /// let op = Operation::named("create_payment").enqueue_on_reserve(charge, 1, |body, key_hash| {
    ///     let order: serde_json::Value = serde_json::from_slice(body).ok()?;
    ///     let amount = order.get("amount")?.as_str()?;
    ///     Some(format!(r#"{{"payment_id":"pay_{key_hash}","amount":"{amount}"}}"#).into_bytes())
    /// });
    /// # let _ = op;
    /// ```
    #[must_use]
    pub fn enqueue_on_reserve(
        mut self,
        effect: EffectName,
        version: u16,
        payload: impl Fn(&[u8], KeyHash) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> Self {
        self.effects.push(ReserveEffect { effect, version, payload: Arc::new(payload) });
        self
    }

    /// The defaults, with the operation name `name` (the scope's operation; it is also the
    /// name the store's per-operation retention policy is looked up by).
    pub fn named(name: impl Into<String>) -> Self {
        Operation { name: Some(name.into()), ..Operation::default() }
    }

    /// Requests without `Idempotency-Key` pass to the handler untouched, without any record
    /// (the default is to refuse them with 400).
    #[must_use]
    pub fn key_optional(mut self) -> Self {
        self.key_required = false;
        self
    }

    /// Accepts keys sent without structured-field quoting (`Idempotency-Key: abc`), as many
    /// clients written for Stripe do: [`KeyForms::Lenient`], the default (kept for services
    /// that said so before it was).
    #[must_use]
    pub fn accept_bare_keys(mut self) -> Self {
        self.key_forms = KeyForms::Lenient;
        self
    }

    /// Accepts only the draft's form, an sf-string (`Idempotency-Key: "abc"`):
    /// [`KeyForms::Strict`]. Other values get 400 `invalid-key` with a detail that says what
    /// to send.
    #[must_use]
    pub fn strict_keys(mut self) -> Self {
        self.key_forms = KeyForms::Strict;
        self
    }

    /// The canonicaliser of JSON bodies: transport fields to exclude and values to normalise.
    /// Its own body limit applies too.
    #[must_use]
    pub fn canonicalizer(mut self, canonicalizer: Canonicalizer) -> Self {
        self.canonicalizer = canonicalizer;
        self
    }

    /// The largest request body read (default 1 MiB); a larger one is refused with 413
    /// before the handler runs, and nothing is stored.
    #[must_use]
    pub fn max_body_bytes(mut self, limit: usize) -> Self {
        self.max_body_bytes = limit;
        self
    }

    /// Which responses are stored (default: [`ResponsePolicy::default`]).
    #[must_use]
    pub fn responses(mut self, policy: ResponsePolicy) -> Self {
        self.responses = policy;
        self
    }

    /// The response headers stored and replayed (case-insensitive names), replacing the
    /// [defaults](crate::DEFAULT_REPLAY_HEADERS). Headers not listed reach the first client
    /// only.
    #[must_use]
    pub fn replay_headers<N: Into<String>>(mut self, names: impl IntoIterator<Item = N>) -> Self {
        self.replay_headers = names.into_iter().map(|name| name.into().to_ascii_lowercase()).collect();
        self
    }

    /// A duplicate that arrives while the first request runs waits up to `limit` for it to
    /// finish and then gets its replay, instead of an immediate 409 (which it still gets if
    /// the first has not finished by then).
    #[must_use]
    pub fn wait_for_first(mut self, limit: Duration) -> Self {
        self.wait = Some(limit);
        self
    }

    /// The longest `Retry-After` of a 409 in progress (default 1 s). The store knows how long
    /// the first request's lease has left, which can be a minute; a payment usually finishes
    /// in a second, so clients are told to come back sooner than the lease runs out. When the
    /// first request's process is gone (no request of this layer holds the key, and the store
    /// is not [shared](crate::IdempotencyLayer::shared_store)) nothing will finish sooner: the
    /// 409 then carries the lease's whole remaining time.
    #[must_use]
    pub fn in_progress_retry_after(mut self, cap: Duration) -> Self {
        self.retry_after = cap;
        self
    }

    /// What this operation enforces, as a JSON object for a service's published policy (the
    /// draft asks servers to publish theirs): the key forms and limits, the body limit, the
    /// `Retry-After` rule of a 409 in progress, and what the fingerprint cannot tell apart.
    /// The store's limits (lease, TTLs, stored response size) come from its
    /// [`Policy`](idemdb_core::Policy); a service adds them beside these.
    ///
    /// ```
    /// let limits = idemdb_http::Operation::new().max_body_bytes(16 * 1024).published_limits();
    /// assert_eq!(limits["key"]["bytes"]["max"], 255);
    /// assert_eq!(limits["max_body_bytes"], 16 * 1024);
    /// ```
    pub fn published_limits(&self) -> serde_json::Value {
        let forms: &[&str] = match self.key_forms {
            KeyForms::Strict => &["RFC 8941 sf-string: Idempotency-Key: \"8e03978e-40d5-43e8-bc93-6894a57f9324\""],
            _ => &[
                "RFC 8941 sf-string: Idempotency-Key: \"8e03978e-40d5-43e8-bc93-6894a57f9324\" (parameters ignored)",
                "RFC 8941 sf-token: Idempotency-Key: order-842",
                "a bare value, taken whole: Idempotency-Key: 8e03978e-40d5-43e8-bc93-6894a57f9324",
            ],
        };
        serde_json::json!({
            "key": {
                "required": self.key_required,
                "forms": forms,
                "same_key": "every accepted spelling of the same characters is one key",
                "bytes": {"min": 1, "max": idemdb_core::MAX_KEY_LEN},
                "alphabet": "visible ASCII (0x21-0x7E)",
                "derived_keys": "a downstream key <key>:<effect>-v<version> over 255 bytes is sent as \
                    b3~<blake3 hex of the full derived key>~<effect>-v<version> (never over 255 bytes, never equal to a short form)",
            },
            "max_body_bytes": self.max_body_bytes,
            "retry_after": {
                "max_seconds": self.retry_after.as_secs(),
                "rule": "409 in-progress: the first request's remaining lease, at most max_seconds while it runs; its whole remaining lease when its process is gone (after a restart); none on needs-reconciliation",
            },
            "fingerprint": {
                "of": "method, path and query, and the body (RFC 8785 canonical JSON for JSON media types, the raw bytes otherwise)",
                "caveats": [
                    "JSON numbers are compared as IEEE 754 doubles (RFC 8785): integers above 2^53 that round to the same double, \
                     and 1 vs 1.0, are the same request; send large integers as strings",
                    "members named by the operation's exclusions are not part of the request",
                ],
            },
            "handler_400": if self.responses.on(StatusCode::BAD_REQUEST) == OnResponse::Release {
                "released: the key keeps no binding, the corrected request may use it"
            } else {
                "stored and replayed"
            },
        })
    }

    /// The fingerprint of a request: the method, the path and query, and the body —
    /// canonical JSON (through the canonicaliser) for a JSON media type (`application/json`
    /// or any `+json`), the raw bytes with their media type otherwise.
    ///
    /// # Errors
    /// [`CanonicalError`] for a JSON body that has no canonical form.
    pub fn fingerprint(
        &self,
        method: &Method,
        path_and_query: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<Fingerprint, CanonicalError> {
        let media = media_type(headers.get(header::CONTENT_TYPE));
        let builder =
            FingerprintBuilder::new().str_field(FINGERPRINT_TAG).str_field(method.as_str()).str_field(path_and_query);
        if is_json(&media) {
            let canonical = self.canonicalizer.canonicalize(body)?;
            Ok(builder.str_field("json").field(&canonical).finish())
        } else {
            Ok(builder.str_field("raw").str_field(&media).field(body).finish())
        }
    }
}

/// The media type without parameters, lower-case (`application/json`); empty when absent.
fn media_type(value: Option<&HeaderValue>) -> String {
    let Some(text) = value.and_then(|value| value.to_str().ok()) else { return String::new() };
    text.split(';').next().unwrap_or_default().trim().to_ascii_lowercase()
}

fn is_json(media: &str) -> bool {
    media == "application/json" || media.ends_with("+json")
}

/// An operation with what the layer derives from it once.
#[derive(Debug)]
pub(crate) struct Resolved {
    pub(crate) operation: Operation,
    pub(crate) replay_headers: Arc<[String]>,
}

impl Resolved {
    pub(crate) fn new(operation: Operation) -> Arc<Resolved> {
        let replay_headers = operation.replay_headers.iter().cloned().collect();
        Arc::new(Resolved { operation, replay_headers })
    }
}

/// Everything the layer was configured with.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) methods: Vec<Method>,
    pub(crate) routes: Vec<(Method, String, Arc<Resolved>)>,
    pub(crate) default: Option<Arc<Resolved>>,
    pub(crate) problems: ProblemTypes,
    pub(crate) correlation_header: Option<HeaderName>,
    /// The keys this layer's requests hold now (shared by every clone of the layer).
    pub(crate) holders: Arc<Holders>,
    /// Whether other processes reserve keys in the same store (a fleet on PostgreSQL): a key
    /// in progress that no request here holds may then have a live holder elsewhere.
    pub(crate) shared_store: bool,
}

impl Config {
    /// The operation of a request with `method` whose route is `route`; `None` when the
    /// layer lets it through untouched.
    pub(crate) fn operation(&self, method: &Method, route: &str) -> Option<&Arc<Resolved>> {
        if let Some((_, _, resolved)) = self.routes.iter().find(|(m, r, _)| m == method && r == route) {
            return Some(resolved);
        }
        if self.methods.contains(method) { self.default.as_ref() } else { None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(content_type: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_str(content_type).unwrap());
        headers
    }

    #[test]
    fn json_bodies_are_canonical_and_raw_bodies_are_bytes() {
        let op = Operation::new().canonicalizer(Canonicalizer::new().exclude("/trace").unwrap());
        let json = headers("application/json; charset=utf-8");
        let fp = |h: &HeaderMap, path: &str, body: &[u8]| op.fingerprint(&Method::POST, path, h, body).unwrap();
        let a = fp(&json, "/p", br#"{"a":1,"b":2,"trace":"x"}"#);
        assert_eq!(a, fp(&json, "/p", br#"{ "b":2, "a":1.0, "trace":"y" }"#));
        assert_eq!(a, fp(&headers("application/merge-patch+json"), "/p", br#"{"b":2,"a":1}"#));
        assert_ne!(a, fp(&json, "/q", br#"{"a":1,"b":2}"#), "the path is part of the request");
        assert_ne!(a, op.fingerprint(&Method::PATCH, "/p", &json, br#"{"a":1,"b":2}"#).unwrap());
        let text = headers("text/plain");
        assert_ne!(fp(&text, "/p", b"{\"a\":1}"), fp(&text, "/p", b"{ \"a\":1}"), "raw bytes are not canonicalised");
        assert_ne!(fp(&text, "/p", b"x"), fp(&headers("application/octet-stream"), "/p", b"x"));
        assert!(op.fingerprint(&Method::POST, "/p", &json, b"{oops").is_err());
        assert!(op.fingerprint(&Method::POST, "/p", &json, b"").is_err(), "an empty JSON body is not JSON");
        let none = HeaderMap::new();
        assert_ne!(fp(&none, "/p", b""), fp(&none, "/p", b"x"), "an empty body without a media type is raw bytes");
    }

    #[test]
    fn status_rules_fall_back_to_their_class() {
        let policy = ResponsePolicy::default()
            .server_errors(OnResponse::Uncertain)
            .status(StatusCode::BAD_GATEWAY, OnResponse::Release)
            .status(StatusCode::BAD_GATEWAY, OnResponse::Store);
        assert_eq!(policy.on(StatusCode::CREATED), OnResponse::Store);
        assert_eq!(policy.on(StatusCode::NOT_FOUND), OnResponse::Store);
        assert_eq!(policy.on(StatusCode::INTERNAL_SERVER_ERROR), OnResponse::Uncertain);
        assert_eq!(policy.on(StatusCode::BAD_GATEWAY), OnResponse::Store, "the last override wins");
        assert_eq!(ResponsePolicy::default().on(StatusCode::BAD_REQUEST), OnResponse::Release);
        assert_eq!(ResponsePolicy::default().on(StatusCode::UNPROCESSABLE_ENTITY), OnResponse::Store);
        assert_eq!(policy.on(StatusCode::BAD_REQUEST), OnResponse::Release, "the default override stays");
    }
}
