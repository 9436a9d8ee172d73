//! Sequential reuse: the headline promise. Bodies dropped early within the
//! budgets are drained and the connection is reused.

mod support;

use std::fmt::Write as _;
use std::time::Duration;

use drain_on_drop::{DrainOnDropLayer, DrainSnapshot};
use support::*;
use tower::{Service, ServiceBuilder, ServiceExt};

const N: usize = 100;

#[derive(Clone, Copy, Debug)]
enum Framing {
    ContentLength,
    Chunked,
}

#[derive(Clone, Copy, Debug)]
enum Read {
    Unread,
    OneFrame,
    /// The control: the caller reads every body to its end.
    ToEnd,
}

/// Serves `GET /?len=N&seed=S` with the given framing (chunks of 16 KiB).
async fn server(framing: Framing) -> RawServer {
    RawServer::start(move |head| {
        let len = query(&head.path, "len").unwrap() as usize;
        let seed = query(&head.path, "seed").unwrap_or(0);
        match framing {
            Framing::ContentLength => content_length(seed, len),
            Framing::Chunked => chunked(seed, len, 16 * KIB),
        }
    })
    .await
}

/// Runs `N` sequential requests, dropping each body as `read` says, and
/// returns (connections opened, snapshot).
async fn run(len: usize, framing: Framing, read: Read, layer: DrainOnDropLayer) -> (usize, DrainSnapshot) {
    let server = server(framing).await;
    let (client, connector) = client();
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().layer(layer).service(client);
    for i in 0..N {
        let req = get(server.uri(&format!("/?len={len}&seed={i}")));
        let res = svc.ready().await.unwrap().call(req).await.unwrap();
        assert_eq!(res.status(), 200);
        let mut body = res.into_body();
        match read {
            Read::Unread => {}
            Read::OneFrame => {
                read_one_frame(&mut body).await.expect("at least one frame");
            }
            Read::ToEnd => assert_eq!(read_all(&mut body).await.unwrap(), body_bytes(i as u64, len)),
        }
        drop(body);
    }
    let snap = settle(&stats, Duration::ZERO).await;
    let disabled = snap.drained == 0 && snap.skipped > 0;
    let expected_skips = if disabled { snap.skipped } else { 0 };
    assert_eq!(
        (snap.abandoned, snap.skipped, snap.failed),
        (0, expected_skips, 0),
        "{len} bytes {framing:?} {read:?}: every early drop within budget is drained: {snap:?}"
    );
    assert_eq!(connector.count(), server.accepted(), "the server saw every connection the client opened");
    (connector.count(), snap)
}

/// Runs every case with and without the layer, prints the table, and returns
/// the cases where the layer opened more than `limit(case)` connections.
async fn table(runtime: &str, limit: impl Fn(Framing) -> usize) -> Vec<String> {
    let mut table = format!(
        "{runtime} runtime, {N} sequential requests, new connections:\n\
         | unread body | framing | read before drop | draining disabled (= hyper-util alone) | with DrainOnDropLayer | read-to-end control | drained | bytes drained |\n\
         |---|---|---|---|---|---|---|---|\n"
    );
    let mut failures = Vec::new();
    for kib in [1, 16, 64, 128, 256] {
        for framing in [Framing::ContentLength, Framing::Chunked] {
            for read in [Read::Unread, Read::OneFrame] {
                // Draining disabled: the body is dropped at once, as with hyper-util alone.
                let (alone, _) = run(kib * KIB, framing, read, DrainOnDropLayer::new().max_bytes(0)).await;
                let (conns, snap) = run(kib * KIB, framing, read, DrainOnDropLayer::new()).await;
                let (control, _) = run(kib * KIB, framing, Read::ToEnd, DrainOnDropLayer::new()).await;
                writeln!(
                    table,
                    "| {kib} KiB | {framing:?} | {read:?} | {alone} | {conns} | {control} | {} | {} |",
                    snap.drained, snap.bytes_drained
                )
                .unwrap();
                if conns > limit(framing) {
                    failures.push(format!("{kib} KiB {framing:?} {read:?}: {conns} connections"));
                }
            }
        }
    }
    println!("{table}");
    failures
}

/// On a current-thread runtime every case stays at hyper-util's floor of 2
/// (its checkout races a dial while the first drain runs).
#[tokio::test]
async fn dropped_bodies_within_budget_reuse_the_connection() {
    let failures = table("current_thread", |_| 2).await;
    assert!(failures.is_empty(), "more than 2 connections per {N} requests: {failures:?}");
}

/// On a multi-thread runtime hyper-util's checkout races a dial whenever no
/// connection is idle at that instant, so even the read-to-end control opens
/// 2 to 3 connections when the machine is busy, and a drain of many chunked
/// frames still running when the request after next checks out adds one or
/// two more: measured 2 to 5 (Go 1.27 publishes 16 for 256 KiB). The bound
/// here is loose enough for a loaded 2-core CI machine and still far from
/// the 100 of hyper-util alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_bodies_within_budget_reuse_the_connection_multi_thread() {
    let failures = table("multi_thread (2 workers)", |_| 8).await;
    assert!(failures.is_empty(), "too many connections per {N} requests: {failures:?}");
}
