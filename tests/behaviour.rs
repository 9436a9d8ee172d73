//! What is drained, what is skipped, and what happens past the budgets.

mod support;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, DrainSnapshot};
use http::{Request, Response, StatusCode};
use http_body_util::{Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::*;
use tokio::net::TcpListener;
use tower::{Service, ServiceBuilder, ServiceExt};

const KIB: usize = 1024;
const SLACK: Duration = Duration::from_secs(2);

/// Sends `n` sequential GETs for `path` through `layer`, dropping every body
/// unread; returns (connections opened, stats once every drain ended).
async fn drop_unread(
    server: &RawServer,
    layer: DrainOnDropLayer,
    path: &str,
    n: usize,
) -> (usize, DrainSnapshot) {
    let (client, connector) = client();
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().layer(layer).service(client);
    for _ in 0..n {
        let res = svc.ready().await.unwrap().call(get(server.uri(path))).await.unwrap();
        assert!(res.status().is_success() || res.status() == StatusCode::NOT_MODIFIED);
        drop(res);
    }
    wait_for("drains to end", SLACK, || stats.snapshot().in_flight == 0).await;
    (connector.count(), stats.snapshot())
}

#[tokio::test]
async fn body_declared_over_budget_is_not_read_and_costs_a_connection() {
    let server = RawServer::start(|_| content_length(1, 1024 * KIB)).await;
    let (conns, snap) = drop_unread(&server, DrainOnDropLayer::new(), "/", 10).await;
    assert_eq!(conns, 10, "a 1 MiB body over the 256 KiB budget closes its connection");
    assert_eq!(snap.bytes_drained, 0, "no byte of an over-budget body is read: {snap:?}");
    assert_eq!(snap.skipped_over_budget, 10, "{snap:?}");
    assert_eq!(snap.skipped, 10, "{snap:?}");
}

#[tokio::test]
async fn larger_budgets_make_large_bodies_reusable() {
    let server = RawServer::start(|_| content_length(1, 1024 * KIB)).await;
    let layer = DrainOnDropLayer::new().max_bytes(2 * 1024 * 1024).max_time(Duration::from_secs(5));
    let (conns, snap) = drop_unread(&server, layer, "/", 10).await;
    assert!(conns <= 2, "1 MiB bodies under a 2 MiB budget are drained and reused, got {conns} connections");
    assert_eq!(snap.drained, 10, "{snap:?}");
    assert_eq!(snap.bytes_drained, 10 * 1024 * KIB as u64, "{snap:?}");
}

#[tokio::test]
async fn chunked_body_over_budget_is_abandoned_after_the_budget() {
    let server = RawServer::start(|_| chunked(1, 64 * KIB, KIB)).await;
    let layer = DrainOnDropLayer::new().max_bytes(16 * KIB as u64);
    let (conns, snap) = drop_unread(&server, layer, "/", 5).await;
    assert_eq!(conns, 5, "an unknown-length body over budget closes its connection");
    assert_eq!(snap.abandoned_over_bytes, 5, "{snap:?}");
    assert!(
        snap.bytes_drained <= 5 * (16 + 1) * KIB as u64,
        "a drain reads at most the budget plus one frame: {snap:?}"
    );
}

#[tokio::test]
async fn exactly_the_budget_is_drained_one_byte_more_is_not() {
    for (framing, chunk) in [("content-length", 0), ("chunked", 1000)] {
        let server = RawServer::start(move |head| {
            let len = query(&head.path, "len").unwrap() as usize;
            if chunk == 0 { content_length(0, len) } else { chunked(0, len, chunk) }
        })
        .await;
        let layer = || DrainOnDropLayer::new().max_bytes(10_000);
        let (conns, snap) = drop_unread(&server, layer(), "/?len=10000", 5).await;
        assert!(conns <= 2, "{framing}: exactly the budget is reused, got {conns} connections");
        assert_eq!(snap.drained, 5, "{framing}: {snap:?}");
        // Budget + 1: never drained. (hyper's own single read of what it has
        // buffered may still finish a body this small, so connections are not
        // asserted here; `body_declared_over_budget...` does that at 1 MiB.)
        let (_, snap) = drop_unread(&server, layer(), "/?len=10001", 5).await;
        assert_eq!(snap.drained, 0, "{framing}: {snap:?}");
        if chunk == 0 {
            assert_eq!((snap.skipped_over_budget, snap.bytes_drained), (5, 0), "{framing}: {snap:?}");
        } else {
            assert_eq!(snap.abandoned_over_bytes, 5, "{framing}: {snap:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_body_is_abandoned_at_the_time_budget_without_blocking_the_caller() {
    // Headers and half the body, then silence.
    let server = RawServer::start(|head| {
        if head.path == "/stall" {
            let mut out = b"HTTP/1.1 200 OK\r\ncontent-length: 2000\r\n\r\n".to_vec();
            out.extend(body_bytes(0, 1000));
            vec![Step::Write(out), Step::Hang]
        } else {
            content_length(0, 10)
        }
    })
    .await;
    let (client, connector) = client();
    let layer = DrainOnDropLayer::new().max_time(Duration::from_millis(100));
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().layer(layer).service(client);

    let res = svc.ready().await.unwrap().call(get(server.uri("/stall"))).await.unwrap();
    drop(res);
    // The drop returned while the drain still waits for the server.
    assert_eq!(stats.snapshot().in_flight, 1, "the drain runs in the background");
    wait_for("the stalled drain to be abandoned", Duration::from_millis(100) + SLACK, || {
        stats.snapshot().in_flight == 0
    })
    .await;
    let snap = stats.snapshot();
    assert_eq!(snap.abandoned_over_time, 1, "{snap:?}");

    let res = svc.ready().await.unwrap().call(get(server.uri("/ok"))).await.unwrap();
    assert_eq!(read_all(res.into_body()).await.unwrap(), body_bytes(0, 10));
    assert_eq!(connector.count(), 2, "the abandoned connection was closed; the next request dialled");
}

#[tokio::test]
async fn connection_close_is_not_drained() {
    let server = RawServer::start(|head| {
        let mut out = b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n".to_vec();
        if head.path == "/close" {
            out.extend(b"connection: close\r\n");
        }
        out.extend(b"\r\n");
        out.extend(body_bytes(0, 1000));
        vec![Step::Write(out)]
    })
    .await;
    let (conns, snap) = drop_unread(&server, DrainOnDropLayer::new(), "/close", 5).await;
    assert_eq!(conns, 5, "each response closed its connection");
    assert_eq!((snap.skipped, snap.bytes_drained), (5, 0), "{snap:?}");

    // The request asks to close: hyper will not pool, so no drain either.
    let (client, connector) = client();
    let layer = DrainOnDropLayer::new();
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().layer(layer).service(client);
    for _ in 0..3 {
        let req = Request::get(server.uri("/")).header("connection", "close").body(Empty::new()).unwrap();
        let res = svc.ready().await.unwrap().call(req).await.unwrap();
        assert_eq!(res.status(), 200);
    }
    assert_eq!(connector.count(), 3);
    assert_eq!(stats.snapshot().skipped, 3, "{:?}", stats.snapshot());
}

#[tokio::test]
async fn head_204_and_304_have_nothing_to_drain() {
    let server = RawServer::start(|head| {
        let text = match head.path.as_str() {
            "/204" => "HTTP/1.1 204 No Content\r\n\r\n".to_string(),
            "/304" => "HTTP/1.1 304 Not Modified\r\ncontent-length: 500\r\n\r\n".to_string(),
            // HEAD: the length of the body a GET would have had, no body.
            _ => "HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n".to_string(),
        };
        vec![Step::Write(text.into_bytes())]
    })
    .await;
    let (client, connector) = client();
    let layer = DrainOnDropLayer::new();
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().layer(layer).service(client);
    for path in ["/204", "/304", "/head", "/204", "/304", "/head"] {
        let method = if path == "/head" { "HEAD" } else { "GET" };
        let req = Request::builder().method(method).uri(server.uri(path)).body(Empty::new()).unwrap();
        let res = svc.ready().await.unwrap().call(req).await.unwrap();
        use http_body::Body as _;
        assert!(res.body().is_end_stream(), "{path}: the body is already at its end");
        drop(res);
    }
    assert_eq!(stats.snapshot(), DrainSnapshot::default(), "bodies at their end are not early drops");
    assert_eq!(connector.count(), 1, "one connection serves every response with no body");
}

#[tokio::test]
async fn close_delimited_body_is_not_drained() {
    let server = RawServer::start(|_| {
        let mut out = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        out.extend(body_bytes(0, 1000));
        vec![Step::Write(out), Step::Close]
    })
    .await;
    let (conns, snap) = drop_unread(&server, DrainOnDropLayer::new(), "/", 3).await;
    assert_eq!(conns, 3);
    assert_eq!((snap.skipped, snap.bytes_drained), (3, 0), "{snap:?}");
}

#[tokio::test]
async fn zero_budgets_disable_draining() {
    let server = RawServer::start(|_| content_length(0, 64 * KIB)).await;
    for layer in [DrainOnDropLayer::new().max_bytes(0), DrainOnDropLayer::new().max_time(Duration::ZERO)] {
        let (conns, snap) = drop_unread(&server, layer, "/", 5).await;
        assert_eq!(conns, 5, "nothing drained, every connection closed");
        assert_eq!((snap.skipped, snap.bytes_drained), (5, 0), "{snap:?}");
    }
}

/// An h2c server (prior knowledge) answering every request with 64 KiB.
async fn h2_server() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let service = hyper::service::service_fn(|_req| async {
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(vec![7u8; 64 * KIB]))))
            });
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    (addr, accepted)
}

#[tokio::test]
async fn http2_bodies_are_not_drained_and_the_connection_survives() {
    let (addr, accepted) = h2_server().await;
    let client = Client::builder(TokioExecutor::new()).http2_only(true).build_http::<Empty<Bytes>>();
    let layer = DrainOnDropLayer::new();
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().layer(layer).service(client);
    for _ in 0..10 {
        let uri: http::Uri = format!("http://{addr}/").parse().unwrap();
        let res = svc.ready().await.unwrap().call(get(uri)).await.unwrap();
        assert_eq!(res.version(), http::Version::HTTP_2);
        drop(res);
    }
    let snap = stats.snapshot();
    assert_eq!((snap.skipped, snap.drained, snap.bytes_drained), (10, 0, 0), "{snap:?}");
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "HTTP/2 multiplexes over one connection");
}

#[test]
fn drop_outside_the_runtime_and_after_shutdown_never_panics() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let layer = DrainOnDropLayer::new();
    let stats = layer.stats();
    let (server, bodies) = runtime.block_on(async {
        let server = RawServer::start(|_| chunked(0, 4 * KIB, KIB)).await;
        let (client, _) = client();
        let mut svc = ServiceBuilder::new().layer(layer).service(client);
        let mut bodies = Vec::new();
        for _ in 0..2 {
            let res = svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap();
            bodies.push(res.into_body());
        }
        (server, bodies)
    });
    let mut bodies = bodies.into_iter();
    // Outside the runtime's context, but the runtime is alive: the drain
    // runs on the runtime captured with the response.
    drop(bodies.next());
    runtime.block_on(wait_for("the drain on the captured runtime", SLACK, || stats.snapshot().drained == 1));
    drop(server);
    runtime.shutdown_timeout(SLACK);
    // The runtime is gone: the body is dropped as hyper would, counted as skipped.
    drop(bodies.next());
    let snap = stats.snapshot();
    assert_eq!((snap.drained, snap.skipped, snap.in_flight), (1, 1, 0), "{snap:?}");
}

#[test]
fn runtime_shutdown_with_drains_in_flight_cancels_them() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let layer = DrainOnDropLayer::new().max_time(Duration::from_secs(3600));
    let stats = layer.stats();
    runtime.block_on(async {
        let server = RawServer::start(|_| {
            vec![
                Step::Write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\nx\r\n".to_vec()),
                Step::Hang,
            ]
        })
        .await;
        let (client, _) = client();
        let mut svc = ServiceBuilder::new().layer(layer).service(client);
        for _ in 0..5 {
            let res = svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap();
            drop(res);
        }
        wait_for("five drains to run", SLACK, || stats.snapshot().in_flight == 5).await;
        std::mem::forget(server); // keep serving (hanging) until the runtime goes
    });
    let start = std::time::Instant::now();
    runtime.shutdown_timeout(SLACK);
    assert!(start.elapsed() < SLACK, "shutdown did not wait for the hour-long drains");
    let snap = stats.snapshot();
    // A drain the runtime had started counts as abandoned; one spawned but
    // not yet polled when the runtime went counts as skipped. Each once.
    assert_eq!(snap.abandoned + snap.skipped, 5, "every early drop counted once: {snap:?}");
    assert_eq!((snap.drained, snap.failed, snap.in_flight), (0, 0, 0), "{snap:?}");
}

/// Reads every body fully, alternating with early drops, and checks each
/// byte: a drained remainder never leaks into the next response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fully_read_bodies_arrive_intact_between_drained_ones() {
    let server = RawServer::start(|head| {
        let len = query(&head.path, "len").unwrap() as usize;
        let seed = query(&head.path, "seed").unwrap();
        if seed.is_multiple_of(2) { content_length(seed, len) } else { chunked(seed, len, 777) }
    })
    .await;
    let (client, connector) = client();
    let layer = DrainOnDropLayer::new();
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().layer(layer).service(client);
    let mut dropped = 0;
    for seed in 0..200u64 {
        let len = [0, 1, 100, 5000, 70_000][seed as usize % 5];
        let res = svc
            .ready()
            .await
            .unwrap()
            .call(get(server.uri(&format!("/?len={len}&seed={seed}"))))
            .await
            .unwrap();
        if seed % 3 == 0 {
            let mut body = res.into_body();
            let _ = read_one_frame(&mut body).await;
            drop(body);
            dropped += 1;
        } else {
            let bytes = read_all(res.into_body()).await.unwrap();
            assert!(bytes == body_bytes(seed, len), "body {seed} ({len} bytes) arrived altered");
        }
    }
    wait_for("drains to end", SLACK, || stats.snapshot().in_flight == 0).await;
    let snap = stats.snapshot();
    assert!(snap.drained <= dropped, "{snap:?}");
    assert_eq!((snap.abandoned, snap.failed, snap.skipped), (0, 0, 0), "{snap:?}");
    // Reuse is the subject of tests/reuse.rs; here it is enough that the 67
    // early drops did not each cost a connection.
    assert!(connector.count() <= 10, "reused: {} connections", connector.count());
}

#[test]
fn drain_body_is_send_and_unpin_like_incoming() {
    fn send_unpin<T: Send + Unpin + 'static>() {}
    send_unpin::<drain_on_drop::DrainBody<hyper::body::Incoming>>();
    send_unpin::<drain_on_drop::ResponseFuture<hyper_util::client::legacy::ResponseFuture>>();
    send_unpin::<
        drain_on_drop::DrainOnDrop<Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>>,
    >();
}

/// A body that always has an empty frame ready: it never waits and never
/// ends.
struct AlwaysReady;

impl http_body::Body for AlwaysReady {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::new()))))
    }
}

/// On a current-thread runtime a drain that never had to wait would starve
/// its own deadline (and everything else) if it did not yield.
#[test]
fn a_body_that_is_always_ready_does_not_hold_the_worker_past_max_time() {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let snap = runtime.block_on(async {
            let layer = DrainOnDropLayer::new().max_time(Duration::from_millis(50));
            let stats = layer.stats();
            let mut svc = ServiceBuilder::new().layer(layer).service_fn(|_req: Request<()>| async {
                let mut res = Response::new(AlwaysReady);
                res.headers_mut().insert(http::header::CONTENT_LENGTH, 1_000_000.into());
                Ok::<_, Infallible>(res)
            });
            drop(svc.ready().await.unwrap().call(Request::new(())).await.unwrap());
            wait_for("the drain to end", SLACK, || stats.snapshot().in_flight == 0).await;
            stats.snapshot()
        });
        let _ = done_tx.send(snap);
    });
    let snap = done_rx.recv_timeout(Duration::from_secs(10)).expect("the runtime is not stuck in the drain");
    assert_eq!(snap.abandoned_over_time, 1, "{snap:?}");
}
