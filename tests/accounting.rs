//! Counting: exact figures after `in_flight == 0`, reasons that name the real
//! cause, one count per early drop however many layers it passed, no
//! credentials in what is shown (events: `stacks/events.rs`; the Prometheus
//! export: `stacks/metrics.rs`).

mod support;

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, Reason};
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use tower::{Service, ServiceBuilder, ServiceExt};

use support::{RawServer, SECONDS, SLACK, Step, big_or_small, client, content_length, get, wait_for};

fn runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build().unwrap()
}

/// An in-memory inner service answering with `len` bytes.
fn memory_service(
    len: usize,
) -> impl Service<Request<()>, Response = Response<Full<Bytes>>, Error = Infallible, Future: Send> + Clone {
    let body = Bytes::from(vec![7u8; len]);
    tower::service_fn(move |_req: Request<()>| {
        let body = body.clone();
        // Framed as hyper would frame it on the wire.
        async move {
            Ok::<_, Infallible>(
                Response::builder().header("content-length", len).body(Full::new(body)).unwrap(),
            )
        }
    })
}

#[test]
fn every_snapshot_after_in_flight_zero_includes_every_ended_drop() {
    const DROPS: u64 = 20_000;
    let rt = runtime(2);
    // Seconds of time budget: every drain must reach the end, however late a
    // busy machine runs its task.
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let stats = layer.stats();
    // The body is not ready at the drop: every drain runs on a worker thread.
    let mut svc = ServiceBuilder::new().layer(layer).service(late_service());
    let violations = rt.block_on(async {
        let mut violations = 0u64;
        for i in 1..=DROPS {
            let res = svc.ready().await.unwrap().call(Request::new(())).await.unwrap();
            // Dropped unread on this thread; the drain ends on a worker.
            drop(res);
            let deadline = Instant::now() + SLACK;
            while stats.snapshot().in_flight != 0 {
                assert!(Instant::now() < deadline, "drain {i} never ended");
                std::hint::spin_loop();
            }
            let s = stats.snapshot();
            if s.drained != i || s.bytes_drained != 10 * i {
                violations += 1;
            }
        }
        violations
    });
    println!("{DROPS} drops, {violations} snapshots missed a drop that had ended");
    assert_eq!(violations, 0, "a snapshot after in_flight == 0 must include every ended drain");
    assert_eq!(stats.snapshot().count(Reason::EndOfBody), DROPS);
}

/// Counts the panic messages containing `needle` printed from now on, for
/// this test's runtimes (other tests' panics do not contain it).
fn count_panics(needle: &'static str) -> Arc<AtomicUsize> {
    let seen = Arc::new(AtomicUsize::new(0));
    let previous = std::panic::take_hook();
    let counter = seen.clone();
    std::panic::set_hook(Box::new(move |info| {
        if info.to_string().contains(needle) {
            counter.fetch_add(1, Ordering::SeqCst);
        }
        previous(info);
    }));
    seen
}

/// 10 bytes that are not there at the first poll: a drain has to wait, so
/// it runs on a task, not in the drop.
struct LateBody(u8);

impl Body for LateBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0 += 1;
        match self.0 {
            1 => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            2 => Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"0123456789"))))),
            _ => Poll::Ready(None),
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(if self.0 < 2 { 10 } else { 0 })
    }

    fn is_end_stream(&self) -> bool {
        self.0 >= 2
    }
}

/// An in-memory inner service answering with a [`LateBody`].
fn late_service()
-> impl Service<Request<()>, Response = Response<LateBody>, Error = Infallible, Future: Send> + Clone {
    tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::builder().header("content-length", 10).body(LateBody(0)).unwrap())
    })
}

/// A runtime built without a time driver (hyper-util's client works there):
/// drains that have to wait still run and keep their time budget, on the
/// crate's own timer, and nothing panics (0.4 let tokio's timer panic and
/// caught it, which a `panic = "abort"` process does not survive:
/// `tests/timerless.rs` checks that in a child process).
#[test]
fn a_runtime_without_time_driver_drains_and_never_panics() {
    let panics = count_panics("timers are disabled");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_io().build().unwrap();
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().layer(layer).service(late_service());
    rt.block_on(async {
        for i in 1..=5u64 {
            let res = svc.ready().await.unwrap().call(Request::new(())).await.unwrap();
            drop(res);
            let deadline = Instant::now() + SLACK;
            while stats.snapshot().in_flight != 0 || stats.snapshot().drained < i {
                assert!(Instant::now() < deadline, "drop {i} was never counted: {:?}", stats.snapshot());
                tokio::task::yield_now().await;
            }
        }
    });
    let s = stats.snapshot();
    assert_eq!(s.count(Reason::EndOfBody), 5, "{s:?}");
    assert_eq!(s.bytes_drained, 50, "{s:?}");
    assert_eq!(s.in_flight, 0);
    assert_eq!(panics.load(Ordering::SeqCst), 0, "no timer was asked for");
}

/// A body with bytes left that panics when polled.
struct PanickingBody;

impl Body for PanickingBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        panic!("test body panics while drained");
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(10)
    }
}

#[test]
fn a_body_that_panics_while_drained_counts_body_panic() {
    let rt = runtime(2);
    // Seconds: printing a panic's backtrace can hold a worker longer than 50 ms.
    let layer = DrainOnDropLayer::new().max_time(Duration::from_secs(30));
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().layer(layer).service(tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::builder().header("content-length", 10).body(PanickingBody).unwrap())
    }));
    rt.block_on(async {
        for _ in 0..3 {
            drop(svc.ready().await.unwrap().call(Request::new(())).await.unwrap());
        }
        wait_for("the drains to end", SLACK, || {
            stats.snapshot().in_flight == 0 && stats.snapshot().failed == 3
        })
        .await;
    });
    let s = stats.snapshot();
    assert_eq!(s.count(Reason::BodyPanic), 3, "{s:?}");
    assert_eq!(s.abandoned, 0, "a panic is not a runtime shutdown: {s:?}");
}

#[tokio::test]
async fn a_concurrency_cap_of_zero_is_disabled_not_saturated() {
    let layer = DrainOnDropLayer::new().max_concurrent_drains(0);
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().layer(layer).service(memory_service(10));
    drop(svc.ready().await.unwrap().call(Request::new(())).await.unwrap());
    let s = stats.snapshot();
    assert_eq!((s.count(Reason::Disabled), s.count(Reason::Saturated), s.in_flight), (1, 0, 0), "{s:?}");
}

#[tokio::test]
async fn the_same_layer_stacked_twice_counts_and_drains_once() {
    let server = big_or_small(64 * 1024).await;
    let (client, connector) = client();
    // The default byte budget, seconds of time: only the bytes decide.
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let stats = layer.stats();
    // Layers between the two, which call and poll the inner one inside their
    // own call and poll.
    let mut svc = ServiceBuilder::new()
        .layer(layer.clone())
        .timeout(Duration::from_secs(30))
        .map_response(|res: Response<_>| res)
        .layer(layer)
        .service(client);
    for i in 0..6 {
        // From the second request on, dials are held: only the pooled
        // connection can serve it (a held dial fails after 10 s), whatever
        // hyper-util's checkout race does.
        connector.hold(i > 0);
        let path = if i < 5 { "/small" } else { "/big" };
        drop(svc.ready().await.unwrap().call(get(server.uri(path))).await.unwrap());
        assert!(stats.wait_idle(SLACK).await, "the drain should end: {stats:?}");
    }
    connector.hold(false);
    let s = stats.snapshot();
    assert_eq!(s.drained, 5, "five drops, five drains: {s:?}");
    assert_eq!(s.bytes_drained, 5 * 64 * 1024, "each body read once: {s:?}");
    assert_eq!(s.skipped, 1, "one drop over budget, counted once: {s:?}");
    assert_eq!(s.count(Reason::DeclaredOverBudget), 1);
    assert_eq!(server.accepted(), 1, "five drained bodies on one connection");
    wait_for("the skipped body's connection to close", SLACK, || server.open.load(Ordering::SeqCst) == 0)
        .await;
    assert_eq!(connector.count(), server.accepted());
}

#[tokio::test]
async fn with_two_layers_the_innermost_owns_the_drain_and_its_budget() {
    let server = RawServer::start(|_| {
        let mut steps = content_length(3, 1000);
        // Head and 500 bytes, then a stall: only the time budget ends the drain.
        let Step::Write(bytes) = steps.remove(0) else { unreachable!() };
        let cut = bytes.len() - 500;
        vec![Step::Write(bytes[..cut].to_vec()), Step::Hang]
    })
    .await;
    let (client, _) = client();
    // Budgets far apart: a drain by the outer layer, instead of the inner
    // one or after it, would hold the connection for 30 s, past the wait
    // for the server to see it closed.
    let (outer, inner) = (
        DrainOnDropLayer::new().max_time(SECONDS),
        DrainOnDropLayer::new().max_time(Duration::from_millis(200)),
    );
    let (outer_stats, inner_stats) = (outer.stats(), inner.stats());
    let mut svc = ServiceBuilder::new().layer(outer).layer(inner).service(client);
    let res = svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap();
    let dropped = Instant::now();
    drop(res);
    wait_for("the server to see the connection closed", SLACK, || server.open.load(Ordering::SeqCst) == 0)
        .await;
    let held = dropped.elapsed();
    println!("connection held {held:?} after the drop (one 200 ms drain, not the outer 30 s)");
    let (o, i) = (outer_stats.snapshot(), inner_stats.snapshot());
    assert_eq!(o, drain_on_drop::DrainSnapshot::default(), "the outer layer passes the body through: {o:?}");
    assert_eq!((i.count(Reason::OverTime), i.abandoned, i.in_flight), (1, 1, 0), "{i:?}");
    assert!(held >= Duration::from_millis(200), "the drain keeps the inner time budget: {held:?}");
}

#[tokio::test]
async fn layer_and_stats_debug_output_carries_no_credentials() {
    let server = RawServer::start(|_| content_length(4, 100)).await;
    let (client, _) = client();
    let layer = DrainOnDropLayer::new().adaptive();
    let mut svc = ServiceBuilder::new().layer(layer.clone()).service(client);
    let uri = format!("http://alice:secret@{}/x", server.addr);
    let res = svc.ready().await.unwrap().call(get(uri.parse().unwrap())).await.unwrap();
    drop(res);
    let text = format!("{layer:?} {svc:?} {:?} {:?}", layer.stats(), layer.origins());
    assert!(!text.contains("secret") && !text.contains("alice"), "{text}");
    let origins = layer.origins();
    assert_eq!(origins.len(), 1);
    assert_eq!(origins[0].origin, format!("http://{}", server.addr), "scheme://host:port");
}
