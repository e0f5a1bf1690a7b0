//! The `Idempotency-Key` header: an RFC 8941 structured-field string, a token, or a bare
//! opaque value, checked with the core's key rules.

use http::HeaderValue;
use idemdb_core::{IdempotencyKey, IdentityPart, KeyError};
use sfv::{BareItem, Item, Parser, StringRef, Version};

/// The header's name, as the IETF draft spells it.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The header a replayed response carries, with the value `true`.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

/// What a request should send instead of a refused value (the end of every refusal's detail).
const WHAT_TO_SEND: &str =
    "send the key as a quoted string, `Idempotency-Key: \"8e03978e-40d5-43e8-bc93-6894a57f9324\"`";

/// Which spellings of `Idempotency-Key` an operation accepts.
///
/// Every accepted spelling of the same characters names **one key**: `"k-1"`, `k-1` (an
/// sf-token) and `k-1` (a bare value) are the same record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum KeyForms {
    /// The default: an sf-string (`"8e03978e-…"`, parameters ignored), or any value that does
    /// not start with `"`, taken whole (without surrounding spaces) as the key — the sf-token
    /// `k-1` and the bare UUID `8e03978e-40d5-…` that Stripe-style clients send unquoted (a
    /// UUID starting with a digit is neither an sf-string nor an sf-token). The key rules
    /// still apply: 1..=255 bytes of visible ASCII.
    #[default]
    Lenient,
    /// The draft's form only: an RFC 8941 sf-string (`Idempotency-Key: "k-1"`).
    Strict,
}

/// Why an `Idempotency-Key` header value was refused. Each message ends with what to send.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyHeaderError {
    /// The value is not a structured-field item (bad quoting, a non-ASCII byte, trailing
    /// characters, or the header sent more than once).
    #[error("Idempotency-Key is not a structured-field string ({0}); {WHAT_TO_SEND}")]
    Syntax(String),
    /// Under [`KeyForms::Strict`], the value is an item of another type (a token, an
    /// integer): the draft asks for a string.
    #[error("Idempotency-Key must be a quoted structured-field string, found a {found}; {WHAT_TO_SEND}")]
    NotAString {
        /// What was found (`token`, `integer`, ...).
        found: &'static str,
    },
    /// The value is not a valid key (empty, over 255 bytes, or with a space or another byte
    /// outside visible ASCII).
    #[error("Idempotency-Key: {0}; send 1 to 255 bytes of visible ASCII (0x21-0x7E), such as a UUID v4")]
    Key(#[from] KeyError),
}

impl KeyHeaderError {
    /// The stable code: always [`ErrorCode::InvalidKey`](idemdb_core::ErrorCode::InvalidKey).
    pub fn code(&self) -> idemdb_core::ErrorCode {
        idemdb_core::ErrorCode::InvalidKey
    }
}

idemdb_core::coded!(KeyHeaderError);

/// Parses an `Idempotency-Key` header value in the spellings `forms` accepts.
///
/// A value that starts with `"` is always an RFC 8941 item whose bare item must be a string
/// (parameters are allowed and ignored, as the draft defines none). Under
/// [`KeyForms::Lenient`] any other value is taken whole, without surrounding spaces, as the
/// key (an sf-token, a bare UUID); under [`KeyForms::Strict`] it is refused. The key must then
/// pass the core's rules ([`IdempotencyKey::new`]: 1..=255 bytes of `0x21..=0x7E`).
///
/// ```
/// use http::HeaderValue;
/// use idemdb_http::{KeyForms, parse_key_header};
///
/// let key = parse_key_header(&HeaderValue::from_static(r#""order-842""#), KeyForms::Lenient)?;
/// assert_eq!(key.as_str(), "order-842");
/// // Escapes are undone: the key is `a"b`.
/// assert_eq!(parse_key_header(&HeaderValue::from_static(r#""a\"b""#), KeyForms::Strict)?.as_str(), "a\"b");
/// // A bare UUID (neither an sf-string nor, starting with a digit, an sf-token) is the same key
/// // as its quoted form, unless the operation is strict.
/// let bare = HeaderValue::from_static("8e03978e-40d5-43e8-bc93-6894a57f9324");
/// let quoted = HeaderValue::from_static(r#""8e03978e-40d5-43e8-bc93-6894a57f9324""#);
/// assert_eq!(parse_key_header(&bare, KeyForms::Lenient)?, parse_key_header(&quoted, KeyForms::Strict)?);
/// assert!(parse_key_header(&bare, KeyForms::Strict).is_err());
/// // The core's rules apply after parsing: no empty key, no space.
/// assert!(parse_key_header(&HeaderValue::from_static(r#""""#), KeyForms::Lenient).is_err());
/// assert!(parse_key_header(&HeaderValue::from_static("a b"), KeyForms::Lenient).is_err());
/// # Ok::<(), idemdb_http::KeyHeaderError>(())
/// ```
///
/// # Errors
/// [`KeyHeaderError`] for a value that is not an accepted spelling, or not a valid key; its
/// message says what to send.
pub fn parse_key_header(value: &HeaderValue, forms: KeyForms) -> Result<IdempotencyKey, KeyHeaderError> {
    let bytes = value.as_bytes();
    let trimmed = bytes.trim_ascii();
    if forms == KeyForms::Lenient && trimmed.first() != Some(&b'"') {
        let text = std::str::from_utf8(trimmed).ok().filter(|text| text.is_ascii());
        let Some(text) = text else {
            let offset = trimmed.iter().position(|byte| !byte.is_ascii()).unwrap_or_default();
            let byte = trimmed.get(offset).copied().unwrap_or_default();
            return Err(KeyHeaderError::Key(KeyError::InvalidByte { part: IdentityPart::Key, byte, offset }));
        };
        return Ok(IdempotencyKey::new(text)?);
    }
    let item: Item = Parser::new(bytes)
        .with_version(Version::Rfc8941)
        .parse()
        .map_err(|error| KeyHeaderError::Syntax(error.to_string()))?;
    match &item.bare_item {
        BareItem::String(text) => Ok(IdempotencyKey::new(text.as_str())?),
        other => Err(KeyHeaderError::NotAString { found: bare_item_kind(other) }),
    }
}

fn bare_item_kind(item: &BareItem) -> &'static str {
    match item {
        BareItem::Decimal(_) => "decimal",
        BareItem::Integer(_) => "integer",
        BareItem::String(_) => "string",
        BareItem::ByteSequence(_) => "byte sequence",
        BareItem::Boolean(_) => "boolean",
        BareItem::Token(_) => "token",
        BareItem::Date(_) => "date",
        BareItem::DisplayString(_) => "display string",
    }
}

/// The `Idempotency-Key` header value for `key`: a structured-field string, quoted and escaped.
///
/// ```
/// use idemdb_core::IdempotencyKey;
/// let key = IdempotencyKey::new(r#"a"b\c"#)?;
/// let value = idemdb_http::key_header_value(&key);
/// assert_eq!(value.to_str()?, r#""a\"b\\c""#);
/// assert_eq!(idemdb_http::parse_key_header(&value, idemdb_http::KeyForms::Strict)?, key);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn key_header_value(key: &IdempotencyKey) -> HeaderValue {
    let mut quoted = String::with_capacity(key.as_str().len() + 2);
    match StringRef::from_str(key.as_str()) {
        Ok(string) => quoted = sfv::ItemSerializer::new().bare_item(string).finish(),
        // Unreachable for a valid key (visible ASCII is a subset of the sf-string alphabet);
        // escape by hand rather than panic.
        Err(_) => {
            quoted.push('"');
            for c in key.as_str().chars() {
                if c == '"' || c == '\\' {
                    quoted.push('\\');
                }
                quoted.push(c);
            }
            quoted.push('"');
        }
    }
    HeaderValue::from_str(&quoted).unwrap_or_else(|_| HeaderValue::from_static("\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(value: &[u8], forms: KeyForms) -> Result<IdempotencyKey, KeyHeaderError> {
        parse_key_header(&HeaderValue::from_bytes(value).unwrap(), forms)
    }

    #[test]
    fn strings_with_parameters_and_whitespace_parse() {
        for forms in [KeyForms::Lenient, KeyForms::Strict] {
            assert_eq!(parse(br#""k-1";v=1"#, forms).unwrap().as_str(), "k-1");
            assert_eq!(parse(br#"  "k-1"  "#, forms).unwrap().as_str(), "k-1");
        }
    }

    #[test]
    fn a_string_a_token_and_a_bare_value_name_one_key() {
        let uuid = "8e03978e-40d5-43e8-bc93-6894a57f9324";
        let quoted = parse(format!("\"{uuid}\"").as_bytes(), KeyForms::Strict).unwrap();
        assert_eq!(parse(uuid.as_bytes(), KeyForms::Lenient).unwrap(), quoted);
        assert_eq!(parse(format!("  {uuid}\t").as_bytes(), KeyForms::Lenient).unwrap(), quoted);
        assert_eq!(parse(b"k-1", KeyForms::Lenient).unwrap(), parse(br#""k-1""#, KeyForms::Strict).unwrap());
        // Taken whole: a bare value is not split at `;` or `,`.
        assert_eq!(parse(b"a;b,c", KeyForms::Lenient).unwrap().as_str(), "a;b,c");
        // The longest key in each spelling.
        let longest = "k".repeat(255);
        assert_eq!(parse(longest.as_bytes(), KeyForms::Lenient).unwrap().as_str(), longest);
    }

    #[test]
    fn everything_else_is_refused_with_what_to_send() {
        let strict = |v: &[u8]| parse(v, KeyForms::Strict);
        let lenient = |v: &[u8]| parse(v, KeyForms::Lenient);
        assert!(matches!(strict(b"k1"), Err(KeyHeaderError::NotAString { found: "token" })));
        assert!(matches!(strict(b"42"), Err(KeyHeaderError::NotAString { found: "integer" })));
        assert!(matches!(strict(b"8e03978e-40d5"), Err(KeyHeaderError::Syntax(_))));
        for bad in [strict(br#""a", "b""#), lenient(br#""a", "b""#), lenient(br#""unterminated"#)] {
            assert!(matches!(bad, Err(KeyHeaderError::Syntax(_))), "{bad:?}");
        }
        assert!(matches!(strict("\"caf\u{e9}\"".as_bytes()), Err(KeyHeaderError::Syntax(_))));
        assert!(matches!(lenient("caf\u{e9}".as_bytes()), Err(KeyHeaderError::Key(KeyError::InvalidByte { .. }))));
        assert!(matches!(
            lenient(&[b'a', 0xff]),
            Err(KeyHeaderError::Key(KeyError::InvalidByte { byte: 0xff, offset: 1, .. }))
        ));
        assert!(matches!(strict(br#""""#), Err(KeyHeaderError::Key(KeyError::Empty { .. }))));
        assert!(matches!(lenient(b"   "), Err(KeyHeaderError::Key(KeyError::Empty { .. }))));
        let long = "k".repeat(256);
        assert!(matches!(
            strict(format!("\"{long}\"").as_bytes()),
            Err(KeyHeaderError::Key(KeyError::TooLong { len: 256, .. }))
        ));
        assert!(matches!(lenient(long.as_bytes()), Err(KeyHeaderError::Key(KeyError::TooLong { len: 256, .. }))));
        assert!(matches!(lenient(b"a b"), Err(KeyHeaderError::Key(KeyError::InvalidByte { byte: b' ', .. }))));
        for error in [strict(b"k1"), strict(b"\"x"), lenient(b"a b")] {
            let message = error.unwrap_err().to_string();
            assert!(message.contains("send "), "{message}");
        }
    }

    #[test]
    fn every_valid_key_round_trips_through_the_header() {
        let all: String = (0x21u8..=0x7e).map(char::from).collect();
        for key in [all.as_str(), "\\", "\"", "a"] {
            let key = IdempotencyKey::new(key).unwrap();
            assert_eq!(parse_key_header(&key_header_value(&key), KeyForms::Strict).unwrap(), key);
            assert_eq!(parse_key_header(&key_header_value(&key), KeyForms::Lenient).unwrap(), key);
        }
    }
}
