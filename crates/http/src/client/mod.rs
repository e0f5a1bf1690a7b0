//! The client side of an idempotency key, for desktop and mobile apps (feature `client`): the
//! Rust twin of the npm package's `idempotentFetch`.
//!
//! [`IdempotentClient::send`] first stores the **intent** — its key and canonical request —
//! durably in the embedded store, *before the first byte leaves*; then it sends with
//! `Idempotency-Key` and follows the core's retry contract ([`idemdb_core::classify_answer`],
//! the same rules as the npm package's):
//!
//! - **final**, recorded, never sent again: any replayed response (`Idempotent-Replayed:
//!   true`, whatever its status), any 2xx, 3xx or 4xx, and a 422 (returned as a conflict);
//! - **needs attention**, recorded with the last answer, not resumed: an idemdb problem that
//!   says retrying cannot help, with the status idemdb answers it with (`needs-reconciliation`
//!   409, `expired` 410, `provider-key-expired` 409, `corrupt` and `newer-format` 500; the
//!   type read in full, see [`IdempotentClient::problem_base`]), or the intent's attempt budget
//!   ([`Retry::attempts_per_intent`], counted across resumes, a refused connection charged
//!   once per outage) or its time ([`Retry::max_pending`]) running out, or a final answer too
//!   large for the store (`unreadable`, sent once; the error carries it whole). The
//!   [`on_needs_attention`](IdempotentClient::on_needs_attention) callback tells the app; a
//!   person reopens it after a reconciliation ([`Store::reopen_intent`]) or abandons it
//!   ([`Store::abandon_intent`]);
//! - **retried** with the same key: network errors, timeouts, 408, 409, 429 and 5xx, with
//!   exponential backoff and full jitter, honouring `Retry-After`.
//!
//! If the app dies or a call's attempts run out, the intent stays pending and
//! [`IdempotentClient::resume_pending`] sends it again, with the same key, at the next start.
//!
//! **What an intent stores.** The method, the URL as given — a path such as `/v1/payments` is
//! resolved against the [base URL](IdempotentClient::base_url) at each send, so a service that
//! moved is reached after a restart — the body, and only the headers of an allow-list
//! ([`STORED_HEADERS`] by default, [`IdempotentClient::stored_headers`] to change it). Other
//! headers given to [`IntentRequest::header`] go with this process's attempts only;
//! credentials come from [`IdempotentClient::transport_headers`], called before every send.
//! A recorded answer keeps only the response headers of [`STORED_RESPONSE_HEADERS`]
//! ([`IdempotentClient::stored_response_headers`]), a `location` without its query.
//!
//! ```no_run
//! use idemdb::{Scope, Store};
//! use idemdb_http::client::{IdempotentClient, IntentRequest};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Store::open("app-intents.idemdb")?;
//! let client = IdempotentClient::new(store, reqwest::Client::new())
//!     // Paths in intents are resolved against the service's current address.
//!     .base_url("http://127.0.0.1:8080".parse()?)
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
//!     .send(&scope, IntentRequest::post("/v1/payments").json(serde_json::json!({
//!         "amount": "10.50", "currency": "BRL", "destination": "acct_x"
//!     })))
//!     .await?;
//! println!("{} (replayed: {})", answer.status, answer.replayed());
//! # Ok(())
//! # }
//! ```

mod error;
mod retry;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use idemdb::{
    AttemptOutcome, AttentionCause, Canonicalizer, IdempotencyKey, Intent, IntentError, IntentRefusal, IntentResponse,
    IntentState, MAX_RESPONSE_HEADERS, Scope, Store,
};
use idemdb_core::{
    AnswerClass, KEY_HEADER, KeyForm, REPLAYED_HEADER, classify_answer, key_header_value, problem_code,
    stored_response_value,
};
use serde_json::Value;

pub use error::ClientError;
pub use retry::{DEFAULT_MAX_PENDING, Retry, retryable};

/// The request headers an intent stores by default (with its fingerprint): those that say
/// what the request means. Every other header — credentials, cookies, API keys, tracing — is
/// sent with this process's attempts only and never written to the store.
pub const STORED_HEADERS: &[&str] =
    &["content-type", "content-language", "accept", "accept-language", "if-match", "if-none-match", "prefer"];

pub use idemdb_core::STORED_RESPONSE_HEADERS;

/// A request to make once: what an intent stores (method, URL, the
/// [allowed](STORED_HEADERS) headers, body).
#[derive(Debug, Clone)]
pub struct IntentRequest {
    method: Method,
    url: String,
    headers: HeaderMap,
    body: Option<Body>,
}

#[derive(Debug, Clone)]
enum Body {
    Json(Value),
    Text(String),
}

impl IntentRequest {
    /// A request with `method` to `url`: a path (`/v1/payments`), resolved against the
    /// client's [base URL](IdempotentClient::base_url) at each send, or an absolute URL.
    pub fn new(method: Method, url: impl Into<String>) -> Self {
        IntentRequest { method, url: url.into(), headers: HeaderMap::new(), body: None }
    }

    /// A POST to `url`.
    pub fn post(url: impl Into<String>) -> Self {
        IntentRequest::new(Method::POST, url)
    }

    /// A PATCH to `url`.
    pub fn patch(url: impl Into<String>) -> Self {
        IntentRequest::new(Method::PATCH, url)
    }

    /// Adds a header. Only the client's [stored headers](IdempotentClient::stored_headers) are
    /// kept with the intent; the others are sent with this process's attempts only. Invalid
    /// names or values are dropped.
    #[must_use]
    pub fn header(mut self, name: &str, value: &str) -> Self {
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
            self.headers.insert(name, value);
        }
        self
    }

    /// A JSON body (and `content-type: application/json` unless set).
    #[must_use]
    pub fn json(mut self, body: Value) -> Self {
        if !self.headers.contains_key(http::header::CONTENT_TYPE) {
            self.headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        self.body = Some(Body::Json(body));
        self
    }

    /// A text body.
    #[must_use]
    pub fn text(mut self, body: impl Into<String>) -> Self {
        self.body = Some(Body::Text(body.into()));
        self
    }

    /// The stored descriptor, with the headers of `stored` only, and the headers left out
    /// (sent with this process's attempts): the npm package's layout, so the two clients read
    /// each other's intents.
    fn descriptor(&self, stored: &[String]) -> (Value, HeaderMap) {
        let mut kept = BTreeMap::new();
        let mut transport = HeaderMap::new();
        for (name, value) in &self.headers {
            match value.to_str() {
                Ok(text) if stored.iter().any(|allowed| allowed == name.as_str()) => {
                    kept.insert(name.as_str().to_string(), text.to_string());
                }
                _ => {
                    transport.append(name.clone(), value.clone());
                }
            }
        }
        let mut descriptor = serde_json::json!({
            "method": self.method.as_str(),
            "url": self.url,
            "headers": kept,
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
        (descriptor, transport)
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
        self.headers.get(REPLAYED_HEADER).is_some_and(|value| value == "true")
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
type AttentionFn = dyn Fn(&Intent) + Send + Sync;

/// Sends intents at most once in effect: see the [module docs](self).
#[derive(Clone)]
pub struct IdempotentClient {
    store: Store,
    http: reqwest::Client,
    retry: Retry,
    canonicalizer: Canonicalizer,
    transport: Option<Arc<TransportFn>>,
    attention: Option<Arc<AttentionFn>>,
    base: Option<reqwest::Url>,
    stored_headers: Vec<String>,
    key_form: KeyForm,
    problem_base: Option<String>,
    stored_response_headers: Vec<String>,
    unreached: Unreached,
}

/// The intents whose last send provably never reached the server (the connection was refused
/// or never made, the name did not resolve: [`reqwest::Error::is_connect`]). Their next send
/// is recorded only once it is known to have reached the server (answered, or failed after
/// connecting), not before it leaves: refused again, it leaves no trace and charges nothing.
/// So an outage charges its first refused send only. Kept in memory, shared by the clones of a
/// client: after a restart the first send of an outage is charged again, and a crash in the
/// middle of such a send leaves it uncounted (the key, not the count, keeps it from running
/// twice).
#[derive(Clone, Default)]
struct Unreached(Arc<Mutex<HashSet<(Scope, IdempotencyKey)>>>);

impl Unreached {
    fn id(intent: &Intent) -> (Scope, IdempotencyKey) {
        (intent.scope.clone(), intent.key.clone())
    }

    fn contains(&self, intent: &Intent) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).contains(&Self::id(intent))
    }

    fn set(&self, intent: &Intent, unreached: bool) {
        let mut set = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if unreached {
            set.insert(Self::id(intent));
        } else {
            set.remove(&Self::id(intent));
        }
    }
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
        IdempotentClient {
            store,
            http,
            retry: Retry::default(),
            canonicalizer: Canonicalizer::new(),
            transport: None,
            attention: None,
            base: None,
            stored_headers: STORED_HEADERS.iter().map(|name| name.to_string()).collect(),
            key_form: KeyForm::SfString,
            problem_base: None,
            stored_response_headers: STORED_RESPONSE_HEADERS.iter().map(|name| name.to_string()).collect(),
            unreached: Unreached::default(),
        }
    }

    /// The base that request paths (`/v1/payments`) are resolved against at each send,
    /// resumed intents included: give the service's current address at start-up. Absolute
    /// URLs in intents are sent as stored.
    #[must_use]
    pub fn base_url(mut self, base: reqwest::Url) -> Self {
        self.base = Some(base);
        self
    }

    /// The request headers an intent stores (default [`STORED_HEADERS`]); names are matched
    /// in lower case. Every other header is sent with this process's attempts only.
    #[must_use]
    pub fn stored_headers<S: AsRef<str>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.stored_headers = names.into_iter().map(|name| name.as_ref().to_ascii_lowercase()).collect();
        self
    }

    /// The response headers stored with a recorded answer (default
    /// [`STORED_RESPONSE_HEADERS`]); names are matched in lower case. Every other header of an
    /// answer is never written to the store; a stored `location` loses its query and fragment.
    #[must_use]
    pub fn stored_response_headers<S: AsRef<str>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.stored_response_headers = names.into_iter().map(|name| name.as_ref().to_ascii_lowercase()).collect();
        self
    }

    /// How the key is written in its header (default the structured-field string the idemdb
    /// layer reads; [`KeyForm::Bare`] for servers that take an opaque token).
    #[must_use]
    pub fn key_form(mut self, form: KeyForm) -> Self {
        self.key_form = form;
        self
    }

    /// The base of the service's problem types when it is not idemdb's own
    /// `urn:idemdb:problem:` (the server's [`ProblemTypes`](crate::ProblemTypes)): a problem
    /// type is read as idemdb's only in full ([`idemdb_core::problem_code`]), so another
    /// service's type that merely ends in `/expired` is not taken for one.
    #[must_use]
    pub fn problem_base(mut self, base: impl Into<String>) -> Self {
        self.problem_base = Some(base.into());
        self
    }

    /// Called when an intent comes to need attention (with the intent as stored, its last
    /// answer included), before the call returns [`ClientError::needs_attention`].
    #[must_use]
    pub fn on_needs_attention(mut self, callback: impl Fn(&Intent) + Send + Sync + 'static) -> Self {
        self.attention = Some(Arc::new(callback));
        self
    }

    /// The retry schedule (default [`Retry::default`]).
    #[must_use]
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// What makes two requests the same intent; its pointers address the descriptor
    /// (`/body/trace_id`, `/headers/x-client-time`). An excluded field (a trace id) may differ
    /// and a normalised one be written another way under one key. It decides only that: the
    /// request is stored and sent with every field, as given; its body limit applies.
    #[must_use]
    pub fn canonicalizer(mut self, canonicalizer: Canonicalizer) -> Self {
        self.canonicalizer = canonicalizer;
        self
    }

    /// Headers added to every attempt and never stored (credentials, tracing), called before
    /// each attempt so a resumed intent gets a fresh token. This is where credentials come
    /// from: nothing it returns reaches the store.
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
    /// [`ClientError`]: a conflict (422), the call's retries exhausted (the intent stays
    /// pending), an intent that needs attention or was abandoned, or the store's error.
    pub async fn send(&self, scope: &Scope, request: IntentRequest) -> Result<Answer, ClientError> {
        let key = Store::new_key().map_err(IntentError::from)?;
        self.send_with_key(scope, &key, request).await
    }

    /// Creates (or finds again) the intent with `key` and sends it until it has a final
    /// answer. The same key with a different request is refused by the store.
    ///
    /// # Errors
    /// As [`IdempotentClient::send`], and [`ErrorCode::KeyMismatch`](idemdb::ErrorCode::KeyMismatch) when the key
    /// already names another intent.
    pub async fn send_with_key(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        request: IntentRequest,
    ) -> Result<Answer, ClientError> {
        let (descriptor, transport) = request.descriptor(&self.stored_headers);
        let descriptor = serde_json::to_vec(&descriptor).map_err(|e| ClientError::invalid(e.to_string()))?;
        let intent = self.store_intent(scope, key, descriptor).await?;
        self.send_intent(intent, &transport).await
    }

    /// Stores the intent with the request as it is sent, every field included: the client's
    /// canonicaliser decides only whether an intent already stored under `key` is the same
    /// request (a field it excludes, such as a trace id, may differ; a field it normalises may
    /// be written another way), and its limits and checks apply to the request first.
    async fn store_intent(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        descriptor: Vec<u8>,
    ) -> Result<Intent, ClientError> {
        let wanted = self.canonicalizer.fingerprint(&descriptor).map_err(IntentError::from)?;
        let (scope, key, canon) = (scope.clone(), key.clone(), self.canonicalizer.clone());
        self.blocking(move |store| {
            // Checked above against the client's limit; stored whole.
            let whole = Canonicalizer::new().max_body_bytes(usize::MAX);
            match store.create_intent(&scope, &key, &descriptor, &whole) {
                Err(IntentError::Refused(IntentRefusal::KeyMismatch)) => {
                    let stored = store.intent(&scope, &key)?;
                    match stored {
                        Some(stored) if canon.fingerprint(&stored.request).ok() == Some(wanted) => Ok(stored),
                        _ => Err(IntentError::Refused(IntentRefusal::KeyMismatch)),
                    }
                }
                other => other,
            }
        })
        .await
        .map_err(ClientError::from)
    }

    /// Sends every pending intent again with its own key, oldest first, one at a time.
    /// Intents that need attention are not sent (see [`Store::intents_needing_attention`]).
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

    /// The send loop (the npm `sendIntent`): the core's retry contract decides what each
    /// answer means.
    async fn send_intent(&self, mut intent: Intent, extra: &HeaderMap) -> Result<Answer, ClientError> {
        let mut last_status = None;
        let mut last_error = None;
        let mut last_answer: Option<IntentResponse> = None;
        let mut why = None;
        let mut whole = None;
        for attempt in 1.. {
            match &intent.state {
                IntentState::Completed { response } => {
                    self.unreached.set(&intent, false);
                    let answer = Answer::of(intent.key.clone(), response);
                    return if answer.status == StatusCode::UNPROCESSABLE_ENTITY && !answer.replayed() {
                        Err(ClientError::conflict(answer))
                    } else {
                        Ok(answer)
                    };
                }
                IntentState::Abandoned { reason } => return Err(ClientError::abandoned(reason.clone())),
                IntentState::NeedsAttention { cause, response } => {
                    self.unreached.set(&intent, false);
                    let answer =
                        whole.or_else(|| response.as_ref().map(|response| Answer::of(intent.key.clone(), response)));
                    return Err(ClientError::attention(intent.key.clone(), *cause, answer).because(why));
                }
                _ => {}
            }
            if intent.budget_used() >= self.retry.intent_attempts() {
                intent = self.attention(&intent, AttentionCause::RetriesExhausted, last_answer.take()).await?;
                continue;
            }
            if self.pending_too_long(&intent) {
                why = Some(format!("pending for more than {:?} since it was created", self.retry.pending_limit()));
                intent = self.attention(&intent, AttentionCause::RetriesExhausted, last_answer.take()).await?;
                continue;
            }
            if attempt > self.retry.attempts() {
                return Err(ClientError::exhausted(intent.key, self.retry.attempts(), last_status, last_error));
            }
            let request = self.build(&intent, extra)?;
            // Durable before the request leaves: a crash mid-send is seen as an attempt. Not
            // after a send that never reached the server (see `Unreached`).
            let marked = !self.unreached.contains(&intent);
            if marked {
                intent = self.record(&intent, Update::Attempt(AttemptOutcome::Sent)).await?;
                if intent.state != IntentState::Pending {
                    continue;
                }
            }
            let response = match self.http.execute(request).await {
                Ok(response) => response,
                Err(error) if error.is_connect() => {
                    // Not at the server: not charged. The first send of an outage closes its marker.
                    tracing::debug!(target: "idemdb_http", attempt, "the server was not reached");
                    last_error = Some(error);
                    if marked {
                        intent = self.record(&intent, Update::Attempt(AttemptOutcome::NetworkError)).await?;
                    }
                    self.unreached.set(&intent, true);
                    self.pause(self.retry.backoff(attempt, fastrand::f64())).await;
                    continue;
                }
                Err(error) => {
                    // It may have reached the server: charged (an outcome alone counts as a send).
                    self.unreached.set(&intent, false);
                    let outcome =
                        if error.is_timeout() { AttemptOutcome::Timeout } else { AttemptOutcome::NetworkError };
                    tracing::debug!(target: "idemdb_http", attempt, timeout = error.is_timeout(), "attempt failed");
                    last_error = Some(error);
                    intent = self.record(&intent, Update::Attempt(outcome)).await?;
                    self.pause(self.backoff(&intent)).await;
                    continue;
                }
            };
            if !marked {
                // It reached the server after an unreached one: recorded (and charged) now.
                self.unreached.set(&intent, false);
                intent = self.record(&intent, Update::Attempt(AttemptOutcome::Sent)).await?;
                if intent.state != IntentState::Pending {
                    continue;
                }
            }
            let status = response.status();
            last_status = Some(status);
            // The backoff grows with the intent's attempts, across resumes.
            let wait = self.retry.retry_after(response.headers(), SystemTime::now()).unwrap_or(self.backoff(&intent));
            let headers = kept_headers(response.headers(), &self.stored_response_headers);
            let body = match response.bytes().await {
                Ok(body) => body,
                Err(error) => {
                    // The server answered, but the body was lost in transit: ask again.
                    last_error = Some(error);
                    intent = self.record(&intent, Update::Attempt(AttemptOutcome::NetworkError)).await?;
                    self.pause(self.backoff(&intent)).await;
                    continue;
                }
            };
            let answer = IntentResponse { status: status.as_u16(), headers, body: body.to_vec() };
            match classify(&answer, self.problem_base.as_deref()) {
                AnswerClass::Retry => {
                    intent = self.record(&intent, Update::Attempt(AttemptOutcome::Status(status.as_u16()))).await?;
                    last_answer = Some(answer);
                    self.pause(wait).await;
                }
                AnswerClass::NeedsAttention(cause) => intent = self.attention(&intent, cause, Some(answer)).await?,
                _ => match self.record(&intent, Update::Response(answer.clone())).await {
                    Err(refusal) if refusal.is_too_large() => {
                        // Sending again would only bring the same answer: the intent needs
                        // attention at once (its status and headers kept), and the caller gets
                        // the answer whole.
                        why = Some(format!(
                            "its final answer is too large to store ({refusal}); it is not sent again: raise the operation's max_result_bytes policy for such answers"
                        ));
                        whole = Some(Answer::of(intent.key.clone(), &answer));
                        intent = self.attention(&intent, AttentionCause::AnswerTooLarge, Some(answer)).await?;
                    }
                    recorded => intent = recorded?,
                },
            }
        }
        Err(ClientError::exhausted(intent.key, self.retry.attempts(), last_status, last_error))
    }

    /// A backoff delay after the intent's attempts, with full jitter.
    fn backoff(&self, intent: &Intent) -> std::time::Duration {
        self.retry.backoff(intent.budget_used(), fastrand::f64())
    }

    /// Whether the intent's time is spent: it has been sent, is still without a final answer
    /// [`Retry::max_pending`] after its creation (store time), and was never reopened (a
    /// reopened one got a new budget).
    fn pending_too_long(&self, intent: &Intent) -> bool {
        intent.attempts > 0
            && intent.budget_start == 0
            && self.store.now().saturating_since(intent.created_at) >= self.retry.pending_limit()
    }

    /// Puts the intent in needs-attention with `cause` and the last answer; an answer too large
    /// to keep is kept without its body, so that it does not keep the intent from needing
    /// attention.
    async fn attention(
        &self,
        intent: &Intent,
        cause: AttentionCause,
        answer: Option<IntentResponse>,
    ) -> Result<Intent, ClientError> {
        let without_body = answer.as_ref().map(|answer| IntentResponse { body: Vec::new(), ..answer.clone() });
        match self.record(intent, Update::Attention(cause, answer)).await {
            Err(error) if error.is_too_large() => self.record(intent, Update::Attention(cause, without_body)).await,
            recorded => recorded,
        }
    }

    /// The request of one attempt, rebuilt from the stored descriptor.
    fn build(&self, intent: &Intent, extra: &HeaderMap) -> Result<reqwest::Request, ClientError> {
        let descriptor: Value =
            serde_json::from_slice(&intent.request).map_err(|e| ClientError::invalid(e.to_string()))?;
        let method = descriptor["method"].as_str().unwrap_or("POST");
        let method = Method::from_bytes(method.as_bytes()).map_err(|e| ClientError::invalid(e.to_string()))?;
        let url = descriptor["url"].as_str().ok_or_else(|| ClientError::invalid("no URL"))?;
        let url = match (reqwest::Url::parse(url), &self.base) {
            (Ok(absolute), _) => absolute,
            (Err(_), Some(base)) => base.join(url).map_err(|e| ClientError::invalid(e.to_string()))?,
            (Err(error), None) => {
                return Err(ClientError::invalid(format!("{error} (a path needs the client's base_url)")));
            }
        };
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
        let key = HeaderValue::from_str(&key_header_value(intent.key.as_str(), self.key_form))
            .map_err(|e| ClientError::invalid(e.to_string()))?;
        headers.insert(HeaderName::from_static(KEY_HEADER), key);
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
    ///
    /// The app's [`on_needs_attention`](IdempotentClient::on_needs_attention) callback runs
    /// with the commit, on the same thread: a call dropped while the commit is under way (a
    /// timeout around it) still tells the app.
    async fn record(&self, intent: &Intent, update: Update) -> Result<Intent, ClientError> {
        let (scope, key, was_pending) = (intent.scope.clone(), intent.key.clone(), intent.is_pending());
        let callback = self.attention.clone();
        let result = self
            .blocking(move |store| {
                let result = match update {
                    Update::Attempt(outcome) => store.record_attempt(&scope, &key, outcome),
                    Update::Response(response) => store.record_response(&scope, &key, response),
                    Update::Attention(cause, response) => store.mark_needs_attention(&scope, &key, cause, response),
                };
                if let (Ok(stored), Some(callback)) = (&result, callback)
                    && matches!(stored.state, IntentState::NeedsAttention { .. })
                    && was_pending
                {
                    callback(stored);
                }
                result
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
    Attention(AttentionCause, Option<IntentResponse>),
}

/// The contract's class of a recorded answer: replayed or not, and the problem code its
/// body names (`code`, or `type` in full: idemdb's base or the service's `base`).
fn classify(answer: &IntentResponse, base: Option<&str>) -> AnswerClass {
    let header = |name: &str| answer.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    let replayed = header(REPLAYED_HEADER) == Some("true");
    let problem = if header("content-type").is_some_and(|t| t.starts_with("application/problem+json")) {
        let body: Value = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
        problem_code(body["type"].as_str(), body["code"].as_str(), base)
    } else {
        None
    };
    classify_answer(answer.status, replayed, problem)
}

/// The headers of an answer that are stored with it: those `allowed` names, a `location`
/// without its query ([`idemdb_core::stored_response_value`]).
fn kept_headers(headers: &HeaderMap, allowed: &[String]) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| allowed.iter().any(|allowed| allowed == name.as_str()))
        .filter_map(|(name, value)| {
            let value = stored_response_value(name.as_str(), value.to_str().ok()?);
            Some((name.as_str().to_string(), value.to_string()))
        })
        .take(MAX_RESPONSE_HEADERS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed() -> Vec<String> {
        STORED_HEADERS.iter().map(|name| name.to_string()).collect()
    }

    #[test]
    fn only_allowed_headers_are_stored_in_the_descriptor() {
        let request = IntentRequest::post("/v1/payments")
            .header("Authorization", "Bearer acme")
            .header("X-Api-Key", "secret")
            .header("Accept", "application/json")
            .json(serde_json::json!({"amount": "10.50"}));
        let (descriptor, transport) = request.descriptor(&allowed());
        assert_eq!(
            descriptor,
            serde_json::json!({
                "method": "POST",
                "url": "/v1/payments",
                "headers": {"accept": "application/json", "content-type": "application/json"},
                "body": {"amount": "10.50"},
            })
        );
        assert_eq!(transport["authorization"], "Bearer acme");
        assert_eq!(transport["x-api-key"], "secret");
        let (custom, _) = request.descriptor(&["x-api-key".to_string()]);
        assert_eq!(custom["headers"], serde_json::json!({"x-api-key": "secret"}), "the allow-list is configurable");
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
        let bytes = serde_json::to_vec(&request.descriptor(&allowed()).0).unwrap();
        let intent = store.create_intent(&scope, &key, &bytes, &Canonicalizer::new()).unwrap();
        let built = client.build(&intent, &HeaderMap::new()).unwrap();
        assert_eq!(built.method(), Method::POST);
        assert_eq!(built.headers()["idempotency-key"], r#""k\"1""#);
        assert_eq!(built.headers()["authorization"], "Bearer fresh");
        assert_eq!(built.body().and_then(reqwest::Body::as_bytes), Some(&b"hello"[..]));
        assert_eq!(built.timeout(), Some(&Retry::default().attempt_timeout()));
        let bare = client.clone().key_form(KeyForm::Bare).build(&intent, &HeaderMap::new()).unwrap();
        assert_eq!(bare.headers()["idempotency-key"], "k\"1");
    }

    #[test]
    fn a_stored_path_is_resolved_against_the_base_given_at_send_time() {
        let store = Store::in_memory().unwrap();
        let scope = Scope::new("me", "pay").unwrap();
        let key = IdempotencyKey::new("k-1").unwrap();
        let bytes = serde_json::to_vec(&IntentRequest::post("/v1/payments?x=1").descriptor(&allowed()).0).unwrap();
        let intent = store.create_intent(&scope, &key, &bytes, &Canonicalizer::new()).unwrap();
        let client = IdempotentClient::new(store, reqwest::Client::new());
        let error = client.build(&intent, &HeaderMap::new()).unwrap_err();
        assert_eq!(error.code(), idemdb::ErrorCode::InvalidRequest, "a path without a base is a typed error");
        let moved = client.clone().base_url("http://10.0.0.2:9000/".parse().unwrap());
        let built = moved.build(&intent, &HeaderMap::new()).unwrap();
        assert_eq!(built.url().as_str(), "http://10.0.0.2:9000/v1/payments?x=1");
    }

    /// Response headers were stored by a deny-list: `x-api-key`, `x-auth-token`,
    /// `authorization`, `www-authenticate` and a token in `location` reached the store in plain
    /// text. Only the allow-list is kept now, and a location without its query.
    #[test]
    fn only_allowed_response_headers_are_kept_and_a_location_loses_its_query() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("set-cookie", "s=1"),
            ("connection", "close"),
            ("x-api-key", "sk_live_1"),
            ("x-auth-token", "tok_2"),
            ("authorization", "Bearer tok_3"),
            ("www-authenticate", "Bearer realm=tok_4"),
            ("content-type", "application/json"),
            ("location", "/v1/payments/p_1?token=tok_5#frag"),
            ("idempotent-replayed", "true"),
        ] {
            headers.insert(http::HeaderName::from_static(name), HeaderValue::from_static(value));
        }
        let allowed: Vec<String> = STORED_RESPONSE_HEADERS.iter().map(|name| name.to_string()).collect();
        let kept = kept_headers(&headers, &allowed);
        let names: Vec<&str> = kept.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["content-type", "location", "idempotent-replayed"]);
        assert!(kept.contains(&("location".to_string(), "/v1/payments/p_1".to_string())), "{kept:?}");
        assert!(!format!("{kept:?}").contains("tok_"), "no secret is kept: {kept:?}");
        // An app that needs one more names it.
        let more: Vec<String> = allowed.iter().cloned().chain(["x-request-id".to_string()]).collect();
        headers.insert("x-request-id", HeaderValue::from_static("r-1"));
        assert!(kept_headers(&headers, &more).iter().any(|(name, _)| name == "x-request-id"));
    }
}
