//! Client intents, as pure logic: the client side of an idempotency key.
//!
//! A client (a browser app, a mobile app, a Node process) that means to make one mutation
//! creates an **intent** first: the key is made once, and the canonical request and its
//! fingerprint are stored durably **before the first send**. Every attempt is recorded; the
//! final response is recorded when it arrives; at start-up the client resumes the intents
//! that are still pending, with the same key. An intent the client gives up on is abandoned
//! with a recorded reason. Finished intents are removed after a retention period the client
//! chooses.
//!
//! Like [`decide`](crate::decide), every change is a pure function from the stored intent to
//! the intent to write; a storage adapter runs it inside one write transaction.
//!
//! An answer that retrying cannot change but that is not a result — the server needs a
//! reconciliation, the stored response expired, or the intent's attempt budget ran out — puts
//! the intent in **needs attention** ([`Intent::needs_attention`]), with the last answer kept.
//! It is not resumed; a person (or a reconciler) then [reopens](Intent::reopen) it, which
//! gives it a new attempt budget, or [abandons](Intent::abandon) it.
//!
//! ```
//! use idemdb_core::{AttemptOutcome, Fingerprint, IdempotencyKey, Intent, IntentResponse, Scope, Timestamp};
//!
//! let at = Timestamp::from_millis(1_700_000_000_000);
//! let scope = Scope::new("me", "create_payment")?;
//! let fp = Fingerprint::of_canonical_json(br#"{"amount":"10.50"}"#);
//! let intent = Intent::new(scope, IdempotencyKey::new("k-1")?, br#"{"amount":"10.50"}"#.to_vec(), fp, at);
//!
//! let sent = intent.record_attempt(AttemptOutcome::Sent, at)?.expect("a change");
//! assert_eq!(sent.attempts, 1);
//! let response = IntentResponse { status: 201, headers: vec![], body: b"ok".to_vec() };
//! let done = sent.record_response(response.clone(), 1024, at)?.expect("a change");
//! assert!(!done.is_pending());
//! assert_eq!(done.record_response(response, 1024, at)?, None, "the same response again changes nothing");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Byte layout
//!
//! Stored under the intent's `ScopedKey::encode` (length-prefixed tenant, operation, key);
//! the value is `version:u8 (= 2) · bincode-standard(StoredIntent)`, where `StoredIntent` is,
//! in order: `request: bytes`, `fingerprint: [u8; 32]`, `state: IntentState`, `attempts: u32`,
//! `last_attempt: Option<Attempt>`, `created_at: u64`, `updated_at: u64`, `budget_start: u32`.
//!
//! Version history: format 1 had no `budget_start` (read as 0) and no `NeedsAttention` state
//! (variant 3 of `IntentState`); a format-1 value reads unchanged.

use core::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{AttentionCause, DecodeError, ErrorCode, Fingerprint, IdempotencyKey, Scope, ScopedKey, Timestamp, codec};

/// Format version of stored intent values.
pub const INTENT_FORMAT: u8 = 2;
/// The first intent format, still read.
const INTENT_FORMAT_1: u8 = 1;
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

/// The name of an [`AttemptOutcome`], without its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AttemptOutcomeKind {
    /// [`AttemptOutcome::Sent`].
    Sent,
    /// [`AttemptOutcome::Status`].
    Status,
    /// [`AttemptOutcome::NetworkError`].
    NetworkError,
    /// [`AttemptOutcome::Timeout`].
    Timeout,
}

crate::names!(AttemptOutcomeKind, "attempt outcome", {
    Sent => "sent",
    Status => "status",
    NetworkError => "network_error",
    Timeout => "timeout",
});

impl AttemptOutcome {
    /// Which outcome this is.
    pub fn kind(self) -> AttemptOutcomeKind {
        match self {
            AttemptOutcome::Sent => AttemptOutcomeKind::Sent,
            AttemptOutcome::Status(_) => AttemptOutcomeKind::Status,
            AttemptOutcome::NetworkError => AttemptOutcomeKind::NetworkError,
            AttemptOutcome::Timeout => AttemptOutcomeKind::Timeout,
        }
    }

    /// The status of a [`AttemptOutcome::Status`] outcome.
    pub fn status(self) -> Option<u16> {
        match self {
            AttemptOutcome::Status(status) => Some(status),
            _ => None,
        }
    }

    /// The outcome of kind `kind`; `status` is required for [`AttemptOutcomeKind::Status`]
    /// (and ignored otherwise). `None` when a status outcome has no status.
    pub fn of_kind(kind: AttemptOutcomeKind, status: Option<u16>) -> Option<AttemptOutcome> {
        Some(match kind {
            AttemptOutcomeKind::Sent => AttemptOutcome::Sent,
            AttemptOutcomeKind::Status => AttemptOutcome::Status(status?),
            AttemptOutcomeKind::NetworkError => AttemptOutcome::NetworkError,
            AttemptOutcomeKind::Timeout => AttemptOutcome::Timeout,
        })
    }
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
    /// Not finished: resume it (same key) until it completes, needs attention or is abandoned.
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
    /// Retrying cannot help: a person (or a reconciler) decides. Not resumed; reopen it after
    /// a reconciliation, or abandon it.
    NeedsAttention {
        /// Why.
        cause: AttentionCause,
        /// The last answer, when there was one.
        response: Option<IntentResponse>,
    },
}

/// The name of an [`IntentState`], without its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IntentStateKind {
    /// [`IntentState::Pending`].
    Pending,
    /// [`IntentState::Completed`].
    Completed,
    /// [`IntentState::Abandoned`].
    Abandoned,
    /// [`IntentState::NeedsAttention`].
    NeedsAttention,
}

crate::names!(IntentStateKind, "intent state", {
    Pending => "pending",
    Completed => "completed",
    Abandoned => "abandoned",
    NeedsAttention => "needs_attention",
});

impl IntentState {
    /// Which state this is.
    pub fn kind(&self) -> IntentStateKind {
        match self {
            IntentState::Pending => IntentStateKind::Pending,
            IntentState::Completed { .. } => IntentStateKind::Completed,
            IntentState::Abandoned { .. } => IntentStateKind::Abandoned,
            IntentState::NeedsAttention { .. } => IntentStateKind::NeedsAttention,
        }
    }

    /// The state's stable name: `pending`, `completed`, `abandoned` or `needs_attention`.
    pub fn name(&self) -> &'static str {
        self.kind().as_str()
    }
}

/// The intent rules refused a change; the stored intent is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IntentRefusal {
    /// No intent exists for the key.
    #[error("no intent for this key")]
    NotFound,
    /// The key already names an intent with a different request. A new request needs a new key.
    #[error("the key already names an intent with a different request")]
    KeyMismatch,
    /// The intent is not pending (completed, abandoned or needing attention) and cannot take
    /// this change.
    #[error("intent is {state}; cannot {action}")]
    Finished {
        /// The intent's state.
        state: IntentStateKind,
        /// What was attempted.
        action: &'static str,
    },
    /// An abandon reason was empty.
    #[error("abandon reason is empty")]
    ReasonEmpty,
    /// An abandon reason was over [`MAX_ABANDON_REASON_LEN`] bytes.
    #[error("abandon reason is {len} bytes; the limit is {max}")]
    ReasonTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A response had more than [`MAX_RESPONSE_HEADERS`] headers.
    #[error("{count} response headers; the limit is {max}")]
    TooManyHeaders {
        /// How many were given.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A response body was over the operation's result limit.
    #[error("response body is {len} bytes; the limit is {max}")]
    ResponseTooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
}

impl IntentRefusal {
    /// The stable code of this refusal.
    pub fn code(&self) -> ErrorCode {
        match self {
            IntentRefusal::NotFound => ErrorCode::NotFound,
            IntentRefusal::KeyMismatch => ErrorCode::KeyMismatch,
            IntentRefusal::Finished { .. } => ErrorCode::IntentFinished,
            IntentRefusal::ReasonEmpty | IntentRefusal::ReasonTooLong { .. } | IntentRefusal::TooManyHeaders { .. } => {
                ErrorCode::InvalidArgument
            }
            IntentRefusal::ResponseTooLarge { .. } => ErrorCode::TooLarge,
        }
    }
}

crate::coded!(IntentRefusal);

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
    /// `attempts` when the intent was last [reopened](Intent::reopen) (0 before): the intent's
    /// attempt budget counts the attempts since.
    pub budget_start: u32,
}

impl Intent {
    /// A new pending intent, created at `now`.
    pub fn new(scope: Scope, key: IdempotencyKey, request: Vec<u8>, fingerprint: Fingerprint, now: Timestamp) -> Self {
        Intent {
            scope,
            key,
            request,
            fingerprint,
            state: IntentState::Pending,
            attempts: 0,
            last_attempt: None,
            created_at: now,
            updated_at: now,
            budget_start: 0,
        }
    }

    /// Attempts since the intent was created or last reopened: what its attempt budget counts.
    pub fn budget_used(&self) -> u32 {
        self.attempts.saturating_sub(self.budget_start)
    }

    /// Whether the intent is still to be sent (not completed, abandoned or needing attention).
    pub fn is_pending(&self) -> bool {
        self.state == IntentState::Pending
    }

    /// Creating an intent where `existing` may already be stored: the stored one comes back
    /// unchanged when it has the same fingerprint (a crash between create and send is
    /// harmless), and `new` is to be written when nothing was stored. Returns the intent and
    /// whether it must be written.
    ///
    /// # Errors
    /// [`IntentRefusal::KeyMismatch`] when the stored intent has a different request.
    pub fn create(existing: Option<Intent>, new: Intent) -> Result<(Intent, bool), IntentRefusal> {
        match existing {
            Some(existing) if existing.fingerprint == new.fingerprint => Ok((existing, false)),
            Some(_) => Err(IntentRefusal::KeyMismatch),
            None => Ok((new, true)),
        }
    }

    /// Records an attempt at `now`. A `Sent` followed by its outcome is one attempt: only
    /// sends are counted, and an outcome without a preceding `Sent` counts as its own.
    /// Returns the intent to write.
    ///
    /// # Errors
    /// [`IntentRefusal::Finished`] when the intent is completed or abandoned.
    pub fn record_attempt(&self, outcome: AttemptOutcome, now: Timestamp) -> Result<Option<Intent>, IntentRefusal> {
        self.refuse_unless_pending("record an attempt")?;
        let mut next = self.clone();
        if outcome == AttemptOutcome::Sent || self.last_attempt.map(|a| a.outcome) != Some(AttemptOutcome::Sent) {
            next.attempts = next.attempts.saturating_add(1);
        }
        next.last_attempt = Some(Attempt { at: now, outcome });
        Ok(Some(next.touched(now)))
    }

    /// Records the final response and finishes the intent; `None` when the same response was
    /// already recorded (nothing to write).
    ///
    /// # Errors
    /// [`IntentRefusal::ResponseTooLarge`] for a body over `max_body_bytes`,
    /// [`IntentRefusal::TooManyHeaders`], [`IntentRefusal::Finished`] when the intent was
    /// abandoned or holds a different response.
    pub fn record_response(
        &self,
        response: IntentResponse,
        max_body_bytes: usize,
        now: Timestamp,
    ) -> Result<Option<Intent>, IntentRefusal> {
        check_response(&response, max_body_bytes)?;
        match &self.state {
            IntentState::Pending => {
                let mut next = self.clone();
                next.state = IntentState::Completed { response };
                Ok(Some(next.touched(now)))
            }
            IntentState::Completed { response: stored } if *stored == response => Ok(None),
            other => Err(IntentRefusal::Finished { state: other.kind(), action: "record a different response" }),
        }
    }

    /// Puts a pending intent in [`IntentState::NeedsAttention`] with `cause` and the last
    /// answer; `None` when it already needs attention for the same cause (nothing to write).
    ///
    /// # Errors
    /// [`IntentRefusal::ResponseTooLarge`], [`IntentRefusal::TooManyHeaders`] for the answer;
    /// [`IntentRefusal::Finished`] when the intent is completed, abandoned, or needs attention
    /// for another cause.
    pub fn needs_attention(
        &self,
        cause: AttentionCause,
        response: Option<IntentResponse>,
        max_body_bytes: usize,
        now: Timestamp,
    ) -> Result<Option<Intent>, IntentRefusal> {
        if let Some(response) = &response {
            check_response(response, max_body_bytes)?;
        }
        match &self.state {
            IntentState::Pending => {
                let mut next = self.clone();
                next.state = IntentState::NeedsAttention { cause, response };
                Ok(Some(next.touched(now)))
            }
            IntentState::NeedsAttention { cause: stored, .. } if *stored == cause => Ok(None),
            other => Err(IntentRefusal::Finished { state: other.kind(), action: "mark as needing attention" }),
        }
    }

    /// Makes an intent that needs attention pending again — after a reconciliation, when a
    /// send with the same key is what the app wants — with a new attempt budget (the attempt
    /// count is kept). `None` when it is pending already.
    ///
    /// # Errors
    /// [`IntentRefusal::Finished`] when it is completed or abandoned.
    pub fn reopen(&self, now: Timestamp) -> Result<Option<Intent>, IntentRefusal> {
        match &self.state {
            IntentState::NeedsAttention { .. } => {
                let mut next = self.clone();
                next.state = IntentState::Pending;
                next.budget_start = next.attempts;
                Ok(Some(next.touched(now)))
            }
            IntentState::Pending => Ok(None),
            other => Err(IntentRefusal::Finished { state: other.kind(), action: "reopen" }),
        }
    }

    /// Abandons a pending intent (or one that needs attention) with a reason (kept for the retention period); `None` when
    /// it was abandoned already (nothing to write).
    ///
    /// # Errors
    /// [`IntentRefusal::ReasonEmpty`], [`IntentRefusal::ReasonTooLong`] (over
    /// [`MAX_ABANDON_REASON_LEN`] bytes), [`IntentRefusal::Finished`] when it is completed.
    pub fn abandon(&self, reason: &str, now: Timestamp) -> Result<Option<Intent>, IntentRefusal> {
        if reason.is_empty() {
            return Err(IntentRefusal::ReasonEmpty);
        }
        if reason.len() > MAX_ABANDON_REASON_LEN {
            return Err(IntentRefusal::ReasonTooLong { len: reason.len(), max: MAX_ABANDON_REASON_LEN });
        }
        match &self.state {
            IntentState::Pending | IntentState::NeedsAttention { .. } => {
                let mut next = self.clone();
                next.state = IntentState::Abandoned { reason: reason.to_string() };
                Ok(Some(next.touched(now)))
            }
            IntentState::Abandoned { .. } => Ok(None),
            other => Err(IntentRefusal::Finished { state: other.kind(), action: "abandon" }),
        }
    }

    /// Whether client-side retention removes the intent at `now`: it is finished and last
    /// changed at least `keep_for` ago. Pending intents, and those that need attention, are
    /// never removed.
    pub fn is_due_for_removal(&self, keep_for: Duration, now: Timestamp) -> bool {
        matches!(self.state, IntentState::Completed { .. } | IntentState::Abandoned { .. })
            && self.updated_at.saturating_add(keep_for) <= now
    }

    fn refuse_unless_pending(&self, action: &'static str) -> Result<(), IntentRefusal> {
        match self.state.kind() {
            IntentStateKind::Pending => Ok(()),
            state => Err(IntentRefusal::Finished { state, action }),
        }
    }

    /// The intent as changed at `now`: its update time never goes backwards.
    fn touched(mut self, now: Timestamp) -> Intent {
        self.updated_at = self.updated_at.max(now);
        self
    }

    /// The stored value (everything but the identity, which is the table key).
    pub fn encode(&self) -> Vec<u8> {
        codec::encode_versioned(INTENT_FORMAT, &StoredIntentRef::of(self))
    }

    /// The intent stored under encoded `scoped` with value `value` (format 1 or 2).
    ///
    /// # Errors
    /// [`DecodeError`] for identity bytes or a value that do not decode, or a value of
    /// a newer format version.
    pub fn decode(scoped: &[u8], value: &[u8]) -> Result<Intent, DecodeError> {
        let scoped = ScopedKey::decode(scoped).map_err(|error| DecodeError::Malformed { reason: error.to_string() })?;
        let stored: StoredIntent = if value.first() == Some(&INTENT_FORMAT_1) {
            // Format 1 is format 2 without the trailing `budget_start`: read it as format 2 with
            // `budget_start` 0 (one varint byte), so one decoder serves both.
            let mut upgraded = Vec::with_capacity(value.len() + 1);
            upgraded.push(INTENT_FORMAT);
            upgraded.extend_from_slice(&value[1..]);
            upgraded.push(0);
            let stored: StoredIntent = codec::decode_versioned(&upgraded, INTENT_FORMAT)?;
            if matches!(stored.state, IntentState::NeedsAttention { .. }) {
                return Err(DecodeError::Malformed { reason: "intent format 1 has no needs-attention state".into() });
            }
            stored
        } else {
            codec::decode_versioned(value, INTENT_FORMAT)?
        };
        Ok(Intent {
            scope: scoped.scope,
            key: scoped.key,
            request: stored.request,
            fingerprint: stored.fingerprint,
            state: stored.state,
            attempts: stored.attempts,
            last_attempt: stored.last_attempt,
            created_at: stored.created_at,
            updated_at: stored.updated_at,
            budget_start: stored.budget_start,
        })
    }
}

/// A response's limits: its body size and header count.
fn check_response(response: &IntentResponse, max_body_bytes: usize) -> Result<(), IntentRefusal> {
    if response.body.len() > max_body_bytes {
        return Err(IntentRefusal::ResponseTooLarge { len: response.body.len(), max: max_body_bytes });
    }
    if response.headers.len() > MAX_RESPONSE_HEADERS {
        return Err(IntentRefusal::TooManyHeaders { count: response.headers.len(), max: MAX_RESPONSE_HEADERS });
    }
    Ok(())
}

/// The stored value, owned (for decoding).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
struct StoredIntent {
    request: Vec<u8>,
    fingerprint: Fingerprint,
    state: IntentState,
    attempts: u32,
    last_attempt: Option<Attempt>,
    created_at: Timestamp,
    updated_at: Timestamp,
    budget_start: u32,
}

/// The stored value, borrowed (for encoding): serialises to the same bytes.
#[derive(Serialize)]
struct StoredIntentRef<'a> {
    request: &'a [u8],
    fingerprint: Fingerprint,
    state: &'a IntentState,
    attempts: u32,
    last_attempt: Option<Attempt>,
    created_at: Timestamp,
    updated_at: Timestamp,
    budget_start: u32,
}

impl<'a> StoredIntentRef<'a> {
    fn of(intent: &'a Intent) -> Self {
        StoredIntentRef {
            request: &intent.request,
            fingerprint: intent.fingerprint,
            state: &intent.state,
            attempts: intent.attempts,
            last_attempt: intent.last_attempt,
            created_at: intent.created_at,
            updated_at: intent.updated_at,
            budget_start: intent.budget_start,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn pending() -> Intent {
        let scope = Scope::new("me", "pay").unwrap();
        Intent::new(
            scope,
            IdempotencyKey::new("k-1").unwrap(),
            b"{}".to_vec(),
            Fingerprint::from_bytes([1; 32]),
            at(10),
        )
    }

    fn response(status: u16, body: &[u8]) -> IntentResponse {
        IntentResponse {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_vec(),
        }
    }

    #[test]
    fn create_returns_the_stored_intent_or_refuses_a_reused_key() {
        let first = pending();
        assert_eq!(Intent::create(None, first.clone()), Ok((first.clone(), true)));
        let mut same = first.clone();
        same.created_at = at(99);
        assert_eq!(Intent::create(Some(first.clone()), same), Ok((first.clone(), false)), "the stored one wins");
        let mut other = first.clone();
        other.fingerprint = Fingerprint::from_bytes([2; 32]);
        assert_eq!(Intent::create(Some(first), other), Err(IntentRefusal::KeyMismatch));
    }

    #[test]
    fn attempts_count_sends_and_unpaired_outcomes() {
        let mut intent = pending();
        for outcome in
            [AttemptOutcome::Sent, AttemptOutcome::Status(503), AttemptOutcome::Sent, AttemptOutcome::Timeout]
        {
            intent = intent.record_attempt(outcome, at(20)).unwrap().unwrap();
        }
        assert_eq!(intent.attempts, 2);
        let intent = intent.record_attempt(AttemptOutcome::NetworkError, at(5)).unwrap().unwrap();
        assert_eq!(intent.attempts, 3, "an outcome without a send is an attempt of its own");
        assert_eq!(intent.updated_at, at(20), "time never goes back");
        assert_eq!(intent.last_attempt, Some(Attempt { at: at(5), outcome: AttemptOutcome::NetworkError }));
    }

    #[test]
    fn a_response_finishes_once_and_limits_are_typed() {
        let intent = pending();
        assert_eq!(
            intent.record_response(response(200, &[0; 5]), 4, at(11)),
            Err(IntentRefusal::ResponseTooLarge { len: 5, max: 4 })
        );
        let many =
            IntentResponse { headers: vec![("a".into(), "b".into()); MAX_RESPONSE_HEADERS + 1], ..response(200, b"") };
        assert_eq!(
            intent.record_response(many, 4, at(11)),
            Err(IntentRefusal::TooManyHeaders { count: MAX_RESPONSE_HEADERS + 1, max: MAX_RESPONSE_HEADERS })
        );
        let done = intent.record_response(response(201, b"ok"), 4, at(11)).unwrap().unwrap();
        assert_eq!(done.state.kind(), IntentStateKind::Completed);
        assert_eq!(done.record_response(response(201, b"ok"), 4, at(12)), Ok(None));
        let finished =
            Err(IntentRefusal::Finished { state: IntentStateKind::Completed, action: "record a different response" });
        assert_eq!(done.record_response(response(500, b""), 4, at(12)), finished);
        assert!(matches!(done.record_attempt(AttemptOutcome::Sent, at(12)), Err(IntentRefusal::Finished { .. })));
        assert!(matches!(done.abandon("bored", at(12)), Err(IntentRefusal::Finished { .. })));
    }

    #[test]
    fn abandon_validates_the_reason_and_is_idempotent() {
        let intent = pending();
        assert_eq!(intent.abandon("", at(11)), Err(IntentRefusal::ReasonEmpty));
        let long = "x".repeat(MAX_ABANDON_REASON_LEN + 1);
        assert_eq!(
            intent.abandon(&long, at(11)),
            Err(IntentRefusal::ReasonTooLong { len: MAX_ABANDON_REASON_LEN + 1, max: MAX_ABANDON_REASON_LEN })
        );
        let abandoned = intent.abandon("user cancelled", at(11)).unwrap().unwrap();
        assert_eq!(abandoned.state, IntentState::Abandoned { reason: "user cancelled".into() });
        assert_eq!(abandoned.abandon("again", at(12)), Ok(None));
        assert!(abandoned.is_due_for_removal(Duration::from_millis(9), at(20)));
        assert!(!abandoned.is_due_for_removal(Duration::from_millis(10), at(20)));
        assert!(!pending().is_due_for_removal(Duration::ZERO, at(u64::MAX)), "pending intents are kept");
    }

    #[test]
    fn names_round_trip() {
        for kind in AttemptOutcomeKind::ALL {
            assert_eq!(kind.as_str().parse::<AttemptOutcomeKind>(), Ok(*kind));
        }
        assert_eq!(AttemptOutcome::of_kind(AttemptOutcomeKind::Status, Some(503)), Some(AttemptOutcome::Status(503)));
        assert_eq!(AttemptOutcome::of_kind(AttemptOutcomeKind::Status, None), None);
        assert_eq!("abandoned".parse::<IntentStateKind>(), Ok(IntentStateKind::Abandoned));
    }

    fn golden_intent() -> Intent {
        let mut intent = pending();
        intent.request = b"{}".to_vec();
        intent.fingerprint = Fingerprint::from_bytes([0xab; 32]);
        intent.state = IntentState::Completed { response: response(201, b"ok") };
        intent.attempts = 2;
        intent.last_attempt = Some(Attempt { at: at(1_700_000_000_000), outcome: AttemptOutcome::Status(503) });
        intent.created_at = at(1_700_000_000_000);
        intent.updated_at = at(1_700_000_000_001);
        intent
    }

    fn unhex(hex: &str) -> Vec<u8> {
        (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
    }

    /// Golden bytes of intent format 1, as released: they still read, with `budget_start` 0.
    #[test]
    fn golden_format_1_intent_still_reads() {
        let bytes = unhex(concat!(
            "01",                                                               // format
            "027b7d",                                                           // request "{}"
            "abababababababababababababababababababababababababababababababab", // fingerprint
            "01c9",                                                             // Completed, 201
            "010c636f6e74656e742d74797065106170706c69636174696f6e2f6a736f6e",   // 1 header
            "026f6b",                                                           // body "ok"
            "02",                                                               // attempts
            "01fd0068e5cf8b01000001fbf701",                                     // Some(at, Status(503))
            "fd0068e5cf8b010000fd0168e5cf8b010000"                              // created, updated
        ));
        let intent = golden_intent();
        let scoped = ScopedKey::new(intent.scope.clone(), intent.key.clone()).encode();
        assert_eq!(Intent::decode(&scoped, &bytes), Ok(intent));
        let mut attention = bytes.clone();
        attention[36] = 3; // the state's variant: NeedsAttention did not exist in format 1
        assert!(matches!(Intent::decode(&scoped, &attention), Err(DecodeError::Malformed { .. })));
    }

    /// Golden bytes of intent format 2. A change to the encoding must add a format version.
    #[test]
    fn golden_format_2_intent() {
        let mut intent = golden_intent();
        intent.state = IntentState::NeedsAttention {
            cause: AttentionCause::NeedsReconciliation,
            response: Some(response(409, b"")),
        };
        intent.budget_start = 1;
        let bytes = intent.encode();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            concat!(
                "02",                                                               // format
                "027b7d",                                                           // request "{}"
                "abababababababababababababababababababababababababababababababab", // fingerprint
                "03",                                                               // NeedsAttention
                "00",                                                               // NeedsReconciliation
                "01fb9901",                                                         // Some(409)
                "010c636f6e74656e742d74797065106170706c69636174696f6e2f6a736f6e",   // 1 header
                "00",                                                               // body ""
                "02",                                                               // attempts
                "01fd0068e5cf8b01000001fbf701",                                     // Some(at, Status(503))
                "fd0068e5cf8b010000fd0168e5cf8b010000",                             // created, updated
                "01"                                                                // budget_start
            )
        );
        let scoped = ScopedKey::new(intent.scope.clone(), intent.key.clone()).encode();
        assert_eq!(Intent::decode(&scoped, &bytes), Ok(intent));
    }

    #[test]
    fn needs_attention_keeps_the_answer_stops_sends_and_is_finished_by_reopen_or_abandon() {
        let sent = pending().record_attempt(AttemptOutcome::Sent, at(11)).unwrap().unwrap();
        let cause = AttentionCause::NeedsReconciliation;
        let parked = sent.needs_attention(cause, Some(response(409, b"p")), 4, at(12)).unwrap().unwrap();
        assert_eq!(parked.state.kind(), IntentStateKind::NeedsAttention);
        assert_eq!(parked.state, IntentState::NeedsAttention { cause, response: Some(response(409, b"p")) });
        assert!(!parked.is_pending());
        assert!(!parked.is_due_for_removal(Duration::ZERO, at(u64::MAX)), "kept until a person acts");
        assert_eq!(parked.needs_attention(cause, None, 4, at(13)), Ok(None));
        assert!(matches!(
            parked.needs_attention(AttentionCause::Expired, None, 4, at(13)),
            Err(IntentRefusal::Finished { .. })
        ));
        assert!(matches!(parked.record_attempt(AttemptOutcome::Sent, at(13)), Err(IntentRefusal::Finished { .. })));
        assert_eq!(
            sent.needs_attention(cause, Some(response(409, &[0; 5])), 4, at(12)),
            Err(IntentRefusal::ResponseTooLarge { len: 5, max: 4 })
        );
        let reopened = parked.reopen(at(14)).unwrap().unwrap();
        assert!(reopened.is_pending());
        assert_eq!((reopened.attempts, reopened.budget_start, reopened.budget_used()), (1, 1, 0));
        assert_eq!(reopened.reopen(at(15)), Ok(None));
        let abandoned = parked.abandon("refunded by hand", at(14)).unwrap().unwrap();
        assert_eq!(abandoned.state.kind(), IntentStateKind::Abandoned);
        assert!(matches!(abandoned.reopen(at(15)), Err(IntentRefusal::Finished { .. })));
    }

    #[test]
    fn corrupt_and_newer_values_are_typed_errors() {
        let scoped = ScopedKey::new(pending().scope, pending().key).encode();
        for value in [vec![INTENT_FORMAT + 1, 0], vec![INTENT_FORMAT, 0xff, 0xff], vec![INTENT_FORMAT_1, 0xff], vec![]]
        {
            assert!(Intent::decode(&scoped, &value).is_err(), "{value:?}");
        }
        assert!(matches!(Intent::decode(b"\xff", &pending().encode()), Err(DecodeError::Malformed { .. })));
    }
}
