//! HTTP/2: an early drop never costs a request or the connection. hyper's
//! h2 client resets a stream whose body is dropped, forgets reset streams
//! after 50 or 1 s, counts DATA that still arrives for a forgotten one
//! against the connection, and past 1,024 sends GOAWAY
//! `too_many_internal_resets`, failing every request in flight. The control
//! shows this harness reproducing that with hyper-util alone; with the
//! layer, the same traffic loses nothing, on one connection.

mod support;

use std::sync::atomic::Ordering;

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, Outcome, Reason};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower::ServiceBuilder;

use support::*;

const BODY: usize = MIB;
const CALLERS: usize = 16;

fn h2_client() -> Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>> {
    Client::builder(TokioExecutor::new()).http2_only(true).build_http()
}

/// The control: hyper-util alone, 16 callers dropping 1 MiB bodies right
/// after their heads, loses requests to its own GOAWAY. (It takes a few
/// hundred requests; the run stops at the first such loss, or gives up after
/// 20,000 requests, which would mean hyper no longer does this.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_hyper_util_alone_loses_requests_to_too_many_internal_resets() {
    let (addr, accepted) = h2c_server(BODY).await;
    let uri: http::Uri = format!("http://{addr}/").parse().unwrap();
    let run = h2_traffic(h2_client(), uri, CALLERS, 20_000, true).await;
    assert!(
        run.too_many_resets > 0,
        "hyper-util alone should lose a request to GOAWAY too_many_internal_resets within 20,000: {run:?}"
    );
    println!("hyper-util alone: {run:?}, {} connections", accepted.load(Ordering::SeqCst));
}

/// The same traffic through the layer, with its default budgets: every
/// request succeeds, on one connection; every early drop is counted once
/// and none failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_layer_the_same_traffic_loses_nothing_on_one_connection() {
    const N: usize = 2_000;
    let (addr, accepted) = h2c_server(BODY).await;
    let uri: http::Uri = format!("http://{addr}/").parse().unwrap();
    let layer = DrainOnDropLayer::new();
    let svc = ServiceBuilder::new().layer(layer.clone()).service(h2_client());
    let run = h2_traffic(svc, uri, CALLERS, N, false).await;
    assert_eq!((run.sent, run.failed), (N, 0), "{run:?}");
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "one connection, never given up: {run:?}");
    let s = layer.stats();
    assert!(s.wait_idle(SECONDS).await, "drains end: {s:?}");
    let s = s.snapshot();
    let counted = s.drained + s.abandoned + s.skipped + s.failed;
    assert_eq!(counted, N as u64, "each early drop counted once: {s:?}");
    assert_eq!(s.total(Outcome::Failed), 0, "{s:?}");
    assert!(s.count(Reason::EndOfBody) + s.count(Reason::PacedToEnd) > 0, "drained: {s:?}");
}

/// One caller, small bodies, TCP_NODELAY (the cell where hyper-util alone
/// loses a request now and then): with the layer, each 64 KiB body is read
/// to its end (within the stream window, so no reset is needed), or, when
/// a loaded machine pauses it past twice the round trip, reset as stalled;
/// none is lost, nothing is read twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_64_kib_body_is_read_to_its_end_without_a_reset() {
    const N: usize = 500;
    let (addr, accepted) = h2c_server(64 * KIB).await;
    let uri: http::Uri = format!("http://{addr}/").parse().unwrap();
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let svc = ServiceBuilder::new().layer(layer.clone()).service(h2_client());
    let run = h2_traffic(svc, uri, 1, N, false).await;
    assert_eq!((run.sent, run.failed), (N, 0), "{run:?}");
    let s = settle(&layer.stats(), SECONDS).await;
    let ended = s.count(Reason::EndOfBody) + s.count(Reason::PacedToEnd);
    assert_eq!(ended + s.count(Reason::Stalled), N as u64, "each drop ended, or stalled: {s:?}");
    assert!(ended >= N as u64 / 2, "bodies are read to their end: {s:?}");
    assert!(s.bytes_drained <= (N * 64 * KIB) as u64, "nothing read twice: {s:?}");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

/// An endless stream (server-sent events) is not read: dropped, it is reset
/// while the connection can remember the reset, and past that held unread
/// until it can. Drains that hold streams so stay at the bound the layer
/// states (2 per origin, plus one per caller that dropped a body while
/// 2 were held): a caller's next request waits for one to end. Every
/// drop ends as `stream`, with nothing read, and no request fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_streams_are_reset_never_read_and_hold_at_most_the_bound_of_streams() {
    const CALLERS: usize = 4;
    const N: usize = 100;
    let (addr, _) = accept_each(|io: hyper_util::rt::TokioIo<tokio::net::TcpStream>| async move {
        let service = hyper::service::service_fn(|_req| async {
            let events = Events::new();
            let res =
                http::Response::builder().header("content-type", "text/event-stream").body(events).unwrap();
            Ok::<_, std::convert::Infallible>(res)
        });
        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(io, service)
            .await;
    })
    .await;
    let uri: http::Uri = format!("http://{addr}/").parse().unwrap();
    let layer = DrainOnDropLayer::new();
    let stats = layer.stats();
    let sampler = Sampler::start(stats.clone());
    let svc = ServiceBuilder::new().layer(layer.clone()).service(h2_client());
    let run = h2_traffic(svc.clone(), uri.clone(), CALLERS, N, false).await;
    assert_eq!((run.sent, run.failed), (N, 0), "{run:?}");
    let s = settle(&stats, SECONDS).await;
    let most = sampler.stop();
    assert_eq!(s.count(Reason::Stream), N as u64, "every endless stream reset, none drained: {s:?}");
    assert_eq!(s.bytes_drained, 0, "nothing read: {s:?}");
    assert!(most <= (2 + CALLERS) as u64, "at most 2 held streams, plus one per caller: {most}");
    assert!(most > 0, "past the 40 resets the room allows at once, streams were held: {most}");
    let mut svc = svc;
    let res = tower::ServiceExt::oneshot(&mut svc, get(uri)).await.expect("the connection still serves");
    assert_eq!(res.status(), 200);
}

/// An endless body of events, one every 10 ms, as an SSE server sends them.
struct Events(tokio::time::Interval);

impl Events {
    fn new() -> Self {
        Events(tokio::time::interval(std::time::Duration::from_millis(10)))
    }
}

impl http_body::Body for Events {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        std::task::ready!(self.0.poll_tick(cx));
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from_static(b"data: tick\n\n")))))
    }
}

/// hyper's own HTTP/2 connection as a service (`Http2Sender`), shared by 16
/// callers dropping 1 MiB bodies: with h2's default reset memory and with
/// a memory of 10,000 set in one call on hyper's builder and the layer, no
/// request fails; with the larger memory every drop is reset (none read),
/// as Go's client does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hyper_s_own_http2_connection_loses_nothing_with_either_reset_memory() {
    const N: usize = 1_000;
    for memory in [None, Some(10_000)] {
        let (addr, accepted) = h2c_server(BODY).await;
        let mut builder = hyper::client::conn::http2::Builder::new(TokioExecutor::new());
        let mut layer = DrainOnDropLayer::new();
        if let Some(memory) = memory {
            layer = layer.http2_reset_memory(&mut builder, memory);
        }
        let io = hyper_util::rt::TokioIo::new(tokio::net::TcpStream::connect(addr).await.unwrap());
        let (sender, conn) = builder.handshake::<_, Empty<Bytes>>(io).await.unwrap();
        tokio::spawn(conn);
        let uri: http::Uri = format!("http://{addr}/").parse().unwrap();
        let run = h2_traffic(layer.http2_sender(sender), uri, CALLERS, N, false).await;
        assert_eq!((run.sent, run.failed), (N, 0), "reset memory {memory:?}: {run:?}");
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        let s = settle(&layer.stats(), SECONDS).await;
        let counted = s.drained + s.abandoned + s.skipped + s.failed;
        assert_eq!(counted, N as u64, "each early drop counted once: {s:?}");
        if memory.is_some() {
            let reset = s.count(Reason::DeclaredOverBudget) + s.count(Reason::Reset);
            assert_eq!(
                reset + s.count(Reason::EndOfBody),
                N as u64,
                "reset at the drop, never read on: {s:?}"
            );
        }
        println!("reset memory {memory:?}: {s:?}");
    }
}
