//! The `Idempotency-Key` header: an RFC 8941 structured-field string, checked with the core's
//! key rules.

use http::HeaderValue;
use idemdb_core::{IdempotencyKey, KeyError};
use sfv::{BareItem, Item, Parser, StringRef, Version};

/// The header's name, as the IETF draft spells it.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The header a replayed response carries, with the value `true`.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

/// Why an `Idempotency-Key` header value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyHeaderError {
    /// The value is not a structured-field item (bad quoting, a non-ASCII byte, trailing
    /// characters, or the header sent more than once).
    #[error("Idempotency-Key is not a structured-field string: {0}")]
    Syntax(String),
    /// The value is an item of another type (a token, an integer): the draft asks for a
    /// string, `Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`.
    #[error("Idempotency-Key must be a quoted structured-field string, found a {found}")]
    NotAString {
        /// What was found (`token`, `integer`, ...).
        found: &'static str,
    },
    /// The string is not a valid key (empty, over 255 bytes, or with a space).
    #[error(transparent)]
    Key(#[from] KeyError),
}

impl KeyHeaderError {
    /// The stable code: always [`ErrorCode::InvalidKey`](idemdb_core::ErrorCode::InvalidKey).
    pub fn code(&self) -> idemdb_core::ErrorCode {
        idemdb_core::ErrorCode::InvalidKey
    }
}

idemdb_core::coded!(KeyHeaderError);

/// Parses an `Idempotency-Key` header value.
///
/// The value is an RFC 8941 item whose bare item is a string (parameters are allowed and
/// ignored, as the draft does not define any); the string must then pass the core's key rules
/// ([`IdempotencyKey::new`]: 1..=255 bytes of `0x21..=0x7E`). With `accept_bare`, a value that
/// does not start with `"` is also taken whole as the key (`Idempotency-Key: 8e03...`), for
/// clients that send keys unquoted as Stripe's do; a value that starts with `"` is always
/// parsed as a structured-field string.
///
/// ```
/// use http::HeaderValue;
/// use idemdb_http::parse_key_header;
///
/// let key = parse_key_header(&HeaderValue::from_static(r#""order-842""#), false)?;
/// assert_eq!(key.as_str(), "order-842");
/// // Escapes are undone: the key is `a"b`.
/// assert_eq!(parse_key_header(&HeaderValue::from_static(r#""a\"b""#), false)?.as_str(), "a\"b");
/// // Unquoted values are tokens, refused unless bare keys are accepted.
/// assert!(parse_key_header(&HeaderValue::from_static("order-842"), false).is_err());
/// assert_eq!(parse_key_header(&HeaderValue::from_static("order-842"), true)?.as_str(), "order-842");
/// // The core's rules apply after parsing: no empty key, no space.
/// assert!(parse_key_header(&HeaderValue::from_static(r#""""#), false).is_err());
/// assert!(parse_key_header(&HeaderValue::from_static(r#""a b""#), false).is_err());
/// # Ok::<(), idemdb_http::KeyHeaderError>(())
/// ```
///
/// # Errors
/// [`KeyHeaderError`] for a value that is not a string item, or a string that is not a key.
pub fn parse_key_header(value: &HeaderValue, accept_bare: bool) -> Result<IdempotencyKey, KeyHeaderError> {
    let bytes = value.as_bytes();
    if accept_bare && bytes.first() != Some(&b'"') {
        let text = std::str::from_utf8(bytes).map_err(|_| KeyHeaderError::Syntax("not ASCII".into()))?;
        return Ok(IdempotencyKey::new(text.trim_matches(|c| c == ' ' || c == '\t'))?);
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
/// assert_eq!(idemdb_http::parse_key_header(&value, false)?, key);
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

    fn parse(value: &[u8]) -> Result<IdempotencyKey, KeyHeaderError> {
        parse_key_header(&HeaderValue::from_bytes(value).unwrap(), false)
    }

    #[test]
    fn strings_with_parameters_and_whitespace_parse() {
        assert_eq!(parse(br#""k-1";v=1"#).unwrap().as_str(), "k-1");
        assert_eq!(parse(br#"  "k-1"  "#).unwrap().as_str(), "k-1");
    }

    #[test]
    fn everything_else_is_refused_with_a_reason() {
        assert!(matches!(parse(b"k1"), Err(KeyHeaderError::NotAString { found: "token" })));
        assert!(matches!(parse(b"42"), Err(KeyHeaderError::NotAString { found: "integer" })));
        assert!(matches!(parse(br#""a", "b""#), Err(KeyHeaderError::Syntax(_))));
        assert!(matches!(parse(br#""unterminated"#), Err(KeyHeaderError::Syntax(_))));
        assert!(matches!(parse("\"caf\u{e9}\"".as_bytes()), Err(KeyHeaderError::Syntax(_))));
        assert!(matches!(parse(br#""""#), Err(KeyHeaderError::Key(KeyError::Empty { .. }))));
        let long = format!("\"{}\"", "k".repeat(256));
        assert!(matches!(parse(long.as_bytes()), Err(KeyHeaderError::Key(KeyError::TooLong { len: 256, .. }))));
        assert!(matches!(parse(br#""a b""#), Err(KeyHeaderError::Key(KeyError::InvalidByte { byte: b' ', .. }))));
        // Bare values still follow the key rules.
        let bare = |v: &[u8]| parse_key_header(&HeaderValue::from_bytes(v).unwrap(), true);
        assert!(bare(b"a b").is_err());
        assert!(bare(&[0xc3, 0xa9]).is_err());
        assert_eq!(bare(br#""quoted""#).unwrap().as_str(), "quoted");
    }

    #[test]
    fn every_valid_key_round_trips_through_the_header() {
        let all: String = (0x21u8..=0x7e).map(char::from).collect();
        for key in [all.as_str(), "\\", "\"", "a"] {
            let key = IdempotencyKey::new(key).unwrap();
            assert_eq!(parse_key_header(&key_header_value(&key), false).unwrap(), key);
        }
    }
}
