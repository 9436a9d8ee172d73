//! Issue 52, item 4: the keep-alive race on real HTTP/1.1 servers, side by
//! side. A pooled connection meets its server's idle timeout: a request
//! sent as the server closes the idle connection fails before the server
//! read it (`IncompleteMessage`, sometimes `ConnectionReset`).
//!
//! Servers, each with a 1 s idle timeout, started here on free ports of
//! 127.0.0.1 and stopped at the end of their turn
//! (`benches/common/h1servers.rs`): Node 20 (`keepAliveTimeout` 1000),
//! nginx (`keepalive_timeout 1s`), Go 1.27's net/http (`IdleTimeout` 1 s),
//! and where installed Apache 2.4 event (`KeepAliveTimeout 1`) and uvicorn
//! (`--timeout-keep-alive 1`). Each serves 64 KiB (content-length) to GET
//! and POST and records every request's unique id.
//!
//! Per server: its idle close measured with raw TCP probes (median of 3:
//! from the end of a response to its FIN), then trials: per trial a fresh
//! client sends request 1 (64 KiB dropped unread, or read to its end), then
//! request 2 (GET or POST) at the close + an offset from -5.5 to +5.5 ms;
//! 72 trials per client and method, staggered and run in parallel, clients
//! interleaved (`benches/common/keepalive.rs`). Clients: hyper-util alone
//! (body dropped; body read to its end), the README quick start's stack
//! with one layer shared by every trial on the server after it saw one idle
//! close of it, the same with `RetryRefusedLayer` above, first contact (a
//! fresh layer per trial), and Go 1.27.3's client (`goclient keepalive`).
//! Then the reuse check: request 2 at half the close, the stack against the
//! guide's old advice (`pool_idle_timeout` 500 ms).
//!
//! `cargo bench --bench keepalive` (about 1 min per server)
//!
//! - `KEEPALIVE_SERVERS=node,nginx` runs those servers only (names: node,
//!   nginx, go, apache, uvicorn);
//! - `KEEPALIVE_TRIALS=N` trials per client and method (default 72; 12
//!   with `--quick`); the reuse check runs min(N, 24).
//!
//! Missing servers are skipped, and the bench says why:
//! `bash benches/common/keepalive.sh` installs uvicorn in a venv under
//! target/, nginx and Apache with apt-get (as root), and runs
//! `bash benches/go.sh` (Go 1.27.3 from PyPI: Go's server and client).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::args::Args;
use common::h1servers::{H1Kind, H1Server};
use common::keepalive::{
    Cell, ClientKind, Close, Layers, Method, OFFSETS_US, Trial, evaluate, idle_close, plan, run_batch,
    stagger_for, summary_line, take_ids, warm_up,
};
use common::table::Table;
use common::{BoxError, go};

/// What one server's turn found.
struct ServerRun {
    kind: H1Kind,
    version: String,
    close: Close,
    stagger: Duration,
    /// Per shared layer (stack, stack + retry): connections and requests
    /// its observer counted in the warm-up.
    warm: Vec<(u64, u64)>,
    cells: BTreeMap<(ClientKind, Method), Cell>,
    reuse: BTreeMap<(ClientKind, Method), Cell>,
    /// What the shared layers hold at the end.
    layer_notes: Vec<String>,
    /// Why Go's client failed here, if it did.
    go_note: Option<String>,
    took: Duration,
}

fn servers_from_env() -> Result<Vec<H1Kind>, BoxError> {
    let Some(list) = std::env::var("KEEPALIVE_SERVERS").ok().filter(|v| !v.trim().is_empty()) else {
        return Ok(H1Kind::ALL.to_vec());
    };
    let mut kinds = Vec::new();
    for name in list.split(',').map(|n| n.trim().to_ascii_lowercase()).filter(|n| !n.is_empty()) {
        let kind = H1Kind::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| {
            let names: Vec<_> = H1Kind::ALL.iter().map(|k| k.name()).collect();
            format!("KEEPALIVE_SERVERS: no server {name:?} (names: {})", names.join(", "))
        })?;
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    Ok(kinds)
}

fn trials_from_env(args: &Args) -> Result<usize, BoxError> {
    match std::env::var("KEEPALIVE_TRIALS").ok().filter(|v| !v.trim().is_empty()) {
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("KEEPALIVE_TRIALS={v:?}: a whole number above 0").into()),
        },
        None => Ok(args.count(72, 12)),
    }
}

/// One server's turn: start it, measure its close, warm the shared layers
/// up, run the sweep, the reuse check and Go's client, read what the server
/// recorded.
fn run_server(
    rt: &tokio::runtime::Runtime,
    kind: H1Kind,
    trials: usize,
    reuse_trials: usize,
    go_bin: Option<&Path>,
) -> Result<ServerRun, BoxError> {
    let started = Instant::now();
    let server = H1Server::start(kind)?;
    let base = server.base_url();
    let close = rt.block_on(idle_close(server.addr()))?;
    let stagger = stagger_for(close.median);
    let layers = Layers::new();
    let warm = rt.block_on(warm_up(&layers, &base, close.median))?;

    let cells: Vec<(ClientKind, Method)> =
        ClientKind::SWEEP.iter().flat_map(|&c| Method::BOTH.map(|m| (c, m))).collect();
    let specs = plan(&cells, trials, stagger, close.median, &OFFSETS_US);
    let mut sweep = rt.block_on(run_batch(specs, &layers, &base));

    // Half the close: a connection idle that long is one the server keeps.
    let reuse_cells = [(ClientKind::Stack, Method::Get), (ClientKind::GuideTimeout, Method::Get)];
    let specs = plan(&reuse_cells, reuse_trials, stagger, close.median / 2, &[0]);
    let reuse = rt.block_on(run_batch(specs, &layers, &base));

    let go_note = match go_bin {
        Some(bin) => {
            let id_base = take_ids(2 * 2 * trials as u64);
            let methods = Method::BOTH.map(Method::as_str);
            match go::keepalive(bin, &base, close.median, &OFFSETS_US, &methods, trials, stagger, id_base) {
                Ok((_, go_trials)) => {
                    sweep.extend(go_trials.iter().map(Trial::from_go));
                    None
                }
                Err(e) => Some(format!("Go's client failed: {e}")),
            }
        }
        // Said once, at the top.
        None => None,
    };

    // nginx and Apache log a request once answered: let the last catch up.
    std::thread::sleep(Duration::from_millis(300));
    let seen = server.requests();
    let mut layer_notes = Vec::new();
    for (name, layer) in [("stack", &layers.stack), ("stack + retry", &layers.retry)] {
        let r = layer.stats().reuse();
        layer_notes.push(format!(
            "{name}'s shared layer: {} requests, {} on a reused connection, {} connections opened, {} \
             retired before their server's idle close, {} requests sent again",
            r.requests, r.reused, r.connections_opened, r.retired, r.sent_again
        ));
        for o in layer.origins() {
            layer_notes.push(format!(
                "  {}: idle timeout {:?}, retire after {:?}, {} idle closes seen, {} retired",
                o.origin, o.idle_timeout, o.retire_after, o.idle_closes, o.retired
            ));
        }
    }
    Ok(ServerRun {
        kind,
        version: server.version().to_string(),
        stagger,
        warm,
        cells: evaluate(&sweep, &seen),
        reuse: evaluate(&reuse, &seen),
        close,
        layer_notes,
        go_note,
        took: started.elapsed(),
    })
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn print_server(run: &ServerRun) {
    let c = &run.close;
    let probes: Vec<String> = c.probes.iter().map(|p| ms(*p)).collect();
    println!("## {}: {}\n", run.kind.label(), run.version);
    println!(
        "Idle close {} ms after a response (probes {} ms, spread {} ms), closed with {}; Keep-Alive: {}. \
         Trials {} ms apart. Warm-up (one idle close seen): {}. Took {:.1} s.",
        ms(c.median),
        probes.join(", "),
        ms(c.spread()),
        c.how,
        if c.keep_alive.is_empty() { "none" } else { &c.keep_alive },
        run.stagger.as_millis(),
        run.warm
            .iter()
            .zip(["stack's layer", "stack + retry's layer"])
            .map(|((conns, reqs), name)| format!("{name} {conns} connection, {reqs} request"))
            .collect::<Vec<_>>()
            .join("; "),
        run.took.as_secs_f64(),
    );
    if let Some(note) = &run.go_note {
        println!("{note}");
    }
    println!();
    let mut table = Table::new(&[
        "client",
        "method",
        "failed",
        "error kinds",
        "sent again",
        "processed twice",
        "failed, unseen by server",
        "connections per trial",
        "failures at offset (ms×n)",
    ]);
    for ((client, method), cell) in &run.cells {
        table.row(vec![
            client.label().to_string(),
            method.as_str().to_string(),
            format!("{} of {}", cell.failed, cell.trials),
            cell.kinds_text(" "),
            cell.sent_again.map_or("-".into(), |n| n.to_string()),
            cell.processed_twice.to_string(),
            cell.unseen.to_string(),
            format!("{:.2}", cell.per_trial()),
            cell.failed_at_text("×"),
        ]);
    }
    table.print();
    for note in &run.layer_notes {
        println!("{note}");
    }
    println!();
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let started = Instant::now();
    let kinds = servers_from_env()?;
    let trials = trials_from_env(&args)?;
    let reuse_trials = trials.min(24);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let go_bin = go::client();

    println!("# Keep-alive race: request 2 at each server's idle close, HTTP/1.1 on loopback\n");
    println!(
        "Per trial a fresh client sends request 1 (GET, 64 KiB dropped unread, or read to its end), then \
         request 2 (GET or POST, a unique id) at the server's measured idle close + an offset from -5.5 to \
         +5.5 ms (1 ms steps); {trials} trials per client and method, staggered and run in parallel, clients \
         interleaved. The stack's layers are shared by every trial on a server after one idle close seen; \
         first contact has a fresh layer per trial. failed: request 2 failed; sent again: request 2 went \
         more than once (a counting layer below the retry, Go's trace; `-`: not counted, hyper-util's own \
         resend of what its pool saw closed is invisible); processed twice: the server recorded request 2's \
         id more than once; unseen: failed and never recorded by the server; connections per trial: the \
         trial's connector's count (Go: its trace's dials).\n"
    );
    match &go_bin {
        Some(bin) => println!("Go client: {}", bin.display()),
        None => println!("{}", go::missing_note()),
    }
    let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
    println!("Servers asked for: {} (KEEPALIVE_SERVERS)\n", names.join(", "));

    let mut runs = Vec::new();
    let mut skipped = Vec::new();
    for kind in kinds {
        if let Some(why) = kind.missing() {
            println!("## {}: skipped, {why}\n", kind.label());
            skipped.push((kind, why));
            continue;
        }
        match run_server(&rt, kind, trials, reuse_trials, go_bin.as_deref()) {
            Ok(run) => {
                print_server(&run);
                runs.push(run);
            }
            Err(e) => {
                let why = format!("could not run: {e}");
                println!("## {}: {why}\n", kind.label());
                skipped.push((kind, why));
            }
        }
    }

    // Totals per client over every server that ran.
    let mut totals: BTreeMap<(ClientKind, Method), Cell> = BTreeMap::new();
    for run in &runs {
        for (key, cell) in &run.cells {
            totals.entry(*key).or_default().add(cell);
        }
    }
    let servers: Vec<&str> = runs.iter().map(|r| r.kind.name()).collect();
    println!("## Total over {} servers ({})\n", runs.len(), servers.join(", "));
    let mut table = Table::new(&[
        "client",
        "GET failed",
        "POST failed",
        "GET sent again",
        "POST sent again",
        "processed twice (GET/POST)",
        "failed, unseen by server",
        "connections per trial (GET/POST)",
    ]);
    let mut clients: Vec<ClientKind> = totals.keys().map(|k| k.0).collect();
    clients.dedup();
    for client in clients {
        let get = totals.get(&(client, Method::Get)).cloned().unwrap_or_default();
        let post = totals.get(&(client, Method::Post)).cloned().unwrap_or_default();
        let again = |c: &Cell| c.sent_again.map_or("-".into(), |n| n.to_string());
        table.row(vec![
            client.label().to_string(),
            format!("{} of {}", get.failed, get.trials),
            format!("{} of {}", post.failed, post.trials),
            again(&get),
            again(&post),
            format!("{}/{}", get.processed_twice, post.processed_twice),
            (get.unseen + post.unseen).to_string(),
            format!("{:.2}/{:.2}", get.per_trial(), post.per_trial()),
        ]);
    }
    table.print();

    println!(
        "## Reuse check: request 2 (GET) at half the server's idle close, {reuse_trials} trials per cell \
         (1 connection per trial: reuse kept)\n"
    );
    let mut table = Table::new(&["server", "request 2 after", "client", "failed", "connections per trial"]);
    for run in &runs {
        for ((client, _), cell) in &run.reuse {
            table.row(vec![
                run.kind.name().to_string(),
                format!("{} ms", ms(run.close.median / 2)),
                client.label().to_string(),
                format!("{} of {}", cell.failed, cell.trials),
                format!("{:.2}", cell.per_trial()),
            ]);
        }
    }
    table.print();

    if !skipped.is_empty() {
        println!("Skipped servers:");
        for (kind, why) in &skipped {
            println!("- {}: {why}", kind.name());
        }
        println!();
    }

    let mut lines = Vec::new();
    for run in &runs {
        for ((client, method), cell) in &run.cells {
            lines.push(summary_line(run.kind.name(), &run.close, *client, *method, cell));
        }
        for ((client, method), cell) in &run.reuse {
            let line = summary_line(run.kind.name(), &run.close, *client, *method, cell);
            lines.push(line.replacen("keepalive-cell", "keepalive-reuse", 1));
        }
    }
    println!("Machine-readable, one line per cell:");
    for line in &lines {
        println!("{line}");
    }
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/keepalive-summary.txt");
    match std::fs::write(&file, lines.join("\n") + "\n") {
        Ok(()) => println!("(also in {})", file.display()),
        Err(e) => println!("(could not write {}: {e})", file.display()),
    }
    println!("\nbench took {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
