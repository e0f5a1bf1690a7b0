//! [`ClientError`]: why an intent has no final answer, or a refused one.

use http::StatusCode;
use idemdb::{AttentionCause, Coded, ErrorCode, IdempotencyKey, IntentError, IntentRefusal};

use super::Answer;

/// A call of [`IdempotentClient`](super::IdempotentClient) failed.
///
/// A [conflict](ClientError::is_conflict), an [abandoned](ErrorCode::Abandoned) intent and one
/// that [needs attention](ClientError::needs_attention) are final: nothing is sent again
/// until a person reopens it. After a call's [retries ran out](ClientError::is_retries_exhausted)
/// or a store error the intent stays pending, and
/// [`resume_pending`](super::IdempotentClient::resume_pending) sends it again with the same key.
#[derive(Debug)]
pub struct ClientError {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// The server answered 422: the key is bound to a different request.
    Conflict(Box<Answer>),
    /// No final answer after every attempt.
    RetriesExhausted {
        key: IdempotencyKey,
        attempts: u32,
        last_status: Option<StatusCode>,
        last_error: Option<reqwest::Error>,
    },
    /// The intent was abandoned.
    Abandoned { reason: String },
    /// The intent needs a person; the last answer, when there was one.
    NeedsAttention { key: IdempotencyKey, cause: AttentionCause, answer: Option<Box<Answer>>, why: Option<String> },
    /// The intent store failed (or refused the request).
    Store(IntentError),
    /// The request cannot be built or sent as stored (a bad URL, method or header).
    InvalidRequest(String),
}

impl ClientError {
    pub(crate) fn conflict(answer: Answer) -> Self {
        ClientError { kind: Kind::Conflict(Box::new(answer)) }
    }

    pub(crate) fn exhausted(
        key: IdempotencyKey,
        attempts: u32,
        last_status: Option<StatusCode>,
        last_error: Option<reqwest::Error>,
    ) -> Self {
        ClientError { kind: Kind::RetriesExhausted { key, attempts, last_status, last_error } }
    }

    pub(crate) fn abandoned(reason: String) -> Self {
        ClientError { kind: Kind::Abandoned { reason } }
    }

    pub(crate) fn attention(key: IdempotencyKey, cause: AttentionCause, answer: Option<Answer>) -> Self {
        ClientError { kind: Kind::NeedsAttention { key, cause, answer: answer.map(Box::new), why: None } }
    }

    /// Says why an intent came to need attention, when the cause alone does not (a time
    /// budget spent, an answer too large to store).
    pub(crate) fn because(mut self, reason: Option<String>) -> Self {
        if let Kind::NeedsAttention { why, .. } = &mut self.kind {
            *why = reason;
        }
        self
    }

    /// Whether the store refused an answer over its size limit (the operation's
    /// `max_result_bytes`).
    pub(crate) fn is_too_large(&self) -> bool {
        matches!(self.kind, Kind::Store(IntentError::Refused(IntentRefusal::ResponseTooLarge { .. })))
    }

    pub(crate) fn invalid(reason: impl Into<String>) -> Self {
        ClientError { kind: Kind::InvalidRequest(reason.into()) }
    }

    /// The stable code: [`ErrorCode::KeyMismatch`] (the server's 422), [`ErrorCode::RetriesExhausted`],
    /// [`ErrorCode::Abandoned`], [`ErrorCode::NeedsAttention`], [`ErrorCode::InvalidRequest`],
    /// or the store error's code.
    pub fn code(&self) -> ErrorCode {
        match &self.kind {
            Kind::Conflict(_) => ErrorCode::KeyMismatch,
            Kind::RetriesExhausted { .. } => ErrorCode::RetriesExhausted,
            Kind::Abandoned { .. } => ErrorCode::Abandoned,
            Kind::NeedsAttention { .. } => ErrorCode::NeedsAttention,
            Kind::Store(error) => error.code(),
            Kind::InvalidRequest(_) => ErrorCode::InvalidRequest,
        }
    }

    /// Whether the server refused the key as bound to a different request (422). Never
    /// retried: a new request needs a new intent and key.
    pub fn is_conflict(&self) -> bool {
        matches!(self.kind, Kind::Conflict(_))
    }

    /// Whether every attempt failed; the intent stays pending and is resumed later.
    pub fn is_retries_exhausted(&self) -> bool {
        matches!(self.kind, Kind::RetriesExhausted { .. })
    }

    /// Why the intent needs attention, when it does: it is not resumed until reopened
    /// ([`Store::reopen_intent`](idemdb::Store::reopen_intent)) or abandoned.
    pub fn needs_attention(&self) -> Option<AttentionCause> {
        match &self.kind {
            Kind::NeedsAttention { cause, .. } => Some(*cause),
            _ => None,
        }
    }

    /// The server's answer: the 422 of a conflict, or the last answer of an intent that needs
    /// attention.
    pub fn answer(&self) -> Option<&Answer> {
        match &self.kind {
            Kind::Conflict(answer) => Some(answer),
            Kind::NeedsAttention { answer, .. } => answer.as_deref(),
            _ => None,
        }
    }

    /// The status of the last attempt that got one, when retries ran out.
    pub fn last_status(&self) -> Option<StatusCode> {
        match &self.kind {
            Kind::RetriesExhausted { last_status, .. } => *last_status,
            _ => None,
        }
    }
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Conflict(answer) => {
                write!(f, "the server refused key {} as bound to a different request (422)", KeyLen(&answer.key))
            }
            Kind::RetriesExhausted { key, attempts, last_status, .. } => {
                write!(f, "no final answer for the intent with key {} after {attempts} attempts", KeyLen(key))?;
                if let Some(status) = last_status {
                    write!(f, " (last status {status})")?;
                }
                f.write_str("; it stays pending and is resumed later")
            }
            Kind::Abandoned { reason } => write!(f, "the intent was abandoned: {reason}"),
            Kind::NeedsAttention { key, cause, answer, why } => {
                write!(f, "the intent with key {} needs attention ({cause})", KeyLen(key))?;
                if let Some(answer) = answer {
                    write!(f, " after status {}", answer.status)?;
                }
                if let Some(why) = why {
                    write!(f, ": {why}")?;
                }
                f.write_str("; it is not sent again until reopened or abandoned")
            }
            Kind::Store(error) => write!(f, "intent store: {error}"),
            Kind::InvalidRequest(reason) => write!(f, "the stored request cannot be sent: {reason}"),
        }
    }
}

/// A key in messages: its length only (keys are credentials of a sort).
struct KeyLen<'a>(&'a IdempotencyKey);

impl std::fmt::Display for KeyLen<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} bytes>", self.0.as_str().len())
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            Kind::Store(error) => Some(error),
            Kind::RetriesExhausted { last_error: Some(error), .. } => Some(error),
            _ => None,
        }
    }
}

impl From<IntentError> for ClientError {
    fn from(error: IntentError) -> Self {
        ClientError { kind: Kind::Store(error) }
    }
}

impl Coded for ClientError {
    fn code(&self) -> ErrorCode {
        ClientError::code(self)
    }
}
