//! JSON Pointers (RFC 6901) with a `*` wildcard segment: parsing and path building.

use super::error::CanonicalError;

/// One segment of a parsed pointer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Segment {
    /// A member name or array index, unescaped.
    Key(String),
    /// `*`: every member or element.
    Wildcard,
}

/// Parses an RFC 6901 pointer, with `*` segments as wildcards. `""` is the whole document.
pub(super) fn parse_pointer(pointer: &str) -> Result<Vec<Segment>, CanonicalError> {
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
pub(super) fn push_segment(path: &mut String, key: &str) {
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
pub(super) fn array_index(segment: &str) -> Option<usize> {
    let canonical = !segment.is_empty()
        && segment.bytes().all(|b| b.is_ascii_digit())
        && (segment == "0" || !segment.starts_with('0'));
    if canonical { segment.parse().ok() } else { None }
}
