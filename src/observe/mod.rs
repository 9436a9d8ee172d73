//! The reuse observer: [`ObserveConnector`], a connector wrapper that tags each connection it
//! opens, so every response tells whether it came on a new or a reused
//! connection and how long that connection took to set up; and, on HTTP/1,
//! watches each connection's idle time, so that a pooled connection retires
//! before its server's idle timeout and the origin learns that timeout
//! (the rules are `keepalive.rs`'s).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use http::{Extensions, Uri};
use hyper::rt::{Read, ReadBuf, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::keepalive::IdleTimeout;
use crate::origin::Origin;
use crate::stats::DrainStats;

mod idle;
pub(crate) use idle::Connection1;
use idle::{ConnIdle, retires};

/// Which connection a response came on; inserted into every response's
/// extensions by [`DrainOnDrop`] when the client's connector is wrapped in an
/// [`ObserveConnector`].
///
/// ```
/// # fn check(res: &http::Response<()>) {
/// use drain_on_drop::ConnectionReuse;
///
/// if let Some(conn) = res.extensions().get::<ConnectionReuse>() {
///     println!("connection #{} reused: {}, set up in {:?}", conn.id, conn.reused, conn.setup_time);
/// }
/// # }
/// ```
///
/// [`DrainOnDrop`]: crate::DrainOnDrop
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionReuse {
    /// Number of the connection within its observer, from 1.
    pub id: u64,
    /// `false` for the first response on the connection, `true` after.
    pub reused: bool,
    /// Responses the connection carried before this one.
    pub previous_responses: u64,
    /// Time the wrapped connector took to open the connection (TCP, plus TLS
    /// when the wrapped connector does TLS).
    pub setup_time: Duration,
}

/// What hyper-util copies into each response's extensions (private type, so
/// nobody else can forge or read it): the connection, and which of its
/// requests the response answers.
pub(crate) struct ConnectionTag {
    inner: Arc<TagInner>,
    /// Requests started on the connection when hyper-util copied the tag
    /// into the response: hyper-util does so (`Connected`'s extras, set on
    /// the response) before it gives the connection back to its pool, so
    /// no later request has started: this is the response's request.
    request: u32,
}

impl Clone for ConnectionTag {
    fn clone(&self) -> Self {
        ConnectionTag { inner: self.inner.clone(), request: self.inner.idle.sent.load(Ordering::Acquire) }
    }
}

struct TagInner {
    id: u64,
    setup_time: Duration,
    responses: AtomicU64,
    idle: ConnIdle,
}

impl ConnectionTag {
    /// Counts one more response on the connection and describes it; the
    /// tag goes on with the response, for [`ConnectionTag::http1`].
    pub(crate) fn take(extensions: &mut Extensions) -> Option<(ConnectionReuse, ConnectionTag)> {
        let tag = extensions.remove::<ConnectionTag>()?;
        let previous = tag.inner.responses.fetch_add(1, Ordering::Relaxed);
        let reuse = ConnectionReuse {
            id: tag.inner.id,
            reused: previous > 0,
            previous_responses: previous,
            setup_time: tag.inner.setup_time,
        };
        extensions.insert(reuse);
        Some((reuse, tag))
    }

    /// An HTTP/1 response's head came on this connection, from `origin`,
    /// through a layer whose setting is `setting`, and its server said
    /// `said`: the connection keeps its origin (the first time), the origin
    /// what was said, and a connection the server takes no further
    /// request on retires when idle.
    pub(crate) fn http1(&self, origin: &Arc<Origin>, setting: IdleTimeout, said: crate::keepalive::Said) {
        let idle = &self.inner.idle;
        if idle.origin.get().is_none() {
            let _ = idle.origin.set((origin.clone(), setting));
        }
        if let Some(timeout) = said.timeout {
            origin.idle().said(timeout);
        }
        if said.last_request() {
            idle.last_request.store(true, Ordering::Relaxed);
        }
    }

    /// The connection, and the request the response answers, apart: a
    /// response keeps them in two fields, the request number where its
    /// context has room to spare.
    pub(crate) fn into_parts(self) -> (Connection1, u32) {
        (Connection1(self.inner), self.request)
    }
}

/// Wraps a hyper-util connector (such as `HttpConnector`, or a TLS connector
/// built on it) to count the connections it opens into a [`DrainStats`] and
/// to tag each one, so that [`DrainOnDrop`] can report per response whether
/// the connection was new or reused ([`ConnectionReuse`]) and count
/// `requests`, `reused` and `connections_opened`.
///
/// Build it with [`DrainOnDropLayer::observe`] so its counters land in the
/// layer's stats (shown in [`DrainStats::reuse`]).
///
/// With TLS, the wrapping order decides what
/// [`ConnectionReuse::setup_time`] measures: around the TLS connector
/// (`layer.observe(https_connector)`) it is TCP plus the TLS handshake, the
/// real cost of a new connection (what adaptive mode wants); inside it
/// (`HttpsConnectorBuilder::new()…wrap_connector(layer.observe(http))`) it is
/// the TCP connect only (on loopback 4.3 ms against 0.49 ms). Both tag the
/// connection, so reuse is reported either way.
///
/// ```
/// use drain_on_drop::DrainOnDropLayer;
/// use http_body_util::Empty;
/// use hyper::body::Bytes;
/// use hyper_util::client::legacy::{Client, connect::HttpConnector};
/// use hyper_util::rt::TokioExecutor;
/// use tower::ServiceBuilder;
///
/// let layer = DrainOnDropLayer::new();
/// let connector = layer.observe(HttpConnector::new());
/// let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
/// let svc = ServiceBuilder::new().layer(layer).service(client);
/// ```
///
/// [`DrainOnDrop`]: crate::DrainOnDrop
/// [`DrainOnDropLayer::observe`]: crate::DrainOnDropLayer::observe
#[derive(Clone)]
pub struct ObserveConnector<C> {
    inner: C,
    stats: DrainStats,
}

impl<C> ObserveConnector<C> {
    /// Wraps `inner`, counting into `stats`.
    pub fn new(inner: C, stats: DrainStats) -> Self {
        stats.mark_observed();
        ObserveConnector { inner, stats }
    }

    /// The wrapped connector.
    pub fn get_ref(&self) -> &C {
        &self.inner
    }

    /// The wrapped connector, mutably.
    pub fn get_mut(&mut self) -> &mut C {
        &mut self.inner
    }

    /// Unwraps the connector.
    pub fn into_inner(self) -> C {
        self.inner
    }
}

impl<C: fmt::Debug> fmt::Debug for ObserveConnector<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObserveConnector").field("inner", &self.inner).finish_non_exhaustive()
    }
}

impl<C> Service<Uri> for ObserveConnector<C>
where
    C: Service<Uri>,
{
    type Response = ObservedConnection<C::Response>;
    type Error = C::Error;
    type Future = ConnectFuture<C::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        ConnectFuture { inner: self.inner.call(dst), stats: self.stats.clone(), started: Instant::now() }
    }
}

pin_project! {
    /// Future of [`ObserveConnector`]: the wrapped connector's, timed.
    #[must_use = "futures do nothing unless polled"]
    pub struct ConnectFuture<F> {
        #[pin]
        inner: F,
        stats: DrainStats,
        started: Instant,
    }
}

impl<F> fmt::Debug for ConnectFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectFuture").finish_non_exhaustive()
    }
}

impl<F, T, E> Future for ConnectFuture<F>
where
    F: Future<Output = Result<T, E>>,
{
    type Output = Result<ObservedConnection<T>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let io = ready!(this.inner.poll(cx))?;
        let id = this.stats.connection_opened();
        let inner = Arc::new(TagInner {
            id,
            setup_time: this.started.elapsed(),
            responses: AtomicU64::new(0),
            idle: ConnIdle::new(),
        });
        let tag = ConnectionTag { inner, request: 0 };
        Poll::Ready(Ok(ObservedConnection {
            inner: io,
            tag,
            stats: this.stats.clone(),
            read_since_write: true,
            retired: false,
        }))
    }
}

pin_project! {
    /// A connection opened by [`ObserveConnector`]: the wrapped connector's
    /// I/O, unchanged, plus the tag hyper-util copies into each response.
    ///
    /// On HTTP/1 it also watches how long the connection sits idle in the
    /// pool: its server's idle closes teach the origin its idle timeout, and
    /// a connection idle for nearly that long ends its read side when
    /// hyper-util hands it a request, before hyper writes a byte of it, so
    /// the request goes on another connection (see
    /// [`DrainOnDropLayer::server_idle_timeout`](crate::DrainOnDropLayer::server_idle_timeout)).
    pub struct ObservedConnection<T> {
        #[pin]
        inner: T,
        tag: ConnectionTag,
        stats: DrainStats,
        // The last thing the connection did was a read (or nothing): its
        // next write starts a request.
        read_since_write: bool,
        // Its read side was ended here, before its server's idle close.
        retired: bool,
    }
}

impl<T> ObservedConnection<T> {
    /// The wrapped connection.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }
}

impl<T> fmt::Debug for ObservedConnection<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObservedConnection").field("id", &self.tag.inner.id).finish_non_exhaustive()
    }
}

impl<T: Connection> Connection for ObservedConnection<T> {
    fn connected(&self) -> Connected {
        self.inner.connected().extra(self.tag.clone())
    }
}

impl<T: Read> Read for ObservedConnection<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.project();
        let idle = &this.tag.inner.idle;
        if *this.retired {
            return Poll::Ready(Ok(()));
        }
        if !idle.is_idle() || buf.remaining() == 0 {
            // A response on its way (or HTTP/2, whose responses never end
            // here), or no room to tell a close from bytes: straight to
            // hyper.
            let read = ready!(this.inner.poll_read(cx, buf));
            idle.last_read.store(idle.now(), Ordering::Relaxed);
            *this.read_since_write = true;
            return Poll::Ready(read);
        }
        // Idle: a read here sees the server's close, or bytes nobody asked
        // for (a TLS alert when observed below TLS), a few at a time, so
        // that a close is told from bytes.
        let mut scratch = [0u8; 64];
        let room = buf.remaining().min(scratch.len());
        let mut read = ReadBuf::new(&mut scratch[..room]);
        // Not empty: `room` > 0, so `Ready(Ok)` with nothing read is the end.
        match this.inner.poll_read(cx, read.unfilled()) {
            Poll::Ready(Ok(())) if !read.filled().is_empty() => {
                buf.put_slice(read.filled());
                *this.read_since_write = true;
                Poll::Ready(Ok(()))
            }
            Poll::Ready(closed) => {
                let by_server =
                    closed.as_ref().map_or_else(|e| crate::keepalive::is_close(e.kind()), |()| true);
                if by_server && let Some((origin, _)) = idle.origin.get() {
                    origin.idle().closed_after(idle.idle_for());
                }
                Poll::Ready(closed)
            }
            Poll::Pending => {
                if !retires(idle) {
                    return Poll::Pending;
                }
                // Before its server's idle close: ended here, so that hyper
                // gives the request it was handed back to hyper-util unsent.
                *this.retired = true;
                this.stats.connection_retired();
                if let Some((origin, _)) = idle.origin.get() {
                    origin.idle().retired();
                }
                Poll::Ready(Ok(()))
            }
        }
    }
}

impl<T> ObservedConnection<T> {
    /// Hyper writes: the first write after a read starts a request.
    fn writing(self: Pin<&mut Self>) -> Pin<&mut T> {
        let this = self.project();
        if std::mem::take(this.read_since_write) {
            this.tag.inner.idle.sent.fetch_add(1, Ordering::AcqRel);
        }
        this.inner
    }
}

impl<T: Write> Write for ObservedConnection<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        if buf.is_empty() {
            return self.project().inner.poll_write(cx, buf);
        }
        self.writing().poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.project().inner.poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        if bufs.iter().all(|b| b.is_empty()) {
            return self.project().inner.poll_write_vectored(cx, bufs);
        }
        self.writing().poll_write_vectored(cx, bufs)
    }
}
