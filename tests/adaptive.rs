//! Adaptive budgets in the conditions users bring: the setup cost is the
//! connector's own time, throughput is the link's (not a slow caller's, not
//! one sample taken under cross traffic), and a short run is never worse
//! than the fixed default.
//!
//! A "far" origin is simulated by a connector that takes a set time to
//! connect, as a TCP plus TLS handshake across a continent would; bodies are
//! paced like a link of a given speed. Decisions are asserted by reason and
//! by the connections the server accepted.

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

/// What the caller does with one response.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Caller {
    /// Drops it unread.
    Drops,
    /// Reads it to the end at once.
    Reads,
    /// Waits this long, then reads it to the end (a proxy streaming to a
    /// slow client, a handler doing other work first).
    ReadsAfter(Duration),
}

/// A server sending `len` bytes with `Content-Length`, `piece` bytes every
/// 5 ms (256 KiB: ~50 MB/s; 64 KiB: ~13 MB/s), but at `slow_piece` for the
/// requests whose path is `/slow` (a link shared with cross traffic), and
/// after `think` for `/think` (a slow endpoint).
async fn server(len: usize, piece: usize, slow_piece: usize, think: Duration) -> RawServer {
    RawServer::start(move |head| {
        let mut steps = vec![];
        if head.path == "/think" {
            steps.push(Step::Sleep(think));
        }
        let piece = if head.path == "/slow" { slow_piece } else { piece };
        steps.push(Step::Write(format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\n\r\n").into_bytes()));
        steps.push(Step::Paced { seed: 0, len, piece, every: Duration::from_millis(5) });
        steps
    })
    .await
}

/// One run: the requests `plan` lists, in order, through `layer` (its
/// observer around a connector taking `setup` to connect when `observe`);
/// returns the connections the server accepted during the run, the stats
/// and the origin's estimates.
async fn run(
    server: &RawServer,
    setup: Duration,
    layer: DrainOnDropLayer,
    observe: bool,
    plan: &[(&str, Caller)],
) -> (usize, DrainSnapshot, Vec<OriginSnapshot>) {
    let before = server.accepted();
    let connector = CountingConnector::new().with_setup(setup);
    let stats = layer.stats();
    let mut calls = 0usize;
    macro_rules! drive {
        ($client:expr) => {{
            let mut svc = ServiceBuilder::new().layer(layer.clone()).service($client);
            for (path, caller) in plan {
                calls += 1;
                let res = svc.ready().await.unwrap().call(get(server.uri(path))).await.unwrap();
                assert_eq!(res.status(), 200);
                match caller {
                    Caller::Drops => drop(res),
                    Caller::Reads => drop(read_all(res.into_body()).await.unwrap()),
                    Caller::ReadsAfter(wait) => {
                        tokio::time::sleep(*wait).await;
                        drop(read_all(res.into_body()).await.unwrap());
                    }
                }
                // One request at a time: the next one finds the drained
                // connection back in the pool, as a sequential caller would
                // after its own work.
                settle(&stats, Duration::from_secs(1)).await;
            }
        }};
    }
    if observe {
        let client: Client<_, Empty<Bytes>> =
            Client::builder(TokioExecutor::new()).build(layer.observe(connector));
        drive!(client);
    } else {
        let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
        drive!(client);
    }
    assert_eq!(calls, plan.len());
    (server.accepted() - before, stats.snapshot(), layer.origins())
}

fn repeat(path: &'static str, caller: Caller, n: usize) -> Vec<(&'static str, Caller)> {
    vec![(path, caller); n]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_observer_the_setup_cost_is_the_connectors_own_time() {
    let _serial = SERIAL.lock().await;
    let setup = Duration::from_millis(150);
    let server = server(64 * KIB, 256 * KIB, 256 * KIB, Duration::ZERO).await;
    let (_, _, origins) =
        run(&server, setup, DrainOnDropLayer::new().adaptive(), true, &repeat("/", Caller::Drops, 3)).await;
    assert_eq!(origins.len(), 1, "{origins:?}");
    assert_eq!(origins[0].origin, format!("http://{}", server.addr));
    let estimate = origins[0].setup_cost.expect("estimated");
    assert!(
        estimate >= setup && estimate < setup.mul_f64(1.5),
        "the observer measured the connector's {setup:?}: {estimate:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_does_not_lower_the_origins_throughput() {
    let _serial = SERIAL.lock().await;
    // 150 ms of connect away; some bodies are read 400 ms late, the others
    // are dropped. Draining 64 KiB costs microseconds, a new connection 150 ms.
    let server = server(64 * KIB, 256 * KIB, 256 * KIB, Duration::ZERO).await;
    let slow = Caller::ReadsAfter(Duration::from_millis(400));
    let plan = [
        ("/", slow),
        ("/", slow),
        ("/", slow),
        ("/", Caller::Drops),
        ("/", Caller::Drops),
        ("/", Caller::Drops),
    ];
    let layer = DrainOnDropLayer::new().adaptive();
    let (conns, s, origins) = run(&server, Duration::from_millis(150), layer, true, &plan).await;
    assert_eq!(s.count(Reason::DeclaredOverBudget), 0, "no 64 KiB body skipped: {s:?} {origins:?}");
    assert_eq!(s.count(Reason::EndOfBody), 3, "every dropped body drained: {s:?} {origins:?}");
    assert!(conns <= 2, "drained connections serve the next requests: {conns} connections");
    let budget = origins[0].budget.expect("a budget");
    assert!(budget.max_bytes() >= 64 * KIB as u64, "the slow reads did not shrink the budget: {budget:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_endpoint_is_not_taken_for_setup_cost() {
    let _serial = SERIAL.lock().await;
    // Loopback: a new connection costs well under a millisecond. The first
    // request, which opens the connection, goes to a 400 ms endpoint; then
    // 1 MiB bodies are dropped. Draining 1 MiB costs more than a reconnect:
    // the default skips them, and so must adaptive mode.
    let server = server(MIB, 256 * KIB, 256 * KIB, Duration::from_millis(400)).await;
    let mut plan = vec![("/think", Caller::Reads)];
    plan.extend(repeat("/", Caller::Drops, 6));
    for observe in [false, true] {
        let (_, s, origins) =
            run(&server, Duration::ZERO, DrainOnDropLayer::new().adaptive(), observe, &plan).await;
        assert_eq!(s.count(Reason::DeclaredOverBudget), 6, "observer {observe}: {s:?} {origins:?}");
        let setup = origins[0].setup_cost;
        assert!(
            setup.is_none_or(|d| d < Duration::from_millis(100)),
            "observer {observe}: the endpoint's think time is not a setup cost: {origins:?}"
        );
    }
    let (default_conns, _, _) = run(&server, Duration::ZERO, DrainOnDropLayer::new(), true, &plan).await;
    let (conns, _, _) = run(&server, Duration::ZERO, DrainOnDropLayer::new().adaptive(), true, &plan).await;
    assert!(conns <= default_conns + 1, "adaptive {conns} connections, default {default_conns}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_run_on_a_lan_is_no_worse_than_the_default() {
    let _serial = SERIAL.lock().await;
    // 20 requests, 2 ms to connect (a TLS handshake on a LAN), 64 KiB
    // bodies dropped unread: nothing measured the link yet, so adaptive
    // drains what the default drains.
    let server = server(64 * KIB, 256 * KIB, 256 * KIB, Duration::ZERO).await;
    let plan = repeat("/", Caller::Drops, 20);
    let setup = Duration::from_millis(2);
    let (default_conns, _, _) = run(&server, setup, DrainOnDropLayer::new(), true, &plan).await;
    let (conns, s, origins) = run(&server, setup, DrainOnDropLayer::new().adaptive(), true, &plan).await;
    assert_eq!(s.count(Reason::EndOfBody), 20, "{s:?} {origins:?}");
    let allowed = default_conns + default_conns.div_ceil(10);
    assert!(conns <= allowed, "adaptive {conns} connections, default {default_conns} (+10% allowed)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_sample_under_cross_traffic_does_not_stop_draining() {
    let _serial = SERIAL.lock().await;
    // 150 ms of connect away, 1 MiB bodies on a fast link, except that the
    // first drained body shares the link with cross traffic (~0.6 MB/s): its
    // drain runs out of time and measures the link slow. The bodies after it
    // arrive fast again, and draining them still pays.
    let server = server(MIB, 256 * KIB, 3 * KIB, Duration::ZERO).await;
    let mut plan = vec![("/slow", Caller::Drops)];
    plan.extend(repeat("/", Caller::Drops, 6));
    let (conns, s, origins) =
        run(&server, Duration::from_millis(150), DrainOnDropLayer::new().adaptive(), true, &plan).await;
    assert_eq!(s.count(Reason::OverTime), 1, "the drain under cross traffic runs out of time: {s:?}");
    assert_eq!(
        s.count(Reason::DeclaredOverBudget),
        0,
        "no body skipped after one slow sample: {s:?} {origins:?}"
    );
    assert_eq!(s.count(Reason::EndOfBody), 6, "{s:?} {origins:?}");
    assert!(conns <= 3, "{conns} connections for 7 requests");
    let throughput = origins[0].throughput.expect("measured");
    assert!(throughput > 5_000_000, "the fast drains are the estimate, not the slow one: {origins:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lan_like_origin_stops_draining_large_bodies_once_measured() {
    let _serial = SERIAL.lock().await;
    // Loopback connect; 1 MiB at ~13 MB/s takes ~80 ms, far more than a new
    // connection. The first drains (default budget) measure the link; then
    // adaptive mode skips what the link cannot deliver in a setup cost.
    let server = server(MIB, 64 * KIB, 64 * KIB, Duration::ZERO).await;
    let fixed = DrainOnDropLayer::new().max_bytes(4 * MIB as u64).max_time(Duration::from_secs(1));
    let (_, s, _) = run(&server, Duration::ZERO, fixed.clone(), true, &repeat("/", Caller::Drops, 4)).await;
    assert_eq!(s.drained, 4, "a large fixed budget drains every one: {s:?}");
    let adaptive =
        DrainOnDropLayer::new().adaptive().max_bytes(4 * MIB as u64).max_time(Duration::from_secs(1));
    let (conns, s, origins) =
        run(&server, Duration::ZERO, adaptive, true, &repeat("/", Caller::Drops, 10)).await;
    assert!(s.count(Reason::DeclaredOverBudget) >= 8, "measured slow, then skipped: {s:?} {origins:?}");
    assert!(conns >= 8, "new connections are cheaper here: {conns}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_origin_drains_bodies_the_fixed_default_skips() {
    let _serial = SERIAL.lock().await;
    // A new connection costs 300 ms; reading the 1 MiB rest costs ~20 ms.
    let reused = Arc::new(AtomicUsize::new(0));
    let counter = reused.clone();
    let server = RawServer::start(move |head| {
        if head.nth > 0 {
            counter.fetch_add(1, Ordering::SeqCst);
        }
        vec![
            Step::Write(format!("HTTP/1.1 200 OK\r\ncontent-length: {MIB}\r\n\r\n").into_bytes()),
            Step::Paced { seed: 0, len: MIB, piece: 256 * KIB, every: Duration::from_millis(5) },
        ]
    })
    .await;
    let setup = Duration::from_millis(300);
    let plan = repeat("/", Caller::Drops, 6);
    let (conns, s, origins) = run(&server, setup, DrainOnDropLayer::new().adaptive(), true, &plan).await;
    assert_eq!(s.drained, 6, "adaptive drains 1 MiB bodies from a far origin: {s:?} {origins:?}");
    assert!(conns <= 2, "{conns} connections");
    assert!(reused.load(Ordering::SeqCst) >= 4, "requests go out on drained connections");
    let (conns, s, _) =
        run(&server, setup, DrainOnDropLayer::new(), true, &repeat("/", Caller::Drops, 3)).await;
    assert_eq!(
        (s.count(Reason::DeclaredOverBudget), conns),
        (3, 3),
        "the default skips the declared 1 MiB: {s:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn userinfo_never_reaches_the_origin_table() {
    let _serial = SERIAL.lock().await;
    let server = server(KIB, KIB, KIB, Duration::ZERO).await;
    let layer = DrainOnDropLayer::new().adaptive();
    let client: Client<_, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build(layer.observe(CountingConnector::new()));
    let mut svc = ServiceBuilder::new().layer(layer.clone()).service(client);
    for user in ["alice:secret", "bob:hunter2"] {
        let uri = format!("http://{user}@{}/", server.addr).parse().unwrap();
        drop(svc.ready().await.unwrap().call(get(uri)).await.unwrap());
    }
    let origins = layer.origins();
    assert_eq!(origins.len(), 1, "one origin for every user: {origins:?}");
    assert_eq!(origins[0].origin, format!("http://{}", server.addr));
    let text = format!("{origins:?} {layer:?}");
    assert!(!text.contains("secret") && !text.contains("hunter2") && !text.contains("alice"), "{text}");
}
