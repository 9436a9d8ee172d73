//! reqwest with the drain: reqwest hides its hyper stack, so the layer
//! cannot go around its client; `DrainOnDropLayer::wrap_response` puts the
//! drain on each response instead, and the response goes back to being a
//! `reqwest::Response` (`.text()`, `.json()`, `error_for_status()` keep
//! working).
//!
//! ```text
//! cargo run --example reqwest
//! ```

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use drain_on_drop::DrainOnDropLayer;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use reqwest::ResponseBuilderExt;

/// Sends `req` with reqwest and returns its response with the drain on its
/// body: dropped before its end, the body is drained in the background and
/// reqwest's pool keeps the connection.
pub async fn send(
    layer: &DrainOnDropLayer,
    req: reqwest::RequestBuilder,
) -> reqwest::Result<reqwest::Response> {
    let res = req.send().await?;
    let url = res.url().clone();
    let mut res = layer.wrap_response(http::Response::from(res)).map(reqwest::Body::wrap);
    // The conversion back reads `Response::url()` from the extensions.
    let (with_url, ()) = http::Response::builder().url(url).body(()).expect("an empty response").into_parts();
    res.extensions_mut().extend(with_url.extensions);
    Ok(reqwest::Response::from(res))
}

/// Sends `req` with reqwest, the drain on the wire body and tower-http's
/// decompression above it: for a client built without reqwest's own
/// decompression (`.no_gzip()`, `.no_brotli()`, ...), so that the drain reads
/// compressed bytes (budgets and counts are wire bytes, and a body declared
/// over the budget is skipped unread) while the caller still reads the
/// decoded body.
pub async fn send_decoded_above(
    layer: &DrainOnDropLayer,
    client: &reqwest::Client,
    req: http::Request<reqwest::Body>,
) -> Result<reqwest::Response, tower::BoxError> {
    use tower::{ServiceBuilder, ServiceExt};
    let url = req.uri().to_string();
    let send = tower::service_fn(|req: http::Request<reqwest::Body>| async {
        let res = client.execute(reqwest::Request::try_from(req)?).await?;
        Ok::<_, reqwest::Error>(layer.wrap_response(http::Response::from(res)))
    });
    let svc = ServiceBuilder::new().layer(tower_http::decompression::DecompressionLayer::new()).service(send);
    let res = svc.oneshot(req).await?;
    let mut res = res.map(reqwest::Body::wrap);
    let (with_url, ()) =
        http::Response::builder().url(url.parse()?).body(()).expect("an empty response").into_parts();
    res.extensions_mut().extend(with_url.extensions);
    Ok(reqwest::Response::from(res))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // A local server answering every request with 64 KiB, counting connections.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/", listener.local_addr()?);
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let service = hyper::service::service_fn(|_| async {
                Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from(vec![b'x'; 64 * 1024]))))
            });
            let conn =
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::spawn(conn);
        }
    });

    // This repository builds reqwest with `rustls-no-provider` and names
    // rustls' ring provider; with reqwest's default features (aws-lc-rs),
    // leave this line out.
    // rustls 0.23.48 deprecates ring's provider (no post-quantum key exchange); the
    // repository keeps ring so that nothing builds aws-lc-sys (a C library).
    #[allow(deprecated)]
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let layer = DrainOnDropLayer::new();
    for i in 0..20 {
        let res = send(&layer, client.get(&url)).await?.error_for_status()?;
        if i == 0 {
            println!("first response: {} bytes read with .bytes()", res.bytes().await?.len());
        }
        // The others are dropped unread: only the status mattered.
    }
    let stats = layer.stats();
    // Drains run in the background: wait for them (bounded) before counting.
    stats.wait_idle(Duration::from_secs(5)).await;
    let s = stats.snapshot();
    println!(
        "20 requests on {} connections; {} bodies drained, {} skipped",
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        s.drained,
        s.skipped
    );
    Ok(())
}
