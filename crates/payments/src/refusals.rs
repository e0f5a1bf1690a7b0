//! Every refusal of the service is `application/problem+json` (RFC 9457): a fallback for
//! unknown paths, and a response mapping that turns what axum and hyper answer by themselves
//! (405 for a method a route does not have, 413 from a body limit, 400 from an extractor's
//! rejection) into a problem with the same status and headers.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;

use crate::payment::problem;

/// The longest piece of a plain-text refusal kept as the problem's `detail`.
const MAX_DETAIL_BYTES: usize = 512;

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
