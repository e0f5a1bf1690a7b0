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

use core::cell::Cell;
use core::fmt;
use std::collections::BTreeMap;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::Fingerprint;

/// Default for [`Canonicalizer::max_body_bytes`]: 1 MiB.
const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// Deepest nesting of arrays and objects accepted (a scalar body has depth 0, `[]` depth 1).
///
/// serde_json stops at 128 on its own; the lower limit keeps recursion in this module and in the
/// RFC 8785 serialiser shallow, and no request body needs more.
const MAX_DEPTH: usize = 64;

/// Longest excerpt of a client value quoted in an error message, in characters.
const MAX_QUOTED_CHARS: usize = 64;

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

/// A rewrite applied to the values at a path before hashing, so that spellings with the same
/// meaning hash alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Normaliser {
    /// Removes leading and trailing Unicode whitespace (the `White_Space` property, as
    /// [`str::trim`]) from a string.
    Trim,
    /// Maps the ASCII letters `a`–`z` of a string to `A`–`Z` (`"brl"` → `"BRL"`).
    ///
    /// Deliberately ASCII-only: Unicode case mappings change between Unicode versions (the
    /// Georgian capitals added in Unicode 11 changed the upper case of existing letters), and a
    /// fingerprint stored today must still match after a toolchain upgrade. Non-ASCII characters
    /// are left as they are.
    Uppercase,
    /// Maps the ASCII letters `A`–`Z` of a string to `a`–`z`; ASCII-only for the same reason as
    /// [`Normaliser::Uppercase`].
    Lowercase,
    /// Rewrites a decimal amount, given as a JSON string or number, as a JSON *string* in
    /// canonical decimal form, without going through floating point for strings:
    /// `"10.50"`, `"010.5"`, `"10.500"` and `10.5` all become `"10.5"`; `"10."` and `10`
    /// become `"10"`; `".5"` becomes `"0.5"`; `"-0.0"` becomes `"0"`.
    ///
    /// A string must match `-?[0-9]*(\.[0-9]*)?` with at least one digit: no `+` sign, no
    /// whitespace (add [`Normaliser::Trim`] first), no thousands separators and no exponent
    /// (`"1e3"` is refused — amounts are not written that way, and an exponent would let a
    /// short string expand into millions of digits). Anything else is
    /// [`CanonicalError::InvalidDecimal`].
    ///
    /// A JSON number is read from the value serde_json parsed: integers up to 64 bits are
    /// exact, anything else went through an IEEE 754 double and may have been rounded
    /// (`0.10000000000000000001` becomes `"0.1"`), so send amounts as strings. Numbers may be
    /// written with an exponent (`1e3` becomes `"1000"`).
    DecimalAmount,
}

crate::names!(Normaliser, "normaliser", {
    Trim => "trim",
    Uppercase => "uppercase",
    Lowercase => "lowercase",
    DecimalAmount => "decimal",
});

impl Normaliser {
    /// What the normaliser accepts, for error messages.
    fn expected(self) -> &'static str {
        match self {
            Normaliser::Trim | Normaliser::Uppercase | Normaliser::Lowercase => "a string",
            Normaliser::DecimalAmount => "a decimal string or number",
        }
    }
}

/// A body could not be canonicalised, or a [`Canonicalizer`] was misconfigured.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CanonicalError {
    /// The body is longer than [`Canonicalizer::max_body_bytes`]; it was not parsed.
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
    /// A pointer given to [`Canonicalizer::exclude`] or [`Canonicalizer::normalise`] is
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
    /// [`Normaliser::DecimalAmount`] met a string that is not a plain decimal.
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

// ---------------------------------------------------------------------------------------------
// Pointers

/// One segment of a parsed pointer.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    /// A member name or array index, unescaped.
    Key(String),
    /// `*`: every member or element.
    Wildcard,
}

/// Parses an RFC 6901 pointer, with `*` segments as wildcards. `""` is the whole document.
fn parse_pointer(pointer: &str) -> Result<Vec<Segment>, CanonicalError> {
    let invalid = |reason| CanonicalError::InvalidPointer { pointer: pointer.to_owned(), reason };
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(invalid("a non-empty pointer must start with '/'"));
    };
    rest.split('/')
        .map(|raw| {
            if raw == "*" {
                return Ok(Segment::Wildcard);
            }
            let mut key = String::with_capacity(raw.len());
            let mut chars = raw.chars();
            while let Some(c) = chars.next() {
                if c == '~' {
                    match chars.next() {
                        Some('0') => key.push('~'),
                        Some('1') => key.push('/'),
                        _ => return Err(invalid("'~' must be followed by '0' or '1'")),
                    }
                } else {
                    key.push(c);
                }
            }
            Ok(Segment::Key(key))
        })
        .collect()
}

/// Appends one escaped segment to a concrete pointer, for error messages.
fn push_segment(path: &mut String, key: &str) {
    path.push('/');
    for c in key.chars() {
        match c {
            '~' => path.push_str("~0"),
            '/' => path.push_str("~1"),
            c => path.push(c),
        }
    }
}

/// The array index a pointer segment names: `0` or a decimal without leading zeros. `-` (past
/// the end) and anything else name no element.
fn array_index(segment: &str) -> Option<usize> {
    let canonical = !segment.is_empty()
        && segment.bytes().all(|b| b.is_ascii_digit())
        && (segment == "0" || !segment.starts_with('0'));
    if canonical { segment.parse().ok() } else { None }
}

// ---------------------------------------------------------------------------------------------
// Exclusions

/// A trie of excluded pointers.
#[derive(Clone, Debug, Default)]
struct ExclusionNode {
    /// A pointer ends here: the value at this node is removed.
    excluded: bool,
    /// Continuations through a named member or index.
    keys: BTreeMap<String, ExclusionNode>,
    /// Continuation through `*`.
    wildcard: Option<Box<ExclusionNode>>,
}

impl ExclusionNode {
    fn is_empty(&self) -> bool {
        !self.excluded && self.keys.is_empty() && self.wildcard.is_none()
    }

    fn insert(&mut self, segments: Vec<Segment>) {
        let mut node = self;
        for segment in segments {
            node = match segment {
                Segment::Key(key) => node.keys.entry(key).or_default(),
                Segment::Wildcard => node.wildcard.get_or_insert_with(Box::default),
            };
        }
        node.excluded = true;
    }
}

/// The trie nodes reached from `nodes` through a child named `key`.
fn descend<'a>(nodes: &[&'a ExclusionNode], key: &str) -> Vec<&'a ExclusionNode> {
    nodes.iter().flat_map(|node| node.keys.get(key).into_iter().chain(node.wildcard.as_deref())).collect()
}

/// Removes every excluded member/element below `value`; `nodes` are the trie nodes matching
/// `value` itself (never excluded: that is decided by the parent).
fn apply_exclusions(value: &mut Value, nodes: &[&ExclusionNode]) {
    match value {
        Value::Object(map) => map.retain(|key, child| keep_child(child, &descend(nodes, key))),
        Value::Array(items) => {
            let mut index = 0usize;
            items.retain_mut(|child| {
                let matched = descend(nodes, &index.to_string());
                index += 1;
                keep_child(child, &matched)
            });
        }
        _ => {}
    }
}

/// Whether a child reached through the trie nodes `matched` survives; prunes inside it if so.
fn keep_child(child: &mut Value, matched: &[&ExclusionNode]) -> bool {
    if matched.iter().any(|node| node.excluded) {
        return false;
    }
    if !matched.is_empty() {
        apply_exclusions(child, matched);
    }
    true
}

// ---------------------------------------------------------------------------------------------
// Normalisers

/// Applies `normaliser` to every value `segments` reaches from `value`; `path` is the concrete
/// pointer of `value`, for error messages.
fn apply_normaliser(
    value: &mut Value,
    segments: &[Segment],
    path: &mut String,
    normaliser: Normaliser,
) -> Result<(), CanonicalError> {
    let Some((first, rest)) = segments.split_first() else {
        return normalise_value(value, path, normaliser);
    };
    let start = path.len();
    match (value, first) {
        (Value::Object(map), Segment::Wildcard) => {
            for (key, child) in map.iter_mut() {
                push_segment(path, key);
                apply_normaliser(child, rest, path, normaliser)?;
                path.truncate(start);
            }
        }
        (Value::Object(map), Segment::Key(key)) => {
            if let Some(child) = map.get_mut(key) {
                push_segment(path, key);
                apply_normaliser(child, rest, path, normaliser)?;
                path.truncate(start);
            }
        }
        (Value::Array(items), Segment::Wildcard) => {
            for (index, child) in items.iter_mut().enumerate() {
                push_segment(path, &index.to_string());
                apply_normaliser(child, rest, path, normaliser)?;
                path.truncate(start);
            }
        }
        (Value::Array(items), Segment::Key(key)) => {
            if let Some(child) = array_index(key).and_then(|index| items.get_mut(index)) {
                push_segment(path, key);
                apply_normaliser(child, rest, path, normaliser)?;
                path.truncate(start);
            }
        }
        // The path continues below a scalar: it does not exist in this body.
        _ => {}
    }
    Ok(())
}

/// Rewrites one value in place.
fn normalise_value(value: &mut Value, path: &str, normaliser: Normaliser) -> Result<(), CanonicalError> {
    let mismatch = |found| CanonicalError::NormaliserTypeMismatch {
        pointer: path.to_owned(),
        expected: normaliser.expected(),
        found,
    };
    match (normaliser, &mut *value) {
        (Normaliser::Trim, Value::String(s)) => {
            let trimmed = s.trim();
            if trimmed.len() != s.len() {
                *s = trimmed.to_owned();
            }
        }
        (Normaliser::Uppercase, Value::String(s)) => s.make_ascii_uppercase(),
        (Normaliser::Lowercase, Value::String(s)) => s.make_ascii_lowercase(),
        (Normaliser::DecimalAmount, Value::String(s)) => {
            let canonical = canonical_decimal(s, false)
                .ok_or_else(|| CanonicalError::InvalidDecimal { pointer: path.to_owned(), value: quote(s) })?;
            *s = canonical;
        }
        (Normaliser::DecimalAmount, Value::Number(n)) => {
            let text = n.to_string();
            let canonical = canonical_decimal(&text, true)
                .ok_or_else(|| CanonicalError::InvalidDecimal { pointer: path.to_owned(), value: quote(&text) })?;
            *value = Value::String(canonical);
        }
        (_, other) => return Err(mismatch(type_name(other))),
    }
    Ok(())
}

/// Canonical form of a decimal `-?[0-9]*(\.[0-9]*)?` (plus `[eE][+-]?[0-9]+` if
/// `allow_exponent`): no leading zeros in the integer part, no trailing zeros in the fraction, no
/// bare dot, no exponent, no sign on zero. `None` if `text` is not such a decimal.
fn canonical_decimal(text: &str, allow_exponent: bool) -> Option<String> {
    /// Largest exponent magnitude accepted; a double needs at most 324.
    const MAX_EXPONENT: i64 = 400;

    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) if allow_exponent => (&unsigned[..at], Some(&unsigned[at + 1..])),
        _ => (unsigned, None),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int_part.is_empty() && frac_part.is_empty()) || !all_digits(int_part) || !all_digits(frac_part) {
        return None;
    }
    let exponent: i64 = match exponent {
        None => 0,
        Some(e) => {
            let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
            if digits.is_empty() || digits.len() > 6 || !all_digits(digits) {
                return None;
            }
            let magnitude: i64 = digits.parse().ok()?;
            if magnitude > MAX_EXPONENT {
                return None;
            }
            if e.starts_with('-') { -magnitude } else { magnitude }
        }
    };

    // value = 0.<digits> × 10^point, digits without leading or trailing zeros.
    let all: String = [int_part, frac_part].concat();
    let significant = all.trim_start_matches('0');
    let leading_zeros = all.len() - significant.len();
    let significant = significant.trim_end_matches('0');
    if significant.is_empty() {
        return Some("0".to_owned());
    }
    let point = i64::try_from(int_part.len()).ok()? - i64::try_from(leading_zeros).ok()? + exponent;

    let mut out = String::with_capacity(significant.len() + 4);
    if negative {
        out.push('-');
    }
    if point <= 0 {
        out.push_str("0.");
        out.extend(core::iter::repeat_n('0', usize::try_from(-point).ok()?));
        out.push_str(significant);
    } else {
        let point = usize::try_from(point).ok()?;
        if point >= significant.len() {
            out.push_str(significant);
            out.extend(core::iter::repeat_n('0', point - significant.len()));
        } else {
            out.push_str(&significant[..point]);
            out.push('.');
            out.push_str(&significant[point..]);
        }
    }
    Some(out)
}

/// JSON type name of a value, for error messages.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A client value cut to [`MAX_QUOTED_CHARS`] characters for an error message.
fn quote(value: &str) -> String {
    match value.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((cut, _)) => format!("{}…", &value[..cut]),
        None => value.to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------
// Strict parsing

/// Refuses values nested deeper than [`MAX_DEPTH`]; recursion stops at the limit.
fn check_depth(value: &Value, depth: usize) -> Result<(), CanonicalError> {
    let is_container = matches!(value, Value::Array(_) | Value::Object(_));
    if is_container && depth >= MAX_DEPTH {
        return Err(CanonicalError::TooDeep { max: MAX_DEPTH });
    }
    match value {
        Value::Array(items) => items.iter().try_for_each(|child| check_depth(child, depth + 1)),
        Value::Object(map) => map.values().try_for_each(|child| check_depth(child, depth + 1)),
        _ => Ok(()),
    }
}

/// Why the strict visitor stopped the parse (serde errors can only carry a message).
enum Failure {
    TooDeep,
    DuplicateKey(String),
}

/// Parses one JSON value, refusing duplicate member names and deep nesting.
fn parse_strict(body: &[u8]) -> Result<Value, CanonicalError> {
    let failure = Cell::new(None);
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let parsed = StrictValue { failure: &failure, depth: 0 }
        .deserialize(&mut deserializer)
        .and_then(|value| deserializer.end().map(|()| value));
    parsed.map_err(|err| parse_error(&err, failure.take()))
}

/// Maps a serde_json error (and what the visitor recorded) to a [`CanonicalError`].
fn parse_error(err: &serde_json::Error, failure: Option<Failure>) -> CanonicalError {
    let (line, column) = (err.line(), err.column());
    let mut message = err.to_string();
    let suffix = format!(" at line {line} column {column}");
    if message.ends_with(&suffix) {
        message.truncate(message.len() - suffix.len());
    }
    let not_canonicalisable =
        |what: &str| CanonicalError::NotCanonicalisable { reason: format!("{what} at line {line} column {column}") };
    match failure {
        Some(Failure::TooDeep) => CanonicalError::TooDeep { max: MAX_DEPTH },
        Some(Failure::DuplicateKey(key)) => not_canonicalisable(&format!("duplicate member name {:?}", quote(&key))),
        None if message.starts_with("recursion limit exceeded") => CanonicalError::TooDeep { max: MAX_DEPTH },
        None if message.starts_with("number out of range") => {
            not_canonicalisable("number outside the IEEE 754 double range")
        }
        None if message.starts_with("lone leading surrogate")
            || message.starts_with("unexpected end of hex escape") =>
        {
            not_canonicalisable("unpaired UTF-16 surrogate in a \\u escape")
        }
        None => CanonicalError::InvalidJson { line, column, message },
    }
}

/// Deserialises a [`Value`] like serde_json does, but refuses duplicate member names (serde_json
/// keeps the last one silently) and counts nesting.
#[derive(Clone, Copy)]
struct StrictValue<'a> {
    failure: &'a Cell<Option<Failure>>,
    depth: usize,
}

impl StrictValue<'_> {
    /// The seed for children of an array/object at this level, or an error past the limit.
    fn nested<E: de::Error>(self) -> Result<Self, E> {
        if self.depth >= MAX_DEPTH {
            self.failure.set(Some(Failure::TooDeep));
            return Err(E::custom("nesting too deep"));
        }
        Ok(StrictValue { failure: self.failure, depth: self.depth + 1 })
    }
}

impl<'de> DeserializeSeed<'de> for StrictValue<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v).map(Value::Number).ok_or_else(|| E::custom("number out of range"))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let child = self.nested()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(child)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let child = self.nested()?;
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            if map.contains_key(&key) {
                let message = format!("duplicate member name {key:?}");
                self.failure.set(Some(Failure::DuplicateKey(key)));
                return Err(de::Error::custom(message));
            }
            let value = access.next_value_seed(child)?;
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn canon(body: &str) -> Result<String, CanonicalError> {
        canon_with(&Canonicalizer::new(), body)
    }

    fn canon_with(c: &Canonicalizer, body: &str) -> Result<String, CanonicalError> {
        c.canonicalize(body.as_bytes()).map(|bytes| String::from_utf8(bytes).unwrap())
    }

    fn decimal(c: &Canonicalizer, body: &str) -> String {
        canon_with(c, body).unwrap()
    }

    // --- RFC 8785 ------------------------------------------------------------------------------

    /// RFC 8785 section 3.2.2 input and section 3.2.3/3.2.4 output.
    #[test]
    fn rfc8785_sample() {
        let input = r#"{
  "numbers": [333333333.33333329, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}"#;
        let expected = r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#;
        assert_eq!(canon(input).unwrap(), expected);
    }

    /// RFC 8785 section 3.2.4: the UTF-8 bytes of the canonical sample, as printed in hex.
    #[test]
    fn rfc8785_sample_utf8_hex() {
        let input = include_bytes!("../testdata/canonical/input/values.json");
        let hex = include_str!("../testdata/canonical/outhex/values.txt");
        let expected: Vec<u8> = hex.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect();
        assert_eq!(Canonicalizer::new().canonicalize(input).unwrap(), expected);
    }

    /// RFC 8785 section 3.2.3: members sorted by UTF-16 code units. The RFC lists the expected
    /// order as the property values: Carriage Return, One, Control, Latin Small Letter O With
    /// Diaeresis, Euro Sign, Emoji: Grinning Face, Hebrew Letter Dalet With Dagesh. U+1F600 sorts
    /// before U+FB33 because its UTF-16 form starts with the surrogate 0xD83D. The names are
    /// serialised per section 3.2.2.2: `\r` escaped, U+0080 and above as raw UTF-8.
    #[test]
    fn rfc8785_property_sorting() {
        let input = r#"{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}"#;
        let expected = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\
            \"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\
            \"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
        assert_eq!(canon(input).unwrap(), expected);
    }

    /// RFC 8785 appendix B: IEEE 754 bit patterns and their canonical text.
    #[test]
    fn rfc8785_appendix_b_numbers() {
        let cases: &[(u64, &str)] = &[
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ];
        let c = Canonicalizer::new();
        for &(bits, expected) in cases {
            let number = Number::from_f64(f64::from_bits(bits)).unwrap();
            let out = c.canonicalize_value(Value::Number(number.clone())).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), expected, "bits {bits:#018x}");
            // The same double written as JSON text parses back to the same canonical form.
            let text = serde_json::to_string(&number).unwrap();
            assert_eq!(canon(&text).unwrap(), expected, "text {text}");
        }
        // NaN and the infinities (appendix B: "must cause an error") cannot even enter a Value.
        for bits in [0x7fffffffffffffff_u64, 0x7ff0000000000000, 0xfff0000000000000] {
            assert!(Number::from_f64(f64::from_bits(bits)).is_none());
        }
    }

    /// The test vectors of the RFC 8785 reference implementation (see testdata/canonical).
    #[test]
    fn reference_implementation_vectors() {
        let vectors: &[(&str, &[u8], &str)] = &[
            (
                "arrays",
                include_bytes!("../testdata/canonical/input/arrays.json"),
                include_str!("../testdata/canonical/outhex/arrays.txt"),
            ),
            (
                "french",
                include_bytes!("../testdata/canonical/input/french.json"),
                include_str!("../testdata/canonical/outhex/french.txt"),
            ),
            (
                "structures",
                include_bytes!("../testdata/canonical/input/structures.json"),
                include_str!("../testdata/canonical/outhex/structures.txt"),
            ),
            (
                "unicode",
                include_bytes!("../testdata/canonical/input/unicode.json"),
                include_str!("../testdata/canonical/outhex/unicode.txt"),
            ),
            (
                "values",
                include_bytes!("../testdata/canonical/input/values.json"),
                include_str!("../testdata/canonical/outhex/values.txt"),
            ),
            (
                "weird",
                include_bytes!("../testdata/canonical/input/weird.json"),
                include_str!("../testdata/canonical/outhex/weird.txt"),
            ),
        ];
        for (name, input, hex) in vectors {
            let expected: Vec<u8> = hex.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect();
            assert_eq!(Canonicalizer::new().canonicalize(input).unwrap(), expected, "{name}");
        }
        assert_eq!(
            include_str!("../testdata/canonical/output/weird.json").trim_end(),
            canon(include_str!("../testdata/canonical/input/weird.json")).unwrap()
        );
    }

    #[test]
    fn minus_zero_and_number_spellings() {
        assert_eq!(canon("[-0, -0.0, 0e5, 1.0, 1E2, 10e-1, 0.1e1]").unwrap(), "[0,0,0,1,100,1,1]");
        assert_eq!(canon("  \"\\u0041\\t\"  ").unwrap(), r#""A\t""#);
    }

    // --- Exclusions ----------------------------------------------------------------------------

    #[test]
    fn exclude_top_level_and_missing_paths() {
        let c = Canonicalizer::new().exclude("/trace_id").unwrap().exclude("/not/there").unwrap();
        assert_eq!(canon_with(&c, r#"{"a":1,"trace_id":"x"}"#).unwrap(), r#"{"a":1}"#);
        assert_eq!(canon_with(&c, r#"{"a":1}"#).unwrap(), r#"{"a":1}"#);
        assert_eq!(canon_with(&c, r#"[1,2]"#).unwrap(), "[1,2]");
        assert_eq!(canon_with(&c, r#""scalar""#).unwrap(), r#""scalar""#);
        assert_eq!(canon_with(&c, r#"{"not":5}"#).unwrap(), r#"{"not":5}"#);
    }

    #[test]
    fn exclude_nested_and_whole_subtree() {
        let c = Canonicalizer::new().exclude("/meta/sent_at").unwrap().exclude("/headers").unwrap();
        let body = r#"{"meta":{"sent_at":"2026-01-01","kind":"pay"},"headers":{"authorization":"Bearer x"},"x":1}"#;
        assert_eq!(canon_with(&c, body).unwrap(), r#"{"meta":{"kind":"pay"},"x":1}"#);
    }

    #[test]
    fn exclude_wildcards() {
        let c = Canonicalizer::new().exclude("/items/*/trace").unwrap();
        let body = r#"{"items":[{"trace":1,"sku":"a"},{"sku":"b"},7,{"trace":{"deep":true}}],"trace":0}"#;
        assert_eq!(canon_with(&c, body).unwrap(), r#"{"items":[{"sku":"a"},{"sku":"b"},7,{}],"trace":0}"#);

        // A wildcard over object members.
        let c = Canonicalizer::new().exclude("/by_id/*/request_id").unwrap();
        let body = r#"{"by_id":{"a":{"request_id":1,"v":1},"b":{"request_id":2,"v":2}}}"#;
        assert_eq!(canon_with(&c, body).unwrap(), r#"{"by_id":{"a":{"v":1},"b":{"v":2}}}"#);

        // A trailing wildcard empties the container; a leading one applies to every member.
        let c = Canonicalizer::new().exclude("/tags/*").unwrap().exclude("/*/ts").unwrap();
        let body = r#"{"tags":["x","y"],"a":{"ts":1,"k":2},"b":[{"ts":3}],"c":{"ts":4}}"#;
        assert_eq!(canon_with(&c, body).unwrap(), r#"{"a":{"k":2},"b":[{"ts":3}],"c":{},"tags":[]}"#);
    }

    #[test]
    fn exclude_wildcard_and_literal_overlap() {
        let c = Canonicalizer::new().exclude("/a/*/x").unwrap().exclude("/a/k/y").unwrap();
        let body = r#"{"a":{"k":{"x":1,"y":2,"z":3},"m":{"x":1,"y":2}}}"#;
        assert_eq!(canon_with(&c, body).unwrap(), r#"{"a":{"k":{"z":3},"m":{"y":2}}}"#);
    }

    #[test]
    fn exclude_escaped_pointers() {
        let c = Canonicalizer::new().exclude("/a~1b").unwrap().exclude("/m~0n").unwrap().exclude("/~01").unwrap();
        let body = r#"{"a/b":1,"m~n":2,"~1":3,"a":{"b":4},"keep":5}"#;
        assert_eq!(canon_with(&c, body).unwrap(), r#"{"a":{"b":4},"keep":5}"#);
        // The empty member name is addressed by "/".
        let c = Canonicalizer::new().exclude("/").unwrap();
        assert_eq!(canon_with(&c, r#"{"":1,"a":2}"#).unwrap(), r#"{"a":2}"#);
    }

    #[test]
    fn exclude_array_indices_refer_to_the_parsed_document() {
        let c = Canonicalizer::new().exclude("/l/2").unwrap().exclude("/l/0").unwrap();
        assert_eq!(canon_with(&c, "{\"l\":[0,1,2,3]}").unwrap(), r#"{"l":[1,3]}"#);
        // Leading zeros, "-" and out-of-range indices name nothing.
        let c = Canonicalizer::new().exclude("/l/01").unwrap().exclude("/l/-").unwrap().exclude("/l/9").unwrap();
        assert_eq!(canon_with(&c, "{\"l\":[0,1,2]}").unwrap(), "{\"l\":[0,1,2]}");
        // An object member named like an index is matched by name.
        let c = Canonicalizer::new().exclude("/0").unwrap();
        assert_eq!(canon_with(&c, r#"{"0":1,"1":2}"#).unwrap(), r#"{"1":2}"#);
    }

    #[test]
    fn exclusions_run_before_normalisers() {
        let c = Canonicalizer::new().normalise("/*", Normaliser::Uppercase).unwrap().exclude("/sent_at").unwrap();
        assert_eq!(canon_with(&c, r#"{"cur":"brl","sent_at":12345}"#).unwrap(), r#"{"cur":"BRL"}"#);
    }

    #[test]
    fn invalid_pointers() {
        let err = |p: &str| Canonicalizer::new().exclude(p).unwrap_err();
        for pointer in ["a", "a/b", "/a~", "/a~2", "/~/x", "/ok/b~x"] {
            assert!(matches!(err(pointer), CanonicalError::InvalidPointer { .. }), "{pointer}");
            assert!(matches!(
                Canonicalizer::new().normalise(pointer, Normaliser::Trim),
                Err(CanonicalError::InvalidPointer { .. })
            ));
        }
        assert_eq!(
            err(""),
            CanonicalError::InvalidPointer { pointer: String::new(), reason: "the whole document cannot be excluded" }
        );
        // The root is a valid normalisation target.
        let c = Canonicalizer::new().normalise("", Normaliser::Trim).unwrap();
        assert_eq!(canon_with(&c, r#"" x ""#).unwrap(), r#""x""#);
    }

    // --- Normalisers ---------------------------------------------------------------------------

    #[test]
    fn trim() {
        let c = Canonicalizer::new().normalise("/s", Normaliser::Trim).unwrap();
        assert_eq!(canon_with(&c, r#"{"s":"  a b \t\n"}"#).unwrap(), r#"{"s":"a b"}"#);
        // Unicode White_Space: NO-BREAK SPACE, IDEOGRAPHIC SPACE.
        assert_eq!(canon_with(&c, "{\"s\":\"\u{a0}x\u{3000}\"}").unwrap(), r#"{"s":"x"}"#);
        assert_eq!(canon_with(&c, r#"{"s":"   "}"#).unwrap(), r#"{"s":""}"#);
    }

    #[test]
    fn uppercase_and_lowercase_are_ascii_only() {
        let up = Canonicalizer::new().normalise("/c", Normaliser::Uppercase).unwrap();
        assert_eq!(canon_with(&up, r#"{"c":"brl"}"#).unwrap(), r#"{"c":"BRL"}"#);
        assert_eq!(canon_with(&up, r#"{"c":"straße-é"}"#).unwrap(), r#"{"c":"STRAßE-é"}"#);
        let down = Canonicalizer::new().normalise("/c", Normaliser::Lowercase).unwrap();
        assert_eq!(canon_with(&down, r#"{"c":"Hello-É"}"#).unwrap(), r#"{"c":"hello-É"}"#);
    }

    #[test]
    fn normalisers_run_in_order_and_through_wildcards() {
        let c = Canonicalizer::new()
            .normalise("/items/*/cur", Normaliser::Trim)
            .unwrap()
            .normalise("/items/*/cur", Normaliser::Uppercase)
            .unwrap()
            .normalise("/items/1/amt", Normaliser::DecimalAmount)
            .unwrap();
        let body = r#"{"items":[{"cur":" usd ","amt":"1.0"},{"cur":"eur","amt":"2.50"},{"x":1},5]}"#;
        assert_eq!(
            canon_with(&c, body).unwrap(),
            r#"{"items":[{"amt":"1.0","cur":"USD"},{"amt":"2.5","cur":"EUR"},{"x":1},5]}"#
        );
        // Missing paths are a no-op.
        assert_eq!(canon_with(&c, r#"{"other":1}"#).unwrap(), r#"{"other":1}"#);
        assert_eq!(canon_with(&c, r#"{"items":"none"}"#).unwrap(), r#"{"items":"none"}"#);
    }

    #[test]
    fn decimal_amount_strings() {
        let c = Canonicalizer::new().normalise("/a", Normaliser::DecimalAmount).unwrap();
        let cases = [
            ("10.50", "10.5"),
            ("010.5", "10.5"),
            ("10.500", "10.5"),
            ("10.5", "10.5"),
            ("10.", "10"),
            ("10", "10"),
            ("100", "100"),
            ("0100.0100", "100.01"),
            (".5", "0.5"),
            ("0.05", "0.05"),
            ("000", "0"),
            ("0.000", "0"),
            ("-0.0", "0"),
            ("-0", "0"),
            ("-.0", "0"),
            ("-007.10", "-7.1"),
            ("123456789012345678901234567890.123456789", "123456789012345678901234567890.123456789"),
        ];
        for (input, expected) in cases {
            let body = format!(r#"{{"a":"{input}"}}"#);
            assert_eq!(decimal(&c, &body), format!(r#"{{"a":"{expected}"}}"#), "{input}");
        }
    }

    #[test]
    fn decimal_amount_numbers() {
        let c = Canonicalizer::new().normalise("/a", Normaliser::DecimalAmount).unwrap();
        let cases = [
            ("10.5", "10.5"),
            ("10.50", "10.5"),
            ("10", "10"),
            ("-0.0", "0"),
            ("-0", "0"),
            ("1e3", "1000"),
            ("1E+3", "1000"),
            ("25e-3", "0.025"),
            ("1e30", "1000000000000000000000000000000"),
            ("-1.5e-7", "-0.00000015"),
            ("18446744073709551615", "18446744073709551615"),
            ("-9223372036854775808", "-9223372036854775808"),
            ("0.1", "0.1"),
        ];
        for (input, expected) in cases {
            let body = format!(r#"{{"a":{input}}}"#);
            assert_eq!(decimal(&c, &body), format!(r#"{{"a":"{expected}"}}"#), "{input}");
        }
        // The headline equivalence.
        let all: Vec<String> = [r#""10.50""#, r#""10.5""#, "10.5", r#""10.500""#, r#""010.5""#]
            .iter()
            .map(|a| decimal(&c, &format!(r#"{{"a":{a}}}"#)))
            .collect();
        assert!(all.iter().all(|x| x == &all[0]), "{all:?}");
        assert_ne!(decimal(&c, r#"{"a":"10.51"}"#), all[0]);
    }

    #[test]
    fn decimal_amount_refuses_non_decimals() {
        let c = Canonicalizer::new().normalise("/a", Normaliser::DecimalAmount).unwrap();
        for input in ["", ".", "-", "-.", "+1", " 1", "1 ", "1e3", "1E3", "1,000.00", "1.2.3", "0x10", "NaN", "１"] {
            let body = serde_json::to_string(&json!({ "a": input })).unwrap();
            assert_eq!(
                canon_with(&c, &body),
                Err(CanonicalError::InvalidDecimal { pointer: "/a".into(), value: input.into() }),
                "{input:?}"
            );
        }
        // Long values are cut in the error.
        let long = "9".repeat(100) + "x";
        let body = serde_json::to_string(&json!({ "a": long })).unwrap();
        let Err(CanonicalError::InvalidDecimal { value, .. }) = canon_with(&c, &body) else { panic!() };
        assert_eq!(value, "9".repeat(64) + "…");
    }

    #[test]
    fn canonical_decimal_exponent_bounds() {
        assert_eq!(canonical_decimal("1e400", true).map(|s| s.len()), Some(401));
        assert_eq!(canonical_decimal("1e401", true), None);
        assert_eq!(canonical_decimal("1e", true), None);
        assert_eq!(canonical_decimal("1e+", true), None);
        assert_eq!(canonical_decimal("e5", true), None);
        assert_eq!(canonical_decimal("1e1e1", true), None);
        assert_eq!(canonical_decimal("5e-324", true).map(|s| s.len()), Some(326));
        assert_eq!(canonical_decimal("0e300", true).as_deref(), Some("0"));
        assert_eq!(canonical_decimal("0e999", true), None);
    }

    #[test]
    fn normaliser_type_mismatch() {
        let cases = [
            (Normaliser::Trim, "1", "number"),
            (Normaliser::Uppercase, "null", "null"),
            (Normaliser::Lowercase, "[]", "array"),
            (Normaliser::DecimalAmount, "true", "boolean"),
            (Normaliser::DecimalAmount, "{}", "object"),
            (Normaliser::DecimalAmount, "null", "null"),
        ];
        for (normaliser, value, found) in cases {
            let c = Canonicalizer::new().normalise("/list/*/v", normaliser).unwrap();
            let body = format!(r#"{{"list":[{{"v":"ok"}},{{"v":{value}}}]}}"#);
            let err = canon_with(&c, &body).unwrap_err();
            if normaliser == Normaliser::DecimalAmount {
                // "ok" itself is not a decimal: the first element already fails.
                assert!(matches!(err, CanonicalError::InvalidDecimal { .. }));
                let body = format!(r#"{{"list":[{{"v":"1"}},{{"v":{value}}}]}}"#);
                let err = canon_with(&c, &body).unwrap_err();
                assert_eq!(
                    err,
                    CanonicalError::NormaliserTypeMismatch {
                        pointer: "/list/1/v".into(),
                        expected: "a decimal string or number",
                        found
                    }
                );
            } else {
                assert_eq!(
                    err,
                    CanonicalError::NormaliserTypeMismatch { pointer: "/list/1/v".into(), expected: "a string", found }
                );
            }
        }
        // Concrete pointers in errors are escaped.
        let c = Canonicalizer::new().normalise("/*", Normaliser::Trim).unwrap();
        let err = canon_with(&c, r#"{"a/~b":1}"#).unwrap_err();
        assert!(matches!(err, CanonicalError::NormaliserTypeMismatch { ref pointer, .. } if pointer == "/a~1~0b"));
        assert!(err.to_string().contains("expected a string"), "{err}");
    }

    // --- Parsing and limits --------------------------------------------------------------------

    #[test]
    fn body_limit_is_checked_before_parsing() {
        let c = Canonicalizer::new().max_body_bytes(9);
        assert_eq!(canon_with(&c, "[1,2,3]").unwrap(), "[1,2,3]");
        assert_eq!(canon_with(&c, "[1, 2, 3]").unwrap(), "[1,2,3]");
        assert_eq!(canon_with(&c, "[1,  2, 3]"), Err(CanonicalError::BodyTooLarge { len: 10, max: 9 }));
        // Over the limit and not even JSON: the size is reported, not the syntax.
        assert_eq!(canon_with(&c, "not json!!"), Err(CanonicalError::BodyTooLarge { len: 10, max: 9 }));
        let big = vec![b' '; DEFAULT_MAX_BODY_BYTES + 1];
        assert_eq!(
            Canonicalizer::default().fingerprint(&big),
            Err(CanonicalError::BodyTooLarge { len: DEFAULT_MAX_BODY_BYTES + 1, max: DEFAULT_MAX_BODY_BYTES })
        );
    }

    #[test]
    fn invalid_json() {
        for body in ["", "   ", "{", "[1,]", "{\"a\" 1}", "nul", "01", "1.", "'x'", "[1] [2]", "{} x", "\u{feff}{}"] {
            assert!(matches!(canon(body), Err(CanonicalError::InvalidJson { .. })), "{body:?}: {:?}", canon(body));
        }
        let Err(CanonicalError::InvalidJson { line, column, message }) = canon("{\n  \"a\": tru,\n}") else {
            panic!("expected InvalidJson");
        };
        assert_eq!((line, column), (2, 11));
        assert!(!message.contains("at line"), "{message}");
        // Invalid UTF-8 inside a string.
        assert!(matches!(Canonicalizer::new().canonicalize(b"[\"\xff\"]"), Err(CanonicalError::InvalidJson { .. })));
    }

    #[test]
    fn duplicate_member_names_are_refused() {
        for body in [r#"{"a":1,"a":2}"#, r#"{"a":1,"\u0061":1}"#, r#"[{"x":{"k":1,"j":2,"k":3}}]"#] {
            let err = canon(body).unwrap_err();
            let CanonicalError::NotCanonicalisable { reason } = &err else { panic!("{body}: {err:?}") };
            assert!(reason.starts_with("duplicate member name"), "{reason}");
            assert!(reason.contains("line 1"), "{reason}");
        }
        // Same name in different objects is fine.
        assert_eq!(canon(r#"[{"a":1},{"a":2}]"#).unwrap(), r#"[{"a":1},{"a":2}]"#);
    }

    #[test]
    fn non_i_json_is_refused() {
        for body in ["1e400", "[-1e309]", r#""\ud800""#, r#""\udc00""#, r#""\ud800\u0041""#, r#"{"\ud83d":1}"#] {
            assert!(matches!(canon(body), Err(CanonicalError::NotCanonicalisable { .. })), "{body}: {:?}", canon(body));
        }
        // Very small numbers underflow to zero rather than fail.
        assert_eq!(canon("1e-400").unwrap(), "0");
    }

    #[test]
    fn nesting_limit() {
        let nested = |depth: usize| "[".repeat(depth) + &"]".repeat(depth);
        assert_eq!(canon(&nested(MAX_DEPTH)).unwrap(), nested(MAX_DEPTH));
        assert_eq!(canon(&nested(MAX_DEPTH + 1)), Err(CanonicalError::TooDeep { max: MAX_DEPTH }));
        // Beyond serde_json's own limit of 128 the error is the same.
        assert_eq!(canon(&nested(500)), Err(CanonicalError::TooDeep { max: MAX_DEPTH }));
        let objects = "{\"a\":".repeat(MAX_DEPTH + 1) + "1" + &"}".repeat(MAX_DEPTH + 1);
        assert_eq!(canon(&objects), Err(CanonicalError::TooDeep { max: MAX_DEPTH }));

        // The same limit for values built in code.
        let mut value = json!(1);
        for _ in 0..MAX_DEPTH {
            value = json!([value]);
        }
        assert!(Canonicalizer::new().canonicalize_value(value.clone()).is_ok());
        assert_eq!(
            Canonicalizer::new().canonicalize_value(json!({ "x": value })),
            Err(CanonicalError::TooDeep { max: MAX_DEPTH })
        );
    }

    #[test]
    fn fingerprint_matches_canonical_bytes() {
        let c = Canonicalizer::new().exclude("/trace_id").unwrap();
        let body = br#"{"b":2,"a":1,"trace_id":"t"}"#;
        assert_eq!(c.fingerprint(body).unwrap(), Fingerprint::of_canonical_json(br#"{"a":1,"b":2}"#));
        assert_eq!(c.fingerprint(b"{").unwrap_err(), canon_with(&c, "{").unwrap_err());
    }

    #[test]
    fn errors_display() {
        let errors = [
            CanonicalError::BodyTooLarge { len: 2, max: 1 },
            CanonicalError::InvalidJson { line: 1, column: 2, message: "EOF".into() },
            CanonicalError::InvalidPointer { pointer: "x".into(), reason: "r" },
            CanonicalError::NotCanonicalisable { reason: "r".into() },
            CanonicalError::NormaliserTypeMismatch { pointer: "/a".into(), expected: "a string", found: "null" },
            CanonicalError::InvalidDecimal { pointer: "/a".into(), value: "x".into() },
            CanonicalError::TooDeep { max: 64 },
        ];
        for err in errors {
            assert!(!err.to_string().is_empty());
        }
        assert_eq!(Normaliser::DecimalAmount.to_string(), "decimal");
        assert_eq!("decimal".parse::<Normaliser>(), Ok(Normaliser::DecimalAmount));
    }

    // --- Properties ----------------------------------------------------------------------------

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
            any::<String>().prop_map(Value::String),
            "[a-c\\\\\"\u{0}-\u{1f}é€😀]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("[a-d~/*é😀\u{7f}-\u{81}]{0,3}|\\PC{0,4}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Tiny deterministic generator for layout choices.
    struct Layout(u64);

    impl Layout {
        fn next(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }

        fn space(&mut self, out: &mut String) {
            out.push_str(["", " ", "\n", "\t", "\r\n  "][self.next(5) as usize]);
        }

        fn string(&mut self, s: &str, out: &mut String) {
            if self.next(2) == 0 {
                out.push_str(&serde_json::to_string(s).unwrap());
                return;
            }
            // Every character as a \u escape (UTF-16, surrogate pairs for astral characters).
            out.push('"');
            for unit in s.encode_utf16() {
                out.push_str(&format!("\\u{unit:04X}"));
            }
            out.push('"');
        }

        /// Serialises `value` with shuffled members, random whitespace and random escapes.
        fn render(&mut self, value: &Value, out: &mut String) {
            self.space(out);
            match value {
                Value::Array(items) => {
                    out.push('[');
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        self.render(item, out);
                    }
                    self.space(out);
                    out.push(']');
                }
                Value::Object(map) => {
                    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                    for i in (1..entries.len()).rev() {
                        let j = self.next(i as u64 + 1) as usize;
                        entries.swap(i, j);
                    }
                    out.push('{');
                    for (i, (key, item)) in entries.into_iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        self.space(out);
                        self.string(key, out);
                        self.space(out);
                        out.push(':');
                        self.render(item, out);
                    }
                    self.space(out);
                    out.push('}');
                }
                Value::String(s) => self.string(s, out),
                scalar => out.push_str(&serde_json::to_string(scalar).unwrap()),
            }
            self.space(out);
        }
    }

    proptest! {
        #[test]
        fn canonicalize_is_idempotent(value in arb_json()) {
            let c = Canonicalizer::new();
            let once = c.canonicalize_value(value).unwrap();
            let twice = c.canonicalize(&once).unwrap();
            prop_assert_eq!(&once, &twice);
            prop_assert!(std::str::from_utf8(&once).is_ok());
        }

        #[test]
        fn canonical_form_ignores_layout(value in arb_json(), seed in 1u64..) {
            let c = Canonicalizer::new();
            let expected = c.canonicalize_value(value.clone()).unwrap();
            let mut text = String::new();
            Layout(seed).render(&value, &mut text);
            prop_assert_eq!(c.canonicalize(text.as_bytes()).unwrap(), expected.clone(), "{}", text);
            let pretty = serde_json::to_vec_pretty(&value).unwrap();
            prop_assert_eq!(c.canonicalize(&pretty).unwrap(), expected);
        }

        #[test]
        fn excluded_fields_do_not_matter(
            members in prop::collection::btree_map("\\PC{0,4}", arb_json(), 0..6),
            trace in arb_json(),
        ) {
            let c = Canonicalizer::new().exclude("/trace_id").unwrap();
            let mut map: Map<String, Value> = members.into_iter().collect();
            map.remove("trace_id");
            let without = c.canonicalize_value(Value::Object(map.clone())).unwrap();
            map.insert("trace_id".into(), trace);
            prop_assert_eq!(c.canonicalize_value(Value::Object(map)).unwrap(), without);
        }

        #[test]
        fn decimal_spellings_agree(
            negative in any::<bool>(),
            int in "[0-9]{1,20}",
            frac in "[0-9]{0,10}",
            leading in 0usize..4,
            trailing in 0usize..4,
        ) {
            let c = Canonicalizer::new().normalise("/a", Normaliser::DecimalAmount).unwrap();
            let sign = if negative { "-" } else { "" };
            let plain = format!(r#"{{"a":"{sign}{int}.{frac}"}}"#);
            let padded = format!(r#"{{"a":"{sign}{}{int}.{frac}{}"}}"#, "0".repeat(leading), "0".repeat(trailing));
            let canonical = decimal(&c, &plain);
            prop_assert_eq!(&decimal(&c, &padded), &canonical);
            // The output is itself canonical: a fixed point, no leading/trailing zeros or dot.
            prop_assert_eq!(&decimal(&c, &canonical), &canonical);
            let Value::Object(map) = serde_json::from_str::<Value>(&canonical).unwrap() else { unreachable!() };
            let Some(Value::String(out)) = map.get("a") else { unreachable!() };
            let digits = out.trim_start_matches('-');
            prop_assert!(digits == "0" || digits.starts_with("0.") || !digits.starts_with('0'), "{}", out);
            prop_assert!(!out.ends_with('.'), "{}", out);
            prop_assert!(!(out.contains('.') && out.ends_with('0')), "{}", out);
            prop_assert!(out != "-0");
        }

        #[test]
        fn decimal_numbers_agree_with_strings(int in 0u64..1_000_000_000, cents in 0u64..100) {
            let c = Canonicalizer::new().normalise("/a", Normaliser::DecimalAmount).unwrap();
            let as_number = decimal(&c, &format!(r#"{{"a":{int}.{cents:02}}}"#));
            let as_string = decimal(&c, &format!(r#"{{"a":"{int}.{cents:02}"}}"#));
            prop_assert_eq!(as_number, as_string);
        }
    }
}
