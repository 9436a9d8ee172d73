//! Dropping a response never hurts the caller: `drop(response)` reads no
//! foreign body and waits for nothing, the time budget is a hard bound, a
//! response drains once however it was wrapped, drains wait on the runtime
//! their response arrived on, and every drop is counted under a reason that
//! says what happened (a skipped drop read nothing).
//!
//! Runtimes are built by hand where the test is about them; servers run on
//! a runtime of their own so that the one under test can go away.

mod support;

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, LazyLock, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, DrainSnapshot, DrainStats, Outcome, Reason};
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use tokio::runtime::{Builder, Runtime};
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

use support::*;

fn current_thread() -> Runtime {
    Builder::new_current_thread().enable_all().build().unwrap()
}

fn multi_thread() -> Runtime {
    Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Runs `f` on a thread of its own and waits for it at most `SLACK`: a drop
/// that deadlocks fails the test instead of hanging it.
fn returns_within_slack(what: &str, f: impl FnOnce() + Send + 'static) {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = done.send(());
    });
    finished.recv_timeout(SLACK).unwrap_or_else(|_| panic!("{what}: never returned"));
}

/// The only outcome counted so far, with every count.
fn only(s: &DrainSnapshot) -> Vec<(Reason, u64)> {
    s.iter().filter(|(_, n)| *n > 0).collect()
}

/// `Content-Length: 8 KiB`: 1 KiB with the head, the rest 50 ms later, so a
/// drain of it has to wait for the server.
fn rest_comes_later(_: &Head) -> Vec<Step> {
    vec![
        Step::Write([cl_head(8 * KIB), body_bytes(1, KIB)].concat()),
        Step::Sleep(Duration::from_millis(50)),
        Step::Write(body_bytes(1, 8 * KIB)[KIB..].to_vec()),
    ]
}

/// `Content-Length: 4096`: 512 bytes with the head, then nothing until the
/// test ends: a drain of it ends only on its time budget.
fn stalls(_: &Head) -> Vec<Step> {
    vec![Step::Write([cl_head(4096), body_bytes(0, 512)].concat()), Step::Hang]
}

/// A raw server on a multi-thread runtime of its own.
fn server_on_its_own(script: fn(&Head) -> Vec<Step>) -> (Runtime, RawServer) {
    let rt = multi_thread();
    let server = rt.block_on(RawServer::start(script));
    (rt, server)
}

// Why 2: the runtime that fetched the response.

static SHARED_LAYER: LazyLock<DrainOnDropLayer> = LazyLock::new(|| DrainOnDropLayer::new().max_time(SECONDS));

/// A layer in a static outlives the runtime it first served. A body fetched
/// on a later, live runtime and dropped on a plain thread drains on the
/// runtime it arrived on.
#[test]
fn a_body_dropped_on_a_plain_thread_drains_on_the_live_runtime_it_arrived_on() {
    let (_server_rt, server) = server_on_its_own(rest_comes_later);
    let stats = SHARED_LAYER.stats();
    let first = current_thread();
    first.block_on(async {
        let mut svc = SHARED_LAYER.layer(client().0);
        let res = svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap();
        read_all(res.into_body()).await.unwrap();
    });
    drop(first);
    let second = multi_thread();
    let (svc, res) = second.block_on(async {
        let mut svc = SHARED_LAYER.layer(client().0);
        let res = svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap();
        (svc, res)
    });
    std::thread::spawn(move || drop(res)).join().unwrap();
    let s = settle_blocking(&stats, SECONDS);
    assert_eq!(only(&s), [(Reason::EndOfBody, 1)], "drained on the runtime it arrived on: {s:?}");
    assert_eq!(s.bytes_drained, 8 * KIB as u64);
    drop(svc);
}

/// One client and layer in statics, used from one short-lived runtime after
/// another (a test suite's `#[tokio::test]`s): every runtime's drops drain.
#[test]
fn a_static_client_serves_one_short_lived_runtime_after_another() {
    static CLIENT: LazyLock<Mutex<Option<TestClient>>> = LazyLock::new(|| Mutex::new(None));
    let (_server_rt, server) = server_on_its_own(rest_comes_later);
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let stats = layer.stats();
    for round in 1..=3u64 {
        let rt = current_thread();
        rt.block_on(async {
            let client = CLIENT.lock().unwrap().get_or_insert_with(|| client().0).clone();
            let mut svc = layer.layer(client);
            for _ in 0..3 {
                drop_unread(&mut svc, get(server.uri("/"))).await;
                settle(&stats, SECONDS).await;
            }
        });
        let s = stats.snapshot();
        assert_eq!(only(&s), [(Reason::EndOfBody, 3 * round)], "round {round}: {s:?}");
    }
}

// Why 3: no foreign code on the caller's thread.

/// A body below the layer that takes `lock` for every frame, and in
/// `size_hint` and `is_end_stream` (a `map_response` body with shared
/// state): 100 frames of 10 bytes, then its end.
struct Locking {
    lock: Arc<Mutex<()>>,
    left: usize,
}

impl Body for Locking {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let _held = this.lock.lock().unwrap();
        if this.left == 0 {
            return Poll::Ready(None);
        }
        this.left -= 1;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"0123456789")))))
    }

    fn size_hint(&self) -> SizeHint {
        let _held = self.lock.lock().unwrap();
        SizeHint::with_exact(10 * self.left as u64)
    }

    fn is_end_stream(&self) -> bool {
        let _held = self.lock.lock().unwrap();
        self.left == 0
    }
}

/// A service answering every request with `body()`, `Content-Length` set.
fn serving<B, F>(
    len: u64,
    body: F,
) -> impl Service<Request<()>, Response = Response<B>, Error = Infallible> + Clone
where
    F: Fn() -> B + Clone + Send + 'static,
    B: Send + 'static,
{
    tower::service_fn(move |_: Request<()>| {
        let res = Response::builder().header("content-length", len).body(body()).unwrap();
        async move { Ok::<_, Infallible>(res) }
    })
}

/// The caller holds the lock the body takes for every frame, in `size_hint`
/// and in `is_end_stream`, while it drops the response: the drop returns (it
/// runs no code of a body that is not hyper's), and the drain runs once the
/// lock is free, on the runtime the response arrived on. Both on a plain
/// thread and inside the runtime, and after the caller read part of it.
#[test]
fn dropping_a_body_whose_frames_take_a_lock_the_caller_holds_returns() {
    for (inside_the_runtime, frames_read) in [(false, 0), (true, 0), (false, 3), (true, 3)] {
        let place = if inside_the_runtime { "inside the runtime" } else { "on a plain thread" };
        let what = format!("{place}, {frames_read} frames read first");
        let lock = Arc::new(Mutex::new(()));
        let layer = DrainOnDropLayer::new().max_time(SECONDS);
        let stats = layer.stats();
        let rt = Arc::new(multi_thread());
        let body = {
            let lock = lock.clone();
            move || Locking { lock: lock.clone(), left: 100 }
        };
        let mut svc = layer.layer(serving(1000, body));
        let res = rt.block_on(async {
            let mut res = svc.ready().await.unwrap().call(Request::new(())).await.unwrap();
            for _ in 0..frames_read {
                assert_eq!(read_one_frame(res.body_mut()).await, Some(10));
            }
            res
        });
        let (rt2, lock2) = (rt.clone(), lock.clone());
        returns_within_slack(&what, move || {
            let held = lock2.lock().unwrap();
            if inside_the_runtime {
                rt2.block_on(async move { drop(res) });
            } else {
                drop(res);
            }
            drop(held);
        });
        let s = settle_blocking(&stats, SECONDS);
        assert_eq!(only(&s), [(Reason::EndOfBody, 1)], "{what}: drained on the runtime once free: {s:?}");
        assert_eq!(s.bytes_drained, 1000 - 10 * frames_read, "{what}");
    }
}

// Why 4: a hard time budget.

/// A body below the layer whose every frame costs 5 ms of the thread's
/// time (a decoder, say), and never ends.
struct Costly {
    frames: Arc<AtomicUsize>,
}

impl Body for Costly {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        std::thread::sleep(Duration::from_millis(5));
        self.frames.fetch_add(1, Ordering::SeqCst);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"0123456789")))))
    }
}

/// The deadline is checked before every frame and counts from the drop: a
/// drain of 5 ms frames under a 50 ms budget reads at most 10 of them
/// (frame k starts at least 5k ms after the drop) before `over_time`,
/// whoever reads them and however slow the machine (a slow one reads fewer).
#[test]
fn the_time_budget_bounds_a_drain_to_one_frame_past_it() {
    let frames = Arc::new(AtomicUsize::new(0));
    let layer = DrainOnDropLayer::new().max_bytes(u64::MAX).max_time(Duration::from_millis(50));
    let stats = layer.stats();
    let rt = multi_thread();
    let body = {
        let frames = frames.clone();
        move || Costly { frames: frames.clone() }
    };
    let chunked = tower::service_fn(move |_: Request<()>| {
        let res = Response::builder().header("transfer-encoding", "chunked").body(body()).unwrap();
        async move { Ok::<_, Infallible>(res) }
    });
    let mut svc = layer.layer(chunked);
    rt.block_on(async {
        drop(svc.ready().await.unwrap().call(Request::new(())).await.unwrap());
        settle(&stats, SECONDS).await;
    });
    let s = stats.snapshot();
    assert_eq!(only(&s), [(Reason::OverTime, 1)], "{s:?}");
    let read = frames.load(Ordering::SeqCst);
    println!("frames read: {read}");
    assert!(read <= 11, "at most 50 ms / 5 ms + 1 frames read: {read}");
}

// Why 5: one drain per response.

/// Every way of wrapping one response twice: the layer's service and then
/// `wrap_response`, `wrap_response` twice, two layers, two layers with a
/// `Buffer` (another task) between them. Each stalled body is counted once
/// (one `over_time`), and read once (the 512 bytes that came with its head:
/// two seconds of time budget leave a busy machine ample time to read them
/// before the stall runs the drain out of time). The four drains run side
/// by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_drains_once_however_it_was_wrapped() {
    let server = RawServer::start(stalls).await;
    let max_time = Duration::from_secs(2);
    let layer = || DrainOnDropLayer::new().max_time(max_time);
    let once = |stats: &[&DrainStats], how: &str| {
        let totals: Vec<_> = stats.iter().map(|s| s.snapshot()).collect();
        let over_time: u64 = totals.iter().map(|s| s.count(Reason::OverTime)).sum();
        let counted: u64 = totals.iter().map(|s| s.drained + s.abandoned + s.skipped + s.failed).sum();
        let bytes: u64 = totals.iter().map(|s| s.bytes_drained).sum();
        assert_eq!((counted, over_time, bytes), (1, 1, 512), "{how}: one drain: {totals:?}");
    };

    // The layer's service, then wrap_response.
    let service_then_wrap = layer();
    let mut svc = service_then_wrap.clone().layer(client().0);
    let res = svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap();
    drop(service_then_wrap.wrap_response(res));

    // wrap_response twice.
    let wrap_twice = layer();
    let mut bare = client().0;
    let res = bare.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap();
    drop(wrap_twice.wrap_response(wrap_twice.wrap_response(res)));

    // Two layers.
    let (outer, inner) = (layer(), layer());
    let mut two = ServiceBuilder::new().layer(outer.clone()).layer(inner.clone()).service(client().0);
    drop(two.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap());

    // Two layers with a Buffer between them.
    let (buffered_outer, buffered_inner) = (layer(), layer());
    let mut buffered = ServiceBuilder::new()
        .layer(buffered_outer.clone())
        .buffer(4)
        .layer(buffered_inner.clone())
        .service(client().0);
    drop(buffered.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap());

    let stats = [&service_then_wrap, &wrap_twice, &outer, &inner, &buffered_outer, &buffered_inner]
        .map(|l| l.stats());
    for s in &stats {
        settle(s, max_time).await;
    }
    let [service_then_wrap, wrap_twice, outer, inner, buffered_outer, buffered_inner] = &stats;
    once(&[service_then_wrap], "the layer's service, then wrap_response");
    once(&[wrap_twice], "wrap_response twice");
    once(&[outer, inner], "two layers");
    assert_eq!(inner.snapshot().count(Reason::OverTime), 1, "the innermost owns the drain");
    once(&[buffered_outer, buffered_inner], "two layers with a Buffer between them");
}

// Why 6: reasons that are true.

/// A chunked body whose first chunk size is malformed, sent with the head:
/// hyper has the error ready for the first read.
fn malformed(_: &Head) -> Vec<Step> {
    vec![Step::Write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n".to_vec()), Step::Hang]
}

/// Drops a body of `stalling` unread through `svc` (whose layer has one
/// drain slot) and waits until its drain holds that slot, as it will until
/// the test ends.
async fn take_the_only_slot(
    svc: &mut drain_on_drop::DrainOnDrop<TestClient>,
    stalling: &RawServer,
    stats: &DrainStats,
) {
    drop_unread(svc, get(stalling.uri("/"))).await;
    wait_for("the stalled drain to take the slot", SLACK, || stats.snapshot().in_flight == 1).await;
}

/// A body that fails when the layer reads it counts `body_error`, wherever
/// it was dropped: on a plain thread after the runtime it arrived on ended,
/// and while the cap on running drains is reached.
#[test]
fn a_body_that_fails_when_read_counts_body_error_wherever_it_was_dropped() {
    let (_server_rt, server) = server_on_its_own(malformed);
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let stats = layer.stats();
    let rt = current_thread();
    let (svc, res) = rt.block_on(async {
        let mut svc = layer.layer(client().0);
        let res = svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap();
        (svc, res)
    });
    drop(rt);
    assert!(tokio::runtime::Handle::try_current().is_err(), "this thread has no runtime");
    drop(res);
    assert_eq!(only(&stats.snapshot()), [(Reason::BodyError, 1)], "plain thread, runtime gone");
    drop(svc);

    let (_stall_rt, stalling) = server_on_its_own(stalls);
    let layer = DrainOnDropLayer::new().max_time(SECONDS).max_concurrent_drains(1);
    let stats = layer.stats();
    // Current-thread: hyper's connection task has read the malformed chunk
    // size before the caller runs again.
    current_thread().block_on(async {
        let mut svc = layer.layer(client().0);
        take_the_only_slot(&mut svc, &stalling, &stats).await;
        let res = svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap();
        drop(res);
        let s = stats.snapshot();
        assert_eq!(only(&s), [(Reason::BodyError, 1)], "cap reached: {s:?}");
        assert_eq!(s.in_flight, 1);
    });
}

/// A body whose rest hyper already holds ends in the drop and takes no slot:
/// the cap, reached, does not refuse it.
#[test]
fn a_body_that_ends_in_the_drop_is_never_refused_by_the_cap() {
    let (_stall_rt, stalling) = server_on_its_own(stalls);
    let (_server_rt, small) = server_on_its_own(|_| content_length(1, KIB));
    let layer = DrainOnDropLayer::new().max_time(SECONDS).max_concurrent_drains(1);
    let stats = layer.stats();
    current_thread().block_on(async {
        let mut svc = layer.layer(client().0);
        take_the_only_slot(&mut svc, &stalling, &stats).await;
        // The head and body come in one write; on a current-thread runtime
        // hyper's connection task has passed the body on before the caller
        // runs again.
        let res = svc.ready().await.unwrap().call(get(small.uri("/"))).await.unwrap();
        drop(res);
        let s = stats.snapshot();
        assert_eq!(only(&s), [(Reason::EndOfBody, 1)], "drained in the drop, cap or not: {s:?}");
        assert_eq!(s.bytes_drained, KIB as u64, "the stalled drain counts when it ends: {s:?}");
    });
}

/// A body dropped while its thread unwinds from a panic is counted once,
/// as `unwinding`, having read nothing; the panic goes on as it would.
#[test]
fn a_drop_during_a_panic_is_counted_once_as_unwinding() {
    let (_server_rt, server) = server_on_its_own(|_| content_length(1, KIB));
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let stats = layer.stats();
    let rt = multi_thread();
    let (svc, res) = rt.block_on(async {
        let mut svc = layer.layer(client().0);
        let res = svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap();
        (svc, res)
    });
    let panicked = std::thread::spawn(move || {
        let _res = res;
        panic!("the caller panics holding the response");
    })
    .join();
    assert!(panicked.is_err(), "the panic is the caller's");
    let s = settle_blocking(&stats, SECONDS);
    assert_eq!(only(&s), [(Reason::Unwinding, 1)], "{s:?}");
    assert_eq!(s.bytes_drained, 0);
    drop(svc);
}

/// A body in memory (100 frames of 10 bytes) that is not hyper's is never
/// read in the drop: with no runtime anywhere it is skipped unread
/// (`no_runtime`); fetched on a runtime that still runs, it drains there.
#[test]
fn a_body_in_memory_drains_on_a_runtime_and_is_skipped_unread_without_one() {
    let lock = Arc::new(Mutex::new(()));
    let body = move || Locking { lock: lock.clone(), left: 100 };

    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let stats = layer.stats();
    let mut svc = layer.layer(serving(1000, body.clone()));
    let mut call = std::pin::pin!(svc.call(Request::new(())));
    let Poll::Ready(Ok(res)) = call.as_mut().poll(&mut Context::from_waker(std::task::Waker::noop())) else {
        panic!("a service_fn answers at once");
    };
    drop(res);
    let s = stats.snapshot();
    assert_eq!((only(&s), s.bytes_drained), (vec![(Reason::NoRuntime, 1)], 0), "{s:?}");
    assert_eq!(s.total(Outcome::Skipped), 1);

    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let stats = layer.stats();
    let rt = multi_thread();
    let mut svc = layer.layer(serving(1000, body));
    let res = rt.block_on(async { svc.ready().await.unwrap().call(Request::new(())).await.unwrap() });
    drop(res);
    let s = settle_blocking(&stats, SECONDS);
    assert_eq!((only(&s), s.bytes_drained), (vec![(Reason::EndOfBody, 1)], 1000), "{s:?}");
}

/// A body below the layer that is not `Unpin` (as tower-http's response body
/// timeout is): the layer takes it as it is, and drains it.
#[test]
fn a_body_that_is_not_unpin_needs_no_adapter_and_drains() {
    struct Pinned {
        left: std::cell::Cell<usize>,
        _pinned: std::marker::PhantomPinned,
    }
    impl Body for Pinned {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            let left = self.left.get();
            if left == 0 {
                return Poll::Ready(None);
            }
            self.left.set(left - 1);
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"0123456789")))))
        }
    }
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let stats = layer.stats();
    let body = || Pinned { left: std::cell::Cell::new(100), _pinned: std::marker::PhantomPinned };
    let mut svc = ServiceBuilder::new().layer(layer).service(serving(1000, body));
    multi_thread().block_on(async {
        let mut res = svc.ready().await.unwrap().call(Request::new(())).await.unwrap();
        assert_eq!(read_one_frame(res.body_mut()).await, Some(10), "read as it is");
        drop(res);
        settle(&stats, SECONDS).await;
    });
    let s = stats.snapshot();
    assert_eq!((only(&s), s.bytes_drained), (vec![(Reason::EndOfBody, 1)], 990), "{s:?}");
}

// Off the main road (issue 26): responses rebuilt between layers, panics
// that are not the body's, the cap against hyper's hand-over, runtimes
// driven by a synchronous wrapper.

/// Copies status, version and headers into a new response around the same
/// body, losing the extensions (and the layer's one-drain marker with
/// them), as an adapter between two layers may.
fn rebuild<B>(res: Response<B>) -> Response<B> {
    let (parts, body) = res.into_parts();
    let mut rebuilt = Response::builder().status(parts.status).version(parts.version);
    *rebuilt.headers_mut().unwrap() = parts.headers;
    rebuilt.body(body).unwrap()
}

/// A response rebuilt between two layers (its extensions lost) still drains
/// and counts once: the outer layer, which cannot see the marker, owns the
/// drain, and the inner `DrainBody` it drops when its drain gives up (or
/// reads to the end) starts no second one. Before 0.5, the stalled body
/// counted two `over_time`s and held its connection for two budgets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_rebuilt_between_two_layers_drains_and_counts_once() {
    let stalling = RawServer::start(stalls).await;
    let later = RawServer::start(rest_comes_later).await;
    let max_time = Duration::from_secs(2);
    for (server, expected, what) in [
        (&stalling, (Reason::OverTime, 512), "a stalled body: the outer drain gives up"),
        (&later, (Reason::EndOfBody, 8 * KIB as u64), "a body that ends: the outer drain reads it"),
    ] {
        let (outer, inner) =
            (DrainOnDropLayer::new().max_time(max_time), DrainOnDropLayer::new().max_time(SECONDS));
        let mut svc = ServiceBuilder::new()
            .layer(outer.clone())
            .map_response(rebuild)
            .layer(inner.clone())
            .service(client().0);
        drop(svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap());
        let (o, i) = (settle(&outer.stats(), max_time).await, settle(&inner.stats(), SECONDS).await);
        assert_eq!(only(&o), [(expected.0, 1)], "{what}: counted once, by the outer layer: {o:?} {i:?}");
        assert_eq!(only(&i), [], "{what}: the inner layer counts nothing: {i:?}");
        assert_eq!(o.bytes_drained, expected.1, "{what}: read once: {o:?}");
    }
}

/// A drain that runs when its current-thread runtime is dropped while the
/// caller unwinds from a panic of its own (not the body's) counts
/// `runtime_shutdown` (abandoned), not `body_panic` (failed).
#[test]
fn a_runtime_dropped_while_its_caller_unwinds_counts_runtime_shutdown() {
    let (_server_rt, server) = server_on_its_own(stalls);
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let stats = layer.stats();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let rt = current_thread();
        let _svc = rt.block_on(async {
            let mut svc = layer.layer(client().0);
            drop_unread(&mut svc, get(server.uri("/"))).await;
            wait_for("the drain to hold its slot", SLACK, || stats.snapshot().in_flight == 1).await;
            // The stalled drain's task runs (and waits) while this one sleeps.
            tokio::time::sleep(Duration::from_millis(50)).await;
            svc
        });
        panic!("the caller panics; the runtime is dropped while it unwinds");
    }));
    assert!(unwound.is_err(), "the panic is the caller's");
    let s = settle_blocking(&stats, SECONDS);
    assert_eq!(only(&s), [(Reason::RuntimeShutdown, 1)], "{s:?}");
}

/// The cap against hyper's hand-over: hyper's connection task passes a
/// body to its `Incoming` one decoded chunk at a time, so with every drain
/// slot taken, a 64 KiB body written together with its head ends in the
/// drop only as far as hyper had handed it over (a chunk), and the rest is
/// given up (`cannot_wait`). What the README and the rustdoc say: a body
/// ends in the drop, without a slot, only when hyper holds its rest in the
/// chunk it has handed over.
#[test]
fn with_every_slot_taken_a_body_ends_in_the_drop_only_as_far_as_hyper_handed_it_over() {
    let (_stall_rt, stalling) = server_on_its_own(stalls);
    let (_server_rt, whole) = server_on_its_own(|_| content_length(1, 64 * KIB));
    let layer = DrainOnDropLayer::new().max_time(SECONDS).max_concurrent_drains(1);
    let stats = layer.stats();
    current_thread().block_on(async {
        let mut svc = layer.layer(client().0);
        take_the_only_slot(&mut svc, &stalling, &stats).await;
        let res = svc.ready().await.unwrap().call(get(whole.uri("/"))).await.unwrap();
        drop(res);
        let s = stats.snapshot();
        assert_eq!(only(&s), [(Reason::CannotWait, 1)], "{s:?}");
        assert!(s.bytes_drained < 64 * KIB as u64, "read what hyper had handed over, not the rest: {s:?}");
        assert_eq!(s.in_flight, 1, "took no slot");
    });
}

/// A current-thread runtime driven by a synchronous wrapper (`block_on` per
/// call): a body dropped between calls has its drain queued on that runtime,
/// which runs it only when driven again, its slot taken until then, as the
/// README's Guarantees say. The next `block_on` runs it.
#[test]
fn a_current_thread_runtime_runs_its_drains_only_while_driven() {
    let (_server_rt, server) = server_on_its_own(rest_comes_later);
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let stats = layer.stats();
    let rt = current_thread();
    let mut svc = layer.layer(client().0);
    let res = rt.block_on(async { svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap() });
    drop(res); // outside `block_on`: the drain is queued on `rt`
    assert!(!stats.wait_idle_blocking(Duration::from_millis(200)), "nothing drives the drain: {stats:?}");
    assert_eq!(stats.snapshot().in_flight, 1, "its slot is taken meanwhile");
    assert!(rt.block_on(stats.wait_idle(SECONDS)), "driven again, the drain runs: {stats:?}");
    assert_eq!(only(&stats.snapshot()), [(Reason::EndOfBody, 1)]);
}
