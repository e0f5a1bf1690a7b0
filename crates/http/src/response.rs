//! The stored form of an HTTP response: what the layer completes a record with and replays.
//!
//! # Byte layout (version 1)
//!
//! ```text
//! magic   b"IHR"                      3 bytes
//! version 0x01                        1 byte
//! status  u16 big-endian              2 bytes
//! count   u16 big-endian              2 bytes, number of headers
//! count × ( name_len u8 · name (lower-case) · value_len u32 BE · value )
//! body    every remaining byte, as sent
//! ```
//!
//! Only headers on the operation's allow-list are stored (in the order the response had them);
//! the body is stored byte for byte. A record completed by other code (a reconcile with a raw
//! body) does not start with the magic and is refused when replayed, so reconcile HTTP records
//! with [`StoredResponse::encode`].

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

use crate::key::IDEMPOTENT_REPLAYED;

const MAGIC: &[u8; 3] = b"IHR";
/// Format version of stored responses.
pub const RESPONSE_FORMAT: u8 = 1;

/// Headers replayed by default: those that describe the body or point at what was created.
/// `Set-Cookie`, `Date`, hop-by-hop and tracing headers are never among them.
pub const DEFAULT_REPLAY_HEADERS: &[&str] =
    &["content-type", "content-language", "content-location", "location", "etag", "last-modified", "link"];

/// A stored response did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResponseDecodeError {
    /// The bytes do not start with the stored-response magic (`IHR`).
    #[error("stored result is not an HTTP response written by this layer")]
    NotAResponse,
    /// The version byte is newer than this build reads.
    #[error("stored response has format {found}; this build reads {RESPONSE_FORMAT}: written by a newer version")]
    NewerFormat {
        /// The version found.
        found: u8,
    },
    /// The bytes end early, or a status, name or value is invalid.
    #[error("stored response is malformed: {0}")]
    Malformed(&'static str),
}

impl ResponseDecodeError {
    /// The stable code: [`ErrorCode::Corrupt`](idemdb_core::ErrorCode::Corrupt), or
    /// [`ErrorCode::NewerFormat`](idemdb_core::ErrorCode::NewerFormat).
    pub fn code(&self) -> idemdb_core::ErrorCode {
        match self {
            ResponseDecodeError::NewerFormat { .. } => idemdb_core::ErrorCode::NewerFormat,
            ResponseDecodeError::NotAResponse | ResponseDecodeError::Malformed(_) => idemdb_core::ErrorCode::Corrupt,
        }
    }
}

idemdb_core::coded!(ResponseDecodeError);

/// A response to store could not be made from the parts given ([`StoredResponse::build`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResponseBuildError {
    /// The status is not from 100 to 999.
    #[error("{0} is not an HTTP status")]
    Status(u16),
    /// A header value has bytes a header may not carry (a line break, a control character).
    #[error("the {0} header value is not a valid header value")]
    HeaderValue(&'static str),
}

impl ResponseBuildError {
    /// The stable code: [`ErrorCode::InvalidRequest`](idemdb_core::ErrorCode::InvalidRequest).
    pub fn code(&self) -> idemdb_core::ErrorCode {
        idemdb_core::ErrorCode::InvalidRequest
    }
}

idemdb_core::coded!(ResponseBuildError);

/// A response as the layer stores it: status, allow-listed headers and the body, byte for byte.
///
/// ```
/// use http::{HeaderMap, StatusCode, header};
/// use idemdb_http::StoredResponse;
///
/// let mut headers = HeaderMap::new();
/// headers.insert(header::CONTENT_TYPE, "application/json".parse()?);
/// headers.insert(header::SET_COOKIE, "session=1".parse()?);
/// let stored = StoredResponse::new(StatusCode::CREATED, &headers, &["content-type"], &b"{\"id\":1}"[..]);
/// let bytes = stored.encode();
/// let back = StoredResponse::decode(&bytes)?;
/// assert_eq!(back, stored);
/// assert_eq!(back.headers().len(), 1, "set-cookie is not on the allow-list");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    status: StatusCode,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
}

impl StoredResponse {
    /// The stored form of a response: `headers` filtered by `allow` (names compared
    /// case-insensitively), the body as given.
    pub fn new<N: AsRef<str>>(status: StatusCode, headers: &HeaderMap, allow: &[N], body: impl Into<Bytes>) -> Self {
        let headers = headers
            .iter()
            .filter(|(name, _)| allow.iter().any(|allowed| allowed.as_ref().eq_ignore_ascii_case(name.as_str())))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        StoredResponse { status, headers, body: body.into() }
    }

    /// A response made of a status, a `Content-Type`, an optional `Location` and a body: what
    /// code other than the layer (an operator's reconciliation, a dispatcher) completes a
    /// record with, so that the layer replays it.
    ///
    /// ```
    /// use idemdb_http::StoredResponse;
    ///
    /// let stored = StoredResponse::build(201, "application/json", Some("/v1/payments/p1"), &b"{}"[..])?;
    /// let back = StoredResponse::decode(&stored.encode())?;
    /// assert_eq!((back.status().as_u16(), back.headers().len()), (201, 2));
    /// assert!(StoredResponse::build(201, "text/plain\n", None, &b""[..]).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`ResponseBuildError`] for a status outside 100..=999 or a header value with bytes a
    /// header may not carry.
    pub fn build(
        status: u16,
        content_type: &str,
        location: Option<&str>,
        body: impl Into<Bytes>,
    ) -> Result<StoredResponse, ResponseBuildError> {
        let status = StatusCode::from_u16(status).map_err(|_| ResponseBuildError::Status(status))?;
        let mut headers = vec![(
            http::header::CONTENT_TYPE,
            HeaderValue::from_str(content_type).map_err(|_| ResponseBuildError::HeaderValue("content-type"))?,
        )];
        if let Some(location) = location {
            let value = HeaderValue::from_str(location).map_err(|_| ResponseBuildError::HeaderValue("location"))?;
            headers.push((http::header::LOCATION, value));
        }
        Ok(StoredResponse { status, headers, body: body.into() })
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stored headers, in the response's order.
    pub fn headers(&self) -> &[(HeaderName, HeaderValue)] {
        &self.headers
    }

    /// The body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The bytes to complete a record with (see the module docs for the layout).
    pub fn encode(&self) -> Vec<u8> {
        let headers_len: usize = self.headers.iter().map(|(n, v)| 5 + n.as_str().len() + v.len()).sum();
        let mut out = Vec::with_capacity(8 + headers_len + self.body.len());
        out.extend_from_slice(MAGIC);
        out.push(RESPONSE_FORMAT);
        out.extend_from_slice(&self.status.as_u16().to_be_bytes());
        // Header names are at most 255 bytes here and a response keeps at most 65,535 of
        // them; anything beyond is not stored (no allow-list names such a header).
        let kept: Vec<&(HeaderName, HeaderValue)> = self
            .headers
            .iter()
            .filter(|(n, v)| n.as_str().len() <= usize::from(u8::MAX) && u32::try_from(v.len()).is_ok())
            .take(usize::from(u16::MAX))
            .collect();
        out.extend_from_slice(&u16::try_from(kept.len()).unwrap_or(u16::MAX).to_be_bytes());
        for (name, value) in kept {
            out.push(u8::try_from(name.as_str().len()).unwrap_or(u8::MAX));
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(&u32::try_from(value.len()).unwrap_or(u32::MAX).to_be_bytes());
            out.extend_from_slice(value.as_bytes());
        }
        out.extend_from_slice(&self.body);
        out
    }

    /// Reads bytes written by [`StoredResponse::encode`].
    ///
    /// # Errors
    /// [`ResponseDecodeError`] for bytes of another kind, a newer version or a malformed value.
    pub fn decode(bytes: &[u8]) -> Result<Self, ResponseDecodeError> {
        let mut reader = Reader { bytes, at: 0 };
        if reader.take(3).ok() != Some(&MAGIC[..]) {
            return Err(ResponseDecodeError::NotAResponse);
        }
        let version = reader.u8()?;
        if version > RESPONSE_FORMAT {
            return Err(ResponseDecodeError::NewerFormat { found: version });
        }
        if version != RESPONSE_FORMAT {
            return Err(ResponseDecodeError::Malformed("unknown version"));
        }
        let status = StatusCode::from_u16(reader.u16()?).map_err(|_| ResponseDecodeError::Malformed("status"))?;
        let count = reader.u16()?;
        let mut headers = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            let name_len = usize::from(reader.u8()?);
            let name = HeaderName::from_bytes(reader.take(name_len)?)
                .map_err(|_| ResponseDecodeError::Malformed("header name"))?;
            let value_len = usize::try_from(reader.u32()?).map_err(|_| ResponseDecodeError::Malformed("length"))?;
            let value = HeaderValue::from_bytes(reader.take(value_len)?)
                .map_err(|_| ResponseDecodeError::Malformed("header value"))?;
            headers.push((name, value));
        }
        let body = Bytes::copy_from_slice(&bytes[reader.at..]);
        Ok(StoredResponse { status, headers, body })
    }

    /// The response to send: the stored status, headers and body; with `replayed`, also
    /// `Idempotent-Replayed: true`.
    pub fn into_response<B: From<Bytes>>(self, replayed: bool) -> Response<B> {
        let mut response = Response::new(B::from(self.body));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        for (name, value) in self.headers {
            headers.append(name, value);
        }
        if replayed {
            headers.insert(HeaderName::from_static(IDEMPOTENT_REPLAYED), HeaderValue::from_static("true"));
        }
        response
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], ResponseDecodeError> {
        let end = self.at.checked_add(len).ok_or(ResponseDecodeError::Malformed("length"))?;
        let slice = self.bytes.get(self.at..end).ok_or(ResponseDecodeError::Malformed("ends early"))?;
        self.at = end;
        Ok(slice)
    }

    fn u8(&mut self) -> Result<u8, ResponseDecodeError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, ResponseDecodeError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, ResponseDecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_version_1() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        let stored = StoredResponse::new(StatusCode::CREATED, &headers, DEFAULT_REPLAY_HEADERS, &b"ok"[..]);
        let hex: String = stored.encode().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            concat!(
                "494852", // "IHR"
                "01",     // version
                "00c9",   // 201
                "0001",   // one header
                "0c",
                "636f6e74656e742d74797065", // "content-type"
                "0000000a",
                "746578742f706c61696e", // "text/plain"
                "6f6b"                  // body "ok"
            )
        );
    }

    #[test]
    fn bad_bytes_are_typed_errors() {
        assert_eq!(StoredResponse::decode(b"raw result"), Err(ResponseDecodeError::NotAResponse));
        assert_eq!(StoredResponse::decode(b"IHR\x02"), Err(ResponseDecodeError::NewerFormat { found: 2 }));
        assert!(matches!(StoredResponse::decode(b"IHR\x01\x00"), Err(ResponseDecodeError::Malformed(_))));
        assert!(matches!(StoredResponse::decode(b"IHR\x01\x03\xe8\x00\x00"), Err(ResponseDecodeError::Malformed(_))));
        assert!(matches!(
            StoredResponse::decode(b"IHR\x01\x00\xc8\x00\x01\x05abc"),
            Err(ResponseDecodeError::Malformed(_))
        ));
        // A prefix cut inside the head is refused; one cut inside the body is a shorter body.
        let mut headers = HeaderMap::new();
        headers.insert("location", HeaderValue::from_static("/v1/payments/1"));
        let bytes = StoredResponse::new(StatusCode::OK, &headers, &["location"], &b"body"[..]).encode();
        let body_at = bytes.len() - 4;
        for end in 0..body_at {
            assert!(StoredResponse::decode(&bytes[..end]).is_err(), "prefix of {end} bytes");
        }
        for end in body_at..=bytes.len() {
            assert_eq!(StoredResponse::decode(&bytes[..end]).unwrap().body().len(), end - body_at);
        }
    }
}
