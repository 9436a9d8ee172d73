//! Issue 3, table 1: new connections and total time for 100 sequential
//! requests whose bodies are dropped unread or after one frame, for
//! hyper-util alone, with `DrainOnDropLayer`, and a read-to-end control,
//! over plain HTTP on loopback; and beside them Go 1.27.3's net/http client
//! (`goclient seq`, built by `bash benches/go.sh`), measured in the same run
//! against a server of its own, as every client.
//!
//! `cargo bench --bench reuse [-- --quick] [-- --repeat K (default 5)]`

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::args::Args;
use common::client::{Kind, Read};
use common::run::{Case, Runtimes};
use common::server::{Endpoint, Framing, Net};
use common::table::Table;
use common::table::{conns, drained, ms};
use common::{BoxError, KIB, go};

/// How long the server's accept count must stay the same to be final.
const STABLE: Duration = Duration::from_millis(50);
/// How long to wait at most for it.
const CATCH_UP: Duration = Duration::from_secs(1);

/// One run of the Go client.
struct GoOutcome {
    /// Connections the server accepted.
    accepted: usize,
    /// The count was stable within [`CATCH_UP`].
    settled: bool,
    /// As Go reported it: from the first request to the last response handled.
    elapsed: Duration,
}

/// One run of the Go client: `n` sequential requests to a fresh loopback
/// server, bodies closed unread or after one read (for `Read::OneFrame`);
/// the connections the server accepted once its count has caught up.
fn go_once(runtimes: &Runtimes, bin: &Path, case: Case, n: usize) -> Result<GoOutcome, BoxError> {
    let endpoint = Endpoint::start(runtimes.server.handle(), &Net::Loopback);
    let uri = endpoint.uri(case.len, case.framing);
    let run = go::seq(bin, &uri, n, case.read == Read::OneFrame)?;
    if let Some(error) = run.first_error {
        return Err(format!("Go: {} of {} requests failed, the first: {error}", run.failed, run.sent).into());
    }
    let start = Instant::now();
    let (mut accepted, mut since) = (endpoint.accepted(), Instant::now());
    let settled = loop {
        if since.elapsed() >= STABLE {
            break true;
        }
        if start.elapsed() >= CATCH_UP {
            break false;
        }
        std::thread::sleep(Duration::from_millis(5));
        let now = endpoint.accepted();
        if now != accepted {
            (accepted, since) = (now, Instant::now());
        }
    };
    Ok(GoOutcome { accepted, settled, elapsed: run.elapsed })
}

/// `repeat` runs of the Go client; the cells of the median run by time:
/// its connections (with the runs' range when they differ, and a mark when
/// a count did not settle) and its time.
fn go_cells(
    runtimes: &Runtimes,
    bin: &Path,
    case: Case,
    n: usize,
    repeat: usize,
) -> Result<[String; 2], BoxError> {
    let mut runs =
        (0..repeat.max(1)).map(|_| go_once(runtimes, bin, case, n)).collect::<Result<Vec<_>, _>>()?;
    runs.sort_by_key(|r| r.elapsed);
    let median = &runs[runs.len() / 2];
    let mut cell = median.accepted.to_string();
    let (min, max) =
        runs.iter().fold((usize::MAX, 0), |(lo, hi), r| (lo.min(r.accepted), hi.max(r.accepted)));
    if min != max {
        cell.push_str(&format!(" (runs {min}-{max})"));
    }
    if runs.iter().any(|r| !r.settled) {
        cell.push_str(" (unsettled)");
    }
    Ok([cell, ms(median.elapsed)])
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let runtimes = Runtimes::new();
    let n = args.count(100, 20);
    let repeat = args.repeat(5);
    let sizes = [1, 16, 64, 128, 256, 257, 512, 1024];

    println!("# Connection reuse: {n} sequential requests per cell, plain HTTP/1.1 on loopback");
    println!("{}", args.describe(repeat));
    let go_client = go::client();
    match &go_client {
        Some(bin) => println!("Go client: {}", bin.display()),
        None => println!("{}", go::missing_note()),
    }
    println!(
        "conns = new connections counted at the client's connector (the server's accept count \
         is shown only when it differs; Go's: as the server counted them, the runs' range beside \
         it when they differ); ms = total time of the {n} requests; drained = early drops the \
         layer drained / early drops. Every client in every cell has its own pool and its own \
         server. Go: its default transport over HTTP/1.1, bodies closed unread or after one Read \
         of up to 16 KiB (\"one frame\"), the median run by time.\n"
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
        "Go 1.27.3: conns",
        "ms",
    ]);
    for kib in sizes {
        for framing in [Framing::ContentLength, Framing::Chunked] {
            for read in [Read::Unread, Read::OneFrame] {
                let case = Case { len: kib * KIB, framing, read };
                let [alone, layer, control] =
                    Kind::ALL.map(|kind| runtimes.sequential(&Net::Loopback, kind, case, n, repeat));
                let [go_conns, go_ms] = match &go_client {
                    Some(bin) => go_cells(&runtimes, bin, case, n, repeat)?,
                    None => ["-".to_string(), "-".to_string()],
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
                    go_conns,
                    go_ms,
                ]);
            }
        }
    }
    table.print();
    Ok(())
}
