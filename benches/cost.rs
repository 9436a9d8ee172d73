//! Instruction counts per response, for `valgrind --tool=callgrind`
//! (`benches/callgrind.sh` runs it): the layer's own work on a response read
//! to the end, and on an early drop, against the bare service, in memory (a
//! `service_fn`, no sockets) on a current-thread runtime. The service's
//! responses carry what hyper-util's legacy `Client` puts on every
//! response: the connection's `HttpInfo` in the extensions (its
//! `HttpConnector`, and hyper-rustls above it, give every connection one),
//! so that the layer's own marker is counted as it costs there, an entry
//! in a map that exists, rather than the map's two allocations.
//!
//! `cargo bench --bench cost -- MODE N` runs `N` iterations of `MODE`:
//! `bare_read`, `layer_read`, `bare_drop`, `layer_drop`. Instructions per
//! iteration = (count at 2N − count at N) / N, which cancels start-up.

mod common;

use std::convert::Infallible;
use std::hint::black_box;

use bytes::Bytes;
use common::NotAtEnd;
use drain_on_drop::DrainOnDropLayer;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, Full};
use tower::{Service, ServiceBuilder, ServiceExt};

/// What a client sends: an absolute URI, whose origin the layer tracks.
/// Out of line: each mode's loop calls the same code, so that building the
/// request cancels out between modes whatever the inliner does to them.
#[inline(never)]
fn request() -> Request<()> {
    Request::get("http://127.0.0.1:8080/").body(()).unwrap()
}

async fn read<S, B>(svc: &mut S)
where
    S: Service<Request<()>, Response = Response<B>, Error = Infallible>,
    B: Body<Data = Bytes, Error = Infallible>,
{
    let res = svc.ready().await.unwrap().call(request()).await.unwrap();
    black_box(res.into_body().collect().await.unwrap().to_bytes());
}

async fn drop_early<S, B>(svc: &mut S)
where
    S: Service<Request<()>, Response = Response<B>, Error = Infallible>,
{
    black_box(svc.ready().await.unwrap().call(request()).await.unwrap());
}

/// Stands for what hyper-util's client inserts into every response of a
/// connection its `HttpConnector` opened (`HttpInfo`: two socket addresses;
/// it has no public constructor).
#[derive(Clone, Copy)]
struct HttpInfo {
    _remote: std::net::SocketAddr,
    _local: std::net::SocketAddr,
}

fn http_info() -> HttpInfo {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 8080));
    HttpInfo { _remote: addr, _local: addr }
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let mode = args.next().unwrap_or_else(|| "layer_read".to_string());
    let n: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(10_000);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let body = Bytes::from(vec![b'x'; 1024]);
    let full = tower::service_fn(move |_: Request<()>| {
        let body = body.clone();
        async move {
            let mut res = Response::builder().header("content-length", 1024).body(Full::new(body)).unwrap();
            res.extensions_mut().insert(http_info());
            Ok::<_, Infallible>(res)
        }
    });
    let not_at_end = tower::service_fn(|_: Request<()>| async {
        let mut res = Response::builder().header("transfer-encoding", "chunked").body(NotAtEnd).unwrap();
        res.extensions_mut().insert(http_info());
        Ok::<_, Infallible>(res)
    });
    let layer = DrainOnDropLayer::new();
    rt.block_on(async {
        match mode.as_str() {
            "bare_read" => {
                let mut svc = full;
                for _ in 0..n {
                    read(&mut svc).await;
                }
            }
            "layer_read" => {
                let mut svc = ServiceBuilder::new().layer(layer.clone()).service(full);
                for _ in 0..n {
                    read(&mut svc).await;
                }
            }
            "bare_drop" => {
                let mut svc = not_at_end;
                for _ in 0..n {
                    drop_early(&mut svc).await;
                }
            }
            "layer_drop" => {
                let mut svc = ServiceBuilder::new().layer(layer.clone()).service(not_at_end);
                for _ in 0..n {
                    drop_early(&mut svc).await;
                }
                let s = layer.stats().snapshot();
                assert_eq!(s.drained, n, "every early drop drained: {s:?}");
            }
            other => panic!("unknown mode {other}: bare_read, layer_read, bare_drop, layer_drop"),
        }
    });
}
