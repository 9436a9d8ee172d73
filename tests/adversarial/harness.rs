//! The rig every adversarial test uses: a scripted server, a counting client
//! behind the layer, and helpers that tell which connection served a
//! response and what the layer counted.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use drain_on_drop::{DrainBody, DrainOnDrop, DrainOnDropLayer, DrainSnapshot, DrainStats, Outcome, Reason};
use hyper::body::Incoming;
use tower::{Service, ServiceBuilder, ServiceExt};

use crate::support::*;

/// A time budget long enough that no honest drain in these tests reaches it.
pub(crate) const GENEROUS: Duration = Duration::from_secs(10);

pub(crate) type Svc = DrainOnDrop<TestClient>;
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
    pub(crate) connector: CountingConnector,
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
        Rig::with(layer, max_time, client(), script).await
    }

    /// A rig around a given layer and client; `max_time` must be the layer's.
    pub(crate) async fn with(
        layer: DrainOnDropLayer,
        max_time: Duration,
        (client, connector): (TestClient, CountingConnector),
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

    /// Drops the body of `GET /bad` unread and waits for its drain; returns
    /// the connection it came on.
    pub(crate) async fn drop_bad(&mut self) -> SocketAddr {
        let at = drop_unread(&mut self.svc, get(self.server.uri("/bad"))).await;
        self.settle().await;
        at
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
        settle(&self.stats, self.max_time).await;
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

/// What the layer counted: the four totals, every reason counted at least
/// once, and the drains in flight, so that a test states every counter it
/// expects and `assert_eq!` shows all of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counted {
    pub(crate) drained: u64,
    pub(crate) abandoned: u64,
    pub(crate) skipped: u64,
    pub(crate) failed: u64,
    pub(crate) reasons: BTreeMap<Reason, u64>,
    pub(crate) in_flight: u64,
}

impl Counted {
    /// Nothing counted, nothing running.
    pub(crate) fn nothing() -> Counted {
        Counted::default()
    }

    /// Exactly these early drops, each total the sum of its reasons (a
    /// reason listed with 0 is not expected).
    pub(crate) fn of(reasons: &[(Reason, u64)]) -> Counted {
        let mut c = Counted::nothing();
        for &(reason, n) in reasons.iter().filter(|&&(_, n)| n > 0) {
            match reason.outcome() {
                Outcome::Drained => c.drained += n,
                Outcome::Abandoned => c.abandoned += n,
                Outcome::Skipped => c.skipped += n,
                Outcome::Failed => c.failed += n,
                other => panic!("an outcome the harness does not know: {other:?}"),
            }
            *c.reasons.entry(reason).or_default() += n;
        }
        c
    }

    /// One early drop, for `reason`.
    pub(crate) fn one(reason: Reason) -> Counted {
        Counted::of(&[(reason, 1)])
    }

    /// `n` drains that reached the end of the body.
    pub(crate) fn drained(n: u64) -> Counted {
        Counted::of(&[(Reason::EndOfBody, n)])
    }

    /// `n` drains that ended on an error of the body.
    pub(crate) fn body_errors(n: u64) -> Counted {
        Counted::of(&[(Reason::BodyError, n)])
    }

    /// The same counts, with `n` drains running.
    pub(crate) fn in_flight(self, n: u64) -> Counted {
        Counted { in_flight: n, ..self }
    }
}

pub(crate) fn counted(s: &DrainSnapshot) -> Counted {
    Counted {
        drained: s.drained,
        abandoned: s.abandoned,
        skipped: s.skipped,
        failed: s.failed,
        reasons: s.iter().filter(|&(_, n)| n > 0).collect(),
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
