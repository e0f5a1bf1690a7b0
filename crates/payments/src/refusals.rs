//! Every refusal of the service is `application/problem+json` (RFC 9457): a fallback for
//! unknown paths, the service's own limits on a request's header section (431), and a
//! response mapping that turns what axum answers by itself (405 for a method a route does not
//! have, 413 from a body limit, 400 from an extractor's rejection) into a problem with the
//! same status and headers.
//!
//! **The bound:** what hyper refuses while it parses (a request line or header that is not
//! HTTP: 400; a header section over hyper's own limit: 431; a URI too long: 414) never
//! reaches the service: hyper writes a bare status line and closes the connection, and
//! offers no way to change that answer. The service keeps hyper's limits well above its own
//! ([`HYPER_MAX_HEADER_BYTES`], [`HYPER_MAX_HEADERS`]), so a request with too many or too
//! large headers gets this module's 431 problem unless it is past hyper's limits too.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;

use crate::payment::problem;

/// The longest piece of a plain-text refusal kept as the problem's `detail`.
const MAX_DETAIL_BYTES: usize = 512;

/// The most bytes of header fields (names and values) a request may carry: past it, 431
/// `header-fields-too-large`, a problem.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// The most header fields a request may carry: past it, the same 431.
pub const MAX_HEADERS: usize = 64;
/// hyper's limit on a request's head (the request line and the headers, in bytes), set by
/// [`serve`](crate::serve): past it hyper answers a bare 431 itself. Above
/// [`MAX_HEADER_BYTES`], so the service answers first.
pub const HYPER_MAX_HEADER_BYTES: usize = 256 * 1024;
/// hyper's limit on a request's header fields, set by [`serve`](crate::serve): above
/// [`MAX_HEADERS`] for the same reason.
pub const HYPER_MAX_HEADERS: usize = 256;

/// Refuses a request whose header section is over [`MAX_HEADER_BYTES`] or [`MAX_HEADERS`]
/// with 431, before anything else runs.
pub(crate) async fn header_limits(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let headers = request.headers();
    let bytes: usize = headers.iter().map(|(name, value)| name.as_str().len() + value.len()).sum();
    if headers.len() > MAX_HEADERS || bytes > MAX_HEADER_BYTES {
        let detail = format!(
            "the request has {} header fields of {bytes} bytes; this service takes at most {MAX_HEADERS} fields and \
             {MAX_HEADER_BYTES} bytes",
            headers.len()
        );
        return problem(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "header-fields-too-large", &detail);
    }
    next.run(request).await
}

/// The answer to a path no route has: 404 `not-found`.
pub(crate) async fn not_found() -> Response {
    problem(StatusCode::NOT_FOUND, "not-found", "no route has this path")
}

/// Turns a refusal (status 400 or above) that is not a problem into one, keeping its status
/// and headers; its text (cut to 512 bytes) becomes the `detail`. Problems and successes pass
/// unchanged.
pub(crate) async fn as_problem(response: Response) -> Response {
    let status = response.status();
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|media| media.starts_with("application/problem+json"));
    if status.as_u16() < 400 || is_problem {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = match http_body_util::Limited::new(body, 64 * 1024).collect().await {
        Ok(collected) => String::from_utf8_lossy(&collected.to_bytes()).into_owned(),
        Err(_) => String::new(),
    };
    let mut detail: String = text.trim().chars().take(MAX_DETAIL_BYTES).collect();
    if detail.is_empty() {
        detail = status.canonical_reason().unwrap_or("refused").to_string();
    }
    let slug = status.canonical_reason().unwrap_or("refused").to_ascii_lowercase().replace([' ', '\''], "-");
    let mapped = problem(status, &slug, &detail);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    let (_, body) = mapped.into_parts();
    Response::from_parts(parts, Body::new(body)).into_response()
}
