//! HTTP/2's idle close: a server closes a connection idle for its timeout
//! gracefully (GOAWAY NO_ERROR, then the connection once its streams are
//! done), and a request sent as it does is refused unprocessed (a stream
//! above the GOAWAY's last stream id, or opened after the GOAWAY arrived).
//! The README's HTTP/2 stack sends such a request again (`RetryRefused`),
//! GET or POST; hyper-util alone fails it. Node 20's own server
//! (`tests/node/h2server.js --idle-timeout`), h2c.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, Http2Connector, RetryRefusedLayer};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use support::NodeH2;
use tower::util::BoxCloneService;
use tower::{Service, ServiceBuilder, ServiceExt};

type Svc = BoxCloneService<http::Request<Empty<Bytes>>, http::Response<BoxBody>, Error>;
type BoxBody = http_body_util::combinators::UnsyncBoxBody<Bytes, hyper::Error>;
type Error = Box<dyn std::error::Error + Send + Sync>;

/// Node closes a session idle this long.
const IDLE: Duration = Duration::from_millis(300);
/// Trials per method and client, each sending its second request at the
/// idle close + an offset from -7 to +7 ms.
const TRIALS: usize = 15;

/// The README's HTTP/2 stack over h2c, on a fresh client.
fn stack() -> Svc {
    let layer = DrainOnDropLayer::new();
    let connector = Http2Connector::new(layer.observe(HttpConnector::new()));
    let client = Client::builder(TokioExecutor::new()).http2_only(true).build::<_, Empty<Bytes>>(connector);
    let svc = ServiceBuilder::new().layer(RetryRefusedLayer::new()).layer(layer).service(client);
    BoxCloneService::new(
        svc.map_response(|res| res.map(|b| b.boxed_unsync())).map_err(|e| Box::new(e) as Error),
    )
}

/// hyper-util alone over h2c, on a fresh client.
fn alone() -> Svc {
    let client = Client::builder(TokioExecutor::new()).http2_only(true).build_http::<Empty<Bytes>>();
    BoxCloneService::new(
        client.map_response(|res| res.map(|b| b.boxed_unsync())).map_err(|e| Box::new(e) as Error),
    )
}

async fn send(svc: &mut Svc, method: &http::Method, uri: http::Uri) -> Result<(), String> {
    let req = http::Request::builder().method(method.clone()).uri(uri).body(Empty::new()).unwrap();
    let res = svc.ready().await.map_err(|e| e.to_string())?.call(req).await.map_err(|e| format!("{e:?}"))?;
    res.into_body().collect().await.map(|_| ()).map_err(|e| format!("body: {e:?}"))
}

/// One trial: a request, read to its end, then `method` at the server's
/// idle close + `offset_us`.
async fn trial(mut svc: Svc, uri: http::Uri, method: http::Method, offset_us: i64) -> Result<(), String> {
    send(&mut svc, &http::Method::GET, uri.clone()).await?;
    let done = Instant::now();
    let at = if offset_us >= 0 {
        done + IDLE + Duration::from_micros(offset_us as u64)
    } else {
        done + IDLE - Duration::from_micros(offset_us.unsigned_abs())
    };
    tokio::time::sleep_until((at - Duration::from_millis(3)).into()).await;
    while Instant::now() < at {
        std::hint::spin_loop();
    }
    send(&mut svc, &method, uri).await
}

/// `TRIALS` trials per method on fresh clients of `client`, staggered;
/// the failures.
async fn sweep(node: &NodeH2, client: fn() -> Svc) -> Vec<String> {
    let mut handles = Vec::new();
    for (m, method) in [http::Method::GET, http::Method::POST].into_iter().enumerate() {
        for i in 0..TRIALS {
            let (svc, uri, method) = (client(), node.uri("/small"), method.clone());
            let offset_us = -7000 + 1000 * i as i64;
            let stagger = Duration::from_millis(40 * (2 * i + m) as u64);
            handles.push(tokio::spawn(async move {
                tokio::time::sleep(stagger).await;
                trial(svc, uri, method.clone(), offset_us)
                    .await
                    .err()
                    .map(|e| format!("{method} {offset_us} us: {e}"))
            }));
        }
    }
    let mut failed = Vec::new();
    for h in handles {
        failed.extend(h.await.unwrap());
    }
    failed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_request_sent_as_the_server_closes_an_idle_connection_is_lost_through_the_readme_stack() {
    let node = NodeH2::start(&["--idle-timeout", &IDLE.as_millis().to_string()]);
    let stack_failed = sweep(&node, stack).await;
    let alone_failed = sweep(&node, alone).await;
    let stats = node.stats().await;
    println!(
        "Node {IDLE:?} idle timeout, {} idle closes; README stack: {} of {} failed {stack_failed:?}; hyper-util alone: {} failed {alone_failed:?}",
        stats.idle_closes,
        stack_failed.len(),
        2 * TRIALS,
        alone_failed.len()
    );
    // Every first request's session idled out before or as its second came:
    // the sweep met the close.
    assert!(stats.idle_closes >= TRIALS as u64, "Node closed the trials' idle sessions: {stats:?}");
    assert!(
        stack_failed.is_empty(),
        "the README stack sends again what the idle close refused: {stack_failed:#?}"
    );
}
