//! Framing and budgets: what is drained and reused, what is skipped or given
//! up, and how each early drop is counted.
//!
//! Most early drops tell the same story: drop the body (unread or partly
//! read), count it under one reason, then reuse the connection if it was
//! drained or see it closed if not. Those are rows of the tables below,
//! checked by [`check`]. The tests after the tables pin what a row cannot:
//! how long a drop takes, what is counted while a drain runs, several
//! requests on one connection, a client without a pool.

use std::time::{Duration, Instant};

use drain_on_drop::{DrainOnDropLayer, Outcome, Reason};
use http_body::Body as _;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::harness::*;
use crate::support::*;

const DEFAULT_MAX_BYTES: u64 = 256 * KIB as u64;

/// The byte budget of the rows at its edge.
const BUDGET: u64 = 16 * KIB as u64;

type Script = Box<dyn Fn(&Head) -> Vec<Step> + Send + Sync>;

/// How many data bytes the drain must have read.
#[derive(Clone, Copy, Debug)]
enum Drained {
    /// Exactly the body's length less what the caller read before the drop.
    Rest(u64),
    /// Between these two, inclusive (a drain given up mid-body).
    Between(u64, u64),
}

/// One early drop of `GET /bad` and how it must be counted. A drop counted
/// [`Reason::EndOfBody`] must leave the connection to the next request; any
/// other must close it.
struct Case {
    what: &'static str,
    layer: DrainOnDropLayer,
    /// The layer's time budget, for [`Rig::settle`].
    max_time: Duration,
    /// The request says `Connection: close`.
    close_request: bool,
    /// Data bytes the caller reads before dropping the body (0: unread).
    read: usize,
    script: Script,
    reason: Reason,
    drained: Drained,
}

/// A row with the default byte budget and a [`GENEROUS`] time budget.
fn row(
    what: &'static str,
    reason: Reason,
    drained: Drained,
    script: impl Fn(&Head) -> Vec<Step> + Send + Sync + 'static,
) -> Case {
    Case {
        what,
        layer: DrainOnDropLayer::new().max_bytes(DEFAULT_MAX_BYTES).max_time(GENEROUS),
        max_time: GENEROUS,
        close_request: false,
        read: 0,
        script: Box::new(script),
        reason,
        drained,
    }
}

impl Case {
    fn max_bytes(mut self, max_bytes: u64) -> Self {
        self.layer = self.layer.max_bytes(max_bytes);
        self
    }

    fn max_time(mut self, max_time: Duration) -> Self {
        self.layer = self.layer.max_time(max_time);
        self.max_time = max_time;
        self
    }

    /// Another layer, whose time budget is at most [`GENEROUS`].
    fn layer(mut self, layer: DrainOnDropLayer) -> Self {
        self.layer = layer;
        self
    }

    fn read(mut self, bytes: usize) -> Self {
        self.read = bytes;
        self
    }

    fn close_request(mut self) -> Self {
        self.close_request = true;
        self
    }
}

/// Runs one row on a rig of its own.
async fn check(case: Case) {
    let Case { what, layer, max_time, close_request, read, script, reason, drained } = case;
    let mut rig = Rig::with(layer, max_time, client(), script).await;
    let mut req = get(rig.server.uri("/bad"));
    if close_request {
        req.headers_mut().insert(http::header::CONNECTION, "close".parse().unwrap());
    }
    let res = rig.try_send(req).await.unwrap_or_else(|e| panic!("{what}: the response head: {e:?}"));
    assert_eq!(res.status(), 200, "{what}: the caller sees the final response");
    let first = conn(&res);
    let mut body = res.into_body();
    let was_read = if read == 0 { 0 } else { read_bytes(&mut body, read).await };
    assert!(was_read >= read, "{what}: the caller read {was_read} of the {read} bytes it wanted");
    drop(body);
    if reason.outcome() == Outcome::Skipped {
        let s = rig.stats.snapshot();
        assert_eq!(counted(&s), Counted::one(reason), "{what}: skipped in the drop itself, no drain: {s:?}");
    }
    rig.settle().await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::one(reason), "{what}: {s:?}");
    match drained {
        Drained::Rest(len) => assert_eq!(
            s.bytes_drained,
            len - was_read as u64,
            "{what}: the drain reads exactly what the caller left"
        ),
        Drained::Between(low, high) => assert!(
            (low..=high).contains(&s.bytes_drained),
            "{what}: drained {} bytes, expected {low}..={high}",
            s.bytes_drained
        ),
    }
    if reason == Reason::EndOfBody {
        rig.next_reuses(1, first).await;
        assert_eq!(rig.connector.count(), 1, "{what}: one dial for two requests");
        assert_eq!(rig.server.accepted(), 1, "{what}: the server saw one connection");
    } else {
        rig.wait_server_closed(what).await;
        assert_ne!(rig.next_is_clean(1).await, first, "{what}: not reused");
        assert_eq!(rig.server.accepted(), 2, "{what}: the next request came on a fresh connection");
    }
}

/// One request's response carrying `body` under a `Content-Length` head.
fn cl_response(seed: u64, len: usize) -> Vec<u8> {
    cat(&[&cl_head(len), &body_bytes(seed, len)])
}

#[tokio::test]
async fn bodies_within_the_budgets_are_drained_and_the_connection_reused() {
    use Drained::Rest;
    let kib = KIB as u64;
    let drained = Reason::EndOfBody;
    let rows = [
        row("1 KiB Content-Length, unread", drained, Rest(kib), |_| content_length(7, KIB)),
        // Far more than hyper drains by itself: without the layer, every
        // request costs a connection.
        row("64 KiB chunked in 4 KiB chunks, unread", drained, Rest(64 * kib), |_| {
            chunked(7, 64 * KIB, 4 * KIB)
        }),
        row("1 MiB Content-Length under a 2 MiB byte budget", drained, Rest(MIB as u64), |_| {
            content_length(1, MIB)
        })
        .max_bytes(2 * MIB as u64),
        row("64 KiB Content-Length, one frame read", drained, Rest(64 * kib), |_| {
            content_length(3, 64 * KIB)
        })
        .read(1),
        row("chunked, a single chunk", drained, Rest(8 * kib), |_| chunked(5, 8 * KIB, 8 * KIB)),
        // The frame that crosses the budget is the last data: the drain reads
        // one frame more, waits for the end marker, and finishes the body.
        row(
            "chunked, one byte over the budget, the end marker 100 ms later",
            drained,
            Rest(BUDGET + 1),
            |_| {
                vec![
                    Step::Write(CHUNKED_HEAD.to_vec()),
                    Step::Chunks { seed: 7, len: BUDGET as usize + 1, chunk: KIB },
                    Step::Sleep(Duration::from_millis(100)),
                    Step::Write(b"0\r\n\r\n".to_vec()),
                ]
            },
        )
        .max_bytes(BUDGET),
        row("chunked, 2000 chunks of one byte", drained, Rest(2000), |_| {
            vec![Step::Write(cat(&[CHUNKED_HEAD, &one_byte_chunks(9, 2000), b"0\r\n\r\n"]))]
        }),
        // Every data byte was delivered but the caller dropped the body
        // before seeing its end: hyper's chunked body cannot tell, so the
        // drop is early and the drain reads only the terminating chunk.
        row("chunked, every data byte read, the last chunk not", drained, Rest(3000), |_| {
            vec![
                Step::Write(CHUNKED_HEAD.to_vec()),
                Step::Chunks { seed: 2, len: 3000, chunk: 1000 },
                Step::Sleep(Duration::from_millis(30)),
                Step::Write(b"0\r\n\r\n".to_vec()),
            ]
        })
        .read(3000),
        row("trickling in, one byte every 2 ms, within the time budget", drained, Rest(20), |_| {
            let mut steps = vec![Step::Write(cl_head(20))];
            for b in body_bytes(4, 20) {
                steps.push(Step::Sleep(Duration::from_millis(2)));
                steps.push(Step::Write(vec![b]));
            }
            steps
        }),
        row("Content-Length of exactly the byte budget", drained, Rest(BUDGET), |_| {
            content_length(7, BUDGET as usize)
        })
        .max_bytes(BUDGET),
        row("chunked, exactly the byte budget", drained, Rest(BUDGET), |_| chunked(7, BUDGET as usize, KIB))
            .max_bytes(BUDGET),
        // A time budget too large for an `Instant` means no deadline, not a
        // panic.
        row("no deadline: a time budget of Duration::MAX", drained, Rest(64 * kib), |_| {
            chunked(10, 64 * KIB, 4 * KIB)
        })
        .max_time(Duration::MAX),
        row("HTTP/1.0 with keep-alive", drained, Rest(4 * kib), |_| {
            let head = b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 4096\r\n\r\n";
            vec![Step::Write(cat(&[head, &body_bytes(12, 4 * KIB)]))]
        }),
        // Trailers carry no data bytes; the drain consumes them.
        row("chunked with trailers", drained, Rest(20 * kib), |_| {
            vec![
                Step::Write(
                    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: x-sum\r\n\r\n".to_vec(),
                ),
                Step::Chunks { seed: 17, len: 20 * KIB, chunk: 4 * KIB },
                Step::Write(b"0\r\nx-sum: 42\r\nx-other: yes\r\n\r\n".to_vec()),
            ]
        }),
        row("all data read, the trailers arriving after the drop", drained, Rest(2 * kib), |_| {
            vec![
                Step::Write(CHUNKED_HEAD.to_vec()),
                Step::Chunks { seed: 17, len: 2 * KIB, chunk: KIB },
                Step::Sleep(Duration::from_millis(20)),
                Step::Write(b"0\r\nx-sum: 42\r\n\r\n".to_vec()),
            ]
        })
        .read(2 * KIB),
        row("100 and 103 before the final response", drained, Rest(8 * kib), |_| {
            let informational = b"HTTP/1.1 100 Continue\r\n\r\n\
                                  HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n";
            vec![Step::Write(cat(&[informational, &cl_response(18, 8 * KIB)]))]
        }),
    ];
    for case in rows {
        check(case).await;
    }
}

#[tokio::test]
async fn bodies_past_a_budget_are_abandoned_and_the_connection_closed() {
    use Drained::Between;
    let kib = KIB as u64;
    let rows = [
        // Frames are at most one 4 KiB chunk: the drain stops at the frame
        // after the one that crossed the budget.
        row(
            "chunked, 64 KiB over a 16 KiB budget",
            Reason::OverBytes,
            Between(BUDGET + 1, BUDGET + 8 * kib),
            |_| chunked(6, 64 * KIB, 4 * KIB),
        )
        .max_bytes(BUDGET),
        row("3000 chunks of one byte, a 1000-byte budget", Reason::OverBytes, Between(1001, 1002), |_| {
            vec![Step::Write(cat(&[CHUNKED_HEAD, &one_byte_chunks(9, 3000), b"0\r\n\r\n"]))]
        })
        .max_bytes(1000),
        // The drain cannot ask hyper for less than a frame: one read of
        // hyper's buffer (8 KiB on a fresh connection, doubling while reads
        // fill it); two such frames past the budget stay well under 128 KiB,
        // not the whole 1 MiB chunk.
        row(
            "one 1 MiB chunk, a 16 KiB budget",
            Reason::OverBytes,
            Between(BUDGET + 1, BUDGET + 128 * kib - 1),
            |_| chunked(3, MIB, MIB),
        )
        .max_bytes(BUDGET),
        // All on the wire at once and within the byte budget, frames handed
        // over one by one, and then nothing: the body never ends, so the
        // drain ends on its time budget whatever the machine's speed (a
        // fast one reads all 200,000 frames first, a slow one fewer). That
        // the deadline is checked between frames that are all ready is
        // `tests/caller.rs`'s `the_time_budget_bounds_a_drain_to_one_frame_past_it`.
        row(
            "200,000 chunks of one byte, then a stall, a 20 ms time budget",
            Reason::OverTime,
            Between(0, 200_000),
            |_| vec![Step::Write(cat(&[CHUNKED_HEAD, &one_byte_chunks(9, 200_000)])), Step::Hang],
        )
        .max_bytes(MIB as u64)
        .max_time(Duration::from_millis(20)),
    ];
    for case in rows {
        check(case).await;
    }
}

#[tokio::test]
async fn bodies_whose_connection_cannot_be_reused_are_skipped_and_closed() {
    let none = Drained::Between(0, 0);
    let rows = [
        row("Connection: close on the request", Reason::ConnectionClose, none, |_| {
            content_length(11, 8 * KIB)
        })
        .close_request(),
        row("Connection: close on the response", Reason::ConnectionClose, none, |_| {
            let head = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 8192\r\n\r\n";
            vec![Step::Write(cat(&[head, &body_bytes(11, 8 * KIB)])), Step::Close]
        }),
        row("HTTP/1.0 without keep-alive", Reason::ConnectionClose, none, |_| {
            let head = b"HTTP/1.0 200 OK\r\ncontent-length: 4096\r\n\r\n";
            vec![Step::Write(cat(&[head, &body_bytes(12, 4 * KIB)])), Step::Hang]
        }),
        row("close-delimited: neither Content-Length nor chunked", Reason::CloseDelimited, none, |_| {
            vec![Step::Write(cat(&[b"HTTP/1.1 200 OK\r\n\r\n", &body_bytes(12, 4 * KIB)])), Step::Hang]
        }),
        // A `Transfer-Encoding` whose last coding is not `chunked` makes the
        // body close-delimited whatever `Content-Length` says (RFC 9112
        // 6.3): hyper ignores the length and reads to the end of the
        // connection, which it never pools. The policy frames it as hyper
        // does, so no drain holds a slot reading it until a budget runs out.
        row("Transfer-Encoding: gzip beside a Content-Length", Reason::CloseDelimited, none, |_| {
            let head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\ncontent-length: 100\r\n\r\n";
            vec![Step::Write(cat(&[head, &body_bytes(12, 100)])), Step::Hang]
        }),
    ];
    for case in rows {
        check(case).await;
    }
}

/// There are no invalid settings to reject: every value is accepted, and 0
/// means "disabled". Hyper alone cannot reuse a 64 KiB chunked body.
#[tokio::test]
async fn zero_settings_disable_draining() {
    let none = Drained::Between(0, 0);
    let body = |_: &Head| chunked(10, 64 * KIB, 4 * KIB);
    let rows = [
        row("max_bytes(0)", Reason::Disabled, none, body).max_bytes(0),
        row("max_time(0)", Reason::Disabled, none, body)
            .layer(DrainOnDropLayer::new().max_time(Duration::ZERO)),
        row("max_concurrent_drains(0)", Reason::Disabled, none, body)
            .layer(DrainOnDropLayer::new().max_concurrent_drains(0)),
    ];
    for case in rows {
        check(case).await;
    }
}

/// One byte over the default byte budget (256 KiB), declared: not a byte is
/// read, no task is started, the drop returns at once, and the connection
/// closes.
///
/// The time budget is [`GENEROUS`]: a drop that waited for the stalled body
/// would take that long, twice [`SLACK`], which no drop that returns at once
/// takes on any machine.
#[tokio::test]
async fn declared_length_over_the_default_budget_is_skipped_at_once_and_closed() {
    let len = DEFAULT_MAX_BYTES as usize + 1;
    // Part of the body, then nothing: a drain that tried would stall.
    let script = move |_: &Head| vec![Step::Write(cat(&[&cl_head(len), &body_bytes(0, KIB)])), Step::Hang];
    let layer = DrainOnDropLayer::new().max_time(GENEROUS);
    let mut rig = Rig::with(layer, GENEROUS, client(), script).await;
    let res = rig.get("/bad").await;
    let first = conn(&res);
    let started = Instant::now();
    drop(res);
    let took = started.elapsed();
    let s = rig.stats.snapshot();
    assert_eq!(
        counted(&s),
        Counted::one(Reason::DeclaredOverBudget),
        "counted in the drop itself, no drain in flight: {s:?}"
    );
    assert_eq!(s.bytes_drained, 0, "not a byte read");
    println!("the skipping drop took {took:?}");
    assert!(took < SLACK, "the drop returns at once, took {took:?}");
    rig.wait_server_closed("the client to close the skipped connection").await;
    assert_ne!(rig.next_is_clean(1).await, first, "not reused");
    assert_eq!(rig.server.accepted(), 2, "a fresh connection");
    assert_eq!(rig.connector.count(), 2, "one dial for each request");
}

/// The drop returns with the drain still running: on this current-thread
/// runtime the drain can only run once the test yields, and it can only
/// end on its time budget (the body stalls), so `in_flight` is 1 right
/// after the drop on any machine; a drop that waited for the outcome would
/// have counted it. How long the drop took is printed, not asserted (a busy
/// machine can deschedule any thread for longer than 50 ms).
#[tokio::test]
async fn stalled_body_is_abandoned_over_time_without_blocking_the_caller() {
    let max_time = Duration::from_millis(50);
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, max_time, |_| {
        vec![Step::Write(cat(&[&cl_head(10 * KIB), &body_bytes(0, KIB)])), Step::Hang]
    })
    .await;
    let res = rig.get("/bad").await;
    let first = conn(&res);
    let started = Instant::now();
    drop(res);
    let took = started.elapsed();
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::nothing().in_flight(1), "the drain runs in the background: {s:?}");
    println!("the drop took {took:?}");
    rig.settle().await;
    // The deadline counts from the drop, and `started` was taken before it.
    let lasted = started.elapsed();
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::one(Reason::OverTime), "{s:?}");
    assert!(lasted >= max_time, "not given up before max_time: {lasted:?}");
    rig.wait_server_closed("the stalled connection to be closed").await;
    assert_ne!(rig.next_is_clean(1).await, first, "not reused");
    assert_eq!(rig.connector.count(), 2, "the abandoned connection was closed; the next request dialled");
}

/// One byte every 10 ms of a 100,000-byte body: it would take 1,000 s, so
/// the body never ends while the test runs, whatever the machine's speed
/// (a drop however late still finds it unfinished), the drain ends on its
/// 50 ms budget, and the server is still trickling when the client closes.
#[tokio::test]
async fn trickle_slower_than_the_time_budget_is_abandoned_over_time() {
    const LEN: usize = 100_000;
    let max_time = Duration::from_millis(50);
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, max_time, |_| {
        let every = Duration::from_millis(10);
        vec![Step::Write(cl_head(LEN)), Step::Paced { seed: 8, len: LEN, piece: 1, every }]
    })
    .await;
    let first = rig.drop_bad().await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::one(Reason::OverTime), "{s:?}");
    assert!(s.bytes_drained < LEN as u64, "the trickle cannot have ended: {}", s.bytes_drained);
    let failures = rig.server.write_failures.clone();
    wait_for("the trickling server to see its writes fail", SLACK, || {
        failures.load(std::sync::atomic::Ordering::SeqCst) == 1
    })
    .await;
    assert_ne!(rig.next_is_clean(1).await, first, "not reused");
}

/// The layer cannot see the client's pool settings: with pooling disabled
/// the body is still drained (the bytes are read for nothing) and the
/// connection is closed anyway.
#[tokio::test]
async fn pool_disabled_drains_for_nothing_and_never_reuses() {
    let connector = CountingConnector::new();
    let client = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(0).build(connector.clone());
    let layer = DrainOnDropLayer::new().max_time(GENEROUS);
    let mut rig = Rig::with(layer, GENEROUS, (client, connector), |_| content_length(11, 8 * KIB)).await;
    let first = rig.drop_bad().await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::drained(1), "{s:?}");
    assert_ne!(rig.next_is_clean(1).await, first, "no pool, no reuse");
}

/// HEAD (with a `Content-Length`), 204, 304 and `Content-Length: 0`: the
/// body is at its end when the caller gets it, so dropping it is not an
/// early drop, and one connection serves them all.
#[tokio::test]
async fn bodiless_responses_are_not_counted_and_reuse_the_connection() {
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, GENEROUS, |head| {
        let r: &[u8] = match head.path.as_str() {
            "/head" => b"HTTP/1.1 200 OK\r\ncontent-length: 5000\r\n\r\n",
            "/204" => b"HTTP/1.1 204 No Content\r\n\r\n",
            "/304" => b"HTTP/1.1 304 Not Modified\r\ncontent-length: 5000\r\n\r\n",
            "/cl0" => b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            other => panic!("unexpected path {other}"),
        };
        vec![Step::Write(r.to_vec())]
    })
    .await;
    let mut at = None;
    for (method, path, status) in [
        (http::Method::HEAD, "/head", 200),
        (http::Method::GET, "/204", 204),
        (http::Method::GET, "/304", 304),
        (http::Method::GET, "/cl0", 200),
    ] {
        let req =
            http::Request::builder().method(method).uri(rig.server.uri(path)).body(Empty::new()).unwrap();
        // After the first, each must be served by the pooled connection.
        let res = match at {
            None => rig.try_send(req).await.expect("response head"),
            Some(at) => rig.send_on(req, at).await,
        };
        assert_eq!(res.status(), status, "{path}");
        assert!(res.body().is_end_stream(), "{path}: the body is already at its end");
        at.get_or_insert(conn(&res));
        drop(res);
        assert_eq!(
            counted(&rig.stats.snapshot()),
            Counted::nothing(),
            "{path}: nothing to drain, nothing counted"
        );
        rig.settle().await;
    }
    rig.next_reuses(1, at.unwrap()).await;
    assert_eq!(rig.connector.count(), 1, "one connection for everything");
}
