//! `DrainStats::wait_idle` and `wait_idle_blocking` are woken by the end of
//! the last drain: a program that waits for its drains costs nothing while
//! it waits (they looked every millisecond before), and still gets there
//! as soon as the drains end, bounded by its timeout.

mod support;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use drain_on_drop::{DrainOnDropLayer, Reason};
use tower::Layer;

use support::*;

/// Counts its wakes.
struct Counting(AtomicUsize);

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A server whose 64 KiB body stops after 1 KiB until the test lets it go
/// on (`go`): a drain that runs as long as the test wants.
async fn held_server(go: Arc<AtomicBool>) -> RawServer {
    RawServer::start(move |_| {
        vec![
            Step::Write([cl_head(64 * KIB), body_bytes(1, KIB)].concat()),
            Step::Until(go.clone()),
            Step::Write(body_bytes(1, 64 * KIB)[KIB..].to_vec()),
        ]
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_idle_sleeps_until_the_last_drain_ends() {
    let go = Arc::new(AtomicBool::new(false));
    let server = held_server(go.clone()).await;
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let stats = layer.stats();
    let mut svc = layer.layer(client().0);
    for _ in 0..2 {
        drop_unread(&mut svc, get(server.uri("/"))).await;
    }
    wait_for("two drains to wait for the server", SLACK, || stats.snapshot().in_flight == 2).await;

    let counting = Arc::new(Counting(AtomicUsize::new(0)));
    let waker = Waker::from(counting.clone());
    let mut cx = Context::from_waker(&waker);
    let mut wait = Box::pin(stats.wait_idle(Duration::from_secs(3600)));
    assert!(wait.as_mut().poll(&mut cx).is_pending(), "two drains run");
    // A polling loop would have been woken about 100 times by now.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(counting.0.load(Ordering::SeqCst), 0, "not woken while drains run: it costs nothing");

    go.store(true, Ordering::SeqCst);
    wait_for("the end of the last drain to wake the waiter", SECONDS, || {
        counting.0.load(Ordering::SeqCst) > 0
    })
    .await;
    assert_eq!(wait.as_mut().poll(&mut cx), Poll::Ready(true), "idle, long before its timeout");
    let s = stats.snapshot();
    assert_eq!(s.count(Reason::EndOfBody), 2, "both drains reached the end, and are counted: {s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_idle_blocking_returns_when_the_last_drain_ends() {
    let go = Arc::new(AtomicBool::new(false));
    let server = held_server(go.clone()).await;
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let stats = layer.stats();
    let mut svc = layer.layer(client().0);
    drop_unread(&mut svc, get(server.uri("/"))).await;
    wait_for("the drain to wait for the server", SLACK, || stats.snapshot().in_flight == 1).await;

    let returned = Arc::new(AtomicBool::new(false));
    let waiter = std::thread::spawn({
        let (stats, returned) = (stats.clone(), returned.clone());
        move || {
            let idle = stats.wait_idle_blocking(Duration::from_secs(3600));
            returned.store(true, Ordering::SeqCst);
            (idle, stats.snapshot())
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!returned.load(Ordering::SeqCst), "a drain runs: the waiter waits");
    go.store(true, Ordering::SeqCst);
    wait_for("wait_idle_blocking to return when the drain ends", SECONDS, || returned.load(Ordering::SeqCst))
        .await;
    let (idle, s) = waiter.join().unwrap();
    assert!(idle, "idle, long before its timeout");
    assert_eq!(s.count(Reason::EndOfBody), 1, "the snapshot after it counts the drain: {s:?}");
}
