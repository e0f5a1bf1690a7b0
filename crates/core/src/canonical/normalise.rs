//! Normalisers: what they are, rewriting the values a pointer reaches, and the canonical
//! decimal form.

use serde_json::Value;

use super::error::CanonicalError;
use super::pointer::{Segment, array_index, push_segment};

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

/// Applies `normaliser` to every value `segments` reaches from `value`; `path` is the concrete
/// pointer of `value`, for error messages.
pub(super) fn apply_normaliser(
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
pub(super) fn canonical_decimal(text: &str, allow_exponent: bool) -> Option<String> {
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
pub(super) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Longest excerpt of a client value quoted in an error message, in characters.
const MAX_QUOTED_CHARS: usize = 64;

/// A client value cut to [`MAX_QUOTED_CHARS`] characters for an error message.
pub(super) fn quote(value: &str) -> String {
    match value.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((cut, _)) => format!("{}…", &value[..cut]),
        None => value.to_owned(),
    }
}
