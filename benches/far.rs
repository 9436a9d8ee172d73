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
//!   TLS connector.
//!
//! Targets (issue 19), at RTT 100 and 150 ms for every size and at RTT 20 ms
//! for 256 KiB: default and adaptive open at most read-to-end's connections
//! plus 2, and take at most 1.15 × read-to-end's time (medians).
//!
//! `cargo bench --bench far [-- --quick] [-- --repeat K] [-- --rtt MS]`

mod common;

use std::time::{Duration, Instant};

use common::args::Args;
use common::client::{BenchClient, Kind, Read};
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
}

impl Policy {
    const ALL: [Policy; 4] = [Policy::ReadToEnd, Policy::HyperAlone, Policy::Default, Policy::Adaptive];

    fn label(self) -> &'static str {
        match self {
            Policy::ReadToEnd => "read-to-end",
            Policy::HyperAlone => "hyper-util alone",
            Policy::Default => "default",
            Policy::Adaptive => "adaptive + observer",
        }
    }

    fn client(self, net: &Net) -> BenchClient {
        let (kind, layer) = match self {
            Policy::ReadToEnd => (Kind::ReadToEnd, None),
            Policy::HyperAlone => (Kind::HyperAlone, None),
            Policy::Default => (Kind::Layer, Some(DrainOnDropLayer::new())),
            Policy::Adaptive => (Kind::Layer, Some(DrainOnDropLayer::new().adaptive())),
        };
        BenchClient::observed(kind, layer, net)
    }

    /// Go 1.27.3's figures from the issue (their proxy, same link model, 30
    /// requests, medians of 3): ms and connections.
    fn go(self, rtt_ms: u128, kib: usize) -> Option<(u32, u32)> {
        if self != Policy::HyperAlone {
            return None;
        }
        match (rtt_ms, kib) {
            (20, 16) => Some((740, 3)),
            (20, 64) => Some((780, 3)),
            (20, 256) => Some((2170, 30)),
            (100, 16) => Some((9190, 30)),
            (100, 64) => Some((9210, 30)),
            (100, 256) => Some((9370, 30)),
            (150, _) => Some((13_800, 30)),
            _ => None,
        }
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
) -> Result<(Outcome, Vec<OriginSnapshot>), BoxError> {
    let client = policy.client(net);
    let layer = client.layer().cloned();
    let outcome = runtimes.client.block_on(async {
        let endpoint = Endpoint::start(runtimes.server.handle(), net);
        let uri = endpoint.uri(case.len, case.framing);
        sequential_on(&endpoint, client, n, |_| (uri.clone(), case.read), |_, _, _| {}).await
    })?;
    Ok((outcome, layer.map(|l| l.origins()).unwrap_or_default()))
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
    println!(
        "ms = total time of the {n} requests (median run; runs min-max beside it); conns = connections \
         opened (median); drained / abandoned / skipped = the layer's early drops. Go 1.27 = the \
         issue's figures for Go 1.27.3 (their run, same link model), not measured here.\n"
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
        "Go 1.27 ms (conns)",
    ]);
    let mut misses = Vec::new();
    let mut estimates = Vec::new();
    for rtt in rtts {
        let net = Net::tls_shared_link(rtt, link);
        for kib in [16, 64, 256] {
            let case = Case { len: kib * KIB, framing: Framing::ContentLength, read: Read::Unread };
            let results =
                measure_rounds(&Policy::ALL, repeat, |policy, _| run_once(&runtimes, &net, policy, case, n))?;
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
                    policy.go(rtt.as_millis(), kib).map_or("-".to_string(), |(t, c)| format!("{t} ({c})")),
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
