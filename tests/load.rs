//! Load: a flood of early drops of stalled bodies, issued as fast as
//! possible from many tasks. The cap on running drains holds, every request
//! completes, every drain ends, every drop is counted once, and memory stays
//! flat.
//!
//! `cargo test --test load -- --nocapture` runs 10,000 drops (about 2 s in
//! debug on 2 cores) and prints the figures; `DRAIN_LOAD_DROPS=N` changes
//! the number. The 100,000-drop soak:
//! `cargo test --release --test load -- --ignored --nocapture`.

mod support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use drain_on_drop::{DrainOnDropLayer, Reason};
use support::*;
use tower::ServiceBuilder;

const CALLERS: usize = 64;
const CAP: usize = 64;
const MAX_TIME: Duration = Duration::from_millis(50);

/// A field of `/proc/self/status`, in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}

/// `Content-Length: 4096`, 512 bytes, then nothing: every drain stalls.
fn stalled(_: &Head) -> Vec<Step> {
    let mut first = b"HTTP/1.1 200 OK\r\ncontent-length: 4096\r\n\r\n".to_vec();
    first.extend(body_bytes(0, 512));
    vec![Step::Write(first), Step::Hang]
}

async fn flood(total: usize) {
    let server = RawServer::start(stalled).await;
    let (client, connector) = client();
    let layer = DrainOnDropLayer::new().max_time(MAX_TIME).max_concurrent_drains(CAP);
    let stats = layer.stats();
    let svc = ServiceBuilder::new().layer(layer).service(client);

    // Sample in_flight on a plain thread for the whole run.
    let sampler = Sampler::start(stats.clone());

    let hwm_before = status_kib("VmHWM");
    let started = Instant::now();
    // Five rounds; the resident set after the first is the baseline.
    let mut rss = Vec::new();
    for _ in 0..5 {
        let per_caller = total / 5 / CALLERS;
        let extra = total / 5 % CALLERS;
        let mut callers = Vec::new();
        for c in 0..CALLERS {
            let mut svc = svc.clone();
            let uri = server.uri("/stall");
            let n = per_caller + usize::from(c < extra);
            callers.push(tokio::spawn(async move {
                for _ in 0..n {
                    drop_unread(&mut svc, get(uri.clone())).await;
                }
            }));
        }
        for c in callers {
            c.await.expect("no caller panics");
        }
        settle(&stats, MAX_TIME).await;
        let o = server.open.clone();
        wait_for("the server to see every connection of the round closed", 2 * SLACK, || {
            o.load(Ordering::SeqCst) == 0
        })
        .await;
        rss.push(status_kib("VmRSS"));
    }
    let took = started.elapsed();
    let max_in_flight = sampler.stop();
    let hwm_after = status_kib("VmHWM");
    let s = stats.snapshot();
    println!(
        "{total} early drops of stalled bodies from {CALLERS} tasks, cap {CAP}: {took:?}; \
         max in_flight seen {max_in_flight}; VmHWM {hwm_before} KiB before, {hwm_after} KiB after; \
         VmRSS after each round {rss:?} KiB; connections {}; {s:?}",
        connector.count()
    );
    assert!(max_in_flight <= CAP as u64, "in_flight never exceeds the cap {CAP}: saw {max_in_flight}");
    assert_eq!(s.in_flight, 0, "every drain ended");
    assert_eq!(
        s.drained + s.abandoned + s.skipped + s.failed,
        total as u64,
        "every early drop counted exactly once: {s:?}"
    );
    assert_eq!(
        (s.drained, s.failed, s.count(Reason::DeclaredOverBudget)),
        (0, 0, 0),
        "stalled bodies are never drained and never fail: {s:?}"
    );
    // Each drop first reads the 512 bytes hyper holds; one the cap refuses
    // then gives up (`cannot_wait`), or is skipped if it found nothing yet.
    let refused = s.count(Reason::Saturated) + s.count(Reason::CannotWait);
    assert_eq!(
        s.abandoned + s.skipped,
        s.count(Reason::OverTime) + refused,
        "drains that ran ended on the time budget, the cap refused the rest: {s:?}"
    );
    assert!(s.count(Reason::OverTime) > 0, "drains ran, and ended on the time budget: {s:?}");
    // Whether the flood outran the cap (`refused` > 0) depends on how many
    // drops this machine issues within one 50 ms drain, so it is printed,
    // not asserted: a busy machine may never reach the cap here. That the
    // cap, once reached, refuses the drops beyond it is asserted on any
    // machine by `tests/adversarial/concurrency.rs`.
    println!("refused by the cap: {refused} of {total}");
    assert!(
        s.bytes_drained <= 512 * (s.count(Reason::OverTime) + s.count(Reason::CannotWait)),
        "a skipped drop read nothing: {s:?}"
    );
    let growth = rss[4].saturating_sub(rss[0]);
    assert!(growth < 16 * 1024, "the resident set stays flat after the first round: {rss:?} KiB");
}

/// 10,000 drops take about 2 s in debug on 2 cores. `DRAIN_LOAD_DROPS=N`
/// changes the number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flood_of_10000_early_drops_stays_within_the_cap_and_flat() {
    let total = std::env::var("DRAIN_LOAD_DROPS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    flood(total).await;
}

/// 100,000 connections in about 20 s: more than the ephemeral port range
/// holds in TIME_WAIT, so it relies on the kernel reusing TIME_WAIT ports
/// for loopback (`net.ipv4.tcp_tw_reuse` 1 or 2, Linux's default is 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "heavy soak: 100,000 connections; run with --ignored"]
async fn soak_of_100000_early_drops_stays_within_the_cap_and_flat() {
    flood(100_000).await;
}
