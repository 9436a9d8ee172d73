//! The layer as a `reqwest_middleware::Middleware` (feature
//! `reqwest-middleware`): call sites unchanged, far origins keep their
//! connections because the drain's time budget follows the round trip the
//! middleware times, a response reqwest got by following a redirect drains
//! under the origin it came from, the middleware goes last (innermost) to
//! see what a retry middleware discards, a `DrainBudget` given with the
//! request applies, reuse is not counted (reqwest's connector is private),
//! and with reqwest's gzip the byte budget counts inflated bytes.

#[path = "../../tests/support/mod.rs"]
mod support;

#[path = "gzip/mod.rs"]
mod gzip;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use drain_on_drop::{DrainBudget, DrainOnDropLayer, Reason, ReuseSnapshot};
use reqwest_middleware::{Middleware, Next};

use support::*;

fn client(layer: Option<&DrainOnDropLayer>) -> reqwest_middleware::ClientWithMiddleware {
    // rustls 0.23.48 deprecates ring's provider (no post-quantum key exchange); the
    // repository keeps ring so that nothing builds aws-lc-sys (a C library).
    #[allow(deprecated)]
    let _ = rustls::crypto::ring::default_provider().install_default();
    let builder = reqwest_middleware::ClientBuilder::new(reqwest::Client::new());
    match layer {
        Some(layer) => builder.with(layer.clone()).build(),
        None => builder.build(),
    }
}

/// The head `HEAD_AFTER` after the request, 48 KiB with it, the last 16 KiB
/// `TAIL_AFTER` later: far enough that a fixed 50 ms budget gives every
/// drain up, near enough that six round trips (the default, here its 1 s
/// ceiling) leave a second machine's worth of slack.
const HEAD_AFTER: Duration = Duration::from_millis(200);
const TAIL_AFTER: Duration = Duration::from_millis(250);

fn far(_: &Head) -> Vec<Step> {
    vec![
        Step::Sleep(HEAD_AFTER),
        Step::Write([cl_head(64 * KIB), body_bytes(3, 48 * KIB)].concat()),
        Step::Sleep(TAIL_AFTER),
        Step::Write(body_bytes(3, 64 * KIB)[48 * KIB..].to_vec()),
    ]
}

/// Requests through a client with the middleware, bodies dropped unread,
/// each drain left to end before the next: every one drained, under a
/// budget that follows the round trip the middleware measured, and the
/// connections kept; reqwest alone opens one per request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn far_responses_dropped_unread_keep_their_connections_call_sites_unchanged() {
    const N: usize = 6;
    let alone = RawServer::start(far).await;
    let plain = client(None);
    for _ in 0..N {
        drop(plain.get(alone.uri("/").to_string()).send().await.unwrap());
    }
    let server = RawServer::start(far).await;
    let layer = DrainOnDropLayer::new();
    let with = client(Some(&layer));
    for _ in 0..N {
        let res = with.get(server.uri("/").to_string()).send().await.unwrap();
        assert_eq!(res.status(), 200, "reqwest's Response, as before");
        drop(res);
        settle(&layer.stats(), Duration::from_secs(1)).await;
    }
    let s = layer.stats().snapshot();
    assert_eq!(s.count(Reason::EndOfBody), N as u64, "every drain reached the end: {s:?}");
    let origins = layer.origins();
    assert_eq!(origins.len(), 1, "{origins:?}");
    let o = &origins[0];
    assert!(
        o.round_trip.is_some_and(|rtt| rtt >= HEAD_AFTER),
        "timed from the middleware to the head: {o:?}"
    );
    assert_eq!(
        o.budget.map(|b| b.max_time()),
        Some(Duration::from_secs(1)),
        "six round trips, capped: {o:?}"
    );
    assert_eq!(alone.accepted(), N, "reqwest alone closes every connection whose body was not read");
    assert_keeps_half("reqwest-middleware, far, 64 KiB unread", server.accepted(), N, 0);
}

/// A near origin that redirects to a far one (reqwest follows redirects
/// inside `send`): the far body is drained under the far origin's round
/// trip and budget, not under the near origin's 50 ms, which would give
/// each drain up before the far server's tail; the far origin is listed by
/// `origins()`, and the near one keeps the round trip of its own answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirected_response_drains_under_the_origin_it_came_from() {
    const N: usize = 4;
    let far_server = RawServer::start(far).await;
    let location = far_server.uri("/data").to_string();
    let near = RawServer::start(move |head: &Head| match head.path.as_str() {
        "/old" => vec![Step::Write(
            format!("HTTP/1.1 302 Found\r\nlocation: {location}\r\ncontent-length: 0\r\n\r\n").into_bytes(),
        )],
        _ => content_length(2, KIB),
    })
    .await;
    let layer = DrainOnDropLayer::new();
    let with = client(Some(&layer));
    // The near origin's own answers: its round trip is a loopback one.
    for _ in 0..3 {
        let res = with.get(near.uri("/direct").to_string()).send().await.unwrap();
        assert_eq!(res.bytes().await.unwrap().len(), KIB);
    }
    for _ in 0..N {
        let res = with.get(near.uri("/old").to_string()).send().await.unwrap();
        assert_eq!(res.url().as_str(), far_server.uri("/data").to_string(), "reqwest followed the redirect");
        drop(res);
        settle(&layer.stats(), Duration::from_secs(1)).await;
    }
    let s = layer.stats().snapshot();
    assert_eq!(
        s.count(Reason::EndOfBody),
        N as u64,
        "every far body drained, under the far origin's budget (the near one's gives each up over time): {s:?}"
    );
    let origins = layer.origins();
    let far_origin = format!("http://{}", far_server.addr);
    let far_o = origins.iter().find(|o| o.origin == far_origin);
    let far_o = far_o.unwrap_or_else(|| panic!("the far origin is listed: {origins:?}"));
    assert!(
        far_o.round_trip.is_some_and(|rtt| rtt >= HEAD_AFTER),
        "its round trip, timed from the first request (an upper bound): {far_o:?}"
    );
    assert_eq!(far_o.budget.map(|b| b.max_time()), Some(Duration::from_secs(1)), "{far_o:?}");
    let near_origin = format!("http://{}", near.addr);
    let near_o = origins.iter().find(|o| o.origin == near_origin).expect("the near origin is listed");
    assert!(
        near_o.round_trip.is_some_and(|rtt| rtt < HEAD_AFTER),
        "the near origin keeps its own round trip, not the redirected responses': {near_o:?}"
    );
    assert_keeps_half("reqwest-middleware, redirected to a far origin", far_server.accepted(), N, 0);
}

/// The 503s' go-aheads: each 503 stops 16 KiB before its end until the
/// retry middleware has dropped it (see [`RetryOnce503`]).
type GoAheads = Arc<std::sync::Mutex<Vec<Arc<AtomicBool>>>>;

/// Retries a 503 once, dropping its response, as a retry middleware does;
/// then lets the server send the rest of that 503 (whose connection hyper
/// alone could not keep, whatever it had buffered at the drop).
struct RetryOnce503(GoAheads);

impl Middleware for RetryOnce503 {
    fn handle<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        req: reqwest::Request,
        extensions: &'life1 mut http::Extensions,
        next: Next<'life2>,
    ) -> Pin<Box<dyn Future<Output = reqwest_middleware::Result<reqwest::Response>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            let again = req.try_clone().expect("a GET clones");
            let res = next.clone().run(req, extensions).await?;
            if res.status() != reqwest::StatusCode::SERVICE_UNAVAILABLE {
                return Ok(res);
            }
            drop(res); // its body unread: drained only if the layer is below
            for go in self.0.lock().unwrap().drain(..) {
                go.store(true, Ordering::SeqCst);
            }
            next.run(again, extensions).await
        })
    }
}

/// The layer goes last (innermost): below a retry middleware it drains the
/// 503s the retry discards, and their connections are kept; above it
/// (first, outermost), it never sees them, and each closes its connection.
/// Reuse is not counted on either road: reqwest's connector is private.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_middleware_goes_last_to_drain_what_a_retry_middleware_discards() {
    const N: usize = 10;
    let mut accepted = Vec::new();
    for innermost in [true, false] {
        // Every other request answers 503 (the first of each pair): 48 KiB
        // with the head, the last 16 KiB once the retry dropped it. The
        // retry gets a 200 of 64 KiB.
        let served = Arc::new(AtomicUsize::new(0));
        let go_aheads = GoAheads::default();
        let server = RawServer::start({
            let go_aheads = go_aheads.clone();
            move |_| {
                let body = body_bytes(4, 64 * KIB);
                if !served.fetch_add(1, Ordering::SeqCst).is_multiple_of(2) {
                    return vec![Step::Write([cl_head(64 * KIB), body].concat())];
                }
                let go = Arc::new(AtomicBool::new(false));
                go_aheads.lock().unwrap().push(go.clone());
                let head =
                    format!("HTTP/1.1 503 Service Unavailable\r\ncontent-length: {}\r\n\r\n", 64 * KIB);
                vec![
                    Step::Write([head.as_bytes(), &body[..48 * KIB]].concat()),
                    Step::Until(go),
                    Step::Write(body[48 * KIB..].to_vec()),
                ]
            }
        })
        .await;
        // rustls 0.23.48 deprecates ring's provider (no post-quantum key exchange); the
        // repository keeps ring so that nothing builds aws-lc-sys (a C library).
        #[allow(deprecated)]
        let _ = rustls::crypto::ring::default_provider().install_default();
        let layer = DrainOnDropLayer::new().max_time(SECONDS);
        let builder = reqwest_middleware::ClientBuilder::new(reqwest::Client::new());
        let retry = RetryOnce503(go_aheads);
        let with = if innermost {
            builder.with(retry).with(layer.clone()).build()
        } else {
            builder.with(layer.clone()).with(retry).build()
        };
        for _ in 0..N {
            let res = with.get(server.uri("/").to_string()).send().await.unwrap();
            assert_eq!(res.status(), 200, "retried past the 503");
            drop(res);
            settle(&layer.stats(), SECONDS).await;
        }
        let s = layer.stats().snapshot();
        let seen = if innermost { 2 * N } else { N } as u64;
        assert_eq!(s.count(Reason::EndOfBody), seen, "innermost {innermost}: drained what it saw: {s:?}");
        assert_eq!(s.abandoned + s.skipped + s.failed, 0, "innermost {innermost}: nothing else: {s:?}");
        assert_eq!(
            layer.stats().reuse(),
            ReuseSnapshot::default(),
            "reqwest's connector is private: no reuse counts"
        );
        println!(
            "{N} requests, each retried after a 503: innermost {innermost}: {} connections",
            server.accepted()
        );
        accepted.push(server.accepted());
    }
    let (innermost, outermost) = (accepted[0], accepted[1]);
    assert!(
        outermost >= N,
        "outermost, every retried 503 closes its connection (its tail was not sent at the drop): \
         {outermost} for {N} requests"
    );
    assert_keeps_half("reqwest-middleware innermost, against outermost", innermost, outermost, 0);
}

/// A `DrainBudget` given with the request (`with_extension`) applies to its
/// response: disabled, the early drop is skipped.
#[tokio::test]
async fn a_drain_budget_given_with_the_request_applies() {
    let server = RawServer::start(|_| content_length(1, 64 * KIB)).await;
    let layer = DrainOnDropLayer::new();
    let with = client(Some(&layer));
    let res =
        with.get(server.uri("/").to_string()).with_extension(DrainBudget::disabled()).send().await.unwrap();
    drop(res);
    let s = settle(&layer.stats(), SECONDS).await;
    assert_eq!(s.count(Reason::Disabled), 1, "{s:?}");
}

/// With reqwest's gzip on, the middleware sees the inflated body: the byte
/// budget counts inflated bytes, so a 1 MiB text gzipped to a few KiB is
/// given up at the default 256 KiB (`over_bytes`), and read to its end
/// with a 2 MiB budget, its inflated bytes counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_reqwest_gzip_the_byte_budget_counts_inflated_bytes() {
    for (max_bytes, reason) in [(256 * 1024, Reason::OverBytes), (2 << 20, Reason::EndOfBody)] {
        let (url, _) = gzip::server().await;
        let layer = DrainOnDropLayer::new().max_bytes(max_bytes).max_time(SECONDS);
        let with = client(Some(&layer));
        let res = with.get(&url).send().await.unwrap();
        assert!(res.headers().get("content-length").is_none(), "reqwest removes it when it inflates");
        drop(res);
        let s = settle(&layer.stats(), SECONDS).await;
        assert_eq!(s.count(reason), 1, "max_bytes {max_bytes}: {s:?}");
        if reason == Reason::EndOfBody {
            assert_eq!(s.bytes_drained, 1 << 20, "the inflated bytes, all of them: {s:?}");
        } else {
            assert!(s.bytes_drained > max_bytes, "read past the budget, in inflated bytes: {s:?}");
        }
    }
}
