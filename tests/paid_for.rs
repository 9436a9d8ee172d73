//! A drain that crosses its byte budget still takes the end of the body when
//! only the end marker (or trailers) is left, and reads no more than
//! `max_bytes` plus two frames when the body really is larger.

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use drain_on_drop::{DrainOnDropLayer, DrainSnapshot, Reason};
use tower::{Service, ServiceBuilder, ServiceExt};

use support::{CountingConnector, KIB, RawServer, SECONDS, SLACK, Step, TestClient, client, get, wait_for};

/// uvicorn's (h11's) pattern: data in 16 KiB chunks, then the final
/// `0\r\n\r\n` in a separate, later write.
fn asgi_style(len: usize, terminator_after: Duration) -> Vec<Step> {
    vec![
        Step::Write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec()),
        Step::Chunks { seed: 1, len, chunk: 16 * KIB },
        Step::Sleep(terminator_after),
        Step::Write(b"0\r\n\r\n".to_vec()),
    ]
}

/// `n` sequential GETs through `layer`, each body dropped unread and its
/// drain waited for; returns the stats at the end. With `pooled`, dials are
/// held from the second request on: only the pooled connection can serve
/// it, so a drained body that did not give its connection back fails the
/// request (the held dial gives up after 10 s) instead of opening another,
/// whatever the speed of the machine and hyper-util's checkout race.
async fn drop_each(
    server: &RawServer,
    (client, connector): (TestClient, CountingConnector),
    layer: DrainOnDropLayer,
    n: usize,
    pooled: bool,
) -> DrainSnapshot {
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().layer(layer).service(client);
    for i in 0..n {
        connector.hold(pooled && i > 0);
        let res = svc.ready().await.unwrap().call(get(server.uri("/"))).await;
        drop(res.unwrap_or_else(|e| panic!("request {i} (pooled only: {}): {e:?}", pooled && i > 0)));
        assert!(stats.wait_idle(SLACK).await, "the drain should end: {stats:?}");
    }
    connector.hold(false);
    stats.snapshot()
}

#[tokio::test]
async fn a_chunked_body_just_over_the_budget_whose_end_marker_comes_late_is_drained_and_reused() {
    let server = RawServer::start(|_| asgi_style(257 * KIB, Duration::from_millis(5))).await;
    // The default byte budget; seconds of time, so that only the bytes decide.
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let s = drop_each(&server, client(), layer, 20, true).await;
    assert_eq!(s.count(Reason::EndOfBody), 20, "only the end marker was missing: {s:?}");
    assert_eq!(s.bytes_drained, 20 * 257 * KIB as u64, "{s:?}");
    assert_eq!(server.accepted(), 1, "drained bodies reuse their connection");
}

#[tokio::test]
async fn trailers_after_the_crossing_frame_are_drained() {
    let server = RawServer::start(|_| {
        vec![
            Step::Write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec()),
            Step::Chunks { seed: 2, len: 20 * KIB, chunk: 16 * KIB },
            Step::Sleep(Duration::from_millis(5)),
            Step::Write(b"0\r\nx-checksum: 1\r\n\r\n".to_vec()),
        ]
    })
    .await;
    let layer = DrainOnDropLayer::new().max_bytes(16 * KIB as u64).max_time(SECONDS);
    let s = drop_each(&server, client(), layer, 5, true).await;
    assert_eq!(s.count(Reason::EndOfBody), 5, "{s:?}");
    assert_eq!(server.accepted(), 1, "drained bodies reuse their connection");
}

#[tokio::test]
async fn a_larger_chunked_body_is_abandoned_within_the_budget_plus_two_frames() {
    let server = RawServer::start(|_| asgi_style(1024 * KIB, Duration::ZERO)).await;
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let s = drop_each(&server, client(), layer, 5, false).await;
    assert_eq!(s.count(Reason::OverBytes), 5, "{s:?}");
    let bound = 5 * (256 + 2 * 16) * KIB as u64;
    assert!(s.bytes_drained <= bound, "at most the budget plus two 16 KiB frames each: {s:?}");
    assert!(s.bytes_drained > 5 * 256 * KIB as u64, "read up to the budget: {s:?}");
    wait_for("the server to see its connections closed", SLACK, || server.open.load(Ordering::SeqCst) == 0)
        .await;
    assert_eq!(server.accepted(), 5, "abandoned bodies cost their connection");
}
