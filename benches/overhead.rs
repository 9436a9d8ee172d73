//! Issue 3, item 4: what the layer costs when nothing is drained, and what
//! one early drop that starts a drain costs.
//!
//! - `read_to_end_loopback`: GET and read to the end through the bare client
//!   and through the layer, against an in-process hyper server on loopback.
//! - `read_to_end_in_memory`: the same without a network (a `service_fn`
//!   returning a 1 KiB body): the wrapper's own cost per response.
//! - `early_drop`: a `service_fn` returning a body that is not at its end,
//!   called and the body dropped; bare, through the layer (the caller's cost:
//!   `DrainBody` built, dropped, decision, drain task spawned), and through
//!   the layer including running the drain task to its end.
//! - Then, outside criterion, a paired loopback comparison: bare and layer
//!   clients alternate in rounds, so that drift on a shared machine hits
//!   both alike; it prints the median ratio of their round times.
//! - And a paired in-memory comparison: the in-memory read to the end and
//!   an early drop drained in the drop, bare and layer alternating in
//!   blocks; it prints the median of layer − bare over blocks.
//!
//! `cargo bench --bench overhead [-- --quick]`, or `DRAIN_BENCH_QUICK=1`.

mod common;

use std::convert::Infallible;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::client::{BenchClient, Kind, Read, send};
use common::run::Runtimes;
use common::server::{Endpoint, Framing, Net};
use common::table::Table;
use common::{BoxError, KIB, NotAtEnd};
use criterion::{BenchmarkId, Criterion, criterion_group};
use drain_on_drop::{DrainBody, DrainOnDropLayer, DrainStats};
use http::header::{CONTENT_LENGTH, HeaderValue, TRANSFER_ENCODING};
use http::{Request, Response};
use http_body::Body;
use http_body_util::Full;
use tokio::runtime::Runtime;
use tower::{Service, ServiceBuilder};

/// GET through the bare client and the layer, read to the end, on loopback.
fn read_to_end_loopback(c: &mut Criterion) {
    let runtimes = Runtimes::new();
    let mut group = c.benchmark_group("read_to_end_loopback");
    for kib in [1, 64] {
        for (kind, name) in [(Kind::HyperAlone, "bare"), (Kind::Layer, "layer")] {
            // Own server and pool per client, as in the other tables.
            let endpoint = Endpoint::start(runtimes.server.handle(), &Net::Loopback);
            let client = BenchClient::new(kind, &Net::Loopback);
            let uri = endpoint.uri(kib * KIB, Framing::ContentLength);
            group.bench_function(BenchmarkId::new(name, format!("{kib}KiB")), |b| {
                b.to_async(&runtimes.client).iter_custom(|iters| {
                    let (mut client, uri) = (client.clone(), uri.clone());
                    async move {
                        let start = Instant::now();
                        for _ in 0..iters {
                            let read = client.get(uri.clone(), Read::ToEnd).await;
                            black_box(read.expect("request"));
                        }
                        start.elapsed()
                    }
                })
            });
        }
    }
    group.finish();
}

fn current_thread() -> Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime")
}

/// Calls `svc` once and handles the body as `read` says.
async fn call<S, B>(svc: &mut S, read: Read) -> u64
where
    S: Service<Request<()>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Unpin + Send + 'static,
    B::Error: Into<BoxError>,
{
    // An absolute URI, as a client sends: the layer tracks its origin.
    let req = Request::get("http://127.0.0.1:8080/").body(()).unwrap();
    send(svc, req, read).await.expect("in-memory call")
}

/// An in-memory service answering a 1 KiB body with `Content-Length`.
fn one_kib() -> impl Service<Request<()>, Response = Response<Full<Bytes>>, Error = Infallible> + Clone {
    let body = Bytes::from(vec![b'x'; KIB]);
    tower::service_fn(move |_: Request<()>| {
        let res = Response::builder()
            .header(CONTENT_LENGTH, HeaderValue::from_static("1024"))
            .body(Full::new(body.clone()));
        async move { Ok::<_, Infallible>(res.unwrap()) }
    })
}

/// A 1 KiB response read to the end, bare and through the layer, no network.
fn read_to_end_in_memory(c: &mut Criterion) {
    let rt = current_thread();
    let bare = one_kib();
    let layered = ServiceBuilder::new().layer(DrainOnDropLayer::new()).service(bare.clone());
    let mut group = c.benchmark_group("read_to_end_in_memory");
    group.bench_function("bare", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let mut svc = bare.clone();
            async move {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(call(&mut svc, Read::ToEnd).await);
                }
                start.elapsed()
            }
        })
    });
    group.bench_function("layer", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let mut svc = layered.clone();
            async move {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(call(&mut svc, Read::ToEnd).await);
                }
                start.elapsed()
            }
        })
    });
    group.finish();
}

/// Drops per batch; between batches the drain tasks run to their end.
const BATCH: u64 = 256;

/// Times `iters` early drops through the layer, in batches. Returns the time
/// spent calling and dropping only, or that plus the time the drain tasks
/// took to run (`with_drains`).
async fn layered_drops<S>(svc: &mut S, stats: &DrainStats, iters: u64, with_drains: bool) -> Duration
where
    S: Service<Request<()>, Response = Response<DrainBody<NotAtEnd>>>,
    S::Error: Into<BoxError>,
{
    let mut timed = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let batch = left.min(BATCH);
        left -= batch;
        let start = Instant::now();
        for _ in 0..batch {
            black_box(call(svc, Read::Unread).await);
        }
        let dropped = start.elapsed();
        // The drains were spawned on this current-thread runtime: let them run.
        while stats.snapshot().in_flight > 0 {
            tokio::task::yield_now().await;
        }
        timed += if with_drains { start.elapsed() } else { dropped };
    }
    timed
}

/// One early drop: bare, through the layer (caller's cost), and through the
/// layer with the drain task run to its end.
fn early_drop(c: &mut Criterion) {
    let rt = current_thread();
    // Chunked framing, so that the layer's policy drains it (a response
    // with neither length nor chunked framing is close-delimited: skipped).
    let bare = tower::service_fn(|_: Request<()>| async {
        let res =
            Response::builder().header(TRANSFER_ENCODING, HeaderValue::from_static("chunked")).body(NotAtEnd);
        Ok::<_, Infallible>(res.unwrap())
    });
    let layer = DrainOnDropLayer::new();
    let stats = layer.stats();
    let layered = ServiceBuilder::new().layer(layer).service(bare);
    let drops = Arc::new(AtomicU64::new(0));

    let mut group = c.benchmark_group("early_drop");
    group.bench_function("bare", |b| {
        b.to_async(&rt).iter_custom(|iters| async move {
            let mut svc = bare;
            let start = Instant::now();
            for _ in 0..iters {
                black_box(call(&mut svc, Read::Unread).await);
            }
            start.elapsed()
        })
    });
    for (name, with_drains) in [("layer", false), ("layer_with_drain_task", true)] {
        group.bench_function(name, |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let (mut svc, stats, drops) = (layered.clone(), stats.clone(), drops.clone());
                async move {
                    drops.fetch_add(iters, Ordering::Relaxed);
                    layered_drops(&mut svc, &stats, iters, with_drains).await
                }
            })
        });
    }
    group.finish();

    // Every drop measured must have started a drain that ended at the end of
    // the body: otherwise a cheaper path (a skip) was measured.
    let snap = stats.snapshot();
    let drops = drops.load(Ordering::Relaxed);
    assert_eq!(
        (snap.drained, snap.skipped, snap.abandoned, snap.failed),
        (drops, 0, 0, 0),
        "each early drop should be drained: {snap:?}"
    );
    println!("early_drop: {drops} drops through the layer, all drained: {snap:?}");
}

/// Requests per client in one block of the paired comparison.
const PER_BLOCK: usize = 500;

/// Bare client and layer, each with its own server and pool, take turns
/// request by request (who goes first flips every pair), reading every body
/// to the end, so that drift on a shared machine hits both alike. Prints the
/// median per-request time of each, and the median and interquartile range
/// over blocks of [`PER_BLOCK`] pairs of the ratio layer / bare.
fn paired_loopback(blocks: usize) {
    let runtimes = Runtimes::new();
    let mut table = Table::new(&[
        "body",
        "bare µs/request (median block)",
        "layer µs/request (median block)",
        "layer / bare (median block)",
        "interquartile range",
    ]);
    for kib in [1, 64] {
        let endpoints = [(); 2].map(|_| Endpoint::start(runtimes.server.handle(), &Net::Loopback));
        let uris = endpoints.each_ref().map(|e| e.uri(kib * KIB, Framing::ContentLength));
        let mut clients = [Kind::HyperAlone, Kind::Layer].map(|kind| BenchClient::new(kind, &Net::Loopback));
        let (mut bare, mut layer, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        runtimes.client.block_on(async {
            paired_block(&mut clients, &uris).await; // warm-up: pools, read buffers
            for _ in 0..blocks {
                let [b, l] = paired_block(&mut clients, &uris).await;
                bare.push(b);
                layer.push(l);
                ratios.push(l / b);
            }
        });
        table.row(vec![
            format!("{kib} KiB"),
            format!("{:.1}", q(&mut bare, 0.5)),
            format!("{:.1}", q(&mut layer, 0.5)),
            format!("{:.4}", q(&mut ratios, 0.5)),
            format!("{:.4} - {:.4}", q(&mut ratios, 0.25), q(&mut ratios, 0.75)),
        ]);
    }
    println!("\nPaired loopback comparison, {blocks} blocks of {PER_BLOCK} requests per client:");
    table.print();
}

/// The `at` quantile (0.5: the median) of `v`, nearest rank.
fn q(v: &mut [f64], at: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * at).round() as usize]
}

/// One block: [`PER_BLOCK`] requests read to the end by each client, taking
/// turns. Returns each client's mean µs per request.
async fn paired_block(clients: &mut [BenchClient; 2], uris: &[http::Uri; 2]) -> [f64; 2] {
    let mut took = [Duration::ZERO; 2];
    for j in 0..PER_BLOCK {
        for i in [j % 2, 1 - j % 2] {
            let start = Instant::now();
            black_box(clients[i].get(uris[i].clone(), Read::ToEnd).await.expect("request"));
            took[i] += start.elapsed();
        }
    }
    took.map(|t| t.as_secs_f64() * 1e6 / PER_BLOCK as f64)
}

/// Calls per service in one block of the paired in-memory comparison.
const IN_MEMORY_BLOCK: u32 = 20_000;

/// `bare` and `layered` take turns block by block (who goes first flips
/// every block) on one current-thread runtime; returns the median ns per
/// call of each and, per block pair, of `layered − bare` (and its IQR) and
/// of `layered / bare`.
fn paired_in_memory<A, B>(
    blocks: usize,
    mut bare: A,
    mut layered: B,
    stats: &DrainStats,
    read: Read,
) -> [f64; 6]
where
    A: Service<Request<()>, Response = Response<Full<Bytes>>, Error = Infallible>,
    B: Service<Request<()>, Response = Response<DrainBody<Full<Bytes>>>, Error = Infallible>,
{
    let rt = current_thread();
    let (mut b, mut l, mut diff, mut ratio) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for block in 0..=blocks {
        // Each block runs at its own depth of the stack: where the futures
        // and responses land decides how their moves hit the caches, by ±10
        // ns per call on this machine for the same code (an environment
        // variable longer or shorter is enough). The median over blocks is
        // then one over placements, not the luck of one.
        let took = at_stack_depth((block * 37) % 128, || {
            rt.block_on(async {
                let mut took = [Duration::ZERO; 2];
                for i in [block % 2, 1 - block % 2] {
                    let start = Instant::now();
                    for n in 1..=IN_MEMORY_BLOCK {
                        if i == 0 {
                            black_box(call(&mut bare, read).await);
                        } else {
                            black_box(call(&mut layered, read).await);
                            // Early drops of a body that is not hyper's
                            // spawn their drains on this runtime: let them
                            // run, timed with the layer.
                            if u64::from(n) % BATCH == 0 || n == IN_MEMORY_BLOCK {
                                while stats.snapshot().in_flight > 0 {
                                    tokio::task::yield_now().await;
                                }
                            }
                        }
                    }
                    took[i] = start.elapsed();
                }
                took
            })
        });
        if block == 0 {
            continue; // warm-up
        }
        let [tb, tl] = took.map(|t| t.as_nanos() as f64 / f64::from(IN_MEMORY_BLOCK));
        b.push(tb);
        l.push(tl);
        diff.push(tl - tb);
        ratio.push(tl / tb);
    }
    [
        q(&mut b, 0.5),
        q(&mut l, 0.5),
        q(&mut diff, 0.5),
        q(&mut diff, 0.25),
        q(&mut diff, 0.75),
        q(&mut ratio, 0.5),
    ]
}

/// Runs `f` `depth` stack frames deeper than the caller (a few dozen bytes
/// each).
#[inline(never)]
fn at_stack_depth<R>(depth: usize, f: impl FnOnce() -> R) -> R {
    let frame = black_box([depth as u8; 16]);
    let r = if depth == 0 { f() } else { at_stack_depth(depth - 1, f) };
    black_box(frame);
    r
}

/// The criterion in-memory figures again, bare and layer alternating in
/// blocks of [`IN_MEMORY_BLOCK`] calls, so that the machine's drift between
/// criterion's benchmarks (±10% on a shared VM, more than the layer's own
/// cost) hits both alike.
fn paired_in_memory_table(blocks: usize) {
    // A body with framing but not at its end, that ends when polled: the
    // layer drains it on a task (only hyper's own body is read in the
    // drop), and the layer's time includes running those tasks.
    let unread = tower::service_fn(|_: Request<()>| async {
        let res = Response::builder()
            .header(TRANSFER_ENCODING, HeaderValue::from_static("chunked"))
            .body(Full::new(Bytes::from_static(b"rest")));
        Ok::<_, Infallible>(res.unwrap())
    });
    let mut table = Table::new(&[
        "in memory",
        "bare ns (median block)",
        "layer ns (median block)",
        "layer − bare ns (median)",
        "interquartile range",
        "layer / bare",
    ]);
    table.row(paired_in_memory_row("read to the end", one_kib(), Read::ToEnd, blocks));
    table.row(paired_in_memory_row("early drop, drain task included", unread, Read::Unread, blocks));
    println!("\nPaired in-memory comparison, {blocks} blocks of {IN_MEMORY_BLOCK} calls per service:");
    table.print();
}

/// One row of [`paired_in_memory_table`]: `svc` bare against `svc` under
/// its own layer, whose counters must then show the path measured (nothing
/// counted when read to the end; every early drop drained).
fn paired_in_memory_row<S>(name: &str, svc: S, read: Read, blocks: usize) -> Vec<String>
where
    S: Service<Request<()>, Response = Response<Full<Bytes>>, Error = Infallible> + Clone,
{
    let layer = DrainOnDropLayer::new();
    let stats = layer.stats();
    let layered = ServiceBuilder::new().layer(layer).service(svc.clone());
    let [b, l, d, d25, d75, r] = paired_in_memory(blocks, svc, layered, &stats, read);
    let s = stats.snapshot();
    let calls = (blocks as u64 + 1) * u64::from(IN_MEMORY_BLOCK);
    let drained = if read == Read::ToEnd { 0 } else { calls };
    assert_eq!((s.drained, s.abandoned, s.skipped, s.failed), (drained, 0, 0, 0), "{name}: {s:?}");
    vec![
        name.to_string(),
        format!("{b:.1}"),
        format!("{l:.1}"),
        format!("{d:.1}"),
        format!("{d25:.1} - {d75:.1}"),
        format!("{r:.3}"),
    ]
}

/// Quick mode: `DRAIN_BENCH_QUICK=1`, `--quick` (criterion's own quick mode
/// then also applies), or a run without `--bench` (`cargo test --benches`).
fn quick() -> bool {
    let args: Vec<String> = std::env::args().collect();
    common::args::quick_from_env()
        || args.iter().any(|a| a == "--quick")
        || !args.iter().any(|a| a == "--bench")
}

fn config() -> Criterion {
    let criterion = Criterion::default();
    if quick() {
        criterion
            .warm_up_time(Duration::from_millis(200))
            .measurement_time(Duration::from_secs(1))
            .sample_size(10)
    } else {
        criterion
    }
}

criterion_group! {
    name = benches;
    config = config();
    targets = read_to_end_loopback, read_to_end_in_memory, early_drop
}
fn main() {
    benches();
    paired_loopback(if quick() { 5 } else { 40 });
    paired_in_memory_table(if quick() { 5 } else { 40 });
    Criterion::default().configure_from_args().final_summary();
}
