//! Client intents: the client side of an idempotency key.
//!
//! A client (a browser app, a mobile app, a Node process) that means to make one mutation
//! creates an **intent** first: the key is made once, and the canonical request and its
//! fingerprint are stored **durably, before the first send**. Every attempt is recorded; the
//! final response is recorded when it arrives; at start-up the client lists the intents that
//! are still pending and resumes them with the same key. An intent the client gives up on is
//! abandoned with a recorded reason. Finished intents are removed after a retention period
//! chosen by the client.
//!
//! ```
//! use idemdb::{AttemptOutcome, Canonicalizer, IntentResponse, Scope, Store};
//!
//! let store = Store::in_memory()?;
//! let scope = Scope::new("me", "create_payment")?;
//! let canon = Canonicalizer::new().exclude("/trace_id")?;
//! let key = Store::new_key()?;
//! let intent = store.create_intent(&scope, &key, br#"{"amount":"10.50","trace_id":"t1"}"#, &canon)?;
//! assert_eq!(intent.request, br#"{"amount":"10.50"}"#);
//!
//! // The process restarts: what is left to send?
//! let pending = store.pending_intents()?;
//! assert_eq!(pending[0].key, key);
//!
//! store.record_attempt(&scope, &key, AttemptOutcome::NetworkError)?;
//! store.record_response(&scope, &key, IntentResponse { status: 201, headers: vec![], body: b"ok".to_vec() })?;
//! assert!(store.pending_intents()?.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Byte layout
//!
//! Table `idemdb_intents`: key `ScopedKey::encode` (length-prefixed tenant, operation, key),
//! value `version:u8 (= 1) · bincode-standard(StoredIntent)`, where `StoredIntent` is, in
//! order: `request: bytes`, `fingerprint: [u8; 32]`, `state: IntentState`, `attempts: u32`,
//! `last_attempt: Option<Attempt>`, `created_at: u64`, `updated_at: u64`.

use std::time::Duration;

use redb::ReadableTable;
use serde::{Deserialize, Serialize};

use idemdb_core::{
    CanonicalError, Canonicalizer, DecodeError, Fingerprint, IdempotencyKey, KeyError, Scope, ScopedKey, Timestamp,
    decode_versioned, encode_versioned,
};

use crate::tables::INTENTS;
use crate::{Error, Store};

/// Format version of stored intent values.
pub const INTENT_FORMAT: u8 = 1;
/// Longest abandon reason accepted, in bytes.
pub const MAX_ABANDON_REASON_LEN: usize = 1024;
/// Most response headers an intent keeps.
pub const MAX_RESPONSE_HEADERS: usize = 64;

/// What one attempt to send an intent ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// The request is about to leave (recorded before the send, so a crash mid-send is seen).
    Sent,
    /// A response with this status arrived (a retryable one: 5xx, 409, 429...).
    Status(u16),
    /// The network failed before any response.
    NetworkError,
    /// No response arrived in time.
    Timeout,
}

/// One recorded attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// When it was recorded (store time).
    pub at: Timestamp,
    /// How it ended.
    pub outcome: AttemptOutcome,
}

/// The final response of an intent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntentResponse {
    /// HTTP status (or an application status).
    pub status: u16,
    /// Response headers worth keeping (at most [`MAX_RESPONSE_HEADERS`]).
    pub headers: Vec<(String, String)>,
    /// The response body.
    pub body: Vec<u8>,
}

/// Where an intent is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum IntentState {
    /// Not finished: resume it (same key) until it completes or is abandoned.
    Pending,
    /// The final response was recorded.
    Completed {
        /// The response.
        response: IntentResponse,
    },
    /// The client gave up.
    Abandoned {
        /// Why, as the client said.
        reason: String,
    },
}

impl IntentState {
    /// A short lower-case name: `pending`, `completed` or `abandoned`.
    pub fn name(&self) -> &'static str {
        match self {
            IntentState::Pending => "pending",
            IntentState::Completed { .. } => "completed",
            IntentState::Abandoned { .. } => "abandoned",
        }
    }
}

/// A client intent, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Intent {
    /// The scope.
    pub scope: Scope,
    /// The idempotency key, made once when the intent was created.
    pub key: IdempotencyKey,
    /// The canonical request (RFC 8785 JSON), what every attempt sends.
    pub request: Vec<u8>,
    /// Fingerprint of the canonical request.
    pub fingerprint: Fingerprint,
    /// The state.
    pub state: IntentState,
    /// Number of attempts recorded.
    pub attempts: u32,
    /// The most recent attempt.
    pub last_attempt: Option<Attempt>,
    /// When the intent was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// The stored value (everything but the identity, which is the table key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct StoredIntent {
    request: Vec<u8>,
    fingerprint: Fingerprint,
    state: IntentState,
    attempts: u32,
    last_attempt: Option<Attempt>,
    created_at: Timestamp,
    updated_at: Timestamp,
}

impl StoredIntent {
    fn into_intent(self, scoped: ScopedKey) -> Intent {
        Intent {
            scope: scoped.scope,
            key: scoped.key,
            request: self.request,
            fingerprint: self.fingerprint,
            state: self.state,
            attempts: self.attempts,
            last_attempt: self.last_attempt,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }

    fn of(intent: &Intent) -> StoredIntent {
        StoredIntent {
            request: intent.request.clone(),
            fingerprint: intent.fingerprint,
            state: intent.state.clone(),
            attempts: intent.attempts,
            last_attempt: intent.last_attempt,
            created_at: intent.created_at,
            updated_at: intent.updated_at,
        }
    }
}

/// What one [`Store::purge_intents`] pass removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IntentPurge {
    /// Finished intents removed.
    pub removed: u64,
    /// Whether more finished intents are due beyond the budget.
    pub more: bool,
}

/// An intent operation failed; nothing stored was changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IntentError {
    /// The store failed (storage, corrupt record, invalid key or scope).
    #[error(transparent)]
    Store(#[from] Error),
    /// The request is not canonicalisable JSON (or the canonicaliser is misconfigured).
    #[error("request cannot be canonicalised: {0}")]
    Request(#[from] CanonicalError),
    /// No intent exists for the key.
    #[error("no intent for this key")]
    NotFound,
    /// The key already names an intent with a different request. A new request needs a new key.
    #[error("the key already names an intent with a different request")]
    KeyReused,
    /// The intent is finished (completed or abandoned) and cannot take this change.
    #[error("intent is {state}; cannot {action}")]
    Finished {
        /// `completed` or `abandoned`.
        state: &'static str,
        /// What was attempted.
        action: &'static str,
    },
    /// An argument is out of bounds (reason too long, too many headers, body too large).
    #[error("{0}")]
    Invalid(String),
}

impl From<KeyError> for IntentError {
    fn from(error: KeyError) -> Self {
        IntentError::Store(Error::Key(error))
    }
}

macro_rules! intent_from_storage {
    ($($t:ty),*) => {$(
        impl From<$t> for IntentError {
            fn from(error: $t) -> Self {
                IntentError::Store(Error::from(error))
            }
        }
    )*};
}
intent_from_storage!(redb::StorageError, redb::TableError, redb::TransactionError, redb::CommitError);

fn corrupt(source: DecodeError) -> IntentError {
    IntentError::Store(Error::Corrupt { what: "intent", source })
}

fn decode(key: &[u8], value: &[u8]) -> Result<Intent, IntentError> {
    let scoped = ScopedKey::decode(key)?;
    let stored: StoredIntent = decode_versioned(value, INTENT_FORMAT).map_err(corrupt)?;
    Ok(stored.into_intent(scoped))
}

impl Store {
    /// Creates an intent under `(scope, key)` and stores it durably (with
    /// [`Durability::Immediate`](crate::Durability::Immediate)) before returning: call it
    /// **before the first send**. `request` is JSON; the intent keeps its canonical form (per
    /// `canonicalizer`) and fingerprint.
    ///
    /// Creating the same intent again (same key, same canonical request) returns the stored
    /// one unchanged, so a crash between create and send is harmless.
    ///
    /// # Errors
    /// [`IntentError::Request`] for a body that is not canonicalisable JSON;
    /// [`IntentError::KeyReused`] when the key names a different request; storage errors.
    pub fn create_intent(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        request: &[u8],
        canonicalizer: &Canonicalizer,
    ) -> Result<Intent, IntentError> {
        let mut created = self.create_intents(&[(scope, key, request)], canonicalizer)?;
        created.pop().ok_or(IntentError::NotFound)
    }

    /// Creates several intents **in one write transaction** (one durable commit, one flush):
    /// all of them are stored, or none. Each behaves as [`Store::create_intent`]; the intents
    /// are returned in the order given.
    ///
    /// # Errors
    /// As [`Store::create_intent`], for the first intent that fails; nothing is stored then.
    pub fn create_intents(
        &self,
        intents: &[(&Scope, &IdempotencyKey, &[u8])],
        canonicalizer: &Canonicalizer,
    ) -> Result<Vec<Intent>, IntentError> {
        let mut prepared = Vec::with_capacity(intents.len());
        for (scope, key, request) in intents {
            let canonical = canonicalizer.canonicalize(request)?;
            let fingerprint = Fingerprint::of_canonical_json(&canonical);
            prepared.push((ScopedKey::new((*scope).clone(), (*key).clone()), canonical, fingerprint));
        }
        let created = self.write(|txn| {
            let now = txn.now();
            let mut table = txn.tables().open_table(INTENTS).map_err(Error::from)?;
            let mut created = Vec::with_capacity(prepared.len());
            for (scoped, canonical, fingerprint) in prepared {
                let encoded = scoped.encode();
                if let Some(existing) = table.get(encoded.as_slice()).map_err(Error::from)? {
                    let existing = decode(&encoded, existing.value())?;
                    if existing.fingerprint != fingerprint {
                        return Err(IntentError::KeyReused);
                    }
                    created.push(existing);
                    continue;
                }
                let intent = Intent {
                    scope: scoped.scope,
                    key: scoped.key,
                    request: canonical,
                    fingerprint,
                    state: IntentState::Pending,
                    attempts: 0,
                    last_attempt: None,
                    created_at: now,
                    updated_at: now,
                };
                let value = encode_versioned(INTENT_FORMAT, &StoredIntent::of(&intent));
                table.insert(encoded.as_slice(), value.as_slice()).map_err(Error::from)?;
                created.push(intent);
            }
            Ok::<_, IntentError>(created)
        })?;
        for intent in &created {
            let key_hash = self.key_hash(&intent.scope, &intent.key);
            tracing::debug!(target: "idemdb", event = "intent_created", key_hash = %key_hash, tenant = intent.scope.tenant(), operation = intent.scope.operation());
        }
        Ok(created)
    }

    /// Reads one intent.
    ///
    /// # Errors
    /// Storage errors; a corrupt stored intent.
    pub fn intent(&self, scope: &Scope, key: &IdempotencyKey) -> Result<Option<Intent>, IntentError> {
        let encoded = ScopedKey::new(scope.clone(), key.clone()).encode();
        let read = self.db.begin_read().map_err(Error::from)?;
        let table = match read.open_table(INTENTS) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(error) => return Err(error.into()),
        };
        let Some(value) = table.get(encoded.as_slice()).map_err(Error::from)? else { return Ok(None) };
        decode(&encoded, value.value()).map(Some)
    }

    /// Every intent still pending (in any scope), oldest first: what a client resumes at
    /// start-up.
    ///
    /// # Errors
    /// Storage errors; a corrupt stored intent.
    pub fn pending_intents(&self) -> Result<Vec<Intent>, IntentError> {
        let mut pending: Vec<Intent> =
            self.all_intents()?.into_iter().filter(|intent| intent.state == IntentState::Pending).collect();
        pending.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.key.cmp(&b.key)));
        Ok(pending)
    }

    /// Every intent, in key order.
    ///
    /// # Errors
    /// Storage errors; a corrupt stored intent.
    pub fn all_intents(&self) -> Result<Vec<Intent>, IntentError> {
        let read = self.db.begin_read().map_err(Error::from)?;
        let table = match read.open_table(INTENTS) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(error) => return Err(error.into()),
        };
        let mut out = Vec::new();
        for entry in table.iter().map_err(Error::from)? {
            let (key, value) = entry.map_err(Error::from)?;
            out.push(decode(key.value(), value.value())?);
        }
        Ok(out)
    }

    /// Records an attempt of a pending intent. Returns the updated intent.
    ///
    /// # Errors
    /// [`IntentError::NotFound`]; [`IntentError::Finished`] when the intent is completed or
    /// abandoned; storage errors.
    pub fn record_attempt(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        outcome: AttemptOutcome,
    ) -> Result<Intent, IntentError> {
        self.update_intent(scope, key, "record an attempt", |intent, now| {
            if intent.state != IntentState::Pending {
                return Err(IntentError::Finished { state: intent.state.name(), action: "record an attempt" });
            }
            // A `Sent` followed by its outcome is one attempt; count sends only.
            if outcome == AttemptOutcome::Sent || intent.last_attempt.map(|a| a.outcome) != Some(AttemptOutcome::Sent) {
                intent.attempts = intent.attempts.saturating_add(1);
            }
            intent.last_attempt = Some(Attempt { at: now, outcome });
            Ok(true)
        })
    }

    /// Records the final response and finishes the intent. Recording the same response again
    /// is a no-op.
    ///
    /// # Errors
    /// [`IntentError::NotFound`]; [`IntentError::Finished`] when the intent was abandoned or
    /// holds a different response; [`IntentError::Invalid`] for a body over the operation's
    /// `max_result_bytes` or too many headers; storage errors.
    pub fn record_response(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        response: IntentResponse,
    ) -> Result<Intent, IntentError> {
        let limit = self.policy(scope.operation()).max_result_bytes();
        if response.body.len() > limit {
            return Err(IntentError::Invalid(format!(
                "response body is {} bytes; the limit is {limit}",
                response.body.len()
            )));
        }
        if response.headers.len() > MAX_RESPONSE_HEADERS {
            return Err(IntentError::Invalid(format!(
                "{} response headers; the limit is {MAX_RESPONSE_HEADERS}",
                response.headers.len()
            )));
        }
        self.update_intent(scope, key, "record a response", |intent, _| match &intent.state {
            IntentState::Pending => {
                intent.state = IntentState::Completed { response };
                Ok(true)
            }
            IntentState::Completed { response: stored } if *stored == response => Ok(false),
            other => Err(IntentError::Finished { state: other.name(), action: "record a different response" }),
        })
    }

    /// Abandons a pending intent with a reason (kept for the retention period). Abandoning an
    /// abandoned intent again is a no-op.
    ///
    /// # Errors
    /// [`IntentError::NotFound`]; [`IntentError::Finished`] when it is completed;
    /// [`IntentError::Invalid`] for an empty reason or one over
    /// [`MAX_ABANDON_REASON_LEN`] bytes; storage errors.
    pub fn abandon_intent(&self, scope: &Scope, key: &IdempotencyKey, reason: &str) -> Result<Intent, IntentError> {
        if reason.is_empty() || reason.len() > MAX_ABANDON_REASON_LEN {
            return Err(IntentError::Invalid(format!(
                "abandon reason must be 1..={MAX_ABANDON_REASON_LEN} bytes (got {})",
                reason.len()
            )));
        }
        self.update_intent(scope, key, "abandon", |intent, _| match &intent.state {
            IntentState::Pending => {
                intent.state = IntentState::Abandoned { reason: reason.to_string() };
                Ok(true)
            }
            IntentState::Abandoned { .. } => Ok(false),
            other => Err(IntentError::Finished { state: other.name(), action: "abandon" }),
        })
    }

    /// Client-side retention: removes up to `budget` finished (completed or abandoned)
    /// intents that last changed at least `keep_for` ago. Pending intents are never removed.
    ///
    /// # Errors
    /// Storage errors; a corrupt stored intent (nothing is removed).
    pub fn purge_intents(&self, keep_for: Duration, budget: usize) -> Result<IntentPurge, IntentError> {
        self.write(|txn| {
            let now = txn.retention_time();
            let mut table = txn.tables().open_table(INTENTS).map_err(Error::from)?;
            let mut due = Vec::new();
            let mut more = false;
            for entry in table.iter().map_err(Error::from)? {
                let (key, value) = entry.map_err(Error::from)?;
                let intent = decode(key.value(), value.value())?;
                if intent.state != IntentState::Pending && intent.updated_at.saturating_add(keep_for) <= now {
                    if due.len() == budget {
                        more = true;
                        break;
                    }
                    due.push(key.value().to_vec());
                }
            }
            for key in &due {
                table.remove(key.as_slice()).map_err(Error::from)?;
            }
            Ok::<_, IntentError>(IntentPurge { removed: due.len() as u64, more })
        })
    }

    /// Reads, changes and writes one intent in one write transaction. `change` returns whether
    /// it changed anything (when not, nothing is written).
    fn update_intent(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        action: &'static str,
        change: impl FnOnce(&mut Intent, Timestamp) -> Result<bool, IntentError>,
    ) -> Result<Intent, IntentError> {
        let encoded = ScopedKey::new(scope.clone(), key.clone()).encode();
        let key_hash = self.key_hash_of(&encoded);
        let intent = self.write(|txn| {
            let now = txn.now();
            let mut table = txn.tables().open_table(INTENTS).map_err(Error::from)?;
            let mut intent = match table.get(encoded.as_slice()).map_err(Error::from)? {
                Some(value) => decode(&encoded, value.value())?,
                None => return Err(IntentError::NotFound),
            };
            if change(&mut intent, now)? {
                intent.updated_at = intent.updated_at.max(now);
                let value = encode_versioned(INTENT_FORMAT, &StoredIntent::of(&intent));
                table.insert(encoded.as_slice(), value.as_slice()).map_err(Error::from)?;
            }
            Ok::<_, IntentError>(intent)
        })?;
        tracing::debug!(target: "idemdb", event = "intent_updated", action, key_hash = %key_hash, state = intent.state.name());
        Ok(intent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Clock, ManualClock};

    fn setup() -> (Store, ManualClock, Scope, Canonicalizer) {
        let clock = ManualClock::new(1_700_000_000_000);
        let store = Store::builder().clock(clock.clone()).in_memory().unwrap();
        let scope = Scope::new("me", "pay").unwrap();
        let canon = Canonicalizer::new().exclude("/trace_id").unwrap();
        (store, clock, scope, canon)
    }

    fn response(status: u16, body: &[u8]) -> IntentResponse {
        IntentResponse {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_vec(),
        }
    }

    #[test]
    fn create_stores_canonical_request_and_fingerprint_and_is_idempotent() {
        let (store, clock, scope, canon) = setup();
        let key = IdempotencyKey::new("k-1").unwrap();
        let first = store.create_intent(&scope, &key, br#"{"b":1,"a":"x","trace_id":"t1"}"#, &canon).unwrap();
        assert_eq!(first.request, br#"{"a":"x","b":1}"#);
        assert_eq!(first.fingerprint, Fingerprint::of_canonical_json(br#"{"a":"x","b":1}"#));
        assert_eq!(first.state, IntentState::Pending);
        assert_eq!(first.created_at.as_millis(), 1_700_000_000_000);
        clock.advance(Duration::from_secs(5));
        // Same request (other transport field): the stored intent comes back unchanged.
        let again = store.create_intent(&scope, &key, br#"{"a":"x","b":1,"trace_id":"t2"}"#, &canon).unwrap();
        assert_eq!(again, first);
        // A different request under the same key is refused and changes nothing.
        let err = store.create_intent(&scope, &key, br#"{"a":"y","b":1}"#, &canon).unwrap_err();
        assert!(matches!(err, IntentError::KeyReused), "{err:?}");
        assert_eq!(store.intent(&scope, &key).unwrap(), Some(first));
    }

    #[test]
    fn a_batch_is_stored_whole_or_not_at_all() {
        let (store, _, scope, canon) = setup();
        let keys: Vec<IdempotencyKey> = (0..3).map(|i| IdempotencyKey::new(format!("b-{i}")).unwrap()).collect();
        let requests: [&[u8]; 3] = [b"{\"n\":0}", b"{\"n\":1}", b"{\"n\":2}"];
        let batch: Vec<(&Scope, &IdempotencyKey, &[u8])> =
            keys.iter().zip(requests).map(|(k, r)| (&scope, k, r)).collect();
        let created = store.create_intents(&batch, &canon).unwrap();
        assert_eq!(created.iter().map(|i| i.key.as_str()).collect::<Vec<_>>(), ["b-0", "b-1", "b-2"]);
        assert_eq!(store.pending_intents().unwrap().len(), 3);
        // A batch with one bad member stores nothing, not even its good members.
        let fresh = IdempotencyKey::new("b-new").unwrap();
        let bad: Vec<(&Scope, &IdempotencyKey, &[u8])> =
            vec![(&scope, &fresh, b"{}"), (&scope, &keys[0], b"{\"n\":9}")];
        assert!(matches!(store.create_intents(&bad, &canon), Err(IntentError::KeyReused)));
        assert_eq!(store.intent(&scope, &fresh).unwrap(), None);
        let invalid: Vec<(&Scope, &IdempotencyKey, &[u8])> =
            vec![(&scope, &fresh, b"{}"), (&scope, &keys[1], b"{oops")];
        assert!(matches!(store.create_intents(&invalid, &canon), Err(IntentError::Request(_))));
        assert_eq!(store.all_intents().unwrap().len(), 3);
    }

    #[test]
    fn invalid_json_is_a_typed_error_and_stores_nothing() {
        let (store, _, scope, canon) = setup();
        let key = IdempotencyKey::new("k-1").unwrap();
        let err = store.create_intent(&scope, &key, b"{not json", &canon).unwrap_err();
        assert!(matches!(err, IntentError::Request(CanonicalError::InvalidJson { .. })), "{err:?}");
        assert_eq!(store.intent(&scope, &key).unwrap(), None);
        assert!(store.all_intents().unwrap().is_empty());
    }

    #[test]
    fn attempts_are_counted_and_pending_lists_oldest_first() {
        let (store, clock, scope, canon) = setup();
        let other = Scope::new("me", "refund").unwrap();
        let k1 = IdempotencyKey::new("k-b").unwrap();
        let k2 = IdempotencyKey::new("k-a").unwrap();
        store.create_intent(&scope, &k1, b"{}", &canon).unwrap();
        clock.advance(Duration::from_millis(10));
        store.create_intent(&other, &k2, b"[1]", &canon).unwrap();
        let pending = store.pending_intents().unwrap();
        assert_eq!(pending.iter().map(|i| i.key.as_str()).collect::<Vec<_>>(), ["k-b", "k-a"]);

        store.record_attempt(&scope, &k1, AttemptOutcome::Sent).unwrap();
        store.record_attempt(&scope, &k1, AttemptOutcome::Status(503)).unwrap();
        store.record_attempt(&scope, &k1, AttemptOutcome::Sent).unwrap();
        clock.advance(Duration::from_millis(10));
        let after = store.record_attempt(&scope, &k1, AttemptOutcome::Timeout).unwrap();
        assert_eq!(after.attempts, 2);
        assert_eq!(after.last_attempt, Some(Attempt { at: clock.now(), outcome: AttemptOutcome::Timeout }));
        // Outcomes recorded without a preceding `Sent` count as attempts of their own.
        let after = store.record_attempt(&scope, &k1, AttemptOutcome::NetworkError).unwrap();
        assert_eq!(after.attempts, 3);
        assert!(matches!(
            store.record_attempt(&scope, &IdempotencyKey::new("nope").unwrap(), AttemptOutcome::Sent),
            Err(IntentError::NotFound)
        ));
    }

    #[test]
    fn response_finishes_the_intent_once() {
        let (store, _, scope, canon) = setup();
        let key = IdempotencyKey::new("k-1").unwrap();
        store.create_intent(&scope, &key, b"{}", &canon).unwrap();
        let done = store.record_response(&scope, &key, response(201, b"{\"id\":1}")).unwrap();
        assert_eq!(done.state, IntentState::Completed { response: response(201, b"{\"id\":1}") });
        assert!(store.pending_intents().unwrap().is_empty());
        // The same response again is a no-op; a different one is refused.
        assert_eq!(store.record_response(&scope, &key, response(201, b"{\"id\":1}")).unwrap(), done);
        assert!(matches!(
            store.record_response(&scope, &key, response(500, b"")),
            Err(IntentError::Finished { state: "completed", .. })
        ));
        assert!(matches!(
            store.record_attempt(&scope, &key, AttemptOutcome::Sent),
            Err(IntentError::Finished { state: "completed", .. })
        ));
        assert!(matches!(store.abandon_intent(&scope, &key, "bored"), Err(IntentError::Finished { .. })));
        assert_eq!(store.intent(&scope, &key).unwrap(), Some(done));
    }

    #[test]
    fn abandon_records_the_reason_and_validates_it() {
        let (store, _, scope, canon) = setup();
        let key = IdempotencyKey::new("k-1").unwrap();
        store.create_intent(&scope, &key, b"{}", &canon).unwrap();
        assert!(matches!(store.abandon_intent(&scope, &key, ""), Err(IntentError::Invalid(_))));
        let long = "x".repeat(MAX_ABANDON_REASON_LEN + 1);
        assert!(matches!(store.abandon_intent(&scope, &key, &long), Err(IntentError::Invalid(_))));
        let abandoned = store.abandon_intent(&scope, &key, "user cancelled").unwrap();
        assert_eq!(abandoned.state, IntentState::Abandoned { reason: "user cancelled".into() });
        assert_eq!(store.abandon_intent(&scope, &key, "again").unwrap(), abandoned);
        assert!(matches!(store.record_response(&scope, &key, response(200, b"")), Err(IntentError::Finished { .. })));
        assert!(store.pending_intents().unwrap().is_empty());
    }

    #[test]
    fn oversized_responses_are_refused() {
        let (store, _, scope, canon) = setup();
        let key = IdempotencyKey::new("k-1").unwrap();
        store.create_intent(&scope, &key, b"{}", &canon).unwrap();
        let limit = store.policy("pay").max_result_bytes();
        let big = IntentResponse { status: 200, headers: vec![], body: vec![0; limit + 1] };
        assert!(matches!(store.record_response(&scope, &key, big), Err(IntentError::Invalid(_))));
        let many = IntentResponse {
            status: 200,
            headers: vec![("a".into(), "b".into()); MAX_RESPONSE_HEADERS + 1],
            body: vec![],
        };
        assert!(matches!(store.record_response(&scope, &key, many), Err(IntentError::Invalid(_))));
        assert_eq!(store.pending_intents().unwrap().len(), 1);
    }

    #[test]
    fn retention_removes_only_finished_intents_after_keep_for() {
        let (store, clock, scope, canon) = setup();
        let keys: Vec<IdempotencyKey> = (0..4).map(|i| IdempotencyKey::new(format!("k-{i}")).unwrap()).collect();
        for key in &keys {
            store.create_intent(&scope, key, b"{}", &canon).unwrap();
        }
        store.record_response(&scope, &keys[0], response(200, b"")).unwrap();
        store.abandon_intent(&scope, &keys[1], "gave up").unwrap();
        store.record_response(&scope, &keys[2], response(200, b"")).unwrap();
        let keep = Duration::from_secs(3600);
        clock.advance(keep - Duration::from_millis(1));
        assert_eq!(store.purge_intents(keep, 10).unwrap(), IntentPurge { removed: 0, more: false });
        clock.advance(Duration::from_millis(1));
        assert_eq!(store.purge_intents(keep, 1).unwrap(), IntentPurge { removed: 1, more: true });
        assert_eq!(store.purge_intents(keep, 10).unwrap(), IntentPurge { removed: 2, more: false });
        clock.advance(Duration::from_secs(365 * 24 * 3600));
        assert_eq!(store.purge_intents(keep, 10).unwrap().removed, 0);
        let left = store.all_intents().unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].key, keys[3]);
        assert_eq!(left[0].state, IntentState::Pending);
    }

    #[test]
    fn intents_survive_reopening_a_file_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client.idemdb");
        let scope = Scope::new("me", "pay").unwrap();
        let key = Store::new_key().unwrap();
        {
            let store = Store::open(&path).unwrap();
            store.create_intent(&scope, &key, br#"{"amount":"1"}"#, &Canonicalizer::new()).unwrap();
            store.record_attempt(&scope, &key, AttemptOutcome::Sent).unwrap();
        }
        let store = Store::open(&path).unwrap();
        let pending = store.pending_intents().unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].key, key);
        assert_eq!(pending[0].attempts, 1);
        assert_eq!(pending[0].request, br#"{"amount":"1"}"#);
    }

    #[test]
    fn corrupt_and_newer_values_are_typed_errors() {
        let (store, _, scope, canon) = setup();
        let key = IdempotencyKey::new("k-1").unwrap();
        store.create_intent(&scope, &key, b"{}", &canon).unwrap();
        let encoded = ScopedKey::new(scope.clone(), key.clone()).encode();
        for value in [vec![INTENT_FORMAT + 1, 0], vec![INTENT_FORMAT, 0xff, 0xff], vec![]] {
            let tx = store.db.writable().unwrap().begin_write().unwrap();
            tx.open_table(INTENTS).unwrap().insert(encoded.as_slice(), value.as_slice()).unwrap();
            tx.commit().unwrap();
            let err = store.intent(&scope, &key).unwrap_err();
            assert!(matches!(err, IntentError::Store(Error::Corrupt { what: "intent", .. })), "{err:?}");
            assert!(matches!(store.pending_intents(), Err(IntentError::Store(Error::Corrupt { .. }))));
        }
    }

    /// Golden bytes of intent format 1. A change to the encoding must add a format version.
    #[test]
    fn golden_format_1_intent() {
        let stored = StoredIntent {
            request: b"{}".to_vec(),
            fingerprint: Fingerprint::from_bytes([0xab; 32]),
            state: IntentState::Completed { response: response(201, b"ok") },
            attempts: 2,
            last_attempt: Some(Attempt {
                at: Timestamp::from_millis(1_700_000_000_000),
                outcome: AttemptOutcome::Status(503),
            }),
            created_at: Timestamp::from_millis(1_700_000_000_000),
            updated_at: Timestamp::from_millis(1_700_000_000_001),
        };
        let bytes = encode_versioned(INTENT_FORMAT, &stored);
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            concat!(
                "01",                                                               // format
                "027b7d",                                                           // request "{}"
                "abababababababababababababababababababababababababababababababab", // fingerprint
                "01c9",                                                             // Completed, 201
                "010c636f6e74656e742d74797065106170706c69636174696f6e2f6a736f6e",   // 1 header
                "026f6b",                                                           // body "ok"
                "02",                                                               // attempts
                "01fd0068e5cf8b01000001fbf701",                                     // Some(at, Status(503))
                "fd0068e5cf8b010000fd0168e5cf8b010000"                              // created, updated
            )
        );
        assert_eq!(decode_versioned::<StoredIntent>(&bytes, INTENT_FORMAT).unwrap(), stored);
    }
}
