//! The accept loop: HTTP/1.1 connections on hyper, with the limits a public server needs.
//!
//! axum's own `serve` takes no settings, so this is the same loop with them (mini-redis's
//! shape: a semaphore bounds connections, one signal starts shutdown):
//!
//! - at most `max_connections` connections are served at once; while all are taken the loop
//!   stops accepting and the kernel holds new ones in its queue;
//! - hyper's `header_read_timeout` closes a connection that has not sent a whole request head
//!   in `header_timeout`; hyper starts that clock whenever it waits for a head, so an idle
//!   kept-alive connection is closed after the same time;
//! - upgrades are served (`with_upgrades`), so `/agents/ws` can take its connection over; an
//!   upgraded connection leaves this loop's count (the WebSocket module keeps its own);
//! - on shutdown the listener closes, every connection is asked to finish its in-flight request
//!   and close (`graceful_shutdown`), and `serve` returns once they have.

use std::convert::Infallible;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tower_service::Service as _;

/// How connections are bounded.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionLimits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Time to send a request head (and to stay idle between kept-alive requests).
    pub header_timeout: Duration,
}

/// Serves `router` on `listener` until `shutdown` completes, then finishes in-flight requests.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let max_connections = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
    let permits = Arc::new(Semaphore::new(max_connections));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout).keep_alive(true);
    // Dropped when shutdown starts: every connection task watches for that.
    let (stopping, stop) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break, // the semaphore is never closed
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    accept_failed(&error).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let mut router = router.clone();
            async move {
                Ok::<_, Infallible>(router.call(request.map(Body::new)).await.unwrap_or_else(|never| match never {}))
            }
        });
        let connection = builder.serve_connection(TokioIo::new(stream), service).with_upgrades();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let mut connection = pin!(connection);
            tokio::select! {
                outcome = connection.as_mut() => {
                    if let Err(error) = outcome {
                        tracing::debug!(%error, "connection ended with an error");
                    }
                }
                _ = stop.changed() => {
                    connection.as_mut().graceful_shutdown();
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, "connection ended with an error while shutting down");
                    }
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    drop(stop);
    drop(stopping);
    // Every permit back means every connection task ended.
    let _ = permits.acquire_many(max_connections as u32).await;
    Ok(())
}

/// Accepting can fail for reasons that pass (a peer that reset before we took it) or that a
/// pause helps (out of file descriptors): log and go on, as axum's own loop does.
async fn accept_failed(error: &std::io::Error) {
    use std::io::ErrorKind;
    if matches!(error.kind(), ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::ConnectionRefused)
    {
        return;
    }
    tracing::error!(%error, "accepting a connection failed; pausing for a second");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
