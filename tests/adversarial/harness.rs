//! The rig every adversarial test uses: a scripted server, a counting client
//! behind the layer, and helpers that tell which connection served a
//! response and what the layer counted.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use drain_on_drop::{DrainBody, DrainOnDrop, DrainOnDropLayer, DrainSnapshot, DrainStats};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{HttpConnector, HttpInfo};
use hyper_util::rt::TokioExecutor;
use tower::{Service, ServiceBuilder, ServiceExt};

use crate::support::*;

pub(crate) const KIB: usize = 1024;

/// Scheduling slack on top of `max_time` before a drain that has not ended
/// counts as outliving its budget: 2 cores, a debug build, and the other
/// tests of this binary running in parallel.
pub(crate) const SLACK: Duration = Duration::from_millis(1500);

/// A time budget long enough that no honest drain in these tests reaches it.
pub(crate) const GENEROUS: Duration = Duration::from_secs(10);

pub(crate) type RigClient = Client<RigConnector, Empty>;
pub(crate) type Svc = DrainOnDrop<RigClient>;
pub(crate) type Res = http::Response<DrainBody<Incoming>>;
pub(crate) type ClientError = hyper_util::client::legacy::Error;

/// Length of the honest body served under `/ok`.
pub(crate) const OK_LEN: usize = 1000;

/// A raw server, hyper-util's client behind a [`DrainOnDropLayer`], and the
/// layer's counters.
///
/// Paths starting with `/ok` get an honest `Content-Length` response
/// carrying `body_bytes(seed, OK_LEN)` (`/ok?seed=N`); every other path is
/// answered by the test's script.
pub(crate) struct Rig {
    pub(crate) server: RawServer,
    pub(crate) connector: RigConnector,
    pub(crate) svc: Svc,
    pub(crate) stats: DrainStats,
    pub(crate) max_time: Duration,
}

impl Rig {
    /// A rig whose layer has these budgets.
    pub(crate) async fn start(
        max_bytes: u64,
        max_time: Duration,
        script: impl Fn(&Head) -> Vec<Step> + Send + Sync + 'static,
    ) -> Rig {
        let layer = DrainOnDropLayer::new().max_bytes(max_bytes).max_time(max_time);
        Rig::with(layer, max_time, rig_client(), script).await
    }

    /// A rig around a given layer and client; `max_time` must be the layer's.
    pub(crate) async fn with(
        layer: DrainOnDropLayer,
        max_time: Duration,
        (client, connector): (RigClient, RigConnector),
        script: impl Fn(&Head) -> Vec<Step> + Send + Sync + 'static,
    ) -> Rig {
        let server = RawServer::start(move |head| {
            if head.path.starts_with("/ok") {
                content_length(query(&head.path, "seed").unwrap_or(0), OK_LEN)
            } else {
                script(head)
            }
        })
        .await;
        let stats = layer.stats();
        let svc = ServiceBuilder::new().layer(layer).service(client);
        Rig { server, connector, svc, stats, max_time }
    }

    pub(crate) async fn try_send(&mut self, req: http::Request<Empty>) -> Result<Res, ClientError> {
        self.svc.ready().await?.call(req).await
    }

    pub(crate) async fn try_get(&mut self, path: &str) -> Result<Res, ClientError> {
        let req = get(self.server.uri(path));
        self.try_send(req).await
    }

    /// GET `path`; the response head must arrive.
    pub(crate) async fn get(&mut self, path: &str) -> Res {
        match self.try_get(path).await {
            Ok(res) => res,
            Err(err) => panic!("GET {path}: the response head should arrive, got {err:?}"),
        }
    }

    /// GET `path`, which must be served from the pool, on the connection
    /// `on`.
    ///
    /// A drained connection goes back to hyper-util's pool from a task of its
    /// own, a moment after the drain ends, and hyper-util races a checkout
    /// against a dial: on a multi-thread runtime a loopback dial can win. So
    /// dials are held while this request is sent: it can only be served by a
    /// pooled connection, and waits for one for at most [`SLACK`].
    pub(crate) async fn get_on(&mut self, path: &str, on: SocketAddr) -> Res {
        let req = get(self.server.uri(path));
        self.send_on(req, on).await
    }

    /// [`get_on`](Self::get_on) for any request.
    pub(crate) async fn send_on(&mut self, req: http::Request<Empty>, on: SocketAddr) -> Res {
        let what = format!("{} {}", req.method(), req.uri());
        self.connector.hold(true);
        let sent = tokio::time::timeout(SLACK, self.try_send(req)).await;
        self.connector.hold(false);
        let res = sent
            .unwrap_or_else(|_| panic!("{what}: no pooled connection came back within {SLACK:?}"))
            .unwrap_or_else(|e| panic!("{what} on a pooled connection: {e:?}"));
        assert_eq!(conn(&res), on, "{what}: served on the connection expected back in the pool");
        res
    }

    /// Like [`next_is_clean`](Self::next_is_clean), on the pooled
    /// connection `on`: the connection was reused.
    pub(crate) async fn next_reuses(&mut self, seed: u64, on: SocketAddr) {
        let res = self.get_on(&format!("/ok?seed={seed}"), on).await;
        check_clean(res, seed).await;
    }

    /// Waits until no drain runs, and fails if one outlives `max_time` plus
    /// [`SLACK`]. Returns how long it took.
    pub(crate) async fn settle(&self) -> Duration {
        let start = Instant::now();
        let stats = self.stats.clone();
        wait_for("every drain to end within max_time + slack", self.max_time + SLACK, || {
            stats.snapshot().in_flight == 0
        })
        .await;
        start.elapsed()
    }

    /// Sends an honest request after whatever the test did, reads the body
    /// in full and checks every byte: nothing left over from an earlier
    /// response may show up. Returns the connection that served it.
    pub(crate) async fn next_is_clean(&mut self, seed: u64) -> SocketAddr {
        let res = self.get(&format!("/ok?seed={seed}")).await;
        check_clean(res, seed).await
    }

    /// Waits until the server has no connection open: the client closed (or
    /// the server dropped) every connection it had.
    pub(crate) async fn wait_server_closed(&self, why: &str) {
        let open = self.server.open.clone();
        wait_for(why, SLACK, || open.load(Ordering::SeqCst) == 0).await;
    }
}

pub(crate) type Empty = http_body_util::Empty<bytes::Bytes>;

/// Checks an honest `/ok?seed=N` response: its status, no trace of a
/// smuggled response, and every byte of its body. Returns its connection.
async fn check_clean(res: Res, seed: u64) -> SocketAddr {
    assert_eq!(res.status(), 200, "the honest response's status");
    assert!(
        res.headers().get("x-smuggled").is_none(),
        "a smuggled response was delivered to a later request: {:?}",
        res.headers()
    );
    let at = conn(&res);
    let body = read_all(res.into_body()).await.expect("the honest body reads to its end");
    assert!(
        body == body_bytes(seed, OK_LEN),
        "the next request's body must be exactly its own {OK_LEN} bytes \
         (got {} bytes starting {:?})",
        body.len(),
        String::from_utf8_lossy(&body[..body.len().min(60)])
    );
    at
}

/// An `HttpConnector` (nodelay) that counts the connections it opens, and
/// that a test can tell to hold every dial: see [`Rig::get_on`].
#[derive(Clone)]
pub(crate) struct RigConnector {
    inner: HttpConnector,
    connects: Arc<AtomicUsize>,
    hold: Arc<AtomicBool>,
}

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl RigConnector {
    pub(crate) fn new() -> Self {
        let mut inner = HttpConnector::new();
        inner.set_nodelay(true);
        RigConnector {
            inner,
            connects: Arc::new(AtomicUsize::new(0)),
            hold: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Holds (or releases) every dial: a held dial waits until released,
    /// then fails without opening anything.
    pub(crate) fn hold(&self, on: bool) {
        self.hold.store(on, Ordering::SeqCst);
    }

    /// Connections opened so far.
    pub(crate) fn count(&self) -> usize {
        self.connects.load(Ordering::SeqCst)
    }
}

impl Service<http::Uri> for RigConnector {
    type Response = <HttpConnector as Service<http::Uri>>::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let connects = self.connects.clone();
        let hold = self.hold.clone();
        let fut = self.inner.call(uri);
        Box::pin(async move {
            if hold.load(Ordering::SeqCst) {
                // Held: wait until released (bounded), then refuse, so that
                // a dial that lost the race to the pool never opens anything.
                let start = Instant::now();
                while hold.load(Ordering::SeqCst) && start.elapsed() < GENEROUS {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                return Err("dial held: the test expected a pooled connection".into());
            }
            let conn = fut.await?;
            connects.fetch_add(1, Ordering::SeqCst);
            Ok(conn)
        })
    }
}

/// hyper-util's pooled client over a [`RigConnector`].
pub(crate) fn rig_client() -> (RigClient, RigConnector) {
    let connector = RigConnector::new();
    let client = Client::builder(TokioExecutor::new()).build(connector.clone());
    (client, connector)
}

/// The client-side address of the connection that carried `res`: equal
/// addresses mean the same TCP connection.
pub(crate) fn conn<B>(res: &http::Response<B>) -> SocketAddr {
    res.extensions().get::<HttpInfo>().expect("HttpConnector puts HttpInfo on every response").local_addr()
}

/// What the layer counted, field by field, so that a test states every
/// counter it expects and `assert_eq!` shows all of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counted {
    pub(crate) drained: u64,
    pub(crate) abandoned: u64,
    pub(crate) abandoned_over_bytes: u64,
    pub(crate) abandoned_over_time: u64,
    pub(crate) skipped: u64,
    pub(crate) skipped_over_budget: u64,
    pub(crate) failed: u64,
    pub(crate) in_flight: u64,
}

impl Counted {
    pub(crate) const NOTHING: Counted = Counted {
        drained: 0,
        abandoned: 0,
        abandoned_over_bytes: 0,
        abandoned_over_time: 0,
        skipped: 0,
        skipped_over_budget: 0,
        failed: 0,
        in_flight: 0,
    };
    pub(crate) const DRAINED: Counted = Counted { drained: 1, ..Counted::NOTHING };
    /// Skipped for a reason other than the declared length.
    pub(crate) const SKIPPED: Counted = Counted { skipped: 1, ..Counted::NOTHING };
    pub(crate) const SKIPPED_OVER_BUDGET: Counted =
        Counted { skipped: 1, skipped_over_budget: 1, ..Counted::NOTHING };
    pub(crate) const OVER_BYTES: Counted =
        Counted { abandoned: 1, abandoned_over_bytes: 1, ..Counted::NOTHING };
    pub(crate) const OVER_TIME: Counted =
        Counted { abandoned: 1, abandoned_over_time: 1, ..Counted::NOTHING };
}

pub(crate) fn counted(s: &DrainSnapshot) -> Counted {
    Counted {
        drained: s.drained,
        abandoned: s.abandoned,
        abandoned_over_bytes: s.abandoned_over_bytes,
        abandoned_over_time: s.abandoned_over_time,
        skipped: s.skipped,
        skipped_over_budget: s.skipped_over_budget,
        failed: s.failed,
        in_flight: s.in_flight,
    }
}

/// Reads data frames until `n` data bytes were read (or the end); returns
/// the bytes read.
pub(crate) async fn read_bytes(body: &mut DrainBody<Incoming>, n: usize) -> usize {
    let mut read = 0;
    while read < n {
        match read_one_frame(body).await {
            Some(len) => read += len,
            None => break,
        }
    }
    read
}

/// A chunked response head.
pub(crate) const CHUNKED_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";

/// A `Content-Length` response head.
pub(crate) fn cl_head(len: usize) -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\n\r\n").into_bytes()
}

/// A complete response that must never reach any caller: if it does, the
/// `x-smuggled` header and its body give it away.
pub(crate) const SMUGGLED: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 8\r\nx-smuggled: 1\r\n\r\nSMUGGLED";

/// `len` body bytes of `seed` framed as chunks of one byte each, in a single
/// buffer (so the server writes them in one go), without the final chunk.
pub(crate) fn one_byte_chunks(seed: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len * 6);
    for b in body_bytes(seed, len) {
        out.extend_from_slice(b"1\r\n");
        out.push(b);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Concatenates byte strings.
pub(crate) fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}
