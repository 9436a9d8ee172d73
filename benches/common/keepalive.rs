//! The keepalive bench's race (issue 52): a pooled HTTP/1 connection meets
//! its server's idle timeout, and a request sent as the server closes it
//! fails before the server read it.
//!
//! Per server, [`idle_close`] first measures with raw TCP probes how long
//! after the end of a response the server closes an idle connection. Each
//! trial then has a client of its own ([`ClientKind`]): it sends request 1
//! (a GET of 64 KiB, dropped unread or read to its end), then request 2
//! (GET or POST) at the measured close + an offset ([`OFFSETS_US`]); it
//! sleeps to 3 ms before that instant, then spins. Trials are staggered and
//! run in parallel ([`run_batch`]). Every request carries a unique id
//! (query `id=N` and header `x-request-id`) that the server records, so
//! that [`evaluate`] can tell a request the server never saw from one it
//! processed twice.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, RetryRefusedLayer};
use http::{Request, Response, Uri};
use http_body::Body;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::{Service, ServiceBuilder, ServiceExt};

use super::BoxError;
use super::go::GoKeepaliveTrial;
use super::h1servers::{BODY_LEN, Seen};

/// Where request 2 goes, from the measured close: -5.5 ms to +5.5 ms, every
/// 1 ms (trial `i` takes `OFFSETS_US[i % 12]`). On loopback most failures
/// fall within -1.5..+2.5 ms of the close; the sweep is wider so that a
/// probe's estimate a few ms off still brackets it.
pub const OFFSETS_US: [i64; 12] =
    [-5500, -4500, -3500, -2500, -1500, -500, 500, 1500, 2500, 3500, 4500, 5500];

/// How long before its instant a trial stops sleeping and spins (tokio's
/// timer has 1 ms steps).
const SPIN: Duration = Duration::from_millis(3);

/// The guide's old advice, for [`ClientKind::GuideTimeout`].
pub const GUIDE_IDLE_TIMEOUT: Duration = Duration::from_millis(500);

/// The clients compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClientKind {
    /// hyper-util's legacy `Client` alone; request 1's body dropped unread.
    AloneDropped,
    /// hyper-util alone; request 1's body read to its end.
    AloneRead,
    /// The README quick start's stack: `DrainOnDropLayer::new()` over a
    /// `Client` built on `layer.observe(HttpConnector::new())`, the layer
    /// shared by every trial on a server (a long-lived service) after it
    /// saw one idle close of that server; body dropped.
    Stack,
    /// The same with `RetryRefusedLayer::new()` above, a layer of its own
    /// shared and warmed up the same way.
    StackRetry,
    /// First contact: the stack of [`ClientKind::StackRetry`] with a fresh
    /// layer per trial (nothing learned).
    FirstContact,
    /// Go 1.27.3's client (`goclient keepalive`): a Transport per trial,
    /// body closed unread (Go drains it).
    Go,
    /// The reuse check's control: the stack with hyper-util's
    /// `pool_idle_timeout` 500 ms (the guide's old advice), a fresh layer
    /// per trial.
    GuideTimeout,
}

impl ClientKind {
    /// The clients of the sweep run in Rust, in the order of the tables.
    pub const SWEEP: [ClientKind; 5] = [
        ClientKind::AloneDropped,
        ClientKind::AloneRead,
        ClientKind::Stack,
        ClientKind::StackRetry,
        ClientKind::FirstContact,
    ];

    /// Its name in the machine-readable lines.
    pub fn name(self) -> &'static str {
        match self {
            ClientKind::AloneDropped => "alone-dropped",
            ClientKind::AloneRead => "alone-read",
            ClientKind::Stack => "stack",
            ClientKind::StackRetry => "stack-retry",
            ClientKind::FirstContact => "first-contact",
            ClientKind::Go => "go",
            ClientKind::GuideTimeout => "stack-pool-idle-500ms",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            ClientKind::AloneDropped => "hyper-util alone, body dropped",
            ClientKind::AloneRead => "hyper-util alone, body read to its end",
            ClientKind::Stack => "README stack (layer shared, one idle close seen)",
            ClientKind::StackRetry => "same + RetryRefusedLayer",
            ClientKind::FirstContact => "first contact: + RetryRefusedLayer, fresh layer",
            ClientKind::Go => "Go 1.27.3's client (drains too)",
            ClientKind::GuideTimeout => "stack + pool_idle_timeout 500 ms (the guide's advice)",
        }
    }

    /// Whether requests go through a counting layer (below the retry,
    /// where there is one) or Go's trace, so that "sent again" is known.
    pub fn counts_attempts(self) -> bool {
        matches!(self, ClientKind::Stack | ClientKind::StackRetry | ClientKind::FirstContact | ClientKind::Go)
    }
}

/// Request 2's method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Method {
    Get,
    Post,
}

impl Method {
    pub const BOTH: [Method; 2] = [Method::Get, Method::Post];

    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }

    fn http(self) -> http::Method {
        match self {
            Method::Get => http::Method::GET,
            Method::Post => http::Method::POST,
        }
    }
}

/// Ids unique over the whole run; id 0 is the probes'.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// `n` fresh ids in a row: the first.
pub fn take_ids(n: u64) -> u64 {
    NEXT_ID.fetch_add(n, Ordering::SeqCst)
}

/// `METHOD base?id=N` with `x-request-id: N`; a POST carries a small body
/// (content-length).
fn request(method: Method, base: &str, id: u64) -> Request<Full<Bytes>> {
    let body = match method {
        Method::Get => Full::default(),
        Method::Post => Full::new(Bytes::from(format!("post {id}"))),
    };
    Request::builder()
        .method(method.http())
        .uri(format!("{base}?id={id}"))
        .header("x-request-id", id.to_string())
        .body(body)
        .expect("a valid request")
}

/// A server's idle close as raw TCP probes saw it.
#[derive(Clone, Debug)]
pub struct Close {
    /// The median of the probes: from the end of a response to the
    /// server's close.
    pub median: Duration,
    /// Every probe's, sorted.
    pub probes: Vec<Duration>,
    /// `FIN`, or how else the close came (`RST`).
    pub how: String,
    /// The `Keep-Alive` header of the response, empty without one.
    pub keep_alive: String,
}

impl Close {
    /// The probes' spread (largest - smallest).
    pub fn spread(&self) -> Duration {
        match (self.probes.first(), self.probes.last()) {
            (Some(a), Some(b)) => *b - *a,
            _ => Duration::ZERO,
        }
    }
}

/// The server's idle close: three raw TCP probes started 150 ms apart (so
/// that a moment of load on the machine delays one of them, not all three),
/// each a GET of `/ka?id=0` read to its end, then timed to the server's
/// close.
pub async fn idle_close(addr: SocketAddr) -> Result<Close, BoxError> {
    let probes: Vec<_> = (0..3u32)
        .map(|i| {
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(150) * i).await;
                probe(addr).await
            })
        })
        .collect();
    let mut results = Vec::new();
    for p in probes {
        results.push(p.await??);
    }
    results.sort_by_key(|r| r.0);
    let (median, how, keep_alive) = results[results.len() / 2].clone();
    let how = match results.iter().all(|r| r.1 == how) {
        true => how,
        false => results.iter().map(|r| r.1.as_str()).collect::<Vec<_>>().join("/"),
    };
    Ok(Close { median, probes: results.into_iter().map(|r| r.0).collect(), how, keep_alive })
}

async fn probe(addr: SocketAddr) -> Result<(Duration, String, String), BoxError> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    stream.write_all(b"GET /ka?id=0 HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-Id: 0\r\n\r\n").await?;
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let deadline = Duration::from_secs(10);
    let (keep_alive, need) = loop {
        let n = tokio::time::timeout(deadline, stream.read(&mut chunk)).await??;
        if n == 0 {
            return Err("the server closed before its response's head".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        if !head.starts_with("http/1.1 200") {
            return Err(format!("the probe was answered {:?}", head.lines().next()).into());
        }
        let header = |name: &str| {
            head.lines()
                .find_map(|l| l.strip_prefix(name).map(|v| v.trim_start_matches(':').trim().to_string()))
        };
        let length: usize =
            header("content-length").and_then(|v| v.parse().ok()).ok_or("no content-length")?;
        break (header("keep-alive").unwrap_or_default(), end + 4 + length);
    };
    while buf.len() < need {
        let n = tokio::time::timeout(deadline, stream.read(&mut chunk)).await??;
        if n == 0 {
            return Err("the server closed before its response's end".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let read_at = Instant::now();
    let how = match tokio::time::timeout(Duration::from_secs(30), stream.read(&mut chunk)).await {
        Err(_) => return Err("the server kept the idle connection open for 30 s".into()),
        Ok(Ok(0)) => "FIN".to_string(),
        Ok(Ok(n)) => return Err(format!("{n} bytes after the response").into()),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => "RST".to_string(),
        Ok(Err(e)) => return Err(e.into()),
    };
    Ok((read_at.elapsed(), how, keep_alive))
}

/// Picks the time between two trials' starts, 55 to 70 ms: the one that
/// puts request 2's instants (the close after a start, give or take the
/// offsets) farthest from any trial's request 1, so that no trial's
/// instant meets another's first exchange.
pub fn stagger_for(close: Duration) -> Duration {
    let c = close.as_secs_f64() * 1e3;
    let best = (55..=70u32)
        .max_by(|&a, &b| {
            let score = |s: u32| {
                let r = c % f64::from(s);
                r.min(f64::from(s) - r)
            };
            score(a).total_cmp(&score(b)).then(b.cmp(&a))
        })
        .unwrap_or(60);
    Duration::from_millis(u64::from(best))
}

/// One trial to run.
#[derive(Clone, Debug)]
pub struct Spec {
    pub client: ClientKind,
    pub method: Method,
    /// Its offset from the instant aimed at (for the report).
    pub offset_us: i64,
    /// When it starts, from the batch's start.
    pub start: Duration,
    /// From request 1's end to request 2.
    pub wait: Duration,
    /// Request 1's id; request 2's is the next.
    pub id: u64,
}

/// `trials` trials of each `(client, method)` of `cells`, interleaved
/// (trial `i` of every cell, then trial `i + 1`), `stagger` apart, request 2
/// at `at` + the offset `offsets_us[i % len]`.
pub fn plan(
    cells: &[(ClientKind, Method)],
    trials: usize,
    stagger: Duration,
    at: Duration,
    offsets_us: &[i64],
) -> Vec<Spec> {
    let first_id = take_ids(2 * (trials * cells.len()) as u64);
    let mut specs = Vec::new();
    for i in 0..trials {
        let offset_us = offsets_us[i % offsets_us.len()];
        let wait = match offset_us >= 0 {
            true => at + Duration::from_micros(offset_us as u64),
            false => at.saturating_sub(Duration::from_micros(offset_us.unsigned_abs())),
        };
        for &(client, method) in cells {
            let k = specs.len();
            specs.push(Spec {
                client,
                method,
                offset_us,
                start: stagger * k as u32,
                wait,
                id: first_id + 2 * k as u64,
            });
        }
    }
    specs
}

/// What request 2 of one trial met.
#[derive(Clone, Debug)]
pub struct Trial {
    pub client: ClientKind,
    pub method: Method,
    pub offset_us: i64,
    /// Request 2's id.
    pub id: u64,
    /// Connections the trial's client opened.
    pub connections: usize,
    /// Times request 2 went through the counting layer (below the retry),
    /// or connections Go gave it; `None` where nothing counts them.
    pub attempts: Option<usize>,
    /// `Ok`, or the error's kind (`request 1: ...` when request 1 failed).
    pub result: Result<(), String>,
}

impl Trial {
    /// A trial of Go's client.
    pub fn from_go(t: &GoKeepaliveTrial) -> Trial {
        Trial {
            client: ClientKind::Go,
            method: if t.method == "POST" { Method::Post } else { Method::Get },
            offset_us: t.offset_us,
            id: t.id,
            connections: t.connections,
            attempts: Some(t.attempts),
            result: t.result.clone().map_err(|e| match e.strip_prefix("first: ") {
                Some(first) => format!("request 1 {}", go_kind(first)),
                None => go_kind(&e),
            }),
        }
    }
}

/// The kind of a Go error: what follows its last `": "` (`EOF`,
/// `connection reset by peer`, ...).
fn go_kind(error: &str) -> String {
    error.rsplit(": ").next().unwrap_or(error).trim().to_string()
}

/// The layers a server's trials share ([`ClientKind::Stack`] and
/// [`ClientKind::StackRetry`]): one each, for every trial on the server.
#[derive(Clone)]
pub struct Layers {
    pub stack: DrainOnDropLayer,
    pub retry: DrainOnDropLayer,
}

impl Layers {
    pub fn new() -> Layers {
        Layers { stack: DrainOnDropLayer::new(), retry: DrainOnDropLayer::new() }
    }
}

impl Default for Layers {
    fn default() -> Self {
        Self::new()
    }
}

/// Lets each shared layer see one idle close of the server: a request
/// through the quick start's stack on that layer (body dropped), then the
/// connection left idle in the pool until past the measured close + 500
/// ms. Returns, per layer, the connections its observer had opened and the
/// requests it counted (1 and 1 when the warm-up went as meant).
pub async fn warm_up(layers: &Layers, base: &str, close: Duration) -> Result<Vec<(u64, u64)>, BoxError> {
    let mut clients = Vec::new();
    for layer in [&layers.stack, &layers.retry] {
        let client = Client::builder(TokioExecutor::new())
            .build::<_, Full<Bytes>>(layer.observe(HttpConnector::new()));
        let svc = ServiceBuilder::new().layer(layer.clone()).service(client);
        let res = svc.clone().oneshot(request(Method::Get, base, take_ids(1))).await?;
        drop(res); // drained in the background: the connection goes back to the pool
        clients.push(svc);
    }
    tokio::time::sleep(close + Duration::from_millis(500)).await;
    let seen = [&layers.stack, &layers.retry]
        .iter()
        .map(|l| {
            let r = l.stats().reuse();
            (r.connections_opened, r.requests)
        })
        .collect();
    drop(clients);
    Ok(seen)
}

/// hyper-util's `HttpConnector` (as `HttpConnector::new()`), counting the
/// connections it establishes.
#[derive(Clone)]
struct Counted {
    inner: HttpConnector,
    count: Arc<AtomicUsize>,
}

impl Service<Uri> for Counted {
    type Response = <HttpConnector as Service<Uri>>::Response;
    type Error = <HttpConnector as Service<Uri>>::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let count = self.count.clone();
        Box::pin(async move {
            let io = connecting.await?;
            count.fetch_add(1, Ordering::SeqCst);
            Ok(io)
        })
    }
}

/// Runs `specs` on the current runtime, each in a task of its own started
/// at its time; the trials in `specs`' order.
pub async fn run_batch(specs: Vec<Spec>, layers: &Layers, base: &str) -> Vec<Trial> {
    let t0 = tokio::time::Instant::now() + Duration::from_millis(20);
    let handles: Vec<_> = specs
        .into_iter()
        .map(|spec| {
            let (layers, base) = (layers.clone(), base.to_string());
            tokio::spawn(async move {
                tokio::time::sleep_until(t0 + spec.start).await;
                trial(&spec, &layers, &base).await
            })
        })
        .collect();
    let mut trials = Vec::new();
    for h in handles {
        trials.push(h.await.expect("a trial task panicked"));
    }
    trials
}

/// One trial on a client of its own.
async fn trial(spec: &Spec, layers: &Layers, base: &str) -> Trial {
    let count = Arc::new(AtomicUsize::new(0));
    let connector = Counted { inner: HttpConnector::new(), count: count.clone() };
    let tries = Arc::new(AtomicUsize::new(0));
    let counting = {
        let tries = tries.clone();
        move |req: Request<Full<Bytes>>| {
            tries.fetch_add(1, Ordering::SeqCst);
            req
        }
    };
    let mut builder = Client::builder(TokioExecutor::new());
    let read_first = spec.client == ClientKind::AloneRead;
    let (result, attempts) = match spec.client {
        ClientKind::AloneDropped | ClientKind::AloneRead => {
            let client = builder.build::<_, Full<Bytes>>(connector);
            (race(client, spec, base, read_first, None).await, None)
        }
        ClientKind::Stack | ClientKind::GuideTimeout => {
            let layer = match spec.client {
                ClientKind::Stack => layers.stack.clone(),
                _ => {
                    builder.pool_idle_timeout(GUIDE_IDLE_TIMEOUT).pool_timer(TokioTimer::new());
                    DrainOnDropLayer::new()
                }
            };
            let client = builder.build::<_, Full<Bytes>>(layer.observe(connector));
            let svc = ServiceBuilder::new().map_request(counting).layer(layer).service(client);
            race_counted(svc, spec, base, &tries).await
        }
        ClientKind::StackRetry | ClientKind::FirstContact => {
            let layer = match spec.client {
                ClientKind::StackRetry => layers.retry.clone(),
                _ => DrainOnDropLayer::new(),
            };
            let client = builder.build::<_, Full<Bytes>>(layer.observe(connector));
            let svc = ServiceBuilder::new()
                .layer(RetryRefusedLayer::new())
                .map_request(counting)
                .layer(layer)
                .service(client);
            race_counted(svc, spec, base, &tries).await
        }
        ClientKind::Go => unreachable!("Go's trials run in goclient"),
    };
    Trial {
        client: spec.client,
        method: spec.method,
        offset_us: spec.offset_us,
        id: spec.id + 1,
        connections: count.load(Ordering::SeqCst),
        attempts,
        result,
    }
}

/// [`race`] through a counting layer: also the times request 2 went
/// through it.
async fn race_counted<S, B>(
    svc: S,
    spec: &Spec,
    base: &str,
    tries: &AtomicUsize,
) -> (Result<(), String>, Option<usize>)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone,
    S::Error: Into<BoxError>,
    B: Body,
    B::Error: Into<BoxError>,
{
    let result = race(svc, spec, base, false, Some(tries)).await;
    // `race` left in `tries` request 2's tries alone.
    (result, Some(tries.load(Ordering::SeqCst)))
}

/// Request 1 (a GET; its body dropped, or read to its end when
/// `read_first`), then request 2 at `spec.wait` after request 1's end; `Ok`
/// when request 2's response came and its body was read to its end. With
/// `tries`, resets it to 0 before request 2.
async fn race<S, B>(
    svc: S,
    spec: &Spec,
    base: &str,
    read_first: bool,
    tries: Option<&AtomicUsize>,
) -> Result<(), String>
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone,
    S::Error: Into<BoxError>,
    B: Body,
    B::Error: Into<BoxError>,
{
    let first = svc.clone().oneshot(request(Method::Get, base, spec.id)).await.map_err(|e| {
        let e: BoxError = e.into();
        format!("request 1 {}", kind(&*e))
    })?;
    if read_first {
        let body = first.into_body().collect().await.map_err(|e| {
            let e: BoxError = e.into();
            format!("request 1 body {}", kind(&*e))
        })?;
        if body.to_bytes().len() != BODY_LEN {
            return Err("request 1 body of the wrong length".into());
        }
    } else {
        drop(first);
    }
    let boundary = Instant::now() + spec.wait;
    tokio::time::sleep_until(boundary.checked_sub(SPIN).unwrap_or(boundary).into()).await;
    while Instant::now() < boundary {
        std::hint::spin_loop();
    }
    if let Some(tries) = tries {
        tries.store(0, Ordering::SeqCst);
    }
    let res = svc.oneshot(request(spec.method, base, spec.id + 1)).await.map_err(|e| {
        let e: BoxError = e.into();
        kind(&*e)
    })?;
    if res.status() != http::StatusCode::OK {
        return Err(format!("status {}", res.status()));
    }
    let body = res.into_body().collect().await.map_err(|e| {
        let e: BoxError = e.into();
        format!("body {}", kind(&*e))
    })?;
    match body.to_bytes().len() {
        BODY_LEN => Ok(()),
        n => Err(format!("body of {n} bytes")),
    }
}

/// `IncompleteMessage`, `Canceled`, an `io::ErrorKind` such as
/// `ConnectionReset`, or the error's text: the first recognised error in
/// the source chain.
pub fn kind(error: &(dyn std::error::Error + 'static)) -> String {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(hyper) = e.downcast_ref::<hyper::Error>() {
            if hyper.is_incomplete_message() {
                return "IncompleteMessage".into();
            }
            if hyper.is_canceled() {
                return "Canceled".into();
            }
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return format!("{:?}", io.kind());
        }
        current = e.source();
    }
    error.to_string()
}

/// The figures of one client and method on one server.
#[derive(Clone, Debug, Default)]
pub struct Cell {
    pub trials: usize,
    /// Trials whose request 2 (or, rarely, request 1) failed.
    pub failed: usize,
    /// Failures by kind.
    pub kinds: BTreeMap<String, usize>,
    /// Trials whose request 2 went more than once (counted below the
    /// retry, or by Go's trace); `None` where nothing counts them.
    pub sent_again: Option<usize>,
    /// Trials whose request 2 the server recorded more than once.
    pub processed_twice: usize,
    /// Failed trials whose request 2 the server never recorded.
    pub unseen: usize,
    /// Connections the trials' clients opened, summed.
    pub connections: usize,
    /// Failures by offset (µs).
    pub failed_at: BTreeMap<i64, usize>,
}

impl Cell {
    /// Adds `other`'s figures to this one's (the totals).
    pub fn add(&mut self, other: &Cell) {
        self.trials += other.trials;
        self.failed += other.failed;
        for (k, n) in &other.kinds {
            *self.kinds.entry(k.clone()).or_default() += n;
        }
        self.sent_again = match (self.sent_again, other.sent_again) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.processed_twice += other.processed_twice;
        self.unseen += other.unseen;
        self.connections += other.connections;
        for (o, n) in &other.failed_at {
            *self.failed_at.entry(*o).or_default() += n;
        }
    }

    /// Connections per trial.
    pub fn per_trial(&self) -> f64 {
        self.connections as f64 / self.trials.max(1) as f64
    }

    /// `IncompleteMessage 3, ConnectionReset 1`, or `-`.
    pub fn kinds_text(&self, sep: &str) -> String {
        match self.kinds.is_empty() {
            true => "-".into(),
            false => self.kinds.iter().map(|(k, n)| format!("{k}{sep}{n}")).collect::<Vec<_>>().join(", "),
        }
    }

    /// `-0.5×2 +0.5×3` (ms), or `-`.
    pub fn failed_at_text(&self, times: &str) -> String {
        match self.failed_at.is_empty() {
            true => "-".into(),
            false => self
                .failed_at
                .iter()
                .map(|(o, n)| format!("{:+.1}{times}{n}", *o as f64 / 1e3))
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// The trials' figures per client and method, with what the server
/// recorded (`seen`).
pub fn evaluate(trials: &[Trial], seen: &[Seen]) -> BTreeMap<(ClientKind, Method), Cell> {
    let mut count: HashMap<u64, usize> = HashMap::new();
    for s in seen {
        *count.entry(s.id).or_default() += 1;
    }
    let mut cells: BTreeMap<(ClientKind, Method), Cell> = BTreeMap::new();
    for t in trials {
        let cell = cells.entry((t.client, t.method)).or_default();
        let at_server = count.get(&t.id).copied().unwrap_or(0);
        cell.trials += 1;
        cell.connections += t.connections;
        if t.client.counts_attempts() {
            *cell.sent_again.get_or_insert(0) += usize::from(t.attempts.unwrap_or(1) > 1);
        }
        cell.processed_twice += usize::from(at_server > 1);
        if let Err(kind) = &t.result {
            cell.failed += 1;
            *cell.kinds.entry(kind.clone()).or_default() += 1;
            *cell.failed_at.entry(t.offset_us).or_default() += 1;
            cell.unseen += usize::from(at_server == 0);
        }
    }
    cells
}

/// One machine-readable line for a cell.
pub fn summary_line(server: &str, close: &Close, client: ClientKind, method: Method, cell: &Cell) -> String {
    let kinds = match cell.kinds.is_empty() {
        true => "-".to_string(),
        false => {
            let each = cell.kinds.iter().map(|(k, n)| format!("{}:{n}", k.replace(char::is_whitespace, "_")));
            each.collect::<Vec<_>>().join(",")
        }
    };
    let failed_at = cell.failed_at_text(":").replace(' ', ",");
    format!(
        "keepalive-cell server={server} client={} method={} trials={} failed={} kinds={} sent_again={} \
         processed_twice={} unseen={} connections_per_trial={:.3} close_ms={:.1} failed_at_ms={}",
        client.name(),
        method.as_str(),
        cell.trials,
        cell.failed,
        kinds,
        cell.sent_again.map_or("-".to_string(), |n| n.to_string()),
        cell.processed_twice,
        cell.unseen,
        cell.per_trial(),
        close.median.as_secs_f64() * 1e3,
        failed_at,
    )
}
