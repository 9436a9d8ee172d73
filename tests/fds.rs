//! No state of a layer or a runtime outlives the last service, response or
//! drain that uses it: runtimes and layers created and dropped over and over
//! leave the process with the file descriptors it had.
//!
//! A test binary of its own, with one test, so that no other test opens or
//! closes descriptors while it counts them.

mod support;

use std::time::Duration;

use drain_on_drop::DrainOnDropLayer;
use tower::{Layer, Service, ServiceExt};

use support::*;

const CYCLES: usize = 20;

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
