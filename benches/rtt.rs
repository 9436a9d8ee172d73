//! Issue 3, table 2: 100 sequential HTTPS requests through a loopback proxy
//! that adds a round-trip time (20 ms by default), bodies dropped unread:
//! total time and connections for hyper-util alone, with `DrainOnDropLayer`,
//! and a read-to-end control.
//!
//! `cargo bench --bench rtt [-- --rtt MS] [-- --quick] [-- --repeat K]`

mod common;

use common::KIB;
use common::args::Args;
use common::client::{Kind, Read};
use common::run::{Case, Runtimes};
use common::server::{Framing, Net};
use common::table::Table;
use common::table::{conns, drained, ms, ratio, verdict};

/// Target: the layer costs at most 5% more time than reading to the end.
const LAYER_VS_READ_MAX: f64 = 1.05;
/// Target: hyper-util alone takes at least 2.5 times as long as the layer.
const ALONE_VS_LAYER_MIN: f64 = 2.5;

fn main() {
    let args = Args::parse();
    let runtimes = Runtimes::new();
    let n = args.count(100, 20);
    let repeat = args.repeat(1);
    let net = Net::tls(args.rtt);
    let rtt_ms = args.rtt.as_secs_f64() * 1e3;

    println!("# Round trip: {n} sequential HTTPS requests, bodies dropped unread ({net})");
    println!("{}", args.describe(repeat));
    println!(
        "Theory: a request on a pooled connection costs 1 RTT; on a new one 3 RTT (TCP \
         handshake, TLS 1.3 handshake, request): about {:.0} ms and {:.0} ms for {n} requests.\n",
        n as f64 * rtt_ms,
        3.0 * n as f64 * rtt_ms
    );
    let mut table = Table::new(&[
        "body",
        "framing",
        "hyper-util alone: conns",
        "ms",
        "with layer: conns",
        "ms",
        "drained",
        "read-to-end: conns",
        "ms",
        "layer / read-to-end (target <= 1.05)",
        "alone / layer (target >= 2.5)",
    ]);
    let mut misses = Vec::new();
    for kib in [16, 64] {
        for framing in [Framing::ContentLength, Framing::Chunked] {
            let case = Case { len: kib * KIB, framing, read: Read::Unread };
            let [alone, layer, control] =
                Kind::ALL.map(|kind| runtimes.sequential(&net, kind, case, n, repeat));
            let overhead = ratio(layer.elapsed, control.elapsed);
            let speedup = ratio(alone.elapsed, layer.elapsed);
            for (ok, what) in [
                (overhead <= LAYER_VS_READ_MAX, "layer / read-to-end"),
                (speedup >= ALONE_VS_LAYER_MIN, "alone / layer"),
            ] {
                if !ok {
                    misses.push(format!("{kib} KiB {framing}: {what}"));
                }
            }
            table.row(vec![
                format!("{kib} KiB"),
                framing.to_string(),
                conns(&alone),
                ms(alone.elapsed),
                conns(&layer),
                ms(layer.elapsed),
                drained(&layer),
                conns(&control),
                ms(control.elapsed),
                format!("{overhead:.3} ({})", verdict(overhead <= LAYER_VS_READ_MAX)),
                format!("{speedup:.2} ({})", verdict(speedup >= ALONE_VS_LAYER_MIN)),
            ]);
        }
    }
    table.print();
    if misses.is_empty() {
        println!("Every target reached.");
    } else {
        println!("Targets missed: {}", misses.join("; "));
    }
}
