//! The client side of an idempotency key, for desktop and mobile apps (feature `client`): the
//! Rust twin of the npm package's `idempotentFetch`.
//!
//! [`IdempotentClient::send`] first stores the **intent** — its key and canonical request —
//! durably in the embedded store, *before the first byte leaves*; then it sends with
//! `Idempotency-Key`, retrying with the same key on network errors, timeouts, 5xx, 408, 409
//! and 429 (exponential backoff with full jitter, honouring `Retry-After`). The final answer is
//! recorded with the intent. A 422 is a conflict: recorded, returned as an error, never
//! retried. If the app dies or gives up mid-way, the intent stays pending and
//! [`IdempotentClient::resume_pending`] sends it again, with the same key, at the next start.
//!
//! ```no_run
//! use idemdb::{Scope, Store};
//! use idemdb_http::client::{IdempotentClient, IntentRequest};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Store::open("app-intents.idemdb")?;
//! let client = IdempotentClient::new(store, reqwest::Client::new())
//!     // Credentials are added to every attempt and never stored with the intent.
//!     .transport_headers(|_intent| {
//!         let mut headers = http::HeaderMap::new();
//!         headers.insert("authorization", "Bearer acme".parse().unwrap());
//!         headers
//!     });
//! // At start-up: finish what the last run left pending.
//! for resumed in client.resume_pending().await? {
//!     println!("resumed: {:?}", resumed.result.map(|answer| answer.status));
//! }
//! let scope = Scope::new("me", "create_payment")?;
//! let answer = client
//!     .send(&scope, IntentRequest::post("http://127.0.0.1:8080/v1/payments").json(serde_json::json!({
//!         "amount": "10.50", "currency": "BRL", "destination": "acct_x"
//!     })))
//!     .await?;
//! println!("{} (replayed: {})", answer.status, answer.replayed());
//! # Ok(())
//! # }
//! ```

mod error;
mod retry;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use idemdb::{
    AttemptOutcome, Canonicalizer, IdempotencyKey, Intent, IntentError, IntentRefusal, IntentResponse, IntentState,
    MAX_RESPONSE_HEADERS, Scope, Store,
};
use serde_json::Value;

pub use error::ClientError;
pub use retry::{Retry, retryable};

use crate::key::{IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED, key_header_value};

/// Request headers that are transport or credentials: never stored with an intent (and so
/// never part of its fingerprint). Given to [`IntentRequest::header`], they go with this
/// process's attempts only; [`IdempotentClient::transport_headers`] supplies them on every
/// attempt, resumed ones included.
pub const TRANSPORT_HEADERS: &[&str] = &[
    "authorization",
    "cookie",
    "proxy-authorization",
    "idempotency-key",
    "traceparent",
    "tracestate",
    "x-request-id",
    "x-correlation-id",
    "user-agent",
    "content-length",
    "date",
    "connection",
    "host",
];

/// Response headers not kept with a recorded answer.
const UNKEPT_RESPONSE_HEADERS: &[&str] = &["set-cookie", "date", "connection", "keep-alive", "transfer-encoding"];

/// A request to make once: what an intent stores (method, URL, headers other than
/// [transport ones](TRANSPORT_HEADERS), body).
#[derive(Debug, Clone)]
pub struct IntentRequest {
    method: Method,
    url: String,
    headers: BTreeMap<String, String>,
    transport: HeaderMap,
    body: Option<Body>,
}

#[derive(Debug, Clone)]
enum Body {
    Json(Value),
    Text(String),
}

impl IntentRequest {
    /// A request with `method` to `url`.
    pub fn new(method: Method, url: impl Into<String>) -> Self {
        IntentRequest { method, url: url.into(), headers: BTreeMap::new(), transport: HeaderMap::new(), body: None }
    }

    /// A POST to `url`.
    pub fn post(url: impl Into<String>) -> Self {
        IntentRequest::new(Method::POST, url)
    }

    /// A PATCH to `url`.
    pub fn patch(url: impl Into<String>) -> Self {
        IntentRequest::new(Method::PATCH, url)
    }

    /// Adds a header. [Transport headers](TRANSPORT_HEADERS) are sent but not stored;
    /// invalid names or values are dropped.
    #[must_use]
    pub fn header(mut self, name: &str, value: &str) -> Self {
        let name = name.to_ascii_lowercase();
        if TRANSPORT_HEADERS.contains(&name.as_str()) {
            if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
                self.transport.insert(name, value);
            }
        } else {
            self.headers.insert(name, value.to_string());
        }
        self
    }

    /// A JSON body (and `content-type: application/json` unless set).
    #[must_use]
    pub fn json(mut self, body: Value) -> Self {
        self.headers.entry("content-type".into()).or_insert_with(|| "application/json".into());
        self.body = Some(Body::Json(body));
        self
    }

    /// A text body.
    #[must_use]
    pub fn text(mut self, body: impl Into<String>) -> Self {
        self.body = Some(Body::Text(body.into()));
        self
    }

    /// The stored descriptor: the npm package's layout, so the two clients read each other's
    /// intents.
    fn descriptor(&self) -> Value {
        let mut descriptor = serde_json::json!({
            "method": self.method.as_str(),
            "url": self.url,
            "headers": self.headers,
        });
        if let Some(object) = descriptor.as_object_mut() {
            match &self.body {
                Some(Body::Json(value)) => {
                    object.insert("body".into(), value.clone());
                }
                Some(Body::Text(text)) => {
                    object.insert("bodyText".into(), Value::String(text.clone()));
                }
                None => {}
            }
        }
        descriptor
    }
}

/// A final answer: the server's status, headers and body, as recorded with the intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The intent's key.
    pub key: IdempotencyKey,
    /// The status.
    pub status: StatusCode,
    /// The headers kept with the answer.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

impl Answer {
    fn of(key: IdempotencyKey, response: &IntentResponse) -> Answer {
        let mut headers = HeaderMap::new();
        for (name, value) in &response.headers {
            if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
                headers.append(name, value);
            }
        }
        let status = StatusCode::from_u16(response.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        Answer { key, status, headers, body: Bytes::copy_from_slice(&response.body) }
    }

    /// Whether the server replayed a stored response (`Idempotent-Replayed: true`): an earlier
    /// attempt of this intent had reached it.
    pub fn replayed(&self) -> bool {
        self.headers.get(IDEMPOTENT_REPLAYED).is_some_and(|value| value == "true")
    }
}

/// The outcome of resuming one pending intent.
#[derive(Debug)]
pub struct Resumed {
    /// The intent as it was when resumed.
    pub intent: Intent,
    /// Its final answer, or why there is none.
    pub result: Result<Answer, ClientError>,
}

type TransportFn = dyn Fn(&Intent) -> HeaderMap + Send + Sync;

/// Sends intents at most once in effect: see the [module docs](self).
#[derive(Clone)]
pub struct IdempotentClient {
    store: Store,
    http: reqwest::Client,
    retry: Retry,
    canonicalizer: Canonicalizer,
    transport: Option<Arc<TransportFn>>,
}

impl std::fmt::Debug for IdempotentClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotentClient")
            .field("store", &self.store)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

impl IdempotentClient {
    /// A client keeping intents in `store` and sending with `http`.
    pub fn new(store: Store, http: reqwest::Client) -> Self {
        IdempotentClient { store, http, retry: Retry::default(), canonicalizer: Canonicalizer::new(), transport: None }
    }

    /// The retry schedule (default [`Retry::default`]).
    #[must_use]
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// The canonicaliser of stored requests; its pointers address the descriptor
    /// (`/body/trace_id`, `/headers/x-client-time`).
    #[must_use]
    pub fn canonicalizer(mut self, canonicalizer: Canonicalizer) -> Self {
        self.canonicalizer = canonicalizer;
        self
    }

    /// Headers added to every attempt and never stored (credentials, tracing), called before
    /// each attempt so a resumed intent gets a fresh token.
    #[must_use]
    pub fn transport_headers(mut self, headers: impl Fn(&Intent) -> HeaderMap + Send + Sync + 'static) -> Self {
        self.transport = Some(Arc::new(headers));
        self
    }

    /// The store the intents live in.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Creates an intent with a new key and sends it until it has a final answer.
    ///
    /// # Errors
    /// [`ClientError`]: a conflict (422), retries exhausted (the intent stays pending), an
    /// abandoned intent, or the store's error.
    pub async fn send(&self, scope: &Scope, request: IntentRequest) -> Result<Answer, ClientError> {
        let key = Store::new_key().map_err(IntentError::from)?;
        self.send_with_key(scope, &key, request).await
    }

    /// Creates (or finds again) the intent with `key` and sends it until it has a final
    /// answer. The same key with a different request is refused by the store.
    ///
    /// # Errors
    /// As [`IdempotentClient::send`], and [`ErrorCode::KeyReused`](idemdb::ErrorCode::KeyReused).
    pub async fn send_with_key(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        request: IntentRequest,
    ) -> Result<Answer, ClientError> {
        let descriptor = serde_json::to_vec(&request.descriptor()).map_err(|e| ClientError::invalid(e.to_string()))?;
        let (scope, key, canon) = (scope.clone(), key.clone(), self.canonicalizer.clone());
        let intent = self.blocking(move |store| store.create_intent(&scope, &key, &descriptor, &canon)).await?;
        self.send_intent(intent, &request.transport).await
    }

    /// Sends every pending intent again with its own key, oldest first, one at a time.
    ///
    /// # Errors
    /// The store's error when the pending intents cannot be listed; each intent's own
    /// outcome is in its [`Resumed::result`].
    pub async fn resume_pending(&self) -> Result<Vec<Resumed>, ClientError> {
        let pending = self.blocking(|store| store.pending_intents()).await?;
        let mut resumed = Vec::with_capacity(pending.len());
        for intent in pending {
            let result = self.send_intent(intent.clone(), &HeaderMap::new()).await;
            resumed.push(Resumed { intent, result });
        }
        Ok(resumed)
    }

    /// The send loop (the npm `sendIntent`).
    async fn send_intent(&self, mut intent: Intent, extra: &HeaderMap) -> Result<Answer, ClientError> {
        let mut last_status = None;
        let mut last_error = None;
        for attempt in 1.. {
            match &intent.state {
                IntentState::Completed { response } => {
                    let answer = Answer::of(intent.key.clone(), response);
                    return if answer.status == StatusCode::UNPROCESSABLE_ENTITY {
                        Err(ClientError::conflict(answer))
                    } else {
                        Ok(answer)
                    };
                }
                IntentState::Abandoned { reason } => return Err(ClientError::abandoned(reason.clone())),
                _ => {}
            }
            if attempt > self.retry.attempts() {
                return Err(ClientError::exhausted(intent.key, self.retry.attempts(), last_status, last_error));
            }
            let request = self.build(&intent, extra)?;
            // Durable before the request leaves: a crash mid-send is seen as an attempt.
            intent = self.record(&intent, Update::Attempt(AttemptOutcome::Sent)).await?;
            if intent.state != IntentState::Pending {
                continue;
            }
            let response = match self.http.execute(request).await {
                Ok(response) => response,
                Err(error) => {
                    let outcome =
                        if error.is_timeout() { AttemptOutcome::Timeout } else { AttemptOutcome::NetworkError };
                    tracing::debug!(target: "idemdb_http", attempt, timeout = error.is_timeout(), "attempt failed");
                    last_error = Some(error);
                    intent = self.record(&intent, Update::Attempt(outcome)).await?;
                    self.pause(self.retry.backoff(attempt, fastrand::f64())).await;
                    continue;
                }
            };
            let status = response.status();
            last_status = Some(status);
            if retryable(status) {
                let wait = self
                    .retry
                    .retry_after(response.headers(), SystemTime::now())
                    .unwrap_or_else(|| self.retry.backoff(attempt, fastrand::f64()));
                drop(response);
                intent = self.record(&intent, Update::Attempt(AttemptOutcome::Status(status.as_u16()))).await?;
                self.pause(wait).await;
                continue;
            }
            let headers = kept_headers(response.headers());
            let body = match response.bytes().await {
                Ok(body) => body,
                Err(error) => {
                    // The server answered, but the body was lost in transit: ask again.
                    last_error = Some(error);
                    intent = self.record(&intent, Update::Attempt(AttemptOutcome::NetworkError)).await?;
                    self.pause(self.retry.backoff(attempt, fastrand::f64())).await;
                    continue;
                }
            };
            let response = IntentResponse { status: status.as_u16(), headers, body: body.to_vec() };
            intent = self.record(&intent, Update::Response(response)).await?;
        }
        Err(ClientError::exhausted(intent.key, self.retry.attempts(), last_status, last_error))
    }

    /// The request of one attempt, rebuilt from the stored descriptor.
    fn build(&self, intent: &Intent, extra: &HeaderMap) -> Result<reqwest::Request, ClientError> {
        let descriptor: Value =
            serde_json::from_slice(&intent.request).map_err(|e| ClientError::invalid(e.to_string()))?;
        let method = descriptor["method"].as_str().unwrap_or("POST");
        let method = Method::from_bytes(method.as_bytes()).map_err(|e| ClientError::invalid(e.to_string()))?;
        let url = descriptor["url"].as_str().ok_or_else(|| ClientError::invalid("no URL"))?;
        let url = reqwest::Url::parse(url).map_err(|e| ClientError::invalid(e.to_string()))?;
        let mut request = reqwest::Request::new(method, url);
        *request.timeout_mut() = Some(self.retry.attempt_timeout());
        let headers = request.headers_mut();
        if let Some(stored) = descriptor["headers"].as_object() {
            for (name, value) in stored {
                let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| ClientError::invalid(e.to_string()))?;
                let value = HeaderValue::from_str(value.as_str().unwrap_or_default())
                    .map_err(|e| ClientError::invalid(e.to_string()))?;
                headers.insert(name, value);
            }
        }
        for (name, value) in extra {
            headers.insert(name.clone(), value.clone());
        }
        if let Some(transport) = &self.transport {
            for (name, value) in transport(intent) {
                if let Some(name) = name {
                    headers.insert(name, value);
                }
            }
        }
        headers.insert(HeaderName::from_static(IDEMPOTENCY_KEY), key_header_value(&intent.key));
        let body = match (&descriptor["body"], &descriptor["bodyText"]) {
            (Value::Null, Value::String(text)) => Some(text.clone().into_bytes()),
            (Value::Null, _) => None,
            (value, _) => Some(serde_json::to_vec(value).map_err(|e| ClientError::invalid(e.to_string()))?),
        };
        if let Some(body) = body {
            *request.body_mut() = Some(reqwest::Body::from(body));
        }
        Ok(request)
    }

    /// Records an attempt or the final response. Another sender (an overlapping resume) may
    /// have finished the intent meanwhile: then its record is the answer.
    async fn record(&self, intent: &Intent, update: Update) -> Result<Intent, ClientError> {
        let (scope, key) = (intent.scope.clone(), intent.key.clone());
        let result = self
            .blocking(move |store| match update {
                Update::Attempt(outcome) => store.record_attempt(&scope, &key, outcome),
                Update::Response(response) => store.record_response(&scope, &key, response),
            })
            .await;
        match result {
            Err(IntentError::Refused(IntentRefusal::Finished { .. })) => {
                let (scope, key) = (intent.scope.clone(), intent.key.clone());
                let stored = self.blocking(move |store| store.intent(&scope, &key)).await?;
                stored.ok_or_else(|| ClientError::from(IntentError::Refused(IntentRefusal::NotFound)))
            }
            other => Ok(other?),
        }
    }

    async fn pause(&self, wait: std::time::Duration) {
        tokio::time::sleep(wait).await;
    }

    /// Runs a store call (a durable commit) off the async runtime's threads.
    async fn blocking<R: Send + 'static>(&self, call: impl FnOnce(&Store) -> R + Send + 'static) -> R {
        let store = self.store.clone();
        blocking::unblock(move || call(&store)).await
    }
}

enum Update {
    Attempt(AttemptOutcome),
    Response(IntentResponse),
}

fn kept_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| !UNKEPT_RESPONSE_HEADERS.contains(&name.as_str()))
        .filter_map(|(name, value)| Some((name.as_str().to_string(), value.to_str().ok()?.to_string())))
        .take(MAX_RESPONSE_HEADERS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_headers_stay_out_of_the_descriptor() {
        let request = IntentRequest::post("http://127.0.0.1:1/v1/payments")
            .header("Authorization", "Bearer acme")
            .header("X-Client", "app/1")
            .json(serde_json::json!({"amount": "10.50"}));
        let descriptor = request.descriptor();
        assert_eq!(
            descriptor,
            serde_json::json!({
                "method": "POST",
                "url": "http://127.0.0.1:1/v1/payments",
                "headers": {"content-type": "application/json", "x-client": "app/1"},
                "body": {"amount": "10.50"},
            })
        );
        assert_eq!(request.transport["authorization"], "Bearer acme");
    }

    #[test]
    fn a_stored_request_is_rebuilt_with_the_quoted_key_and_fresh_credentials() {
        let store = Store::in_memory().unwrap();
        let client = IdempotentClient::new(store.clone(), reqwest::Client::new()).transport_headers(|_| {
            let mut headers = HeaderMap::new();
            headers.insert("authorization", HeaderValue::from_static("Bearer fresh"));
            headers
        });
        let scope = Scope::new("me", "pay").unwrap();
        let key = IdempotencyKey::new("k\"1").unwrap();
        let request = IntentRequest::post("http://127.0.0.1:1/p").text("hello");
        let bytes = serde_json::to_vec(&request.descriptor()).unwrap();
        let intent = store.create_intent(&scope, &key, &bytes, &Canonicalizer::new()).unwrap();
        let built = client.build(&intent, &HeaderMap::new()).unwrap();
        assert_eq!(built.method(), Method::POST);
        assert_eq!(built.headers()["idempotency-key"], r#""k\"1""#);
        assert_eq!(built.headers()["authorization"], "Bearer fresh");
        assert_eq!(built.body().and_then(reqwest::Body::as_bytes), Some(&b"hello"[..]));
        assert_eq!(built.timeout(), Some(&Retry::default().attempt_timeout()));
    }

    #[test]
    fn kept_headers_drop_cookies_and_hop_by_hop() {
        let mut headers = HeaderMap::new();
        headers.insert("set-cookie", HeaderValue::from_static("s=1"));
        headers.insert("connection", HeaderValue::from_static("close"));
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        assert_eq!(kept_headers(&headers), [("content-type".to_string(), "application/json".to_string())]);
    }
}
