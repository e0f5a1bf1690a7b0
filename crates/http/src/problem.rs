//! Refusals as RFC 9457 problem details (`application/problem+json`).
//!
//! # The `type` URI
//!
//! Every refusal's `type` is built from the core's stable [`ErrorCode`]: its
//! [slug](ErrorCode::slug) (`IDEMDB_KEY_MISMATCH` → `key-mismatch`) appended to a base. The
//! default base is the URN prefix `urn:idemdb:problem:`, which names the problem without
//! pretending to be a web page anyone hosts (`urn:idemdb:problem:key-mismatch`). A service that
//! documents its problems on its own site sets [`ProblemTypes::base`]
//! (`https://api.example.com/problems/` gives `https://api.example.com/problems/key-mismatch`).
//! The body also carries the code itself as the extension member `code` (`IDEMDB_KEY_MISMATCH`),
//! so clients can match on either.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use idemdb_core::ErrorCode;

/// The media type of every refusal.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The default base of problem `type` URIs.
pub use idemdb_core::DEFAULT_PROBLEM_BASE;

/// How problem `type` URIs are built: a base followed by the code's slug.
///
/// ```
/// use idemdb_core::ErrorCode;
/// use idemdb_http::ProblemTypes;
/// assert_eq!(ProblemTypes::default().uri(ErrorCode::KeyMismatch), "urn:idemdb:problem:key-mismatch");
/// let site = ProblemTypes::base("https://api.example.com/problems/");
/// assert_eq!(site.uri(ErrorCode::InProgress), "https://api.example.com/problems/in-progress");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProblemTypes {
    base: String,
}

impl Default for ProblemTypes {
    fn default() -> Self {
        ProblemTypes { base: DEFAULT_PROBLEM_BASE.to_string() }
    }
}

impl ProblemTypes {
    /// Types under `base` (used as given: end it with `/` or `:`).
    pub fn base(base: impl Into<String>) -> Self {
        ProblemTypes { base: base.into() }
    }

    /// The `type` URI of `code`.
    pub fn uri(&self, code: ErrorCode) -> String {
        format!("{}{}", self.base, code.slug())
    }
}

/// One refusal: a code, an HTTP status and a human-readable detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    pub(crate) code: ErrorCode,
    pub(crate) status: StatusCode,
    pub(crate) detail: String,
    pub(crate) retry_after: Option<Duration>,
}

impl Problem {
    pub(crate) fn new(code: ErrorCode, status: StatusCode, detail: impl Into<String>) -> Self {
        Problem { code, status, detail: detail.into(), retry_after: None }
    }

    pub(crate) fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// The refusal for a store that failed: 503 for what may pass (storage trouble, an
    /// unknown commit outcome, a busy or unreachable database), 500 otherwise.
    pub(crate) fn store_failed(code: ErrorCode) -> Self {
        let transient = code.is_transient() || code == ErrorCode::Closed;
        if transient {
            Problem::new(
                code,
                StatusCode::SERVICE_UNAVAILABLE,
                "the idempotency store is unavailable; retry with the same key",
            )
            .retry_after(Duration::from_secs(1))
        } else {
            Problem::new(code, StatusCode::INTERNAL_SERVER_ERROR, "the idempotency store failed")
        }
    }

    pub(crate) fn title(&self) -> &'static str {
        title(self.code)
    }

    /// The response: problem JSON, and `Retry-After` (whole seconds, at least 1) when set.
    pub(crate) fn into_response<B: From<Bytes>>(self, types: &ProblemTypes) -> Response<B> {
        let mut body = serde_json::json!({
            "type": types.uri(self.code),
            "title": self.title(),
            "status": self.status.as_u16(),
            "detail": self.detail,
            "code": self.code.as_str(),
        });
        let retry_seconds = self.retry_after.map(retry_after_seconds);
        if let (Some(seconds), Some(object)) = (retry_seconds, body.as_object_mut()) {
            object.insert("retry_after".into(), seconds.into());
        }
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let mut response = Response::new(B::from(Bytes::from(bytes)));
        *response.status_mut() = self.status;
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(seconds) = retry_seconds {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// `Retry-After` in whole seconds, rounded up, at least 1.
pub(crate) fn retry_after_seconds(after: Duration) -> u64 {
    let seconds = after.as_secs() + u64::from(after.subsec_nanos() > 0);
    seconds.max(1)
}

/// The fixed title of each refusal.
fn title(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::KeyMissing => "Idempotency-Key header required",
        ErrorCode::InvalidKey => "Invalid Idempotency-Key",
        ErrorCode::KeyMismatch => "Idempotency-Key reused with a different request",
        ErrorCode::InProgress => "A request with this Idempotency-Key is in progress",
        ErrorCode::NeedsReconciliation => "The outcome of the request with this Idempotency-Key is unknown",
        ErrorCode::Expired => "The stored response of this Idempotency-Key has expired",
        ErrorCode::TooLarge => "Request body too large",
        ErrorCode::InvalidRequest => "Request body cannot be canonicalised",
        ErrorCode::Unauthenticated => "No tenant for this request",
        ErrorCode::Storage | ErrorCode::Unavailable | ErrorCode::StoreBusy | ErrorCode::Closed => {
            "Idempotency store unavailable"
        }
        ErrorCode::CommitUnknown => "Idempotency store commit outcome unknown",
        ErrorCode::Corrupt | ErrorCode::NewerFormat => "Stored response unreadable",
        _ => "Idempotency layer error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_seconds(Duration::ZERO), 1);
        assert_eq!(retry_after_seconds(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_seconds(Duration::from_millis(1000)), 1);
        assert_eq!(retry_after_seconds(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after_seconds(Duration::from_secs(59)), 59);
    }

    #[test]
    fn problem_body_has_the_rfc_9457_members_and_the_code() {
        let problem =
            Problem::new(ErrorCode::InProgress, StatusCode::CONFLICT, "wait").retry_after(Duration::from_millis(2500));
        let response: Response<Bytes> = problem.into_response(&ProblemTypes::default());
        assert_eq!(response.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
        assert_eq!(response.headers()[header::RETRY_AFTER], "3");
        let body: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "type": "urn:idemdb:problem:in-progress",
                "title": "A request with this Idempotency-Key is in progress",
                "status": 409,
                "detail": "wait",
                "code": "IDEMDB_IN_PROGRESS",
                "retry_after": 3,
            })
        );
    }
}
