//! Serving the router with read timeouts: a client that sends its headers, or its body, too
//! slowly (a slowloris) loses its connection instead of holding it.
//!
//! * **Headers**: hyper's HTTP/1 `header_read_timeout` (with tokio's timer): the whole head
//!   must arrive within it, or the connection is closed.
//! * **Body**: a deadline ([`idemdb_http::DeadlineBody`]) from when the head has arrived: the
//!   whole body must arrive within it, however it is split (a per-chunk timeout let a client
//!   sending a byte every few seconds hold a request for ever). Reading the body fails after
//!   it, and the idempotency layer answers `408` before anything is reserved.
//!
//! A service on `idemdb-http` serving through plain `axum::serve` should set the same two
//! limits in its own server.
//!
//! **Shutdown drains.** When `shutdown` resolves the server stops accepting, asks every open
//! connection to close after the request it is serving (keep-alive connections close at once),
//! and waits — up to the drain limit — for those requests to finish: a payment waiting for its
//! charge gets its answer, as it would have without the signal. What is still running at the
//! limit is cut; its record stays reserved with its charge in the outbox, and the next process
//! dispatches that charge, so a retry gets the payment then (see the README, "Stopping").

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use idemdb_http::DeadlineBody;
use tokio::net::TcpListener;
use tower::ServiceExt;

/// The read timeouts of the example's server.
#[derive(Debug, Clone, Copy)]
pub struct ReadTimeouts {
    /// How long a request's head may take to arrive.
    pub headers: Duration,
    /// How long its body may take, all of it, from when the head has arrived.
    pub body: Duration,
}

impl Default for ReadTimeouts {
    /// 10 seconds for the headers, 30 for the body.
    fn default() -> Self {
        ReadTimeouts { headers: Duration::from_secs(10), body: Duration::from_secs(30) }
    }
}

/// How the drain went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Drained {
    /// Connections open when the server stopped accepting.
    pub connections: usize,
    /// Whether they all finished within the drain limit (`false`: the rest were cut).
    pub finished: bool,
}

/// Serves `router` on `listener` with `timeouts` until `shutdown` resolves, then drains: stops
/// accepting, lets the requests in progress finish (each connection closes after its current
/// request) for at most `drain`, and cuts what is left.
///
/// # Errors
/// None in practice: a failed accept is skipped.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    timeouts: ReadTimeouts,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) -> std::io::Result<Drained> {
    let connections = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
            () = &mut shutdown => break,
        };
        let body_deadline = timeouts.body;
        let service = router.clone().map_request(move |request: http::Request<Incoming>| {
            request.map(|body| Body::new(DeadlineBody::new(body, body_deadline)))
        });
        let service = TowerToHyperService::new(service);
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder.timer(TokioTimer::new()).header_read_timeout(timeouts.headers);
        // Above the service's own header limits, which answer 431 as a problem: hyper's own
        // answer past these is a bare status line (see `refusals`).
        builder.max_header_size(crate::HYPER_MAX_HEADER_BYTES).max_headers(crate::HYPER_MAX_HEADERS);
        let connection = connections.watch(builder.serve_connection(TokioIo::new(stream), service));
        // A connection's end (the client left, a timeout) is not the server's error.
        tokio::spawn(async move { drop(connection.await) });
    }
    drop(listener);
    let open = connections.count();
    if open > 0 {
        eprintln!("payments-example: draining {open} connection(s), at most {} s", drain.as_secs_f32());
    }
    let finished = tokio::time::timeout(drain, connections.shutdown()).await.is_ok();
    Ok(Drained { connections: open, finished })
}
