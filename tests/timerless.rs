//! A runtime without a time driver (built without `enable_time`; hyper-util's
//! client works there): early drops that have to wait drain and keep their
//! time budget, and nothing panics. 0.4 found the missing timer by letting
//! tokio's `sleep_until` panic and catching it: a process built with
//! `panic = "abort"` died (SIGABRT), and even with unwinding the panic hook
//! ran. The scenario runs in a child process (this test binary again) whose
//! panic hook aborts, as `panic = "abort"` does: any panic, caught or not,
//! kills it, and the parent sees it.

mod support;

use std::process::Command;
use std::time::Duration;

use drain_on_drop::{DrainOnDropLayer, Reason};
use tower::{Layer, Service, ServiceExt};

use support::*;

const CHILD: &str = "DRAIN_ON_DROP_TIMERLESS_CHILD";

/// The parent: runs the scenario in a child process and expects it to exit
/// cleanly, having passed.
#[test]
fn a_runtime_without_a_time_driver_drains_and_never_panics_even_under_abort() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "scenario_on_a_runtime_without_a_time_driver", "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(CHILD, "1")
        .output()
        .expect("the test binary runs again");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the child should pass without a panic; it ended with {:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
}

/// The child: a drain that has to wait for the server ends at the end of
/// the body, and one whose server stalls ends on its time budget, both on
/// a current-thread runtime without a time driver; the counters are read
/// after `wait_idle`, which needs no timer either.
#[test]
#[ignore = "run by its parent test in a child process whose panics abort"]
fn scenario_on_a_runtime_without_a_time_driver() {
    assert!(std::env::var_os(CHILD).is_some(), "run by a_runtime_without_a_time_driver_... only");
    std::panic::set_hook(Box::new(|info| {
        eprintln!("panic in the child: {info}");
        std::process::abort();
    }));
    // Servers on a runtime of their own, with timers (their scripts sleep).
    let server_rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let later = server_rt.block_on(RawServer::start(|_| {
        vec![
            Step::Write([cl_head(8 * KIB), body_bytes(1, KIB)].concat()),
            Step::Sleep(Duration::from_millis(50)),
            Step::Write(body_bytes(1, 8 * KIB)[KIB..].to_vec()),
        ]
    }));
    let stalling = server_rt.block_on(RawServer::start(|_| vec![Step::Write(cl_head(4096)), Step::Hang]));

    let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
    for (server, max_time, reason) in
        [(&later, SECONDS, Reason::EndOfBody), (&stalling, Duration::from_millis(300), Reason::OverTime)]
    {
        let layer = DrainOnDropLayer::new().max_time(max_time);
        let stats = layer.stats();
        rt.block_on(async {
            let mut svc = layer.layer(client().0);
            let res = svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap();
            drop(res);
            assert!(stats.wait_idle(max_time + SLACK).await, "the drain ends: {stats:?}");
        });
        let s = stats.snapshot();
        assert_eq!(s.count(reason), 1, "{s:?}");
        assert_eq!(s.drained + s.abandoned + s.skipped + s.failed, 1, "{s:?}");
    }
}
