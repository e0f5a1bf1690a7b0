//! Canonical request bodies: JSON in, RFC 8785 bytes out.
//!
//! An idempotency key is bound to the *intent* of the first request that used it, and a retry
//! must be recognised as the same intent even when the client re-serialised it. Hashing the raw
//! body would not work: key order, whitespace, number spelling (`4.50` vs `4.5`) and string
//! escapes (`"\u0041"` vs `"A"`) change between serialisers and even between two runs of the
//! same client. A [`Canonicalizer`] therefore reduces a body to one canonical byte string, which
//! [`Fingerprint::of_canonical_json`](crate::Fingerprint::of_canonical_json) then hashes:
//!
//! 1. **Limit.** A body longer than [`Canonicalizer::max_body_bytes`] (1 MiB by default) is
//!    refused before it is parsed.
//! 2. **Parse strictly** as I-JSON (RFC 7493), the subset RFC 8785 is defined on: no trailing
//!    data, no duplicate member names, no unpaired UTF-16 surrogates, no numbers outside the
//!    IEEE 754 double range, at most 64 nested arrays/objects.
//! 3. **Exclude transport fields.** Trace ids, send timestamps, retry counters, request ids and
//!    copies of auth headers differ on every delivery attempt while the intent stays the same.
//!    Left in, they would make every retry look like a *different* request, and the engine would
//!    answer "key reused with a different body" instead of replaying the stored outcome. They
//!    are named with JSON Pointers ([`Canonicalizer::exclude`]) and removed before hashing.
//!    Only exclude what truly does not change the effect: an excluded field is invisible to the
//!    conflict check.
//! 4. **Normalise values** whose spelling varies but whose meaning does not
//!    ([`Canonicalizer::normalise`], [`Normaliser`]): `"brl"` vs `"BRL"`, `"10.50"` vs `"10.5"`.
//! 5. **Serialise** with the JSON Canonicalization Scheme (RFC 8785): no whitespace, object
//!    members sorted by the UTF-16 code units of their names, strings with the minimal escapes,
//!    numbers formatted as ECMAScript does (`4.50` → `4.5`, `1E30` → `1e+30`, `-0` → `0`).
//!
//! The pointer syntax (RFC 6901 plus a `*` wildcard) and the treatment of numbers are described
//! on [`Canonicalizer`].
//!
//! # Example
//!
//! ```
//! use idemdb_core::{Canonicalizer, Normaliser};
//!
//! let canon = Canonicalizer::new()
//!     .exclude("/trace_id")?
//!     .normalise("/currency", Normaliser::Uppercase)?
//!     .normalise("/amount", Normaliser::DecimalAmount)?;
//!
//! let first = br#"{"amount": "10.50", "currency": "brl", "trace_id": "4bf92f35", "to": "acct_9"}"#;
//! let retry = br#"{
//!     "to":"acct_9",
//!     "trace_id":"00f067aa",
//!     "currency":"BRL",
//!     "amount":"10.5"
//! }"#;
//! assert_eq!(canon.canonicalize(first)?, br#"{"amount":"10.5","currency":"BRL","to":"acct_9"}"#);
//! assert_eq!(canon.fingerprint(first)?, canon.fingerprint(retry)?);
//!
//! // A different amount is a different intent.
//! let other = br#"{"amount": "10.51", "currency": "BRL", "to": "acct_9"}"#;
//! assert_ne!(canon.fingerprint(first)?, canon.fingerprint(other)?);
//! # Ok::<(), idemdb_core::CanonicalError>(())
//! ```

mod error;
mod exclude;
mod normalise;
mod parse;
mod pointer;
#[cfg(test)]
mod tests;

use serde_json::Value;

pub use error::CanonicalError;
pub use normalise::Normaliser;

use crate::Fingerprint;
use exclude::{ExclusionNode, apply_exclusions};
use normalise::apply_normaliser;
use parse::{check_depth, parse_strict};
use pointer::{Segment, parse_pointer};

/// Default for [`Canonicalizer::max_body_bytes`]: 1 MiB.
const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// Turns a JSON request body into its canonical bytes (RFC 8785) after removing transport fields
/// and normalising values.
///
/// The body is parsed strictly as I-JSON (RFC 7493), transport fields named with
/// [`exclude`](Self::exclude) are removed, values named with [`normalise`](Self::normalise) are
/// rewritten, and the result is serialised with the JSON Canonicalization Scheme (RFC 8785): no
/// whitespace, members sorted by the UTF-16 code units of their names, minimal string escapes,
/// ECMAScript number formatting. Built once per operation and shared; it holds configuration only.
///
/// # JSON Pointers
///
/// Paths are JSON Pointers (RFC 6901): `/payer/account`, with `~1` for a `/` and `~0` for a `~`
/// inside a member name, and decimal indices (`/items/0`) for array elements. One extension: a
/// segment that is exactly `*` matches every member of an object or every element of an array
/// at that level (`/items/*/trace_id`). Consequently a member literally named `*` can only be
/// addressed through the wildcard. A path that does not exist in a body is not an error: the
/// exclusion or normaliser simply does nothing there.
///
/// Exclusions are all matched against the document as parsed, so `/items/0` and `/items/1`
/// remove the first two elements whatever order they were added in. Normalisers then run in the
/// order they were added, on the document without its excluded parts.
///
/// # Numbers
///
/// RFC 8785 treats every JSON number as an IEEE 754 double. Integers beyond ±2⁵³ and decimals
/// with more than about 17 significant digits are therefore rounded, and two bodies differing
/// only beyond that precision get the same canonical form (`333333333.33333329` becomes
/// `333333333.3333333`). Send values that must be compared exactly — large ids, money — as JSON
/// strings, and use [`Normaliser::DecimalAmount`] for decimal strings.
///
/// # Example
///
/// ```
/// use idemdb_core::{Canonicalizer, Normaliser};
///
/// let canon = Canonicalizer::new()
///     .exclude("/items/*/client_line_id")?
///     .normalise("/items/*/sku", Normaliser::Trim)?;
/// let bytes = canon.canonicalize(br#"{"items": [{"sku": " A-1 ", "client_line_id": 7}]}"#)?;
/// assert_eq!(bytes, br#"{"items":[{"sku":"A-1"}]}"#);
/// # Ok::<(), idemdb_core::CanonicalError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Canonicalizer {
    max_body_bytes: usize,
    /// Every excluded pointer, merged into one trie so that all of them match the parsed document.
    exclusions: ExclusionNode,
    /// Normalisers, applied in this order after the exclusions.
    normalisers: Vec<(Vec<Segment>, Normaliser)>,
}

impl Default for Canonicalizer {
    fn default() -> Self {
        Canonicalizer::new()
    }
}

impl Canonicalizer {
    /// A canonicalizer with no exclusions, no normalisers and a 1 MiB body limit.
    #[must_use]
    pub fn new() -> Self {
        Canonicalizer {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            exclusions: ExclusionNode::default(),
            normalisers: Vec::new(),
        }
    }

    /// Removes the value at `pointer` (and everything below it) before hashing.
    ///
    /// `pointer` is a JSON Pointer whose segments may be `*` (see the
    /// [type documentation](Canonicalizer#json-pointers)); a path missing from a body is ignored.
    ///
    /// # Errors
    ///
    /// [`CanonicalError::InvalidPointer`] if `pointer` is malformed or empty (the whole
    /// document cannot be excluded).
    pub fn exclude(mut self, pointer: &str) -> Result<Self, CanonicalError> {
        let segments = parse_pointer(pointer)?;
        if segments.is_empty() {
            return Err(CanonicalError::InvalidPointer {
                pointer: pointer.to_owned(),
                reason: "the whole document cannot be excluded",
            });
        }
        self.exclusions.insert(segments);
        Ok(self)
    }

    /// Rewrites the value(s) at `pointer` with `normaliser` before hashing.
    ///
    /// `pointer` is a JSON Pointer whose segments may be `*`; the empty pointer `""` names the
    /// whole document. A path missing from a body is ignored; a value of the wrong JSON type is
    /// an error when the body is canonicalised. Normalisers run after every exclusion, in the
    /// order they were added.
    ///
    /// # Errors
    ///
    /// [`CanonicalError::InvalidPointer`] if `pointer` is malformed.
    pub fn normalise(mut self, pointer: &str, normaliser: Normaliser) -> Result<Self, CanonicalError> {
        let segments = parse_pointer(pointer)?;
        self.normalisers.push((segments, normaliser));
        Ok(self)
    }

    /// Sets the largest body [`canonicalize`](Self::canonicalize) accepts, in bytes
    /// (default 1 MiB). Bodies over the limit are refused before parsing.
    #[must_use]
    pub fn max_body_bytes(mut self, limit: usize) -> Self {
        self.max_body_bytes = limit;
        self
    }

    /// Canonical RFC 8785 bytes of a raw JSON body, after exclusions and normalisers.
    ///
    /// # Errors
    ///
    /// * [`CanonicalError::BodyTooLarge`] if `body` is over the limit;
    /// * [`CanonicalError::InvalidJson`] if it is not one JSON value (trailing data included);
    /// * [`CanonicalError::NotCanonicalisable`] if it is JSON but not I-JSON: duplicate member
    ///   names, unpaired surrogates, numbers out of the double range;
    /// * [`CanonicalError::TooDeep`] if arrays/objects nest more than 64 levels;
    /// * [`CanonicalError::NormaliserTypeMismatch`] and [`CanonicalError::InvalidDecimal`] if a
    ///   normaliser cannot be applied.
    pub fn canonicalize(&self, body: &[u8]) -> Result<Vec<u8>, CanonicalError> {
        if body.len() > self.max_body_bytes {
            return Err(CanonicalError::BodyTooLarge { len: body.len(), max: self.max_body_bytes });
        }
        let value = parse_strict(body)?;
        self.canonicalize_value(value)
    }

    /// Canonical RFC 8785 bytes of an already parsed value, after exclusions and normalisers.
    ///
    /// The body-size limit does not apply (there are no raw bytes to measure). A
    /// [`serde_json::Value`] cannot hold duplicate member names, so parse with
    /// [`canonicalize`](Self::canonicalize) when the input comes from a client.
    ///
    /// # Errors
    ///
    /// [`CanonicalError::TooDeep`], [`CanonicalError::NormaliserTypeMismatch`],
    /// [`CanonicalError::InvalidDecimal`], or [`CanonicalError::NotCanonicalisable`] if the
    /// serialiser refuses the value.
    pub fn canonicalize_value(&self, mut value: Value) -> Result<Vec<u8>, CanonicalError> {
        check_depth(&value, 0)?;
        if !self.exclusions.is_empty() {
            apply_exclusions(&mut value, &[&self.exclusions]);
        }
        for (segments, normaliser) in &self.normalisers {
            let mut path = String::new();
            apply_normaliser(&mut value, segments, &mut path, *normaliser)?;
        }
        serde_json_canonicalizer::to_vec(&value)
            .map_err(|err| CanonicalError::NotCanonicalisable { reason: err.to_string() })
    }

    /// [`Fingerprint`] of the canonical form of `body`: [`canonicalize`](Self::canonicalize)
    /// followed by [`Fingerprint::of_canonical_json`].
    ///
    /// # Errors
    ///
    /// As [`canonicalize`](Self::canonicalize).
    pub fn fingerprint(&self, body: &[u8]) -> Result<Fingerprint, CanonicalError> {
        let canonical = self.canonicalize(body)?;
        Ok(Fingerprint::of_canonical_json(&canonical))
    }
}
