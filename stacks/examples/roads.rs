//! The roads users take, each with the layer's round-trip-following default
//! budget, against a local server whose head comes 50 ms after the request
//! and whose last 16 KiB come 60 ms after the head (a far origin's shape:
//! a fixed 50 ms budget gives every drain up). 30 sequential requests per
//! road, 64 KiB bodies dropped unread, connections counted at the server:
//!
//! - reqwest-middleware: `ClientBuilder::new(client).with(layer.clone())`;
//! - reqwest without middleware: `layer.sending_head(..)` before
//!   `client.execute(req)`, `wrap_response` after;
//! - hyper's `client::conn::http1`, a pool of ours, origin-form requests
//!   (`/path` + `Host`): `layer.http1_sender(sender)`;
//! - hyper-util's `client::pool::cache` over `layer.http1_sender`.
//!
//! Then the same near (no delays). Each road also without the layer.
//!
//! ```text
//! cargo run -p drain-on-drop-stacks --features reqwest-middleware --example roads
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use drain_on_drop::DrainOnDropLayer;
use http::Extensions;
use http_body_util::Empty;
use hyper_util::rt::{TokioExecutor, TokioIo};
use reqwest::ResponseBuilderExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::{Service, ServiceExt};

type Error = Box<dyn std::error::Error + Send + Sync>;

const N: usize = 30;

/// A raw keep-alive server: each response's head `head_after` after its
/// request, 48 KiB with it, the last 16 KiB `tail_after` later.
async fn server(head_after: Duration, tail_after: Duration) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    buf.drain(..end);
                    tokio::time::sleep(head_after).await;
                    let mut first = b"HTTP/1.1 200 OK\r\ncontent-length: 65536\r\n\r\n".to_vec();
                    first.extend(std::iter::repeat_n(b'x', 48 * 1024));
                    if stream.write_all(&first).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(tail_after).await;
                    if stream.write_all(&[b'y'; 16 * 1024]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Road {
    ReqwestMiddleware,
    ReqwestSending,
    HyperConnPool,
    PoolCache,
}

impl Road {
    const ALL: [Road; 4] =
        [Road::ReqwestMiddleware, Road::ReqwestSending, Road::HyperConnPool, Road::PoolCache];

    fn label(self) -> &'static str {
        match self {
            Road::ReqwestMiddleware => "reqwest-middleware",
            Road::ReqwestSending => "reqwest + sending()",
            Road::HyperConnPool => "hyper conn::http1 pool, origin-form",
            Road::PoolCache => "hyper-util pool::cache, origin-form",
        }
    }
}

fn reqwest_client() -> reqwest::Client {
    // The repository's reqwest has rustls' ring provider (not aws-lc-rs);
    // with reqwest's default features, leave this line out.
    // rustls 0.23.48 deprecates ring's provider (no post-quantum key exchange); the
    // repository keeps ring so that nothing builds aws-lc-sys (a C library).
    #[allow(deprecated)]
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// reqwest without middleware: the request's head before, the drain after.
async fn send_reqwest(
    layer: &DrainOnDropLayer,
    client: &reqwest::Client,
    req: reqwest::Request,
) -> reqwest::Result<reqwest::Response> {
    let uri: http::Uri = req.url().as_str().parse().unwrap_or_default();
    let mut sending = layer.sending_head(&uri, req.headers(), &Extensions::new());
    let asked = req.url().clone();
    let res = client.execute(req).await?;
    let url = res.url().clone();
    if url != asked {
        // reqwest followed redirects: drain under the origin that answered.
        sending = sending.redirected_to(&url.as_str().parse().unwrap_or_default());
    }
    let mut res = sending.wrap_response(http::Response::from(res)).map(reqwest::Body::wrap);
    let (with_url, ()) = http::Response::builder().url(url).body(()).unwrap().into_parts();
    res.extensions_mut().extend(with_url.extensions);
    Ok(reqwest::Response::from(res))
}

/// A dial of one of hyper's own HTTP/1 connections to `addr`, as a
/// `Service` with the drain (`layer` switched off for the control).
async fn dial(
    layer: &DrainOnDropLayer,
    addr: SocketAddr,
) -> Result<drain_on_drop::Http1Sender<Empty<Bytes>>, Error> {
    let io = TokioIo::new(tokio::net::TcpStream::connect(addr).await?);
    let (sender, conn) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(conn);
    Ok(layer.http1_sender(sender))
}

/// An origin-form request, as hyper's own connections are sent.
fn origin_form(addr: SocketAddr) -> http::Request<Empty<Bytes>> {
    http::Request::get("/data").header("host", addr.to_string()).body(Empty::new()).unwrap()
}

async fn road(road: Road, layer: &DrainOnDropLayer, addr: SocketAddr) -> Result<(), Error> {
    let url = format!("http://{addr}/data");
    match road {
        Road::ReqwestMiddleware => {
            let client = reqwest_middleware::ClientBuilder::new(reqwest_client()).with(layer.clone()).build();
            for _ in 0..N {
                drop(client.get(&url).send().await?);
            }
        }
        Road::ReqwestSending => {
            let client = reqwest_client();
            for _ in 0..N {
                drop(send_reqwest(layer, &client, client.get(&url).build()?).await?);
            }
        }
        Road::HyperConnPool => {
            // The simplest pool: the first connection ready to send, or a new one.
            let mut pool: Vec<drain_on_drop::Http1Sender<Empty<Bytes>>> = Vec::new();
            for _ in 0..N {
                let ready = pool.iter().position(|s| s.get_ref().is_ready());
                let sender = match ready {
                    Some(i) => &mut pool[i],
                    None => {
                        pool.push(dial(layer, addr).await?);
                        pool.last_mut().unwrap()
                    }
                };
                drop(sender.ready().await?.call(origin_form(addr)).await?);
                pool.retain(|s| !s.get_ref().is_closed());
            }
        }
        Road::PoolCache => {
            let make = tower::service_fn({
                let layer = layer.clone();
                // Boxed: the cache wants an `Unpin` future.
                move |_dst: http::Uri| {
                    let layer = layer.clone();
                    Box::pin(async move { dial(&layer, addr).await })
                }
            });
            let mut cache =
                hyper_util::client::pool::cache::builder().executor(TokioExecutor::new()).build(make);
            let dst: http::Uri = format!("http://{addr}/").parse()?;
            for _ in 0..N {
                // A connection hyper closed (a body dropped without the
                // drain) may still be in the cache: it fails `ready`, and is
                // thrown out; the cache dials a new one.
                loop {
                    cache.retain(|sender| !sender.get_ref().is_closed());
                    let mut conn = cache.ready().await?.call(dst.clone()).await?;
                    match conn.ready().await {
                        Ok(sender) => {
                            drop(sender.call(origin_form(addr)).await?);
                            break; // `conn` goes back to the cache
                        }
                        // Closed: `retain` throws it out on the next turn.
                        Err(_) => continue,
                    }
                }
            }
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let (far_head, far_tail) = (Duration::from_millis(50), Duration::from_millis(60));
    println!(
        "{N} sequential requests per road, 64 KiB bodies dropped unread, connections counted at the server \
         (without the layer / with DrainOnDropLayer::new())"
    );
    for (name, head, tail) in [("far", far_head, far_tail), ("near", Duration::ZERO, Duration::ZERO)] {
        println!(
            "{name}: head {} ms after the request, last 16 KiB {} ms after the head",
            head.as_millis(),
            tail.as_millis()
        );
        for r in Road::ALL {
            let mut counts = Vec::new();
            let mut shown = String::new();
            for layer in [DrainOnDropLayer::new().enabled(false), DrainOnDropLayer::new()] {
                let (addr, accepted) = server(head, tail).await;
                road(r, &layer, addr).await?;
                let stats = layer.stats();
                stats.wait_idle(Duration::from_secs(5)).await;
                counts.push(accepted.load(Ordering::SeqCst));
                if layer.origins().is_empty() {
                    shown = "no origin".to_string();
                }
                for o in layer.origins() {
                    let rtt =
                        o.round_trip.map_or("-".to_string(), |d| format!("{:.0} ms", d.as_secs_f64() * 1e3));
                    let budget =
                        o.budget.map_or("-".to_string(), |b| format!("{} ms", b.max_time().as_millis()));
                    let s = stats.snapshot();
                    shown = format!(
                        "origin {}, round trip {rtt}, time budget {budget}; {} drained, {} abandoned",
                        o.origin, s.drained, s.abandoned
                    );
                }
            }
            println!("  {:<38} {:>3} / {:<3} connections; {shown}", r.label(), counts[0], counts[1]);
        }
    }
    Ok(())
}
