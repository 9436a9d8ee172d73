//! The connections an [`Http2Connector`](crate::Http2Connector) hands to
//! hyper-util: always the wrapped connector's own (so hyper-util reads its
//! `connected()`, extras and all); unchanged for HTTP/1; where it speaks, or
//! may speak, HTTP/2, read frame by frame as it is written (its resets
//! charged to its [`Link`]) and as it is read (what its server says of
//! them), never changed.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use http::Uri;
use hyper::rt::{Read, ReadBuf, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use tower_service::Service;

use super::dial::Dial;
use super::frames::{Frame, Frames};
use super::gate::DialOrigin;
use super::link::{Link, LinkTag};
use crate::http2::{self, Proto, Received};
use crate::timer::Deadline;

/// A connection from an [`Http2Connector`](crate::Http2Connector): the
/// wrapped connector's, its bytes unchanged; on HTTP/2, read as they go, so
/// that the resets it sends, and what its server says of them, are counted
/// against it.
pub struct Http2Connection<C: Service<Uri>> {
    state: State<C::Response>,
}

enum State<T> {
    /// An origin that speaks HTTP/1: nothing to count.
    Plain(T),
    /// A connection that speaks, or may speak, HTTP/2.
    Tracked(Box<Tracked<T>>),
}

/// Until a request went on a connection, the dial others wait for: over
/// (they go through the gate again) if it is dropped first.
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

    /// A request went on the connection, which hyper-util's pool handed out
    /// (`pooled`) or not (a client without a pool).
    fn serving(mut self, pooled: bool) {
        if let Some(dial) = self.dial.take() {
            self.origin.serving(&dial, pooled);
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Some(dial) = self.dial.take() {
            self.origin.unused(&dial);
        }
    }
}

/// Bytes read at most in one read of a tracked connection: what one TLS
/// record holds.
const READ_CHUNK: usize = 16 * 1024;

struct Tracked<T> {
    io: T,
    link: Arc<Link>,
    /// The streams it may yet reset (opened, neither reset nor ended by the
    /// server), each with the RST_STREAM frames written before it was.
    open: HashMap<u32, usize>,
    /// Of those, the streams whose response head has not come (each holds
    /// one of the server's streams for sure: a stream with its head may be
    /// one a dropped body is about to reset).
    awaiting: HashSet<u32>,
    /// The highest stream id opened.
    last_opened: u32,
    /// RST_STREAM frames written.
    resets: usize,
    /// Requests written (new streams).
    requests: usize,
    /// What the client writes.
    sent: Frames,
    /// What the server sends, once the connection said it speaks HTTP/2
    /// (and if nothing was read before: then the frames' boundaries are not
    /// known, and nothing is read of it).
    got: Option<Frames>,
    /// Something was read.
    read_any: bool,
    /// Where a read lands before it is read and handed on (hyper's read
    /// buffer shows no byte it was given: reading them costs a copy).
    buf: Vec<u8>,
    /// Until the first write said what it speaks.
    first: Option<Hold>,
    /// Then, on HTTP/2, until the first request went on it.
    pooling: Option<Hold>,
    /// Its write side was shut down (hyper closes it).
    shut: bool,
    /// Once shut, how long it still reads what its server says of it.
    linger: Option<Deadline>,
}

impl<T> Tracked<T> {
    fn new(io: T, link: Arc<Link>, first: Hold) -> Self {
        Tracked {
            io,
            link,
            open: HashMap::new(),
            awaiting: HashSet::new(),
            last_opened: 0,
            resets: 0,
            requests: 0,
            sent: Frames::client(),
            got: None,
            read_any: false,
            buf: Vec::new(),
            first: Some(first),
            pooling: None,
            shut: false,
            linger: None,
        }
    }

    /// Reads what was written: the first write says what the connection
    /// speaks (HTTP/2 begins with its preface), the first request that it
    /// is pooled; each request and RST_STREAM is charged.
    fn written(&mut self, bytes: &[u8]) {
        let Tracked { sent, open, awaiting, last_opened, resets, .. } = self;
        let (mut requests, before) = (0, *resets);
        sent.read(bytes, &mut |frame| match frame {
            Frame::Headers { id, .. } if id > *last_opened => {
                *last_opened = id;
                open.insert(id, *resets);
                awaiting.insert(id);
                requests += 1;
            }
            Frame::Reset { id, .. } => {
                *resets += 1;
                open.remove(&id);
                awaiting.remove(&id);
            }
            _ => {}
        });
        if let Some(proto) = self.sent.speaks()
            && let Some(first) = self.first.take()
        {
            if proto == Proto::Http2 && !self.read_any {
                self.got = Some(Frames::server());
            }
            self.pooling = first.spoke(proto);
        }
        if requests > 0
            && let Some(pooling) = self.pooling.take()
        {
            // hyper-util's pool copies the connection's `Connected` for each
            // request it hands it to, the one that dialed it included
            // (`LinkTag`): none, no pool.
            pooling.serving(self.link.checkouts() > 0);
        }
        self.requests += requests;
        if requests > 0 || self.resets > before {
            self.link.charge(self.resets, self.open.len(), self.requests, self.awaiting.len());
        }
    }

    /// Reads what the server sent: a stream it ended or reset is no longer
    /// the client's to reset; a refusal or GOAWAY that punishes the
    /// connection tells it how many resets it had sent before (those
    /// written before the refused stream, or before the first stream above
    /// the GOAWAY's last id; all of them when there is none).
    fn received(&mut self, bytes: &[u8]) {
        let Tracked { got: Some(got), open, awaiting, resets, .. } = self else { return };
        let (mut punished, mut streams, mut answered) = (None, None, false);
        // The most resets written before a stream its server answered.
        let mut tolerated = None;
        let (in_flight, waiting) = (open.len(), awaiting.len());
        got.read(bytes, &mut |frame| match frame {
            Frame::MaxStreams(n) => streams = Some(n),
            Frame::Headers { id, end: false } => {
                answered = true;
                if awaiting.remove(&id) {
                    tolerated = tolerated.max(open.get(&id).copied());
                }
            }
            Frame::Headers { id, end: true } => {
                answered = true;
                let before = open.remove(&id);
                if awaiting.remove(&id) {
                    tolerated = tolerated.max(before);
                }
            }
            Frame::DataEnd { id } => {
                answered = true;
                open.remove(&id);
                awaiting.remove(&id);
            }
            Frame::Reset { id, code: Some(code) } => {
                let before = open.remove(&id);
                awaiting.remove(&id);
                if http2::punishes(Received::Reset(code)) {
                    punished = punished.or(Some(before.unwrap_or(*resets)));
                }
            }
            Frame::GoAway { last, code } => {
                let above = open.iter().filter(|(id, _)| **id > last).map(|(_, before)| *before).min();
                open.retain(|id, _| *id <= last);
                awaiting.retain(|id| *id <= last);
                if http2::punishes(Received::GoAway(code)) {
                    punished = punished.or(Some(above.unwrap_or(*resets)));
                }
            }
            _ => {}
        });
        if self.open.len() != in_flight || self.awaiting.len() != waiting {
            self.link.charge(self.resets, self.open.len(), self.requests, self.awaiting.len());
        }
        if let Some(streams) = streams {
            self.link.max_streams(streams);
        }
        if answered {
            self.link.answered(tolerated);
        }
        if let Some(bore) = punished {
            self.link.punished(bore);
        }
    }
}

impl<T: Read + Write + Unpin> Tracked<T> {
    /// hyper closes the connection: its write side is shut, then, if it
    /// moved on unpunished, what its server still sends is read for
    /// [`http2::LINGER`] at most (or until it closes): a server that
    /// punishes the last resets of a connection that had stopped taking
    /// requests (GOAWAY ENHANCE_YOUR_CALM as they arrive) says so after
    /// hyper has stopped reading, and a lesson that never heard it would
    /// take the next connection on as far.
    fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.shut {
            ready!(Pin::new(&mut self.io).poll_shutdown(cx))?;
            self.shut = true;
        }
        if self.got.is_none() || !self.link.awaits_verdict() {
            return Poll::Ready(Ok(()));
        }
        if self.linger.is_none() {
            self.linger = Some(Deadline::at(Instant::now() + http2::LINGER));
        }
        if self.buf.len() < READ_CHUNK {
            self.buf.resize(READ_CHUNK, 0);
        }
        loop {
            let mut read = ReadBuf::new(&mut self.buf[..READ_CHUNK]);
            match Pin::new(&mut self.io).poll_read(cx, read.unfilled()) {
                Poll::Ready(Ok(())) if !read.filled().is_empty() => {
                    let n = read.filled().len();
                    let bytes = std::mem::take(&mut self.buf);
                    self.received(&bytes[..n]);
                    self.buf = bytes;
                    if !self.link.awaits_verdict() {
                        return Poll::Ready(Ok(()));
                    }
                }
                Poll::Ready(_) => return Poll::Ready(Ok(())),
                Poll::Pending => {
                    let deadline = self.linger.as_mut().expect("set above");
                    return deadline.poll_elapsed(cx).map(Ok);
                }
            }
        }
    }
}

impl<T: Read + Unpin> Tracked<T> {
    fn poll_read(&mut self, cx: &mut Context<'_>, mut buf: ReadBufCursor<'_>) -> Poll<io::Result<()>> {
        let room = buf.remaining();
        if self.got.is_none() {
            self.read_any = true;
            return Pin::new(&mut self.io).poll_read(cx, buf);
        }
        if room == 0 {
            return Pin::new(&mut self.io).poll_read(cx, buf);
        }
        let want = room.min(READ_CHUNK);
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        let mut read = ReadBuf::new(&mut self.buf[..want]);
        ready!(Pin::new(&mut self.io).poll_read(cx, read.unfilled()))?;
        let n = read.filled().len();
        buf.put_slice(&self.buf[..n]);
        // Read where it landed, the buffer lent for the time of it.
        let bytes = std::mem::take(&mut self.buf);
        self.received(&bytes[..n]);
        self.buf = bytes;
        Poll::Ready(Ok(()))
    }
}

impl<C> Http2Connection<C>
where
    C: Service<Uri>,
{
    pub(super) fn plain(io: C::Response) -> Self {
        Http2Connection { state: State::Plain(io) }
    }

    pub(super) fn tracked(io: C::Response, link: Arc<Link>, first: Hold) -> Self {
        Http2Connection { state: State::Tracked(Box::new(Tracked::new(io, link, first))) }
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
        }
    }
}

impl<C> Read for Http2Connection<C>
where
    C: Service<Uri>,
    C::Response: Read + Unpin,
{
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: ReadBufCursor<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().state {
            State::Plain(io) => Pin::new(io).poll_read(cx, buf),
            State::Tracked(t) => t.poll_read(cx, buf),
        }
    }
}

impl<C> Write for Http2Connection<C>
where
    C: Service<Uri>,
    C::Response: Read + Write + Unpin,
{
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().state {
            State::Plain(io) => Pin::new(io).poll_write(cx, buf),
            State::Tracked(t) => {
                let n = ready!(Pin::new(&mut t.io).poll_write(cx, buf))?;
                t.written(&buf[..n]);
                Poll::Ready(Ok(n))
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().state {
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
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.state {
            State::Plain(io) => io.is_write_vectored(),
            State::Tracked(t) => t.io.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().state {
            State::Plain(io) => Pin::new(io).poll_flush(cx),
            State::Tracked(t) => Pin::new(&mut t.io).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().state {
            State::Plain(io) => Pin::new(io).poll_shutdown(cx),
            State::Tracked(t) => t.poll_shutdown(cx),
        }
    }
}

impl<C: Service<Uri>> fmt::Debug for Http2Connection<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.state {
            State::Plain(_) => "http1",
            State::Tracked(_) => "tracked",
        };
        f.debug_struct("Http2Connection").field("kind", &kind).finish_non_exhaustive()
    }
}
