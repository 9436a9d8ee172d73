//! HTTP/2 over TLS, negotiated with ALPN as hyper-rustls users run it (h2
//! and HTTP/1.1 offered, no `http2_only`; the server picks h2), counted at
//! the server:
//! - hyper-util alone dials a TLS connection for every request that waits
//!   for one (the control), where the README's stack, over
//!   `Http2Connector`, dials one;
//! - a connection moved on (its share of resets spent) is replaced by one
//!   dial, not one per caller waiting;
//! - a server that punishes nothing keeps one connection however many
//!   bodies are dropped, each reset at once, nothing read, no request lost.
//!
//! The server counts the connections it accepted and the requests each
//! carried. A connection that carried none can be one more dial than the
//! gate's, on a loaded machine as on a quiet one (rarely): the connect of
//! a caller between hyper-util's pool checkout (which found nothing, and
//! waits in the pool) and the gate, at the instant a dial's connection
//! went into use, finds no dial on its way and dials; the pool hands its
//! request that connection, and its own dial ends unused. Only a caller in
//! that step on the runtime's other thread at that instant can: one at
//! most per connection that went into use.

#[path = "../../tests/support/mod.rs"]
mod support;
mod tls;

use tls::Https;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, Http2Connector, Reason, RetryRefusedLayer};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower::{Service, ServiceBuilder, ServiceExt};

use support::*;

/// What [`tls_server`] counts: the connections it accepted, and the
/// requests each one carried (in the order they were accepted).
#[derive(Clone, Default)]
struct Served {
    accepted: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<Arc<AtomicUsize>>>>,
}

impl Served {
    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// The requests each connection carried.
    fn requests(&self) -> Vec<usize> {
        self.requests.lock().unwrap().iter().map(|n| n.load(Ordering::SeqCst)).collect()
    }

    /// Connections that carried a request.
    fn used(&self) -> usize {
        self.requests().iter().filter(|&&n| n > 0).count()
    }
}

/// A TLS server for `localhost` offering h2 and HTTP/1.1 by ALPN, as real
/// servers do, answering with `len` bytes in 16 KiB frames (as
/// `serve_h2`); its port, the client's TLS configuration that trusts it,
/// and its counts.
async fn tls_server(len: usize) -> (u16, rustls::ClientConfig, Served) {
    let tls::Tls { acceptor, client } = tls::pair("localhost");
    let served = Served::default();
    let all = served.requests.clone();
    let (addr, accepted) = accept_each(move |io: hyper_util::rt::TokioIo<tokio::net::TcpStream>| {
        let acceptor = acceptor.clone();
        let carried = Arc::new(AtomicUsize::new(0));
        all.lock().unwrap().push(carried.clone());
        async move {
            let tcp = io.into_inner();
            let _ = tcp.set_nodelay(true);
            if let Ok(tls) = acceptor.accept(tcp).await {
                let service = hyper::service::service_fn(move |_req| {
                    carried.fetch_add(1, Ordering::SeqCst);
                    let res = http::Response::builder()
                        .header("content-length", len)
                        .body(Chunks { left: len, chunk: 16 * KIB })
                        .unwrap();
                    async { Ok::<_, std::convert::Infallible>(res) }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            }
        }
    })
    .await;
    (addr.port(), client, Served { accepted, requests: served.requests })
}

/// hyper-rustls' connector offering h2 and HTTP/1.1 by ALPN.
fn https(tls: rustls::ClientConfig) -> Https {
    tls::https(tls, false)
}

/// A patience beyond any handshake a loaded machine takes, for the tests
/// that count dials: they are about the gate (one dial for those waiting),
/// not about its patience (`http2_faults.rs`: a stuck handshake costs the
/// others the default patience, then each dials its own).
const PATIENT: std::time::Duration = std::time::Duration::from_secs(30);

/// With `TRACE_DIALS` set, what the connector and hyper-util's pool do
/// with each connect, on stderr.
fn trace_dials() {
    if std::env::var_os("TRACE_DIALS").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter("drain_on_drop=debug,drain_on_drop::dial=trace,hyper_util::client::legacy=trace")
            .try_init();
    }
}

/// hyper-util's client over `connector`, at its defaults (no `http2_only`).
fn client<C>(connector: C) -> Client<C, Empty<Bytes>>
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    Client::builder(TokioExecutor::new()).build(connector)
}

/// `callers` requests at once, each read to its end: how many failed.
async fn at_once<S, B>(svc: S, uri: http::Uri, callers: usize) -> usize
where
    S: Service<http::Request<Empty<Bytes>>, Response = http::Response<B>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: std::fmt::Debug + Send,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
{
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (mut svc, uri) = (svc.clone(), uri.clone());
            tokio::spawn(async move {
                let res = svc.ready().await.map_err(|e| format!("{e:?}"))?.call(get(uri)).await;
                let res = res.map_err(|e| format!("{e:?}"))?;
                assert_eq!(res.version(), http::Version::HTTP_2, "ALPN chose h2");
                read_all(res.into_body()).await.map(drop).map_err(|_| "body".to_string())
            })
        })
        .collect();
    let mut failed = 0;
    for task in tasks {
        failed += usize::from(task.await.unwrap().is_err());
    }
    failed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_alone_over_alpn_dials_a_connection_for_every_caller_waiting_for_one() {
    let (port, tls, served) = tls_server(16 * KIB).await;
    let uri: http::Uri = format!("https://localhost:{port}/").parse().unwrap();
    assert_eq!(at_once(client(https(tls)), uri, 16).await, 0);
    let n = served.accepted();
    println!("hyper-util alone, 16 callers at once over ALPN: {n} TLS connections");
    assert!(n >= 2, "the control: more than one dial for 16 callers at once (hyperium/hyper#1485): {n}");
}

/// 16 callers at once: one TLS connection carries every request, and no
/// other is dialed but (at most) the one of a caller between its pool
/// checkout and the gate when that connection went into use (see the
/// module). A patience beyond any handshake: this is about the gate, not
/// about how long it waits (`http2_faults.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_alpn_callers_at_the_start_wait_for_one_dial() {
    trace_dials();
    let (port, tls, served) = tls_server(16 * KIB).await;
    let uri: http::Uri = format!("https://localhost:{port}/").parse().unwrap();
    let svc = ServiceBuilder::new()
        .layer(RetryRefusedLayer::new())
        .layer(DrainOnDropLayer::new())
        .service(client(Http2Connector::new(https(tls)).dial_patience(PATIENT)));
    assert_eq!(at_once(svc, uri, 16).await, 0);
    let requests = served.requests();
    println!("16 callers at once through the stack: requests on each TLS connection {requests:?}");
    assert_eq!(served.used(), 1, "16 callers, one TLS connection carries them: {requests:?}");
    assert!(served.accepted() <= 2, "one dial, and one other at most, unused: {requests:?}");
}

/// `requests` GETs by 16 callers through the README's stack over `connector`,
/// each body (1 MiB) dropped after its head: the run, and the layer's
/// counts.
async fn drops(
    connector: Http2Connector<Https>,
    uri: http::Uri,
    requests: usize,
) -> (H2Run, drain_on_drop::DrainSnapshot) {
    let layer = DrainOnDropLayer::new();
    let svc =
        ServiceBuilder::new().layer(RetryRefusedLayer::new()).layer(layer.clone()).service(client(connector));
    let run = h2_traffic(svc, uri, 16, requests, false).await;
    (run, settle(&layer.stats(), SECONDS).await)
}

/// 1,500 drops by 16 callers: one connection carries them all (and at most
/// one other is dialed, unused: see the module). The patience is beyond
/// any handshake: this is about moves (there are none), not about the
/// patience, which a first handshake slower than 1 s on a loaded machine
/// would spend (each caller waiting then dials its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_punishes_nothing_keeps_one_connection_over_alpn() {
    trace_dials();
    const N: usize = 1_500;
    let (port, tls, served) = tls_server(MIB).await;
    let uri: http::Uri = format!("https://localhost:{port}/").parse().unwrap();
    let (run, s) = drops(Http2Connector::new(https(tls)).dial_patience(PATIENT), uri, N).await;
    assert_eq!((run.sent, run.failed), (N, 0), "{run:?}");
    let requests = served.requests();
    println!("{N} drops, a server that punishes nothing: requests on each connection {requests:?}");
    assert_eq!(served.used(), 1, "one connection for {N} drops: {requests:?}; {run:?}");
    assert!(served.accepted() <= 2, "one dial, and one other at most, unused: {requests:?}");
    assert_eq!(s.count(Reason::Reset), N as u64, "each drop reset at once, counted once: {s:?}");
    assert_eq!((s.bytes_drained, s.in_flight), (0, 0), "nothing read, nothing held: {s:?}");
}

/// 1,500 drops by 16 callers, each connection moving on after 100 resets:
/// each move costs one dial, not one per caller waiting. Every connection
/// that carried requests but the last took at least 100 resets (a body that
/// had all arrived is closed, not reset: those do not count), so at most
/// 1,500 / 100 + 1 carried requests; and the dials that carried none are at
/// most one per connection that went into use (see the module). A dial
/// per caller waiting would be some 15 per move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_moves_on_is_replaced_by_one_dial_not_one_per_caller() {
    trace_dials();
    const N: usize = 1_500;
    const SHARE: usize = 100;
    let (port, tls, served) = tls_server(MIB).await;
    let uri: http::Uri = format!("https://localhost:{port}/").parse().unwrap();
    let connector = Http2Connector::new(https(tls)).resets_per_connection(SHARE).dial_patience(PATIENT);
    let (run, _) = drops(connector, uri, N).await;
    assert_eq!((run.sent, run.failed), (N, 0), "{run:?}");
    let (used, unused, most) = (served.used(), served.accepted() - served.used(), N / SHARE + 1);
    println!(
        "{N} drops, a move per {SHARE} resets: {used} connections carried requests, {unused} did not; \
         requests on each {:?}; {run:?}",
        served.requests()
    );
    assert!((2..=most).contains(&used), "one dial per move: {used} connections carried requests");
    assert!(unused <= used, "one dial per move, never one per caller waiting: {unused} dials unused");
}
