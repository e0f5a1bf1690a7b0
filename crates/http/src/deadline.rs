//! A deadline for reading a request's body: the whole body must arrive within it, however it is
//! split into chunks.
//!
//! `tower_http::timeout::RequestBodyTimeoutLayer` waits at most its timeout *for each frame*: a
//! client that sends a byte every few seconds keeps a request (and a connection) open for ever.
//! A [`DeadlineBody`] starts one timer when it is made — wrap the body where the server hands
//! the request to the service — and fails the body's next read once it has run out. The idempotency layer answers such a request `408
//! Request Timeout` (problem `invalid-request`) before anything is reserved, so a retry with the
//! same key is safe; a handler reading the body itself sees the error.
//!
//! ```
//! use std::time::Duration;
//! use axum::body::Body;
//! use idemdb_http::DeadlineBody;
//! use tower::ServiceExt;
//! // Served with hyper: each request's body, as hyper hands it over, must arrive within 30 s.
//! let service = axum::Router::new()
//!     .map_request(|request: http::Request<Body>| request.map(|body| Body::new(DeadlineBody::new(body, Duration::from_secs(30)))));
//! # drop(service);
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use tokio::time::Sleep;

/// The error a [`DeadlineBody`] returns once its deadline has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyDeadlineElapsed {
    /// The deadline the body missed, from when the request reached the service.
    pub after: Duration,
}

impl std::fmt::Display for BodyDeadlineElapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the request body did not arrive within {} ms", self.after.as_millis())
    }
}

impl std::error::Error for BodyDeadlineElapsed {}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

pin_project_lite::pin_project! {
    /// A request body that fails with [`BodyDeadlineElapsed`] once its deadline has passed.
    pub struct DeadlineBody<B> {
        #[pin]
        inner: B,
        #[pin]
        deadline: Sleep,
        after: Duration,
    }
}

impl<B> DeadlineBody<B> {
    /// `inner`, which must arrive whole within `after` from now.
    pub fn new(inner: B, after: Duration) -> Self {
        DeadlineBody { inner, deadline: tokio::time::sleep(after), after }
    }
}

impl<B> Body for DeadlineBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        // The body first: a frame that is ready is taken even at the deadline's instant.
        if let Poll::Ready(frame) = this.inner.poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        match this.deadline.poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyDeadlineElapsed { after: *this.after })))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Whether a body read failed because its deadline passed (the error, or one it wraps).
pub(crate) fn is_deadline(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if error.is::<BodyDeadlineElapsed>() {
            return true;
        }
        current = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A body of `chunks` one-byte frames, one every `every`.
    struct Trickle {
        left: usize,
        every: Duration,
        next: Pin<Box<Sleep>>,
    }

    impl Trickle {
        fn new(chunks: usize, every: Duration) -> Self {
            Trickle { left: chunks, every, next: Box::pin(tokio::time::sleep(every)) }
        }
    }

    impl Body for Trickle {
        type Data = bytes::Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<bytes::Bytes>, Self::Error>>> {
            if self.left == 0 {
                return Poll::Ready(None);
            }
            match self.next.as_mut().poll(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(()) => {
                    self.left -= 1;
                    let every = self.every;
                    self.next.as_mut().reset(tokio::time::Instant::now() + every);
                    Poll::Ready(Some(Ok(Frame::data(bytes::Bytes::from_static(b"x")))))
                }
            }
        }
    }

    /// A byte every 20 ms, 50 of them (1 s in all), misses a 100 ms deadline although no single
    /// wait comes near it (the per-frame timeout it replaces never fired on such a body).
    #[tokio::test(start_paused = true)]
    async fn a_body_trickling_in_misses_its_deadline() {
        let body = DeadlineBody::new(Trickle::new(50, Duration::from_millis(20)), Duration::from_millis(100));
        let Err(error) = body.collect().await else { panic!("the deadline passed") };
        assert!(is_deadline(error.as_ref()), "{error}");
        assert_eq!(error.to_string(), "the request body did not arrive within 100 ms");
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_arrives_in_time_is_read_whole() {
        let body = DeadlineBody::new(Trickle::new(4, Duration::from_millis(20)), Duration::from_millis(100));
        let Ok(collected) = body.collect().await else { panic!("read in time") };
        assert_eq!(collected.to_bytes().as_ref(), b"xxxx");
    }
}
