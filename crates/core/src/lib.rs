//! The pure core of idemdb: identities, canonical request fingerprints and the idempotency
//! state machine, with no I/O, no clock and no storage.
//!
//! An idempotency key names one intended mutation across unreliable deliveries. A storage
//! adapter (the redb store in the `idemdb` crate, or another) reads the record for
//! `(scope, key)`, calls [`decide`], writes what it returns and commits — all in one write
//! transaction. Because the decision is a pure function, every adapter answers alike, and the
//! state table is tested here exhaustively.
//!
//! ```
//! use idemdb_core::{
//!     complete, decide, Canonicalizer, DecisionContext, IdempotencyKey, Normaliser, OutcomeClass, Policy,
//!     Reservation, Scope, Timestamp,
//! };
//!
//! let canon = Canonicalizer::new()
//!     .exclude("/trace_id")?
//!     .normalise("/currency", Normaliser::Uppercase)?;
//! let fp = canon.fingerprint(br#"{"amount": 1050, "currency": "brl", "trace_id": "t-1"}"#)?;
//! let retry = canon.fingerprint(br#"{"currency":"BRL","amount":1050,"trace_id":"t-2"}"#)?;
//! assert_eq!(fp, retry, "transport fields and spelling do not change the intent");
//!
//! let (scope, key) = (Scope::new("acme", "create_payment")?, IdempotencyKey::new("order-842")?);
//! let policy = Policy::default();
//! let t0 = DecisionContext::new(Timestamp::from_millis(1_700_000_000_000), &policy);
//! let reserved = decide(None, &scope, &key, &fp, t0)?;
//! let Reservation::Acquired(lease) = reserved.answer else { unreachable!() };
//! let record = reserved.write.expect("a reservation writes a record");
//!
//! // ... perform the effect, then store its result:
//! let done = complete(&record, lease.fence(), b"charge ch_1".to_vec(), t0.now, &policy)?;
//! assert_eq!(
//!     decide(Some(done), &scope, &key, &retry, t0)?.answer,
//!     Reservation::Replay { outcome: OutcomeClass::Completed, body: b"charge ch_1".to_vec() },
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! What every adapter does around the decision is here too, so an adapter writes only its I/O:
//! [`Decision::unchanged`] (an answer that needs no write transaction) and
//! [`Decision::audit_kind`]; [`LeaseStep`] (complete, fail, renew as data, with the event each
//! records); [`AuditEvent::new`] and [`AuditBatch::due`] (when buffered events are written);
//! [`Policies`] (per-operation policies, checked at open) and [`delivery_policy_name`].
//!
//! [`prelude`] is the curated list of the core's names that every storage adapter re-exports,
//! so the adapters offer one vocabulary.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod answer;
mod audit;
mod canonical;
mod codec;
mod codes;
mod decide;
mod fingerprint;
mod intent;
mod key;
mod names;
mod policy;
pub mod prelude;
mod purge;
mod record;
mod refusal;
mod reserve;
mod retry;
mod rows;
mod step;
mod time;
mod transition;
mod workflow;

pub use answer::{Lease, Reservation, ReservationKind};
pub use audit::{AuditBatch, AuditEvent, AuditKind, DEFAULT_AUDIT_RETENTION, KeyHash};
pub use canonical::{CanonicalError, Canonicalizer, Normaliser};
pub use codec::{
    Corrupt, DecodeError, RECORD_FORMAT, decode_record, decode_versioned, encode_append, encode_record,
    encode_versioned, split_version,
};
pub use codes::{Coded, ErrorCode};
pub use decide::{Decision, DecisionContext, decide, needs_effect_census};
pub use fingerprint::{FINGERPRINT_CONTEXT, Fingerprint, FingerprintBuilder};
pub use intent::{
    Attempt, AttemptOutcome, AttemptOutcomeKind, INTENT_FORMAT, Intent, IntentRefusal, IntentResponse, IntentState,
    IntentStateKind, MAX_ABANDON_REASON_LEN, MAX_RESPONSE_HEADERS,
};
pub use key::{
    IdempotencyKey, IdentityPart, KeyError, MAX_CORRELATION_LEN, MAX_KEY_LEN, MAX_SCOPE_PART_LEN, Scope, ScopedKey,
    check_correlation, validate_correlation,
};
pub use names::{Named, UnknownName, as_name};
pub use policy::{
    DEFAULT_DISPATCH_BACKOFF, DEFAULT_LEASE_TTL, DEFAULT_MAX_DISPATCH_BACKOFF, DEFAULT_MAX_RESULT_BYTES,
    DEFAULT_PROVIDER_KEY_RETENTION, DEFAULT_PROVIDER_SETTLE_TIME, DEFAULT_RESPONSE_TTL, DEFAULT_TOMBSTONE_TTL,
    ExpiredLease, InvalidPolicy, MAX_RESULT_BYTES_LIMIT, Policies, Policy, PolicyError,
};
pub use purge::PurgeReport;
pub use record::{MAX_FENCE, OutcomeClass, Record, RecordError, Retention, State, StateKind, UncertainCause};
pub use refusal::Refusal;
pub use reserve::Reserve;
pub use retry::{
    ATTENTION_PROBLEMS, AnswerClass, AttentionCause, AttentionProblem, DEFAULT_ATTEMPT_TIMEOUT,
    DEFAULT_ATTEMPTS_PER_CALL, DEFAULT_ATTEMPTS_PER_INTENT, DEFAULT_BASE_DELAY, DEFAULT_MAX_DELAY,
    DEFAULT_PROBLEM_BASE, KEY_HEADER, KeyForm, REPLAYED_HEADER, RETRIED_STATUSES, STORED_RESPONSE_HEADERS,
    backoff_ceiling, backoff_delay, classify_answer, key_header_value, problem_code, retry_after,
    stored_response_value,
};
pub use rows::{
    BusinessWrite, MAX_ROW_KEY_LEN, MAX_ROW_TABLE_NAME_LEN, MAX_ROW_VALUE_LEN, RESERVED_TABLE_PREFIX, Row, RowError,
    RowTable, RowWrite, Settle, check_row, check_row_key, check_table_name, is_reserved_table_name,
};
pub use step::LeaseStep;
pub use time::{DecisionTime, Timestamp};
pub use transition::{
    Failure, FailureKind, Resolution, ResolutionCause, ResolutionKind, TransitionError, check_holder, complete, fail,
    reconcile, renew,
};
pub use workflow::{
    Admission, Attention, AttentionKind, Claim, Compensation, DELIVERY_FORMAT, Delivery, DeliveryOutcome,
    DeliveryOutcomeKind, DeliveryRecord, DomainGuard, DuplicateCost, EffectDoubt, EffectName, EffectReport,
    HASHED_KEY_PREFIX, InboxAnswer, InboxDecision, InboxRefusal, JOB_FORMAT, JobAnswer, JobDecision, JobLease,
    JobRecord, JobRefusal, JobState, JobStateKind, MAX_EFFECT_NAME_LEN, MAX_REASON_LEN, MAX_REFERENCE_LEN, NewEffect,
    NewerVersion, NewerVersionWithin, OBJECT_FORMAT, OUTBOX_FORMAT, ObjectRecord, OutboxItem, OutboxRefusal,
    OutboxState, OutboxStateKind, ProviderState, ProviderStateKind, RetentionBudget, StepRecord, ValidTransition,
    accept, backoff, check_effects_settled, claim_job, delivery_policy_name,
};
