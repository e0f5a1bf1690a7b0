//! Stable error codes: one list for every error idemdb reports, in Rust, in JavaScript (the
//! npm package's `ErrorCode` union is generated from [`ErrorCode::ALL`]) and over HTTP (problem
//! `type` URIs are built from them).
//!
//! A code names a *class* of failure that a caller can act on; the message says the details.
//! Codes are never renamed or reused; new ones are added at the end. One situation has one
//! code: a key bound to another request is [`ErrorCode::KeyMismatch`] in the store, the
//! server, both clients and the intent store alike.

/// A stable, machine-readable error code (`IDEMDB_...`).
///
/// ```
/// use idemdb_core::{ErrorCode, KeyError, IdempotencyKey};
/// let error: KeyError = IdempotencyKey::new("").unwrap_err();
/// assert_eq!(error.code(), ErrorCode::InvalidKey);
/// assert_eq!(error.code().as_str(), "IDEMDB_INVALID_KEY");
/// assert_eq!("IDEMDB_INVALID_KEY".parse::<ErrorCode>(), Ok(ErrorCode::InvalidKey));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ErrorCode {
    /// An argument was out of bounds or malformed (a reason too long, too many headers).
    InvalidArgument,
    /// An idempotency key, tenant, operation or correlation id was rejected.
    InvalidKey,
    /// A request body could not be canonicalised (not JSON, too large, too deep, a bad amount).
    InvalidRequest,
    /// A policy was rejected (zero lease TTL, zero result limit).
    InvalidPolicy,
    /// No record (or intent) exists for the key.
    NotFound,
    /// A client intent is finished (completed or abandoned) and cannot take the change.
    IntentFinished,
    /// A lease's fence is no longer the record's: a newer attempt took over.
    StaleLease,
    /// The record is not in a state that allows the transition.
    WrongState,
    /// The lease is still live: reconcile after it expires.
    LeaseLive,
    /// A result, failure or response body is over its limit.
    TooLarge,
    /// The storage below failed.
    Storage,
    /// A commit reported an error and whether it took effect is unknown: repeat the call.
    CommitUnknown,
    /// A stored value did not decode.
    Corrupt,
    /// The platform has no random source the store can use.
    NoRandomness,
    /// The store was closed.
    Closed,
    /// The store is open elsewhere (another handle, process, tab or worker).
    StoreBusy,
    /// The file is not an idemdb store, or is damaged.
    NotAStore,
    /// The file is a database that idemdb did not create.
    Foreign,
    /// The store was written by a newer version of idemdb.
    NewerFormat,
    /// The store has an older format that needs an upgrade.
    OlderFormat,
    /// The platform lacks something the store needs.
    Unsupported,
    /// A bug or a trap inside the engine.
    Internal,
    /// Every attempt to send an intent failed; it stays pending.
    RetriesExhausted,
    /// The intent was abandoned and will not be sent again.
    Abandoned,
    /// The caller cancelled the operation.
    Aborted,
    /// A request that needs an idempotency key came without one.
    KeyMissing,
    /// The key is bound to a different request: a conflict, never a replay or an execution.
    /// One code wherever this is found: a store or server refusing the request, a client
    /// whose server answered 422, a client intent whose key already names another request.
    KeyMismatch,
    /// Another attempt with the same key is in progress.
    InProgress,
    /// An earlier attempt's outcome is unknown: reconcile before any new effect.
    NeedsReconciliation,
    /// The stored response expired; only its tombstone remains and the request is never run
    /// again.
    Expired,
    /// The operation supplied by the application failed; nothing was stored.
    OperationFailed,
    /// The database could not be reached (connection refused, pool exhausted, timed out).
    Unavailable,
    /// The database's schema is not the version this build expects.
    SchemaMismatch,
    /// A name did not belong to its vocabulary.
    UnknownName,
    /// A request came without the credentials the service takes its tenant from.
    Unauthenticated,
    /// The provider's key-retention window has passed since an effect of unknown outcome was
    /// first sent: query the provider and resolve, never send the key again.
    ProviderKeyExpired,
    /// A webhook delivery id was reused with a different payload.
    DeliveryMismatch,
    /// The WebAssembly engine is not loaded yet (`await ready()` first).
    NotReady,
    /// No fence is left for a new lease on this key (fences never repeat).
    FenceExhausted,
    /// The store was opened read-only and the call writes.
    ReadOnly,
    /// A client intent needs a person (or a reconciliation): it is not sent again until it is
    /// reopened or abandoned.
    NeedsAttention,
}

crate::names!(ErrorCode, "error code", {
    InvalidArgument => "IDEMDB_INVALID_ARGUMENT",
    InvalidKey => "IDEMDB_INVALID_KEY",
    InvalidRequest => "IDEMDB_INVALID_REQUEST",
    InvalidPolicy => "IDEMDB_INVALID_POLICY",
    NotFound => "IDEMDB_NOT_FOUND",
    IntentFinished => "IDEMDB_INTENT_FINISHED",
    StaleLease => "IDEMDB_STALE_LEASE",
    WrongState => "IDEMDB_WRONG_STATE",
    LeaseLive => "IDEMDB_LEASE_LIVE",
    TooLarge => "IDEMDB_TOO_LARGE",
    Storage => "IDEMDB_STORAGE",
    CommitUnknown => "IDEMDB_COMMIT_UNKNOWN",
    Corrupt => "IDEMDB_CORRUPT",
    NoRandomness => "IDEMDB_NO_RANDOMNESS",
    Closed => "IDEMDB_CLOSED",
    StoreBusy => "IDEMDB_STORE_BUSY",
    NotAStore => "IDEMDB_NOT_A_STORE",
    Foreign => "IDEMDB_FOREIGN",
    NewerFormat => "IDEMDB_NEWER_FORMAT",
    OlderFormat => "IDEMDB_OLDER_FORMAT",
    Unsupported => "IDEMDB_UNSUPPORTED",
    Internal => "IDEMDB_INTERNAL",
    RetriesExhausted => "IDEMDB_RETRIES_EXHAUSTED",
    Abandoned => "IDEMDB_ABANDONED",
    Aborted => "IDEMDB_ABORTED",
    KeyMissing => "IDEMDB_KEY_MISSING",
    KeyMismatch => "IDEMDB_KEY_MISMATCH",
    InProgress => "IDEMDB_IN_PROGRESS",
    NeedsReconciliation => "IDEMDB_NEEDS_RECONCILIATION",
    Expired => "IDEMDB_EXPIRED",
    OperationFailed => "IDEMDB_OPERATION_FAILED",
    Unavailable => "IDEMDB_UNAVAILABLE",
    SchemaMismatch => "IDEMDB_SCHEMA_MISMATCH",
    UnknownName => "IDEMDB_UNKNOWN_NAME",
    Unauthenticated => "IDEMDB_UNAUTHENTICATED",
    ProviderKeyExpired => "IDEMDB_PROVIDER_KEY_EXPIRED",
    DeliveryMismatch => "IDEMDB_DELIVERY_MISMATCH",
    NotReady => "IDEMDB_NOT_READY",
    FenceExhausted => "IDEMDB_FENCE_EXHAUSTED",
    ReadOnly => "IDEMDB_READ_ONLY",
    NeedsAttention => "IDEMDB_NEEDS_ATTENTION",
});

impl ErrorCode {
    /// The code in lower-case kebab form without the `IDEMDB_` prefix (`key-mismatch`), for
    /// URIs such as HTTP problem types.
    pub fn slug(self) -> String {
        self.as_str().trim_start_matches("IDEMDB_").to_ascii_lowercase().replace('_', "-")
    }

    /// Whether repeating the same call later may succeed without any change by the caller
    /// (storage trouble, a busy store, an unknown commit outcome, an attempt in progress).
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            ErrorCode::Storage
                | ErrorCode::CommitUnknown
                | ErrorCode::StoreBusy
                | ErrorCode::InProgress
                | ErrorCode::Unavailable
        )
    }
}

/// An error with a stable [`ErrorCode`]. Every public error type of idemdb implements it (and
/// has an inherent `code()` method of the same meaning), so code that is generic over a
/// storage backend can classify failures.
pub trait Coded {
    /// The error's stable code.
    fn code(&self) -> ErrorCode;
}

/// Implements [`Coded`] by the type's inherent `code()`.
#[macro_export]
#[doc(hidden)]
macro_rules! coded {
    ($($ty:ty),+ $(,)?) => {$(
        impl $crate::Coded for $ty {
            fn code(&self) -> $crate::ErrorCode {
                <$ty>::code(self)
            }
        }
    )+};
}

// `UnknownName` is the error of the names `ErrorCode` itself is built with (`names.rs`), so
// its code is given here rather than beside it; every other error gives its own.
impl crate::UnknownName {
    /// The stable code: [`ErrorCode::UnknownName`](crate::ErrorCode::UnknownName).
    pub fn code(&self) -> crate::ErrorCode {
        crate::ErrorCode::UnknownName
    }
}

coded!(crate::UnknownName);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            assert!(seen.insert(code.as_str()), "duplicate {code}");
            assert_eq!(code.as_str().parse::<ErrorCode>(), Ok(*code));
            assert!(code.as_str().starts_with("IDEMDB_"));
        }
        assert_eq!(ErrorCode::KeyMismatch.slug(), "key-mismatch");
        let unknown = "IDEMDB_NOPE".parse::<ErrorCode>().unwrap_err();
        assert_eq!(unknown.name(), "IDEMDB_NOPE");
        assert!(unknown.to_string().contains("IDEMDB_KEY_MISMATCH"), "{unknown}");
    }
}
