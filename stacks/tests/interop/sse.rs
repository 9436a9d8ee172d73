//! A Node SSE stream (one event every 20 ms, never ends) cancelled after three
//! events, with hyper-util alone, with the layer's defaults (streams are
//! closed at once), and with the layer told to drain streams too.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, DrainSnapshot};
use http::header::CONTENT_TYPE;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty};
use tower::{Service, ServiceBuilder, ServiceExt};

use crate::cells::{outcomes, runs, settle, spread};
use crate::servers::Server;
use crate::support;

/// Cancelled streams per client: each costs about 60 ms of events.
pub(crate) const STREAMS: usize = 20;
const EVENTS: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SseClient {
    Alone,
    /// `DrainOnDropLayer::new()`: `text/event-stream` is closed, not drained.
    Layer,
    /// `stream_content_types` emptied: the stream is drained for `max_time`.
    LayerDrainingStreams,
}

pub(crate) struct SseRun {
    pub(crate) connections: u64,
    pub(crate) snapshot: Option<DrainSnapshot>,
    pub(crate) per_stream: Duration,
}

/// Runs `STREAMS` cancelled streams with one client; returns what it cost.
pub(crate) async fn run(server: &Server, which: SseClient) -> SseRun {
    let before = server.counts().await;
    let (client, connector) = support::client();
    let start = Instant::now();
    let snapshot = match which {
        SseClient::Alone => {
            streams(client, server).await;
            None
        }
        SseClient::Layer | SseClient::LayerDrainingStreams => {
            let mut layer = DrainOnDropLayer::new();
            if which == SseClient::LayerDrainingStreams {
                layer = layer.stream_content_types(Vec::<String>::new());
            }
            let stats = layer.stats();
            streams(ServiceBuilder::new().layer(layer).service(client), server).await;
            assert!(
                stats.wait_idle(Duration::from_secs(5)).await,
                "the layer's drains should end: {stats:?}"
            );
            Some(stats.snapshot())
        }
    };
    let per_stream = start.elapsed() / STREAMS as u32;
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.stat("sse_active").await > 0 {
        assert!(
            Instant::now() < deadline,
            "{which:?}: the server sees every cancelled stream closed within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let counts = settle(server, before, &connector, STREAMS as u64).await;
    SseRun { connections: counts.accepted, snapshot, per_stream }
}

/// Opens `STREAMS` streams one after the other; reads `EVENTS` events of
/// each, then drops the body.
async fn streams<S, B>(mut svc: S, server: &Server)
where
    S: Service<Request<Empty<Bytes>>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Debug,
{
    for i in 0..STREAMS {
        let req = support::get(server.uri(&format!("/sse?i={i}")));
        let res = svc.ready().await.expect("client ready").call(req).await.expect("SSE response");
        assert_eq!(
            res.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()),
            Some("text/event-stream"),
            "stream {i}: an event stream"
        );
        let mut body = res.into_body();
        let mut text = Vec::new();
        while text.windows(2).filter(|w| w == b"\n\n").count() < EVENTS {
            let frame = body.frame().await.expect("the stream never ends").expect("frame");
            if let Ok(data) = frame.into_data() {
                text.extend_from_slice(&data);
            }
        }
        drop(body);
    }
}

/// Runs the three clients `runs()` times, prints the table, and returns the
/// runs per client.
pub(crate) async fn table(server: &Server) -> Vec<(SseClient, Vec<SseRun>)> {
    let clients = [SseClient::Alone, SseClient::Layer, SseClient::LayerDrainingStreams];
    let mut all: Vec<(SseClient, Vec<SseRun>)> = clients.iter().map(|&c| (c, Vec::new())).collect();
    for _ in 0..runs() {
        for (client, runs) in &mut all {
            runs.push(run(server, *client).await);
        }
    }
    let mut out = format!(
        "\n{} ({}) SSE, an event every 20 ms, {STREAMS} streams each cancelled after {EVENTS} events, {} run(s):\n\
         | client | new connections | outcomes (last run) | bytes drained per stream | time per stream |\n|---|---|---|---|---|\n",
        server.name,
        server.version,
        runs()
    );
    for (client, runs) in &all {
        let last = runs.last().unwrap();
        let conns: Vec<u64> = runs.iter().map(|r| r.connections).collect();
        let (outcome, drained) = last.snapshot.as_ref().map_or((String::new(), String::new()), |s| {
            (outcomes(s), format!("{}", s.bytes_drained / STREAMS as u64))
        });
        writeln!(out, "| {client:?} | {} | {outcome} | {drained} | {:?} |", spread(&conns), last.per_stream)
            .unwrap();
    }
    println!("{out}");
    all
}
