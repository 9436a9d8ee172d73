//! Issue 35: a response read to its end costs the same through the layer
//! however many callers share it and however many origins they call. C
//! callers (1, 8, 64), each with its own clone of the service, on a
//! multi-thread runtime with a worker per core, call O origins (1 or 100)
//! in turn, in memory (a `service_fn` answering 1 KiB with the `HttpInfo`
//! hyper-util's client puts on every response; no sockets, so that the
//! layer's own work is what differs). Bare and layer alternate in blocks
//! (so that the machine's drift hits both alike); the table gives the
//! median over blocks of ns per response for each, their difference and
//! ratio.
//!
//! With one origin a caller's service finds it again by its spelling, with
//! no lock; with 100 in turn it looks each up in the layer's table, in one
//! of 16 parts behind its own lock.
//!
//! `cargo bench --bench scale [-- --quick]`

mod common;

use std::convert::Infallible;
use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use common::args::Args;
use common::table::Table;
use drain_on_drop::DrainOnDropLayer;
use http::{Request, Response, Uri};
use http_body::Body;
use http_body_util::{BodyExt, Full};
use tower::{Service, ServiceBuilder, ServiceExt};

/// Stands for hyper-util's `HttpInfo` (no public constructor).
#[derive(Clone, Copy)]
struct HttpInfo {
    _remote: std::net::SocketAddr,
    _local: std::net::SocketAddr,
}

fn service() -> impl Service<Request<()>, Response = Response<Full<Bytes>>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    let body = Bytes::from(vec![b'x'; 1024]);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 8080));
    tower::service_fn(move |_: Request<()>| {
        let body = body.clone();
        async move {
            let mut res = Response::builder().header("content-length", 1024).body(Full::new(body)).unwrap();
            res.extensions_mut().insert(HttpInfo { _remote: addr, _local: addr });
            Ok::<_, Infallible>(res)
        }
    })
}

/// `callers` tasks, each with its own clone of `svc`, each making `each`
/// requests to `uris` in turn, bodies read to the end: ns per response.
async fn block<S, B>(svc: S, uris: &[Uri], callers: usize, each: usize) -> f64
where
    S: Service<Request<()>, Response = Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
    B: Body<Data = Bytes, Error = Infallible> + Send + 'static,
{
    let start = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let (mut svc, uris) = (svc.clone(), uris.to_vec());
            tokio::spawn(async move {
                for i in 0..each {
                    let uri = uris[(c + i) % uris.len()].clone();
                    let res =
                        svc.ready().await.unwrap().call(Request::get(uri).body(()).unwrap()).await.unwrap();
                    black_box(res.into_body().collect().await.unwrap().to_bytes());
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("caller");
    }
    start.elapsed().as_nanos() as f64 / (callers * each) as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args = Args::parse();
    let blocks = if args.quick { 5 } else { 21 };
    let per_block = if args.quick { 4_000 } else { 20_000 };
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build().unwrap();
    println!(
        "# The layer's cost per response read to its end, by callers and origins ({workers} workers, in memory)"
    );
    println!("{blocks} blocks of {per_block} responses per policy, alternating; medians over blocks.\n");
    let mut table =
        Table::new(&["callers", "origins", "bare ns", "layer ns", "layer - bare ns", "layer / bare"]);
    for origins in [1usize, 100] {
        let uris: Vec<Uri> =
            (0..origins).map(|i| format!("http://origin{i}.example:8080/").parse().unwrap()).collect();
        for callers in [1usize, 8, 64] {
            let each = per_block / callers;
            let layer = DrainOnDropLayer::new();
            let layered = ServiceBuilder::new().layer(layer).service(service());
            let (mut bare, mut with) = (Vec::new(), Vec::new());
            rt.block_on(async {
                // One unmeasured round of each: the origins are in the table.
                block(service(), &uris, callers, each).await;
                block(layered.clone(), &uris, callers, each).await;
                for _ in 0..blocks {
                    bare.push(block(service(), &uris, callers, each).await);
                    with.push(block(layered.clone(), &uris, callers, each).await);
                }
            });
            let diffs: Vec<f64> = bare.iter().zip(&with).map(|(b, l)| l - b).collect();
            let ratios: Vec<f64> = bare.iter().zip(&with).map(|(b, l)| l / b).collect();
            table.row(vec![
                callers.to_string(),
                origins.to_string(),
                format!("{:.0}", median(bare)),
                format!("{:.0}", median(with)),
                format!("{:.0}", median(diffs)),
                format!("{:.3}", median(ratios)),
            ]);
        }
    }
    table.print();
}
