//! The two adapters export the same core names, and each is the core's own item.
//!
//! Each name is imported from `idemdb`, from `idemdb_postgres` and from the core's prelude
//! into three modules, whose globs then meet in one: a name that two of them resolve to
//! different items is ambiguous there, and this file does not compile. The list itself is
//! checked against the prelude's source, so a name added there must be added here.

/// Imports every listed name through each path and again from the meeting of the three.
macro_rules! same_items {
    ($($name:ident),* $(,)?) => {
        mod embedded {
            #[allow(unused_imports)]
            pub use idemdb::{$($name),*};
        }
        mod postgres {
            #[allow(unused_imports)]
            pub use idemdb_postgres::{$($name),*};
        }
        mod prelude {
            #[allow(unused_imports)]
            pub use idemdb_core::prelude::{$($name),*};
        }
        mod meeting {
            #[allow(unused_imports)]
            pub use super::{embedded::*, postgres::*, prelude::*};
        }
        #[allow(unused_imports)]
        use meeting::{$($name),*};

        /// Every name this file checks.
        const CHECKED: &[&str] = &[$(stringify!($name)),*];
    };
}

same_items! {
    Admission, Attempt, AttemptOutcome, AttemptOutcomeKind, Attention, AttentionCause, AttentionKind, AuditEvent,
    AuditKind, CanonicalError, Canonicalizer, Claim, Coded, Compensation, DecisionTime, Delivery, DeliveryOutcome,
    DeliveryOutcomeKind, DeliveryRecord, DomainGuard, DuplicateCost, EffectDoubt, EffectName, EffectReport, ErrorCode,
    ExpiredLease, Failure, FailureKind, Fingerprint, FingerprintBuilder, INTENT_FORMAT, IdempotencyKey, InboxAnswer,
    InboxRefusal, Intent, IntentRefusal, IntentResponse, IntentState, IntentStateKind, JobAnswer, JobLease, JobRecord,
    JobRefusal, JobState, JobStateKind, KeyError, KeyHash, Lease, MAX_ABANDON_REASON_LEN, MAX_RESPONSE_HEADERS, Named,
    NewEffect, NewerVersion, Normaliser, ObjectRecord, OutboxItem, OutboxRefusal, OutboxState, OutboxStateKind,
    OutcomeClass, Policy, PolicyError, ProviderState, ProviderStateKind, PurgeReport, Record, RecordError, Reservation,
    ReservationKind, Resolution, ResolutionCause, ResolutionKind, RetentionBudget, Scope, ScopedKey, State, StateKind,
    StepRecord, Timestamp, TransitionError, UncertainCause, UnknownName, ValidTransition, AnswerClass,
    DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_ATTEMPTS_PER_CALL, DEFAULT_ATTEMPTS_PER_INTENT, DEFAULT_BASE_DELAY,
    DEFAULT_MAX_DELAY, KEY_HEADER, KeyForm, REPLAYED_HEADER, ATTENTION_PROBLEMS, AttentionProblem, DEFAULT_PROBLEM_BASE, RETRIED_STATUSES, STORED_RESPONSE_HEADERS, stored_response_value, backoff_ceiling,
    backoff_delay, classify_answer, key_header_value, problem_code, retry_after, DEFAULT_AUDIT_RETENTION, InvalidPolicy,
    Policies, delivery_policy_name, BusinessWrite, MAX_ROW_KEY_LEN, MAX_ROW_VALUE_LEN, Row, RowError, RowTable, RowWrite,
    Settle, Refusal, Corrupt, Reserve,
}

/// The names the prelude re-exports, read from its `pub use crate::{...};` blocks.
fn prelude_names() -> Vec<String> {
    let source = include_str!("../../core/src/prelude.rs");
    let mut names = Vec::new();
    for block in source.split("pub use crate::{").skip(1) {
        let list = block.split("};").next().expect("a re-export block ends with `};`");
        names.extend(list.split(',').map(str::trim).filter(|name| !name.is_empty()).map(String::from));
    }
    names.sort();
    names
}

#[test]
fn every_prelude_name_is_checked_through_both_adapters() {
    let mut checked: Vec<String> = CHECKED.iter().map(|name| name.to_string()).collect();
    checked.sort();
    let prelude = prelude_names();
    assert!(prelude.len() > 50, "the prelude's source was not read: {prelude:?}");
    assert_eq!(checked, prelude, "this file's list and the prelude differ");
}

#[test]
fn a_value_reached_through_either_adapter_is_the_same() {
    // The same item under two paths: a type, a constant, a code through `core`.
    let embedded = idemdb::Scope::new("acme", "charge").unwrap();
    let postgres: idemdb_postgres::Scope = embedded.clone();
    assert_eq!(postgres, embedded);
    assert_eq!(idemdb::KEY_HEADER, idemdb_postgres::KEY_HEADER);
    assert_eq!(idemdb::core::ErrorCode::KeyMismatch, idemdb_postgres::ErrorCode::KeyMismatch);
}
