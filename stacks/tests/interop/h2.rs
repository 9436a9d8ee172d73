//! nginx over HTTP/2 (h2c): every connection ends with a graceful GOAWAY
//! (NO_ERROR) after `keepalive_requests` (100 here) requests. The requests a
//! client sent past the GOAWAY's last stream id were never processed:
//! hyper-util's client fails them, the README's HTTP/2 stack
//! (`RetryRefusedLayer` above the layer, over `Http2Connector`) sends them
//! again on a new connection.

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, Http2Connector, Reason, RetryRefusedLayer};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tower::ServiceBuilder;

use crate::servers::Server;
use crate::support::{H2Run, SLACK, h2_traffic, settle};

/// Requests per run: 20 of nginx's GOAWAYs.
pub(crate) const REQUESTS: usize = 2_000;
const CALLERS: usize = 16;

fn h2_client() -> Client<HttpConnector, Empty<Bytes>> {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    Client::builder(TokioExecutor::new()).http2_only(true).build(http)
}

/// What one run saw: the run, and the connections the client opened.
pub(crate) struct GoawayRun {
    pub(crate) alone: H2Run,
    pub(crate) stack: H2Run,
    pub(crate) stack_connections: u64,
}

/// 16 callers send [`REQUESTS`] GETs of a 256 KiB file, each dropped after
/// its head: once with hyper-util alone, once through the README's stack.
pub(crate) async fn graceful_goaway(server: &Server) -> GoawayRun {
    let uri = server.h2_uri("/static/256k.bin");
    let alone = h2_traffic(h2_client(), uri.clone(), CALLERS, REQUESTS, false).await;
    let layer = DrainOnDropLayer::new();
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    let connector = Http2Connector::new(layer.observe(http));
    let client = Client::builder(TokioExecutor::new()).http2_only(true).build(connector);
    let svc = ServiceBuilder::new().layer(RetryRefusedLayer::new()).layer(layer.clone()).service(client);
    let stack = h2_traffic(svc, uri, CALLERS, REQUESTS, false).await;
    let s = settle(&layer.stats(), SLACK).await;
    assert_eq!(
        s.count(Reason::Reset),
        (REQUESTS - stack.failed) as u64,
        "each drop reset, counted once: {s:?}"
    );
    GoawayRun { alone, stack, stack_connections: layer.stats().reuse().connections_opened }
}
