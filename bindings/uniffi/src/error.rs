//! Every error crosses the boundary as one `IdemdbError` variant per stable [`ErrorCode`]:
//! Kotlin gets `IdemdbException.KeyMismatch`, Swift `IdemdbError.KeyMismatch`, Python
//! `IdemdbError.KeyMismatch`, each carrying the code's string (`IDEMDB_KEY_MISMATCH`, from
//! [`ErrorCode::as_str`]), the message and whether repeating the call may succeed.
//!
//! The variant list is the core's vocabulary: the macro below builds the enum, its mapping to
//! and from [`ErrorCode`], and a compile-time check that it has exactly as many variants as
//! [`ErrorCode::ALL`]. A code added to the core without a variant here does not compile; no
//! code string is written anywhere but in the core.

use idemdb::{Coded, ErrorCode};

macro_rules! error_codes {
    ($($variant:ident),+ $(,)?) => {
        /// An idemdb call failed; nothing stored was changed (except where the code says the
        /// outcome is unknown: `IDEMDB_COMMIT_UNKNOWN`). One variant per stable error code.
        #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, uniffi::Error)]
        pub enum IdemdbError {
            $(
                #[allow(missing_docs)]
                #[error("{code}: {detail}")]
                $variant {
                    /// The stable code (`IDEMDB_...`), as the core spells it.
                    code: String,
                    /// What happened, for logs and people (not for matching).
                    detail: String,
                    /// Whether repeating the same call later may succeed unchanged.
                    transient: bool,
                },
            )+
        }

        impl IdemdbError {
            /// The error for `code` with a message.
            pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
                let (detail, transient) = (detail.into(), code.is_transient());
                let text = code.as_str().to_string();
                match code {
                    $(ErrorCode::$variant => IdemdbError::$variant { code: text, detail, transient },)+
                    // Unreachable: the assertion below keeps the variants and the core's codes
                    // one to one (the core's enum is `#[non_exhaustive]`, so the match needs an
                    // arm for codes it may add).
                    _ => IdemdbError::Internal { code: text, detail, transient },
                }
            }

            /// The stable code.
            pub fn code(&self) -> ErrorCode {
                match self {
                    $(IdemdbError::$variant { .. } => ErrorCode::$variant,)+
                }
            }

            /// The message.
            pub fn detail(&self) -> &str {
                match self {
                    $(IdemdbError::$variant { detail, .. } => detail,)+
                }
            }

            /// Whether repeating the same call later may succeed unchanged.
            pub fn transient(&self) -> bool {
                match self {
                    $(IdemdbError::$variant { transient, .. } => *transient,)+
                }
            }
        }

        const VARIANTS: usize = [$(stringify!($variant)),+].len();
        const _: () = assert!(
            VARIANTS == ErrorCode::ALL.len(),
            "IdemdbError needs one variant per idemdb_core::ErrorCode"
        );
    };
}

error_codes!(
    InvalidArgument,
    InvalidKey,
    InvalidRequest,
    InvalidPolicy,
    NotFound,
    IntentFinished,
    StaleLease,
    WrongState,
    LeaseLive,
    TooLarge,
    Storage,
    CommitUnknown,
    Corrupt,
    NoRandomness,
    Closed,
    StoreBusy,
    NotAStore,
    Foreign,
    NewerFormat,
    OlderFormat,
    Unsupported,
    Internal,
    RetriesExhausted,
    Abandoned,
    Aborted,
    KeyMissing,
    KeyMismatch,
    InProgress,
    NeedsReconciliation,
    Expired,
    OperationFailed,
    Unavailable,
    SchemaMismatch,
    UnknownName,
    Unauthenticated,
    ProviderKeyExpired,
    DeliveryMismatch,
    NotReady,
    FenceExhausted,
    ReadOnly,
    NeedsAttention,
);

impl IdemdbError {
    /// Any coded error of idemdb, with its message.
    pub(crate) fn from_coded<E: Coded + std::fmt::Display>(error: E) -> Self {
        IdemdbError::new(error.code(), error.to_string())
    }
}

macro_rules! from_coded {
    ($($ty:ty),+) => {$(
        impl From<$ty> for IdemdbError {
            fn from(error: $ty) -> Self {
                IdemdbError::from_coded(error)
            }
        }
    )+};
}
from_coded!(
    idemdb::Error,
    idemdb::OpenError,
    idemdb::IntentError,
    idemdb::KeyError,
    idemdb::CanonicalError,
    idemdb::UnknownName
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_core_code_has_its_own_variant_and_round_trips() {
        let mut seen = std::collections::HashSet::new();
        for &code in ErrorCode::ALL {
            let error = IdemdbError::new(code, "detail");
            assert_eq!(error.code(), code, "{code}");
            assert!(seen.insert(std::mem::discriminant(&error)), "{code} shares a variant");
            assert_eq!(error.to_string(), format!("{}: detail", code.as_str()));
            assert_eq!(error.detail(), "detail");
        }
        assert_eq!(seen.len(), ErrorCode::ALL.len());
    }

    #[test]
    fn transient_follows_the_core() {
        for &code in ErrorCode::ALL {
            assert_eq!(IdemdbError::new(code, "").transient(), code.is_transient(), "{code}");
        }
        assert!(IdemdbError::new(ErrorCode::StoreBusy, "").transient());
        assert!(matches!(
            IdemdbError::new(ErrorCode::KeyMismatch, "x"),
            IdemdbError::KeyMismatch { transient: false, ref code, .. } if code == "IDEMDB_KEY_MISMATCH"
        ));
    }
}
