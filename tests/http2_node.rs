//! HTTP/2 against Node's own server (`tests/node/h2server.js`, h2c, Node
//! 20): an early drop never fails a request, and never holds a stream that
//! has nothing more to come.
//!
//! What Node does that matters here (measured with this harness):
//! - Its defaults announce no `SETTINGS_MAX_CONCURRENT_STREAMS`: nothing
//!   stops a client from opening streams. A session counts its streams and
//!   the data queued to send against 10 MB (`maxSessionMemory`); past it, it
//!   refuses new streams (RST_STREAM ENHANCE_YOUR_CALM, which the caller
//!   gets as its error) and, with many streams open, may fail the whole
//!   session ("The user callback function failed": GOAWAY INTERNAL_ERROR,
//!   every stream on it reset). A client that keeps dropped streams open
//!   (draining them) piles them up there.
//! - Its nghttp2 (1.57 and later) takes at most 1,000 RST_STREAM frames per
//!   connection in a burst, then 33 a second, whatever the streams' state
//!   (h2's STREAM_CLOSED answers to DATA for forgotten streams count too);
//!   past that it sends GOAWAY INTERNAL_ERROR and the requests above its
//!   last stream id fail. That is how hyper-util alone loses requests
//!   against Node (before h2's own too_many_internal_resets).
//! - Node 20 never gives back the session memory counted for response
//!   bytes still queued on a stream (written by the app, not yet sent for
//!   lack of flow-control window) when the client resets that stream
//!   (`Http2Stream::Destroy` drops the queue without uncounting it). The
//!   account only grows: after 10 MB of such bytes the connection refuses
//!   every new stream for good. An app that answers with one 1 MiB Buffer
//!   poisons a connection in about 10 resets; one writing 16 KiB at a time
//!   waiting for 'drain' (as `/len`), in about 600 made while the window is
//!   closed. (Bodies queued at once count too, while they wait: 16 bodies
//!   of 1 MiB written at once exceed 10 MB, and Node refuses streams even
//!   to a client that reads every body.)
//! - A server announcing a small limit shows the other cost of a held
//!   stream: the next request waits for it.
//!
//! The counters come from the server (open streams, resets by code,
//! refusals, broken sessions), printed by every test; `NODE_H2_TAP=1` adds
//! the frames seen by a relay in front of Node (`--tap`).
//!
//! Node.js is required: without it every test here fails (never skips),
//! saying `apt-get install nodejs`. The `#[ignore]`d controls (hyper-util
//! alone, every body read to its end) measure the same traffic without the
//! layer: `cargo test --test http2_node control -- --ignored --nocapture`.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, DrainSnapshot};
use http::StatusCode;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tower::{Service, ServiceBuilder, ServiceExt};

use support::*;

const CALLERS: usize = 16;
/// Requests of a bulk run: the 0.5.0 failures against Node show within a
/// few hundred; 2,000 keep a debug build's run to seconds.
const REQUESTS: usize = 2_000;

/// How long a dropped stream may stay open, and the next request wait for
/// a stream, before the test calls it held. Holding means tens of seconds
/// here (every layer in this file that could hold one has a 30 s time
/// budget, [`SECONDS`], or drains past its pace for 30 s); releasing, a few
/// milliseconds. The bound between is for a loaded machine, not a tuning.
const HOLD_BOUND: Duration = Duration::from_secs(10);

fn h2_client() -> Client<HttpConnector, Empty<Bytes>> {
    Client::builder(TokioExecutor::new()).http2_only(true).build_http()
}

/// [`h2_client`] with TCP_NODELAY: without it each request after a reset
/// waits for the server's delayed ACK of the RST_STREAM segment (Nagle),
/// some 40 ms, and 33 sequential drops would spread over more than the one
/// second a reset pace counts in.
fn h2_client_nodelay() -> Client<HttpConnector, Empty<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).http2_only(true).build(connector)
}

/// The early drops the layer counted: each one should be counted once.
fn counted(s: &DrainSnapshot) -> u64 {
    s.drained + s.abandoned + s.skipped + s.failed
}

/// [`h2_traffic`]: the run, its failures by kind, and the longest a
/// request took to its head (printed, never asserted).
type Traffic = (H2Run, BTreeMap<String, usize>, Duration);

async fn traffic<S, B>(svc: S, uri: http::Uri, callers: usize, requests: usize) -> Traffic
where
    S: Service<http::Request<Empty<Bytes>>, Response = http::Response<B>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: std::fmt::Debug + Send,
    B: Send + 'static,
{
    let mut run = h2_traffic(svc, uri, callers, requests, false).await;
    let (kinds, slowest) = (std::mem::take(&mut run.kinds), run.slowest);
    (run, kinds, slowest)
}

fn summary(server: &NodeStats) -> String {
    format!(
        "server: {} streams opened, most open at once {}, open now {}, ended normally {}; client resets: \
         CANCEL {}, STREAM_CLOSED {}, NO_ERROR {}, other {} [{}]; refused {}; closed with their session {}; \
         sessions {} (broken {}, errors {}), GOAWAYs from the client {} [{}]; {} MiB written{}",
        server.streams_opened,
        server.streams_max_open,
        server.streams_open,
        server.streams_ended,
        server.rst_cancel,
        server.rst_stream_closed,
        server.rst_no_error,
        server.rst_other,
        server.rst_other_codes,
        server.refused,
        server.streams_closed_by_session,
        server.sessions,
        server.sessions_broken,
        server.session_errors,
        server.goaways_received,
        server.goaway_codes,
        server.bytes_written / MIB as u64,
        if server.errors.is_empty() { String::new() } else { format!("; errors: {}", server.errors) },
    ) + &if server.tap.is_empty() { String::new() } else { format!("\n  tap: {}", server.tap) }
}

/// `REQUESTS` requests for `path` from `CALLERS` callers through
/// `DrainOnDropLayer::new()`, each response dropped right after its head:
/// none fails, every early drop is counted once, and every stream is closed
/// at the server once the drains are over.
async fn bulk_drops_fail_nothing(what: &str, node: &NodeH2, path: &str, requests: usize) -> NodeStats {
    bulk_drops_fail_nothing_by(what, node, path, requests, CALLERS).await
}

/// [`bulk_drops_fail_nothing`] with `callers` callers.
async fn bulk_drops_fail_nothing_by(
    what: &str,
    node: &NodeH2,
    path: &str,
    requests: usize,
    callers: usize,
) -> NodeStats {
    let layer = DrainOnDropLayer::new();
    let svc = ServiceBuilder::new().layer(layer.clone()).service(h2_client());
    let start = Instant::now();
    let (run, kinds, slowest) = traffic(svc, node.uri(path), callers, requests).await;
    let took = start.elapsed();
    let idle = layer.stats().wait_idle(SECONDS + SLACK).await;
    let s = layer.stats().snapshot();
    let (closed, server) = node.wait_stats(HOLD_BOUND, |s| s.streams_open == 0).await;
    println!(
        "{what}, layer: {} sent, {} failed in {took:.1?} (slowest head {slowest:.1?}): {kinds:?}\n  \
         layer: {} drained, {} abandoned, {} skipped, {} failed, {} MiB drained; {:?}\n  {}",
        run.sent,
        run.failed,
        s.drained,
        s.abandoned,
        s.skipped,
        s.failed,
        s.bytes_drained / MIB as u64,
        s.iter().filter(|(_, n)| *n > 0).collect::<Vec<_>>(),
        summary(&server),
    );
    assert_eq!(
        (run.sent, run.failed),
        (requests, 0),
        "{what}: every request should succeed, none lost to a refused stream, a broken session or \
         too_many_internal_resets; failures {kinds:?}; {}",
        summary(&server)
    );
    assert!(idle, "{what}: every drain should end within the 30 s budget and a slack: {s:?}");
    assert_eq!(counted(&s), requests as u64, "{what}: each early drop counted once: {s:?}");
    assert!(
        closed,
        "{what}: every stream should be closed at the server within {HOLD_BOUND:?} of the drains' end, \
         {} still open; {}",
        server.streams_open,
        summary(&server)
    );
    assert_eq!(
        (server.refused, server.sessions_broken, server.session_errors),
        (0, 0, 0),
        "{what}: Node should refuse no stream and no session should break; {}",
        summary(&server)
    );
    assert_eq!(
        server.streams_opened,
        requests as u64,
        "{what}: the server saw every request; {}",
        summary(&server)
    );
    server
}

/// (a) Node's defaults (no stream limit announced, 10 MB per session), 1 MiB
/// bodies with content-length, 16 callers: 0.5.0 drained past its reset
/// pace, piled up ~700 open streams and lost hundreds of requests to
/// Node's refusals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_defaults_1_mib_bodies_dropped_after_the_head_fail_no_request() {
    let node = NodeH2::start(&[]);
    bulk_drops_fail_nothing("Node defaults, /len/1 MiB, 16 callers", &node, "/len/1048576", REQUESTS).await;
}

/// (b) The same against a Node server announcing 100 concurrent streams
/// (Node's documentation's suggestion), which bounds what a client may
/// hold: still no failed request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_with_100_streams_1_mib_bodies_dropped_after_the_head_fail_no_request() {
    let node = NodeH2::start(&["--max-streams", "100"]);
    bulk_drops_fail_nothing("Node max 100 streams, /len/1 MiB, 16 callers", &node, "/len/1048576", REQUESTS)
        .await;
}

/// (c) Bodies without content-length (2 MiB, 16 callers): an HTTP/2 body
/// ends with END_STREAM whatever its headers, so a missing length is no
/// reason to fail a request. (0.5.0 lost about 250 of 2,000 here, to
/// Node's refusals, as in (a); against other servers, some to the client's
/// own GOAWAY too_many_internal_resets.) 2,000 requests: under 15 s in a
/// debug build even if every body were read to its end (4 GB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_defaults_2_mib_bodies_without_length_dropped_after_the_head_fail_no_request() {
    let node = NodeH2::start(&[]);
    bulk_drops_fail_nothing("Node defaults, /nolen/2 MiB, 16 callers", &node, "/nolen/2097152", REQUESTS)
        .await;
}

/// (e) (c) against a server announcing 100 streams: with the streams
/// bounded, what is left is the resets and the DATA still coming for reset
/// streams (hyper's client gives up past 1,024 late frames, Node's nghttp2
/// past 1,000 resets received in a burst, then 33 a second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_with_100_streams_2_mib_bodies_without_length_dropped_after_the_head_fail_no_request() {
    let node = NodeH2::start(&["--max-streams", "100"]);
    bulk_drops_fail_nothing(
        "Node max 100 streams, /nolen/2 MiB, 16 callers",
        &node,
        "/nolen/2097152",
        REQUESTS,
    )
    .await;
}

/// (e) 512 KiB bodies written in one `end()` call, as a Node app answering
/// with a Buffer does: Node queues the whole body on the stream, and a
/// reset before it is all sent leaks what is still queued in the session's
/// memory account for good (10 MB in all and the connection refuses every
/// new stream). Read to the end, this traffic fails nothing (16 bodies
/// queued at once stay under 10 MB; with 1 MiB bodies they do not, and
/// Node refuses streams whatever the client does); hyper-util alone poisons
/// the connection within about 30 resets and loses most requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_defaults_512_kib_bodies_written_at_once_dropped_after_the_head_fail_no_request() {
    let node = NodeH2::start(&[]);
    bulk_drops_fail_nothing("Node defaults, /whole/512 KiB, 16 callers", &node, "/whole/524288", REQUESTS)
        .await;
}

/// (e) (a) with 64 callers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_defaults_1_mib_bodies_dropped_after_the_head_by_64_callers_fail_no_request() {
    let node = NodeH2::start(&[]);
    bulk_drops_fail_nothing_by("Node defaults, /len/1 MiB, 64 callers", &node, "/len/1048576", REQUESTS, 64)
        .await;
}

/// (d) A server allowing 8 streams; one caller drops 33 responses whose
/// bodies have nothing more to come soon (an endless stream, or nothing at
/// all) right after their heads, then sends one ordinary request. The layer
/// may drain for 30 s (`max_time`): a drain that held its stream would make
/// a later request wait that long, so every head has to arrive within
/// [`HOLD_BOUND`], and the server has to see the 33 streams reset. (33: more
/// than 0.5.0's 25 resets a second, plus the 8 streams; the client sets
/// TCP_NODELAY so that they fit in a second.)
async fn dropped_streams_are_released(path: &str) {
    dropped_streams_are_released_after(path, 33).await;
}

/// [`dropped_streams_are_released`] after `drops` drops.
async fn dropped_streams_are_released_after(path: &str, drops: usize) {
    let node = NodeH2::start(&["--max-streams", "8"]);
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let mut svc = ServiceBuilder::new().layer(layer.clone()).service(h2_client_nodelay());
    let mut slowest = Duration::ZERO;
    for i in 1..=drops + 1 {
        let uri = if i <= drops { node.uri(path) } else { node.uri("/small") };
        let start = Instant::now();
        let res =
            tokio::time::timeout(HOLD_BOUND, async { svc.ready().await?.call(get(uri.clone())).await }).await;
        let head = start.elapsed();
        let res = match res {
            Ok(Ok(res)) => res,
            Ok(Err(e)) => {
                panic!("{path}: request {i} ({uri}) failed: {e:?}; {}", summary(&node.stats().await))
            }
            Err(_) => panic!(
                "{path}: request {i} ({uri}) got no head within {HOLD_BOUND:?} on a server allowing 8 streams: \
                 the streams of the responses dropped before it are held; {}; layer {:?}",
                summary(&node.stats().await),
                layer.stats().snapshot()
            ),
        };
        assert_eq!(res.status(), StatusCode::OK, "{path}: request {i} ({uri})");
        if i <= drops {
            slowest = slowest.max(head);
            drop(res);
        } else {
            let body = read_all(res.into_body()).await.expect("/small's body");
            assert_eq!(body, b"small body\n", "the ordinary request's body, whole");
            println!(
                "{path}: {drops} dropped (slowest head {slowest:.1?}), then /small's head in {head:.1?}"
            );
        }
    }
    let (released, server) =
        node.wait_stats(HOLD_BOUND, |s| s.client_resets() >= drops as u64 && s.streams_open == 0).await;
    println!("{path}: {}; layer {:?}", summary(&server), layer.stats().snapshot());
    assert!(
        released,
        "{path}: the server should see the {drops} dropped streams reset by the client within {HOLD_BOUND:?}, \
         none left open; {}",
        summary(&server)
    );
    assert_eq!(
        (server.client_resets(), server.streams_ended, server.streams_opened),
        (drops as u64, 1, drops as u64 + 1),
        "{path}: {drops} streams reset by the client, /small ended normally; {}",
        summary(&server)
    );
    assert_eq!(
        (server.refused, server.sessions_broken, server.session_errors),
        (0, 0, 0),
        "{path}: no refusal, no broken session; {}",
        summary(&server)
    );
    let s = settle(&layer.stats(), SLACK).await;
    assert_eq!(counted(&s), drops as u64, "{path}: each early drop counted once: {s:?}");
}

/// (d) Server-sent events (text/event-stream, an event every 20 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_sse_streams_are_reset_and_never_hold_the_servers_8_streams() {
    dropped_streams_are_released("/sse").await;
}

/// (d) An endless octet stream without length, 1 KiB every 50 ms: not listed
/// as open-ended, but its end never comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_trickling_streams_are_reset_and_never_hold_the_servers_8_streams() {
    dropped_streams_are_released("/trickle").await;
}

/// (d) A head, then nothing (no length): a stalled server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_stalled_streams_are_reset_and_never_hold_the_servers_8_streams() {
    dropped_streams_are_released("/stall").await;
}

/// (e) A head announcing 1 MiB (over the default byte budget), then nothing:
/// a declared length is no reason to wait for bytes that do not come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_stalled_streams_with_a_declared_length_never_hold_the_servers_8_streams() {
    dropped_streams_are_released("/stall?cl=1048576").await;
}

/// (e) (d) with 100 SSE drops, more than the 50 resets a second h2
/// remembers: a layer that has to wait for its resets may make the caller
/// wait (about a second), but holds no stream for long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_sse_streams_past_h2s_reset_memory_never_hold_the_servers_8_streams() {
    dropped_streams_are_released_after("/sse", 100).await;
}

/// (e) Endless streams dropped at the rate of 16 callers against Node's
/// defaults (no stream limit): every one is reset, none left open to pile up
/// at the server (0.5.0 reset 25 a second and drained the rest for 30 s),
/// and no request fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_sse_streams_never_pile_up_at_a_server_without_a_stream_limit() {
    // Past the first second's resets, a layer that holds the rest leaves
    // them open (0.5.0: 175 of 200); one that releases them leaves none.
    // Each dropped endless stream costs one reset whatever the client does
    // (or a connection): 200 stay well under the 1,000 Node takes on one
    // connection in a burst, and a layer that resets at 20 a second
    // finishes in 10 s.
    const N: usize = 200;
    let node = NodeH2::start(&[]);
    let layer = DrainOnDropLayer::new();
    let svc = ServiceBuilder::new().layer(layer.clone()).service(h2_client());
    let start = Instant::now();
    let (run, kinds, slowest) = traffic(svc, node.uri("/sse"), CALLERS, N).await;
    let took = start.elapsed();
    // The server first: a layer holding the streams would hold them 30 s.
    let (released, server) =
        node.wait_stats(HOLD_BOUND, |s| s.streams_open == 0 && s.client_resets() >= N as u64).await;
    println!(
        "/sse, 16 callers, layer: {} sent, {} failed in {took:.1?} (slowest head {slowest:.1?}): {kinds:?}\n  {}",
        run.sent,
        run.failed,
        summary(&server)
    );
    assert_eq!(
        (run.sent, run.failed),
        (N, 0),
        "every request should succeed: {kinds:?}; {}",
        summary(&server)
    );
    assert!(
        released,
        "every dropped stream should be reset within {HOLD_BOUND:?} of the last drop, {} still open; {}",
        server.streams_open,
        summary(&server)
    );
    assert_eq!(
        server.client_resets(),
        N as u64,
        "each stream reset once by the client; {}",
        summary(&server)
    );
    let s = settle(&layer.stats(), SLACK).await;
    assert_eq!(counted(&s), N as u64, "each early drop counted once: {s:?}");
}

/// Control, not run by default: hyper-util alone, the traffic of (a), (c)
/// or the written-at-once (e);
/// prints its failures (Node's GOAWAY INTERNAL_ERROR past its reset limit).
async fn control_alone(path: &str) {
    let node = NodeH2::start(&[]);
    let start = Instant::now();
    let (run, kinds, slowest) = traffic(h2_client(), node.uri(path), CALLERS, REQUESTS).await;
    let took = start.elapsed();
    let (_, server) = node.wait_stats(HOLD_BOUND, |s| s.streams_open == 0).await;
    println!(
        "{path}, hyper-util alone: {} sent, {} failed in {took:.1?} (slowest head {slowest:.1?}): {kinds:?}\n  {}",
        run.sent,
        run.failed,
        summary(&server)
    );
    assert_eq!(run.sent, REQUESTS, "the control ran all its requests");
}

/// Control, not run by default: every body read to its end, the traffic of
/// (a), (c) or the written-at-once (e): Node serves it without failing (the failures of the other
/// runs come from the drops).
async fn control_read_to_end(path: &str) {
    let node = NodeH2::start(&[]);
    let body_errors = Arc::new(AtomicUsize::new(0));
    let errors = body_errors.clone();
    let svc = h2_client().and_then(move |res: http::Response<hyper::body::Incoming>| {
        let errors = errors.clone();
        async move {
            let (parts, body) = res.into_parts();
            if read_all(body).await.is_err() {
                errors.fetch_add(1, Ordering::SeqCst);
            }
            Ok::<_, hyper_util::client::legacy::Error>(http::Response::from_parts(parts, ()))
        }
    });
    let start = Instant::now();
    let (run, kinds, slowest) = traffic(svc, node.uri(path), CALLERS, REQUESTS).await;
    let took = start.elapsed();
    let body_errors = body_errors.load(Ordering::SeqCst);
    let (_, server) = node.wait_stats(HOLD_BOUND, |s| s.streams_open == 0).await;
    println!(
        "{path}, read to the end: {} sent, {} failed, {body_errors} bodies cut in {took:.1?} (slowest {slowest:.1?}): {kinds:?}\n  {}",
        run.sent,
        run.failed,
        summary(&server)
    );
    assert_eq!(
        (run.sent, run.failed, body_errors),
        (REQUESTS, 0, 0),
        "Node serves this traffic read to the end; {}",
        summary(&server)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "control: hyper-util alone, prints its failures"]
async fn control_a_hyper_util_alone_node_defaults_1_mib() {
    control_alone("/len/1048576").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "control: hyper-util alone, prints its failures"]
async fn control_c_hyper_util_alone_node_defaults_2_mib_without_length() {
    control_alone("/nolen/2097152").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "control: every body read to its end"]
async fn control_a_read_to_end_node_defaults_1_mib() {
    control_read_to_end("/len/1048576").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "control: every body read to its end"]
async fn control_c_read_to_end_node_defaults_2_mib_without_length() {
    control_read_to_end("/nolen/2097152").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "control: hyper-util alone, prints its failures"]
async fn control_e_hyper_util_alone_node_defaults_512_kib_written_at_once() {
    control_alone("/whole/524288").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "control: every body read to its end"]
async fn control_e_read_to_end_node_defaults_512_kib_written_at_once() {
    control_read_to_end("/whole/524288").await;
}
