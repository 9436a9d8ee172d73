//! HTTP/2 servers for the tests, both h2c (prior knowledge) on
//! `127.0.0.1:0`:
//!
//! - [`H2Paths`]: hyper's own server, with bodies that flow, trickle, stall
//!   or never end, counting at the server the streams the client reset
//!   before their end.
//! - [`RawH2`]: a server that speaks the frames itself, so that it refuses a
//!   stream exactly as a test scripts it (RST_STREAM with any code, a GOAWAY
//!   below a stream's id, a cut connection), counting every stream and
//!   connection that reached it; it may allow one stream at a time, and
//!   send a GOAWAY when the test says so ([`RawH2::go_away`]).
//!
//! And [`locked_version`]: the version of a crate this build resolved, for
//! tests whose premise depends on it.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use super::{KIB, accept_each, query};

/// The version of `name` in the Cargo.lock of this build (the workspace's,
/// found above the package's manifest), as `(major, minor, patch)`; the
/// highest if the lock holds several.
pub fn locked_version(name: &str) -> (u64, u64, u64) {
    let mut dir = Some(std::path::Path::new(env!("CARGO_MANIFEST_DIR")));
    let lock = loop {
        let d = dir.expect("a Cargo.lock above the package");
        if let Ok(text) = std::fs::read_to_string(d.join("Cargo.lock")) {
            break text;
        }
        dir = d.parent();
    };
    let wanted = format!("name = \"{name}\"");
    let mut lines = lock.lines();
    let mut found = Vec::new();
    while let Some(line) = lines.next() {
        if line == wanted {
            let version = lines.next().and_then(|l| l.strip_prefix("version = \"")).expect("version line");
            let parts: Vec<u64> = version
                .trim_end_matches('"')
                .split('.')
                .map(|p| p.parse().expect("numeric version"))
                .collect();
            found.push((parts[0], parts[1], parts[2]));
        }
    }
    found.into_iter().max().unwrap_or_else(|| panic!("{name} is not in Cargo.lock"))
}

/// What [`H2Paths`] counts at the server.
#[derive(Debug, Default)]
pub struct PathCounts {
    /// Response bodies dropped before their end: their stream was reset by
    /// the client (or their connection closed).
    pub cancelled: AtomicUsize,
    /// Response bodies sent to their end.
    pub finished: AtomicUsize,
    /// Response bodies being sent now.
    pub open: AtomicUsize,
}

/// hyper's h2c server on `127.0.0.1:0` (TCP_NODELAY), its paths:
///
/// - `/len/N`: N bytes with content-length, 16 KiB frames, as fast as
///   flow control lets them go.
/// - `/trickle`: 1 KiB every 2 ms (`?every=MS` otherwise), without end or,
///   with `?cl=N`, N bytes with content-length.
/// - `/stall?after=N`: N bytes (16 KiB frames), then nothing, ever.
/// - `/sse`: text/event-stream, a 16-byte event every 10 ms, endless.
/// - `/flood`: text/event-stream, 16 KiB events as fast as flow control
///   lets them go, endless.
/// - `/small`: `small body\n`.
pub struct H2Paths {
    pub addr: SocketAddr,
    pub accepted: Arc<AtomicUsize>,
    pub counts: Arc<PathCounts>,
    /// Connections whose serving ended (the client closed them).
    pub closed: Arc<AtomicUsize>,
}

impl H2Paths {
    /// Starts the server; it announces `max_streams` concurrent streams
    /// (hyper's default, 200, with `None`).
    pub async fn start(max_streams: Option<u32>) -> H2Paths {
        let counts = Arc::new(PathCounts::default());
        let closed = Arc::new(AtomicUsize::new(0));
        let (c, ended) = (counts.clone(), closed.clone());
        let (addr, accepted) = accept_each(move |io: TokioIo<TcpStream>| {
            let _ = io.inner().set_nodelay(true);
            let counts = c.clone();
            let ended = ended.clone();
            async move {
                let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let counts = counts.clone();
                    async move { Ok::<_, std::convert::Infallible>(respond(req.uri(), counts)) }
                });
                let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                if let Some(n) = max_streams {
                    builder.max_concurrent_streams(n);
                }
                let _ = builder.serve_connection(io, service).await;
                ended.fetch_add(1, Ordering::SeqCst);
            }
        })
        .await;
        H2Paths { addr, accepted, counts, closed }
    }

    pub fn uri(&self, path: &str) -> http::Uri {
        format!("http://{}{path}", self.addr).parse().unwrap()
    }

    pub fn cancelled(&self) -> usize {
        self.counts.cancelled.load(Ordering::SeqCst)
    }

    pub fn open(&self) -> usize {
        self.counts.open.load(Ordering::SeqCst)
    }
}

fn respond(uri: &http::Uri, counts: Arc<PathCounts>) -> http::Response<Paced> {
    let path = uri.path();
    let q = |name: &str| query(&uri.to_string(), name);
    let mut res = http::Response::builder();
    let ms = Duration::from_millis;
    let paced = |left: Option<usize>, chunk: usize, every: Option<Duration>, stall_after: Option<usize>| {
        Paced::new(left, chunk, every, stall_after, counts.clone())
    };
    let body = if let Some(n) = path.strip_prefix("/len/") {
        let n: usize = n.parse().expect("/len/N");
        res = res.header("content-length", n);
        paced(Some(n), 16 * KIB, None, None)
    } else if path == "/trickle" {
        let left = q("cl").map(|n| n as usize);
        if let Some(n) = left {
            res = res.header("content-length", n);
        }
        paced(left, KIB, Some(ms(q("every").unwrap_or(2))), None)
    } else if path == "/stall" {
        paced(None, 16 * KIB, None, Some(q("after").unwrap_or(0) as usize))
    } else if path == "/sse" {
        res = res.header("content-type", "text/event-stream");
        paced(None, 16, Some(ms(10)), None)
    } else if path == "/flood" {
        res = res.header("content-type", "text/event-stream");
        paced(None, 16 * KIB, None, None)
    } else if path == "/small" {
        res = res.header("content-length", 11);
        Paced::small(counts.clone())
    } else {
        res = res.status(404);
        paced(Some(0), 1, None, None)
    };
    res.body(body).unwrap()
}

/// A response body of [`H2Paths`]: `left` bytes (`None`: endless) in
/// `chunk`-byte frames, one per `every` (as fast as it is polled with
/// `None`), nothing more after `stall_after` bytes; counted at its drop.
pub struct Paced {
    left: Option<usize>,
    chunk: usize,
    every: Option<tokio::time::Interval>,
    stall_after: Option<usize>,
    small: bool,
    ended: bool,
    counts: Arc<PathCounts>,
}

impl Paced {
    fn new(
        left: Option<usize>,
        chunk: usize,
        every: Option<Duration>,
        stall_after: Option<usize>,
        counts: Arc<PathCounts>,
    ) -> Self {
        counts.open.fetch_add(1, Ordering::SeqCst);
        let every = every.map(|d| {
            let mut interval = tokio::time::interval(d);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            interval
        });
        Paced { left, chunk, every, stall_after, small: false, ended: false, counts }
    }

    fn small(counts: Arc<PathCounts>) -> Self {
        let mut body = Paced::new(Some(11), 11, None, None, counts);
        body.small = true;
        body
    }
}

impl http_body::Body for Paced {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.left == Some(0) {
            self.ended = true;
            return Poll::Ready(None);
        }
        if self.stall_after == Some(0) {
            // Stalled for good: never woken, dropped when the stream goes.
            return Poll::Pending;
        }
        if let Some(every) = self.every.as_mut() {
            ready!(every.poll_tick(cx));
        }
        let mut n = self.chunk;
        if let Some(left) = self.left.as_mut() {
            n = n.min(*left);
            *left -= n;
        }
        if let Some(after) = self.stall_after.as_mut() {
            n = n.min(*after);
            *after -= n;
        }
        let data = if self.small { Bytes::from_static(b"small body\n") } else { Bytes::from(vec![b'p'; n]) };
        Poll::Ready(Some(Ok(Frame::data(data))))
    }
}

impl Drop for Paced {
    fn drop(&mut self) {
        let counter = if self.ended { &self.counts.finished } else { &self.counts.cancelled };
        counter.fetch_add(1, Ordering::SeqCst);
        self.counts.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A request that reached [`RawH2`] whole (END_STREAM seen): where, and in
/// which order.
#[derive(Clone, Copy, Debug)]
pub struct Arrived {
    /// The connection's number, from 0, in the order they were accepted.
    pub conn: usize,
    /// The request's number on its connection, from 0.
    pub nth_on_conn: usize,
    /// The stream's id.
    pub id: u32,
    /// Whether the server had sent a GOAWAY on the connection
    /// ([`RawH2::go_away`]) before the request arrived.
    pub after_go_away: bool,
}

/// What [`RawH2`] does with a request that arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// `200`, with the body `answer`.
    Answer,
    /// RST_STREAM with this error code.
    Reset(u32),
    /// Nothing yet: answered when a later request's act says so.
    Hold,
    /// GOAWAY with this code whose last stream id is the highest one held
    /// or answered before this request (so this request, and any later one
    /// on the connection, is above it); then the held requests are answered,
    /// and the connection is closed once they are.
    GoAway(u32),
    /// GOAWAY NO_ERROR whose last stream id is this request's, then the
    /// connection is closed without an answer: processed, maybe, and lost.
    GoAwayThenCut,
    /// The connection is closed without an answer.
    Cut,
}

pub const NO_ERROR: u32 = 0;
pub const INTERNAL_ERROR: u32 = 2;
pub const REFUSED_STREAM: u32 = 7;
pub const CANCEL: u32 = 8;
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// What [`RawH2`] saw.
#[derive(Debug, Default)]
pub struct RawCounts {
    pub connections: AtomicUsize,
    /// Requests that arrived whole, on every connection.
    pub requests: AtomicUsize,
    /// The body of every request that arrived, in order.
    pub bodies: Mutex<Vec<Vec<u8>>>,
    /// Every request that arrived, in order.
    pub arrivals: Mutex<Vec<Arrived>>,
    /// The connections whose serving ended (closed by either side), by
    /// number.
    pub ended: Mutex<Vec<usize>>,
    /// RST_STREAM frames the client sent, on every connection (for streams
    /// still open or already answered alike).
    pub resets: AtomicUsize,
}

/// The last stream id of a GOAWAY sent by [`RawH2::go_away`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Last {
    /// 2^31-1: the first phase of a graceful shutdown (RFC 9113, 6.8): any
    /// stream the client opened or is about to open may still come.
    Max,
    /// The highest stream id of the requests that arrived whole on the
    /// connection: any stream the client opens after them is above it.
    Seen,
}

/// What the connection does after a GOAWAY of [`RawH2::go_away`] and the
/// answers to the requests it held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Then {
    /// Goes on serving: requests arriving later are scripted as any other
    /// (the client closes the connection once its streams are done).
    KeepServing,
    /// Closes the connection 200 ms later, as [`Act::GoAway`] does.
    Close,
}

/// A GOAWAY a test asks a connection of [`RawH2`] for.
struct GoAwayNow {
    code: u32,
    last: Last,
    then: Then,
    /// Told once the GOAWAY and the answers are written.
    sent: oneshot::Sender<()>,
}

/// An h2c server speaking the frames itself, each request's fate decided
/// by `script` when it arrives whole. Answers are `200` with the body
/// `answer`. Stops with the test's runtime.
pub struct RawH2 {
    pub addr: SocketAddr,
    pub counts: Arc<RawCounts>,
    /// Each connection's way to [`go_away`](Self::go_away), in the order
    /// they were accepted.
    controls: Arc<Mutex<Vec<mpsc::UnboundedSender<GoAwayNow>>>>,
}

type Script = Arc<dyn Fn(Arrived) -> Act + Send + Sync>;

impl RawH2 {
    /// Starts the server; its SETTINGS announce nothing (no limit on
    /// concurrent streams).
    pub async fn start(script: impl Fn(Arrived) -> Act + Send + Sync + 'static) -> RawH2 {
        RawH2::start_with(None, script).await
    }

    /// Starts the server; its SETTINGS announce `max_streams` concurrent
    /// streams (SETTINGS_MAX_CONCURRENT_STREAMS), or nothing with `None`.
    /// It never enforces the limit: the client keeps it.
    pub async fn start_with(
        max_streams: Option<u32>,
        script: impl Fn(Arrived) -> Act + Send + Sync + 'static,
    ) -> RawH2 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let counts = Arc::new(RawCounts::default());
        let controls: Arc<Mutex<Vec<mpsc::UnboundedSender<GoAwayNow>>>> = Default::default();
        let script: Script = Arc::new(script);
        let (c, ctl) = (counts.clone(), controls.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                let (tx, rx) = mpsc::unbounded_channel();
                // Pushed before the count goes up: a test that saw the
                // connection counted finds its control.
                ctl.lock().unwrap().push(tx);
                let conn = c.connections.fetch_add(1, Ordering::SeqCst);
                let (c, script) = (c.clone(), script.clone());
                tokio::spawn(async move {
                    let _ = raw_connection(stream, conn, max_streams, script, rx, c.clone()).await;
                    c.ended.lock().unwrap().push(conn);
                });
            }
        });
        RawH2 { addr, counts, controls }
    }

    /// Has connection `conn` (numbered from 0, in the order accepted) send
    /// GOAWAY with `code` and `last`, then answer every request it holds,
    /// then do what `then` says, whatever it is doing (it keeps reading
    /// frames while it waits). Returns once the GOAWAY and the answers are
    /// written: `false` if the connection was already gone.
    pub async fn go_away(&self, conn: usize, code: u32, last: Last, then: Then) -> bool {
        let (sent, written) = oneshot::channel();
        let control = self.controls.lock().unwrap().get(conn).cloned();
        let control = control.unwrap_or_else(|| panic!("go_away: no connection {conn} was accepted"));
        control.send(GoAwayNow { code, last, then, sent }).is_ok() && written.await.is_ok()
    }

    /// Every request that arrived whole, in order.
    pub fn arrivals(&self) -> Vec<Arrived> {
        self.counts.arrivals.lock().unwrap().clone()
    }

    /// Whether connection `conn`'s serving ended (closed by either side).
    pub fn ended(&self, conn: usize) -> bool {
        self.counts.ended.lock().unwrap().contains(&conn)
    }

    pub fn uri(&self, path: &str) -> http::Uri {
        format!("http://{}{path}", self.addr).parse().unwrap()
    }

    pub fn connections(&self) -> usize {
        self.counts.connections.load(Ordering::SeqCst)
    }

    pub fn requests(&self) -> usize {
        self.counts.requests.load(Ordering::SeqCst)
    }
}

/// The body of every answer of [`RawH2`].
pub const ANSWER: &[u8] = b"answered\n";

fn frame(kind: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&id.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn answer(id: u32) -> Vec<u8> {
    // HEADERS (END_HEADERS) with `:status: 200` (HPACK static index 8),
    // then DATA with END_STREAM.
    let mut out = frame(0x1, 0x4, id, &[0x88]);
    out.extend(frame(0x0, 0x1, id, ANSWER));
    out
}

fn go_away(last: u32, code: u32) -> Vec<u8> {
    let mut payload = last.to_be_bytes().to_vec();
    payload.extend_from_slice(&code.to_be_bytes());
    frame(0x7, 0, 0, &payload)
}

/// Reads frames one at a time, and never more of the socket than the frame
/// it reads (what follows stays in the socket's buffer, as with
/// `read_exact`).
#[derive(Default)]
struct Frames {
    buf: Vec<u8>,
    filled: usize,
}

/// A frame's type, flags, stream id and payload.
type RawFrame = (u8, u8, u32, Vec<u8>);

impl Frames {
    /// The next frame. Cancel-safe (a `select!` branch): what was read
    /// before the future was dropped stays here for the next call.
    async fn next(&mut self, stream: &mut TcpStream) -> std::io::Result<RawFrame> {
        loop {
            let want = if self.filled < 9 {
                9
            } else {
                let b = &self.buf;
                9 + ((usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2]))
            };
            if self.filled >= 9 && self.filled == want {
                let b = std::mem::take(&mut self.buf);
                self.filled = 0;
                let id = u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff;
                return Ok((b[3], b[4], id, b[9..want].to_vec()));
            }
            if self.buf.len() < want {
                self.buf.resize(want, 0);
            }
            let n = stream.read(&mut self.buf[self.filled..want]).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.filled += n;
        }
    }
}

async fn raw_connection(
    mut stream: TcpStream,
    conn: usize,
    max_streams: Option<u32>,
    script: Script,
    control: mpsc::UnboundedReceiver<GoAwayNow>,
    counts: Arc<RawCounts>,
) -> std::io::Result<()> {
    let mut preface = [0u8; 24];
    stream.read_exact(&mut preface).await?;
    assert_eq!(&preface, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "the client preface");
    let mut settings = Vec::new();
    if let Some(n) = max_streams {
        // SETTINGS_MAX_CONCURRENT_STREAMS (0x3).
        settings.extend_from_slice(&0x3u16.to_be_bytes());
        settings.extend_from_slice(&n.to_be_bytes());
    }
    stream.write_all(&frame(0x4, 0, 0, &settings)).await?;
    let mut bodies: std::collections::HashMap<u32, Vec<u8>> = Default::default();
    let mut held: Vec<u32> = Vec::new();
    let mut last_seen = 0u32;
    let mut nth = 0;
    let mut frames = Frames::default();
    let mut went_away = false;
    // `None` once the server (its `RawH2`) is gone.
    let mut control = Some(control);
    loop {
        enum Next {
            Frame(std::io::Result<RawFrame>),
            Told(Option<GoAwayNow>),
        }
        let next = tokio::select! {
            frame = frames.next(&mut stream) => Next::Frame(frame),
            told = async {
                match control.as_mut() {
                    Some(control) => control.recv().await,
                    None => std::future::pending().await,
                }
            } => Next::Told(told),
        };
        let (kind, flags, id, payload) = match next {
            Next::Frame(frame) => frame?,
            Next::Told(None) => {
                control = None;
                continue;
            }
            Next::Told(Some(GoAwayNow { code, last, then, sent })) => {
                let last = match last {
                    Last::Max => 0x7fff_ffff,
                    Last::Seen => last_seen,
                };
                stream.write_all(&go_away(last, code)).await?;
                went_away = true;
                for id in held.drain(..) {
                    stream.write_all(&answer(id)).await?;
                }
                stream.flush().await?;
                let _ = sent.send(());
                match then {
                    Then::KeepServing => continue,
                    Then::Close => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        return Ok(());
                    }
                }
            }
        };
        let ended = match kind {
            // SETTINGS: acknowledged, unless an acknowledgement itself.
            0x4 if flags & 0x1 == 0 => {
                stream.write_all(&frame(0x4, 0x1, 0, &[])).await?;
                false
            }
            // PING: answered.
            0x6 if flags & 0x1 == 0 => {
                stream.write_all(&frame(0x6, 0x1, 0, &payload)).await?;
                false
            }
            // HEADERS: a request starts (its header block is not decoded).
            0x1 => {
                bodies.entry(id).or_default();
                flags & 0x1 != 0
            }
            // RST_STREAM: counted.
            0x3 => {
                counts.resets.fetch_add(1, Ordering::SeqCst);
                false
            }
            // DATA: the request's body.
            0x0 => {
                bodies.entry(id).or_default().extend_from_slice(&payload);
                // Give the window back at once: small bodies only, but any
                // number of them.
                if !payload.is_empty() {
                    let credit = (payload.len() as u32).to_be_bytes();
                    stream.write_all(&frame(0x8, 0, 0, &credit)).await?;
                    stream.write_all(&frame(0x8, 0, id, &credit)).await?;
                }
                flags & 0x1 != 0
            }
            _ => false,
        };
        if !ended {
            continue;
        }
        let body = bodies.remove(&id).unwrap_or_default();
        let arrived = Arrived { conn, nth_on_conn: nth, id, after_go_away: went_away };
        counts.bodies.lock().unwrap().push(body);
        counts.arrivals.lock().unwrap().push(arrived);
        counts.requests.fetch_add(1, Ordering::SeqCst);
        let act = script(arrived);
        nth += 1;
        match act {
            Act::Answer => stream.write_all(&answer(id)).await?,
            Act::Reset(code) => stream.write_all(&frame(0x3, 0, id, &code.to_be_bytes())).await?,
            Act::Hold => held.push(id),
            Act::GoAway(code) => {
                stream.write_all(&go_away(last_seen, code)).await?;
                for id in held.drain(..) {
                    stream.write_all(&answer(id)).await?;
                }
                stream.flush().await?;
                // The client reads the answers, then finds the connection
                // closed (a server closes after a GOAWAY once its streams
                // are done).
                tokio::time::sleep(Duration::from_millis(200)).await;
                return Ok(());
            }
            Act::GoAwayThenCut => {
                stream.write_all(&go_away(id, NO_ERROR)).await?;
                stream.flush().await?;
                return Ok(());
            }
            Act::Cut => return Ok(()),
        }
        last_seen = last_seen.max(id);
    }
}

/// How [`LimitH2`] punishes a connection whose resets passed its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Punish {
    /// Every request arriving on it is refused with RST_STREAM
    /// ENHANCE_YOUR_CALM (Node's answer when a session's memory is spent),
    /// and after [`REFUSALS_BEFORE_GOAWAY`] of them it sends GOAWAY
    /// ENHANCE_YOUR_CALM and closes.
    Refuse,
    /// GOAWAY ENHANCE_YOUR_CALM at once, its last stream id the highest
    /// request answered (every later one above it, never processed), then
    /// closed (nghttp2's and Apache's answer to a reset flood).
    GoAway,
}

/// Refusals a [`Punish::Refuse`] connection sends before its GOAWAY.
pub const REFUSALS_BEFORE_GOAWAY: usize = 8;

/// The limits a [`LimitH2`] draws for its connections: each one's resets
/// limit is drawn between `lo` and `hi` (both included) from `seed` and the
/// connection's number, so that a run can be repeated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub lo: usize,
    pub hi: usize,
    pub seed: u64,
}

impl Limits {
    /// The limit of connection `conn`: SplitMix64 of the seed and the
    /// connection's number, within `lo..=hi`.
    pub fn of(&self, conn: usize) -> usize {
        let mut z = self.seed ^ (conn as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        self.lo + (z % (self.hi - self.lo + 1) as u64) as usize
    }
}

/// One connection of a [`LimitH2`], as the server saw it.
#[derive(Clone, Debug, Default)]
pub struct LimitConn {
    /// Its limit of resets (`None`: it punishes nothing).
    pub limit: Option<usize>,
    /// The server generation ([`LimitH2::restart`]) it was accepted in.
    pub generation: usize,
    /// Requests that arrived whole on it (answered or refused).
    pub requests: usize,
    /// For each request that began (HEADERS), the client's RST_STREAM
    /// frames on the connection before it.
    pub resets_before: Vec<usize>,
    /// RST_STREAM frames the client sent on it.
    pub resets: usize,
    /// It was punished: the server refused a stream on it or sent it
    /// GOAWAY ENHANCE_YOUR_CALM.
    pub punished: bool,
}

/// What a [`LimitH2`] saw, on every connection.
#[derive(Debug, Default)]
pub struct LimitCounts {
    /// Each connection, in the order accepted.
    pub conns: Mutex<Vec<LimitConn>>,
    /// Requests answered (processed): GETs and POSTs.
    pub answered_gets: AtomicUsize,
    pub answered_posts: AtomicUsize,
    /// Requests refused with RST_STREAM ENHANCE_YOUR_CALM (never processed,
    /// but a client cannot know: RFC 9113, 8.7).
    pub refused_gets: AtomicUsize,
    pub refused_posts: AtomicUsize,
    /// The body of every POST answered, with the times it was.
    pub posts: Mutex<std::collections::HashMap<Vec<u8>, usize>>,
}

/// What a [`LimitH2`] saw, summed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LimitSummary {
    pub connections: usize,
    /// Connections punished.
    pub punished: usize,
    pub answered: usize,
    pub refused: usize,
    pub refused_posts: usize,
    /// POSTs answered more than once (each extra time counted).
    pub posts_twice: usize,
    /// RST_STREAM frames the client sent, on every connection.
    pub resets: usize,
    /// The most requests one connection carried.
    pub most_requests: usize,
    /// The most resets one connection sent.
    pub most_resets: usize,
}

/// An h2c server on `127.0.0.1:0` that punishes each connection once the
/// client's RST_STREAM frames on it pass that connection's limit (drawn
/// from [`Limits`]), as [`Punish`] says. Every request (a GET, or a POST
/// whose body is recorded) is answered with a `200` head and a body that
/// never ends, so that a response dropped at its head resets its stream.
/// [`restart`](Self::restart) stands for a restart with other limits:
/// every connection accepted before it gets GOAWAY NO_ERROR and is closed
/// once its requests were answered, and later ones get the new limits.
/// Stops with the test's runtime.
pub struct LimitH2 {
    pub addr: SocketAddr,
    pub counts: Arc<LimitCounts>,
    /// The generation and the limits of new connections (`None`: none
    /// punished).
    plan: Arc<Mutex<(usize, Option<Limits>)>>,
    restarts: tokio::sync::watch::Sender<usize>,
    punish: Punish,
}

impl LimitH2 {
    /// Starts the server.
    pub async fn start(punish: Punish, limits: Option<Limits>) -> LimitH2 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let counts = Arc::new(LimitCounts::default());
        let plan = Arc::new(Mutex::new((0, limits)));
        let (restarts, _) = tokio::sync::watch::channel(0);
        let (c, p, r) = (counts.clone(), plan.clone(), restarts.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                let (generation, limits) = *p.lock().unwrap();
                let conn = {
                    let mut conns = c.conns.lock().unwrap();
                    let limit = limits.map(|l| l.of(conns.len()));
                    conns.push(LimitConn { limit, generation, ..LimitConn::default() });
                    conns.len() - 1
                };
                let (c, restarted) = (c.clone(), r.subscribe());
                tokio::spawn(async move {
                    let _ = limit_connection(stream, conn, generation, punish, restarted, c).await;
                });
            }
        });
        LimitH2 { addr, counts, plan, restarts, punish }
    }

    /// A restart with `limits`: connections accepted from now on get them;
    /// every earlier one is told GOAWAY NO_ERROR (its last stream id the
    /// highest request it answered) and closed.
    pub fn restart(&self, limits: Option<Limits>) {
        let generation = {
            let mut plan = self.plan.lock().unwrap();
            *plan = (plan.0 + 1, limits);
            plan.0
        };
        self.restarts.send_replace(generation);
    }

    /// How it punishes.
    pub fn punish(&self) -> Punish {
        self.punish
    }

    pub fn uri(&self, path: &str) -> http::Uri {
        format!("http://{}{path}", self.addr).parse().unwrap()
    }

    /// Its connections so far.
    pub fn conns(&self) -> Vec<LimitConn> {
        self.counts.conns.lock().unwrap().clone()
    }

    /// What it saw on the connections of `generations`, summed.
    pub fn summary_of(&self, generations: std::ops::RangeInclusive<usize>) -> LimitSummary {
        let conns: Vec<_> =
            self.conns().into_iter().filter(|c| generations.contains(&c.generation)).collect();
        let posts = self.counts.posts.lock().unwrap();
        LimitSummary {
            connections: conns.len(),
            punished: conns.iter().filter(|c| c.punished).count(),
            answered: self.counts.answered_gets.load(Ordering::SeqCst)
                + self.counts.answered_posts.load(Ordering::SeqCst),
            refused: self.counts.refused_gets.load(Ordering::SeqCst)
                + self.counts.refused_posts.load(Ordering::SeqCst),
            refused_posts: self.counts.refused_posts.load(Ordering::SeqCst),
            posts_twice: posts.values().map(|n| n - 1).sum(),
            resets: conns.iter().map(|c| c.resets).sum(),
            most_requests: conns.iter().map(|c| c.requests).max().unwrap_or(0),
            most_resets: conns.iter().map(|c| c.resets).max().unwrap_or(0),
        }
    }

    /// What it saw, on every connection.
    pub fn summary(&self) -> LimitSummary {
        self.summary_of(0..=usize::MAX)
    }
}

/// A `200` head (HPACK static index 8) that leaves its stream open.
fn open_head(id: u32) -> Vec<u8> {
    frame(0x1, 0x4, id, &[0x88])
}

/// Whether an HPACK header block starts with `:method: POST` (static index
/// 3, as h2 encodes it first).
fn is_post(block: &[u8]) -> bool {
    block.first() == Some(&0x83)
}

async fn limit_connection(
    mut stream: TcpStream,
    conn: usize,
    generation: usize,
    punish: Punish,
    mut restarted: tokio::sync::watch::Receiver<usize>,
    counts: Arc<LimitCounts>,
) -> std::io::Result<()> {
    let mut preface = [0u8; 24];
    stream.read_exact(&mut preface).await?;
    assert_eq!(&preface, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "the client preface");
    stream.write_all(&frame(0x4, 0, 0, &[])).await?;
    let limit = counts.conns.lock().unwrap()[conn].limit;
    let record = |f: &dyn Fn(&mut LimitConn)| f(&mut counts.conns.lock().unwrap()[conn]);
    // Requests being received: whether a POST, and its body so far.
    let mut arriving: std::collections::HashMap<u32, (bool, Vec<u8>)> = Default::default();
    let (mut resets, mut refusals, mut last_seen) = (0usize, 0usize, 0u32);
    let mut frames = Frames::default();
    let mut restart_seen = false;
    // Once a GOAWAY went: its last stream id, and when the connection
    // closes (the requests at or below that id that were still arriving
    // are answered in the meantime; those above it are never processed).
    let mut closing: Option<(u32, tokio::time::Instant)> = None;
    loop {
        let deadline = closing.map(|(_, at)| at);
        let next = tokio::select! {
            frame = frames.next(&mut stream) => Some(frame),
            () = async { tokio::time::sleep_until(deadline.unwrap()).await }, if deadline.is_some() => {
                return Ok(());
            }
            changed = restarted.changed(), if !restart_seen => {
                restart_seen = changed.is_err() || *restarted.borrow() > generation;
                None
            }
        };
        let Some(next) = next else {
            if restart_seen && closing.is_none() {
                closing = Some(go_away_then_close(&mut stream, last_seen, NO_ERROR).await?);
            }
            continue;
        };
        let (kind, flags, id, payload) = next?;
        let ended = match kind {
            0x4 if flags & 0x1 == 0 => {
                stream.write_all(&frame(0x4, 0x1, 0, &[])).await?;
                false
            }
            0x6 if flags & 0x1 == 0 => {
                stream.write_all(&frame(0x6, 0x1, 0, &payload)).await?;
                false
            }
            0x1 if closing.is_some_and(|(last, _)| id > last) => false,
            0x1 => {
                // A padded or prioritised block is not what h2 sends here.
                arriving.insert(id, (is_post(&payload), Vec::new()));
                last_seen = last_seen.max(id);
                record(&|c| c.resets_before.push(resets));
                flags & 0x1 != 0
            }
            0x0 => {
                if let Some((_, body)) = arriving.get_mut(&id) {
                    body.extend_from_slice(&payload);
                }
                if !payload.is_empty() {
                    let credit = (payload.len() as u32).to_be_bytes();
                    stream.write_all(&frame(0x8, 0, 0, &credit)).await?;
                    stream.write_all(&frame(0x8, 0, id, &credit)).await?;
                }
                flags & 0x1 != 0
            }
            0x3 => {
                arriving.remove(&id);
                resets += 1;
                record(&|c| c.resets += 1);
                if punish == Punish::GoAway && closing.is_none() && limit.is_some_and(|l| resets > l) {
                    record(&|c| c.punished = true);
                    closing = Some(go_away_then_close(&mut stream, last_seen, ENHANCE_YOUR_CALM).await?);
                }
                false
            }
            _ => false,
        };
        if !ended {
            continue;
        }
        let Some((post, body)) = arriving.remove(&id) else { continue };
        record(&|c| c.requests += 1);
        if punish == Punish::Refuse && closing.is_none() && limit.is_some_and(|l| resets > l) {
            record(&|c| c.punished = true);
            let refused = if post { &counts.refused_posts } else { &counts.refused_gets };
            refused.fetch_add(1, Ordering::SeqCst);
            stream.write_all(&frame(0x3, 0, id, &ENHANCE_YOUR_CALM.to_be_bytes())).await?;
            refusals += 1;
            if refusals == REFUSALS_BEFORE_GOAWAY {
                closing = Some(go_away_then_close(&mut stream, last_seen, ENHANCE_YOUR_CALM).await?);
            }
            continue;
        }
        if post {
            *counts.posts.lock().unwrap().entry(body).or_insert(0) += 1;
            counts.answered_posts.fetch_add(1, Ordering::SeqCst);
        } else {
            counts.answered_gets.fetch_add(1, Ordering::SeqCst);
        }
        stream.write_all(&open_head(id)).await?;
    }
}

/// Sends GOAWAY with `code` whose last stream id is `last` (the highest the
/// client opened so far: each is answered, or refused, once it arrived
/// whole): the connection closes 200 ms later.
async fn go_away_then_close(
    stream: &mut TcpStream,
    last: u32,
    code: u32,
) -> std::io::Result<(u32, tokio::time::Instant)> {
    stream.write_all(&go_away(last, code)).await?;
    stream.flush().await?;
    Ok((last, tokio::time::Instant::now() + Duration::from_millis(200)))
}
