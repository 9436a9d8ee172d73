//! Far origins: bodies dropped unread from an origin 20, 100 or 150 ms
//! away, where a new connection costs a TCP and TLS handshake and then TCP
//! slow start.
//!
//! 30 sequential HTTPS requests (TLS 1.3, HTTP/1.1) through the latency
//! proxy with a shared 100 Mbit/s link and TCP slow start (see
//! `benches/common/proxy.rs`: a new connection's congestion window starts at
//! 10 segments and grows by the bytes acknowledged; the client's first bytes
//! are held one round trip, so TCP and TLS 1.3 take two before the request
//! leaves), `Content-Length` bodies of 16, 64 and 256 KiB dropped unread.
//! Each run of each policy has its own client (pool, connector, observer),
//! server, proxy and link:
//!
//! - read-to-end: the bare client, the caller reads every body;
//! - hyper-util alone: the bare client, bodies dropped;
//! - default: `DrainOnDropLayer::new()`, nothing set;
//! - adaptive: `DrainOnDropLayer::new().adaptive()`, its observer around the
//!   TLS connector;
//! - Go 1.27.3 net/http: `benches/go/goclient` (built by `bash
//!   benches/go.sh`; skipped when not built), a process of its own against
//!   the same server, proxy and link, closing each body unread (Go's own
//!   drain, 256 KiB within 50 ms); connections as the server counted them.
//!
//! Targets (issue 19), at RTT 100 and 150 ms for every size and at RTT 20 ms
//! for 256 KiB: default and adaptive open at most read-to-end's connections
//! plus 2, and take at most 1.15 × read-to-end's time (medians).
//!
//! `cargo bench --bench far [-- --quick] [-- --repeat K] [-- --rtt MS]`

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::args::Args;
use common::client::{BenchClient, Kind, Read};
use common::go;
use common::proxy::LinkConfig;
use common::run::{Case, Outcome, Runtimes, measure_rounds, sequential_on};
use common::server::{Endpoint, Framing, Net};
use common::table::{Table, conns, count, ms, ratio};
use common::{BoxError, KIB};
use drain_on_drop::{DrainOnDropLayer, OriginSnapshot};

/// Target: at most this many connections more than read-to-end.
const EXTRA_CONNECTIONS: usize = 2;
/// Target: at most this times read-to-end's total time.
const TIME_FACTOR: f64 = 1.15;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Policy {
    ReadToEnd,
    HyperAlone,
    Default,
    Adaptive,
    /// The Go client, measured when built.
    Go,
}

impl Policy {
    /// The Rust clients, which every run measures.
    const RUST: [Policy; 4] = [Policy::ReadToEnd, Policy::HyperAlone, Policy::Default, Policy::Adaptive];

    fn label(self) -> &'static str {
        match self {
            Policy::ReadToEnd => "read-to-end",
            Policy::HyperAlone => "hyper-util alone",
            Policy::Default => "default",
            Policy::Adaptive => "adaptive + observer",
            Policy::Go => "Go 1.27.3 net/http",
        }
    }

    /// The Rust client of the policy, `None` for Go's.
    fn client(self, net: &Net) -> Option<BenchClient> {
        let (kind, layer) = match self {
            Policy::ReadToEnd => (Kind::ReadToEnd, None),
            Policy::HyperAlone => (Kind::HyperAlone, None),
            Policy::Default => (Kind::Layer, Some(DrainOnDropLayer::new())),
            Policy::Adaptive => (Kind::Layer, Some(DrainOnDropLayer::new().adaptive())),
            Policy::Go => return None,
        };
        Some(BenchClient::observed(kind, layer, net))
    }
}

/// Whether the targets apply to a cell.
fn targeted(rtt: Duration, len: usize) -> bool {
    rtt >= Duration::from_millis(100) || len == 256 * KIB
}

fn run_once(
    runtimes: &Runtimes,
    net: &Net,
    policy: Policy,
    case: Case,
    n: usize,
    go_client: Option<&Path>,
) -> Result<(Outcome, Vec<OriginSnapshot>), BoxError> {
    let Some(client) = policy.client(net) else {
        let bin = go_client.expect("Go runs only when its client is built");
        return Ok((run_go(runtimes, net, bin, case, n)?, Vec::new()));
    };
    let layer = client.layer().cloned();
    let outcome = runtimes.client.block_on(async {
        let endpoint = Endpoint::start(runtimes.server.handle(), net);
        let uri = endpoint.uri(case.len, case.framing);
        sequential_on(&endpoint, client, n, |_| (uri.clone(), case.read), |_, _, _| {}).await
    })?;
    Ok((outcome, layer.map(|l| l.origins()).unwrap_or_default()))
}

/// One run of the Go client: its own server, proxy and link as every run,
/// the time Go reported, the connections the server accepted (counted once
/// the proxy has had time to pass on a connection Go opened last). No
/// latencies: `p50`, `p99` and `second_half` are zero.
fn run_go(runtimes: &Runtimes, net: &Net, bin: &Path, case: Case, n: usize) -> Result<Outcome, BoxError> {
    let Net::Tls { rtt, tls, .. } = net else { unreachable!("far origins are TLS") };
    let endpoint = Endpoint::start(runtimes.server.handle(), net);
    let run = go::far(bin, &endpoint.uri(case.len, case.framing), n, tls.ca_pem_path())?;
    if let Some(error) = run.first_error {
        return Err(format!("Go: {} of {} requests failed, the first: {error}", run.failed, run.sent).into());
    }
    // The proxy connects upstream half a round trip after accepting.
    std::thread::sleep(*rtt + Duration::from_millis(100));
    let accepted = endpoint.accepted();
    Ok(Outcome {
        connections: accepted,
        accepted,
        second_half: 0,
        requests: run.sent,
        elapsed: run.elapsed,
        p50: Duration::ZERO,
        p99: Duration::ZERO,
        drains: None,
        settled: true,
    })
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let began = Instant::now();
    let runtimes = Runtimes::new();
    let n = args.count(30, 8);
    let repeat = args.repeat(3);
    let link = LinkConfig::slow_start(args.bandwidth_mbit.unwrap_or(LinkConfig::DEFAULT_MBIT));
    let rtts: Vec<Duration> =
        if args.rtt_given { vec![args.rtt] } else { [20, 100, 150].map(Duration::from_millis).to_vec() };
    println!("# Far origins: {n} sequential HTTPS requests, Content-Length bodies dropped unread, {link}");
    println!("{}", args.describe(repeat));
    let go_client: Option<PathBuf> = go::client();
    let mut policies = Policy::RUST.to_vec();
    match &go_client {
        Some(bin) => {
            policies.push(Policy::Go);
            println!("Go client: {}", bin.display());
        }
        None => println!("{}", go::missing_note()),
    }
    println!(
        "ms = total time of the {n} requests (median run; runs min-max beside it); conns = connections \
         opened (median; Go's: as the server counted them); drained / abandoned / skipped = the \
         layer's early drops.\n"
    );
    let mut table = Table::new(&[
        "RTT",
        "body",
        "policy",
        "ms",
        "runs min-max",
        "conns",
        "drained",
        "abandoned",
        "skipped",
        "vs read-to-end",
    ]);
    let mut misses = Vec::new();
    let mut estimates = Vec::new();
    for rtt in rtts {
        let net = Net::tls_shared_link(rtt, link);
        for kib in [16, 64, 256] {
            let case = Case { len: kib * KIB, framing: Framing::ContentLength, read: Read::Unread };
            let results = measure_rounds(&policies, repeat, |policy, _| {
                run_once(&runtimes, &net, policy, case, n, go_client.as_deref())
            })?;
            let control = results.iter().find(|r| r.0 == Policy::ReadToEnd).expect("measured").1.outcome;
            for (policy, measured) in &results {
                let (o, origins) = (&measured.outcome, &measured.origins);
                let vs = format!(
                    "{:.2}×, {:+}",
                    ratio(o.elapsed, control.elapsed),
                    o.connections as i64 - control.connections as i64
                );
                table.row(vec![
                    format!("{} ms", rtt.as_millis()),
                    format!("{kib} KiB"),
                    policy.label().to_string(),
                    ms(o.elapsed),
                    measured.spread(),
                    conns(o),
                    count(o, |d| d.drained),
                    count(o, |d| d.abandoned),
                    count(o, |d| d.skipped),
                    if *policy == Policy::ReadToEnd { "-".to_string() } else { vs },
                ]);
                if matches!(policy, Policy::Default | Policy::Adaptive) {
                    for origin in origins {
                        estimates.push(format!(
                            "- RTT {} ms, {kib} KiB, {}: round trip {:?}, setup {:?}, throughput {:?}, budget {:?}",
                            rtt.as_millis(),
                            policy.label(),
                            origin.round_trip,
                            origin.setup_cost,
                            origin.throughput,
                            origin.budget
                        ));
                    }
                    if targeted(rtt, case.len) {
                        let (t, c) = (ratio(o.elapsed, control.elapsed), o.connections);
                        if t > TIME_FACTOR || c > control.connections + EXTRA_CONNECTIONS {
                            misses.push(format!(
                                "RTT {} ms {kib} KiB {}: {t:.2}× read-to-end's time, {c} connections (read-to-end {})",
                                rtt.as_millis(),
                                policy.label(),
                                control.connections
                            ));
                        }
                    }
                }
            }
        }
    }
    table.print();
    println!(
        "\nTargets (RTT 100 and 150 ms, and RTT 20 ms at 256 KiB; default and adaptive): at most \
         read-to-end + {EXTRA_CONNECTIONS} connections, at most {TIME_FACTOR} × read-to-end's time."
    );
    common::table::print_verdict(
        &misses,
        "Estimates at the end of each median run (DrainOnDropLayer::origins)",
        &estimates,
        began.elapsed(),
    );
    Ok(())
}
