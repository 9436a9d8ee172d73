//! Adaptive budgets in the conditions users bring: the setup cost is the
//! connector's own time, throughput is the link's (not a slow caller's, not
//! one sample taken under cross traffic), and a short run is never worse
//! than the fixed default.
//!
//! A "far" origin is simulated by a connector that takes a set time to
//! connect, as a TCP plus TLS handshake across a continent would; bodies are
//! paced like a link of a given speed. Decisions are asserted by reason and
//! by the connections the client opened.
//!
//! Adaptive mode decides from what it measures on this machine, so no
//! assertion here rests on how fast the machine is: a measured estimate is
//! bounded by what the test measured around it (the connector's dials),
//! drains that must end get a setup cost of a second (their time budget),
//! reuse is asserted with dials held (only a pooled connection can serve),
//! and what a busy machine legitimately changes (a LAN origin measured slow
//! drains less) is printed rather than asserted.

mod support;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, DrainSnapshot, OriginSnapshot, Reason};
use http::Uri;
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
        steps.push(Step::Write(cl_head(len)));
        steps.push(Step::Paced { seed: 0, len, piece, every: Duration::from_millis(5) });
        steps
    })
    .await
}

/// A connector around `C` that times every dial from its call to its
/// connection, from the outside: whatever an observer inside measures of a
/// dial lies within what this measured of it.
#[derive(Clone)]
struct Timed<C> {
    inner: C,
    dials: Arc<Mutex<Vec<Duration>>>,
}

impl<C> Service<Uri> for Timed<C>
where
    C: Service<Uri>,
    C::Future: Send + 'static,
{
    type Response = C::Response;
    type Error = C::Error;
    type Future = Pin<Box<dyn Future<Output = Result<C::Response, C::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let started = Instant::now();
        let dial = self.inner.call(uri);
        let dials = self.dials.clone();
        Box::pin(async move {
            let conn = dial.await?;
            dials.lock().unwrap().push(started.elapsed());
            Ok(conn)
        })
    }
}

/// What one run saw.
struct Run {
    /// Connections the client opened during the run.
    conns: usize,
    stats: DrainSnapshot,
    origins: Vec<OriginSnapshot>,
    /// How long each of those dials took, timed around the observer.
    dials: Vec<Duration>,
}

impl Run {
    /// The longest dial: no setup cost the observer measured can exceed it.
    fn longest_dial(&self) -> Duration {
        self.dials.iter().copied().max().expect("at least one dial")
    }
}

/// Dials are never held.
const NEVER: usize = usize::MAX;

/// One run: the requests `plan` lists, in order, through `layer` (its
/// observer around a connector taking `setup` to connect when `observe`).
/// From request `pooled_from` on (0-based), dials are held: only a pooled
/// connection can serve them, so a connection that did not come back fails
/// the request (a held dial gives up after 10 s), whatever hyper-util's
/// checkout race does.
async fn run(
    server: &RawServer,
    setup: Duration,
    layer: DrainOnDropLayer,
    observe: bool,
    plan: &[(&str, Caller)],
    pooled_from: usize,
) -> Run {
    let connector = CountingConnector::new().with_setup(setup);
    let dials = Arc::new(Mutex::new(Vec::new()));
    let stats = layer.stats();
    let mut calls = 0usize;
    macro_rules! drive {
        ($client:expr) => {{
            let mut svc = ServiceBuilder::new().layer(layer.clone()).service($client);
            for (i, (path, caller)) in plan.iter().enumerate() {
                calls += 1;
                connector.hold(i >= pooled_from);
                let res = svc.ready().await.unwrap().call(get(server.uri(path))).await;
                let res = res.unwrap_or_else(|e| panic!("request {i} ({path}): {e:?}"));
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
            connector.hold(false);
        }};
    }
    if observe {
        let timed = Timed { inner: layer.observe(connector.clone()), dials: dials.clone() };
        let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(timed);
        drive!(client);
    } else {
        let timed = Timed { inner: connector.clone(), dials: dials.clone() };
        let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(timed);
        drive!(client);
    }
    assert_eq!(calls, plan.len());
    let dials = dials.lock().unwrap().clone();
    Run { conns: connector.count(), stats: stats.snapshot(), origins: layer.origins(), dials }
}

fn repeat(path: &'static str, caller: Caller, n: usize) -> Vec<(&'static str, Caller)> {
    vec![(path, caller); n]
}

/// A setup cost that gives adaptive drains a time budget of a second (the
/// ceiling), so that a drain that should end does on any machine.
const FAR: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_observer_the_setup_cost_is_the_connectors_own_time() {
    let _serial = SERIAL.lock().await;
    let setup = Duration::from_millis(150);
    let server = server(64 * KIB, 256 * KIB, 256 * KIB, Duration::ZERO).await;
    let layer = DrainOnDropLayer::new().adaptive();
    let run = run(&server, setup, layer, true, &repeat("/", Caller::Drops, 3), NEVER).await;
    let origins = &run.origins;
    assert_eq!(origins.len(), 1, "{origins:?}");
    assert_eq!(origins[0].origin, format!("http://{}", server.addr));
    let estimate = origins[0].setup_cost.expect("estimated");
    // Each sample lies within its dial, which lasts at least `setup` and at
    // most what the wrapper around the observer timed, however slow the
    // machine: so does their average.
    assert!(
        estimate >= setup && estimate <= run.longest_dial(),
        "the observer measured the connector's {setup:?}: {estimate:?}, dials {:?}",
        run.dials
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_does_not_lower_the_origins_throughput() {
    let _serial = SERIAL.lock().await;
    // A second of connect away; some bodies are read 400 ms late, the others
    // are dropped. Draining 64 KiB costs microseconds, a new connection a
    // second (the drains' time budget).
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
    // From the second request on, only the pooled connection can serve.
    let Run { conns, stats: s, origins, .. } = run(&server, FAR, layer, true, &plan, 1).await;
    assert_eq!(s.count(Reason::DeclaredOverBudget), 0, "no 64 KiB body skipped: {s:?} {origins:?}");
    assert_eq!(s.count(Reason::EndOfBody), 3, "every dropped body drained: {s:?} {origins:?}");
    assert_eq!(conns, 1, "drained connections serve the next requests");
    let budget = origins[0].budget.expect("a budget");
    assert!(budget.max_bytes() >= 64 * KIB as u64, "the slow reads did not shrink the budget: {budget:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_endpoint_is_not_taken_for_setup_cost() {
    let _serial = SERIAL.lock().await;
    // Loopback: a new connection costs well under a millisecond on a quiet
    // machine. The first request, which opens the connection, goes to a
    // 400 ms endpoint; then 1 MiB bodies are dropped. Draining 1 MiB costs
    // more than a reconnect: the default skips them, and so does adaptive
    // mode unless this machine takes long to connect (then draining pays,
    // and adaptive mode drains).
    let server = server(MIB, 256 * KIB, 256 * KIB, Duration::from_millis(400)).await;
    let mut plan = vec![("/think", Caller::Reads)];
    plan.extend(repeat("/", Caller::Drops, 6));
    for observe in [false, true] {
        let run =
            run(&server, Duration::ZERO, DrainOnDropLayer::new().adaptive(), observe, &plan, NEVER).await;
        let (s, origins) = (&run.stats, &run.origins);
        println!("observer {observe}: {s:?} {origins:?}, dials {:?}", run.dials);
        match origins[0].setup_cost {
            // Without an observer, no setup cost: the default budget.
            None => assert_eq!(s.count(Reason::DeclaredOverBudget), 6, "observer {observe}: {s:?}"),
            // The think time (at least 400 ms) is in the first head, never in
            // a dial: the estimate is within the dials the wrapper timed.
            Some(setup) => {
                assert!(observe, "a setup cost only with an observer: {origins:?}");
                assert!(
                    setup <= run.longest_dial(),
                    "the endpoint's think time is not a setup cost: {origins:?}, dials {:?}",
                    run.dials
                );
                let (skipped, drained) = (s.count(Reason::DeclaredOverBudget), s.count(Reason::EndOfBody));
                assert_eq!(skipped + drained, 6, "each 1 MiB body skipped or drained: {s:?}");
            }
        }
    }
    let default = run(&server, Duration::ZERO, DrainOnDropLayer::new(), true, &plan, NEVER).await;
    let adaptive = run(&server, Duration::ZERO, DrainOnDropLayer::new().adaptive(), true, &plan, NEVER).await;
    // The default skips the six (a connection each, after the first); so does
    // adaptive mode, or it drains some: one dial that lost hyper-util's
    // checkout race to a drained connection is the most it can add.
    assert_eq!(default.stats.count(Reason::DeclaredOverBudget), 6, "{:?}", default.stats);
    assert!(
        adaptive.conns <= default.conns + 1,
        "adaptive {} connections, default {}",
        adaptive.conns,
        default.conns
    );
}

/// A short run on a LAN: until a drain measured the link, adaptive mode
/// gives every drop at least the default budget, so it drains what the
/// default drains. Once the link is measured (a drain of a connection's
/// second response that waited for the server), a LAN origin's drains get
/// what a 2 ms reconnect costs: a busy machine that drains slower than that
/// closes connections the default keeps, by design. The run's connections
/// are printed; the budget before measuring is asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_run_on_a_lan_is_no_worse_than_the_default() {
    let _serial = SERIAL.lock().await;
    // 2 ms to connect (a TLS handshake on a LAN), 64 KiB bodies dropped unread.
    let server = server(64 * KIB, 256 * KIB, 256 * KIB, Duration::ZERO).await;
    let setup = Duration::from_millis(2);
    // One drop: the first response of a new connection, whose drain is never
    // a throughput sample (slow start).
    let first =
        run(&server, setup, DrainOnDropLayer::new().adaptive(), true, &repeat("/", Caller::Drops, 1), NEVER)
            .await;
    let origin = &first.origins[0];
    assert_eq!(origin.throughput, None, "nothing measured the link yet: {origin:?}");
    let budget = origin.budget.expect("an adaptive budget: the observer measured the setup cost");
    // The default budget for this round trip (`policy::default_budget`):
    // 256 KiB, and 6 round trips between 50 ms and 1 s.
    let rtt = origin.round_trip.expect("measured");
    let default_time = (rtt * 6).clamp(Duration::from_millis(50), Duration::from_secs(1));
    assert!(
        budget.max_bytes() >= 256 * KIB as u64 && budget.max_time() >= default_time,
        "at least the default budget (256 KiB, {default_time:?}) until the link is measured: {origin:?}"
    );

    let plan = repeat("/", Caller::Drops, 20);
    let default = run(&server, setup, DrainOnDropLayer::new(), true, &plan, NEVER).await;
    let adaptive = run(&server, setup, DrainOnDropLayer::new().adaptive(), true, &plan, NEVER).await;
    println!(
        "20 drops of 64 KiB, 2 ms to connect: default {} connections {:?}; adaptive {} connections {:?} {:?}",
        default.conns, default.stats, adaptive.conns, adaptive.stats, adaptive.origins
    );
    let s = &adaptive.stats;
    assert_eq!((s.drained + s.abandoned + s.skipped, s.failed), (20, 0), "every drop counted once: {s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_sample_under_cross_traffic_does_not_stop_draining() {
    let _serial = SERIAL.lock().await;
    // A second of connect away, 1 MiB bodies on a fast link, except that one
    // body, on a warm connection (a new connection's drains are in slow
    // start and give no sample), shares the link with cross traffic: 64 KiB
    // at 3 KiB every 5 ms, at most 0.6 MB/s, drained within its second and
    // measured slow. The bodies after it arrive fast again, and draining
    // them still pays.
    let server = RawServer::start(|head| {
        let every = Duration::from_millis(5);
        if head.path == "/slow" {
            let mut steps = vec![Step::Write(cl_head(64 * KIB))];
            steps.push(Step::Paced { seed: 0, len: 64 * KIB, piece: 3 * KIB, every });
            steps
        } else {
            let mut steps = vec![Step::Write(cl_head(MIB))];
            steps.push(Step::Paced { seed: 0, len: MIB, piece: 256 * KIB, every });
            steps
        }
    })
    .await;
    let mut plan = vec![("/", Caller::Drops), ("/slow", Caller::Drops)];
    plan.extend(repeat("/", Caller::Drops, 6));
    // One connection for all: from the second request on, dials are held.
    let Run { conns, stats: s, origins, .. } =
        run(&server, FAR, DrainOnDropLayer::new().adaptive(), true, &plan, 1).await;
    assert_eq!(
        s.count(Reason::DeclaredOverBudget),
        0,
        "no body skipped after one slow sample: {s:?} {origins:?}"
    );
    assert_eq!(s.count(Reason::EndOfBody), 8, "{s:?} {origins:?}");
    assert_eq!(conns, 1, "every body drained on the one connection");
    // Cross traffic cannot deliver faster than 3 KiB per 5 ms; the fast
    // drains (on the warm connection) are faster than that.
    let throughput = origins[0].throughput.expect("measured");
    assert!(
        throughput > 3 * KIB as u64 * 200,
        "the fast drains are the estimate, not the slow one: {origins:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lan_like_origin_stops_draining_large_bodies_once_measured() {
    let _serial = SERIAL.lock().await;
    // Loopback connect; 1 MiB at ~13 MB/s takes ~80 ms, far more than a new
    // connection. The first drains (default budget) measure the link; then
    // adaptive mode skips what the link cannot deliver in a setup cost.
    let server = server(MIB, 64 * KIB, 64 * KIB, Duration::ZERO).await;
    let fixed = DrainOnDropLayer::new().max_bytes(4 * MIB as u64).max_time(SECONDS);
    let s =
        run(&server, Duration::ZERO, fixed.clone(), true, &repeat("/", Caller::Drops, 4), NEVER).await.stats;
    assert_eq!(s.drained, 4, "a large fixed budget drains every one: {s:?}");
    let adaptive =
        DrainOnDropLayer::new().adaptive().max_bytes(4 * MIB as u64).max_time(Duration::from_secs(1));
    let Run { conns, stats: s, origins, .. } =
        run(&server, Duration::ZERO, adaptive, true, &repeat("/", Caller::Drops, 10), NEVER).await;
    // Drops before the link was measured (a drain on a connection past its
    // first response) are drained: two on a quiet machine; on a busy one a
    // third at times, when hyper-util dialed for the next request while the
    // first warm drain ran (with busy loops on both cores: 2 in 8 runs of
    // 12, 3 in the other 4; the bound of 8 this test once had failed CI).
    println!("drained before the link was measured: {}", s.drained);
    let skipped = s.count(Reason::DeclaredOverBudget);
    assert!(skipped >= 7, "measured slow, then skipped: {s:?} {origins:?}");
    // Each skipped body costs its connection: the next request dials (a
    // third drain before the measure reuses one more: 7 connections, as
    // it did under CI's busy loops against a bound of 8 this test had).
    assert!(conns as u64 >= skipped, "new connections are cheaper here: {conns} for {skipped} skipped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_origin_drains_bodies_the_fixed_default_skips() {
    let _serial = SERIAL.lock().await;
    // A new connection costs a second; reading the 1 MiB rest costs ~20 ms.
    let reused = Arc::new(AtomicUsize::new(0));
    let counter = reused.clone();
    let server = RawServer::start(move |head| {
        if head.nth > 0 {
            counter.fetch_add(1, Ordering::SeqCst);
        }
        vec![
            Step::Write(cl_head(MIB)),
            Step::Paced { seed: 0, len: MIB, piece: 256 * KIB, every: Duration::from_millis(5) },
        ]
    })
    .await;
    let plan = repeat("/", Caller::Drops, 6);
    // From the second request on, only the pooled connection can serve.
    let Run { conns, stats: s, origins, .. } =
        run(&server, FAR, DrainOnDropLayer::new().adaptive(), true, &plan, 1).await;
    assert_eq!(s.drained, 6, "adaptive drains 1 MiB bodies from a far origin: {s:?} {origins:?}");
    assert_eq!(conns, 1, "{conns} connections");
    assert_eq!(reused.load(Ordering::SeqCst), 5, "requests go out on drained connections");
    let Run { conns, stats: s, .. } =
        run(&server, FAR, DrainOnDropLayer::new(), true, &repeat("/", Caller::Drops, 3), NEVER).await;
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
