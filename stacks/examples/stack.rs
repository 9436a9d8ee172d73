//! The recommended tower stack around hyper-util's client, on a built-in
//! local server that redirects, fails with 503s and compresses:
//!
//! ```text
//! Trace → OnEarlyDrop → Timeout → FollowRedirect → Retry → Decompression
//!       → DrainOnDrop → ResponseBodyDeadline → Client
//! ```
//!
//! tower-http 0.7's early-drop hook goes above the drain (below it, the
//! drain reads every body to its end and the hook never fires); its
//! response body deadline below it, to bound the body the caller reads.
//!
//! `cargo run --example stack` (set `RUST_LOG=drain_on_drop=debug` to see
//! one event per early drop).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use drain_on_drop::{ConnectionReuse, DrainOnDropLayer};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tower::retry::Policy;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_http::compression::CompressionLayer;
use tower_http::decompression::DecompressionLayer;
use tower_http::follow_redirect::FollowRedirectLayer;
use tower_http::on_early_drop::{OnBodyDropFn, OnEarlyDropLayer};
use tower_http::timeout::ResponseBodyDeadlineLayer;
use tower_http::trace::TraceLayer;

type Error = Box<dyn std::error::Error + Send + Sync>;

// The README's "Where it goes in a stack" shows this policy and the stack
// in `main` line for line; `.ci/readme.sh` checks that they are the same.

/// Retries a 503 answer to an idempotent request, at most `.0` times.
#[derive(Clone)]
struct Retry503(usize);

impl<B: Clone, R, E> Policy<Request<B>, Response<R>, E> for Retry503 {
    type Future = std::future::Ready<()>;

    fn retry(&mut self, req: &mut Request<B>, res: &mut Result<Response<R>, E>) -> Option<Self::Future> {
        let unavailable = matches!(res, Ok(res) if res.status() == StatusCode::SERVICE_UNAVAILABLE);
        if !unavailable || !req.method().is_idempotent() || self.0 == 0 {
            return None;
        }
        self.0 -= 1;
        Some(std::future::ready(()))
    }

    // `http::Request` is not `Clone`: a copy of its head (extensions too) and body.
    fn clone_request(&mut self, req: &Request<B>) -> Option<Request<B>> {
        let mut copy = Request::new(req.body().clone());
        *copy.method_mut() = req.method().clone();
        *copy.uri_mut() = req.uri().clone();
        *copy.version_mut() = req.version();
        *copy.headers_mut() = req.headers().clone();
        *copy.extensions_mut() = req.extensions().clone();
        Some(copy)
    }
}

/// `/old` redirects to `/data` with a 20 KiB page; every other `/data`
/// request fails with a 20 KiB 503 page first; responses are gzip-compressed.
async fn local_server() -> Result<String, Error> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let served = Arc::new(AtomicU64::new(0));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let served = served.clone();
            let handler = tower::service_fn(move |req: Request<hyper::body::Incoming>| {
                let n = served.fetch_add(1, Ordering::Relaxed);
                async move {
                    let page = |status: StatusCode, text: &str| {
                        let mut res =
                            Response::new(Full::new(Bytes::from(text.repeat(20 * 1024 / text.len()))));
                        *res.status_mut() = status;
                        res
                    };
                    let res = match req.uri().path() {
                        "/old" => {
                            let mut res = page(StatusCode::MOVED_PERMANENTLY, "moved ");
                            res.headers_mut().insert(http::header::LOCATION, "/data".parse().unwrap());
                            res
                        }
                        _ if n % 2 == 1 => page(StatusCode::SERVICE_UNAVAILABLE, "busy "),
                        _ => page(StatusCode::OK, "{\"ok\":true}"),
                    };
                    Ok::<_, Infallible>(res)
                }
            });
            let svc = ServiceBuilder::new().layer(CompressionLayer::new()).service(handler);
            let io = TokioIo::new(stream);
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, TowerToHyperService::new(svc)),
            );
        }
    });
    Ok(format!("http://{addr}"))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    let base = local_server().await?;

    let drain = DrainOnDropLayer::new();
    let stats = drain.stats(); // the counters, kept before the layer moves into the stack
    let connector = drain.observe(HttpConnector::new());
    let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
    let early_drops = Arc::new(AtomicU64::new(0));
    let seen = early_drops.clone();
    let on_early_drop = OnBodyDropFn::new(move |_: &Request<Empty<Bytes>>| {
        let seen = seen.clone();
        move |_: &http::response::Parts| {
            move || {
                seen.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    let mut svc = ServiceBuilder::new()
        .layer(TraceLayer::new_for_http()) // outermost: one span per logical request
        .layer(OnEarlyDropLayer::builder().on_body_drop(on_early_drop)) // the caller's early drops
        .timeout(Duration::from_secs(5)) // bounds the wait for the final response head
        .layer(FollowRedirectLayer::new()) // drops 3xx bodies: drained below
        .retry(Retry503(2)) // drops the 503s it retries: drained below
        .layer(DecompressionLayer::new()) // above the drain: budgets count wire bytes
        .layer(drain) // innermost but for what bounds the body itself
        .layer(ResponseBodyDeadlineLayer::new(Duration::from_secs(30))) // bounds the body the caller reads
        .service(client);

    for i in 0..10 {
        let req = Request::get(format!("{base}/old")).body(Empty::new())?;
        let res = svc.ready().await?.call(req).await?;
        let reused = res.extensions().get::<ConnectionReuse>().is_some_and(|c| c.reused);
        let status = res.status();
        // Read half the requests to the end; drop the others after the head.
        let read = if i % 2 == 0 { res.into_body().collect().await?.to_bytes().len() } else { 0 };
        println!("request {i}: {status}, {read} bytes read, final hop on a reused connection: {reused}");
    }
    // Let the last drain end (each is bounded by its `max_time`) before reporting.
    stats.wait_idle(Duration::from_secs(2)).await;
    let (s, r) = (stats.snapshot(), stats.reuse());
    println!(
        "{} HTTP requests on {} connections; early drops: {} drained, {} abandoned, {} skipped, {} failed; \
         the caller dropped {} bodies early",
        r.requests,
        r.connections_opened,
        s.drained,
        s.abandoned,
        s.skipped,
        s.failed,
        early_drops.load(Ordering::Relaxed)
    );
    Ok(())
}
