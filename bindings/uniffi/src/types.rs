//! The records and enums that cross the boundary, and their conversions to and from the
//! core's types. Vocabulary names (states, outcomes, causes) cross as the core's stable names
//! (`completed`, `lease_expired`, ...), never spelled again here.

use idemdb::{IdempotencyKey, Timestamp};

use crate::IdemdbError;

/// A scope: `(tenant, operation)`. A record's identity is `(scope, key)`.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct Scope {
    /// The tenant (the signed-in user or account on a device).
    pub tenant: String,
    /// The operation (`create_payment`).
    pub operation: String,
}

impl Scope {
    pub(crate) fn to_core(&self) -> Result<idemdb::Scope, IdemdbError> {
        Ok(idemdb::Scope::new(self.tenant.as_str(), self.operation.as_str())?)
    }

    pub(crate) fn from_core(scope: &idemdb::Scope) -> Self {
        Scope { tenant: scope.tenant().to_string(), operation: scope.operation().to_string() }
    }
}

pub(crate) fn key(key: &str) -> Result<IdempotencyKey, IdemdbError> {
    Ok(IdempotencyKey::new(key)?)
}

/// The right of one attempt to execute: complete or fail it with the same fence. A lease
/// whose fence is no longer the record's is refused (`IDEMDB_STALE_LEASE`).
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct Lease {
    /// The scope.
    pub scope: Scope,
    /// The idempotency key.
    pub key: String,
    /// The fence: only the current fence may complete or fail the record.
    pub fence: u64,
    /// When the lease expires (milliseconds since the Unix epoch, store time).
    pub expires_at_ms: u64,
    /// The attempt number this lease is for (1 for the first).
    pub attempt: u32,
}

impl Lease {
    pub(crate) fn to_core(&self) -> Result<idemdb::Lease, IdemdbError> {
        let scoped = idemdb::ScopedKey::new(self.scope.to_core()?, key(&self.key)?);
        Ok(idemdb::Lease::new(scoped, self.fence, Timestamp::from_millis(self.expires_at_ms), self.attempt))
    }

    pub(crate) fn from_core(lease: &idemdb::Lease) -> Self {
        Lease {
            scope: Scope::from_core(lease.scope()),
            key: lease.key().as_str().to_string(),
            fence: lease.fence(),
            expires_at_ms: lease.expires_at().as_millis(),
            attempt: lease.attempt(),
        }
    }
}

/// The answer to a reservation.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Enum)]
pub enum Reservation {
    /// The caller holds the lease: execute, then complete or fail it.
    Acquired {
        /// The lease.
        lease: Lease,
    },
    /// A true retry of a finished request: the stored body, byte for byte.
    Replay {
        /// `completed` or `failed` (a definitive failure).
        outcome: String,
        /// The stored result or failure body.
        body: Vec<u8>,
    },
    /// Another attempt holds a live lease.
    InProgress {
        /// Time left on that lease, in milliseconds.
        retry_after_ms: u64,
    },
    /// The key is bound to a different request: a conflict, never a replay or an execution.
    Mismatch {
        /// The state of the record the key is bound to (`completed`, `in_progress`, ...).
        stored_state: String,
    },
    /// An earlier attempt's outcome is unknown: reconcile before any new effect.
    NeedsReconciliation {
        /// Why (`lease_expired`, `reported`).
        cause: String,
    },
    /// The response was purged; only the tombstone remains. Never executed again.
    Expired {
        /// The outcome the record reached.
        outcome: String,
    },
}

impl Reservation {
    pub(crate) fn from_core(answer: idemdb::Reservation) -> Result<Self, IdemdbError> {
        use idemdb::Reservation as R;
        Ok(match answer {
            R::Acquired(lease) => Reservation::Acquired { lease: Lease::from_core(&lease) },
            R::Replay { outcome, body } => Reservation::Replay { outcome: outcome.as_str().into(), body },
            R::InProgress { retry_after } => {
                Reservation::InProgress { retry_after_ms: u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX) }
            }
            R::Mismatch { stored } => Reservation::Mismatch { stored_state: stored.as_str().into() },
            R::NeedsReconciliation { cause } => Reservation::NeedsReconciliation { cause: cause.as_str().into() },
            R::Expired { outcome } => Reservation::Expired { outcome: outcome.as_str().into() },
            other => {
                return Err(IdemdbError::new(
                    idemdb::ErrorCode::Internal,
                    format!("answer `{}` is not known to these bindings", other.name()),
                ));
            }
        })
    }
}

/// How an attempt failed.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Enum)]
pub enum Failure {
    /// Failed for good (card declined): the body is replayed to retries; a new try needs a
    /// new key.
    Definitive {
        /// The failure body replayed to retries.
        body: Vec<u8>,
    },
    /// Failed before any effect: the reservation is released and the same request may
    /// reserve again.
    Retryable,
    /// An external effect may have happened (a timeout after sending): retries are refused
    /// until the record is reconciled.
    Uncertain,
}

impl Failure {
    pub(crate) fn to_core(&self) -> idemdb::Failure {
        match self {
            Failure::Definitive { body } => idemdb::Failure::Definitive(body.clone()),
            Failure::Retryable => idemdb::Failure::Retryable,
            Failure::Uncertain => idemdb::Failure::Uncertain,
        }
    }
}

/// The outcome of one attempt to send an intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum AttemptOutcome {
    /// The request is about to leave (record it before the send, so a crash mid-send is seen).
    Sent,
    /// The server answered with a status that is not final (a 503 to retry).
    Status {
        /// The HTTP status (100 to 599).
        code: u16,
    },
    /// The connection failed.
    NetworkError,
    /// No answer in time: the request may or may not have arrived.
    Timeout,
}

impl AttemptOutcome {
    /// The core's outcome; a status that is not an HTTP status is refused.
    pub(crate) fn to_core(self) -> Result<idemdb::AttemptOutcome, IdemdbError> {
        Ok(match self {
            AttemptOutcome::Sent => idemdb::AttemptOutcome::Sent,
            AttemptOutcome::Status { code } => idemdb::AttemptOutcome::Status(http_status(code)?),
            AttemptOutcome::NetworkError => idemdb::AttemptOutcome::NetworkError,
            AttemptOutcome::Timeout => idemdb::AttemptOutcome::Timeout,
        })
    }
}

/// `code` if it is an HTTP status (100 to 599, RFC 9110 section 15): a 0 or a 999 is a bug
/// in the caller's HTTP code, and storing it would make the intent's history say something no
/// server answered.
fn http_status(code: u16) -> Result<u16, IdemdbError> {
    if (100..=599).contains(&code) {
        Ok(code)
    } else {
        Err(invalid(format!("{code} is not an HTTP status (100 to 599)")))
    }
}

/// A header as the core stores it, if its name is an HTTP token and its value holds no
/// control character but a tab (RFC 9110 section 5): a CR or LF in a stored value would let
/// whoever replays the response write headers of their own.
fn header(header: &Header) -> Result<(String, String), IdemdbError> {
    const SEPARATORS: &str = "\"(),/:;<=>?@[\\]{}";
    let token = |c: char| c.is_ascii_graphic() && !SEPARATORS.contains(c);
    if header.name.is_empty() || !header.name.chars().all(token) {
        return Err(invalid(format!("header name {:?} is not an HTTP token", header.name)));
    }
    if header.value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(invalid(format!(
            "the value of header {:?} holds a control character (CR, LF, NUL, ...)",
            header.name
        )));
    }
    Ok((header.name.clone(), header.value.clone()))
}

fn invalid(detail: String) -> IdemdbError {
    IdemdbError::new(idemdb::ErrorCode::InvalidArgument, detail)
}

/// One response header: the name an HTTP token, the value without control characters (a tab
/// aside).
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct Header {
    /// The name.
    pub name: String,
    /// The value.
    pub value: String,
}

/// The final response of an intent.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct IntentResponse {
    /// The HTTP status (100 to 599).
    pub status: u16,
    /// Headers worth keeping.
    pub headers: Vec<Header>,
    /// The body.
    pub body: Vec<u8>,
}

impl IntentResponse {
    /// The core's response; a status that is not an HTTP status, a header name that is not a
    /// token or a header value with CR, LF or another control character is refused.
    pub(crate) fn to_core(&self) -> Result<idemdb::IntentResponse, IdemdbError> {
        Ok(idemdb::IntentResponse {
            status: http_status(self.status)?,
            headers: self.headers.iter().map(header).collect::<Result<_, _>>()?,
            body: self.body.clone(),
        })
    }

    fn from_core(response: &idemdb::IntentResponse) -> Self {
        IntentResponse {
            status: response.status,
            headers: response
                .headers
                .iter()
                .map(|(name, value)| Header { name: name.clone(), value: value.clone() })
                .collect(),
            body: response.body.clone(),
        }
    }
}

/// A client intent: one mutation the app means to make, with its key persisted before the
/// first send.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct Intent {
    /// The scope.
    pub scope: Scope,
    /// The idempotency key: send it with every attempt.
    pub key: String,
    /// The canonical request (RFC 8785 JSON): what every attempt sends.
    pub request: Vec<u8>,
    /// The request's fingerprint (64 hex digits).
    pub fingerprint: String,
    /// `pending`, `completed`, `abandoned` or `needs_attention`.
    pub state: String,
    /// The final response, once `completed`; the last answer (when there was one), in
    /// `needs_attention`.
    pub response: Option<IntentResponse>,
    /// Why it was abandoned, once `abandoned`.
    pub abandon_reason: Option<String>,
    /// Why it needs a person, in `needs_attention` (`needs_reconciliation`, `expired`,
    /// `provider_key_expired`, `unreadable`, `retries_exhausted`): it is not sent again until
    /// [reopened](crate::IdemStore::reopen_intent) or abandoned.
    pub attention_cause: Option<String>,
    /// Attempts recorded when it was last reopened (0 before): its attempt budget counts from here.
    pub budget_start: u32,
    /// Attempts recorded.
    pub attempts: u32,
    /// The most recent attempt's outcome (`sent`, `status`, `network_error`, `timeout`).
    pub last_attempt: Option<String>,
    /// The most recent attempt's HTTP status, for `status`.
    pub last_attempt_status: Option<u16>,
    /// When the most recent attempt was recorded (milliseconds since the Unix epoch).
    pub last_attempt_at_ms: Option<u64>,
    /// When the intent was created.
    pub created_at_ms: u64,
    /// When it last changed.
    pub updated_at_ms: u64,
}

impl Intent {
    pub(crate) fn from_core(intent: &idemdb::Intent) -> Self {
        let (response, abandon_reason, attention_cause) = match &intent.state {
            idemdb::IntentState::Completed { response } => (Some(IntentResponse::from_core(response)), None, None),
            idemdb::IntentState::Abandoned { reason } => (None, Some(reason.clone()), None),
            idemdb::IntentState::NeedsAttention { cause, response } => (
                response.as_ref().map(IntentResponse::from_core),
                None,
                Some(idemdb::Named::as_str(*cause).to_string()),
            ),
            _ => (None, None, None),
        };
        Intent {
            scope: Scope::from_core(&intent.scope),
            key: intent.key.as_str().to_string(),
            request: intent.request.clone(),
            fingerprint: intent.fingerprint.to_hex(),
            state: intent.state.name().to_string(),
            response,
            abandon_reason,
            attention_cause,
            budget_start: intent.budget_start,
            attempts: intent.attempts,
            last_attempt: intent.last_attempt.map(|a| a.outcome.kind().as_str().to_string()),
            last_attempt_status: intent.last_attempt.and_then(|a| a.outcome.status()),
            last_attempt_at_ms: intent.last_attempt.map(|a| a.at.as_millis()),
            created_at_ms: intent.created_at.as_millis(),
            updated_at_ms: intent.updated_at.as_millis(),
        }
    }
}

/// A stored record, as [`crate::IdemStore::get`] reads it.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct RecordInfo {
    /// The state (`in_progress`, `completed`, `failed`, `uncertain`, `tombstone`, ...).
    pub state: String,
    /// The fingerprint of the request the key is bound to (64 hex digits).
    pub fingerprint: String,
    /// The fence of the newest lease.
    pub fence: u64,
    /// Leases issued since the key was bound.
    pub attempts: u32,
    /// When the lease of an `in_progress` record ends (milliseconds since the Unix epoch, store
    /// time): past it, a holder that died leaves the record to be
    /// [reconciled](crate::IdemStore::reconcile).
    pub lease_expires_at_ms: Option<u64>,
    /// Why an `uncertain` record is uncertain: `lease_expired` (its holder never finished) or
    /// `reported` (it failed as uncertain).
    pub uncertain_cause: Option<String>,
    /// When the key was bound (milliseconds since the Unix epoch).
    pub created_at_ms: u64,
    /// When the record last changed.
    pub updated_at_ms: u64,
}

impl RecordInfo {
    pub(crate) fn from_core(record: &idemdb::Record) -> Self {
        RecordInfo {
            state: record.state.kind().as_str().to_string(),
            fingerprint: record.fingerprint.to_hex(),
            fence: record.fence,
            attempts: record.attempts,
            lease_expires_at_ms: match record.state {
                idemdb::State::InProgress { lease_expires_at } => Some(lease_expires_at.as_millis()),
                _ => None,
            },
            uncertain_cause: match record.state {
                idemdb::State::Uncertain { cause } => Some(idemdb::Named::as_str(cause).to_string()),
                _ => None,
            },
            created_at_ms: record.created_at.as_millis(),
            updated_at_ms: record.updated_at.as_millis(),
        }
    }
}
