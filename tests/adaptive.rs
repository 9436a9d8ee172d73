//! Adaptive budgets: estimates converge, a LAN-like origin stops draining
//! large bodies, a far origin starts.
//!
//! A "far" origin is simulated by a connector that takes a set time to
//! connect, as a TCP plus TLS handshake across a continent would; bodies are
//! paced like a 100 or 400 Mbit/s link.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, DrainSnapshot, OriginSnapshot, Reason};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use support::*;
use tower::{Service, ServiceBuilder, ServiceExt};

/// These tests measure timing; they run one at a time so that they do not
/// slow each other's servers down on a 2-core machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A server sending `len` bytes with `Content-Length`, paced at `piece`
/// bytes every 5 ms (256 KiB: 1 MiB in ~20 ms, like a 400 Mbit/s link;
/// 64 KiB: ~80 ms, 100 Mbit/s); `reused` counts the requests that came on a
/// connection that had served one before.
async fn server_counting(len: usize, piece: usize, reused: Arc<AtomicUsize>) -> RawServer {
    RawServer::start(move |head| {
        if head.nth > 0 {
            reused.fetch_add(1, Ordering::SeqCst);
        }
        vec![
            Step::Write(format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\n\r\n").into_bytes()),
            Step::Paced { seed: 0, len, piece, every: Duration::from_millis(5) },
        ]
    })
    .await
}

async fn server(len: usize, piece: usize) -> RawServer {
    server_counting(len, piece, Arc::default()).await
}

/// `n` sequential requests to `server` over connections that take `setup`
/// to open, bodies dropped unread; returns the connections opened, the
/// stats and the origin's estimates.
async fn run(
    server: &RawServer,
    setup: Duration,
    layer: DrainOnDropLayer,
    n: usize,
) -> (usize, DrainSnapshot, Vec<OriginSnapshot>) {
    run_reading(server, setup, layer, n, false).await
}

/// As [`run`], reading every body to its end when `read` is set.
async fn run_reading(
    server: &RawServer,
    setup: Duration,
    layer: DrainOnDropLayer,
    n: usize,
    read: bool,
) -> (usize, DrainSnapshot, Vec<OriginSnapshot>) {
    let connector = CountingConnector::new().with_setup(setup);
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(connector.clone());
    let stats = layer.stats();
    let origins = layer.clone();
    let mut svc = ServiceBuilder::new().layer(layer).service(client);
    for _ in 0..n {
        if read {
            let res = svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap();
            assert_eq!(res.status(), 200);
            read_all(res.into_body()).await.unwrap();
        } else {
            drop_unread(&mut svc, get(server.uri("/"))).await;
        }
    }
    let snap = settle(&stats, Duration::ZERO).await;
    (connector.count(), snap, origins.origins())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_cost_estimate_converges_on_the_servers_delay() {
    let _serial = SERIAL.lock().await;
    let setup = Duration::from_millis(150);
    // Bodies read to the end: no drain is running when the next request
    // goes out, so head times on reused connections are clean round trips
    // and both kinds of head time get samples.
    let server = server(64 * 1024, 256 * 1024).await;
    let (_, snap, origins) = run_reading(&server, setup, DrainOnDropLayer::new().adaptive(), 12, true).await;
    assert_eq!(origins.len(), 1, "{origins:?}");
    let origin = &origins[0];
    assert_eq!(origin.origin, format!("http://{}", server.addr));
    assert!(origin.new_connections >= 1 && origin.reused_responses >= 5, "{origin:?} {snap:?}");
    let estimate = origin.setup_cost.expect("estimated");
    assert!(
        estimate > setup.mul_f64(0.7) && estimate < setup.mul_f64(1.5),
        "setup cost estimate {estimate:?} should be close to the server's {setup:?}: {origin:?}"
    );
    assert!(origin.throughput.is_some(), "the reads measured the throughput: {origin:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lan_like_origin_stops_draining_large_bodies() {
    let _serial = SERIAL.lock().await;
    // No setup delay: a new connection costs a loopback round trip, far less
    // than the ~80 ms that reading 1 MiB takes at 100 Mbit/s.
    let server = server(MIB, 64 * 1024).await;
    let (conns, snap, origins) = run(&server, Duration::ZERO, DrainOnDropLayer::new().adaptive(), 10).await;
    assert_eq!(snap.drained, 0, "no 1 MiB body is worth draining here: {snap:?} {origins:?}");
    assert_eq!(conns, 10, "every request on a new connection, as the estimate says is cheaper");

    // A fixed budget large enough drains every one of them instead.
    let fixed = DrainOnDropLayer::new().max_bytes(4 * MIB as u64).max_time(Duration::from_secs(1));
    let (_, snap, _) = run(&server, Duration::ZERO, fixed, 10).await;
    assert_eq!(snap.drained, 10, "{snap:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_origin_starts_draining_bodies_the_fixed_budget_skips() {
    let _serial = SERIAL.lock().await;
    // A new connection costs 300 ms; reading the 1 MiB rest costs ~20 ms.
    let reused = Arc::new(AtomicUsize::new(0));
    let server = server_counting(MIB, 256 * 1024, reused.clone()).await;
    let setup = Duration::from_millis(300);
    let (conns, snap, origins) = run(&server, setup, DrainOnDropLayer::new().adaptive(), 8).await;
    assert!(snap.drained >= 6, "adaptive drains 1 MiB bodies from a far origin: {snap:?} {origins:?}");
    // hyper-util dials whenever no connection is idle at checkout and pools
    // the dialled one even when the drained connection won the race, so
    // extra connections open while drains run; what matters is that
    // requests go out on drained connections.
    let reused = reused.load(Ordering::SeqCst);
    assert!(reused >= 4, "at least half the requests reuse a drained connection: {reused} ({conns} opened)");
    let budget = origins[0].budget.expect("a decision threshold");
    assert!(budget.max_bytes() >= MIB as u64, "the threshold admits 1 MiB: {budget:?}");

    // The default fixed budget (256 KiB) skips the declared 1 MiB every time.
    let (conns, snap, _) = run(&server, setup, DrainOnDropLayer::new(), 4).await;
    assert_eq!((snap.count(Reason::DeclaredOverBudget), snap.skipped, conns), (4, 4, 4), "{snap:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_observer_the_setup_cost_is_the_connectors_own_time() {
    let _serial = SERIAL.lock().await;
    let setup = Duration::from_millis(150);
    let server = server(64 * 1024, 256 * 1024).await;
    let layer = DrainOnDropLayer::new().adaptive();
    let stats = layer.stats();
    let far = CountingConnector::new().with_setup(setup);
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(layer.observe(far));
    let origins = layer.clone();
    let mut svc = ServiceBuilder::new().layer(layer).service(client);
    for _ in 0..3 {
        drop_unread(&mut svc, get(server.uri("/"))).await;
    }
    settle(&stats, Duration::ZERO).await;
    let estimate = origins.origins()[0].setup_cost.expect("estimated");
    assert!(
        estimate >= setup && estimate < setup.mul_f64(1.5),
        "the observer measured the connector's {setup:?}: {estimate:?}"
    );
}
