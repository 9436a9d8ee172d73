//! The layer inside real tower stacks: retry and timeout above it.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, Reason};
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use support::*;
use tower::retry::Policy;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

/// Retries a request whose response is a 503, at most `left` more times.
#[derive(Clone)]
struct RetryOn503 {
    left: usize,
}

impl<B, E> Policy<Request<Empty<Bytes>>, Response<B>, E> for RetryOn503 {
    type Future = std::future::Ready<()>;

    fn retry(
        &mut self,
        _: &mut Request<Empty<Bytes>>,
        result: &mut Result<Response<B>, E>,
    ) -> Option<Self::Future> {
        match result {
            // Returning `Some` discards this 503, body unread: the layer drains it.
            Ok(res) if res.status() == StatusCode::SERVICE_UNAVAILABLE && self.left > 0 => {
                self.left -= 1;
                Some(std::future::ready(()))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, req: &Request<Empty<Bytes>>) -> Option<Request<Empty<Bytes>>> {
        let mut clone = Request::new(Empty::new());
        *clone.method_mut() = req.method().clone();
        *clone.uri_mut() = req.uri().clone();
        *clone.headers_mut() = req.headers().clone();
        Some(clone)
    }
}

/// A server that answers two 503s (64 KiB chunked error pages) and then a
/// 200 with a 1000-byte body, over and over.
async fn flaky_server() -> RawServer {
    let served = Arc::new(AtomicU64::new(0));
    RawServer::start(move |_| {
        let n = served.fetch_add(1, Ordering::SeqCst);
        if n % 3 == 2 {
            content_length(n, 1000)
        } else {
            let mut steps = chunked(n, 64 * 1024, 8 * 1024);
            steps[0] = Step::Write(
                b"HTTP/1.1 503 Service Unavailable\r\ntransfer-encoding: chunked\r\n\r\n".to_vec(),
            );
            steps
        }
    })
    .await
}

/// Runs 20 logical requests through timeout → retry → `layer` → client and
/// returns the connections opened.
async fn run(layer: DrainOnDropLayer) -> usize {
    let server = flaky_server().await;
    let (client, connector) = client();
    let mut svc = ServiceBuilder::new()
        .timeout(Duration::from_secs(10))
        .retry(RetryOn503 { left: 2 })
        .layer(layer)
        .service(client);
    for i in 0..20u64 {
        let res = svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap();
        assert_eq!(res.status(), 200, "the third attempt succeeds");
        let body = read_all(res.into_body()).await.unwrap();
        assert!(body == body_bytes(i * 3 + 2, 1000), "request {i}: the 200 body is intact");
    }
    connector.count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_503_bodies_are_drained_below_retry_and_timeout() {
    // Seconds of time budget: every discarded 503 is drained on any machine.
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let stats = layer.stats();
    let with_layer = run(layer).await;
    let snap = settle(&stats, SECONDS).await;
    assert_eq!(snap.drained, 40, "each of the 40 discarded 503s was drained: {snap:?}");

    let without = run(DrainOnDropLayer::new().max_bytes(0)).await;
    println!("60 HTTP requests: {with_layer} connections with the layer, {without} without draining");
    assert!(without >= 20, "without draining each discarded 503 costs a connection, got {without}");
    // A retry goes out as soon as its 503 is dropped, while that drain runs:
    // hyper-util dials when no other connection is idle (1 to 3 connections
    // on a quiet machine). Against the same run without draining:
    assert_keeps_half("60 HTTP requests, 40 discarded 503s", with_layer, without, 0);
}

/// The timeout above the layer bounds the wait for the response head only:
/// a stalled body dropped after the timeout's future completed is drained
/// under the layer's own `max_time`, longer than the timeout.
///
/// The slow head never comes, so the timeout always fires; the stalled
/// body's head comes at once, which the timeout (1 s) leaves a busy
/// machine ample time for; and the stalled drain can only end on its time
/// budget.
#[tokio::test]
async fn timeout_above_the_layer_does_not_bound_the_background_drain() {
    let server = RawServer::start(|head| {
        if head.path == "/slow-head" {
            vec![Step::Hang]
        } else {
            let mut out = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n".to_vec();
            out.extend(body_bytes(0, 10));
            vec![Step::Write(out), Step::Hang]
        }
    })
    .await;
    let (client, _) = client();
    let (timeout, max_time) = (Duration::from_secs(1), Duration::from_secs(2));
    let layer = DrainOnDropLayer::new().max_time(max_time);
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().timeout(timeout).layer(layer).service(client);

    let err: BoxError = svc.ready().await.unwrap().call(get(server.uri("/slow-head"))).await.unwrap_err();
    assert!(err.is::<tower::timeout::error::Elapsed>(), "the head took too long: {err}");
    assert_eq!(stats.snapshot().in_flight, 0, "no body, nothing to drain");

    drop_unread(&mut svc, get(server.uri("/stall"))).await;
    let snap = settle(&stats, max_time).await;
    assert_eq!((snap.count(Reason::OverTime), snap.abandoned), (1, 1), "given up on time: {snap:?}");
}
