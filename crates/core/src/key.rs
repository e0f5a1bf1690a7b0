//! Validated identities: [`Scope`], [`IdempotencyKey`] and their injective storage encoding.

use core::fmt;

use serde::{Deserialize, Serialize};

/// Longest idempotency key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 255;
/// Longest tenant or operation name accepted, in bytes.
pub const MAX_SCOPE_PART_LEN: usize = 128;

/// Which part of an identity failed validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdentityPart {
    /// The idempotency key.
    Key,
    /// The tenant of a scope.
    Tenant,
    /// The operation of a scope.
    Operation,
    /// A correlation id.
    Correlation,
    /// The name of an external effect (outbox) or of a job step.
    Effect,
    /// A webhook source, delivery id or object id.
    Delivery,
}

impl fmt::Display for IdentityPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IdentityPart::Key => "idempotency key",
            IdentityPart::Tenant => "tenant",
            IdentityPart::Operation => "operation",
            IdentityPart::Correlation => "correlation id",
            IdentityPart::Effect => "effect name",
            IdentityPart::Delivery => "delivery identity",
        })
    }
}

/// A key or scope part was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The value was empty.
    #[error("{part} is empty")]
    Empty {
        /// Which part.
        part: IdentityPart,
    },
    /// The value was longer than allowed.
    #[error("{part} is {len} bytes long; the limit is {max}")]
    TooLong {
        /// Which part.
        part: IdentityPart,
        /// Its length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// The value contained a byte outside visible ASCII (0x21..=0x7E for keys; 0x20..=0x7E for
    /// scope parts).
    #[error("{part} has a byte outside visible ASCII (0x{byte:02x}) at offset {offset}")]
    InvalidByte {
        /// Which part.
        part: IdentityPart,
        /// The first offending byte.
        byte: u8,
        /// Its offset.
        offset: usize,
    },
    /// Stored identity bytes did not decode.
    #[error("stored identity bytes are malformed")]
    MalformedEncoding,
}

impl KeyError {
    /// The stable code: [`ErrorCode::InvalidKey`](crate::ErrorCode::InvalidKey), or
    /// [`ErrorCode::Corrupt`](crate::ErrorCode::Corrupt) for stored bytes that do not decode.
    pub fn code(&self) -> crate::ErrorCode {
        match self {
            KeyError::Empty { .. } | KeyError::TooLong { .. } | KeyError::InvalidByte { .. } => {
                crate::ErrorCode::InvalidKey
            }
            KeyError::MalformedEncoding => crate::ErrorCode::Corrupt,
        }
    }
}

crate::coded!(KeyError);

pub(crate) fn validate(part: IdentityPart, value: &str, max: usize, allow_space: bool) -> Result<(), KeyError> {
    if value.is_empty() {
        return Err(KeyError::Empty { part });
    }
    if value.len() > max {
        return Err(KeyError::TooLong { part, len: value.len(), max });
    }
    let lowest = if allow_space { 0x20 } else { 0x21 };
    if let Some((offset, &byte)) = value.as_bytes().iter().enumerate().find(|(_, b)| !(lowest..=0x7e).contains(*b)) {
        return Err(KeyError::InvalidByte { part, byte, offset });
    }
    Ok(())
}

/// Longest correlation id accepted, in bytes.
pub const MAX_CORRELATION_LEN: usize = 128;

/// Checks a correlation id: 1..=128 bytes of visible ASCII, like a key.
///
/// # Errors
/// [`KeyError`] when it is empty, too long or has a byte outside `0x21..=0x7E`.
pub fn validate_correlation(correlation: &str) -> Result<(), KeyError> {
    validate(IdentityPart::Correlation, correlation, MAX_CORRELATION_LEN, false)
}

/// Checks the optional correlation id of a call, as every adapter does before anything else:
/// none is valid, a given one must pass [`validate_correlation`].
///
/// ```
/// use idemdb_core::check_correlation;
/// assert!(check_correlation(None).is_ok() && check_correlation(Some("req-7f3a")).is_ok());
/// assert!(check_correlation(Some("")).is_err());
/// ```
///
/// # Errors
/// As [`validate_correlation`].
pub fn check_correlation(correlation: Option<&str>) -> Result<(), KeyError> {
    correlation.map_or(Ok(()), validate_correlation)
}

/// An idempotency key: 1..=255 bytes of visible ASCII (`0x21..=0x7E`).
///
/// That is the alphabet a structured-field string in the IETF `Idempotency-Key` header can
/// carry without escapes. A key names one intent; make it once, when the intent is created,
/// from a cryptographically secure random source (see [`IdempotencyKey::from_random_bytes`]).
///
/// ```
/// use idemdb_core::IdempotencyKey;
/// let key = IdempotencyKey::new("order-842:authorize-v1")?;
/// assert_eq!(key.as_str(), "order-842:authorize-v1");
/// assert!(IdempotencyKey::new("").is_err());
/// assert!(IdempotencyKey::new("has space").is_err());
/// # Ok::<(), idemdb_core::KeyError>(())
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Validates and wraps a key.
    ///
    /// # Errors
    /// [`KeyError`] when the key is empty, longer than [`MAX_KEY_LEN`] or has a byte outside
    /// `0x21..=0x7E`.
    pub fn new(key: impl Into<String>) -> Result<Self, KeyError> {
        let key = key.into();
        validate(IdentityPart::Key, &key, MAX_KEY_LEN, false)?;
        Ok(IdempotencyKey(key))
    }

    /// A UUID v4 key built from 16 bytes of a cryptographically secure random source.
    ///
    /// The core reads no randomness itself; the store crate and the WebAssembly bindings pass
    /// bytes from the platform's CSPRNG. Never use time-ordered UUIDs (v7) for keys: their
    /// counter makes the next key predictable.
    ///
    /// ```
    /// use idemdb_core::IdempotencyKey;
    /// let key = IdempotencyKey::from_random_bytes([7; 16]);
    /// assert_eq!(key.as_str().len(), 36);
    /// assert_eq!(&key.as_str()[14..15], "4"); // version nibble
    /// ```
    pub fn from_random_bytes(bytes: [u8; 16]) -> Self {
        let uuid = uuid::Builder::from_random_bytes(bytes).into_uuid();
        IdempotencyKey(uuid.hyphenated().to_string())
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for IdempotencyKey {
    type Error = KeyError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        IdempotencyKey::new(value)
    }
}

impl From<IdempotencyKey> for String {
    fn from(value: IdempotencyKey) -> Self {
        value.0
    }
}

impl fmt::Debug for IdempotencyKey {
    // Keys are credentials of a sort: a debug dump shows only the length.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey(<{} bytes>)", self.0.len())
    }
}

/// Where a key lives: a tenant (account, customer) and an operation (`create_payment`).
///
/// Each part is 1..=128 bytes of printable ASCII (`0x20..=0x7E`). The identity of a record is
/// `(scope, key)`; [`ScopedKey::encode`] turns it into storage bytes injectively, so no choice
/// of separators in one tenant's input can name another tenant's record.
///
/// ```
/// use idemdb_core::Scope;
/// let scope = Scope::new("acme", "create_payment")?;
/// assert_eq!(scope.tenant(), "acme");
/// # Ok::<(), idemdb_core::KeyError>(())
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub struct Scope {
    tenant: String,
    operation: String,
}

impl Scope {
    /// Validates and builds a scope.
    ///
    /// # Errors
    /// [`KeyError`] when a part is empty, longer than [`MAX_SCOPE_PART_LEN`] or has a byte
    /// outside `0x20..=0x7E`.
    pub fn new(tenant: impl Into<String>, operation: impl Into<String>) -> Result<Self, KeyError> {
        let tenant = tenant.into();
        let operation = operation.into();
        validate(IdentityPart::Tenant, &tenant, MAX_SCOPE_PART_LEN, true)?;
        validate(IdentityPart::Operation, &operation, MAX_SCOPE_PART_LEN, true)?;
        Ok(Scope { tenant, operation })
    }

    /// The tenant.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The operation.
    pub fn operation(&self) -> &str {
        &self.operation
    }
}

/// A `(scope, key)` pair: the unique identity of a record.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct ScopedKey {
    /// The scope.
    pub scope: Scope,
    /// The key.
    pub key: IdempotencyKey,
}

impl ScopedKey {
    /// Pairs a scope and a key.
    pub fn new(scope: Scope, key: IdempotencyKey) -> Self {
        ScopedKey { scope, key }
    }

    /// The storage encoding: `len(tenant) tenant len(operation) operation len(key) key`,
    /// each length one byte (every part is at most 255 bytes).
    ///
    /// The encoding is prefix-free and therefore injective: two different pairs never share
    /// bytes, whatever separators their parts contain. Records of one tenant sort together,
    /// then by operation, which lets a listing filter by tenant with a range scan.
    pub fn encode(&self) -> Vec<u8> {
        Self::encode_parts(&self.scope, &self.key)
    }

    /// [`ScopedKey::encode`] of a scope and a key that are not yet paired (no clone needed).
    ///
    /// ```
    /// use idemdb_core::{IdempotencyKey, Scope, ScopedKey};
    /// let scope = Scope::new("acme", "charge")?;
    /// let key = IdempotencyKey::new("k1")?;
    /// let encoded = ScopedKey::encode_parts(&scope, &key);
    /// assert_eq!(encoded, ScopedKey::new(scope, key).encode());
    /// # Ok::<(), idemdb_core::KeyError>(())
    /// ```
    pub fn encode_parts(scope: &Scope, key: &IdempotencyKey) -> Vec<u8> {
        let parts = [scope.tenant.as_bytes(), scope.operation.as_bytes(), key.0.as_bytes()];
        let mut out = Vec::with_capacity(3 + parts.iter().map(|p| p.len()).sum::<usize>());
        for part in parts {
            // Validation caps every part at 255 bytes, so the cast cannot truncate.
            out.push(part.len() as u8);
            out.extend_from_slice(part);
        }
        out
    }

    /// Decodes [`ScopedKey::encode`] output, validating every part again.
    ///
    /// # Errors
    /// [`KeyError::MalformedEncoding`] when the bytes are not a complete encoding, or the
    /// validation error of a part.
    pub fn decode(bytes: &[u8]) -> Result<Self, KeyError> {
        match Self::decode_prefix(bytes)? {
            (scoped, []) => Ok(scoped),
            _ => Err(KeyError::MalformedEncoding),
        }
    }

    /// Decodes the [`ScopedKey::encode`] output at the start of `bytes` and returns what
    /// follows it (for table keys that extend a scoped key, such as an outbox item's).
    ///
    /// # Errors
    /// As [`ScopedKey::decode`].
    pub fn decode_prefix(bytes: &[u8]) -> Result<(Self, &[u8]), KeyError> {
        let mut rest = bytes;
        let mut parts: [&str; 3] = [""; 3];
        for part in &mut parts {
            let (&len, tail) = rest.split_first().ok_or(KeyError::MalformedEncoding)?;
            let len = usize::from(len);
            if tail.len() < len {
                return Err(KeyError::MalformedEncoding);
            }
            let (value, tail) = tail.split_at(len);
            *part = core::str::from_utf8(value).map_err(|_| KeyError::MalformedEncoding)?;
            rest = tail;
        }
        let scoped = ScopedKey { scope: Scope::new(parts[0], parts[1])?, key: IdempotencyKey::new(parts[2])? };
        Ok((scoped, rest))
    }

    /// The encoded prefix shared by every record of `tenant` (and, if given, `operation`).
    pub fn prefix(tenant: &str, operation: Option<&str>) -> Vec<u8> {
        let mut out = Vec::new();
        for part in core::iter::once(tenant).chain(operation) {
            out.push(u8::try_from(part.len()).unwrap_or(u8::MAX));
            out.extend_from_slice(part.as_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn key_validation_reports_each_fault() {
        assert_eq!(IdempotencyKey::new(""), Err(KeyError::Empty { part: IdentityPart::Key }));
        let long = "k".repeat(MAX_KEY_LEN + 1);
        assert_eq!(IdempotencyKey::new(long), Err(KeyError::TooLong { part: IdentityPart::Key, len: 256, max: 255 }));
        assert!(IdempotencyKey::new("k".repeat(MAX_KEY_LEN)).is_ok());
        assert_eq!(
            IdempotencyKey::new("ab c"),
            Err(KeyError::InvalidByte { part: IdentityPart::Key, byte: b' ', offset: 2 })
        );
        assert_eq!(
            IdempotencyKey::new("café"),
            Err(KeyError::InvalidByte { part: IdentityPart::Key, byte: 0xc3, offset: 3 })
        );
        assert!(matches!(IdempotencyKey::new("a\nb"), Err(KeyError::InvalidByte { byte: b'\n', .. })));
    }

    #[test]
    fn scope_validation_reports_each_fault() {
        assert_eq!(Scope::new("", "op"), Err(KeyError::Empty { part: IdentityPart::Tenant }));
        assert_eq!(Scope::new("t", ""), Err(KeyError::Empty { part: IdentityPart::Operation }));
        let long = "t".repeat(MAX_SCOPE_PART_LEN + 1);
        assert!(matches!(Scope::new(long.clone(), "op"), Err(KeyError::TooLong { part: IdentityPart::Tenant, .. })));
        assert!(matches!(Scope::new("t", long), Err(KeyError::TooLong { part: IdentityPart::Operation, .. })));
        assert!(Scope::new("tenant with spaces", "create payment").is_ok());
        assert!(matches!(Scope::new("t\t", "op"), Err(KeyError::InvalidByte { .. })));
    }

    #[test]
    fn separators_do_not_collide() {
        // The classic `tenant:key` concatenation bug: these pairs would share "a:b:c".
        let one = ScopedKey::new(Scope::new("a:b", "op").unwrap(), IdempotencyKey::new("c").unwrap());
        let two = ScopedKey::new(Scope::new("a", "op").unwrap(), IdempotencyKey::new("b:c").unwrap());
        assert_ne!(one.encode(), two.encode());
    }

    #[test]
    fn decode_rejects_malformed_bytes() {
        assert_eq!(ScopedKey::decode(&[]), Err(KeyError::MalformedEncoding));
        assert_eq!(ScopedKey::decode(&[5, b'a']), Err(KeyError::MalformedEncoding));
        let good = ScopedKey::new(Scope::new("t", "o").unwrap(), IdempotencyKey::new("k").unwrap()).encode();
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(ScopedKey::decode(&trailing), Err(KeyError::MalformedEncoding));
        assert!(ScopedKey::decode(&good).is_ok());
        assert_eq!(ScopedKey::decode(&[1, b't', 1, b'o', 0]), Err(KeyError::Empty { part: IdentityPart::Key }));
    }

    #[test]
    fn random_keys_are_uuid_v4() {
        let key = IdempotencyKey::from_random_bytes([0xff; 16]);
        let parsed = uuid::Uuid::parse_str(key.as_str()).unwrap();
        assert_eq!(parsed.get_version_num(), 4);
        assert_ne!(key, IdempotencyKey::from_random_bytes([0xfe; 16]));
    }

    #[test]
    fn debug_output_hides_the_key() {
        let key = IdempotencyKey::new("secret-key-123").unwrap();
        assert!(!format!("{key:?}").contains("secret"));
    }

    fn part(max: usize) -> impl Strategy<Value = String> {
        proptest::string::string_regex(&format!("[ -~]{{1,{max}}}")).unwrap()
    }

    proptest! {
        #[test]
        fn encoding_is_injective_and_round_trips(
            a in (part(12), part(12), part(12)),
            b in (part(12), part(12), part(12)),
        ) {
            let make = |(t, o, k): (String, String, String)| {
                let k = k.replace(' ', "_");
                ScopedKey::new(Scope::new(t, o).unwrap(), IdempotencyKey::new(k).unwrap())
            };
            let (x, y) = (make(a), make(b));
            prop_assert_eq!(ScopedKey::decode(&x.encode()).unwrap(), x.clone());
            prop_assert_eq!(x == y, x.encode() == y.encode());
        }
    }
}
