//! The connection layer under the routes: accepting (at most `max_connections` at once), hyper's
//! HTTP/1.1 with a deadline for each request head (which is also the idle keep-alive limit: hyper
//! starts the clock when it waits for a head), hyper's own refusals given OpenAI's JSON body, and
//! a shutdown bounded in time whatever the clients do.
//!
//! hyper answers a request it cannot parse (a garbage request line, a URI or a head too long)
//! itself, with an empty body and no hook to change it; [`JsonRefusals`] rewrites exactly those
//! answers as they are written (they are the only error answers without a body: every answer of
//! the routes has one, see `routes::json_errors`).

use std::future::Future;
use std::io;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tower::ServiceExt;

use crate::error::ApiError;

/// Connection limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// A request head must arrive whole within this, and an idle keep-alive connection is
    /// closed after it.
    pub header_timeout: Duration,
    pub max_connections: usize,
}

/// The connections being served after the listener stopped.
pub(crate) struct Serving {
    connections: JoinSet<()>,
    close: watch::Sender<bool>,
}

/// Serves `app` on `listeners` (one per address, at least one) until `stop` resolves; then stops
/// accepting, asks every connection to close after its current answer (idle ones close at once)
/// and returns the rest.
pub(crate) async fn serve(
    listeners: Vec<TcpListener>,
    app: axum::Router,
    limits: Limits,
    stop: impl Future<Output = ()>,
) -> Serving {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (close, closing) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut stop = pin!(stop);
    loop {
        // Past the limit, connections wait in the kernel's backlog until one ends.
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut stop => break,
        };
        let stream = tokio::select! {
            accepted = accept_any(&listeners) => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    // Out of file descriptors and the like: wait rather than spin.
                    tracing::warn!(%err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let closing = closing.clone();
        connections.spawn(async move {
            let _permit = permit;
            connection(stream, app, limits, closing).await;
        });
        while connections.try_join_next().is_some() {}
    }
    drop(listeners);
    let _ = close.send(true);
    Serving { connections, close }
}

/// The next connection on any of `listeners`.
async fn accept_any(
    listeners: &[TcpListener],
) -> std::io::Result<(TcpStream, std::net::SocketAddr)> {
    if listeners.is_empty() {
        return std::future::pending().await;
    }
    let accepts = listeners.iter().map(|l| Box::pin(l.accept()));
    futures_util::future::select_all(accepts).await.0
}

impl Serving {
    /// Waits up to `bound` for the connections to end, then drops those left (a client that
    /// never finishes its request, a stream nobody reads).
    pub(crate) async fn finish(mut self, bound: Duration) {
        let all = async { while self.connections.join_next().await.is_some() {} };
        if tokio::time::timeout(bound, all).await.is_err() {
            tracing::info!(
                left = self.connections.len(),
                "closing the connections still open"
            );
            self.connections.shutdown().await;
        }
        drop(self.close);
    }

    /// Waits until every connection ended or `bound` passed; true if none is left.
    pub(crate) async fn drained(&mut self, bound: Duration) -> bool {
        let all = async { while self.connections.join_next().await.is_some() {} };
        tokio::time::timeout(bound, all).await.is_ok()
    }
}

async fn connection(
    stream: TcpStream,
    app: axum::Router,
    limits: Limits,
    mut closing: watch::Receiver<bool>,
) {
    let service =
        TowerToHyperService::new(app.map_request(|req: Request<Incoming>| req.map(Body::new)));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        // Header names as llama-server (cpp-httplib) writes them: clients that read the headers
        // into a plain dictionary (its own test suite does) look them up in that case.
        .title_case_headers(true);
    let conn = builder.serve_connection(TokioIo::new(JsonRefusals::new(stream)), service);
    let mut conn = pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = closing.wait_for(|closing| *closing) => conn.as_mut().graceful_shutdown(),
    }
    let _ = conn.await;
}

/// The JSON answer for a status hyper sends on its own (after a request it could not parse).
fn refusal_body(status: u16) -> Option<ApiError> {
    match status {
        400 => Some(ApiError::MalformedHttp),
        414 => Some(ApiError::UriTooLong),
        431 => Some(ApiError::HeadersTooLarge),
        _ => None,
    }
}

/// A connection's socket that gives hyper's own empty-bodied refusals a JSON body. It reports
/// itself as not vectored, so hyper writes each answer's head as one buffer.
pub(crate) struct JsonRefusals<S> {
    inner: S,
    /// The rewritten answer still to be written, and how much of it is.
    pending: Option<(Vec<u8>, usize)>,
}

impl<S> JsonRefusals<S> {
    pub(crate) fn new(inner: S) -> JsonRefusals<S> {
        JsonRefusals {
            inner,
            pending: None,
        }
    }
}

/// If `buf` starts with one of hyper's own refusals (an error status with `content-length: 0`,
/// the name in any case: the server writes header names title-cased), its length and the answer
/// to send instead.
fn rewrite(buf: &[u8]) -> Option<(usize, Vec<u8>)> {
    const EMPTY: &[u8] = b"\r\ncontent-length: 0\r\n";
    let rest = buf.strip_prefix(b"HTTP/1.1 ")?;
    let status: u16 = std::str::from_utf8(rest.get(..3)?).ok()?.parse().ok()?;
    let error = refusal_body(status)?;
    let head_len = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = &buf[..head_len];
    let at = head
        .windows(EMPTY.len())
        .position(|w| w.eq_ignore_ascii_case(EMPTY))?;
    let body = error.body().to_string();
    let mut out = Vec::with_capacity(head_len + body.len() + 64);
    out.extend_from_slice(&head[..at]);
    out.extend_from_slice(
        format!(
            "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(&head[at + EMPTY.len()..]);
    out.extend_from_slice(body.as_bytes());
    Some((head_len, out))
}

impl<S: AsyncWrite + Unpin> JsonRefusals<S> {
    /// Writes what is left of a rewritten answer.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, done)) = &mut self.pending {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*done..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *done += n;
            if *done == bytes.len() {
                self.pending = None;
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for JsonRefusals<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for JsonRefusals<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        if let Some((consumed, answer)) = rewrite(buf) {
            self.pending = Some((answer, 0));
            // Counted as written; the rewritten bytes go out here or at the next flush.
            let _ = self.poll_pending(cx)?;
            return Poll::Ready(Ok(consumed));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hyper_refusals_are_rewritten() {
        let hyper_431 =
            b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nDate: x\r\n\r\n";
        let (consumed, out) = rewrite(hyper_431).expect("rewritten");
        assert_eq!(consumed, hyper_431.len());
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 431 "), "{head}");
        assert!(head.contains("\r\nDate: x"), "{head}");
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(length, body.len());
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json, ApiError::HeadersTooLarge.body());
        // Answers with a body, and statuses hyper does not send itself, pass unchanged.
        assert!(rewrite(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 12\r\n\r\n{}").is_none());
        assert!(rewrite(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n").is_none());
        assert!(rewrite(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_none());
    }
}
