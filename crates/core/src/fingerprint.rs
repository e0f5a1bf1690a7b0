//! Request fingerprints: a 32-byte BLAKE3 hash of the canonical request, domain-separated.

use core::fmt;

use serde::{Deserialize, Serialize};

/// BLAKE3 derive-key context for fingerprints. Changing it changes every fingerprint, so it is
/// part of the stored format (see `docs/design.md`).
pub const FINGERPRINT_CONTEXT: &str = "idemdb 2026-11-30 request fingerprint v1";

/// Input tag for canonical JSON bodies.
const TAG_JSON: u8 = 0x01;
/// Input tag for requests built field by field with [`FingerprintBuilder`].
const TAG_FIELDS: u8 = 0x02;

/// A 32-byte BLAKE3 hash (derive-key mode) of a canonical request.
///
/// Two requests with the same fingerprint are the same intent; a key reused with a different
/// fingerprint is a conflict. JSON bodies go through
/// [`Canonicalizer`](crate::Canonicalizer) first; anything else through
/// [`FingerprintBuilder`]. The two input kinds are tagged, so a JSON body never collides with
/// a field list that happens to have the same bytes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// Wraps raw fingerprint bytes (read back from storage or received from a client that
    /// computed the fingerprint itself).
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Fingerprint(bytes)
    }

    /// The raw bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Fingerprint of bytes that are already in canonical JSON form (RFC 8785).
    ///
    /// Prefer [`Canonicalizer::fingerprint`](crate::Canonicalizer::fingerprint), which
    /// canonicalises first.
    pub fn of_canonical_json(canonical: &[u8]) -> Self {
        let mut hasher = blake3::Hasher::new_derive_key(FINGERPRINT_CONTEXT);
        hasher.update(&[TAG_JSON]);
        hasher.update(canonical);
        Fingerprint(*hasher.finalize().as_bytes())
    }

    /// Lower-case hexadecimal.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses 64 hexadecimal digits (either case); `None` for anything else.
    ///
    /// ```
    /// use idemdb_core::Fingerprint;
    /// let fp = Fingerprint::from_bytes([0xab; 32]);
    /// assert_eq!(Fingerprint::from_hex(&fp.to_hex()), Some(fp));
    /// assert_eq!(Fingerprint::from_hex("abc"), None);
    /// ```
    pub fn from_hex(text: &str) -> Option<Fingerprint> {
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(text, &mut bytes).ok()?;
        Some(Fingerprint(bytes))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({})", &self.to_hex()[..16])
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Builds a fingerprint for a non-JSON request, one field at a time.
///
/// Each field is written as an 8-byte big-endian length and its bytes, so the encoding is
/// injective: `["ab", "c"]` and `["a", "bc"]` differ. Order matters: callers list the fields
/// that define the intent in a fixed order and leave transport fields out.
///
/// ```
/// use idemdb_core::FingerprintBuilder;
/// let a = FingerprintBuilder::new().field(b"ab").field(b"c").finish();
/// let b = FingerprintBuilder::new().field(b"a").field(b"bc").finish();
/// assert_ne!(a, b);
/// ```
#[derive(Clone)]
pub struct FingerprintBuilder {
    hasher: blake3::Hasher,
}

impl FingerprintBuilder {
    /// Starts an empty field list.
    pub fn new() -> Self {
        let mut hasher = blake3::Hasher::new_derive_key(FINGERPRINT_CONTEXT);
        hasher.update(&[TAG_FIELDS]);
        FingerprintBuilder { hasher }
    }

    /// Appends one field.
    #[must_use]
    pub fn field(mut self, bytes: &[u8]) -> Self {
        let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        self.hasher.update(&len.to_be_bytes());
        self.hasher.update(bytes);
        self
    }

    /// Appends a text field.
    #[must_use]
    pub fn str_field(self, text: &str) -> Self {
        self.field(text.as_bytes())
    }

    /// Finishes the fingerprint.
    pub fn finish(&self) -> Fingerprint {
        Fingerprint(*self.hasher.finalize().as_bytes())
    }
}

impl Default for FingerprintBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for FingerprintBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FingerprintBuilder")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_boundaries_and_order_matter() {
        let ab_c = FingerprintBuilder::new().field(b"ab").field(b"c").finish();
        let a_bc = FingerprintBuilder::new().field(b"a").field(b"bc").finish();
        let c_ab = FingerprintBuilder::new().field(b"c").field(b"ab").finish();
        assert_ne!(ab_c, a_bc);
        assert_ne!(ab_c, c_ab);
        assert_eq!(ab_c, FingerprintBuilder::new().str_field("ab").str_field("c").finish());
    }

    #[test]
    fn json_and_field_inputs_are_domain_separated() {
        let json = Fingerprint::of_canonical_json(b"{}");
        let fields = FingerprintBuilder::new().field(b"{}").finish();
        assert_ne!(json, fields);
        // Plain BLAKE3 of the same bytes differs too: the derive-key context separates domains.
        assert_ne!(json.as_bytes(), blake3::hash(b"{}").as_bytes());
    }

    #[test]
    fn fingerprint_is_stable_across_releases() {
        // Changing the context or the tagging changes every stored fingerprint: this value is
        // part of the format (see docs/design.md).
        let expected = Fingerprint::of_canonical_json(br#"{"amount":"10.5","currency":"BRL"}"#);
        let mut hasher = blake3::Hasher::new_derive_key("idemdb 2026-11-30 request fingerprint v1");
        hasher.update(&[1]);
        hasher.update(br#"{"amount":"10.5","currency":"BRL"}"#);
        assert_eq!(expected.as_bytes(), hasher.finalize().as_bytes());
        assert_eq!(expected.to_hex().len(), 64);
    }
}
