//! No state of a layer or a runtime outlives the last service, response or
//! drain that uses it: runtimes and layers created and dropped over and over
//! leave the process with the file descriptors it had.
//!
//! A test binary of its own, whose tests take turns (`ONE_AT_A_TIME`), so
//! that no other test opens or closes descriptors while one counts them.

mod support;

use std::time::Duration;

use drain_on_drop::DrainOnDropLayer;
use tower::{Layer, Service, ServiceExt};

use support::*;

const CYCLES: usize = 20;

/// Held by each test while it counts.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Open file descriptors of this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("Linux /proc").count()
}

/// One cycle: a new current-thread runtime (an epoll and an eventfd of its
/// own), a new client, with or without a new layer, one response read to the
/// end and one dropped unread (drained), then everything dropped.
fn cycle(server: &RawServer, with_layer: bool) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (client, _) = client();
        if with_layer {
            let layer = DrainOnDropLayer::new().max_time(Duration::from_secs(30));
            let stats = layer.stats();
            let mut svc = layer.layer(client);
            let res = svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap();
            read_all(res.into_body()).await.unwrap();
            drop_unread(&mut svc, get(server.uri("/"))).await;
            settle(&stats, Duration::from_secs(30)).await;
            assert_eq!(stats.snapshot().drained, 1);
        } else {
            let mut svc = client;
            for _ in 0..2 {
                let res = svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap();
                read_all(res.into_body()).await.unwrap();
            }
        }
    });
}

#[test]
fn runtimes_and_layers_dropped_leave_no_file_descriptor_open() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server_rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let server = server_rt.block_on(RawServer::start(|_| content_length(1, 64 * KIB)));
    let settled = |what: &str, baseline: usize| {
        // The server closes its side of each connection when it reads the
        // client's FIN, on its own runtime: wait for it, with a deadline.
        let mut now = open_fds();
        let deadline = std::time::Instant::now() + SLACK;
        while now > baseline && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            now = open_fds();
        }
        assert!(now <= baseline, "{what}: {now} file descriptors open, {baseline} before");
    };
    // Without the layer first: whatever the process opens once (and keeps)
    // is in the baseline.
    for _ in 0..CYCLES {
        cycle(&server, false);
    }
    let baseline = open_fds();
    for _ in 0..CYCLES {
        cycle(&server, false);
    }
    settled("without the layer", baseline);
    for _ in 0..CYCLES {
        cycle(&server, true);
    }
    settled(&format!("after {CYCLES} runtime-and-layer cycles"), baseline);
}

/// A runtime that only dropped a body (fetched on another runtime, which
/// runs its drain) keeps none of its file descriptors once dropped, while
/// that drain still runs: the drain holds the runtime of the drop only for
/// the instant it is handed to its own (0.4 kept the drop's runtime as a
/// fallback until the drain ended: two descriptors, for as long as the
/// server stalled).
#[test]
fn a_runtime_that_only_dropped_a_body_keeps_no_file_descriptor_while_its_drain_runs() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let fetching =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let stalls = |_: &Head| vec![Step::Write([cl_head(4096), body_bytes(0, 512)].concat()), Step::Hang];
    let server = fetching.block_on(RawServer::start(stalls));
    let layer = DrainOnDropLayer::new().max_time(Duration::from_secs(30));
    let stats = layer.stats();
    let mut svc = layer.layer(client().0);
    let res =
        fetching.block_on(async { svc.ready().await.unwrap().call(get(server.uri("/"))).await.unwrap() });
    let baseline = open_fds();
    let dropping = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    assert!(open_fds() > baseline, "a runtime has descriptors of its own");
    dropping.block_on(async move { drop(res) });
    drop(dropping);
    assert_eq!(stats.snapshot().in_flight, 1, "the drain runs on, on the runtime that fetched the body");
    assert_eq!(open_fds(), baseline, "the runtime that only dropped the body left nothing open");
    drop(svc);
    drop(fetching);
}
