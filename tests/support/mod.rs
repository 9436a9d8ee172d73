//! Test servers and clients shared by the integration tests.
//!
//! - [`RawServer`]: raw HTTP/1.1 over TCP on `127.0.0.1:0` (nodelay), where a
//!   test scripts every byte of each response, and the server counts the
//!   connections it accepts.
//! - [`client`]: hyper-util's legacy client behind a connector that counts
//!   the connections it opens.
//! - [`body_bytes`]: the deterministic content every body carries, so a test
//!   can tell whether bytes of one response showed up in another.
//! - [`drop_unread`], [`wait_for`] (and [`wait_blocking`] for tests that
//!   drive runtimes of their own), [`settle`]: early drops and waits with a
//!   deadline.
//! - [`Sampler`]: the largest `in_flight` seen while a test runs.
//! - [`h2`]: HTTP/2 servers (hyper's with scripted bodies, and one that
//!   speaks the frames itself to refuse streams exactly).
#![allow(dead_code, unreachable_pub)]

pub mod h2;
pub mod idle;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use drain_on_drop::{DrainSnapshot, DrainStats};
use http::{StatusCode, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{HttpConnector, HttpInfo};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tower::{Service, ServiceExt};

pub const KIB: usize = 1024;
pub const MIB: usize = 1024 * KIB;

/// How long a test waits for what should happen at once, or right after a
/// time budget runs out. Only a deadline: every wait returns as soon as its
/// condition holds, so it is generous (2 cores, a debug build, the other
/// tests of the binary running in parallel).
pub const SLACK: Duration = Duration::from_secs(5);

/// A time budget no honest drain in these tests reaches: a test that
/// expects drains to reach the end of their bodies (or connections to be
/// reused) gives the layer this, so that a slow machine cannot turn a drain
/// into `over_time`, unless the time budget is what it tests.
pub const SECONDS: Duration = Duration::from_secs(30);

/// Asserts the connection-count bound of a test that drops bodies early
/// with the layer and without draining (a layer with `max_bytes(0)`: hyper
/// alone), in the same run: the layer keeps at least half of the
/// connections hyper alone loses beyond `control`, what the same requests
/// cost when every body is read to its end (0 where the test has no such
/// control). Use it only where hyper alone loses most connections, and only
/// after asserting that every drain reached the end of its body, with
/// [`SECONDS`] of time budget.
///
/// Why half holds on any machine: every drain reached its end, so every
/// connection went back to the pool, and hyper-util dials only when a
/// checkout finds no idle connection. A sequential caller leaves busy only
/// the connections whose drains still run (or are on their way back to the
/// pool), so for the layer to lose half of what hyper alone loses, about
/// that many drains of bodies the local server has already sent would have
/// to be running at once, while the caller went through as many round
/// trips on the same runtime. Tokio runs woken tasks in turn: a busy
/// machine slows the caller and the drains alike, and the extra dials seen
/// here stay at a few per run (hyper-util's checkout race, which the
/// read-to-end control shows too). A layer that stops draining, or whose
/// drains give up, loses about as many as hyper alone and fails.
#[track_caller]
pub fn assert_keeps_half(what: &str, layer: usize, alone: usize, control: usize) {
    let bound = keeps_half_bound(alone, control);
    assert!(
        layer <= bound,
        "{what}: with the layer {layer} connections, at most {bound} expected (read-to-end control \
         {control}, hyper alone {alone}: the layer keeps at least half of what hyper alone loses)"
    );
}

/// The bound of [`assert_keeps_half`]: `control` plus half of what hyper
/// alone lost beyond it.
pub fn keeps_half_bound(alone: usize, control: usize) -> usize {
    control + alone.saturating_sub(control) / 2
}

/// Byte `i` of the body served for `seed`: a pattern that differs between
/// bodies and positions, so a misplaced byte is caught.
pub fn body_byte(seed: u64, i: u64) -> u8 {
    (seed.wrapping_mul(31).wrapping_add(i) % 251) as u8
}

/// The whole body served for `seed` with `len` bytes.
pub fn body_bytes(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| body_byte(seed, i)).collect()
}

/// One step of a scripted response.
#[derive(Clone, Debug)]
pub enum Step {
    /// Write these bytes and flush.
    Write(Vec<u8>),
    /// Wait this long before the next step.
    Sleep(Duration),
    /// Write chunked frames of `chunk` bytes carrying `len` body bytes,
    /// without the final `0\r\n\r\n`.
    Chunks { seed: u64, len: usize, chunk: usize },
    /// Write `body_bytes(seed, len)` as raw bytes, `piece` bytes at a time,
    /// waiting `every` between pieces (a slow link).
    Paced { seed: u64, len: usize, piece: usize, every: Duration },
    /// Send chunks of this size forever (until the write fails).
    Forever { chunk: usize, every: Duration },
    /// Close the connection (FIN) and stop serving it.
    Close,
    /// Close with RST (linger 0) and stop serving it.
    Reset,
    /// Stop writing but keep the connection open until the client closes it.
    Hang,
    /// Wait until the test sets this flag (its go-ahead), however long that
    /// takes: a step that happens after something the test did, whatever
    /// the speed of the machine.
    Until(Arc<AtomicBool>),
}

/// The request line the server received.
#[derive(Clone, Debug)]
pub struct Head {
    pub method: String,
    pub path: String,
    pub headers: String,
    /// Requests served on this connection before this one.
    pub nth: usize,
}

type Handler = dyn Fn(&Head) -> Vec<Step> + Send + Sync;

/// A raw HTTP/1.1 server on `127.0.0.1:0`.
pub struct RawServer {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    /// Connections whose serving loop ended because a write failed.
    pub write_failures: Arc<AtomicUsize>,
    /// Connections currently open at the server.
    pub open: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl RawServer {
    /// Starts a server that answers every request with the steps `handler` returns.
    pub async fn start(handler: impl Fn(&Head) -> Vec<Step> + Send + Sync + 'static) -> RawServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let write_failures = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicUsize::new(0));
        let handler: Arc<Handler> = Arc::new(handler);
        let task = tokio::spawn({
            let (accepted, write_failures, open) = (accepted.clone(), write_failures.clone(), open.clone());
            async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        return;
                    };
                    stream.set_nodelay(true).unwrap();
                    accepted.fetch_add(1, Ordering::SeqCst);
                    open.fetch_add(1, Ordering::SeqCst);
                    let (handler, write_failures, open) =
                        (handler.clone(), write_failures.clone(), open.clone());
                    tokio::spawn(async move {
                        if serve(stream, &*handler).await.is_err() {
                            write_failures.fetch_add(1, Ordering::SeqCst);
                        }
                        open.fetch_sub(1, Ordering::SeqCst);
                    });
                }
            }
        });
        RawServer { addr, accepted, write_failures, open, task }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    pub fn uri(&self, path: &str) -> Uri {
        format!("http://{}{}", self.addr, path).parse().unwrap()
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A listener on `addr` (a port a server of the test listened on before:
/// a restart), with `SO_REUSEADDR`; tried again for a while if the port is
/// in use (an outgoing connection of another test may hold it briefly).
pub async fn retry_bind(addr: SocketAddr) -> TcpListener {
    let deadline = Instant::now() + SLACK;
    loop {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_reuseaddr(true).unwrap();
        match socket.bind(addr).and_then(|()| socket.listen(128)) {
            Ok(listener) => return listener,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("listening on {addr}: {e}"),
        }
    }
}

/// A server on `127.0.0.1:0` for hyper's own server connections: hands each
/// connection it accepts to `serve` on a task of its own. Returns its address
/// and the number of connections accepted so far.
pub async fn accept_each<F, Fut>(serve: F) -> (SocketAddr, Arc<AtomicUsize>)
where
    F: Fn(TokioIo<TcpStream>) -> Fut + Send + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve(TokioIo::new(stream)));
        }
    });
    (addr, accepted)
}

/// Serves one connection until the client closes it or a step ends it.
/// `Err` means a write failed (the client went away mid-response).
async fn serve(mut stream: TcpStream, handler: &Handler) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut served = 0;
    loop {
        let Some(mut head) = read_head(&mut stream, &mut buf).await else {
            return Ok(());
        };
        head.nth = served;
        served += 1;
        for step in handler(&head) {
            match step {
                Step::Write(bytes) => stream.write_all(&bytes).await?,
                Step::Sleep(d) => tokio::time::sleep(d).await,
                Step::Chunks { seed, len, chunk } => {
                    let body = body_bytes(seed, len);
                    for part in body.chunks(chunk.max(1)) {
                        let mut frame = format!("{:x}\r\n", part.len()).into_bytes();
                        frame.extend_from_slice(part);
                        frame.extend_from_slice(b"\r\n");
                        stream.write_all(&frame).await?;
                    }
                }
                Step::Paced { seed, len, piece, every } => {
                    let body = body_bytes(seed, len);
                    for part in body.chunks(piece.max(1)) {
                        stream.write_all(part).await?;
                        tokio::time::sleep(every).await;
                    }
                }
                Step::Forever { chunk, every } => {
                    let mut frame = format!("{chunk:x}\r\n").into_bytes();
                    frame.extend(std::iter::repeat_n(b'x', chunk));
                    frame.extend_from_slice(b"\r\n");
                    loop {
                        stream.write_all(&frame).await?;
                        tokio::time::sleep(every).await;
                    }
                }
                Step::Close => {
                    let _ = stream.shutdown().await;
                    return Ok(());
                }
                Step::Reset => {
                    // Linger 0 makes the close below send RST; the blocking
                    // caveat of the deprecation does not apply to a zero linger.
                    #[allow(deprecated)]
                    let _ = stream.set_linger(Some(Duration::ZERO));
                    return Ok(());
                }
                Step::Until(go) => {
                    while !go.load(Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
                Step::Hang => {
                    // Wait for the client to close; discard whatever it sends.
                    let mut sink = [0u8; 1024];
                    while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
                    return Ok(());
                }
            }
        }
    }
}

/// Reads one request head (and discards a `Content-Length` request body).
async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Head> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let text = String::from_utf8_lossy(&buf[..end]).into_owned();
            buf.drain(..end + 4);
            let mut lines = text.split("\r\n");
            let mut first = lines.next()?.split(' ');
            let method = first.next()?.to_string();
            let path = first.next()?.to_string();
            let headers = lines.collect::<Vec<_>>().join("\n").to_ascii_lowercase();
            let body_len = content_length_of(&headers);
            while buf.len() < body_len {
                let mut chunk = [0u8; 8192];
                let n = stream.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            buf.drain(..body_len);
            return Some(Head { method, path, headers, nth: 0 });
        }
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The `Content-Length` in a lowercased request head (0 without one).
pub fn content_length_of(head: &str) -> usize {
    head.lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// A `200 OK` response head with `Content-Length: len`.
pub fn cl_head(len: usize) -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\n\r\n").into_bytes()
}

/// Steps for a `Content-Length` response carrying `body_bytes(seed, len)`.
pub fn content_length(seed: u64, len: usize) -> Vec<Step> {
    let mut out = cl_head(len);
    out.extend(body_bytes(seed, len));
    vec![Step::Write(out)]
}

/// A server answering `/big` with 1 MiB (over the default byte budget) and
/// every other path with `small` bytes, both with `Content-Length`.
pub async fn big_or_small(small: usize) -> RawServer {
    RawServer::start(move |h| match h.path.as_str() {
        "/big" => content_length(1, MIB),
        _ => content_length(2, small),
    })
    .await
}

/// Steps for a chunked response carrying `body_bytes(seed, len)` in chunks of `chunk`.
pub fn chunked(seed: u64, len: usize, chunk: usize) -> Vec<Step> {
    vec![
        Step::Write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec()),
        Step::Chunks { seed, len, chunk },
        Step::Write(b"0\r\n\r\n".to_vec()),
    ]
}

/// The value of query parameter `name` in `path` (`/x?name=12`).
pub fn query(path: &str, name: &str) -> Option<u64> {
    let (_, q) = path.split_once('?')?;
    q.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == name).then(|| v.parse().ok()).flatten()
    })
}

/// An `HttpConnector` (nodelay) that counts the connections it opens.
///
/// Two options for the tests that need them: every dial can take longer
/// ([`with_setup`](Self::with_setup), a far origin), and a test can hold
/// every dial ([`hold`](Self::hold)) so that only a pooled connection can
/// serve a request.
#[derive(Clone)]
pub struct CountingConnector {
    inner: HttpConnector,
    connects: Arc<AtomicUsize>,
    hold: Arc<AtomicBool>,
    setup: Duration,
}

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl CountingConnector {
    pub fn new() -> Self {
        let mut inner = HttpConnector::new();
        inner.set_nodelay(true);
        CountingConnector {
            inner,
            connects: Arc::new(AtomicUsize::new(0)),
            hold: Arc::new(AtomicBool::new(false)),
            setup: Duration::ZERO,
        }
    }

    /// Makes every dial take `setup` longer than loopback, as a TCP plus TLS
    /// handshake across a continent would.
    pub fn with_setup(mut self, setup: Duration) -> Self {
        self.setup = setup;
        self
    }

    /// Holds (or releases) every dial: a held dial waits until released,
    /// then fails without opening anything.
    pub fn hold(&self, on: bool) {
        self.hold.store(on, Ordering::SeqCst);
    }

    /// Connections opened so far.
    pub fn count(&self) -> usize {
        self.connects.load(Ordering::SeqCst)
    }
}

impl Service<Uri> for CountingConnector {
    type Response = <HttpConnector as Service<Uri>>::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let (connects, hold, setup) = (self.connects.clone(), self.hold.clone(), self.setup);
        let fut = self.inner.call(uri);
        Box::pin(async move {
            if hold.load(Ordering::SeqCst) {
                // Held: wait until released (bounded), then refuse, so that
                // a dial that lost the race to the pool never opens anything.
                waited(2 * SLACK, || !hold.load(Ordering::SeqCst)).await;
                return Err("dial held: the test expected a pooled connection".into());
            }
            if !setup.is_zero() {
                tokio::time::sleep(setup).await;
            }
            let conn = fut.await?;
            connects.fetch_add(1, Ordering::SeqCst);
            Ok(conn)
        })
    }
}

pub type TestClient = Client<CountingConnector, Empty<Bytes>>;

/// hyper-util's pooled client over a counting connector.
pub fn client() -> (TestClient, CountingConnector) {
    let connector = CountingConnector::new();
    let client = Client::builder(TokioExecutor::new()).build(connector.clone());
    (client, connector)
}

/// A GET request for `uri` with an empty body.
pub fn get(uri: Uri) -> http::Request<Empty<Bytes>> {
    http::Request::get(uri).body(Empty::new()).unwrap()
}

/// The client-side address of the connection that carried `res`: equal
/// addresses mean the same TCP connection.
pub fn conn<B>(res: &http::Response<B>) -> SocketAddr {
    res.extensions().get::<HttpInfo>().expect("HttpConnector puts HttpInfo on every response").local_addr()
}

/// Sends `req` through `svc`, expects a 200, and drops the response body
/// unread; returns the connection it came on. Does not wait for the drain.
pub async fn drop_unread<S, Req, B>(svc: &mut S, req: http::Request<Req>) -> SocketAddr
where
    S: Service<http::Request<Req>, Response = http::Response<B>>,
    S::Error: std::fmt::Debug,
{
    let what = format!("{} {}", req.method(), req.uri());
    let ready = svc.ready().await.unwrap_or_else(|e| panic!("{what}: the service is not ready: {e:?}"));
    let res =
        ready.call(req).await.unwrap_or_else(|e| panic!("{what}: the response head should arrive: {e:?}"));
    assert_eq!(res.status(), StatusCode::OK, "{what}: the caller sees the scripted status");
    let at = conn(&res);
    drop(res);
    at
}

/// Whether `cond` came to hold within `deadline`, polling every millisecond.
pub async fn waited(deadline: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    true
}

/// Waits until `cond` holds, or panics with `what` after `deadline`.
pub async fn wait_for(what: &str, deadline: Duration, cond: impl FnMut() -> bool) {
    assert!(waited(deadline, cond).await, "timed out after {deadline:?} waiting for {what}");
}

/// [`wait_for`] on a plain thread, for tests that drive runtimes of their own.
pub fn wait_blocking(what: &str, deadline: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < deadline, "timed out after {deadline:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits until no drain runs, at most `max_time` (the layer's time budget)
/// plus [`SLACK`], and returns the counters then.
pub async fn settle(stats: &DrainStats, max_time: Duration) -> DrainSnapshot {
    let deadline = max_time.saturating_add(SLACK);
    assert!(stats.wait_idle(deadline).await, "every drain should end within max_time + SLACK: {stats:?}");
    stats.snapshot()
}

/// [`settle`] on a plain thread, for tests that drive runtimes of their own.
pub fn settle_blocking(stats: &DrainStats, max_time: Duration) -> DrainSnapshot {
    let deadline = max_time.saturating_add(SLACK);
    assert!(stats.wait_idle_blocking(deadline), "every drain should end within max_time + SLACK: {stats:?}");
    stats.snapshot()
}

/// Reads a whole body, returning its bytes.
pub async fn read_all<B>(body: B) -> Result<Vec<u8>, B::Error>
where
    B: http_body::Body,
{
    Ok(body.collect().await?.to_bytes().to_vec())
}

/// Reads one data frame (skipping trailers), returning its length, or `None` at the end.
pub async fn read_one_frame<B>(body: &mut B) -> Option<usize>
where
    B: http_body::Body + Unpin,
    B::Error: std::fmt::Debug,
{
    loop {
        let frame = body.frame().await?.expect("frame");
        if let Ok(data) = frame.into_data() {
            use bytes::Buf;
            return Some(data.remaining());
        }
    }
}

/// Samples `in_flight` on a plain thread, as fast as it can, until stopped;
/// returns the largest value seen.
pub struct Sampler {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl Sampler {
    pub fn start(stats: DrainStats) -> Sampler {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || {
                let mut max = 0;
                while !stop.load(Ordering::SeqCst) {
                    max = max.max(stats.snapshot().in_flight);
                    std::thread::yield_now();
                }
                max
            }
        });
        Sampler { stop, thread }
    }

    pub fn stop(self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap()
    }
}

/// A body of `left` bytes sent as `chunk`-byte frames (each an HTTP/2 DATA
/// frame of its own), its length known, its end found only by polling past
/// the last chunk (as hyper's stream bodies: END_STREAM on an empty DATA
/// frame).
pub struct Chunks {
    pub left: usize,
    pub chunk: usize,
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let n = self.left.min(self.chunk);
        self.left -= n;
        Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from(vec![b'h'; n])))))
    }
}

/// Serves HTTP/2 (prior knowledge, or whatever `io` negotiated) on one
/// connection: every request answered with `len` bytes in 16 KiB frames,
/// `Content-Length` set.
pub async fn serve_h2<I>(io: I, len: usize)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |_req| async move {
        let res = http::Response::builder()
            .header("content-length", len)
            .body(Chunks { left: len, chunk: 16 * KIB })
            .unwrap();
        Ok::<_, std::convert::Infallible>(res)
    });
    let _ =
        hyper::server::conn::http2::Builder::new(TokioExecutor::new()).serve_connection(io, service).await;
}

/// An h2c server on `127.0.0.1:0` (TCP_NODELAY) answering with `len` bytes
/// in 16 KiB frames; its address and the connections it accepted.
pub async fn h2c_server(len: usize) -> (SocketAddr, Arc<AtomicUsize>) {
    accept_each(move |io: TokioIo<TcpStream>| {
        let _ = io.inner().set_nodelay(true);
        serve_h2(io, len)
    })
    .await
}

/// What a run of [`h2_traffic`] saw.
#[derive(Debug, Default)]
pub struct H2Run {
    pub sent: usize,
    pub failed: usize,
    /// Requests that failed because the client's own connection gave up
    /// with GOAWAY `too_many_internal_resets`.
    pub too_many_resets: usize,
    pub first_error: Option<String>,
    /// Failures by kind: the error with its stream ids left out, so that
    /// failures of one kind read the same.
    pub kinds: std::collections::BTreeMap<String, usize>,
    /// The longest a request took to its head (for printing, never asserted).
    pub slowest: Duration,
}

/// `e` with the number of every `StreamId(n)` left out.
fn without_stream_ids(e: &str) -> String {
    let mut out = String::new();
    let mut rest = e;
    while let Some(at) = rest.find("StreamId(") {
        let (head, tail) = rest.split_at(at + "StreamId(".len());
        out.push_str(head);
        rest = tail.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    out.push_str(rest);
    out
}

/// `callers` tasks sharing `svc` send GETs for `uri` until `requests` were
/// sent (or, with `until_too_many_resets`, until the first request lost to
/// `too_many_internal_resets`), each response dropped right after its head.
pub async fn h2_traffic<S, B>(
    svc: S,
    uri: Uri,
    callers: usize,
    requests: usize,
    until_too_many_resets: bool,
) -> H2Run
where
    S: Service<http::Request<Empty<Bytes>>, Response = http::Response<B>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: std::fmt::Debug + Send,
    B: Send + 'static,
{
    let tickets = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let run = Arc::new(std::sync::Mutex::new(H2Run::default()));
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let (mut svc, uri, tickets, stop, run) =
            (svc.clone(), uri.clone(), tickets.clone(), stop.clone(), run.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) && tickets.fetch_add(1, Ordering::SeqCst) < requests {
                let start = Instant::now();
                let result = match svc.ready().await {
                    Ok(ready) => ready.call(get(uri.clone())).await,
                    Err(e) => Err(e),
                };
                let took = start.elapsed();
                let mut run = run.lock().unwrap();
                run.sent += 1;
                run.slowest = run.slowest.max(took);
                if let Err(e) = result {
                    let e = format!("{e:?}");
                    run.failed += 1;
                    if e.contains("too_many_internal_resets") {
                        run.too_many_resets += 1;
                        if until_too_many_resets {
                            stop.store(true, Ordering::SeqCst);
                        }
                    }
                    *run.kinds.entry(without_stream_ids(&e)).or_insert(0) += 1;
                    run.first_error.get_or_insert(e);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    Arc::try_unwrap(run).unwrap().into_inner().unwrap()
}

/// The message of every panic that means Node.js is missing or broken.
pub const NODE_REQUIRED: &str = "Node.js (node, v20 or later, on PATH) is required by the HTTP/2 tests \
     against a real Node server (apt-get install nodejs); they fail without it, they never skip";

/// Node's own HTTP/2 server (`tests/node/h2server.js`, cleartext with prior
/// knowledge), a child process on a free port of 127.0.0.1, with counters
/// read at the server ([`stats`](Self::stats)). Killed and reaped when
/// dropped; it also exits when its stdin closes, should the test process be
/// killed first.
pub struct NodeH2 {
    pub port: u16,
    child: std::process::Child,
}

impl NodeH2 {
    /// Starts `node tests/node/h2server.js args...` (`--max-streams N`, or
    /// nothing for Node's defaults) and waits for its `READY <port>`.
    /// Panics with [`NODE_REQUIRED`] when Node cannot run it.
    ///
    /// With `NODE_H2_TAP=1` in the environment, for investigations, the
    /// server runs with `--tap`: clients go through a relay that counts the
    /// frames each way ([`NodeStats::tap`]), one more hop with buffers of
    /// its own.
    pub fn start(args: &[&str]) -> NodeH2 {
        use std::io::BufRead;
        use std::process::{Command, Stdio};

        let tap = std::env::var_os("NODE_H2_TAP").is_some_and(|v| v == "1");
        let args: Vec<&str> = args.iter().copied().chain(tap.then_some("--tap")).collect();

        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node/h2server.js");
        let mut child = Command::new("node")
            .arg(&script)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("could not run `node {}`: {e}. {NODE_REQUIRED}", script.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let read = std::io::BufReader::new(stdout).read_line(&mut line).map(|_| line);
            let _ = tx.send(read);
        });
        // Node starts in well under a second; the deadline is for a loaded machine.
        let line = rx.recv_timeout(4 * SLACK);
        let mut node = NodeH2 { port: 0, child };
        let port = match &line {
            Ok(Ok(line)) => line.trim().strip_prefix("READY ").and_then(|p| p.parse().ok()),
            _ => None,
        };
        let Some(port) = port else {
            let status = node.child.try_wait();
            panic!(
                "`node {} {}` did not print READY <port> (read {line:?}, exit status {status:?}). {NODE_REQUIRED}",
                script.display(),
                args.join(" ")
            );
        };
        node.port = port;
        node
    }

    pub fn uri(&self, path: &str) -> Uri {
        format!("http://127.0.0.1:{}{}", self.port, path).parse().unwrap()
    }

    /// The server's counters now, from `GET /stats` over HTTP/2 with a plain
    /// hyper-util client of its own (a connection the counters leave out).
    pub async fn stats(&self) -> NodeStats {
        let client: Client<HttpConnector, Empty<Bytes>> =
            Client::builder(TokioExecutor::new()).http2_only(true).build_http();
        let body = tokio::time::timeout(4 * SLACK, async {
            let res = client.request(get(self.uri("/stats"))).await.map_err(|e| format!("{e:?}"))?;
            let body = read_all(res.into_body()).await.map_err(|e| format!("{e:?}"))?;
            String::from_utf8(body).map_err(|e| format!("{e}"))
        })
        .await
        .unwrap_or_else(|_| Err("no answer".to_string()))
        .unwrap_or_else(|e| panic!("GET /stats from Node's HTTP/2 server on port {}: {e}", self.port));
        NodeStats::parse(&body)
    }

    /// Polls [`stats`](Self::stats) until `cond` holds or `deadline` passes;
    /// whether it held, and the last counters read.
    pub async fn wait_stats(
        &self,
        deadline: Duration,
        mut cond: impl FnMut(&NodeStats) -> bool,
    ) -> (bool, NodeStats) {
        let start = Instant::now();
        loop {
            let stats = self.stats().await;
            if cond(&stats) {
                return (true, stats);
            }
            if start.elapsed() >= deadline {
                return (false, stats);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for NodeH2 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The counters of `tests/node/h2server.js` (its header says what each
/// counts); requests to `/stats` and their connections are left out.
#[derive(Clone, Debug, Default)]
pub struct NodeStats {
    pub streams_opened: u64,
    pub streams_open: u64,
    pub streams_max_open: u64,
    /// Streams that ended normally (both sides done).
    pub streams_ended: u64,
    /// Streams closed by the client's RST_STREAM, by code.
    pub rst_cancel: u64,
    pub rst_stream_closed: u64,
    pub rst_no_error: u64,
    pub rst_other: u64,
    pub rst_other_codes: String,
    pub streams_closed_by_session: u64,
    pub stream_errors: u64,
    /// Streams the client opened that Node refused before they reached
    /// JavaScript (gaps in each session's stream ids).
    pub refused: u64,
    pub sessions: u64,
    pub sessions_closed: u64,
    pub session_errors: u64,
    pub sessions_broken: u64,
    pub goaways_received: u64,
    pub goaway_codes: String,
    pub frame_errors: u64,
    pub bytes_written: u64,
    /// Sessions closed for being idle (`--idle-timeout`).
    pub idle_closes: u64,
    pub errors: String,
    /// The frames the `--tap` relay saw (empty without it).
    pub tap: String,
}

impl NodeStats {
    /// Streams the client closed with RST_STREAM, whatever the code.
    pub fn client_resets(&self) -> u64 {
        self.rst_cancel + self.rst_stream_closed + self.rst_no_error + self.rst_other
    }

    /// Parses the flat JSON object of `/stats` (numbers and strings).
    pub fn parse(json: &str) -> NodeStats {
        let fields = flat_json(json).unwrap_or_else(|| panic!("/stats: not a flat JSON object: {json}"));
        let num = |key: &str| -> u64 {
            let v = fields.get(key).unwrap_or_else(|| panic!("/stats has no {key}: {json}"));
            v.parse().unwrap_or_else(|_| panic!("/stats: {key} is {v:?}, not a count: {json}"))
        };
        let text = |key: &str| fields.get(key).cloned().unwrap_or_default();
        NodeStats {
            streams_opened: num("streams_opened"),
            streams_open: num("streams_open"),
            streams_max_open: num("streams_max_open"),
            streams_ended: num("streams_ended"),
            rst_cancel: num("rst_cancel"),
            rst_stream_closed: num("rst_stream_closed"),
            rst_no_error: num("rst_no_error"),
            rst_other: num("rst_other"),
            rst_other_codes: text("rst_other_codes"),
            streams_closed_by_session: num("streams_closed_by_session"),
            stream_errors: num("stream_errors"),
            refused: num("refused"),
            sessions: num("sessions"),
            sessions_closed: num("sessions_closed"),
            session_errors: num("session_errors"),
            sessions_broken: num("sessions_broken"),
            goaways_received: num("goaways_received"),
            goaway_codes: text("goaway_codes"),
            frame_errors: num("frame_errors"),
            bytes_written: num("bytes_written"),
            idle_closes: num("idle_closes"),
            errors: text("errors"),
            tap: text("tap"),
        }
    }
}

/// The fields of a flat JSON object whose values are numbers or strings,
/// each value as text (strings unescaped); `None` if it is not one.
fn flat_json(json: &str) -> Option<std::collections::BTreeMap<String, String>> {
    fn string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<String> {
        let mut out = String::new();
        loop {
            match chars.next()? {
                '"' => return Some(out),
                '\\' => match chars.next()? {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    'u' => {
                        let hex: String = (0..4).filter_map(|_| chars.next()).collect();
                        out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?).unwrap_or('?'));
                    }
                    c => out.push(c),
                },
                c => out.push(c),
            }
        }
    }
    let mut fields = std::collections::BTreeMap::new();
    let mut chars = json.trim().chars().peekable();
    if chars.next()? != '{' {
        return None;
    }
    loop {
        match chars.find(|c| !c.is_whitespace())? {
            '}' => return Some(fields),
            ',' => continue,
            '"' => {}
            _ => return None,
        }
        let key = string(&mut chars)?;
        if chars.find(|c| !c.is_whitespace())? != ':' {
            return None;
        }
        while chars.peek()?.is_whitespace() {
            chars.next();
        }
        let value = if *chars.peek()? == '"' {
            chars.next();
            string(&mut chars)?
        } else {
            let mut v = String::new();
            while let Some(&c) = chars.peek() {
                if c == ',' || c == '}' || c.is_whitespace() {
                    break;
                }
                v.push(c);
                chars.next();
            }
            v
        };
        fields.insert(key, value);
    }
}

/// Faults for the dial tests: a proxy that stalls handshakes, a listener
/// that closes unanswered, a scripted HTTP/2 server over any transport.
pub mod faults;

/// A connector whose connections say ALPN chose h2 over plain TCP, its
/// dials scripted and ordered by the test; an executor that holds a
/// connection's tasks unrun.
pub mod alpn;
