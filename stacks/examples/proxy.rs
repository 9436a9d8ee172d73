//! An axum reverse proxy whose upstream client is hyper-util's pooled client
//! under `DrainOnDropLayer`.
//!
//! ```text
//! cargo run --example proxy
//! ```
//!
//! A proxy streams each upstream body downstream as it arrives. When a
//! downstream client hangs up mid-body, axum drops the response, and with it
//! the upstream body: without draining, hyper-util closes the upstream
//! connection and the next request opens a new one. With the layer, the rest of
//! the upstream body is drained in the background and the connection goes back
//! to the pool.
//!
//! The example starts a slow upstream (64 KiB per response, 4 KiB a
//! millisecond) and the proxy, both on `127.0.0.1:0`, then sends requests whose
//! clients read the first 4 KiB and hang up; it does that with the default
//! layer and with draining switched off (`enabled(false)`, as hyper-util alone), and
//! prints how many connections the upstream accepted. The proxy itself is
//! `proxy`, `forward` and `remove_hop_by_hop` below.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, StatusCode, Uri, Version, header};
use axum::response::Response;
use bytes::Bytes;
use drain_on_drop::{DrainOnDrop, DrainOnDropLayer, DrainStats};
use http_body_util::{BodyExt, Channel, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tower::{ServiceBuilder, ServiceExt};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The proxy's state: the upstream client under the layer, and where to send.
#[derive(Clone)]
struct Proxy {
    client: DrainOnDrop<Client<HttpConnector, Body>>,
    /// Scheme and authority of the upstream, such as `http://127.0.0.1:8080`.
    upstream: String,
}

/// An axum app that forwards every request, whatever its path, to `upstream`.
fn proxy(upstream: String, layer: DrainOnDropLayer) -> Router {
    let mut http = HttpConnector::new();
    http.set_nodelay(true); // a request's head and body go out without waiting for ACKs
    let client = Client::builder(TokioExecutor::new()).build(http);
    let client = ServiceBuilder::new().layer(layer).service(client);
    Router::new().fallback(forward).with_state(Proxy { client, upstream })
}

/// Forwards one request and streams the upstream response back.
async fn forward(State(proxy): State<Proxy>, mut req: Request) -> Result<Response, StatusCode> {
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    *req.uri_mut() =
        format!("{}{path}", proxy.upstream).parse::<Uri>().map_err(|_| StatusCode::BAD_REQUEST)?;
    // The upstream connection is HTTP/1.1 with keep-alive, whatever the
    // downstream one is. `Host` is forwarded as the client sent it.
    *req.version_mut() = Version::HTTP_11;
    remove_hop_by_hop(req.headers_mut());

    let mut res = proxy.client.oneshot(req).await.map_err(|_| StatusCode::BAD_GATEWAY)?;
    remove_hop_by_hop(res.headers_mut());
    // The body is a `DrainBody<Incoming>`: streamed downstream frame by frame;
    // if the downstream client hangs up, axum drops it and the layer drains
    // the rest so that the upstream connection is pooled.
    Ok(res.map(Body::new))
}

/// Removes the headers that describe one connection rather than the message
/// (RFC 9110, section 7.6.1). Forwarded, a client's `Connection: close` would
/// make the upstream connection single-use too.
fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::try_from(name.trim()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        HeaderName::from_static("keep-alive"),
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
}

/// A slow upstream on `127.0.0.1:0`: 64 KiB chunked, 4 KiB a millisecond.
/// Returns its URL and its count of accepted connections.
async fn slow_upstream() -> Result<(String, Arc<AtomicUsize>), Error> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::Relaxed);
            // Without it, Nagle's algorithm holds the first chunk of a response
            // on a reused connection for a delayed ACK (40 ms on Linux).
            let _ = stream.set_nodelay(true);
            let service = hyper::service::service_fn(|_req| async {
                let (mut tx, body) = Channel::<Bytes, Infallible>::new(1);
                tokio::spawn(async move {
                    for _ in 0..16 {
                        if tx.send_data(Bytes::from(vec![b'x'; 4096])).await.is_err() {
                            return; // the proxy dropped the body
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                });
                Ok::<_, Infallible>(http::Response::new(body))
            });
            let conn =
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::spawn(conn);
        }
    });
    Ok((url, accepted))
}

/// Waits until every early drop so far has been dealt with, for at most 1 s.
async fn wait_for_drains(stats: &DrainStats, early_drops: u64) {
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        let s = stats.snapshot();
        if s.drained + s.abandoned + s.skipped + s.failed >= early_drops && s.in_flight == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Runs `n` downstream requests that hang up after the first frame.
async fn run(label: &str, layer: DrainOnDropLayer, n: u64) -> Result<(), Error> {
    let (upstream, accepted) = slow_upstream().await?;
    let stats = layer.stats();
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr: SocketAddr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, proxy(upstream, layer)).await });

    println!("{label}");
    let downstream = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    for i in 1..=n {
        let res = downstream.get(format!("http://{addr}/export").parse()?).await?;
        let status = res.status();
        let mut body = res.into_body();
        let first = body.frame().await.transpose()?.and_then(|f| f.into_data().ok()).map_or(0, |d| d.len());
        drop(body); // hang up mid-body: the downstream connection is closed
        wait_for_drains(&stats, i).await;
        println!(
            "  request {i}: {status}, read {first} bytes and hung up; upstream connections so far: {}",
            accepted.load(Ordering::Relaxed)
        );
    }
    let s = stats.snapshot();
    println!(
        "  {n} hang-ups: {} drained, {} abandoned, {} skipped, {} failed; {} KiB drained; {} upstream connections",
        s.drained,
        s.abandoned,
        s.skipped,
        s.failed,
        s.bytes_drained / 1024,
        accepted.load(Ordering::Relaxed)
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    run(
        "with DrainOnDropLayer::new() (defaults: 256 KiB; time budget six round trips of the origin, 50 ms to 1 s):",
        DrainOnDropLayer::new(),
        5,
    )
    .await?;
    run(
        "with draining switched off (enabled(false), as hyper-util alone):",
        DrainOnDropLayer::new().enabled(false),
        5,
    )
    .await?;
    Ok(())
}
