//! A server answering with 1 MiB of text gzipped by tower-http's
//! compression as it is sent (chunked, a few KiB on the wire), for the
//! tests of reqwest's decompression.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use bytes::Bytes;
use http_body_util::Full;

use crate::support::accept_each;

/// The server's URL, and the connections it accepted.
pub(crate) async fn server() -> (String, Arc<AtomicUsize>) {
    let (addr, accepted) = accept_each(|io| {
        let svc = tower::ServiceBuilder::new()
            .layer(tower_http::compression::CompressionLayer::new())
            .service_fn(|_: http::Request<hyper::body::Incoming>| async {
                let text = "a compressible line of text, repeated\n".repeat(1 << 15).into_bytes();
                let body = Full::new(Bytes::from(text[..1 << 20].to_vec()));
                Ok::<_, Infallible>(
                    http::Response::builder().header("content-type", "text/plain").body(body).unwrap(),
                )
            });
        hyper::server::conn::http1::Builder::new()
            .serve_connection(io, hyper_util::service::TowerToHyperService::new(svc))
    })
    .await;
    (format!("http://{addr}/"), accepted)
}
