//! The connections an [`Http2Connector`](crate::Http2Connector) hands to
//! hyper-util: the wrapped connector's I/O, unchanged for HTTP/1 origins;
//! read frame by frame as it is written where it may speak HTTP/2 (its
//! resets charged to its [`Link`]); or, for a connect that waited for
//! another's dial, a stand-in ([`Lazy`]) that hyper-util cancels in favour
//! of that dial's connection, and that dials for itself only where
//! hyper-util wants it anyway.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use tower_service::Service;

use super::frames::Frames;
use super::gate::{Dial, DialOrigin};
use super::link::{Link, LinkTag};
use super::{BoxError, Superseded};
use crate::http2::Proto;

/// A connection from an [`Http2Connector`](crate::Http2Connector): the
/// wrapped connector's, read as it is written (never changed), so that the
/// HTTP/2 resets it sends are counted against it.
pub struct Http2Connection<C: Service<Uri>> {
    state: State<C>,
}

enum State<C: Service<Uri>> {
    /// An origin that speaks HTTP/1: nothing to count.
    Plain(C::Response),
    /// A connection that speaks, or may speak, HTTP/2.
    Tracked(Tracked<C::Response>),
    /// Stands in for a dial another connect is making (see [`Lazy`]).
    Lazy(Box<Lazy<C>>),
    /// A stand-in that was not needed, or whose own dial failed.
    Gone,
}

/// Until a request went on a connection, the dial others wait for (or
/// stand in for): abandoned (they go through the gate again) if it is
/// dropped first.
pub(super) struct Hold {
    pub(super) origin: Arc<DialOrigin>,
    pub(super) dial: Option<Arc<Dial>>,
}

impl Hold {
    /// The first write said what the connection speaks: HTTP/1 ends the
    /// hold; HTTP/2 keeps it until a request goes on the connection.
    pub(super) fn spoke(mut self, proto: Proto) -> Option<Hold> {
        self.origin.spoke(self.dial.as_ref(), proto);
        if proto == Proto::Http2 && self.dial.is_some() {
            return Some(self);
        }
        self.dial = None;
        None
    }

    /// A request went on the connection: it is pooled.
    fn serving(mut self) {
        if let Some(dial) = self.dial.take() {
            self.origin.serving(&dial);
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Some(dial) = self.dial.take() {
            self.origin.abandoned(&dial);
        }
    }
}

pub(super) struct Tracked<T> {
    io: T,
    link: Arc<Link>,
    frames: Frames,
    /// Until the first write said what it speaks.
    first: Option<Hold>,
    /// Then, on HTTP/2, until the first request went on it.
    pooling: Option<Hold>,
}

impl<T> Tracked<T> {
    fn new(io: T, link: Arc<Link>, first: Hold) -> Self {
        Tracked { io, link, frames: Frames::new(), first: Some(first), pooling: None }
    }

    /// Reads what was written: the first write says what the connection
    /// speaks (HTTP/2 begins with its preface), the first request that it
    /// is pooled; each RST_STREAM is charged.
    fn written(&mut self, bytes: &[u8]) {
        let seen = self.frames.written(bytes);
        if let Some(proto) = self.frames.speaks()
            && let Some(first) = self.first.take()
        {
            self.pooling = first.spoke(proto);
        }
        if seen.requests > 0
            && let Some(pooling) = self.pooling.take()
        {
            pooling.serving();
        }
        if seen.resets > 0 {
            self.link.reset_written(seen.resets);
        }
    }
}

/// A connect that waited for another's dial, which hyper-util has started
/// to set up as its origin's one HTTP/2 connection. hyper-util takes it for
/// HTTP/2 (ALPN h2), finds its HTTP/2 lock taken by that dial, cancels it
/// unused and waits for that dial's connection from its pool. Where
/// hyper-util uses it anyway (that connection was pooled, then lost, in the
/// instant between; a client without a pool), its first read or write
/// yields once, so that a pool that has a connection for the request hands
/// it over first; polled again by the task that asked for the connection
/// (`owner`: the one that first polled the connect), it dials; polled by
/// another (hyper-util finishes a connect it no longer needs in the
/// background), it fails at once with [`Superseded`].
pub(super) struct Lazy<C: Service<Uri>> {
    connector: C,
    owner: Waker,
    dst: Uri,
    origin: Arc<DialOrigin>,
    link: Arc<Link>,
    step: Step<C>,
}

enum Step<C: Service<Uri>> {
    Fresh,
    /// Yielded once.
    Yielded,
    Ready,
    Dialing(C::Future, Option<Hold>),
}

impl<C> Http2Connection<C>
where
    C: Service<Uri>,
{
    pub(super) fn plain(io: C::Response) -> Self {
        Http2Connection { state: State::Plain(io) }
    }

    pub(super) fn tracked(io: C::Response, link: Arc<Link>, first: Hold) -> Self {
        Http2Connection { state: State::Tracked(Tracked::new(io, link, first)) }
    }

    pub(super) fn lazy(connector: C, owner: Waker, dst: Uri, origin: Arc<DialOrigin>) -> Self {
        let link = Link::new(origin.clone());
        let lazy = Lazy { connector, owner, dst, origin, link, step: Step::Fresh };
        Http2Connection { state: State::Lazy(Box::new(lazy)) }
    }
}

impl<C> Http2Connection<C>
where
    C: Service<Uri>,
    C::Error: Into<BoxError>,
    C::Future: Unpin,
    C::Response: Connection,
{
    /// The connection to read or write, once there is one: a stand-in dials
    /// first, if it must (see [`Lazy`]).
    fn poll_io(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let lazy = match &mut self.state {
                State::Lazy(lazy) => lazy,
                State::Gone => return Poll::Ready(Err(io::Error::other(Superseded))),
                _ => return Poll::Ready(Ok(())),
            };
            if matches!(lazy.step, Step::Fresh | Step::Yielded) && !lazy.owner.will_wake(cx.waker()) {
                tracing::trace!(target: "drain_on_drop::dial", "stand-in not needed");
                self.state = State::Gone;
                continue;
            }
            match &mut lazy.step {
                Step::Fresh => {
                    lazy.step = Step::Yielded;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Step::Yielded => {
                    tracing::trace!(target: "drain_on_drop::dial", "stand-in dials");
                    lazy.step = Step::Ready;
                }
                Step::Ready => {
                    if let Err(e) = ready!(lazy.connector.poll_ready(cx)) {
                        self.state = State::Gone;
                        return Poll::Ready(Err(io::Error::other(e.into())));
                    }
                    let dial = lazy.connector.call(lazy.dst.clone());
                    // Others wait for this one.
                    let hold = Hold { origin: lazy.origin.clone(), dial: Some(lazy.origin.start_dial()) };
                    lazy.step = Step::Dialing(dial, Some(hold));
                }
                Step::Dialing(dial, hold) => {
                    let io = match ready!(Pin::new(dial).poll(cx)) {
                        Ok(io) => io,
                        Err(e) => {
                            self.state = State::Gone;
                            return Poll::Ready(Err(io::Error::other(e.into())));
                        }
                    };
                    let first = hold.take().unwrap_or(Hold { origin: lazy.origin.clone(), dial: None });
                    if lazy.origin.https() && !io.connected().is_negotiated_h2() {
                        // It stood in for HTTP/2; the server now speaks HTTP/1.
                        first.spoke(Proto::Http1);
                        self.state = State::Gone;
                        return Poll::Ready(Err(io::Error::other(Superseded)));
                    }
                    if let Some(dial) = &first.dial {
                        lazy.origin.handed(dial);
                    }
                    self.state = State::Tracked(Tracked::new(io, lazy.link.clone(), first));
                }
            }
        }
    }
}

impl<C> Connection for Http2Connection<C>
where
    C: Service<Uri>,
    C::Response: Connection,
{
    fn connected(&self) -> Connected {
        match &self.state {
            State::Plain(io) => io.connected(),
            State::Tracked(t) => t.io.connected().extra(LinkTag::new(&t.link)),
            State::Lazy(lazy) => Connected::new().negotiated_h2().extra(LinkTag::new(&lazy.link)),
            State::Gone => Connected::new(),
        }
    }
}

impl<C> Read for Http2Connection<C>
where
    C: Service<Uri>,
    C::Error: Into<BoxError>,
    C::Future: Unpin,
    C::Response: Connection + Read + Unpin,
{
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: ReadBufCursor<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_io(cx))?;
        match &mut this.state {
            State::Plain(io) => Pin::new(io).poll_read(cx, buf),
            State::Tracked(t) => Pin::new(&mut t.io).poll_read(cx, buf),
            _ => unreachable!("poll_io leaves a connection"),
        }
    }
}

impl<C> Write for Http2Connection<C>
where
    C: Service<Uri>,
    C::Error: Into<BoxError>,
    C::Future: Unpin,
    C::Response: Connection + Write + Unpin,
{
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_io(cx))?;
        match &mut this.state {
            State::Plain(io) => Pin::new(io).poll_write(cx, buf),
            State::Tracked(t) => {
                let n = ready!(Pin::new(&mut t.io).poll_write(cx, buf))?;
                t.written(&buf[..n]);
                Poll::Ready(Ok(n))
            }
            _ => unreachable!("poll_io leaves a connection"),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_io(cx))?;
        match &mut this.state {
            State::Plain(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            State::Tracked(t) => {
                let mut left = ready!(Pin::new(&mut t.io).poll_write_vectored(cx, bufs))?;
                let n = left;
                for buf in bufs {
                    let take = left.min(buf.len());
                    t.written(&buf[..take]);
                    left -= take;
                    if left == 0 {
                        break;
                    }
                }
                Poll::Ready(Ok(n))
            }
            _ => unreachable!("poll_io leaves a connection"),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.state {
            State::Plain(io) => io.is_write_vectored(),
            State::Tracked(t) => t.io.is_write_vectored(),
            _ => false,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_io(cx))?;
        match &mut this.state {
            State::Plain(io) => Pin::new(io).poll_flush(cx),
            State::Tracked(t) => Pin::new(&mut t.io).poll_flush(cx),
            _ => unreachable!("poll_io leaves a connection"),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match &mut this.state {
            State::Plain(io) => Pin::new(io).poll_shutdown(cx),
            State::Tracked(t) => Pin::new(&mut t.io).poll_shutdown(cx),
            // Nothing was dialed: nothing to shut down.
            _ => Poll::Ready(Ok(())),
        }
    }
}

impl<C: Service<Uri>> fmt::Debug for Http2Connection<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.state {
            State::Plain(_) => "http1",
            State::Tracked(_) => "tracked",
            State::Lazy(_) => "stand-in",
            State::Gone => "gone",
        };
        f.debug_struct("Http2Connection").field("kind", &kind).finish_non_exhaustive()
    }
}
