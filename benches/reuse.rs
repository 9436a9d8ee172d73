//! Issue 3, table 1: new connections and total time for 100 sequential
//! requests whose bodies are dropped unread or after one frame, for
//! hyper-util alone, with `DrainOnDropLayer`, and a read-to-end control,
//! over plain HTTP on loopback. Go 1.27's published figures are printed
//! beside them.
//!
//! `cargo bench --bench reuse [-- --quick] [-- --repeat K (default 5)]`

mod common;

use common::KIB;
use common::args::Args;
use common::client::{Kind, Read};
use common::run::{Case, Runtimes};
use common::server::{Framing, Net};
use common::table::Table;
use common::table::{conns, drained, ms};

/// Go 1.27's published new connections per 100 sequential requests with the
/// body dropped unread (not measured here).
fn go_published(kib: usize) -> Option<usize> {
    match kib {
        1 | 16 => Some(2),
        64 => Some(4),
        128 => Some(10),
        256 => Some(16),
        257 | 512 => Some(100),
        _ => None,
    }
}

fn main() {
    let args = Args::parse();
    let runtimes = Runtimes::new();
    let n = args.count(100, 20);
    let repeat = args.repeat(5);
    let sizes = [1, 16, 64, 128, 256, 257, 512, 1024];

    println!("# Connection reuse: {n} sequential requests per cell, plain HTTP/1.1 on loopback");
    println!("{}", args.describe(repeat));
    println!(
        "conns = new connections counted at the client's connector (the server's accept count \
         is shown only when it differs); ms = total time of the {n} requests; drained = \
         early drops the layer drained / early drops. Every client in every cell has its own \
         pool and its own server.\n"
    );
    let mut table = Table::new(&[
        "body",
        "framing",
        "read before drop",
        "hyper-util alone: conns",
        "ms",
        "with layer: conns",
        "ms",
        "drained",
        "read-to-end: conns",
        "ms",
        "Go 1.27 conns per 100 (published, not measured here)",
    ]);
    for kib in sizes {
        for framing in [Framing::ContentLength, Framing::Chunked] {
            for read in [Read::Unread, Read::OneFrame] {
                let case = Case { len: kib * KIB, framing, read };
                let [alone, layer, control] =
                    Kind::ALL.map(|kind| runtimes.sequential(&Net::Loopback, kind, case, n, repeat));
                let go = match (framing, read, go_published(kib)) {
                    (Framing::ContentLength, Read::Unread, Some(go)) => go.to_string(),
                    _ => "-".to_string(),
                };
                table.row(vec![
                    format!("{kib} KiB"),
                    framing.to_string(),
                    read.to_string(),
                    conns(&alone),
                    ms(alone.elapsed),
                    conns(&layer),
                    ms(layer.elapsed),
                    drained(&layer),
                    conns(&control),
                    ms(control.elapsed),
                    go,
                ]);
            }
        }
    }
    table.print();
    println!(
        "Go 1.27 figures: Go's own published measurement (Content-Length bodies dropped \
         unread, 100 sequential requests), not measured here; shown on the rows they describe."
    );
}
