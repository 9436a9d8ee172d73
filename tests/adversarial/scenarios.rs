//! The peers' scenarios (numbered as in CONTEXT.md) that concern framing and
//! budgets: what is drained and reused, what is skipped or given up, and how
//! each early drop is counted.

use std::time::{Duration, Instant};

use drain_on_drop::DrainOnDropLayer;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::harness::*;
use crate::support::*;

const DEFAULT_MAX_BYTES: u64 = 256 * 1024;

/// Drops the body of `GET /bad` unread, waits for the drain, and returns the
/// connection it came on.
async fn drop_unread(rig: &mut Rig) -> std::net::SocketAddr {
    let res = rig.get("/bad").await;
    assert_eq!(res.status(), 200, "the caller sees the scripted status");
    let at = conn(&res);
    drop(res);
    rig.settle().await;
    at
}

// 1. Small body dropped unread → reused (one dial for two requests).

#[tokio::test]
async fn s01_small_body_dropped_unread_is_drained_and_the_connection_reused() {
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, GENEROUS, |_| content_length(7, KIB)).await;
    let first = drop_unread(&mut rig).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::DRAINED, "one early drop, drained: {s:?}");
    assert_eq!(s.bytes_drained, KIB as u64, "the whole unread body");
    rig.next_reuses(1, first).await;
    assert_eq!(rig.connector.count(), 1, "one dial for two requests");
    assert_eq!(rig.server.accepted(), 1, "the server saw one connection");
}

/// 64 KiB chunked is far more than hyper drains by itself (CONTEXT: 100
/// connections per 100 requests without the layer).
#[tokio::test]
async fn s01_large_chunked_body_dropped_unread_is_drained_and_reused() {
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, GENEROUS, |_| chunked(7, 64 * KIB, 4 * KIB)).await;
    let first = drop_unread(&mut rig).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::DRAINED, "{s:?}");
    assert_eq!(s.bytes_drained, 64 * KIB as u64, "every unread data byte");
    rig.next_reuses(1, first).await;
    assert_eq!(rig.connector.count(), 1, "one dial for two requests");
}

// 2. Partially read body with a small remainder → reused.

#[tokio::test]
async fn s02_partially_read_body_is_drained_from_where_the_caller_stopped() {
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, GENEROUS, |_| content_length(3, 64 * KIB)).await;
    let res = rig.get("/bad").await;
    let first = conn(&res);
    let mut body = res.into_body();
    let read = read_one_frame(&mut body).await.expect("a first frame") as u64;
    assert!(read > 0 && read < 64 * KIB as u64, "one frame is part of the body");
    drop(body);
    rig.settle().await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::DRAINED, "{s:?}");
    assert_eq!(s.bytes_drained, 64 * KIB as u64 - read, "the drain reads exactly what the caller left");
    rig.next_reuses(1, first).await;
}

// 3. Chunked: one chunk, one byte per chunk, only the final 0\r\n\r\n unread.

#[tokio::test]
async fn s03_chunked_single_chunk_is_drained_and_reused() {
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, GENEROUS, |_| chunked(5, 8 * KIB, 8 * KIB)).await;
    let first = drop_unread(&mut rig).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::DRAINED, "{s:?}");
    assert_eq!(s.bytes_drained, 8 * KIB as u64);
    rig.next_reuses(1, first).await;
}

#[tokio::test]
async fn s03_chunked_one_byte_per_chunk_is_drained_and_reused() {
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, GENEROUS, |_| {
        vec![Step::Write(cat(&[CHUNKED_HEAD, &one_byte_chunks(5, 500), b"0\r\n\r\n"]))]
    })
    .await;
    let first = drop_unread(&mut rig).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::DRAINED, "{s:?}");
    assert_eq!(s.bytes_drained, 500, "500 one-byte frames");
    rig.next_reuses(1, first).await;
}

/// Every data byte was delivered but the caller dropped the body before
/// seeing its end: hyper's chunked body cannot tell, so the drop is early and
/// the drain reads only the terminating chunk.
#[tokio::test]
async fn s03_chunked_with_only_the_last_chunk_unread_is_drained_with_zero_bytes() {
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, GENEROUS, |_| {
        vec![
            Step::Write(CHUNKED_HEAD.to_vec()),
            Step::Chunks { seed: 2, len: 3000, chunk: 1000 },
            Step::Sleep(Duration::from_millis(30)),
            Step::Write(b"0\r\n\r\n".to_vec()),
        ]
    })
    .await;
    let res = rig.get("/bad").await;
    let first = conn(&res);
    let mut body = res.into_body();
    assert_eq!(read_bytes(&mut body, 3000).await, 3000, "all data bytes read");
    drop(body);
    rig.settle().await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::DRAINED, "{s:?}");
    assert_eq!(s.bytes_drained, 0, "only the final chunk was left");
    rig.next_reuses(1, first).await;
}

// 4. Body arriving byte by byte within the time budget → reused.

#[tokio::test]
async fn s04_body_trickling_in_within_the_time_budget_is_drained_and_reused() {
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, GENEROUS, |_| {
        let mut steps = vec![Step::Write(cl_head(20))];
        for b in body_bytes(4, 20) {
            steps.push(Step::Sleep(Duration::from_millis(2)));
            steps.push(Step::Write(vec![b]));
        }
        steps
    })
    .await;
    let first = drop_unread(&mut rig).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::DRAINED, "{s:?}");
    assert_eq!(s.bytes_drained, 20);
    rig.next_reuses(1, first).await;
}

// 5. Declared length above the byte budget → no read at all, closed, the drop
// returns at once.

#[tokio::test]
async fn s05_declared_length_over_budget_is_skipped_at_once_and_closed() {
    let len = DEFAULT_MAX_BYTES as usize + 1;
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, GENEROUS, move |_| {
        // Part of the body, then nothing: a drain that tried would stall.
        let mut head = cl_head(len);
        head.extend(body_bytes(0, KIB));
        vec![Step::Write(head), Step::Hang]
    })
    .await;
    let res = rig.get("/bad").await;
    let first = conn(&res);
    let started = Instant::now();
    drop(res);
    let took = started.elapsed();
    // Counted in the drop itself: no task was started.
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::SKIPPED_OVER_BUDGET, "counted synchronously, no drain in flight: {s:?}");
    assert_eq!(s.bytes_drained, 0, "not a byte read");
    assert!(took < Duration::from_millis(100), "the drop returns at once, took {took:?}");
    rig.wait_server_closed("the client to close the skipped connection").await;
    assert_ne!(rig.next_is_clean(1).await, first, "not reused");
    assert_eq!(rig.server.accepted(), 2, "a fresh connection");
}

// 6. Chunked (unknown length) over budget → at most the budget read (plus
// the frame that crossed it), then closed.

#[tokio::test]
async fn s06_chunked_over_budget_is_abandoned_after_the_budget_and_closed() {
    let max = 16 * KIB as u64;
    let mut rig = Rig::start(max, GENEROUS, |_| chunked(6, 64 * KIB, 4 * KIB)).await;
    let first = drop_unread(&mut rig).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::OVER_BYTES, "{s:?}");
    assert!(
        s.bytes_drained > max && s.bytes_drained <= max + 4 * KIB as u64,
        "stops at the first frame past the budget (frames are at most one \
         4 KiB chunk): drained {} of a {max} budget",
        s.bytes_drained
    );
    rig.wait_server_closed("the abandoned connection to be closed").await;
    assert_ne!(rig.next_is_clean(1).await, first, "not reused");
}

// 7. Exactly the budget → reused; budget + 1 → closed.

const BUDGET: u64 = 16 * KIB as u64;

#[tokio::test]
async fn s07_content_length_of_exactly_the_budget_is_drained_and_reused() {
    let mut rig = Rig::start(BUDGET, GENEROUS, |_| content_length(7, BUDGET as usize)).await;
    let first = drop_unread(&mut rig).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::DRAINED, "{s:?}");
    assert_eq!(s.bytes_drained, BUDGET);
    rig.next_reuses(1, first).await;
}

/// The server holds back the last byte: otherwise the whole body may already
/// be buffered when it is dropped, and hyper's own single read step finishes
/// it and pools the connection without the layer.
#[tokio::test]
async fn s07_content_length_of_budget_plus_one_is_skipped_and_closed() {
    let mut rig = Rig::start(BUDGET, GENEROUS, |_| {
        let len = BUDGET as usize + 1;
        let body = body_bytes(7, len);
        vec![
            Step::Write(cat(&[&cl_head(len), &body[..len - 1]])),
            Step::Sleep(Duration::from_millis(100)),
            Step::Write(body[len - 1..].to_vec()),
        ]
    })
    .await;
    let first = drop_unread(&mut rig).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::SKIPPED_OVER_BUDGET, "{s:?}");
    assert_eq!(s.bytes_drained, 0);
    assert_ne!(rig.next_is_clean(1).await, first, "not reused");
}

#[tokio::test]
async fn s07_chunked_of_exactly_the_budget_is_drained_and_reused() {
    let mut rig = Rig::start(BUDGET, GENEROUS, |_| chunked(7, BUDGET as usize, KIB)).await;
    let first = drop_unread(&mut rig).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::DRAINED, "{s:?}");
    assert_eq!(s.bytes_drained, BUDGET);
    rig.next_reuses(1, first).await;
}

/// The extra byte is a chunk of its own, so the frame that crosses the
/// budget is exactly one byte long. The final chunk comes later, so hyper
/// cannot finish the body by itself once the drain gives up.
#[tokio::test]
async fn s07_chunked_of_budget_plus_one_is_abandoned_one_byte_past_the_budget() {
    let mut rig = Rig::start(BUDGET, GENEROUS, |_| {
        vec![
            Step::Write(CHUNKED_HEAD.to_vec()),
            Step::Chunks { seed: 7, len: BUDGET as usize + 1, chunk: KIB },
            Step::Sleep(Duration::from_millis(100)),
            Step::Write(b"0\r\n\r\n".to_vec()),
        ]
    })
    .await;
    let first = drop_unread(&mut rig).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::OVER_BYTES, "{s:?}");
    assert_eq!(s.bytes_drained, BUDGET + 1, "gives up on the first byte too many");
    assert_ne!(rig.next_is_clean(1).await, first, "not reused");
}

// 8. Stall or trickle past the time budget → closed; the caller never blocks.

#[tokio::test]
async fn s08_stalled_body_is_abandoned_over_time_without_blocking_the_caller() {
    let max_time = Duration::from_millis(50);
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, max_time, |_| {
        let mut head = cl_head(10 * KIB);
        head.extend(body_bytes(0, KIB));
        vec![Step::Write(head), Step::Hang]
    })
    .await;
    let res = rig.get("/bad").await;
    let first = conn(&res);
    let started = Instant::now();
    drop(res);
    let took = started.elapsed();
    assert_eq!(rig.stats.snapshot().in_flight, 1, "the drain runs in the background");
    assert!(took < max_time, "the drop does not wait: {took:?}");
    let lasted = rig.settle().await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::OVER_TIME, "{s:?}");
    assert!(lasted + Duration::from_millis(5) >= max_time, "not given up before max_time: {lasted:?}");
    rig.wait_server_closed("the stalled connection to be closed").await;
    assert_ne!(rig.next_is_clean(1).await, first, "not reused");
}

#[tokio::test]
async fn s08_trickle_slower_than_the_time_budget_is_abandoned_over_time() {
    let max_time = Duration::from_millis(50);
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, max_time, |_| {
        let mut steps = vec![Step::Write(cl_head(100))];
        for b in body_bytes(8, 100) {
            steps.push(Step::Write(vec![b]));
            steps.push(Step::Sleep(Duration::from_millis(10)));
        }
        steps
    })
    .await;
    let first = drop_unread(&mut rig).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::OVER_TIME, "{s:?}");
    assert!(s.bytes_drained < 100, "a 1 s trickle cannot finish in 50 ms: {}", s.bytes_drained);
    let failures = rig.server.write_failures.clone();
    wait_for("the trickling server to see its writes fail", SLACK + Duration::from_secs(1), || {
        failures.load(std::sync::atomic::Ordering::SeqCst) == 1
    })
    .await;
    assert_ne!(rig.next_is_clean(1).await, first, "not reused");
}

// 9. Infinite stream → closed; the server's writes fail. (See also
// hostile.rs for the byte and time limits on infinite streams.)

// 10. Byte or time budget 0 → draining disabled. There are no invalid
// settings to reject: every value of the three settings is accepted, and 0
// means "disabled" (see `zero_settings_disable_draining`).

#[tokio::test]
async fn s10_zero_settings_disable_draining() {
    let layers = [
        ("max_bytes(0)", DrainOnDropLayer::new().max_bytes(0)),
        ("max_time(0)", DrainOnDropLayer::new().max_time(Duration::ZERO)),
        ("max_concurrent_drains(0)", DrainOnDropLayer::new().max_concurrent_drains(0)),
    ];
    for (what, layer) in layers {
        let mut rig = Rig::with(layer, GENEROUS, rig_client(), |_| chunked(10, 64 * KIB, 4 * KIB)).await;
        let res = rig.get("/bad").await;
        let first = conn(&res);
        drop(res);
        let s = rig.stats.snapshot();
        assert_eq!(
            counted(&s),
            Counted::SKIPPED,
            "{what}: skipped in the drop, not for the declared length: {s:?}"
        );
        assert_eq!(s.bytes_drained, 0, "{what}");
        assert_ne!(
            rig.next_is_clean(1).await,
            first,
            "{what}: hyper alone cannot reuse a 64 KiB chunked body"
        );
    }
}

/// A time budget too large for an `Instant` means "no deadline", not a panic.
#[tokio::test]
async fn s10_huge_time_budget_drains_without_deadline() {
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, Duration::MAX, |_| chunked(10, 64 * KIB, 4 * KIB)).await;
    let res = rig.get("/bad").await;
    let first = conn(&res);
    drop(res);
    let stats = rig.stats.clone();
    wait_for("the drain to end", SLACK, || stats.snapshot().in_flight == 0).await;
    assert_eq!(counted(&rig.stats.snapshot()), Counted::DRAINED);
    rig.next_reuses(1, first).await;
}

// 11. Connection: close on the request or the response, pool disabled.

#[tokio::test]
async fn s11_request_connection_close_is_skipped() {
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, GENEROUS, |_| content_length(11, 8 * KIB)).await;
    let mut req = get(rig.server.uri("/bad"));
    req.headers_mut().insert(http::header::CONNECTION, "close".parse().unwrap());
    let res = rig.try_send(req).await.expect("response head");
    let first = conn(&res);
    drop(res);
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::SKIPPED, "{s:?}");
    assert_eq!(s.bytes_drained, 0);
    assert_ne!(rig.next_is_clean(1).await, first, "not reused");
}

#[tokio::test]
async fn s11_response_connection_close_is_skipped() {
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, GENEROUS, |_| {
        let mut r = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 8192\r\n\r\n".to_vec();
        r.extend(body_bytes(11, 8 * KIB));
        vec![Step::Write(r), Step::Close]
    })
    .await;
    let first = drop_unread(&mut rig).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::SKIPPED, "{s:?}");
    assert_eq!(s.skipped_connection_close, 1, "reason: connection close");
    assert_ne!(rig.next_is_clean(1).await, first, "not reused");
}

/// The layer cannot see the client's pool settings: with pooling disabled
/// the body is still drained (the bytes are read for nothing) and the
/// connection is closed anyway.
#[tokio::test]
async fn s11_pool_disabled_drains_for_nothing_and_never_reuses() {
    let connector = RigConnector::new();
    let client = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(0).build(connector.clone());
    let layer = DrainOnDropLayer::new().max_time(GENEROUS);
    let mut rig = Rig::with(layer, GENEROUS, (client, connector), |_| content_length(11, 8 * KIB)).await;
    let first = drop_unread(&mut rig).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::DRAINED, "{s:?}");
    assert_ne!(rig.next_is_clean(1).await, first, "no pool, no reuse");
}

// 12. Close-delimited body → never pooled.

#[tokio::test]
async fn s12_close_delimited_body_is_skipped() {
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, GENEROUS, |_| {
        let mut r = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        r.extend(body_bytes(12, 4 * KIB));
        vec![Step::Write(r), Step::Hang]
    })
    .await;
    let first = drop_unread(&mut rig).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::SKIPPED, "{s:?}");
    assert_eq!(s.skipped_close_delimited, 1, "reason: close-delimited");
    rig.wait_server_closed("the client to close a close-delimited response").await;
    assert_ne!(rig.next_is_clean(1).await, first, "not reused");
}

#[tokio::test]
async fn s12_http10_without_keep_alive_is_skipped() {
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, GENEROUS, |_| {
        let mut r = b"HTTP/1.0 200 OK\r\ncontent-length: 4096\r\n\r\n".to_vec();
        r.extend(body_bytes(12, 4 * KIB));
        vec![Step::Write(r), Step::Hang]
    })
    .await;
    let first = drop_unread(&mut rig).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::SKIPPED, "{s:?}");
    assert_eq!(s.skipped_connection_close, 1, "reason: HTTP/1.0 without keep-alive closes");
    assert_ne!(rig.next_is_clean(1).await, first, "not reused");
}

#[tokio::test]
async fn s12_http10_with_keep_alive_is_drained_and_reused() {
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, GENEROUS, |_| {
        let mut r = b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 4096\r\n\r\n".to_vec();
        r.extend(body_bytes(12, 4 * KIB));
        vec![Step::Write(r)]
    })
    .await;
    let first = drop_unread(&mut rig).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::DRAINED, "{s:?}");
    rig.next_reuses(1, first).await;
}

/// A `Transfer-Encoding` whose last coding is not `chunked` makes the body
/// close-delimited whatever `Content-Length` says (RFC 9112 6.3; hyper reads
/// it to the end of the connection and never pools it). The policy only
/// looks for `Content-Length` or chunked, so it starts a drain that cannot
/// lead to reuse: it holds a drain slot and reads until the server closes or
/// a budget runs out (here: abandoned over time after 200 ms, 100 bytes).
#[tokio::test]
async fn s12_transfer_encoding_not_chunked_with_content_length_is_skipped_as_close_delimited() {
    let max_time = Duration::from_millis(200);
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, max_time, |_| {
        let mut r = b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\ncontent-length: 100\r\n\r\n".to_vec();
        r.extend(body_bytes(12, 100));
        vec![Step::Write(r), Step::Hang]
    })
    .await;
    let res = rig.get("/bad").await;
    let first = conn(&res);
    drop(res);
    let s = rig.stats.snapshot();
    assert_eq!(
        counted(&s),
        Counted::SKIPPED,
        "hyper reads this body to the end of the connection: skipped in the drop, no drain: {s:?}"
    );
    rig.settle().await;
    assert_eq!(rig.stats.snapshot().bytes_drained, 0, "not a byte read");
    assert_ne!(rig.next_is_clean(1).await, first, "not reused");
}

// 13. HEAD (with Content-Length), 204, 304 → nothing to drain, reused.

#[tokio::test]
async fn s13_bodiless_responses_are_not_counted_and_reuse_the_connection() {
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
        at.get_or_insert(conn(&res));
        drop(res);
        assert_eq!(
            counted(&rig.stats.snapshot()),
            Counted::NOTHING,
            "{path}: nothing to drain, nothing counted"
        );
        rig.settle().await;
    }
    rig.next_reuses(1, at.unwrap()).await;
    assert_eq!(rig.connector.count(), 1, "one connection for everything");
}

// 17. Chunked body with trailers → the drain consumes them, reused.

#[tokio::test]
async fn s17_chunked_body_with_trailers_is_drained_and_reused() {
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, GENEROUS, |_| {
        vec![
            Step::Write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: x-sum\r\n\r\n".to_vec()),
            Step::Chunks { seed: 17, len: 20 * KIB, chunk: 4 * KIB },
            Step::Write(b"0\r\nx-sum: 42\r\nx-other: yes\r\n\r\n".to_vec()),
        ]
    })
    .await;
    let first = drop_unread(&mut rig).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::DRAINED, "{s:?}");
    assert_eq!(s.bytes_drained, 20 * KIB as u64, "trailers carry no data bytes");
    rig.next_reuses(1, first).await;
}

/// All data read, the trailers still on their way when the body is dropped.
#[tokio::test]
async fn s17_trailers_arriving_after_the_drop_are_drained() {
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, GENEROUS, |_| {
        vec![
            Step::Write(CHUNKED_HEAD.to_vec()),
            Step::Chunks { seed: 17, len: 2 * KIB, chunk: KIB },
            Step::Sleep(Duration::from_millis(20)),
            Step::Write(b"0\r\nx-sum: 42\r\n\r\n".to_vec()),
        ]
    })
    .await;
    let res = rig.get("/bad").await;
    let first = conn(&res);
    let mut body = res.into_body();
    assert_eq!(read_bytes(&mut body, 2 * KIB).await, 2 * KIB);
    drop(body);
    rig.settle().await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::DRAINED, "{s:?}");
    assert_eq!(s.bytes_drained, 0);
    rig.next_reuses(1, first).await;
}

// 18. 1xx before the final response.

#[tokio::test]
async fn s18_informational_responses_before_the_final_one_are_skipped_over() {
    let mut rig = Rig::start(DEFAULT_MAX_BYTES, GENEROUS, |_| {
        let mut r = b"HTTP/1.1 100 Continue\r\n\r\n\
                      HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n"
            .to_vec();
        r.extend(cl_head(8 * KIB));
        r.extend(body_bytes(18, 8 * KIB));
        vec![Step::Write(r)]
    })
    .await;
    let res = rig.get("/bad").await;
    assert_eq!(res.status(), 200, "the caller sees the final response");
    let first = conn(&res);
    drop(res);
    rig.settle().await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::DRAINED, "{s:?}");
    assert_eq!(s.bytes_drained, 8 * KIB as u64);
    rig.next_reuses(1, first).await;
}
