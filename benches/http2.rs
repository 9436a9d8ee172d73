//! HTTP/2: bodies dropped right after their heads, on hyper-util's client
//! alone and under the README's HTTP/2 stack, against reading every body
//! and against Go 1.27's own client (`net/http`, `benches/go/goclient`,
//! built by `bash benches/go.sh`), on real servers, h2c and over TLS, on
//! the roads users take.
//!
//! hyper's h2 client resets a dropped body's stream. h2 0.4.21 and later
//! remember 8,192 reset streams for 5 s and ignore their late DATA, so the
//! layer reads nothing of a dropped HTTP/2 body and resets it at once, as
//! Go's client does (see `src/http2/mod.rs`).
//!
//! Roads (`common::h2::Road`), the end of a TLS cell's label:
//! - `TLS ALPN`, the default road: the client offers h2 and http/1.1 by
//!   ALPN and speaks what the server picks (hyper-rustls'
//!   `enable_all_versions`, no `http2_only`; Go's client with HTTP/1 and
//!   HTTP/2 on, `-alpn`). hyper's, Go's, nginx's, Apache's and h2o's
//!   servers offer h2 and http/1.1, Node's `createSecureServer` h2 alone;
//!   all pick h2.
//!   hyper-util alone takes its one-HTTP/2-dial lock only with
//!   `http2_only`: here each caller waiting for a connection dials its own.
//! - `TLS h2 only`: the client offers h2 alone, `http2_only(true)` (Go's
//!   client: HTTP/2 only).
//! - h2c (no suffix): cleartext HTTP/2 with prior knowledge, `http2_only`.
//!
//! Policies (columns), each on the cell's road: hyper-util alone (plain
//! hyper-rustls connector); the README's HTTP/2 stack (`RetryRefusedLayer`
//! above `DrainOnDropLayer::new()` above a client built with
//! `Http2Connector::new(https)`, with `http2_only` on the h2 only and h2c
//! roads); hyper-util alone reading every body to its end; Go's client (one
//! client for all goroutines). Every run of every policy has its own
//! server, counter (`common::frames`, between client and server:
//! connections the client opened, and over h2c both sides' GOAWAYs and
//! RST_STREAMs) and client. The fault cells skip read-to-end.
//!
//! Cells (rows), see `cells()`:
//! - hyper's h2c server (200 streams), 64 KiB and 1 MiB, 1, 16 and 64
//!   callers, 20,000 requests or 10 s; and 1 MiB, 16 callers through the
//!   shared-link proxy at RTT 100 ms (`common::proxy`).
//! - over TLS, 10,000 requests or 10 s, on the ALPN road: Go's net/http
//!   (`benches/go/goserver`) 64 KiB x 1 and x 16, 1 MiB x 16 and x 64; Node
//!   20 (`tests/node/h2server.js`, 16 KiB writes with backpressure, no
//!   stream limit announced) 64 KiB x 16, 1 MiB x 16 and x 64; Node
//!   answering with one `stream.end` of the whole body (`/whole/N`, label
//!   `Node stream.end`) 1 MiB x 16; nginx 1.22 (static files) 64 KiB x 16
//!   and 1 MiB x 16; Apache 2.4 (mod_http2, mpm_event, Debian's defaults;
//!   static files) 1 MiB x 64; h2o 2.2 (static files) 1 MiB x 64; hyper's
//!   server 64 KiB x 16 and 1 MiB x 16. On the h2 only road, each beside its
//!   ALPN cell: Go's server 64 KiB x 16 and 1 MiB x 16; Node 1 MiB x 16 and
//!   x 64. Apache and h2o: `apt-get install -y apache2 h2o` (else "Not
//!   run").
//! - graceful GOAWAY: nginx with `keepalive_requests 100`, 1 MiB x 16 and
//!   x 64, TLS ALPN.
//! - h2c, at loopback speed: Go's and Node's servers, 1 MiB x 16.
//! - endless: servers allowing 8 streams (Node, Go's), h2c; one caller drops
//!   33 endless or stalled bodies (`/sse`, `/trickle`, `/stall`) after their
//!   heads, then times one request (`/small`) to its head. Read-to-end does
//!   not apply.
//! - faults (`common::faults`; labels start with `fault:`), TLS ALPN, 64 KiB
//!   bodies dropped after their heads, hyper-util alone, the stack and Go's
//!   client, each client in a process of its own; per cell: requests
//!   failed, p50 and p99 of each request's time to its head or failure,
//!   when the last failure came, connections dialed (the frame counter's),
//!   the client process's memory growth and most resident memory:
//!   - every 4th handshake stalled: a proxy in front of hyper's server
//!     accepts every 4th new connection (the 1st, 5th, ...) and never
//!     answers it (held open to the end of the run), forwarding the others;
//!     16 callers, 4,000 requests (quick 1,000) or 15 s (quick 6 s), each
//!     under 3 s (it fails when that expires).
//!   - dials closed after 400 ms: no server, a listener closing each
//!     connection unanswered after 400 ms; 6 callers, 24 requests.
//!   - recycling: nginx with `keepalive_requests 16` and `100` (a graceful
//!     GOAWAY NO_ERROR with its 16th / 100th response on a connection); 16
//!     callers, 10,000 requests (quick 2,000).
//!   - one refusal then none: Node refusing one stream in its life with
//!     RST_STREAM ENHANCE_YOUR_CALM, the first after the client's 2nd reset
//!     on a connection (`/calm/N`), its sessions holding up to 1 GiB
//!     (`--max-session-memory 1024`: with Node's 10 MB it refuses more
//!     streams under 16 callers' drops); 1 caller x 200 requests, and 16
//!     callers x 800 (past some 1,000 resets on a connection, Node sends
//!     GOAWAY INTERNAL_ERROR, another punishment).
//!   - random limits 20-200 (issue 54): a server of our own
//!     (`common::h2limits`) punishing each connection once the client's
//!     resets on it pass a limit of its own, drawn between 20 and 200 from a
//!     seed: every request arriving after is refused with RST_STREAM
//!     ENHANCE_YOUR_CALM, and after 8 refusals the connection gets GOAWAY
//!     ENHANCE_YOUR_CALM; every other request gets a head and a body that
//!     never ends. 16 callers x 1,000 requests (quick 250); the table adds
//!     the connections the server punished.
//!
//!   Outside the stalled-handshake cell each request's time limit is a
//!   guard (30 s when dials fail, else 10 s), and no request starts after
//!   60 s (failing dials; one refusal, 1 caller) or 30 s.
//!
//! Targets, on the README's stack (`common::h2report`, "Targets missed"):
//! 0 failed wherever Go's client failed 0 (on Node's `stream.end` server,
//! no more failed than Go's client); a rate at least Go's client's, and at
//! least 0.95 of hyper-util alone's wherever alone fails none; at most 2
//! connections more than Go's client opened; in the endless cells, the
//! stack's head within 10 ms of hyper-util alone's. In the fault cells
//! (issue 48's figures), against hyper-util alone: stalled handshakes, no
//! more failed than alone and a p99 within alone's + 1 s; failing dials, the
//! last failure within 2 x alone's; recycling, 0 failed; one refusal, at
//! most alone's connections + 8; random limits, no more failed than alone
//! and at most 7 connections punished plus one per 193 connections.
//!
//! `cargo bench --bench http2 [-- --quick] [-- --repeat K] [-- CELL...]`, where
//! CELL is part of a cell's label, such as `"hyper, 1 MiB, 1 caller"`,
//! `"Go server, 64 KiB, 16 callers, TLS ALPN"`, `"TLS h2 only"`, `nginx`,
//! or `fault:` (every fault cell).

mod common;

use std::time::{Duration, Instant};

use common::args::Args;
use common::faults::Fault;
use common::frames::{FrameCounter, FrameCounts};
use common::h2::{Road, Run};
use common::h2report::{FailTarget, FaultTarget, Figures, Group, Policy, Report};
use common::proxy::{LatencyProxy, LinkConfig};
use common::run::Runtimes;
use common::servers::{Server, ServerKind};
use common::tls::Tls;
use common::{BoxError, KIB};
use drain_on_drop::{DrainOnDropLayer, RetryRefusedLayer};

/// One row: a server, what is asked of it, by how many callers, on which
/// road.
#[derive(Clone, Copy)]
struct Cell {
    group: Group,
    server: ServerKind,
    len: usize,
    road: Road,
    /// Node only: the body in one `stream.end` (`/whole/N`), not in 16 KiB
    /// writes (`/len/N`).
    whole: bool,
    callers: usize,
    /// Through the shared-link proxy at this round trip.
    far: Option<Duration>,
    /// Endless cells: the path of the bodies dropped.
    endless: Option<&'static str>,
    /// Fault cells: what goes wrong, and the run's numbers.
    fault: Option<FaultCell>,
    /// Each answer after this long (Go's server, `/slow/N?ms=D`).
    slow: Option<Duration>,
}

/// A fault cell's fault and numbers (`common::faults`).
#[derive(Clone, Copy)]
struct FaultCell {
    fault: Fault,
    /// Requests per run: full, quick.
    requests: (usize, usize),
    /// Each request's own time limit.
    timeout: Duration,
    /// No request starts after this: full, quick.
    limit: (Duration, Duration),
    /// Say the requests in the label (counts that define the cell).
    requests_in_label: bool,
    target: FaultTarget,
}

/// Bodies dropped in an endless cell before the timed request.
const ENDLESS_DROPS: usize = 33;

const MIB: usize = 1024 * KIB;

impl Cell {
    /// h2c.
    fn traffic(group: Group, server: ServerKind, len: usize, callers: usize) -> Cell {
        Cell {
            group,
            server,
            len,
            road: Road::H2c,
            whole: false,
            callers,
            far: None,
            endless: None,
            fault: None,
            slow: None,
        }
    }

    fn on(self, road: Road) -> Cell {
        Cell { road, ..self }
    }

    fn label(&self) -> String {
        let server = match self.whole {
            true => format!("{} stream.end", self.server.label()),
            false => self.server.label(),
        };
        if let Some(path) = self.endless {
            return format!("{server}, endless {path}, {ENDLESS_DROPS} dropped");
        }
        let size = if self.len >= MIB {
            format!("{} MiB", self.len / MIB)
        } else {
            format!("{} KiB", self.len / KIB)
        };
        let callers = format!("{} caller{}", self.callers, if self.callers == 1 { "" } else { "s" });
        let road = self.road.label();
        if let Some(f) = self.fault {
            let requests = match f.requests_in_label {
                true => format!(", {} requests", f.requests.0),
                false => String::new(),
            };
            return match f.fault.has_server() {
                true => format!("fault: {}, {server}, {size}, {callers}{requests}{road}", f.fault.label()),
                false => format!("fault: {}, {callers}{requests}{road}", f.fault.label()),
            };
        }
        if let Some(slow) = self.slow {
            return format!("{server}, {size}, {callers}, answers after {} ms{road}", slow.as_millis());
        }
        match self.far {
            Some(rtt) => format!("{server}, {size}, {callers}, RTT {} ms{road}", rtt.as_millis()),
            None => format!("{server}, {size}, {callers}{road}"),
        }
    }

    fn path(&self) -> String {
        if let Some(slow) = self.slow {
            return format!("/slow/{}?ms={}", self.len, slow.as_millis());
        }
        match (self.endless, self.server) {
            (Some(path), _) => path.to_string(),
            (None, ServerKind::Hyper) => "/".into(),
            (None, _) if self.whole => format!("/whole/{}", self.len),
            (None, _) => format!("/len/{}", self.len),
        }
    }

    /// What the stack's failures are held to.
    fn fail_target(&self) -> FailTarget {
        match self.fault {
            Some(f) => FailTarget::Fault(f.target),
            None if self.whole => FailTarget::AtMostGo,
            None => FailTarget::NoneWhereGoNone,
        }
    }
}

fn cells() -> Vec<Cell> {
    let mut cells: Vec<Cell> = [64 * KIB, MIB]
        .into_iter()
        .flat_map(|len| [1, 16, 64].map(|c| Cell::traffic(Group::Hyper, ServerKind::Hyper, len, c)))
        .collect();
    let far = Cell::traffic(Group::Hyper, ServerKind::Hyper, MIB, 16);
    cells.push(Cell { far: Some(Duration::from_millis(100)), ..far });
    let (node, go, nginx) = (ServerKind::Node(None), ServerKind::Go(None), ServerKind::Nginx(None));
    let tls = |group, server, len, callers, roads: &[Road]| {
        roads.iter().map(move |&road| Cell::traffic(group, server, len, callers).on(road)).collect::<Vec<_>>()
    };
    let (alpn, both) = (&[Road::Alpn][..], &[Road::Alpn, Road::H2Only][..]);
    let servers = Group::Servers;
    for list in [
        tls(servers, go, 64 * KIB, 1, alpn),
        tls(servers, go, 64 * KIB, 16, both),
        tls(servers, go, MIB, 16, both),
        tls(servers, go, MIB, 64, alpn),
        tls(servers, node, 64 * KIB, 16, alpn),
        tls(servers, node, MIB, 16, both),
        tls(servers, node, MIB, 64, both),
        tls(servers, node, MIB, 16, alpn).into_iter().map(|c| Cell { whole: true, ..c }).collect(),
        tls(servers, nginx, 64 * KIB, 16, alpn),
        tls(servers, nginx, MIB, 16, alpn),
        tls(servers, ServerKind::Apache, MIB, 64, alpn),
        tls(servers, ServerKind::H2o, MIB, 64, alpn),
        tls(Group::Goaway, ServerKind::Nginx(Some(100)), MIB, 16, alpn),
        tls(Group::Goaway, ServerKind::Nginx(Some(100)), MIB, 64, alpn),
        tls(servers, ServerKind::Hyper, 64 * KIB, 16, alpn),
        tls(servers, ServerKind::Hyper, MIB, 16, alpn),
    ] {
        cells.extend(list);
    }
    cells.extend([go, node].map(|server| Cell::traffic(servers, server, MIB, 16)));
    for server in [ServerKind::Node(Some(8)), ServerKind::Go(Some(8))] {
        for path in ["/sse", "/trickle", "/stall"] {
            cells.push(Cell { endless: Some(path), ..Cell::traffic(Group::Endless, server, 0, 1) });
        }
    }
    cells.extend(fault_cells());
    // Issue 53: Go's server announcing 100 streams, each answer after
    // 100 ms (a slow backend): more callers than one connection's streams.
    for callers in [64, 200, 400] {
        let cell = Cell::traffic(Group::Streams, ServerKind::Go(Some(100)), 64 * KIB, callers).on(Road::Alpn);
        cells.push(Cell { slow: Some(Duration::from_millis(100)), ..cell });
    }
    cells
}

/// The fault cells, over TLS by ALPN, 64 KiB bodies dropped after their
/// heads (see `common::faults`).
fn fault_cells() -> Vec<Cell> {
    let s = Duration::from_secs;
    let fault = |fault, server, callers, requests, timeout, limit, target| Cell {
        fault: Some(FaultCell { fault, requests, timeout, limit, requests_in_label: false, target }),
        ..Cell::traffic(Group::Faults, server, 64 * KIB, callers).on(Road::Alpn)
    };
    let fixed = |mut cell: Cell| {
        if let Some(f) = cell.fault.as_mut() {
            f.requests_in_label = true;
        }
        cell
    };
    // Node's sessions room enough that it refuses nothing else (with its
    // default 10 MB, 16 callers dropping 64 KiB bodies draw refusals), and
    // 800 requests at most: past some 1,000 resets on a connection Node
    // sends GOAWAY INTERNAL_ERROR.
    let (hyper, node) = (ServerKind::Hyper, ServerKind::NodeMemory(1024));
    let stalled = Fault::Stalled { every: 4 };
    let failing = Fault::FailingDials { after_ms: 400 };
    let (recycling, refusal) = (Fault::Recycling, Fault::OneRefusal);
    let limits = Fault::RandomLimits { lo: 20, hi: 200 };
    let (nginx16, nginx100) = (ServerKind::Nginx(Some(16)), ServerKind::Nginx(Some(100)));
    vec![
        fault(stalled, hyper, 16, (4_000, 1_000), s(3), (s(15), s(6)), FaultTarget::AnsweredAsAlone),
        fixed(fault(failing, hyper, 6, (24, 24), s(30), (s(60), s(60)), FaultTarget::FailsAsSoonAsAlone)),
        fault(recycling, nginx16, 16, (10_000, 2_000), s(10), (s(30), s(30)), FaultTarget::NoneLost),
        fault(recycling, nginx100, 16, (10_000, 2_000), s(10), (s(30), s(30)), FaultTarget::NoneLost),
        fixed(fault(refusal, node, 1, (200, 200), s(10), (s(60), s(60)), FaultTarget::ConnectionsAsAlone)),
        fixed(fault(refusal, node, 16, (800, 800), s(10), (s(30), s(30)), FaultTarget::ConnectionsAsAlone)),
        fixed(fault(limits, hyper, 16, (16_000, 4_000), s(10), (s(60), s(30)), FaultTarget::Punished)),
    ]
}

/// Requests and time limit of a run in `group`.
fn budget(args: &Args, group: Group) -> (usize, Duration) {
    let limit = if args.quick { Duration::from_secs(3) } else { Duration::from_secs(10) };
    // Runs of a second or more: the policies that drop differ by a few
    // microseconds a request, which shorter runs bury in noise.
    match group {
        Group::Hyper => (args.count(20_000, 500), limit),
        Group::Servers | Group::Goaway | Group::Streams => (args.count(10_000, 500), limit),
        Group::Endless => (ENDLESS_DROPS, limit),
        Group::Faults => (0, limit), // each fault cell has its own (`fault_setup`)
    }
}

/// A fault cell's run as `common::faults` takes it.
fn fault_setup(args: &Args, cell: &Cell, f: &FaultCell) -> common::faults::Setup {
    common::faults::Setup {
        fault: f.fault,
        server: cell.server,
        len: cell.len,
        callers: cell.callers,
        requests: args.count(f.requests.0, f.requests.1),
        limit: if args.quick { f.limit.1 } else { f.limit.0 },
        timeout: f.timeout,
    }
}

fn run_once(
    args: &Args,
    runtimes: &Runtimes,
    tls: &Tls,
    go: Option<&std::path::Path>,
    policy: Policy,
    cell: Cell,
    (requests, limit): (usize, Duration),
) -> Result<Option<Figures>, BoxError> {
    if let Some(f) = &cell.fault {
        return common::faults::run(runtimes, tls, go, policy, &fault_setup(args, &cell, f));
    }
    if cell.endless.is_some() && policy == Policy::ReadToEnd {
        return Ok(None); // an endless body has no end to read to
    }
    if policy == Policy::Go && go.is_none() {
        return Ok(None);
    }
    let rt = runtimes.server.handle();
    let over_tls = cell.road.tls();
    let server = Server::start(cell.server, rt, cell.len, over_tls.then_some(tls))?;
    // client -> frame counter -> [link] -> server
    let link = cell
        .far
        .map(|rtt| LatencyProxy::start_with_link(rt, server.addr(), rtt, LinkConfig::slow_start(100)));
    let upstream = link.as_ref().map_or(server.addr(), |l| l.addr());
    let counter =
        if over_tls { FrameCounter::opaque(rt, upstream) } else { FrameCounter::start(rt, upstream) };
    let base = match over_tls {
        true => format!("https://localhost:{}", counter.addr().port()),
        false => format!("http://{}", counter.addr()),
    };
    let uri: http::Uri = format!("{base}{}", cell.path()).parse()?;
    let small: http::Uri = format!("{base}/small").parse()?;
    let started = Instant::now();
    let mut layer = None;
    let run = match (policy, cell.endless) {
        (Policy::Go, endless) => {
            let bin = go.expect("checked");
            let g = match endless {
                Some(_) => common::go::endless(bin, &uri, requests, &small)?,
                None => {
                    let ca = over_tls.then(|| tls.ca_pem_path());
                    let alpn = cell.road == Road::Alpn;
                    common::go::h2(bin, &uri, alpn, cell.callers, requests, limit.as_secs(), ca)?
                }
            };
            Run { sent: g.sent, failed: g.failed, elapsed: g.elapsed, first_error: g.first_error }
        }
        (Policy::HyperAlone | Policy::ReadToEnd, endless) => {
            let client = common::h2::client(tls, cell.road);
            runtimes.client.block_on(async {
                match endless {
                    Some(_) => common::h2::endless(client, uri, requests, small).await,
                    None => {
                        let read = policy == Policy::ReadToEnd;
                        common::h2::traffic(client, uri, cell.callers, requests, limit, read).await
                    }
                }
            })
        }
        (Policy::Stack, endless) => {
            let l = DrainOnDropLayer::new();
            let svc = tower::ServiceBuilder::new()
                .layer(RetryRefusedLayer::new())
                .layer(l.clone())
                .service(common::h2::stack_client(tls, cell.road));
            let run = runtimes.client.block_on(async {
                match endless {
                    Some(_) => common::h2::endless(svc, uri, requests, small).await,
                    None => {
                        let run = common::h2::traffic(svc, uri, cell.callers, requests, limit, false).await;
                        l.stats().wait_idle(Duration::from_secs(60)).await;
                        run
                    }
                }
            });
            layer = Some(l);
            run
        }
    };
    let total = if policy == Policy::Go || cell.endless.is_some() { run.elapsed } else { started.elapsed() };
    // The server's and the proxy's counts catch up with the client's last frames.
    std::thread::sleep(Duration::from_millis(100));
    let frames: FrameCounts = counter.counts();
    let note = server.note(&runtimes.client, frames.connections);
    let drains = layer.map(|l| l.stats().snapshot());
    Ok(Some(Figures { run, frames, total, drains, note, fault: None }))
}

fn main() -> Result<(), BoxError> {
    // A fault cell's client process (`common::faults::client_main`).
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some(common::faults::CLIENT_FLAG) {
        return common::faults::client_main(&argv[1..]);
    }
    let args = Args::parse();
    let began = Instant::now();
    let runtimes = Runtimes::new();
    let tls = Tls::h2();
    let repeat = args.repeat(3);
    let go = common::go::client();
    let mut cells = cells();
    let labels: Vec<String> = cells.iter().map(Cell::label).collect();
    cells.retain(|c| args.selects(&c.label()));
    if cells.is_empty() {
        return Err(
            format!("no cell's label contains the names given; the cells: {}", labels.join("; ")).into()
        );
    }
    println!("# HTTP/2: bodies dropped after their heads, one client per run, h2c or TLS (ALPN, h2 only)");
    println!("{}", args.describe(repeat));
    for group in [Group::Hyper, Group::Servers, Group::Goaway, Group::Streams] {
        let (n, limit) = budget(&args, group);
        println!("{}: {n} requests or {} s per run", group.label(), limit.as_secs());
    }
    for cell in cells.iter().filter(|c| c.fault.is_some()) {
        let setup = fault_setup(&args, cell, cell.fault.as_ref().expect("fault cell"));
        println!(
            "{}: {} requests or {} s per run, each under {} s",
            cell.label(),
            setup.requests,
            setup.limit.as_secs(),
            setup.timeout.as_secs()
        );
    }
    if go.is_none() {
        println!("{}", common::go::missing_note());
    }
    let mut report = Report::new();
    let mut skipped = Vec::new();
    for cell in cells {
        if let Some(why) = cell.server.missing() {
            skipped.push(format!("{}: {why}", cell.label()));
            continue;
        }
        let mut runs: Vec<Vec<Figures>> = Policy::ALL.iter().map(|_| Vec::new()).collect();
        for round in 0..repeat {
            for k in 0..Policy::ALL.len() {
                let i = (k + round) % Policy::ALL.len();
                let budget = budget(&args, cell.group);
                let policy = Policy::ALL[i];
                if let Some(f) = run_once(&args, &runtimes, &tls, go.as_deref(), policy, cell, budget)? {
                    runs[i].push(f);
                }
            }
        }
        eprintln!("done: {} ({:.0} s in)", cell.label(), began.elapsed().as_secs_f64());
        report.add(cell.group, cell.label(), cell.fail_target(), runs);
    }
    if !skipped.is_empty() {
        println!("Not run: {}", skipped.join("; "));
    }
    report.print(began.elapsed());
    Ok(())
}
