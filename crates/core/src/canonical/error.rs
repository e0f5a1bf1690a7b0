//! The errors of canonicalisation and of a canonicaliser's configuration.

/// A body could not be canonicalised, or a [`Canonicalizer`](super::Canonicalizer) was misconfigured.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CanonicalError {
    /// The body is longer than [`Canonicalizer::max_body_bytes`](super::Canonicalizer::max_body_bytes); it was not parsed.
    #[error("request body is {len} bytes; the limit is {max}")]
    BodyTooLarge {
        /// Length of the body, in bytes.
        len: usize,
        /// The configured limit, in bytes.
        max: usize,
    },
    /// The body is not a single well-formed JSON value.
    #[error("invalid JSON at line {line} column {column}: {message}")]
    InvalidJson {
        /// 1-based line of the error (0 if unknown).
        line: usize,
        /// 1-based column of the error (0 if unknown).
        column: usize,
        /// What the parser expected or found.
        message: String,
    },
    /// A pointer given to [`Canonicalizer::exclude`](super::Canonicalizer::exclude) or
    /// [`Canonicalizer::normalise`](super::Canonicalizer::normalise) is
    /// malformed.
    #[error("invalid JSON pointer {pointer:?}: {reason}")]
    InvalidPointer {
        /// The pointer as given.
        pointer: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The body is JSON but has no RFC 8785 canonical form, because it is not I-JSON: a
    /// duplicate member name, an unpaired UTF-16 surrogate, or a number outside the IEEE 754
    /// double range.
    #[error("JSON has no canonical form: {reason}")]
    NotCanonicalisable {
        /// What was refused, with its position when known.
        reason: String,
    },
    /// A normaliser met a value of the wrong JSON type.
    #[error("cannot normalise {found} at {pointer:?}: expected {expected}")]
    NormaliserTypeMismatch {
        /// JSON Pointer of the value (wildcards resolved).
        pointer: String,
        /// What the normaliser accepts.
        expected: &'static str,
        /// The JSON type found: `null`, `boolean`, `number`, `string`, `array` or `object`.
        found: &'static str,
    },
    /// [`Normaliser::DecimalAmount`](super::Normaliser::DecimalAmount) met a string that is not a plain decimal.
    #[error("value at {pointer:?} is not a decimal amount: {value:?}")]
    InvalidDecimal {
        /// JSON Pointer of the value (wildcards resolved).
        pointer: String,
        /// The offending value (cut to 64 characters).
        value: String,
    },
    /// Arrays and objects nest deeper than the limit.
    #[error("JSON nests arrays and objects deeper than {max} levels")]
    TooDeep {
        /// The nesting limit.
        max: usize,
    },
}

impl CanonicalError {
    /// The stable code: [`ErrorCode::InvalidArgument`](crate::ErrorCode::InvalidArgument) for a
    /// misconfigured canonicaliser, [`ErrorCode::InvalidRequest`](crate::ErrorCode::InvalidRequest)
    /// for a body that has no canonical form or is over the limit.
    pub fn code(&self) -> crate::ErrorCode {
        match self {
            CanonicalError::InvalidPointer { .. } => crate::ErrorCode::InvalidArgument,
            CanonicalError::BodyTooLarge { .. }
            | CanonicalError::InvalidJson { .. }
            | CanonicalError::NotCanonicalisable { .. }
            | CanonicalError::NormaliserTypeMismatch { .. }
            | CanonicalError::InvalidDecimal { .. }
            | CanonicalError::TooDeep { .. } => crate::ErrorCode::InvalidRequest,
        }
    }
}

crate::coded!(CanonicalError);
