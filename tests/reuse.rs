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

/// A raw server answering `Content-Length: 1 KiB` with the head and body in
/// one write, or in two.
async fn small_body_server(split: bool) -> RawServer {
    RawServer::start(move |_| {
        let mut steps = content_length(1, KIB);
        if split {
            let Step::Write(bytes) = steps.remove(0) else { unreachable!() };
            let head = bytes.len() - KIB;
            steps = vec![Step::Write(bytes[..head].to_vec()), Step::Write(bytes[head..].to_vec())];
        }
        steps
    })
    .await
}

/// `N` sequential requests, bodies dropped unread, through hyper-util alone
/// or through the layer; the connections the server accepted.
async fn small_bodies_dropped(split: bool, layer: Option<DrainOnDropLayer>) -> usize {
    let server = small_body_server(split).await;
    let (client, connector) = client();
    match layer {
        None => {
            let mut svc = client;
            for _ in 0..N {
                drop_unread(&mut svc, get(server.uri("/"))).await;
            }
        }
        Some(layer) => {
            let stats = layer.stats();
            let mut svc = ServiceBuilder::new().layer(layer).service(client);
            for _ in 0..N {
                drop_unread(&mut svc, get(server.uri("/"))).await;
            }
            let s = settle(&stats, Duration::ZERO).await;
            assert_eq!(s.drained, N as u64, "split {split}: every small body drained: {s:?}");
        }
    }
    assert_eq!(connector.count(), server.accepted());
    server.accepted()
}

/// A small body that arrives with its head is one hyper finishes by itself
/// at the drop; the layer must not cost a connection more there, nor when
/// head and body come in separate writes (where hyper alone closes the
/// connection whenever the body is not there yet at the drop). The drains
/// get seconds: a slow machine must not turn a drain into a closed
/// connection here.
///
/// Both clients race hyper-util's checkout against the return of the last
/// connection to the pool, so either opens 1 to 3 connections per 100
/// requests on a multi-thread runtime, whichever is tested, in no order:
/// over 20 runs of each, interleaved, hyper alone summed 33 and 36 (one
/// write), the layer 33 and 38. The sums of 5 runs therefore differ by a
/// few either way, and the bound allows one connection per run: it fails
/// when the layer costs a connection in more than one run in five beyond
/// that race, or closes a connection that hyper alone keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_bodies_cost_no_more_connections_than_hyper_alone() {
    const RUNS: usize = 5;
    for split in [false, true] {
        let (mut alone, mut with_layer) = (Vec::new(), Vec::new());
        for _ in 0..RUNS {
            alone.push(small_bodies_dropped(split, None).await);
            let layer = DrainOnDropLayer::new().max_time(Duration::from_secs(30));
            with_layer.push(small_bodies_dropped(split, Some(layer)).await);
        }
        let (a, l) = (alone.iter().sum::<usize>(), with_layer.iter().sum::<usize>());
        println!(
            "head and body in {} write(s): hyper alone {alone:?} = {a}, layer {with_layer:?} = {l}",
            1 + split as usize
        );
        assert!(
            l <= a + RUNS,
            "split {split}: the layer opened {l} connections in {RUNS} runs of {N}, hyper alone {a}"
        );
    }
}
