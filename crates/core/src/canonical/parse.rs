//! Strict parsing: I-JSON (RFC 7493) — no duplicate member names, no unpaired surrogates, a
//! nesting limit — with errors that say where.

use core::cell::Cell;
use core::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::error::CanonicalError;
use super::normalise::quote;

/// Deepest nesting of arrays and objects accepted (a scalar body has depth 0, `[]` depth 1).
///
/// serde_json stops at 128 on its own; the lower limit keeps recursion in this module and in the
/// RFC 8785 serialiser shallow, and no request body needs more.
pub(super) const MAX_DEPTH: usize = 64;

/// Refuses values nested deeper than [`MAX_DEPTH`]; recursion stops at the limit.
pub(super) fn check_depth(value: &Value, depth: usize) -> Result<(), CanonicalError> {
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
enum ParseFailure {
    TooDeep,
    DuplicateKey(String),
}

/// Parses one JSON value, refusing duplicate member names and deep nesting.
pub(super) fn parse_strict(body: &[u8]) -> Result<Value, CanonicalError> {
    let failure = Cell::new(None);
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let parsed = StrictValue { failure: &failure, depth: 0 }
        .deserialize(&mut deserializer)
        .and_then(|value| deserializer.end().map(|()| value));
    parsed.map_err(|err| parse_error(&err, failure.take()))
}

/// Maps a serde_json error (and what the visitor recorded) to a [`CanonicalError`].
fn parse_error(err: &serde_json::Error, failure: Option<ParseFailure>) -> CanonicalError {
    let (line, column) = (err.line(), err.column());
    let mut message = err.to_string();
    let suffix = format!(" at line {line} column {column}");
    if message.ends_with(&suffix) {
        message.truncate(message.len() - suffix.len());
    }
    let not_canonicalisable =
        |what: &str| CanonicalError::NotCanonicalisable { reason: format!("{what} at line {line} column {column}") };
    match failure {
        Some(ParseFailure::TooDeep) => CanonicalError::TooDeep { max: MAX_DEPTH },
        Some(ParseFailure::DuplicateKey(key)) => {
            not_canonicalisable(&format!("duplicate member name {:?}", quote(&key)))
        }
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
    failure: &'a Cell<Option<ParseFailure>>,
    depth: usize,
}

impl StrictValue<'_> {
    /// The seed for children of an array/object at this level, or an error past the limit.
    fn nested<E: de::Error>(self) -> Result<Self, E> {
        if self.depth >= MAX_DEPTH {
            self.failure.set(Some(ParseFailure::TooDeep));
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
                self.failure.set(Some(ParseFailure::DuplicateKey(key)));
                return Err(de::Error::custom(message));
            }
            let value = access.next_value_seed(child)?;
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }
}
