//! Servers that misbehave while a body is being drained: they lie about the
//! length, send bytes past the end, break the chunked framing, reset or close
//! mid-body, or never stop. Nothing a hostile server sends after a broken or
//! over-long body may reach a later request.

use std::sync::atomic::Ordering;
use std::time::Duration;

use drain_on_drop::Reason;

use crate::harness::*;
use crate::support::*;

const MAX_BYTES: u64 = 256 * KIB as u64;

/// Runs `/bad` then an honest request, `rounds` times on one client: the
/// honest body must be intact every time, and no connection that carried a
/// bad response may carry the next one.
async fn never_reused_and_never_smuggled(rig: &mut Rig, rounds: u64) {
    for round in 0..rounds {
        let bad = rig.drop_bad().await;
        let next = rig.next_is_clean(round).await;
        assert_ne!(next, bad, "round {round}: the poisoned connection is reused");
    }
}

// Extra bytes after the body ("announces less, sends more").

/// The extra bytes come in the same write as the body. The drain reaches the
/// declared end (counted drained), and hyper refuses to pool a connection
/// with bytes past the end of the response.
#[tokio::test]
async fn bytes_after_a_drained_body_never_reach_the_next_request() {
    let mut rig = Rig::start(MAX_BYTES, GENEROUS, |_| {
        let body = body_bytes(14, 100);
        vec![Step::Write(cat(&[&cl_head(100), &body, SMUGGLED]))]
    })
    .await;
    never_reused_and_never_smuggled(&mut rig, 5).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::drained(5), "the declared body was drained to its end each time: {s:?}");
    assert_eq!(s.bytes_drained, 500, "only declared bytes count as drained");
}

/// Same, with the extra bytes after a longer body that needs several reads.
#[tokio::test]
async fn bytes_after_a_long_drained_chunked_body_never_reach_the_next_request() {
    let mut rig = Rig::start(MAX_BYTES, GENEROUS, |_| {
        vec![
            Step::Write(CHUNKED_HEAD.to_vec()),
            Step::Chunks { seed: 14, len: 64 * KIB, chunk: 4 * KIB },
            Step::Write(cat(&[b"0\r\n\r\n", SMUGGLED])),
        ]
    })
    .await;
    never_reused_and_never_smuggled(&mut rig, 3).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::drained(3), "{s:?}");
}

/// The extra bytes arrive later, while the drained connection sits idle in
/// the pool: hyper reads them as an unexpected message and closes the
/// connection, so the server sees it closed before the next request is sent.
#[tokio::test]
async fn bytes_arriving_while_the_drained_connection_is_idle_close_it() {
    let mut rig = Rig::start(MAX_BYTES, GENEROUS, |_| {
        let body = body_bytes(14, 100);
        vec![
            Step::Write(cat(&[&cl_head(100), &body])),
            Step::Sleep(Duration::from_millis(20)),
            Step::Write(SMUGGLED.to_vec()),
        ]
    })
    .await;
    let bad = rig.drop_bad().await;
    assert_eq!(counted(&rig.stats.snapshot()), Counted::drained(1));
    rig.wait_server_closed("the client to close a connection that sent unsolicited bytes").await;
    assert_ne!(rig.next_is_clean(1).await, bad, "not reused");
}

/// The caller reads the whole declared body itself: not an early drop, not
/// counted, and the extra bytes are still never delivered.
#[tokio::test]
async fn bytes_after_a_fully_read_body_are_not_counted_and_not_delivered() {
    let mut rig = Rig::start(MAX_BYTES, GENEROUS, |_| {
        let body = body_bytes(14, 100);
        vec![Step::Write(cat(&[&cl_head(100), &body, SMUGGLED]))]
    })
    .await;
    let res = rig.get("/bad").await;
    let bad = conn(&res);
    let body = read_all(res.into_body()).await.expect("the declared body");
    assert_eq!(body, body_bytes(14, 100), "exactly the declared bytes");
    assert_eq!(counted(&rig.stats.snapshot()), Counted::nothing());
    assert_ne!(rig.next_is_clean(1).await, bad, "not reused");
}

// Content-Length announcing more than is sent.

/// The server declares 10,000 bytes, sends 4,000 and closes: the drain sees
/// hyper's "incomplete message" error and counts a failure.
#[tokio::test]
async fn content_length_announcing_more_than_sent_fails_the_drain() {
    let mut rig = Rig::start(MAX_BYTES, GENEROUS, |_| {
        vec![
            Step::Write(cat(&[&cl_head(10_000), &body_bytes(1, 4_000)])),
            Step::Sleep(Duration::from_millis(20)),
            Step::Close,
        ]
    })
    .await;
    never_reused_and_never_smuggled(&mut rig, 3).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::body_errors(3), "{s:?}");
    assert_eq!(s.bytes_drained, 12_000, "bytes read before the error still count");
}

/// A caller that reads the short body itself gets the error; a body that
/// ended in an error is not an early drop and is not counted.
#[tokio::test]
async fn content_length_announcing_more_than_sent_is_an_error_for_a_reading_caller() {
    let mut rig = Rig::start(MAX_BYTES, GENEROUS, |_| {
        vec![Step::Write(cat(&[&cl_head(10_000), &body_bytes(1, 4_000)])), Step::Close]
    })
    .await;
    let res = rig.get("/bad").await;
    let err = read_all(res.into_body()).await.expect_err("a body cut short is an error for the caller");
    let eof = std::error::Error::source(&err)
        .and_then(|e| e.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind);
    assert_eq!(eof, Some(std::io::ErrorKind::UnexpectedEof), "hyper reports the early end of file: {err:?}");
    assert_eq!(counted(&rig.stats.snapshot()), Counted::nothing());
    rig.next_is_clean(1).await;
}

// FIN or RST mid-drain → closed quietly, the next request dials fresh.

async fn cut_mid_drain(cut: Step, chunked_framing: bool) {
    let what = format!("{cut:?} chunked={chunked_framing}");
    let mut rig = Rig::start(MAX_BYTES, GENEROUS, move |_| {
        let first = if chunked_framing {
            vec![Step::Write(CHUNKED_HEAD.to_vec()), Step::Chunks { seed: 15, len: 8 * KIB, chunk: KIB }]
        } else {
            vec![Step::Write(cat(&[&cl_head(64 * KIB), &body_bytes(15, 8 * KIB)]))]
        };
        // The cut comes after the caller dropped the body: the drain is
        // waiting for more when it happens.
        [first, vec![Step::Sleep(Duration::from_millis(30)), cut.clone()]].concat()
    })
    .await;
    never_reused_and_never_smuggled(&mut rig, 2).await;
    let s = rig.stats.snapshot();
    assert_eq!(
        counted(&s),
        Counted::body_errors(2),
        "{what}: a connection cut mid-body fails the drain: {s:?}"
    );
    assert!(s.bytes_drained <= 2 * 8 * KIB as u64, "{what}: never more than was sent: {s:?}");
}

#[tokio::test]
async fn fin_mid_drain_fails_the_drain_quietly() {
    cut_mid_drain(Step::Close, false).await;
    cut_mid_drain(Step::Close, true).await;
}

#[tokio::test]
async fn rst_mid_drain_fails_the_drain_quietly() {
    cut_mid_drain(Step::Reset, false).await;
    cut_mid_drain(Step::Reset, true).await;
}

// Malformed chunk size or trailer during a drain → closed; nothing
// smuggled after it is ever delivered.

/// A valid first chunk, then (after the drop) `broken` followed by a whole
/// smuggled response.
async fn broken_chunked(broken: &'static [u8]) -> (Rig, String) {
    let mut rig = Rig::start(MAX_BYTES, GENEROUS, move |_| {
        vec![
            Step::Write(cat(&[CHUNKED_HEAD, b"a\r\n0123456789\r\n"])),
            Step::Sleep(Duration::from_millis(20)),
            Step::Write(cat(&[broken, SMUGGLED])),
        ]
    })
    .await;
    never_reused_and_never_smuggled(&mut rig, 2).await;
    (rig, String::from_utf8_lossy(broken).into_owned())
}

#[tokio::test]
async fn malformed_chunk_sizes_fail_the_drain_and_smuggle_nothing() {
    let cases: [&'static [u8]; 5] =
        [b"zz\r\n", b"-1\r\n", b"fffffffffffffffffff\r\n", b"5\r\n01234XX", b"5;\x01ext\r\n01234\r\n"];
    for broken in cases {
        let (rig, what) = broken_chunked(broken).await;
        let s = rig.stats.snapshot();
        assert_eq!(counted(&s), Counted::body_errors(2), "{what:?}: a framing error fails the drain: {s:?}");
    }
}

/// hyper rejects a trailer line without a colon: the drain fails.
#[tokio::test]
async fn malformed_trailer_fails_the_drain_and_smuggles_nothing() {
    let (rig, what) = broken_chunked(b"0\r\nnot a header line\r\n\r\n").await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::body_errors(2), "{what:?}: {s:?}");
}

/// A trailer section larger than hyper accepts: the drain fails.
#[tokio::test]
async fn oversized_trailers_fail_the_drain_and_smuggle_nothing() {
    let trailer = format!("0\r\nx-big: {}\r\n\r\n", "a".repeat(64 * KIB));
    let trailer: &'static [u8] = trailer.into_bytes().leak();
    let (rig, what) = broken_chunked(trailer).await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::body_errors(2), "{}: {s:?}", &what[..20]);
}

// Infinite streams: the drain gives up by bytes or by time, and the
// server sees its writes fail once the client closes.

#[tokio::test]
async fn fast_infinite_stream_is_abandoned_over_bytes_and_the_server_write_fails() {
    let mut rig = Rig::start(MAX_BYTES, GENEROUS, |_| {
        vec![Step::Write(CHUNKED_HEAD.to_vec()), Step::Forever { chunk: 8 * KIB, every: Duration::ZERO }]
    })
    .await;
    let bad = rig.drop_bad().await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::one(Reason::OverBytes), "{s:?}");
    assert!(
        s.bytes_drained > MAX_BYTES && s.bytes_drained <= MAX_BYTES + 2 * 8 * KIB as u64,
        "gives up at the frame after the one that crosses the budget: {s:?}"
    );
    let failures = rig.server.write_failures.clone();
    wait_for("the streaming server's write to fail", SLACK, || failures.load(Ordering::SeqCst) == 1).await;
    assert_ne!(rig.next_is_clean(1).await, bad, "not reused");
}

#[tokio::test]
async fn slow_infinite_stream_is_abandoned_over_time_and_the_server_write_fails() {
    let max_time = Duration::from_millis(50);
    let mut rig = Rig::start(MAX_BYTES, max_time, |_| {
        vec![Step::Write(CHUNKED_HEAD.to_vec()), Step::Forever { chunk: 16, every: Duration::from_millis(5) }]
    })
    .await;
    let bad = rig.drop_bad().await;
    let s = rig.stats.snapshot();
    assert_eq!(counted(&s), Counted::one(Reason::OverTime), "{s:?}");
    let failures = rig.server.write_failures.clone();
    wait_for("the streaming server's write to fail", SLACK, || failures.load(Ordering::SeqCst) == 1).await;
    assert_ne!(rig.next_is_clean(1).await, bad, "not reused");
}

/// Both `Content-Length` and chunked framing (a smuggling vector): hyper
/// follows the chunked framing, and so does the layer. The (huge) declared
/// length neither causes a skip nor changes what is read; the bytes after
/// the chunked end are never delivered.
#[tokio::test]
async fn content_length_with_chunked_framing_follows_the_chunks() {
    let mut rig = Rig::start(MAX_BYTES, GENEROUS, |_| {
        let mut steps = vec![Step::Write(
            b"HTTP/1.1 200 OK\r\ncontent-length: 999999999\r\ntransfer-encoding: chunked\r\n\r\n".to_vec(),
        )];
        steps.push(Step::Chunks { seed: 4, len: 20 * KIB, chunk: 4 * KIB });
        steps.push(Step::Write(cat(&[b"0\r\n\r\n", SMUGGLED])));
        steps
    })
    .await;
    never_reused_and_never_smuggled(&mut rig, 2).await;
    let s = rig.stats.snapshot();
    assert_eq!(
        counted(&s),
        Counted::drained(2),
        "drained by the chunked framing, not skipped for the declared length: {s:?}"
    );
    assert_eq!(s.bytes_drained, 2 * 20 * KIB as u64);
}
