//! tower-http 0.7's early-drop hook and response body deadline, each in its
//! documented place around the drain (rustdoc `recipes`, "A tower-http
//! stack"): the hook above the drain still sees the caller's early drops;
//! the deadline below it still bounds the body the caller reads.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, Reason};
use http_body_util::BodyExt;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_http::on_early_drop::{OnBodyDropFn, OnEarlyDropLayer};
use tower_http::timeout::ResponseBodyDeadlineLayer;

use support::*;

type Empty = http_body_util::Empty<Bytes>;

/// tower-http's early-drop hook, counting the response bodies dropped
/// before their end into `$dropped`.
macro_rules! counting_hook {
    ($dropped:expr) => {{
        let dropped: Arc<AtomicUsize> = $dropped;
        OnEarlyDropLayer::builder().on_body_drop(OnBodyDropFn::new(move |_: &http::Request<Empty>| {
            let dropped = dropped.clone();
            move |_: &http::response::Parts| {
                move || {
                    dropped.fetch_add(1, Ordering::SeqCst);
                }
            }
        }))
    }};
}

/// Above the drain, the hook sees every body the caller drops early, while
/// the drain keeps their connections; below it, it would see none (the
/// drain reads each body to its end), which is why it goes above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_early_drop_hook_above_the_drain_sees_every_early_drop() {
    let server = RawServer::start(|_| content_length(1, 64 * KIB)).await;
    let mut seen = Vec::new();
    for above in [true, false] {
        let dropped = Arc::new(AtomicUsize::new(0));
        let layer = DrainOnDropLayer::new().max_time(SECONDS);
        let stats = layer.stats();
        let (client, _) = client();
        let mut drops = 0;
        if above {
            let mut svc =
                ServiceBuilder::new().layer(counting_hook!(dropped.clone())).layer(layer).service(client);
            for _ in 0..20 {
                drop(svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap());
                drops += 1;
                settle(&stats, SECONDS).await;
            }
        } else {
            let mut svc =
                ServiceBuilder::new().layer(layer).layer(counting_hook!(dropped.clone())).service(client);
            for _ in 0..20 {
                drop(svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap());
                drops += 1;
                settle(&stats, SECONDS).await;
            }
        }
        assert_eq!(stats.snapshot().count(Reason::EndOfBody), drops, "above {above}: drained");
        seen.push(dropped.load(Ordering::SeqCst));
    }
    println!("20 early drops: the hook above the drain saw {}, below it {}", seen[0], seen[1]);
    assert_eq!(seen[0], 20, "above the drain: every early drop");
    assert_eq!(seen[1], 0, "below the drain: the drain reads every body to its end");
}

/// A body that stalls after its first bytes: below the drain, the deadline
/// ends the caller's read with an error. And bodies dropped early through a
/// deadline are drained as any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_deadline_below_the_drain_bounds_what_the_caller_reads() {
    let server = RawServer::start(|head| match head.path.as_str() {
        "/stall" => vec![Step::Write([cl_head(4096), body_bytes(1, 512)].concat()), Step::Hang],
        _ => content_length(2, 64 * KIB),
    })
    .await;
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let stats = layer.stats();
    let (client, _) = client();
    let mut svc = ServiceBuilder::new()
        .layer(layer)
        .layer(ResponseBodyDeadlineLayer::new(Duration::from_millis(200)))
        .service(client);
    let res = svc.ready().await.unwrap().call(get(server.uri("/stall"))).await.unwrap();
    let read = tokio::time::timeout(SECONDS, res.into_body().collect()).await;
    let err = read.expect("the deadline ends the read, not the test's timeout").expect_err("a stalled body");
    println!("the caller's read of a stalled body: {err}");
    // The failed body is the caller's: its connection is closed, nothing counted.
    assert_eq!(stats.snapshot().total(drain_on_drop::Outcome::Drained), 0);
    // Bodies dropped early through a deadline of seconds are drained (one
    // of 200 ms would make the outcome depend on the machine's speed).
    let (second, _) = support::client();
    let mut svc = ServiceBuilder::new()
        .layer(DrainOnDropLayer::new().max_time(SECONDS))
        .layer(ResponseBodyDeadlineLayer::new(SECONDS))
        .service(second);
    let stats = svc.stats();
    for _ in 0..5 {
        drop(svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap());
        settle(&stats, SECONDS).await;
    }
    let s = stats.snapshot();
    assert_eq!(s.count(Reason::EndOfBody), 5, "{s:?}");
    // Read by the drain through the deadline body, every byte of each.
    assert_eq!(s.bytes_drained, 5 * 64 * KIB as u64, "{s:?}");
}
