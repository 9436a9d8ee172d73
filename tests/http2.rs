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
/// loses a request now and then): with the layer, every 64 KiB body is
/// drained to its end, within its budgets, and the stream ends normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_64_kib_body_dropped_unread_is_drained_to_its_end() {
    const N: usize = 500;
    let (addr, accepted) = h2c_server(64 * KIB).await;
    let uri: http::Uri = format!("http://{addr}/").parse().unwrap();
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let svc = ServiceBuilder::new().layer(layer.clone()).service(h2_client());
    let run = h2_traffic(svc, uri, 1, N, false).await;
    assert_eq!((run.sent, run.failed), (N, 0), "{run:?}");
    let s = settle(&layer.stats(), SECONDS).await;
    assert_eq!(s.count(Reason::EndOfBody), N as u64, "{s:?}");
    assert_eq!(s.bytes_drained, (N * 64 * KIB) as u64, "every byte read, none twice: {s:?}");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}
