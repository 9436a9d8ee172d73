//! What the adversarial tables do not cover: HTTP/2 bodies, bodies read in
//! full between drained ones, the body's auto traits, and a body that never
//! waits. The framing and budget matrix (over budget, exactly the budget,
//! stalls, `Connection: close`, bodiless responses, close-delimited bodies,
//! zero settings) is in `tests/adversarial/scenarios.rs`; runtime shutdown
//! and drops outside a runtime in `tests/adversarial/lifecycle.rs`.

mod support;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, DrainSnapshot, Reason};
use http::{Request, Response};
use http_body_util::{Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use support::*;
use tower::{Service, ServiceBuilder, ServiceExt};

/// An h2c server (prior knowledge) answering every request with 64 KiB.
async fn h2_server() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    accept_each(|io| {
        let service = hyper::service::service_fn(|_req| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(vec![7u8; 64 * KIB]))))
        });
        hyper::server::conn::http2::Builder::new(TokioExecutor::new()).serve_connection(io, service)
    })
    .await
}

/// HTTP/2 bodies dropped unread never cost the connection, and are never
/// read: each stream is reset at once (counted `reset`), on one connection.
#[tokio::test]
async fn http2_bodies_dropped_unread_are_reset_unread_on_one_connection() {
    let (addr, accepted) = h2_server().await;
    let client = Client::builder(TokioExecutor::new()).http2_only(true).build_http::<Empty<Bytes>>();
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().layer(layer).service(client);
    for _ in 0..10 {
        let uri: http::Uri = format!("http://{addr}/").parse().unwrap();
        let res = svc.ready().await.unwrap().call(get(uri)).await.unwrap();
        assert_eq!(res.version(), http::Version::HTTP_2);
        drop(res);
    }
    let snap = settle(&stats, SECONDS).await;
    assert_eq!(snap.count(Reason::Reset), 10, "every stream reset at the drop: {snap:?}");
    assert_eq!((snap.bytes_drained, snap.in_flight), (0, 0), "nothing read, nothing running: {snap:?}");
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "HTTP/2 multiplexes over one connection");
}

/// Reads every body fully, alternating with early drops, through `layer`,
/// and checks each byte: a drained remainder never leaks into the next
/// response. Returns the connections opened, the early drops and the counts.
async fn alternate(layer: DrainOnDropLayer) -> (usize, u64, DrainSnapshot) {
    let server = RawServer::start(|head| {
        let len = query(&head.path, "len").unwrap() as usize;
        let seed = query(&head.path, "seed").unwrap();
        if seed.is_multiple_of(2) { content_length(seed, len) } else { chunked(seed, len, 777) }
    })
    .await;
    let (client, connector) = client();
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
    let snap = settle(&stats, SECONDS).await;
    (connector.count(), dropped, snap)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fully_read_bodies_arrive_intact_between_drained_ones() {
    // Seconds of time budget: every early drop is drained on any machine.
    let (with_layer, dropped, snap) = alternate(DrainOnDropLayer::new().max_time(SECONDS)).await;
    assert!(snap.drained <= dropped, "{snap:?}");
    assert_eq!((snap.abandoned, snap.failed, snap.skipped), (0, 0, 0), "{snap:?}");
    // Reuse is the subject of tests/reuse.rs; here it is enough that the 67
    // early drops did not each cost a connection: against the same requests
    // with draining disabled (hyper-util alone), in the same run.
    let (alone, _, off) = alternate(DrainOnDropLayer::new().max_bytes(0)).await;
    assert_eq!((off.drained, off.abandoned, off.failed), (0, 0, 0), "draining disabled: {off:?}");
    println!("{dropped} early drops among 200 requests: {with_layer} connections, hyper alone {alone}");
    assert_keeps_half("200 requests, 67 dropped after one frame", with_layer, alone, 0);
}

#[test]
fn drain_body_is_send_and_unpin_like_incoming() {
    fn send_unpin<T: Send + Unpin + 'static>() {}
    send_unpin::<drain_on_drop::DrainBody<hyper::body::Incoming>>();
    send_unpin::<drain_on_drop::future::ResponseFuture<hyper_util::client::legacy::ResponseFuture>>();
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
            settle(&stats, Duration::from_millis(50)).await
        });
        let _ = done_tx.send(snap);
    });
    let snap = done_rx.recv_timeout(Duration::from_secs(10)).expect("the runtime is not stuck in the drain");
    assert_eq!((snap.count(Reason::OverTime), snap.abandoned), (1, 1), "given up on time: {snap:?}");
}
