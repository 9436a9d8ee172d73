//! HTTP/2 against Node's own server (`tests/node/h2server.js`, h2c, Node
//! 20), through the README's HTTP/2 stack (`RetryRefusedLayer` above
//! `DrainOnDropLayer` over hyper-util's client built on `Http2Connector`):
//! a dropped stream is reset at once and never held, whatever its body
//! does, and what Node refuses goes again when that is safe.
//!
//! What Node does that matters here (measured with this harness):
//! - Its nghttp2 (1.57 and later) takes at most 1,000 RST_STREAM frames per
//!   connection in a burst, then 33 a second; past that it sends GOAWAY
//!   INTERNAL_ERROR and fails the requests above its last stream id. Every
//!   client that resets dropped streams at once meets it (Go's included):
//!   those requests were never processed, and the retry sends them again on
//!   a new connection (`node_s_reset_limit_costs_no_request`).
//! - Node 20 never gives back the session memory it counted for response
//!   bytes still queued on a stream (written by the app, not yet sent) when
//!   the client resets that stream. After 10 MB of such bytes the session
//!   refuses new streams (RST_STREAM ENHANCE_YOUR_CALM), and after some 100
//!   refusals fails. A refusal with ENHANCE_YOUR_CALM is not one a client may
//!   take as unprocessed (RFC 9113, 8.7); the requests here are GETs, which
//!   are idempotent, so the retry sends them again, and the first refusal
//!   tells the connector that this origin punishes resets: that connection
//!   takes no new stream, and each later one moves on after half the resets
//!   the refused one had sent, before its session fills. The bulk tests
//!   assert that no request is lost and that the connections are a few.
//!   Without the stack, 16 callers dropping 1 MiB bodies on one connection
//!   lose about 10% of their requests so, with hyper-util alone and with Go
//!   1.27's client alike (Go: 222 and 204 of 2,000 on this server, h2c). An
//!   app answering with a whole Buffer (512 KiB in one `end()`) poisons a
//!   session within about 20 resets (the `#[ignore]`d controls measure it).
//! - Its defaults announce no `SETTINGS_MAX_CONCURRENT_STREAMS`. A server
//!   announcing a small limit shows the cost of a held stream: the next
//!   request waits for it.
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
use drain_on_drop::{DrainOnDropLayer, DrainSnapshot, Http2Connector, Reason, RetryRefusedLayer};
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

/// A patience beyond any dial a loaded machine takes, for the tests that
/// count sessions: they are about moves (one dial per move, not one per
/// caller waiting), not about the patience (`stacks/tests/http2_faults.rs`).
/// At the default (twice the median TCP connect, 250 ms at least), a new
/// connection that took longer than that to carry its first request,
/// which a loaded machine with 64 callers can take, would have each of the
/// callers waiting for it dial its own.
const PATIENT: Duration = Duration::from_secs(30);

/// The README's HTTP/2 stack over hyper-util's HTTP/2-only client: the
/// retry above the drain, over `Http2Connector` (one dial at a time, each
/// connection charged for the resets it sends), with a [`PATIENT`] gate.
fn readme_stack(
    layer: &DrainOnDropLayer,
) -> impl Service<
    http::Request<Empty<Bytes>>,
    Response = http::Response<drain_on_drop::DrainBody<hyper::body::Incoming>>,
    Error = hyper_util::client::legacy::Error,
    Future: Send,
> + Clone
+ Send
+ 'static {
    let connector = Http2Connector::new(HttpConnector::new()).dial_patience(PATIENT);
    let client = Client::builder(TokioExecutor::new()).http2_only(true).build(connector);
    ServiceBuilder::new().layer(RetryRefusedLayer::new()).layer(layer.clone()).service(client)
}

/// `requests` requests for `path` from `callers` callers through the
/// README's stack, each response dropped right after its head: no request
/// is lost (what Node refuses once a session's memory is spent is
/// idempotent and goes again; that connection takes no new stream, and the
/// origin learns a share of resets after which each later connection moves
/// on), every early drop is reset and counted once with nothing read, no
/// stream stays open at the server, and the connections are a few, one per
/// move (a dial per caller waiting at each move would be hundreds).
async fn bulk_drops_lose_no_request(what: &str, node: &NodeH2, path: &str, requests: usize, callers: usize) {
    let layer = DrainOnDropLayer::new();
    let start = Instant::now();
    let (run, kinds, slowest) = traffic(readme_stack(&layer), node.uri(path), callers, requests).await;
    let took = start.elapsed();
    let s = settle(&layer.stats(), SLACK).await;
    let (closed, server) = node.wait_stats(HOLD_BOUND, |s| s.streams_open == 0).await;
    println!(
        "{what}, README's stack: {} sent, {} failed in {took:.1?} (slowest head {slowest:.1?}): {kinds:?}\n  \
         layer: {:?}\n  {}",
        run.sent,
        run.failed,
        s.iter().filter(|(_, n)| *n > 0).collect::<Vec<_>>(),
        summary(&server),
    );
    assert_eq!(run.sent, requests);
    assert_eq!(
        run.failed,
        0,
        "{what}: no request lost (refusals go again, and the connections move on before their sessions \
         fill): {kinds:?}; {}",
        summary(&server)
    );
    assert!(
        (server.sessions as usize) < requests / 50,
        "{what}: a connection per move, not one per caller waiting; {}",
        summary(&server)
    );
    assert_eq!(s.count(Reason::Reset), requests as u64, "{what}: each drop reset once: {s:?}");
    assert_eq!((s.bytes_drained, s.in_flight), (0, 0), "{what}: nothing read, nothing held: {s:?}");
    assert!(closed, "{what}: no stream left open at the server; {}", summary(&server));
}

/// (a) Node's defaults (no stream limit announced, 10 MB per session), 1 MiB
/// bodies with content-length, 16 callers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_defaults_1_mib_bodies_dropped_lose_no_request() {
    let node = NodeH2::start(&[]);
    bulk_drops_lose_no_request("Node defaults, /len/1 MiB, 16", &node, "/len/1048576", REQUESTS, CALLERS)
        .await;
}

/// (a) with 64 callers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_defaults_1_mib_bodies_dropped_by_64_callers_lose_no_request() {
    let node = NodeH2::start(&[]);
    bulk_drops_lose_no_request("Node defaults, /len/1 MiB, 64", &node, "/len/1048576", REQUESTS, 64).await;
}

/// (b) A server announcing 100 concurrent streams, and bodies without
/// content-length (2 MiB): an HTTP/2 body ends with END_STREAM whatever its
/// headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_with_100_streams_2_mib_bodies_without_length_dropped_lose_no_request() {
    let node = NodeH2::start(&["--max-streams", "100"]);
    let what = "Node max 100 streams, /nolen/2 MiB, 16";
    bulk_drops_lose_no_request(what, &node, "/nolen/2097152", REQUESTS, CALLERS).await;
}

/// (c) Node's reset limit: 4,000 endless event streams dropped by 16
/// callers (each event a few bytes: Node's memory account does not fill).
/// Past 1,000 resets in a burst, then 33 a second, Node fails the
/// connection with GOAWAY INTERNAL_ERROR: every request above its last
/// stream id goes again on a new connection, none fails, and the origin
/// learns a share of resets, after which each later connection moves on
/// before Node's limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_s_reset_limit_costs_no_request() {
    let layer = DrainOnDropLayer::new();
    let server = sse_drops("learned share", &layer).await;
    assert!(
        server.sessions >= 2,
        "Node's reset limit should have ended the first connection (else this test tried nothing); {}",
        summary(&server)
    );
}

const SSE_DROPS: usize = 4_000;

/// [`SSE_DROPS`] endless event streams dropped right after their heads by
/// 16 callers through the README's stack with `layer`: none fails, each
/// counted once. Node's counts, once its streams are closed.
async fn sse_drops(what: &str, layer: &DrainOnDropLayer) -> NodeStats {
    const N: usize = SSE_DROPS;
    let node = NodeH2::start(&[]);
    let start = Instant::now();
    let (run, kinds, slowest) = traffic(readme_stack(layer), node.uri("/sse"), CALLERS, N).await;
    let took = start.elapsed();
    let (_, server) = node.wait_stats(HOLD_BOUND, |s| s.streams_open == 0).await;
    println!(
        "/sse x {N}, 16 callers, README's stack, {what}: {} sent, {} failed in {took:.1?} (slowest head \
         {slowest:.1?}): {kinds:?}\n  {}",
        run.sent,
        run.failed,
        summary(&server)
    );
    assert_eq!((run.sent, run.failed), (N, 0), "{what}: none lost: {kinds:?}; {}", summary(&server));
    let s = settle(&layer.stats(), SLACK).await;
    assert_eq!(s.count(Reason::Stream), N as u64, "{what}: each drop reset once: {s:?}");
    server
}

/// (d) A server allowing 8 streams; one caller drops 33 responses whose
/// bodies have nothing more to come soon (an endless stream, or nothing at
/// all) right after their heads, then sends one ordinary request. The
/// layer's budgets are 30 s and 64 MiB: a drain that held its stream would
/// make a later request wait that long, so every head has to arrive within
/// [`HOLD_BOUND`], and the server has to see the 33 streams reset. (33:
/// four times the 8 streams; the client sets TCP_NODELAY, so that no reset
/// waits for a delayed ACK.)
async fn dropped_streams_are_released(path: &str) {
    dropped_streams_are_released_after(path, 33).await;
}

/// [`dropped_streams_are_released`] after `drops` drops.
async fn dropped_streams_are_released_after(path: &str, drops: usize) {
    let node = NodeH2::start(&["--max-streams", "8"]);
    let layer = DrainOnDropLayer::new().max_time(SECONDS).max_bytes(64 * MIB as u64);
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

/// (e) (d) with 100 SSE drops, more than any pace of resets the layer ever
/// kept (h2 0.4.20 remembered 50 a second): none is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_sse_streams_past_h2s_reset_memory_never_hold_the_servers_8_streams() {
    dropped_streams_are_released_after("/sse", 100).await;
}

/// (e) Endless streams dropped at the rate of 16 callers against Node's
/// defaults (no stream limit): every one is reset, none left open to pile up
/// at the server, and no request fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_sse_streams_never_pile_up_at_a_server_without_a_stream_limit() {
    // A layer that held them would leave them open (one that paced its
    // resets at 25 a second: 175 of 200). 200 stay well under the 1,000
    // resets Node takes on one connection in a burst: the layer alone, no
    // retry, fails nothing.
    const N: usize = 200;
    let node = NodeH2::start(&[]);
    let layer = DrainOnDropLayer::new().max_time(SECONDS).max_bytes(64 * MIB as u64);
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

/// Control, not run by default: hyper-util alone, the traffic of (a), (b)
/// or bodies written at once; prints its failures (Node's GOAWAY
/// INTERNAL_ERROR past its reset limit, its refusals once its memory
/// account is full).
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
/// (a), (b) or bodies written at once: Node serves it without failing (the
/// failures of the other runs come from the resets).
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
async fn control_b_hyper_util_alone_node_defaults_2_mib_without_length() {
    control_alone("/nolen/2097152").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "control: every body read to its end"]
async fn control_a_read_to_end_node_defaults_1_mib() {
    control_read_to_end("/len/1048576").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "control: every body read to its end"]
async fn control_b_read_to_end_node_defaults_2_mib_without_length() {
    control_read_to_end("/nolen/2097152").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "control: hyper-util alone, prints its failures"]
async fn control_hyper_util_alone_node_defaults_512_kib_written_at_once() {
    control_alone("/whole/524288").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "control: every body read to its end"]
async fn control_read_to_end_node_defaults_512_kib_written_at_once() {
    control_read_to_end("/whole/524288").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "control: hyper-util alone, prints its failures"]
async fn control_c_hyper_util_alone_node_reset_limit() {
    control_alone("/sse").await;
}
