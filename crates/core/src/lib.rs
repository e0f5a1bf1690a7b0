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
//! use idemdb_core::{complete, decide, Canonicalizer, Normaliser, Policy, Timestamp, Verdict};
//!
//! let canon = Canonicalizer::new()
//!     .exclude("/trace_id")?
//!     .normalise("/currency", Normaliser::Uppercase)?;
//! let fp = canon.fingerprint(br#"{"amount": 1050, "currency": "brl", "trace_id": "t-1"}"#)?;
//! let retry = canon.fingerprint(br#"{"currency":"BRL","amount":1050,"trace_id":"t-2"}"#)?;
//! assert_eq!(fp, retry, "transport fields and spelling do not change the intent");
//!
//! let policy = Policy::default();
//! let t0 = Timestamp::from_millis(1_700_000_000_000);
//! let reserved = decide(None, &fp, t0, &policy)?;
//! let Verdict::Acquired { fence, .. } = reserved.verdict else { unreachable!() };
//! let record = reserved.write.expect("a reservation writes a record");
//!
//! // ... perform the effect, then store its result:
//! let done = complete(&record, fence, b"charge ch_1".to_vec(), t0, &policy)?;
//! assert_eq!(decide(Some(&done), &retry, t0, &policy)?.verdict,
//!            Verdict::Replay { outcome: idemdb_core::OutcomeClass::Completed });
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod canonical;
mod codec;
mod decide;
mod fingerprint;
mod key;
mod policy;
mod record;
mod time;
mod transition;

pub use canonical::{CanonicalError, Canonicalizer, Normaliser};
pub use codec::{
    DecodeError, RECORD_FORMAT, decode_record, decode_versioned, encode_append, encode_record, encode_versioned,
    split_version,
};
pub use decide::{Decision, Verdict, decide, decide_above};
pub use fingerprint::{FINGERPRINT_CONTEXT, Fingerprint, FingerprintBuilder};
pub use key::{
    IdempotencyKey, IdentityPart, KeyError, MAX_CORRELATION_LEN, MAX_KEY_LEN, MAX_SCOPE_PART_LEN, Scope, ScopedKey,
    validate_correlation,
};
pub use policy::{
    DEFAULT_LEASE_TTL, DEFAULT_MAX_RESULT_BYTES, DEFAULT_RESPONSE_TTL, DEFAULT_TOMBSTONE_TTL, ExpiredLease,
    MAX_RESULT_BYTES_LIMIT, Policy, PolicyError,
};
pub use record::{MAX_FENCE, OutcomeClass, Record, RecordError, Retention, State, StateKind, UncertainCause};
pub use time::{DecisionTime, Timestamp};
pub use transition::{Failure, Resolution, TransitionError, complete, fail, reconcile, renew};
