//! The default time budget follows the origin's round trip: a far origin's
//! drains get the time a new connection's slow start needs, and keep their
//! connections; a LAN origin is decided as before; an explicit `max_time`
//! stays the budget.
//!
//! A far origin is a raw server that answers every request 300 ms after it
//! arrived (as one 300 ms away would, to the layer's clock) and sends the
//! rest of each body 100 ms after its head (the slow-start tail of a new
//! connection): a fixed 50 ms budget gives up on it, the 1 s this origin
//! gets leaves 900 ms to spare. No assertion on elapsed time: budgets are
//! read back from `origins()`, outcomes are counted by reason, and from the
//! second request on the client's dials are held, so only a kept connection
//! can serve a request.

mod support;

use std::time::Duration;

use drain_on_drop::{DrainOnDropLayer, DrainSnapshot, OriginSnapshot, Reason};
use support::*;
use tower::{Service, ServiceBuilder, ServiceExt};

const FAR: Duration = Duration::from_millis(300);

/// 64 KiB with `Content-Length`: the head and 16 KiB after `FAR`, the rest
/// 100 ms later.
fn far_origin(_: &Head) -> Vec<Step> {
    let body = body_bytes(1, 64 * KIB);
    let mut first = cl_head(body.len());
    first.extend_from_slice(&body[..16 * KIB]);
    vec![
        Step::Sleep(FAR),
        Step::Write(first),
        Step::Sleep(Duration::from_millis(100)),
        Step::Write(body[16 * KIB..].to_vec()),
    ]
}

/// `n` sequential requests to `server`, bodies dropped unread, each drain
/// waited for; the connections the server accepted, the counts and the
/// origin's estimates. With `held`, dials are held from the second request
/// on: a request that finds no kept connection fails.
async fn drop_each(
    server: &RawServer,
    layer: DrainOnDropLayer,
    path: &str,
    n: usize,
    held: bool,
) -> (usize, DrainSnapshot, OriginSnapshot) {
    let (client, connector) = client();
    let before = server.accepted();
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().layer(layer.clone()).service(client);
    for _ in 0..n {
        drop_unread(&mut svc, get(server.uri(path))).await;
        settle(&stats, Duration::from_secs(1)).await;
        connector.hold(held);
    }
    connector.hold(false);
    let accepted = server.accepted() - before;
    assert_eq!(connector.count(), accepted);
    let origins = layer.origins();
    assert_eq!(origins.len(), 1, "one origin: {origins:?}");
    (accepted, stats.snapshot(), origins[0].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_origin_gets_the_time_its_slow_start_needs_and_keeps_its_connection() {
    let server = RawServer::start(far_origin).await;
    let (conns, s, origin) = drop_each(&server, DrainOnDropLayer::new(), "/", 5, true).await;
    let rtt = origin.round_trip.expect("measured");
    assert!(rtt >= FAR, "the round trip is at least the server's delay: {origin:?}");
    let budget = origin.budget.expect("the default follows the origin");
    // 6 round trips of at least 300 ms, capped at 1 s.
    assert_eq!(budget.max_time(), Duration::from_secs(1), "{origin:?}");
    assert_eq!(budget.max_bytes(), 256 * KIB as u64, "the byte budget is max_bytes' default");
    assert_eq!(s.count(Reason::EndOfBody), 5, "every tail waited for: {s:?}");
    assert_eq!(conns, 1, "one connection for the five requests (dials held)");
    // hyper-util alone closes a connection whenever the rest of the body
    // comes after the drop (5 of 5 unless the caller is slower than 100 ms).
    let (alone, _, _) = drop_each(&server, DrainOnDropLayer::new().max_bytes(0), "/", 5, false).await;
    println!("5 requests to a far origin, 64 KiB unread: {conns} connection with the layer, {alone} alone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_max_time_stays_the_budget_far_away() {
    let server = RawServer::start(far_origin).await;
    let layer = DrainOnDropLayer::new().max_time(Duration::from_millis(50));
    let (_, _, origin) = drop_each(&server, layer.clone(), "/", 1, false).await;
    assert!(origin.round_trip.expect("measured") >= FAR);
    assert_eq!(origin.budget, None, "no budget of the origin's: the fixed one applies: {origin:?}");
    let explicit_long = DrainOnDropLayer::new().max_time(Duration::from_secs(5));
    let (conns, s, _) = drop_each(&server, explicit_long, "/", 3, true).await;
    assert_eq!(s.count(Reason::EndOfBody), 3, "5 s is the budget, not the 1 s cap: {s:?}");
    assert_eq!(conns, 1, "one connection for three requests (dials held)");
}

/// A server on loopback, no delay: 64 KiB bodies (drained) and 1 MiB ones
/// (over the byte budget: skipped), as before the time budget followed the
/// round trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lan_origin_is_decided_as_before() {
    let server = RawServer::start(|head| match head.path.as_str() {
        "/big" => content_length(2, MIB),
        _ => content_length(1, 64 * KIB),
    })
    .await;
    let layer = DrainOnDropLayer::new();
    let (client, _) = client();
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().layer(layer.clone()).service(client);
    for path in ["/", "/big", "/", "/big", "/"] {
        drop_unread(&mut svc, get(server.uri(path))).await;
        settle(&stats, Duration::from_secs(1)).await;
    }
    let s = stats.snapshot();
    // The decisions, not their timing: every 64 KiB drop started a drain
    // (drained on any machine but one slower than 50 ms on loopback), every
    // 1 MiB one was skipped unread.
    let started = s.count(Reason::EndOfBody) + s.count(Reason::OverTime);
    assert_eq!((started, s.count(Reason::DeclaredOverBudget), s.skipped), (3, 2, 2), "{s:?}");
    let origin = &layer.origins()[0];
    let (rtt, budget) = (origin.round_trip.expect("measured"), origin.budget.expect("a budget"));
    let expected = (rtt * 6).clamp(Duration::from_millis(50), Duration::from_secs(1));
    assert_eq!(budget.max_time(), expected, "6 round trips, at least 50 ms: {origin:?}");
    assert_eq!(budget.max_bytes(), 256 * KIB as u64);
}

/// Adaptive mode, observed, far away: its budget counts the setup and the
/// slow start a kept connection saves, and its drains keep the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_mode_keeps_a_far_origins_connections() {
    let server = RawServer::start(far_origin).await;
    let layer = DrainOnDropLayer::new().adaptive();
    let connector = CountingConnector::new().with_setup(Duration::from_millis(200));
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, http_body_util::Empty<bytes::Bytes>>(layer.observe(connector.clone()));
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().layer(layer.clone()).service(client);
    for _ in 0..5 {
        let res = svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap();
        drop(res);
        settle(&stats, Duration::from_secs(1)).await;
        connector.hold(true);
    }
    connector.hold(false);
    let s = stats.snapshot();
    assert_eq!(s.count(Reason::EndOfBody), 5, "{s:?} {:?}", layer.origins());
    assert_eq!(server.accepted(), 1, "kept: one connection (dials held)");
    let budget = layer.origins()[0].budget.expect("adaptive budget");
    assert!(budget.max_time() >= Duration::from_millis(200), "at least the setup cost: {budget:?}");
}
