//! The crate's timer thread survives a waker that panics when woken. The
//! thread keeps every deadline of the process (drains' time budgets,
//! `wait_idle`'s timeouts); before, one waker that panicked (a user
//! executor whose `wake` does `try_send(..).expect(..)` on a full queue,
//! which polled `wait_idle`) unwound it with its "running" flag still set,
//! so no timer thread was started again: a later drain against a stalled
//! server outlived its `max_time` until something else polled it.
//!
//! A file of its own: the panic happens in this process, and the drain
//! after it is the test.

mod support;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

use drain_on_drop::{DrainOnDropLayer, Reason};
use tower::{Layer, Service, ServiceExt};

use support::*;

/// A waker whose `wake` panics, as an executor's whose queue is full; it
/// counts its calls first.
struct PanicsWhenWoken(AtomicUsize);

impl Wake for PanicsWhenWoken {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
        panic!("this test's waker panics when woken (as a user executor's with a full queue)");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_keeps_its_time_budget_after_a_waker_panicked_in_the_timer_thread() {
    // Something for `wait_idle` to wait on: a drain of a server that
    // stalls until the test ends, with a budget the test outlives.
    let stalling =
        RawServer::start(|_| vec![Step::Write([cl_head(64 * KIB), body_bytes(1, KIB)].concat()), Step::Hang])
            .await;
    let held = DrainOnDropLayer::new().max_time(Duration::from_secs(3600));
    let mut svc = held.clone().layer(client().0);
    drop_unread(&mut svc, get(stalling.uri("/held"))).await;
    let stats = held.stats();
    wait_for("the held drain to start", SLACK, || stats.snapshot().in_flight == 1).await;

    // `wait_idle`, polled once by a waker that panics when woken: its
    // timeout (20 ms) is kept by the timer thread, which wakes it then.
    let panicking = Arc::new(PanicsWhenWoken(AtomicUsize::new(0)));
    let waker = Waker::from(panicking.clone());
    let mut wait = Box::pin(stats.wait_idle(Duration::from_millis(20)));
    assert!(wait.as_mut().poll(&mut Context::from_waker(&waker)).is_pending(), "a drain runs");
    wait_for("the timer thread to wake the panicking waker", SECONDS, || {
        panicking.0.load(Ordering::SeqCst) > 0
    })
    .await;

    // Then a drain of another stalling server, with a 300 ms budget: it
    // ends over time, not before its budget, and without anything else
    // polling it.
    const MAX_TIME: Duration = Duration::from_millis(300);
    let layer = DrainOnDropLayer::new().max_time(MAX_TIME);
    let mut svc = layer.clone().layer(client().0);
    let res = svc.ready().await.unwrap().call(get(stalling.uri("/after"))).await.unwrap();
    let dropped = Instant::now();
    drop(res);
    wait_for("the drain to end over time, on its deadline", MAX_TIME + SLACK, || {
        layer.stats().snapshot().count(Reason::OverTime) == 1
    })
    .await;
    assert!(dropped.elapsed() >= MAX_TIME, "a drain gives up at its budget, not before");
    let s = layer.stats().snapshot();
    assert_eq!((s.abandoned, s.in_flight), (1, 0), "one drain, over time, ended: {s:?}");
    // And `wait_idle`'s own timeout still fires (the first drain still runs).
    assert!(!stats.wait_idle(Duration::from_millis(50)).await, "the held drain still runs");
    drop(wait);
}
