//! The core's names that every storage adapter re-exports: one curated list, so `idemdb` (the
//! embedded store) and `idemdb-postgres` offer the same vocabulary and cannot drift apart.
//!
//! An adapter glob-re-exports this module beside the few names it owns (its store, its
//! errors, its builder), so `idemdb::Scope` and `idemdb_postgres::Scope` are the same item as
//! [`crate::Scope`]. Everything else in the core stays reachable through the adapter's
//! `core` re-export (`idemdb::core::decide`, `idemdb_postgres::core::encode_record`).
//!
//! A name belongs here when an adapter's user writes it: the identities and the fingerprint,
//! the answers and records the store hands back, the error codes, the intent and workflow
//! values, and the client retry contract. The pure decision functions ([`crate::decide`],
//! the transitions, the codecs) are the adapters' business and stay out.
//!
//! ```
//! use idemdb_core::prelude::*;
//!
//! let scope = Scope::new("acme", "create_payment")?;
//! let key = IdempotencyKey::new("order-842")?;
//! let pair = ScopedKey::new(scope.clone(), key);
//! assert_eq!(pair.scope, scope);
//! assert_eq!(ErrorCode::KeyMismatch.as_str(), "IDEMDB_KEY_MISMATCH");
//! # Ok::<(), KeyError>(())
//! ```

/// Identities, fingerprints, answers, records, codes, intents and the workflow's values.
pub use crate::{
    Admission, Attempt, AttemptOutcome, AttemptOutcomeKind, Attention, AttentionCause, AttentionKind, AuditEvent,
    AuditKind, CanonicalError, Canonicalizer, Claim, Coded, Compensation, Corrupt, DecisionTime, Delivery,
    DeliveryOutcome, DeliveryOutcomeKind, DeliveryRecord, DomainGuard, DuplicateCost, EffectDoubt, EffectName,
    EffectReport, ErrorCode, ExpiredLease, Failure, FailureKind, Fingerprint, FingerprintBuilder, INTENT_FORMAT,
    IdempotencyKey, InboxAnswer, InboxRefusal, Intent, IntentRefusal, IntentResponse, IntentState, IntentStateKind,
    JobAnswer, JobLease, JobRecord, JobRefusal, JobState, JobStateKind, KeyError, KeyHash, Lease,
    MAX_ABANDON_REASON_LEN, MAX_RESPONSE_HEADERS, Named, NewEffect, NewerVersion, Normaliser, ObjectRecord, OutboxItem,
    OutboxRefusal, OutboxState, OutboxStateKind, OutcomeClass, Policy, PolicyError, ProviderState, ProviderStateKind,
    PurgeReport, Record, RecordError, Refusal, Reservation, ReservationKind, Reserve, Resolution, ResolutionCause,
    ResolutionKind, RetentionBudget, Scope, ScopedKey, State, StateKind, StepRecord, Timestamp, TransitionError,
    UncertainCause, UnknownName, ValidTransition,
};

/// The business write: application rows committed with the store's transitions.
pub use crate::{BusinessWrite, MAX_ROW_KEY_LEN, MAX_ROW_VALUE_LEN, Row, RowError, RowTable, RowWrite, Settle};

/// What a store is configured with: its policies and the defaults both adapters share.
pub use crate::{DEFAULT_AUDIT_RETENTION, InvalidPolicy, Policies, delivery_policy_name};

/// The client retry contract (see [`crate::classify_answer`]).
pub use crate::{
    ATTENTION_PROBLEMS, AnswerClass, AttentionProblem, DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_ATTEMPTS_PER_CALL,
    DEFAULT_ATTEMPTS_PER_INTENT, DEFAULT_BASE_DELAY, DEFAULT_MAX_DELAY, DEFAULT_PROBLEM_BASE, KEY_HEADER, KeyForm,
    REPLAYED_HEADER, RETRIED_STATUSES, STORED_RESPONSE_HEADERS, backoff_ceiling, backoff_delay, classify_answer,
    key_header_value, problem_code, retry_after, stored_response_value,
};
