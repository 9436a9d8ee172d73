//! Interop: the layer against real servers that the tests start themselves,
//! on free ports of 127.0.0.1 (issue 10, items 4 to 6). `docs/INTEROP.md`
//! has the servers, their configs and the measured tables.
//!
//! ```sh
//! cargo test -p drain-on-drop-stacks --features interop --test interop -- --nocapture
//! INTEROP_RUNS=5 cargo test -p drain-on-drop-stacks --features interop --test interop -- --nocapture   # spread over 5 runs
//! ```
//!
//! - nginx (Debian's package): static files (Content-Length, sendfile) and
//!   the same files with `gzip on` (chunked, compressed on the fly);
//! - Node `http.createServer` (`server.js`): several `res.write()` calls
//!   (chunked), one `res.end()` with Content-Length, an endless SSE stream,
//!   and its keep-alive timeout;
//! - uvicorn + starlette (`asgi_app.py`): `StreamingResponse` (chunked, the
//!   final `0\r\n\r\n` in its own write) and `Response` (Content-Length),
//!   bound as `uvicorn app --port N` does (TCP_NODELAY) and as
//!   `uvicorn --workers N` does (no TCP_NODELAY).
//!
//! Each cell runs the layer with its default budgets (reported, with issue
//! 10's bound on them: with the layer, new connections ≤ hyper-util alone,
//! and ≤ read-to-end + 1 where it drained) and with a time budget of 30 s,
//! on which every run of every cell asserts what holds on any machine:
//! every early drop is drained or decided by the byte budget, and where the
//! layer drained every early drop and hyper alone loses most connections,
//! the layer keeps at least half of them against read-to-end (`uvicorn
//! --workers`: the outcomes only, see `cells::Bound`). Every table is
//! printed before the test fails, with the cells that broke.
//!
//! Environment: `INTEROP_RUNS=K` runs every cell K times (default 5; tables
//! per run, and medians for the reported bound); `INTEROP_CELLS=a,b` runs
//! only the cells whose name contains one of the parts;
//! `INTEROP_RUNTIME=current_thread` swaps the runtime;
//! `INTEROP_TRACE=<EnvFilter>` prints tracing events; `INTEROP_KEEP=1` keeps
//! nginx's prefix (its access log) in the temporary directory;
//! `INTEROP_NGINX`, `INTEROP_NODE`, `INTEROP_PYTHON` name the binaries.
//!
//! The feature `interop` only enables this target, which needs nginx, node
//! and python3 with uvicorn and starlette (`.ci/run` installs them). Without
//! them its tests fail; they never skip.
//!
//! The tests run one at a time (a lock), each on a 2-worker multi-thread
//! runtime: they measure connections on a 2-core machine, and the servers
//! run on the same cores.

#[path = "../../../tests/support/mod.rs"]
mod support;

mod cells;
mod h2;
mod keep_alive;
mod servers;
mod sse;

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use cells::{Bound, Framing, Target, matrix};
use servers::Server;
use sse::SseClient;
use support::KIB;

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `test` on a fresh 2-worker runtime, after every other test of this
/// binary is done with the machine.
fn serially<F: Future>(test: F) -> F::Output {
    let _serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    trace_if_asked();
    // INTEROP_RUNTIME=current_thread, to compare with the default.
    let runtime = match std::env::var("INTEROP_RUNTIME").as_deref() {
        Ok("current_thread") => tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap(),
        _ => tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap(),
    };
    runtime.block_on(test)
}

/// `INTEROP_TRACE=hyper_util=trace,drain_on_drop=debug` (an `EnvFilter`)
/// prints those events on stderr, to see why a connection was not reused.
fn trace_if_asked() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    if let Ok(filter) = std::env::var("INTEROP_TRACE") {
        ONCE.call_once(|| {
            tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(std::io::stderr)
                .init();
        });
    }
}

/// What `cells::matrix` asserts (see `cells::Bound`), in every run of
/// every cell.
fn assert_cells_hold(server: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{server}: with a 30 s time budget, every early drop is drained or decided by the byte \
         budget, and where the layer drained every early drop, it keeps at least half of the connections hyper alone loses \
         against read-to-end; broken {} time(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn nginx_static_files_dropped_early_cost_no_more_connections_with_the_layer() {
    serially(async {
        let nginx = Server::nginx().await;
        let targets = [Target {
            name: "nginx static",
            path: |len| format!("/static/{}k.bin", len / KIB),
            framing: Framing::ContentLength,
            gzip: false,
            sizes_kib: &[1, 64, 257],
        }];
        let failures = matrix(&nginx, &targets, Bound::KeepsHalf).await;
        assert_cells_hold("nginx static", &failures);
    });
}

#[test]
fn nginx_gzip_on_the_fly_dropped_early_costs_no_more_connections_with_the_layer() {
    serially(async {
        let nginx = Server::nginx().await;
        let targets = [Target {
            name: "nginx gzip",
            path: |len| format!("/gz/{}k.bin", len / KIB),
            framing: Framing::Chunked,
            gzip: true,
            sizes_kib: &[1, 64, 256, 257],
        }];
        let failures = matrix(&nginx, &targets, Bound::KeepsHalf).await;
        assert_cells_hold("nginx gzip", &failures);
    });
}

#[test]
fn node_chunked_and_content_length_dropped_early_cost_no_more_connections_with_the_layer() {
    serially(async {
        let node = Server::node(&[]).await;
        let targets = [
            Target {
                name: "node chunked",
                path: |len| format!("/chunked?len={len}"),
                framing: Framing::Chunked,
                gzip: false,
                sizes_kib: &[1, 64, 257],
            },
            Target {
                name: "node content-length",
                path: |len| format!("/cl?len={len}"),
                framing: Framing::ContentLength,
                gzip: false,
                sizes_kib: &[1, 64, 257],
            },
        ];
        let failures = matrix(&node, &targets, Bound::KeepsHalf).await;
        assert_cells_hold("node", &failures);
    });
}

#[test]
fn uvicorn_streaming_and_content_length_dropped_early_cost_no_more_connections_with_the_layer() {
    serially(async {
        let uvicorn = Server::uvicorn(&[]).await;
        let targets = [
            Target {
                name: "uvicorn StreamingResponse",
                path: |len| format!("/stream?len={len}"),
                framing: Framing::Chunked,
                gzip: false,
                sizes_kib: &[1, 64, 257],
            },
            Target {
                name: "uvicorn Response",
                path: |len| format!("/cl?len={len}"),
                framing: Framing::ContentLength,
                gzip: false,
                sizes_kib: &[1, 64, 257],
            },
        ];
        let failures = matrix(&uvicorn, &targets, Bound::KeepsHalf).await;
        assert_cells_hold("uvicorn", &failures);
    });
}

/// `uvicorn --workers N` (and `--reload`) binds in the parent with
/// `Config.bind_socket`, whose socket has protocol 0, and asyncio sets
/// TCP_NODELAY only on IPPROTO_TCP sockets: every write after the head waits
/// for the client's delayed ACK (about 40 ms) under Nagle.
#[test]
fn uvicorn_workers_sockets_without_nodelay_dropped_early_cost_no_more_connections_with_the_layer() {
    serially(async {
        let uvicorn = Server::uvicorn(&["--sockets-without-nodelay"]).await;
        let targets = [
            Target {
                name: "uvicorn --workers StreamingResponse",
                path: |len| format!("/stream?len={len}"),
                framing: Framing::Chunked,
                gzip: false,
                sizes_kib: &[1, 64],
            },
            Target {
                name: "uvicorn --workers Response",
                path: |len| format!("/cl?len={len}"),
                framing: Framing::ContentLength,
                gzip: false,
                sizes_kib: &[1, 64],
            },
        ];
        let failures = matrix(&uvicorn, &targets, Bound::OutcomesOnly).await;
        assert_cells_hold("uvicorn --workers", &failures);
    });
}

#[test]
fn node_sse_cancelled_after_three_events_is_closed_at_once_by_default_and_never_costs_more_connections() {
    serially(async {
        let node = Server::node(&[]).await;
        let all = sse::table(&node).await;
        let runs_of = |client| &all.iter().find(|(c, _)| *c == client).unwrap().1;
        let alone = runs_of(SseClient::Alone);
        for (i, (layer, draining)) in
            runs_of(SseClient::Layer).iter().zip(runs_of(SseClient::LayerDrainingStreams)).enumerate()
        {
            let alone = alone[i].connections;
            assert!(layer.connections <= alone, "run {i}: layer {} ≤ alone {alone}", layer.connections);
            assert!(
                draining.connections <= alone,
                "run {i}: layer draining streams {} ≤ alone {alone}",
                draining.connections
            );
            let (layer, draining) = (layer.snapshot.unwrap(), draining.snapshot.unwrap());
            assert_eq!(
                (layer.skipped, layer.drained, layer.abandoned),
                (sse::STREAMS as u64, 0, 0),
                "run {i}: by default every cancelled event stream is skipped, no drain task: {layer:?}"
            );
            assert_eq!(
                (draining.abandoned, draining.drained),
                (sse::STREAMS as u64, 0),
                "run {i}: a drained event stream never ends, every drain is given up: {draining:?}"
            );
        }
    });
}

#[test]
fn node_keep_alive_a_pool_idle_timeout_below_the_servers_never_sends_on_a_closing_connection() {
    serially(async {
        // Node 20's default is 5000 ms; 1000 ms keeps the test short.
        let node = Server::node(&["--keep-alive-timeout", "1000"]).await;
        let (close_after, keep_alive) = keep_alive::idle_close(&node).await;
        assert_eq!(keep_alive, "timeout=1", "Node advertises its keepAliveTimeout in seconds");
        assert!(
            (Duration::from_millis(900)..Duration::from_secs(5)).contains(&close_after),
            "Node closes an idle connection about keepAliveTimeout + 1 s after the response: {close_after:?}"
        );
        let idle_timeout = Duration::from_millis(500);
        println!(
            "\n{} ({}): keepAliveTimeout 1000 ms, `Keep-Alive: {keep_alive}`, idle connection closed \
             {close_after:?} after the response (median of 3 probes); second request sent at that instant + offset",
            node.name, node.version
        );
        for run in 1..=cells::runs() {
            let (with, without) = keep_alive::trials(&node, close_after, idle_timeout).await;
            println!(
                "{}",
                keep_alive::report(&format!("run {run}, pool_idle_timeout {idle_timeout:?}"), &with)
            );
            println!("{}", keep_alive::report(&format!("run {run}, hyper-util default (90 s)"), &without));
            for trial in &with {
                assert_eq!(
                    (&trial.result, trial.connections),
                    (&Ok(()), 2),
                    "with pool_idle_timeout {idle_timeout:?} below the server's, the idle connection is \
                     never used at the boundary: a new one carries the request ({trial:?})"
                );
            }
        }
    });
}

/// Issue 52's sweep on real servers with 1 s idle timeouts (Node's
/// `keepAliveTimeout` 1000, which it says and exceeds by a second; nginx's
/// `keepalive_timeout 1s` and uvicorn's `--timeout-keep-alive 1`, which say
/// nothing): second requests sent around each server's idle close through
/// the README's HTTP/1 stack, whose layer saw one idle close of that server
/// first, as a long-lived service has. None fails, GET or POST: each
/// connection idle for nearly the server's timeout is retired, its request
/// sent on a new connection before a byte of it was written. The same
/// stack with `IdleTimeout::Ignored` (0.9.0) is printed beside it.
#[test]
fn the_readme_stack_loses_no_request_to_a_real_servers_idle_close() {
    serially(async {
        let servers = [
            (Server::node(&["--keep-alive-timeout", "1000"]).await, "/cl?len=65536"),
            (Server::nginx_keepalive("1s").await, "/static/64k.bin"),
            (Server::uvicorn(&["--timeout-keep-alive", "1"]).await, "/cl?len=65536"),
        ];
        let mut broken = Vec::new();
        for (server, path) in &servers {
            let (close_after, said) = keep_alive::idle_close_of(server, path).await;
            let layer = drain_on_drop::DrainOnDropLayer::new();
            keep_alive::warm_up(server, path, &layer, close_after).await;
            let sweep = keep_alive::stack_sweep(server, path, close_after, &layer).await;
            let origin = &layer.origins()[0];
            let control = drain_on_drop::DrainOnDropLayer::new()
                .server_idle_timeout(drain_on_drop::IdleTimeout::Ignored);
            let ignored = keep_alive::stack_sweep(server, path, close_after, &control).await;
            println!(
                "\n{} ({}): closes idle connections {close_after:?} after a response, says `Keep-Alive: {said}`; \
                 learned {:?}, retires after {:?}\n  README stack: {} of {} failed {:?}; {:?}\n  same, \
                 IdleTimeout::Ignored: {} failed {:?}; {:?}",
                server.name,
                server.version,
                origin.idle_timeout,
                origin.retire_after,
                sweep.failed.len(),
                2 * keep_alive::TRIALS,
                sweep.failed,
                sweep.reuse,
                ignored.failed.len(),
                ignored.failed,
                ignored.reuse,
            );
            if !sweep.failed.is_empty() {
                broken.push(format!("{}: {:?}", server.name, sweep.failed));
            }
        }
        assert!(broken.is_empty(), "no request fails once the layer saw one idle close: {broken:#?}");
    });
}

/// nginx's graceful GOAWAY after `keepalive_requests` (100) on HTTP/2: the
/// README's HTTP/2 stack fails no request (it sends again what nginx refused
/// past its last stream id), on the new connections each GOAWAY calls for;
/// hyper-util alone fails those (printed: how many depends on what was in
/// flight at each GOAWAY).
#[test]
fn nginx_http2_graceful_goaway_after_keepalive_requests_fails_no_request_through_the_readme_stack() {
    serially(async {
        let server = Server::nginx().await;
        let run = h2::graceful_goaway(&server).await;
        println!(
            "{} over h2c, keepalive_requests 100, 16 callers x {}: hyper-util alone {} failed ({:?}); the \
             README's stack {} failed on {} connections",
            server.version,
            h2::REQUESTS,
            run.alone.failed,
            run.alone.kinds,
            run.stack.failed,
            run.stack_connections
        );
        assert!(
            run.alone.kinds.keys().all(|k| k.contains("GoAway")),
            "hyper-util alone fails only requests above a GOAWAY's last stream id: {:?}",
            run.alone.kinds
        );
        assert_eq!(
            (run.stack.sent, run.stack.failed),
            (h2::REQUESTS, 0),
            "the README's stack fails nothing: {:?}",
            run.stack
        );
        assert!(
            run.stack_connections >= (h2::REQUESTS / 100) as u64,
            "nginx ended a connection every 100 requests (else this test tried nothing): {} connections",
            run.stack_connections
        );
    });
}
