//! Adaptive budgets against fixed ones, on a link of limited bandwidth
//! shared by every connection.
//!
//! 20 sequential HTTPS requests (TLS 1.3, HTTP/1.1) through the latency
//! proxy with a shared 100 Mbit/s link (see `benches/common/proxy.rs`),
//! `Content-Length` bodies dropped unread, at RTT 1 ms and 100 ms, bodies of
//! 64 KiB and 1 MiB, plus three conditions users bring: cross traffic (a
//! bulk transfer by another client on the same link during the run, RTT
//! 100 ms, 1 MiB), a slow reader (every other body read 200 ms after its
//! head, RTT 100 ms, 64 KiB), and a slow endpoint (the first request, which
//! opens the connection, answered after 400 ms, RTT 1 ms, 1 MiB). Each run
//! of each policy has its own client (pool, connector, observer), server,
//! proxy and link:
//!
//! - (a) read-to-end: the bare client, the caller reads every body;
//! - (b) `DrainOnDropLayer::new()`: the default, 256 KiB and a time budget
//!   that follows the round trip (50 ms at RTT 1 ms, 600 ms at 100 ms);
//! - (c) `DrainOnDropLayer::new().max_bytes(4 << 20).max_time(1 s)`;
//! - (d) `DrainOnDropLayer::new().adaptive()`, its observer around the TLS
//!   connector;
//! - (e) hyper-util alone: the bare client, bodies dropped.
//!
//! Prints total time, connections and the layer's counts per policy, the
//! ratios adaptive / best fixed and adaptive / default fixed per cell, and
//! the adaptive layer's per-origin estimates (`DrainOnDropLayer::origins`) at the
//! end of each cell's median run.
//!
//! `cargo bench --bench adaptive [-- --quick] [-- --repeat K]
//! [-- --bandwidth MBIT] [-- --rtt MS]`
//!
//! `DRAIN_BENCH_TRACE=1` also prints, on stderr, one line per request
//! (latency, connections, the layer's counts, the adaptive budget) and the
//! layer's DEBUG event of every early drop (`RUST_LOG` overrides the filter,
//! default `drain_on_drop=debug`).

mod common;

use std::time::{Duration, Instant};

use common::args::Args;
use common::client::{BenchClient, Kind, Read};
use common::proxy::LinkConfig;
use common::run::{Case, Measured, Outcome, Runtimes, measure_rounds, sequential_on};
use common::server::{Endpoint, Framing, Net};
use common::table::{Table, conns, count, ms, ratio};
use common::{BoxError, KIB};
use drain_on_drop::{DrainOnDropLayer, OriginSnapshot};

/// Target: adaptive at most 5% slower than the best fixed policy.
const VS_BEST_MAX: f64 = 1.05;
/// Target: adaptive at most 5% slower than the default fixed policy.
const VS_DEFAULT_MAX: f64 = 1.05;
/// Target where draining pays (RTT 100 ms, 1 MiB): adaptive at least this
/// much faster than the default fixed policy.
const PAYS_MIN_SPEEDUP: f64 = 1.3;

/// The policies compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Policy {
    ReadToEnd,
    DefaultFixed,
    BigFixed,
    Adaptive,
    HyperAlone,
}

impl Policy {
    const ALL: [Policy; 5] =
        [Policy::ReadToEnd, Policy::DefaultFixed, Policy::BigFixed, Policy::Adaptive, Policy::HyperAlone];

    fn label(self) -> &'static str {
        match self {
            Policy::ReadToEnd => "(a) read-to-end",
            Policy::DefaultFixed => "(b) default: 256 KiB, round-trip time",
            Policy::BigFixed => "(c) fixed 4 MiB, 1 s",
            Policy::Adaptive => "(d) adaptive",
            Policy::HyperAlone => "(e) hyper-util alone",
        }
    }

    fn layer(self) -> Option<DrainOnDropLayer> {
        match self {
            Policy::ReadToEnd | Policy::HyperAlone => None,
            Policy::DefaultFixed => Some(DrainOnDropLayer::new()),
            Policy::BigFixed => {
                Some(DrainOnDropLayer::new().max_bytes(4 << 20).max_time(Duration::from_secs(1)))
            }
            Policy::Adaptive => Some(DrainOnDropLayer::new().adaptive()),
        }
    }

    /// A fresh client. Every policy's connector is wrapped in an observer
    /// (which the adaptive mode needs to measure setup costs), so every
    /// policy pays the same.
    fn client(self, net: &Net) -> BenchClient {
        let kind = match self {
            Policy::ReadToEnd => Kind::ReadToEnd,
            Policy::HyperAlone => Kind::HyperAlone,
            Policy::DefaultFixed | Policy::BigFixed | Policy::Adaptive => Kind::Layer,
        };
        BenchClient::observed(kind, self.layer(), net)
    }

    /// The issue author's figures (their own proxy, 20 requests, 1 MiB
    /// unread, 100 Mbit/s shared link), in ms, by RTT in ms.
    fn reference(self, rtt_ms: u128, len: usize, n: usize, link: LinkConfig) -> Option<u32> {
        if len != 1024 * KIB || n != 20 || link.bits_per_second != 100_000_000 {
            return None;
        }
        match (self, rtt_ms) {
            (Policy::HyperAlone | Policy::DefaultFixed, 1) => Some(320),
            (Policy::HyperAlone | Policy::DefaultFixed, 100) => Some(6302),
            (Policy::BigFixed, 1) => Some(1102),
            (Policy::BigFixed, 100) => Some(4519),
            _ => None,
        }
    }
}

/// What else happens during a run, besides the policy's own requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Condition {
    /// Nothing: every body dropped unread.
    Plain,
    /// Another client downloads 4 MiB bodies back to back over the same
    /// shared link for the whole run (cross traffic).
    CrossTraffic,
    /// Every other body is read to the end 200 ms after its head (a proxy
    /// streaming to a slow client); the others are dropped.
    SlowReader,
    /// The first request goes to an endpoint that answers after 400 ms (and
    /// opens the connection); the others are fast and dropped.
    SlowEndpoint,
}

impl Condition {
    fn label(self) -> &'static str {
        match self {
            Condition::Plain => "-",
            Condition::CrossTraffic => "cross traffic",
            Condition::SlowReader => "slow reader",
            Condition::SlowEndpoint => "slow endpoint",
        }
    }
}

/// A policy's own sequential requests under `condition`, on a fresh
/// endpoint (server, proxy, link) of its own.
async fn conditioned_run(
    runtimes: &Runtimes,
    net: &Net,
    client: BenchClient,
    case: Case,
    condition: Condition,
    n: usize,
    each: impl FnMut(usize, Duration, &BenchClient),
) -> Result<Outcome, BoxError> {
    let endpoint = Endpoint::start(runtimes.server.handle(), net);
    let uri = endpoint.uri(case.len, case.framing);
    let cross = (condition == Condition::CrossTraffic).then(|| {
        let mut other = BenchClient::new(Kind::ReadToEnd, net);
        let big = endpoint.uri(4 * 1024 * KIB, Framing::ContentLength);
        tokio::spawn(async move { while other.get(big.clone(), Read::ToEnd).await.is_ok() {} })
    });
    if cross.is_some() {
        // Let the bulk transfer fill the link before the run starts.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let request = |i: usize| match condition {
        Condition::SlowEndpoint if i == 1 => {
            (endpoint.slow_uri(case.len, Duration::from_millis(400)), Read::ToEnd)
        }
        Condition::SlowReader if i.is_multiple_of(2) => {
            (uri.clone(), Read::ToEndAfter(Duration::from_millis(200)))
        }
        _ => (uri.clone(), case.read),
    };
    let outcome = sequential_on(&endpoint, client, n, request, each).await;
    if let Some(cross) = cross {
        cross.abort();
    }
    outcome
}

/// Whether `DRAIN_BENCH_TRACE` asks for per-request lines and the layer's
/// DEBUG events.
fn trace_from_env() -> bool {
    std::env::var("DRAIN_BENCH_TRACE").is_ok_and(|v| !v.is_empty() && v != "0")
}

fn install_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("drain_on_drop=debug"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_timer(tracing_subscriber::fmt::time::uptime())
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}

/// One run of `policy` (the `run`th): its outcome, and the adaptive
/// layer's estimates at its end.
#[allow(clippy::too_many_arguments)]
fn run_once(
    runtimes: &Runtimes,
    net: &Net,
    policy: Policy,
    case: Case,
    condition: Condition,
    n: usize,
    run: usize,
    trace: bool,
) -> Result<(Outcome, Vec<OriginSnapshot>), BoxError> {
    let client = policy.client(net);
    let layer = client.layer().cloned();
    let started = Instant::now();
    let each = |i: usize, latency: Duration, client: &BenchClient| {
        if !trace {
            return;
        }
        let counts = client.drains().map_or_else(String::new, |d| {
            format!(
                ", drained {} abandoned {} skipped {}, in flight {}",
                d.drained, d.abandoned, d.skipped, d.in_flight
            )
        });
        let budget = client
            .layer()
            .and_then(|l| l.origins().into_iter().next())
            .map_or_else(String::new, |o| format!(", {}", describe(&o)));
        eprintln!(
            "[{net}, {} KiB, {}, run {run}] request {i} at {} ms: {} ms, conns {}{counts}{budget}",
            case.len / KIB,
            policy.label(),
            ms(started.elapsed()),
            ms(latency),
            client.connections(),
        );
    };
    let outcome =
        runtimes.client.block_on(conditioned_run(runtimes, net, client, case, condition, n, each))?;
    let origins = layer.map(|l| l.origins()).unwrap_or_default();
    Ok((outcome, origins))
}

/// One origin's estimates on one line.
fn describe(o: &OriginSnapshot) -> String {
    let setup = o.setup_cost.map_or("-".to_string(), |d| format!("{} ms", ms(d)));
    let throughput = o.throughput.map_or("-".to_string(), |t| format!("{:.2} MB/s", t as f64 / 1e6));
    let budget = o.budget.map_or("fixed budgets".to_string(), |b| {
        format!("{:.1} KiB in {} ms", b.max_bytes() as f64 / 1024.0, ms(b.max_time()))
    });
    format!(
        "setup cost {setup}, throughput {throughput}, budget {budget} \
         (new connections {}, reused responses {})",
        o.new_connections, o.reused_responses
    )
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let trace = trace_from_env();
    if trace {
        install_tracing();
    }
    let began = Instant::now();
    let runtimes = Runtimes::new();
    let n = args.count(20, 8);
    let repeat = args.repeat(1);
    let link = LinkConfig::mbit(args.bandwidth_mbit.unwrap_or(LinkConfig::DEFAULT_MBIT));
    let (rtt1, rtt100) = (Duration::from_millis(1), Duration::from_millis(100));
    let all_cells = [
        (rtt1, 64 * KIB, Condition::Plain),
        (rtt1, 1024 * KIB, Condition::Plain),
        (rtt100, 64 * KIB, Condition::Plain),
        (rtt100, 1024 * KIB, Condition::Plain),
        (rtt100, 1024 * KIB, Condition::CrossTraffic),
        (rtt100, 64 * KIB, Condition::SlowReader),
        (rtt1, 1024 * KIB, Condition::SlowEndpoint),
    ];
    let cells: Vec<_> = if args.rtt_given {
        [64 * KIB, 1024 * KIB].map(|len| (args.rtt, len, Condition::Plain)).to_vec()
    } else {
        all_cells.to_vec()
    };

    println!(
        "# Adaptive budgets: {n} sequential HTTPS requests, Content-Length bodies dropped unread, \
         {link} (window {} MiB per connection and direction)",
        link.window >> 20
    );
    println!("{}", args.describe(repeat));
    println!(
        "ms = total time of the {n} requests (median run); conns = connections opened (connector count); \
         drained / abandoned / skipped = the layer's early drops. Each run of each policy has \
         its own client, pool, server and proxy. Reference = the issue author's figures with \
         their own proxy (20 requests, 1 MiB, 100 Mbit/s), not measured here.\n"
    );
    let mut table = Table::new(&[
        "RTT",
        "body",
        "condition",
        "policy",
        "ms",
        "runs min-max",
        "conns",
        "drained",
        "abandoned",
        "skipped",
        "reference ms (issue, their proxy)",
    ]);
    let mut figures = Table::new(&[
        "RTT",
        "body",
        "condition",
        "best fixed",
        "ms",
        "adaptive ms",
        "adaptive / best fixed (target <= 1.05)",
        "adaptive / default fixed (target <= 1.05)",
        "conns adaptive / default",
    ]);
    let mut estimates = Vec::new();
    let mut misses = Vec::new();
    {
        for (rtt, len, condition) in cells {
            let rtt = &rtt;
            let net = Net::tls_shared_link(*rtt, link);
            let case = Case { len, framing: Framing::ContentLength, read: Read::Unread };
            let results = measure_rounds(&Policy::ALL, repeat, |policy, run| {
                run_once(&runtimes, &net, policy, case, condition, n, run, trace)
            })?;
            for (policy, measured) in &results {
                let o = &measured.outcome;
                table.row(vec![
                    format!("{} ms", rtt.as_millis()),
                    format!("{} KiB", len / KIB),
                    condition.label().to_string(),
                    policy.label().to_string(),
                    ms(o.elapsed),
                    measured.spread(),
                    conns(o),
                    count(o, |d| d.drained),
                    count(o, |d| d.abandoned),
                    count(o, |d| d.skipped),
                    policy
                        .reference(rtt.as_millis(), len, n, link)
                        .map_or("-".to_string(), |r| r.to_string()),
                ]);
            }
            let of = |p: Policy| &results.iter().find(|(q, _)| *q == p).expect("every policy measured").1;
            let (default_m, big_m, adaptive_m) =
                (of(Policy::DefaultFixed), of(Policy::BigFixed), of(Policy::Adaptive));
            let (default, big, adaptive) =
                (default_m.outcome.elapsed, big_m.outcome.elapsed, adaptive_m.outcome.elapsed);
            let (best_policy, best) =
                if default <= big { (Policy::DefaultFixed, default) } else { (Policy::BigFixed, big) };
            let vs_best = ratio(adaptive, best);
            let vs_default = ratio(adaptive, default);
            // A miss by less than the runs' median absolute deviation is noted as such.
            let judge = |ratio: f64, target: f64, reference: &Measured| match (
                ratio <= target,
                adaptive_m.within_noise(reference, target),
            ) {
                (true, _) => "yes",
                (false, true) => "NO, within noise",
                (false, false) => "NO",
            };
            let cell = match condition {
                Condition::Plain => format!("RTT {} ms, {} KiB", rtt.as_millis(), len / KIB),
                c => format!("RTT {} ms, {} KiB, {}", rtt.as_millis(), len / KIB, c.label()),
            };
            let (default_conns, adaptive_conns) =
                (default_m.outcome.connections, adaptive_m.outcome.connections);
            if rtt.as_millis() == 100 && len == 1024 * KIB && ratio(default, adaptive) < PAYS_MIN_SPEEDUP {
                misses.push(format!(
                    "{cell}: default / adaptive {:.3} (target >= {PAYS_MIN_SPEEDUP})",
                    ratio(default, adaptive)
                ));
            }
            let conns_allowed = default_conns + default_conns.div_ceil(10);
            if matches!(condition, Condition::SlowReader | Condition::SlowEndpoint)
                && adaptive_conns > conns_allowed
            {
                misses.push(format!(
                    "{cell}: adaptive {adaptive_conns} connections, default {default_conns} (+10%)"
                ));
            }
            if vs_best > VS_BEST_MAX {
                let how = judge(vs_best, VS_BEST_MAX, of(best_policy));
                misses.push(format!("{cell}: adaptive / best fixed {vs_best:.3} ({how})"));
            }
            if vs_default > VS_DEFAULT_MAX {
                let how = judge(vs_default, VS_DEFAULT_MAX, default_m);
                misses.push(format!("{cell}: adaptive / default fixed {vs_default:.3} ({how})"));
            }
            figures.row(vec![
                format!("{} ms", rtt.as_millis()),
                format!("{} KiB", len / KIB),
                condition.label().to_string(),
                best_policy.label().split(' ').next().unwrap_or_default().to_string(),
                ms(best),
                ms(adaptive),
                format!("{vs_best:.3} ({})", judge(vs_best, VS_BEST_MAX, of(best_policy))),
                format!("{vs_default:.3} ({})", judge(vs_default, VS_DEFAULT_MAX, default_m)),
                format!("{adaptive_conns} / {default_conns}"),
            ]);
            for o in &adaptive_m.origins {
                estimates.push(format!("- {cell}: {}", describe(o)));
            }
        }
    }
    table.print();
    figures.print();
    println!(
        "best fixed = the faster of (b) and (c) in the cell. \"NO, within noise\": the medians miss \
         the target by less than the larger median absolute deviation of the two policies' runs.\n"
    );
    common::table::print_verdict(
        &misses,
        "Adaptive estimates at the end of each cell's median run (DrainStats::origins)",
        &estimates,
        began.elapsed(),
    );
    Ok(())
}
