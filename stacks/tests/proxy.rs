//! An axum reverse proxy in front of hyper-util's pooled client, as in
//! `stacks/examples/proxy.rs`: downstream clients that hang up mid-body cost the
//! proxy its upstream connection, unless `DrainOnDropLayer` drains the rest of
//! the upstream body. Connections are counted where they are accepted, at the
//! upstream server.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, Uri, Version};
use axum::response::Response;
use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, DrainStats};
use http_body_util::Channel;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::{Service, ServiceBuilder, ServiceExt};

/// Downstream requests per run.
const REQUESTS: usize = 20;
/// Each upstream body: 16 chunks of 4 KiB, chunked.
const CHUNK: usize = 4 * 1024;
const CHUNKS: usize = 16;
/// Bound on every wait for a condition.
const DEADLINE: Duration = Duration::from_secs(10);

/// An HTTP/1.1 upstream on `127.0.0.1:0`. Each response sends its first chunk,
/// then waits for a `go` permit (the downstream client has hung up) before
/// sending the other 15: the hang-up always happens mid-body, whatever the
/// machine's speed.
struct Upstream {
    url: String,
    accepted: Arc<AtomicUsize>,
    /// Responses whose body task ended: every chunk handed to hyper, or the
    /// proxy gone.
    finished: Arc<AtomicUsize>,
    go: Arc<Semaphore>,
}

impl Upstream {
    async fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (accepted, finished, go) =
            (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(Semaphore::new(0)));
        let (a, f, g) = (accepted.clone(), finished.clone(), go.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                // Without it, Nagle's algorithm holds the first chunk of a
                // response on a reused connection for a delayed ACK (40 ms).
                stream.set_nodelay(true).unwrap();
                let (f, g) = (f.clone(), g.clone());
                let service = hyper::service::service_fn(move |_req| {
                    let (f, g) = (f.clone(), g.clone());
                    async move {
                        let (mut tx, body) = Channel::<Bytes, Infallible>::new(1);
                        tokio::spawn(async move {
                            let chunk = Bytes::from(vec![b'x'; CHUNK]);
                            if tx.send_data(chunk.clone()).await.is_ok()
                                && let Ok(Ok(permit)) = tokio::time::timeout(DEADLINE, g.acquire()).await
                            {
                                permit.forget();
                                for _ in 1..CHUNKS {
                                    if tx.send_data(chunk.clone()).await.is_err() {
                                        break;
                                    }
                                }
                            }
                            drop(tx);
                            f.fetch_add(1, Ordering::SeqCst);
                        });
                        Ok::<_, Infallible>(http::Response::new(body))
                    }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service);
                tokio::spawn(conn);
            }
        });
        Upstream { url, accepted, finished, go }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn finished(&self) -> usize {
        self.finished.load(Ordering::SeqCst)
    }
}

/// The proxy of `stacks/examples/proxy.rs`, generic over the upstream client so that
/// the same code runs with and without the layer (and without the hop-by-hop
/// header filtering: these clients send none).
#[derive(Clone)]
struct Proxy<S> {
    client: S,
    upstream: String,
}

async fn forward<S, B>(State(proxy): State<Proxy<S>>, mut req: Request) -> Result<Response, StatusCode>
where
    S: Service<Request, Response = http::Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    *req.uri_mut() =
        format!("{}{path}", proxy.upstream).parse::<Uri>().map_err(|_| StatusCode::BAD_REQUEST)?;
    *req.version_mut() = Version::HTTP_11;
    let res = proxy.client.oneshot(req).await.map_err(|_| StatusCode::BAD_GATEWAY)?;
    Ok(res.map(Body::new))
}

/// Serves `client` as a proxy to `upstream` on `127.0.0.1:0`.
async fn start_proxy<S, B>(upstream: &Upstream, client: S) -> SocketAddr
where
    S: Service<Request, Response = http::Response<B>> + Clone + Send + Sync + 'static,
    S::Future: Send,
    S::Error: std::fmt::Debug,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    let app =
        Router::new().fallback(forward::<S, B>).with_state(Proxy { client, upstream: upstream.url.clone() });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// One downstream client: sends a GET through the proxy, reads the head and
/// some of the body, then closes its TCP connection. Returns the status line.
async fn hang_up_mid_body(proxy: SocketAddr) -> String {
    let exchange = async {
        let mut stream = TcpStream::connect(proxy).await.unwrap();
        stream.write_all(b"GET /export HTTP/1.1\r\nHost: proxy.test\r\n\r\n").await.unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "the proxy closed before sending any body: {:?}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buf[..n]);
            if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n")
                && seen.len() > end + 4
            {
                break;
            }
        }
        // Dropping the stream closes the connection: the hang-up.
        String::from_utf8_lossy(&seen[..seen.iter().position(|&b| b == b'\r').unwrap()]).into_owned()
    };
    tokio::time::timeout(DEADLINE, exchange).await.expect("a downstream exchange should take well under 10 s")
}

/// Polls `done` every millisecond until it holds; panics with `what` past
/// [`DEADLINE`].
async fn wait_until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < DEADLINE, "timed out after {DEADLINE:?} waiting until {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn early_drops(stats: &DrainStats) -> u64 {
    let s = stats.snapshot();
    s.drained + s.abandoned + s.skipped + s.failed
}

/// `REQUESTS` downstream hang-ups through the proxy; returns the upstream's
/// accepted connections. Between requests, waits until the upstream sent its
/// whole response (or saw the proxy go) and, with `stats`, until the proxy's
/// early drop was counted and its drain ended.
async fn run(upstream: &Upstream, proxy: SocketAddr, stats: Option<&DrainStats>) -> usize {
    for i in 1..=REQUESTS {
        let status = hang_up_mid_body(proxy).await;
        assert_eq!(status, "HTTP/1.1 200 OK", "request {i} through the proxy");
        upstream.go.add_permits(1);
        wait_until(&format!("the upstream ended response {i}"), || upstream.finished() >= i).await;
        if let Some(stats) = stats {
            wait_until(&format!("the proxy counted early drop {i} and its drain ended"), || {
                early_drops(stats) >= i as u64 && stats.snapshot().in_flight == 0
            })
            .await;
        }
    }
    upstream.accepted()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downstream_hang_ups_keep_upstream_connections_with_the_layer() {
    let upstream = Upstream::start().await;
    // Seconds of time budget: this test is about reuse, not about budgets,
    // and a loaded machine must not turn a drain into an abandon.
    let layer = DrainOnDropLayer::new().max_time(support::SECONDS);
    let stats = layer.stats();
    let client = Client::builder(TokioExecutor::new()).build_http::<Body>();
    let client = ServiceBuilder::new().layer(layer).service(client);
    let proxy = start_proxy(&upstream, client).await;

    let connections = run(&upstream, proxy, Some(&stats)).await;
    let s = stats.snapshot();
    eprintln!("with the layer: {REQUESTS} downstream hang-ups, {connections} upstream connections, {s:?}");
    assert_eq!(
        s.drained, REQUESTS as u64,
        "every hang-up should leave a body to drain, and each drain should reach its end: {s:?}"
    );
    assert!(
        s.bytes_drained >= (REQUESTS * CHUNK * (CHUNKS - 1)) as u64 / 2,
        "the drains should have read most of the 15 chunks each body had left: {s:?}"
    );
    // The control, in the same run: the same hang-ups through a proxy without
    // the layer. Each request waits for the previous drain, so what is left
    // is hyper-util's checkout race with the connection's way back to the
    // pool (1 to 3 connections on a quiet machine).
    let upstream = Upstream::start().await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Body>();
    let without = run(&upstream, start_proxy(&upstream, client).await, None).await;
    eprintln!("without the layer: {without} upstream connections");
    support::assert_keeps_half(
        &format!("{REQUESTS} downstream hang-ups through the proxy"),
        connections,
        without,
        0,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downstream_hang_ups_cost_an_upstream_connection_each_without_the_layer() {
    let upstream = Upstream::start().await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Body>();
    let proxy = start_proxy(&upstream, client).await;

    let connections = run(&upstream, proxy, None).await;
    eprintln!("without the layer: {REQUESTS} downstream hang-ups, {connections} upstream connections");
    assert!(
        connections >= REQUESTS - 2,
        "without the layer each hang-up should close its upstream connection (about {REQUESTS}), but the upstream accepted only {connections}"
    );
}
