//! Sequential reuse: the headline promise. Bodies dropped early within the
//! budgets are drained and the connection is reused.

mod support;

use std::fmt::Write as _;

use drain_on_drop::{DrainOnDropLayer, DrainSnapshot, Reason};
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
/// returns (connections opened, snapshot once every drain ended).
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
    let snap = settle(&stats, SECONDS).await;
    // A dial that lost hyper-util's checkout race completes in the background.
    wait_for("the server to accept every connection the client opened", SLACK, || {
        connector.count() == server.accepted()
    })
    .await;
    (connector.count(), snap)
}

/// Runs every case with draining disabled (hyper-util alone), the default
/// budgets, a time budget of [`SECONDS`] and the read-to-end control, prints
/// the table, and returns what broke.
///
/// The default budgets' columns document what the crate does as shipped:
/// on a busy machine some 50 ms drains run out of time (`over_time`), and
/// the connection counts of every column move with hyper-util's checkout
/// race, so they are reported, not asserted. Asserted, on any machine:
/// nothing within the byte budget is skipped, failed or given up for its
/// bytes; with seconds of time budget every early drop is drained; and
/// where hyper alone loses most connections, the layer keeps at least half
/// of them ([`assert_keeps_half`]).
async fn table(runtime: &str) -> Vec<String> {
    let mut table = format!(
        "{runtime} runtime, {N} sequential requests, new connections:\n\
         | unread body | framing | read before drop | draining disabled (= hyper-util alone) | default budgets (256 KiB, 50 ms) | default: drained, over_time | max_time {SECONDS:?} | read-to-end control | bytes drained ({SECONDS:?}) |\n\
         |---|---|---|---|---|---|---|---|---|\n"
    );
    let mut failures = Vec::new();
    for kib in [1, 16, 64, 128, 256] {
        for framing in [Framing::ContentLength, Framing::Chunked] {
            for read in [Read::Unread, Read::OneFrame] {
                let case = format!("{kib} KiB {framing:?} {read:?}");
                let len = kib * KIB;
                // Draining disabled: the body is dropped at once, as with hyper-util alone.
                let (alone, off) = run(len, framing, read, DrainOnDropLayer::new().max_bytes(0)).await;
                let (default, d) = run(len, framing, read, DrainOnDropLayer::new()).await;
                let (seconds, s) = run(len, framing, read, DrainOnDropLayer::new().max_time(SECONDS)).await;
                let (control, c) = run(len, framing, Read::ToEnd, DrainOnDropLayer::new()).await;
                writeln!(
                    table,
                    "| {kib} KiB | {framing:?} | {read:?} | {alone} | {default} | {}, {} | {seconds} | {control} | {} |",
                    d.drained,
                    d.count(Reason::OverTime),
                    s.bytes_drained
                )
                .unwrap();
                if (off.drained, off.abandoned, off.failed) != (0, 0, 0) {
                    failures.push(format!("{case}, draining disabled: every early drop skipped: {off:?}"));
                }
                // Within the byte budget, only a slow machine's clock can end
                // a 50 ms drain early.
                if (d.skipped, d.failed, d.abandoned) != (0, 0, d.count(Reason::OverTime)) {
                    failures.push(format!(
                        "{case}, default budgets: nothing skipped, failed or over bytes: {d:?}"
                    ));
                }
                if (s.abandoned, s.skipped, s.failed) != (0, 0, 0) {
                    failures.push(format!("{case}, max_time {SECONDS:?}: every early drop drained: {s:?}"));
                }
                if c != DrainSnapshot::default() {
                    failures.push(format!("{case}, read to the end: nothing to count: {c:?}"));
                }
                // Where hyper alone loses most connections; elsewhere (bodies
                // hyper finishes by itself) the counts are the checkout
                // race's, and `small_bodies_cost_no_more_connections_than_hyper_alone`
                // compares them.
                if alone >= N / 2 && seconds > keeps_half_bound(alone, control) {
                    failures.push(format!(
                        "{case}: max_time {SECONDS:?} opened {seconds} connections, read-to-end {control}, \
                         hyper alone {alone}: the layer keeps at least half of what hyper alone loses"
                    ));
                }
            }
        }
    }
    println!("{table}");
    failures
}

/// On a current-thread runtime the layer stays at hyper-util's floor on a
/// quiet machine (2: its checkout races a dial while the first drain runs).
#[tokio::test]
async fn dropped_bodies_within_budget_reuse_the_connection() {
    let failures = table("current_thread").await;
    assert!(failures.is_empty(), "{failures:#?}");
}

/// On a multi-thread runtime hyper-util's checkout races a dial whenever no
/// connection is idle at that instant, so even the read-to-end control opens
/// 2 to 3 connections when the machine is busy, and a drain of many chunked
/// frames still running when the request after next checks out adds one or
/// two more: measured 2 to 5 on a quiet machine (Go 1.27 publishes 16 for
/// 256 KiB), more on a busy one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_bodies_within_budget_reuse_the_connection_multi_thread() {
    let failures = table("multi_thread (2 workers)").await;
    assert!(failures.is_empty(), "{failures:#?}");
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
            let s = settle(&stats, SECONDS).await;
            assert_eq!(s.drained, N as u64, "split {split}: every small body drained: {s:?}");
        }
    }
    wait_for("the server to accept every connection the client opened", SLACK, || {
        connector.count() == server.accepted()
    })
    .await;
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
            let layer = DrainOnDropLayer::new().max_time(SECONDS);
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
