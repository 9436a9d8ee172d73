//! Issue 3, table 3: 64 concurrent callers sharing one client (one pool),
//! 100 requests each, 64 KiB bodies dropped unread: connections opened,
//! requests per second, p50 and p99 latency, for hyper-util alone, with
//! `DrainOnDropLayer`, and a read-to-end control. A fourth, diagnostic row
//! reads each body to its end in a task the caller spawns (a hand-rolled
//! background drain without the layer), to tell the cost of draining in the
//! background from the cost of the layer.
//!
//! Three networks: plain HTTP on loopback (a new connection costs about as
//! much as a pool return: CPU-bound), and TLS through the latency proxy at
//! 2 ms and at `--rtt MS` (default 20 ms), where a new connection costs
//! three round trips.
//!
//! `cargo bench --bench concurrency [-- --rtt MS] [-- --quick] [-- --repeat K]`

mod common;

use std::time::Duration;

use common::KIB;
use common::args::Args;
use common::client::{Kind, Read};
use common::run::{Case, Runtimes};
use common::server::{Framing, Net};
use common::table::{Table, conns, drained, ms, verdict};

const CALLERS: usize = 64;
/// Target: the layer's requests per second no more than 5% below read-to-end's.
const RPS_TOLERANCE: f64 = 0.05;
/// Target: the layer opens at most 10% more connections than read-to-end.
const CONNS_TOLERANCE: f64 = 0.10;

fn main() {
    let args = Args::parse();
    let runtimes = Runtimes::new();
    let per_caller = args.count(100, 20);
    let repeat = args.repeat(1);
    let case = Case { len: 64 * KIB, framing: Framing::ContentLength, read: Read::Unread };
    let mut nets = vec![Net::Loopback, Net::tls(Duration::from_millis(2))];
    if args.rtt != Duration::from_millis(2) {
        nets.push(Net::tls(args.rtt));
    }

    println!(
        "# Concurrency: {CALLERS} callers x {per_caller} requests sharing one client, \
         64 KiB Content-Length bodies dropped unread"
    );
    println!("{}", args.describe(repeat));
    println!(
        "conns = connections opened (connector count); 2nd half = of those, opened after \
         half the requests had completed; latency = request sent to body dropped (or read, \
         for read-to-end). The last row of each network is a diagnostic, not one of the \
         three clients: the caller spawns a task reading each body to its end.\n"
    );
    let mut table =
        Table::new(&["network", "client", "conns", "2nd half", "req/s", "p50 ms", "p99 ms", "drained"]);
    let mut checks = Vec::new();
    for net in &nets {
        let kinds = [Kind::HyperAlone, Kind::Layer, Kind::ReadToEnd, Kind::SpawnedReadToEnd];
        let [alone, layer, control, spawned] =
            kinds.map(|kind| runtimes.concurrent(net, kind, case, CALLERS, per_caller, repeat));
        for (kind, o) in kinds.iter().zip([&alone, &layer, &control, &spawned]) {
            table.row(vec![
                net.to_string(),
                kind.label().to_string(),
                conns(o),
                o.second_half.to_string(),
                format!("{:.0}", o.requests_per_second()),
                ms(o.p50),
                ms(o.p99),
                drained(o),
            ]);
        }
        let rps = layer.requests_per_second() / control.requests_per_second() - 1.0;
        let conns_limit = (control.connections as f64 * (1.0 + CONNS_TOLERANCE)).floor() as usize;
        checks.push(format!(
            "- {net}: layer req/s {:+.1}% vs read-to-end (target >= -5%: {}); \
             layer conns {} vs read-to-end {} (target <= {conns_limit}: {})",
            rps * 100.0,
            verdict(rps >= -RPS_TOLERANCE),
            layer.connections,
            control.connections,
            verdict(layer.connections <= conns_limit),
        ));
    }
    table.print();
    for check in checks {
        println!("{check}");
    }
}
