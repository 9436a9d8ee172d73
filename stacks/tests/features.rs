//! Per-request budgets, stream awareness, skip reasons, the reuse observer,
//! and tower-http stacks (FollowRedirect, Decompression, Trace).

#[path = "../../tests/support/mod.rs"]
mod support;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use drain_on_drop::{ConnectionReuse, DrainBudget, DrainOnDropLayer, Reason};
use http::{Request, Response};
use http_body_util::{Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use hyper_util::service::TowerToHyperService;
use support::*;
use tower::{Service, ServiceBuilder, ServiceExt};

fn get_with_budget(uri: http::Uri, budget: DrainBudget) -> Request<Empty<Bytes>> {
    let mut req = get(uri);
    req.extensions_mut().insert(budget);
    req
}

#[tokio::test]
async fn per_request_budget_overrides_the_layer() {
    let server = RawServer::start(|_| content_length(0, MIB)).await;
    let (client, connector) = client();
    let layer = DrainOnDropLayer::new(); // 256 KiB: a 1 MiB body is skipped
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().layer(layer).service(client);

    let big = DrainBudget::new(2 * MIB as u64, SECONDS);
    for i in 0..5 {
        // From the second request on, dials are held: only the pooled
        // connection can serve it (a held dial fails after 10 s).
        connector.hold(i > 0);
        drop_unread(&mut svc, get_with_budget(server.uri("/"), big)).await;
        settle(&stats, big.max_time()).await;
    }
    connector.hold(false);
    let snap = stats.snapshot();
    assert_eq!(snap.drained, 5, "the request's 2 MiB budget drains 1 MiB bodies: {snap:?}");
    assert_eq!(connector.count(), 1, "reused: {} connections", connector.count());

    // A fresh pool, so that no idle connection from above is handed out.
    let (fresh, connector) = support::client();
    let mut svc = ServiceBuilder::new().layer(DrainOnDropLayer::new()).service(fresh);
    let stats_before = stats.snapshot();
    for _ in 0..3 {
        let req = get_with_budget(server.uri("/"), DrainBudget::disabled());
        drop_unread(&mut svc, req).await;
    }
    assert_eq!(stats.snapshot(), stats_before, "another layer, other stats");
    let svc_stats = svc.stats().snapshot();
    assert_eq!((svc_stats.count(Reason::Disabled), svc_stats.skipped), (3, 3), "{svc_stats:?}");
    assert_eq!(connector.count(), 3, "a disabled budget closes every connection");
}

/// An SSE endpoint: one event every 20 ms, forever (until a write fails).
async fn event_stream_server() -> RawServer {
    RawServer::start(|_| {
        vec![
            Step::Write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n".to_vec()),
            Step::Forever { chunk: 16, every: Duration::from_millis(20) },
        ]
    })
    .await
}

/// Reads three events, drops the stream, and returns the layer's stats
/// right after the drop and once everything ended.
async fn cancel_stream(
    layer: DrainOnDropLayer,
) -> (drain_on_drop::DrainSnapshot, drain_on_drop::DrainSnapshot, RawServer) {
    let server = event_stream_server().await;
    let (client, _) = client();
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().layer(layer).service(client);
    let res = svc.ready().await.unwrap().call(get(server.uri("/events"))).await.unwrap();
    let mut body = res.into_body();
    for _ in 0..3 {
        read_one_frame(&mut body).await.expect("an event");
    }
    drop(body);
    let after_drop = stats.snapshot();
    settle(&stats, SECONDS).await;
    wait_for("the server to see the stream closed", SLACK, || {
        server.write_failures.load(Ordering::SeqCst) == 1
    })
    .await;
    (after_drop, stats.snapshot(), server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_streams_are_closed_at_once_instead_of_burning_the_time_budget() {
    let (dropped, snap, _server) = cancel_stream(DrainOnDropLayer::new()).await;
    assert_eq!((dropped.in_flight, dropped.count(Reason::Stream)), (0, 1), "skipped in the drop, no task");
    assert_eq!((snap.count(Reason::Stream), snap.skipped, snap.bytes_drained), (1, 1, 0), "{snap:?}");

    // Turned off, the stream is drained like any body until the time budget
    // (it never ends): a drain task holds it, still running right after the
    // drop, or already given up if a busy machine ran it out of time first.
    let layer = DrainOnDropLayer::new().stream_content_types(Vec::<String>::new());
    let (dropped, snap, _server) = cancel_stream(layer).await;
    assert_eq!(
        (dropped.in_flight + dropped.count(Reason::OverTime), dropped.skipped),
        (1, 0),
        "a drain started: {dropped:?}"
    );
    assert_eq!((snap.count(Reason::OverTime), snap.abandoned), (1, 1), "{snap:?}");
}

#[tokio::test]
async fn observer_tags_every_response_with_its_connection() {
    let server = RawServer::start(|_| content_length(0, 32 * KIB)).await;
    // Seconds of time budget: every drain ends, and its connection is back.
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let stats = layer.stats();
    let counting = CountingConnector::new();
    let connector = layer.observe(counting.clone());
    let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
    let mut svc = ServiceBuilder::new().layer(layer).service(client);

    let mut seen = Vec::new();
    for i in 0..20 {
        // From the second request on, dials are held: each is served by the
        // pooled connection, which the tag must say.
        counting.hold(i > 0);
        let res = svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap();
        let conn = *res.extensions().get::<ConnectionReuse>().expect("tagged");
        seen.push(conn);
        drop(res);
    }
    counting.hold(false);
    settle(&stats, SECONDS).await;
    let snap = stats.reuse();
    assert!(!seen[0].reused && seen[0].previous_responses == 0, "the first response is on a new connection");
    let new = seen.iter().filter(|c| !c.reused).count() as u64;
    assert_eq!(snap.requests, 20, "{snap:?}");
    assert_eq!(snap.reused, 20 - new, "{snap:?}");
    assert_eq!(
        snap.connections_opened,
        server.accepted() as u64,
        "the observer counts what the server accepts"
    );
    assert_eq!((snap.connections_opened, new), (1, 1), "one connection, then only pooled ones: {snap:?}");
    assert!(seen.iter().all(|c| c.setup_time > Duration::ZERO && c.id >= 1));
}

#[tokio::test]
async fn without_observer_reuse_counters_stay_zero() {
    let server = RawServer::start(|_| content_length(0, 10)).await;
    let (client, _) = client();
    let layer = DrainOnDropLayer::new();
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().layer(layer).service(client);
    let res = svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap();
    assert!(res.extensions().get::<ConnectionReuse>().is_none());
    let snap = stats.reuse();
    assert_eq!((snap.requests, snap.reused, snap.connections_opened), (0, 0, 0), "{snap:?}");
}

/// FollowRedirect drops each 301's body to follow the Location: below it,
/// the layer drains those bodies and the redirect reuses the connection.
#[tokio::test]
async fn follow_redirect_bodies_are_drained() {
    let server = RawServer::start(|head| {
        if head.path == "/final" {
            content_length(7, 100)
        } else {
            let mut steps = chunked(1, 32 * KIB, 4 * KIB);
            steps[0] = Step::Write(
                b"HTTP/1.1 301 Moved Permanently\r\nlocation: /final\r\ntransfer-encoding: chunked\r\n\r\n"
                    .to_vec(),
            );
            steps
        }
    })
    .await;
    let run = |layer: DrainOnDropLayer| {
        let uri = server.uri("/start");
        async move {
            let (client, connector) = client();
            let mut svc = ServiceBuilder::new()
                .layer(tower_http::follow_redirect::FollowRedirectLayer::new())
                .layer(layer)
                .service(client);
            for _ in 0..20 {
                let res = svc.ready().await.unwrap().call(get(uri.clone())).await.unwrap();
                assert_eq!(res.status(), 200);
                assert_eq!(read_all(res.into_body()).await.unwrap(), body_bytes(7, 100));
            }
            connector.count()
        }
    };
    // Seconds of time budget: every 301 body is drained on any machine.
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let stats = layer.stats();
    let with_layer = run(layer).await;
    let snap = settle(&stats, SECONDS).await;
    assert_eq!(snap.drained, 20, "each 301 body was drained: {snap:?}");
    let without = run(DrainOnDropLayer::new().max_bytes(0)).await;
    println!("40 requests: {with_layer} connections with the layer, {without} without draining");
    assert!(without >= 20, "without draining each redirect costs a connection, got {without}");
    // The redirect goes out as soon as the 301 is dropped, while its drain
    // runs (1 or 2 connections on a quiet machine). Against the same run
    // without draining:
    assert_keeps_half("20 redirects followed", with_layer, without, 0);
}

/// tower-http 0.7's FollowRedirect keeps the request's extensions on the
/// redirected request: a `DrainBudget` set by the caller governs the drain
/// of every hop's response, the 301's and the final one's.
#[tokio::test]
async fn a_drain_budget_survives_a_redirect() {
    let server = RawServer::start(|head| {
        if head.path == "/final" {
            content_length(7, 64 * KIB)
        } else {
            vec![Step::Write(
                [&b"HTTP/1.1 301 Moved Permanently\r\nlocation: /final\r\ncontent-length: 4096\r\n\r\n"[..], &body_bytes(1, 4096)].concat(),
            )]
        }
    })
    .await;
    // The layer would drain both; the request's budget says never.
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let stats = layer.stats();
    let (client, _) = client();
    let mut svc = ServiceBuilder::new()
        .layer(tower_http::follow_redirect::FollowRedirectLayer::new())
        .layer(layer)
        .service(client);
    let req = get_with_budget(server.uri("/start"), DrainBudget::disabled());
    let res = svc.ready().await.unwrap().call(req).await.unwrap();
    assert_eq!(res.status(), 200);
    drop(res);
    let s = settle(&stats, SECONDS).await;
    assert_eq!(s.count(drain_on_drop::Reason::Disabled), 2, "the 301's body and the final one: {s:?}");
}

/// `len` pseudo-random bytes: they do not compress, so the gzip body on the
/// wire is as long as the data and spans many frames.
fn noise(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A hyper server behind tower-http's gzip compression, serving `noise(len)`.
async fn gzip_server(len: usize) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    accept_each(move |io| {
        let svc = ServiceBuilder::new().layer(tower_http::compression::CompressionLayer::new()).service_fn(
            move |_req: Request<hyper::body::Incoming>| async move {
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(noise(len)))))
            },
        );
        hyper::server::conn::http1::Builder::new().serve_connection(io, TowerToHyperService::new(svc))
    })
    .await
}

/// Decompression above the layer, Trace outermost: bodies read to the end
/// arrive decompressed and intact, bodies dropped early are drained as the
/// compressed bytes on the wire.
#[tokio::test]
async fn decompression_and_trace_above_the_layer() {
    let (addr, accepted) = gzip_server(200 * KIB).await;
    // The server compresses on the fly (slow in a debug build on a busy
    // machine): seconds of time budget keep this about composition.
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let stats = layer.stats();
    let (client, connector) = client();
    let mut svc = ServiceBuilder::new()
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .layer(tower_http::decompression::DecompressionLayer::new())
        .layer(layer)
        .service(client);
    let uri: http::Uri = format!("http://{addr}/").parse().unwrap();
    for i in 0..10 {
        // From the second request on, dials are held: only the pooled
        // connection can serve it (a held dial fails after 10 s).
        connector.hold(i > 0);
        let res = svc.ready().await.unwrap().call(get(uri.clone())).await.unwrap();
        if i % 2 == 0 {
            let bytes = read_all(res.into_body()).await.unwrap();
            assert!(bytes == noise(200 * KIB), "decompressed body intact");
        } else {
            let mut body = res.into_body();
            read_one_frame(&mut body).await.expect("some decompressed data");
            drop(body);
        }
    }
    connector.hold(false);
    let snap = settle(&stats, SECONDS).await;
    assert_eq!(snap.drained, 5, "the 5 dropped gzip bodies were drained: {snap:?}");
    assert_eq!((snap.failed, snap.abandoned, snap.skipped), (0, 0, 0), "{snap:?}");
    assert!(snap.bytes_drained > 5 * 100 * KIB as u64, "compressed bytes were drained: {snap:?}");
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "reused: one connection for the ten");
}
