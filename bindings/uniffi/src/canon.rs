//! The core's canonicaliser and fingerprint, and key generation.

use std::sync::Arc;

use crate::IdemdbError;

/// How a field's value is normalised before hashing (see the core's `Normaliser`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum Normaliser {
    /// Removes leading and trailing whitespace from a string.
    Trim,
    /// ASCII upper case (`"brl"` → `"BRL"`).
    Uppercase,
    /// ASCII lower case.
    Lowercase,
    /// A decimal amount as a canonical decimal string (`"10.50"`, `10.5` → `"10.5"`).
    DecimalAmount,
}

impl Normaliser {
    fn to_core(self) -> idemdb::Normaliser {
        match self {
            Normaliser::Trim => idemdb::Normaliser::Trim,
            Normaliser::Uppercase => idemdb::Normaliser::Uppercase,
            Normaliser::Lowercase => idemdb::Normaliser::Lowercase,
            Normaliser::DecimalAmount => idemdb::Normaliser::DecimalAmount,
        }
    }
}

/// One normalisation rule: the field at a JSON pointer (`/currency`) and how to normalise it.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct FieldNormaliser {
    /// A JSON pointer (RFC 6901).
    pub pointer: String,
    /// The normaliser.
    pub normaliser: Normaliser,
}

/// The canonical form of a JSON request (RFC 8785) and its fingerprint: transport fields
/// excluded, values normalised. Immutable; share one between threads.
#[derive(Debug, uniffi::Object)]
pub struct Canonicalizer {
    inner: idemdb::Canonicalizer,
}

impl Canonicalizer {
    pub(crate) fn core(&self) -> &idemdb::Canonicalizer {
        &self.inner
    }
}

#[uniffi::export]
impl Canonicalizer {
    /// A canonicaliser that drops the fields at `exclusions` (JSON pointers such as
    /// `/trace_id`) and normalises the fields of `normalisers`.
    ///
    /// # Errors
    /// `IDEMDB_INVALID_ARGUMENT` for an invalid JSON pointer.
    #[uniffi::constructor(default(exclusions = [], normalisers = [], max_body_bytes = None))]
    pub fn new(
        exclusions: Vec<String>,
        normalisers: Vec<FieldNormaliser>,
        max_body_bytes: Option<u64>,
    ) -> Result<Arc<Self>, IdemdbError> {
        let mut inner = idemdb::Canonicalizer::new();
        for pointer in &exclusions {
            inner = inner.exclude(pointer)?;
        }
        for rule in &normalisers {
            inner = inner.normalise(&rule.pointer, rule.normaliser.to_core())?;
        }
        if let Some(limit) = max_body_bytes {
            inner = inner.max_body_bytes(usize::try_from(limit).unwrap_or(usize::MAX));
        }
        Ok(Arc::new(Canonicalizer { inner }))
    }

    /// The canonical form of `body` (JSON).
    ///
    /// # Errors
    /// `IDEMDB_INVALID_REQUEST` for a body that is not JSON, too large or too deep, or a bad
    /// amount.
    pub fn canonicalize(&self, body: Vec<u8>) -> Result<Vec<u8>, IdemdbError> {
        Ok(self.inner.canonicalize(&body)?)
    }

    /// The fingerprint of `body`'s canonical form, as 64 hex digits: what
    /// [`crate::IdemStore::reserve`] takes.
    ///
    /// # Errors
    /// As [`Canonicalizer::canonicalize`].
    pub fn fingerprint(&self, body: Vec<u8>) -> Result<String, IdemdbError> {
        Ok(self.inner.fingerprint(&body)?.to_hex())
    }
}

/// A new unpredictable idempotency key (a UUID v4): make it once, when the intent is created.
///
/// # Errors
/// `IDEMDB_NO_RANDOMNESS` when the platform has no random source.
#[uniffi::export]
pub fn new_key() -> Result<String, IdemdbError> {
    Ok(idemdb::Store::new_key()?.as_str().to_string())
}

/// The fingerprint of a request that is already canonical JSON (as an intent stores it), as 64
/// hex digits.
#[uniffi::export]
pub fn fingerprint_of_canonical(canonical: Vec<u8>) -> String {
    idemdb::Fingerprint::of_canonical_json(&canonical).to_hex()
}

/// The stable code of every error, in the core's order (`IDEMDB_INVALID_ARGUMENT`, ...): what
/// the variants of `IdemdbError` carry.
#[uniffi::export]
pub fn error_codes() -> Vec<String> {
    idemdb::ErrorCode::ALL.iter().map(|code| code.as_str().to_string()).collect()
}
