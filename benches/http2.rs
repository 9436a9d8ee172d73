//! HTTP/2: bodies dropped right after their heads, on hyper-util's HTTP/2
//! client (h2c, prior knowledge), with and without the layer, against
//! reading every body and against Go 1.27's own client (`net/http`,
//! `benches/go/goclient`, built by `bash benches/go.sh`).
//!
//! hyper's h2 client resets a dropped body's stream, remembers at most 50
//! reset streams for 1 s, counts DATA for a forgotten one against the
//! connection and past 1,024 sends GOAWAY `too_many_internal_resets`,
//! failing every request in flight (see `src/http2.rs`).
//!
//! Cells: 64 KiB and 1 MiB bodies, 1, 16 and 64 callers sharing one client,
//! 5,000 requests or 10 s, TCP_NODELAY on both sides; and 1 MiB, 16
//! callers through the shared-link proxy at RTT 100 ms (100 Mbit/s, TCP
//! slow start: `benches/common/proxy.rs`). Every run of every policy has
//! its own server, proxy, frame counter and client. Columns: requests
//! sent, failed, connections the server accepted, GOAWAYs the client sent
//! (counted by a proxy parsing its frames, with RST_STREAM CANCEL and
//! STREAM_CLOSED), total time (for the layer, until its last drain ended).
//!
//! Targets (issue 28), with the layer at default budgets: 0 failed, 1
//! connection, 0 GOAWAYs in every cell; time no worse than read-to-end's.
//!
//! `cargo bench --bench http2 [-- --quick] [-- --repeat K] [-- CELL...]`, where
//! CELL is part of a cell's label, such as `"1 MiB, 1 caller"`.

mod common;

use std::time::{Duration, Instant};

use common::args::Args;
use common::h2::{FrameCounter, H2Server, Run};
use common::proxy::{LatencyProxy, LinkConfig};
use common::run::Runtimes;
use common::table::Table;
use common::{BoxError, KIB};
use drain_on_drop::{DrainOnDropLayer, DrainSnapshot};
use std::sync::atomic::Ordering;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Policy {
    HyperAlone,
    Layer,
    ReadToEnd,
    Go,
}

impl Policy {
    const ALL: [Policy; 4] = [Policy::HyperAlone, Policy::Layer, Policy::ReadToEnd, Policy::Go];

    fn label(self) -> &'static str {
        match self {
            Policy::HyperAlone => "hyper-util alone",
            Policy::Layer => "layer (defaults)",
            Policy::ReadToEnd => "read to the end",
            Policy::Go => "Go 1.27.3 net/http",
        }
    }
}

#[derive(Clone, Copy)]
struct Cell {
    len: usize,
    callers: usize,
    /// Through the shared-link proxy at this round trip.
    far: Option<Duration>,
}

impl Cell {
    fn label(&self) -> String {
        let size = if self.len >= 1024 * KIB {
            format!("{} MiB", self.len / (1024 * KIB))
        } else {
            format!("{} KiB", self.len / KIB)
        };
        match self.far {
            Some(rtt) => format!("{size}, {} callers, RTT {} ms", self.callers, rtt.as_millis()),
            None => format!("{size}, {} caller{}", self.callers, if self.callers == 1 { "" } else { "s" }),
        }
    }
}

/// One run's figures.
#[derive(Clone, Debug, Default)]
struct Figures {
    run: Run,
    connections: usize,
    goaways: usize,
    rst_cancel: usize,
    rst_closed: usize,
    /// Until the last drain ended (the layer), else the traffic's time.
    total: Duration,
    drains: Option<DrainSnapshot>,
}

fn run_once(
    runtimes: &Runtimes,
    go: Option<&std::path::Path>,
    policy: Policy,
    cell: Cell,
    requests: usize,
    limit: Duration,
) -> Result<Option<Figures>, BoxError> {
    let rt = runtimes.server.handle();
    let server = H2Server::start(rt, cell.len);
    // client -> frame counter -> [link] -> server
    let link = cell
        .far
        .map(|rtt| LatencyProxy::start_with_link(rt, server.addr(), rtt, LinkConfig::slow_start(100)));
    let counter = FrameCounter::start(rt, link.as_ref().map_or(server.addr(), |l| l.addr()));
    let uri: http::Uri = format!("http://{}/", counter.addr()).parse()?;
    let started = Instant::now();
    let (run, drains) = match policy {
        Policy::Go => {
            let Some(bin) = go else { return Ok(None) };
            let g = common::go::h2(bin, &uri, cell.callers, requests, limit.as_secs(), None)?;
            (Run { sent: g.sent, failed: g.failed, elapsed: g.elapsed, first_error: g.first_error }, None)
        }
        Policy::HyperAlone | Policy::ReadToEnd => {
            let read = policy == Policy::ReadToEnd;
            let run = runtimes.client.block_on(common::h2::traffic(
                common::h2::client(),
                uri,
                cell.callers,
                requests,
                limit,
                read,
            ));
            (run, None)
        }
        Policy::Layer => {
            let layer = DrainOnDropLayer::new();
            let svc = tower::ServiceBuilder::new().layer(layer.clone()).service(common::h2::client());
            let run = runtimes.client.block_on(async {
                let run = common::h2::traffic(svc, uri, cell.callers, requests, limit, false).await;
                layer.stats().wait_idle(Duration::from_secs(60)).await;
                run
            });
            (run, Some(layer.stats().snapshot()))
        }
    };
    let total = if policy == Policy::Go { run.elapsed } else { started.elapsed() };
    // The server's and the proxy's counts catch up with the client's last frames.
    std::thread::sleep(Duration::from_millis(100));
    let f = &counter.frames;
    Ok(Some(Figures {
        connections: server.accepted(),
        goaways: f.goaways.load(Ordering::SeqCst),
        rst_cancel: f.rst_cancel.load(Ordering::SeqCst),
        rst_closed: f.rst_closed.load(Ordering::SeqCst),
        total,
        drains,
        run,
    }))
}

fn median(mut runs: Vec<Figures>) -> (Figures, String) {
    runs.sort_by_key(|f| f.total);
    let spread = match (runs.first(), runs.last()) {
        (Some(a), Some(b)) if runs.len() > 1 => {
            format!("{:.2}-{:.2}", a.total.as_secs_f64(), b.total.as_secs_f64())
        }
        _ => "-".to_string(),
    };
    let mid = |v: Vec<usize>| {
        let mut v = v;
        v.sort_unstable();
        v[v.len() / 2]
    };
    let mut m = runs[runs.len() / 2].clone();
    m.run.failed = mid(runs.iter().map(|r| r.run.failed).collect());
    m.connections = mid(runs.iter().map(|r| r.connections).collect());
    m.goaways = mid(runs.iter().map(|r| r.goaways).collect());
    (m, spread)
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let began = Instant::now();
    let runtimes = Runtimes::new();
    let requests = args.count(5000, 500);
    let limit = if args.quick { Duration::from_secs(3) } else { Duration::from_secs(10) };
    let repeat = args.repeat(3);
    let go = common::go::client();
    let mut cells: Vec<Cell> = [64 * KIB, 1024 * KIB]
        .into_iter()
        .flat_map(|len| [1, 16, 64].map(|callers| Cell { len, callers, far: None }))
        .collect();
    cells.push(Cell { len: 1024 * KIB, callers: 16, far: Some(Duration::from_millis(100)) });
    let labels: Vec<String> = cells.iter().map(Cell::label).collect();
    cells.retain(|c| args.selects(&c.label()));
    if cells.is_empty() {
        return Err(
            format!("no cell's label contains the names given; the cells: {}", labels.join("; ")).into()
        );
    }
    println!(
        "# HTTP/2: bodies dropped after their heads, {requests} requests or {} s per run",
        limit.as_secs()
    );
    println!("{}", args.describe(repeat));
    if go.is_none() {
        println!("{}", common::go::missing_note());
    }
    println!(
        "failed / connections / GOAWAYs: medians of the runs; time: the median run (until its last drain \
         ended, for the layer), runs min-max beside it; RST = RST_STREAM CANCEL / STREAM_CLOSED the client \
         sent (median run).\n"
    );
    let mut table = Table::new(&[
        "cell", "policy", "sent", "failed", "conns", "GOAWAYs", "time s", "runs", "RST", "drops",
    ]);
    let mut misses = Vec::new();
    for cell in cells {
        let mut runs: Vec<Vec<Figures>> = Policy::ALL.iter().map(|_| Vec::new()).collect();
        for round in 0..repeat {
            for k in 0..Policy::ALL.len() {
                let i = (k + round) % Policy::ALL.len();
                if let Some(f) = run_once(&runtimes, go.as_deref(), Policy::ALL[i], cell, requests, limit)? {
                    runs[i].push(f);
                }
            }
        }
        let mut medians = Vec::new();
        for (policy, runs) in Policy::ALL.iter().zip(runs) {
            if runs.is_empty() {
                continue;
            }
            let (m, spread) = median(runs);
            let drops = m.drains.map_or("-".to_string(), |d| {
                let reasons: Vec<String> =
                    d.iter().filter(|(_, n)| *n > 0).map(|(r, n)| format!("{r} {n}")).collect();
                reasons.join(", ")
            });
            table.row(vec![
                cell.label(),
                policy.label().to_string(),
                m.run.sent.to_string(),
                m.run.failed.to_string(),
                m.connections.to_string(),
                m.goaways.to_string(),
                format!("{:.2}", m.total.as_secs_f64()),
                spread,
                format!("{} / {}", m.rst_cancel, m.rst_closed),
                drops,
            ]);
            medians.push((*policy, m));
        }
        let get = |p: Policy| medians.iter().find(|(q, _)| *q == p).map(|(_, m)| m);
        if let (Some(layer), Some(read)) = (get(Policy::Layer), get(Policy::ReadToEnd)) {
            if layer.run.failed > 0 || layer.connections > 1 || layer.goaways > 0 {
                misses.push(format!(
                    "{}: the layer {} failed, {} connections, {} GOAWAYs",
                    cell.label(),
                    layer.run.failed,
                    layer.connections,
                    layer.goaways
                ));
            }
            // Per request: the runs may stop at the time limit after different counts.
            let per = |f: &Figures| f.total.as_secs_f64() / f.run.sent.max(1) as f64;
            if per(layer) > per(read) {
                misses.push(format!(
                    "{}: the layer took {:.3} ms a request, read-to-end {:.3}",
                    cell.label(),
                    per(layer) * 1e3,
                    per(read) * 1e3
                ));
            }
        }
    }
    table.print();
    common::table::print_verdict(&misses, "", &[], began.elapsed());
    Ok(())
}
