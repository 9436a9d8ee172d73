//! HTTP/1 keep-alive: a pooled connection meets its server's idle timeout.
//! The layer learns each origin's timeout from what the server says
//! (`Keep-Alive: timeout=`) and does (an idle close its observer sees),
//! and retires a pooled connection idle for nearly that long, before
//! hyper writes a byte on it; a connection idle for less is reused. The
//! server here (`support::idle`) closes a connection idle for exactly its
//! timeout, with a FIN, and counts every request it served by id.
//!
//! Every wait is on a condition with a deadline, and every request a test
//! times is timed from the moment the test saw the previous response end,
//! which is after the connection did: a connection is at least as idle as
//! the test says, whatever the machine's speed.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, IdleTimeout, OriginSnapshot, RetryRefusedLayer};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use support::idle::{Idle, IdleServer};
use support::{SECONDS, SLACK, wait_for};
use tower::util::BoxCloneService;
use tower::{Service, ServiceBuilder, ServiceExt};

type Svc = BoxCloneService<
    http::Request<Empty<Bytes>>,
    http::Response<drain_on_drop::DrainBody<hyper::body::Incoming>>,
    hyper_util::client::legacy::Error,
>;

/// The README's HTTP/1 stack on a fresh client (its own pool), sharing
/// `layer`: `RetryRefusedLayer` above the layer, the observer around the
/// connector.
fn stack(layer: &DrainOnDropLayer) -> Svc {
    let client =
        Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(layer.observe(HttpConnector::new()));
    BoxCloneService::new(
        ServiceBuilder::new().layer(RetryRefusedLayer::new()).layer(layer.clone()).service(client),
    )
}

/// Sends `method` for `path`, drops the body unread (the layer drains it),
/// and waits until the drain ended: the connection is idle from then on.
async fn send(
    svc: &mut Svc,
    layer: &DrainOnDropLayer,
    method: &str,
    uri: http::Uri,
) -> Result<Instant, String> {
    let req = http::Request::builder().method(method).uri(uri).body(Empty::new()).unwrap();
    let res = svc.ready().await.map_err(|e| e.to_string())?.call(req).await.map_err(|e| format!("{e:?}"))?;
    assert!(res.status().is_success());
    drop(res);
    assert!(layer.stats().wait_idle(SECONDS).await, "the drain ends");
    Ok(Instant::now())
}

fn origin(layer: &DrainOnDropLayer) -> OriginSnapshot {
    let origins = layer.origins();
    assert_eq!(origins.len(), 1, "{origins:?}");
    origins.into_iter().next().unwrap()
}

/// Waits until `at` + `after`.
async fn idle_until(at: Instant, after: Duration) {
    tokio::time::sleep_until((at + after).into()).await;
}

/// Waits until a connection idle since `at` is past its origin's
/// `retire_after`, as of when the wait ends (another connection's idle
/// close seen meanwhile may move it).
async fn idle_past_retire_after(at: Instant, layer: &DrainOnDropLayer) {
    loop {
        let after = origin(layer).retire_after.expect("a connection retires") + Duration::from_millis(1);
        if at.elapsed() >= after {
            return;
        }
        idle_until(at, after).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_close_teaches_the_origin_and_a_connection_idle_nearly_that_long_is_not_used_again() {
    const TIMEOUT: Duration = Duration::from_millis(800);
    let server = IdleServer::start(Idle::after(TIMEOUT)).await;
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let mut svc = stack(&layer);

    // First contact: nothing known, nothing retires.
    send(&mut svc, &layer, "GET", server.uri("/?id=w0")).await.unwrap();
    let first = origin(&layer);
    assert_eq!(
        (first.idle_timeout, first.retire_after),
        (None, None),
        "nothing said, nothing seen: {first:?}"
    );

    // The connection sits idle until the server closes it: the origin learns.
    wait_for("the server's idle close", TIMEOUT + SLACK, || server.idle_closes() == 1).await;
    wait_for("the observer to see it", SLACK, || origin(&layer).idle_closes == 1).await;
    let learned = origin(&layer);
    let timeout = learned.idle_timeout.expect("learned");
    assert!(
        timeout >= TIMEOUT / 2 && timeout <= TIMEOUT + SLACK,
        "the timeout learned is the idle time the server closed at: {learned:?}"
    );
    assert!(
        learned.retire_after.expect("a connection retires") < timeout,
        "before the server's close: {learned:?}"
    );

    // A fresh client (the layer is shared, as a long-lived service's): idle
    // for half the timeout, the connection is reused.
    let mut svc = stack(&layer);
    let reuse = layer.stats().reuse();
    let done = send(&mut svc, &layer, "GET", server.uri("/?id=a1")).await.unwrap();
    idle_until(done, TIMEOUT / 2).await;
    send(&mut svc, &layer, "POST", server.uri("/?id=a2")).await.unwrap();
    let now = layer.stats().reuse().since(&reuse);
    assert_eq!(
        (now.connections_opened, now.reused, now.retired),
        (1, 1, 0),
        "idle for half the server's timeout: reused, as the server allows ({now:?})"
    );

    // Idle for `retire_after`: retired (with any other connection of the
    // pool idle that long: hyper-util may have dialed one for b1 while a2's
    // went back to its pool), and the request goes on a connection that
    // carried nothing before (new, or that dial's), unharmed, whatever its
    // method.
    let done = send(&mut svc, &layer, "GET", server.uri("/?id=b1")).await.unwrap();
    idle_past_retire_after(done, &layer).await;
    let before = layer.stats().reuse();
    send(&mut svc, &layer, "POST", server.uri("/?id=b2")).await.unwrap();
    let now = layer.stats().reuse().since(&before);
    assert!(
        now.retired >= 1 && now.reused == 0 && now.sent_again == 0,
        "idle for retire_after: not used again; the POST went on a connection that carried nothing \
         before, sent once ({now:?})"
    );
    assert_eq!(server.served("b2"), 1);
    assert_eq!(origin(&layer).retired, layer.stats().reuse().retired, "counted for the origin too");
}

/// Where trial `i` sends its second request, relative to the server's
/// idle close: -5.5 ms to +5.5 ms, every 1 ms (the window where a request
/// meets the close is a few ms wide on loopback).
fn offset(i: usize) -> i64 {
    -5500 + 1000 * (i % 12) as i64
}

/// One trial on a fresh client sharing `layer`: a GET whose body is dropped,
/// then `method` at the server's idle close + `offset_us`. `Err` with the
/// error if the second request failed.
async fn trial(
    layer: DrainOnDropLayer,
    uri: impl Fn(&str) -> http::Uri,
    method: &'static str,
    close: Duration,
    id: String,
    offset_us: i64,
) -> Result<(), String> {
    let mut svc = stack(&layer);
    let done = send(&mut svc, &layer, "GET", uri(&format!("{id}-1"))).await?;
    let at = if offset_us >= 0 {
        done + close + Duration::from_micros(offset_us as u64)
    } else {
        done + close - Duration::from_micros(offset_us.unsigned_abs())
    };
    tokio::time::sleep_until((at - Duration::from_millis(3)).into()).await;
    while Instant::now() < at {
        std::hint::spin_loop();
    }
    let req =
        http::Request::builder().method(method).uri(uri(&format!("{id}-2"))).body(Empty::new()).unwrap();
    let res = svc.ready().await.map_err(|e| e.to_string())?.call(req).await.map_err(|e| format!("{e:?}"))?;
    drop(res);
    Ok(())
}

/// Runs `n` trials per method, staggered so that no two meet their close at
/// once, all sharing `layer`; returns the failures.
async fn sweep(
    server: &IdleServer,
    layer: &DrainOnDropLayer,
    close: Duration,
    n: usize,
    tag: &str,
) -> Vec<String> {
    let mut handles = Vec::new();
    for (m, method) in ["GET", "POST"].into_iter().enumerate() {
        for i in 0..n {
            let (layer, base) = (layer.clone(), server.uri("/"));
            let id = format!("{tag}-{method}-{i}");
            let stagger = Duration::from_millis(70 * (2 * i + m) as u64);
            handles.push(tokio::spawn(async move {
                tokio::time::sleep(stagger).await;
                let uri = move |id: &str| format!("{base}?id={id}").parse().unwrap();
                trial(layer, uri, method, close, id.clone(), offset(i))
                    .await
                    .err()
                    .map(|e| format!("{id}: {e}"))
            }));
        }
    }
    let mut failed = Vec::new();
    for h in handles {
        failed.extend(h.await.unwrap());
    }
    failed
}

/// The sweep of issue 52: second requests sent around the instant the
/// server closes the idle connection. Once the layer saw one idle close of
/// the server, none fails, GET or POST, and none is processed twice; with
/// `IdleTimeout::Ignored` (0.9.0), requests meet the close (printed, not
/// asserted: whether a loaded machine sends one exactly then varies).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_an_idle_close_was_seen_no_request_sent_around_the_next_one_fails() {
    const TIMEOUT: Duration = Duration::from_millis(700);
    const TRIALS: usize = 12;
    let server = IdleServer::start(Idle::after(TIMEOUT)).await;
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    // The client lives on until its idle connection was closed: a client
    // dropped closes its own connections.
    let mut warm = stack(&layer);
    send(&mut warm, &layer, "GET", server.uri("/?id=warm")).await.unwrap();
    wait_for("the warm-up connection's idle close, seen", TIMEOUT + SLACK, || {
        origin(&layer).idle_closes == 1
    })
    .await;
    let before = layer.stats().reuse();
    let failed = sweep(&server, &layer, TIMEOUT, TRIALS, "learned").await;
    let reuse = layer.stats().reuse().since(&before);
    let twice = server.twice();
    println!("learned {:?}: {} of {} failed, {reuse:?}", origin(&layer), failed.len(), 2 * TRIALS);
    assert!(failed.is_empty(), "none fails once an idle close was seen: {failed:#?}");
    assert!(twice.is_empty(), "none processed twice: {twice:?}");

    let control = DrainOnDropLayer::new().max_time(SECONDS).server_idle_timeout(IdleTimeout::Ignored);
    send(&mut warm, &control, "GET", server.uri("/?id=warm-ignored")).await.unwrap();
    let failed = sweep(&server, &control, TIMEOUT, TRIALS, "ignored").await;
    println!(
        "ignored (0.9.0): {} of {} failed: {failed:#?}; {:?}",
        failed.len(),
        2 * TRIALS,
        control.stats().reuse()
    );
    assert!(server.twice().is_empty(), "none processed twice: {:?}", server.twice());
}

/// What a server says is known at first contact: `Keep-Alive: timeout=1`
/// retires a connection before 1 s, with nothing seen; Node's server
/// closes a second after it says, and once that close was seen the origin
/// knows 2 s (what it said plus a second, at most).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_server_says_is_the_timeout_until_its_close_is_seen() {
    const CLOSE: Duration = Duration::from_secs(2);
    let idle = Idle { says: Some("timeout=1".into()), ..Idle::after(CLOSE) };
    let server = IdleServer::start(idle).await;
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let mut svc = stack(&layer);
    let done = send(&mut svc, &layer, "GET", server.uri("/?id=1")).await.unwrap();
    let said = origin(&layer);
    assert_eq!(said.idle_timeout, Some(Duration::from_secs(1)), "what it said: {said:?}");
    assert!(
        said.retire_after.expect("retires") < Duration::from_secs(1) - Duration::from_millis(31),
        "{said:?}"
    );
    idle_past_retire_after(done, &layer).await;
    send(&mut svc, &layer, "POST", server.uri("/?id=2")).await.unwrap();
    let reuse = layer.stats().reuse();
    assert_eq!((reuse.connections_opened, reuse.retired), (2, 1), "retired at first contact: {reuse:?}");

    wait_for("the server's idle close", CLOSE + SLACK, || server.idle_closes() == 1).await;
    wait_for("the observer to see it", SLACK, || origin(&layer).idle_closes == 1).await;
    let seen = origin(&layer);
    let timeout = seen.idle_timeout.unwrap();
    assert!(
        timeout > Duration::from_secs(1) && timeout <= CLOSE,
        "the close it saw, no later than it said plus a second: {seen:?}"
    );
}

/// `Keep-Alive: max=0`: the server takes no further request on the
/// connection; it retires (when next polled idle), and the next request
/// goes on a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_says_max_0_gets_the_next_request_on_a_new_connection() {
    let idle = Idle { says: Some("timeout=5, max=0".into()), ..Idle::after(Duration::from_secs(5)) };
    let server = IdleServer::start(idle).await;
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let mut svc = stack(&layer);
    for i in 0..3 {
        send(&mut svc, &layer, "POST", server.uri(&format!("/?id={i}"))).await.unwrap();
    }
    let reuse = layer.stats().reuse();
    assert_eq!((reuse.connections_opened, reuse.reused), (3, 0), "{reuse:?}");
    assert!(reuse.retired >= 2, "each connection retired before a second request: {reuse:?}");
    assert_eq!(server.accepted(), 3);
    assert!(server.twice().is_empty());
}

/// A server restarted with another idle timeout. Its restart closes the
/// idle connection right behind a response: not an idle timeout, it
/// teaches nothing. A shorter timeout is learned at its first idle close;
/// a longer one once a connection stayed idle, unused, until its server
/// closed it, and reuse comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_another_timeout_is_relearned_shorter_and_longer() {
    let ms = Duration::from_millis;
    let server = IdleServer::start(Idle::after(ms(600))).await;
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let mut svc = stack(&layer);
    let timeout = || origin(&layer).idle_timeout.unwrap_or_default();
    let closes = || origin(&layer).idle_closes;

    send(&mut svc, &layer, "GET", server.uri("/?id=a")).await.unwrap();
    wait_for("600 ms learned", ms(600) + SLACK, || closes() == 1).await;
    let first = timeout();
    assert!(first > ms(300), "{:?}", origin(&layer));

    // Restarted with 250 ms, right behind a response.
    send(&mut svc, &layer, "GET", server.uri("/?id=b")).await.unwrap();
    let server = server.restart(Idle::after(ms(250))).await;
    wait_for("the restart's close, seen", SLACK, || closes() == 2).await;
    assert_eq!(timeout(), first, "a restart's close teaches nothing: {:?}", origin(&layer));
    send(&mut svc, &layer, "GET", server.uri("/?id=c")).await.unwrap();
    wait_for("250 ms learned", ms(250) + SLACK, || closes() == 3).await;
    assert!(timeout() >= ms(125) && timeout() < ms(400), "the shorter close, at once: {:?}", origin(&layer));

    // Restarted with 900 ms: connection e sits idle, unused, past the 250
    // ms learned, until its server closes it.
    send(&mut svc, &layer, "GET", server.uri("/?id=d")).await.unwrap();
    let server = server.restart(Idle::after(ms(900))).await;
    wait_for("the restart's close, seen", SLACK, || closes() == 4).await;
    send(&mut svc, &layer, "GET", server.uri("/?id=e")).await.unwrap();
    wait_for("900 ms learned", ms(900) + SLACK, || closes() == 5).await;
    assert!(timeout() >= ms(600), "a longer close raises it: {:?}", origin(&layer));
    let reuse = layer.stats().reuse();
    let done = send(&mut svc, &layer, "GET", server.uri("/?id=f")).await.unwrap();
    idle_until(done, ms(400)).await;
    send(&mut svc, &layer, "POST", server.uri("/?id=g")).await.unwrap();
    let now = layer.stats().reuse().since(&reuse);
    assert_eq!((now.connections_opened, now.reused), (1, 1), "idle 400 ms of 900: reused ({now:?})");
}

/// The idle state is the connection's, never a response's guess: many
/// callers on one origin, small bodies (all buffered with their heads, so
/// hyper-util pools the connection before the caller sees the response),
/// read to the end or dropped, and every answer but a connection's first
/// 500 ms late, longer than `retire_after`: no request in flight is ever
/// taken for an idle connection, none fails, none is processed twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_answer_on_a_reused_connection_is_never_taken_for_idleness() {
    const TIMEOUT: Duration = Duration::from_millis(300);
    let idle = Idle { body: 1024, slow_after_first: Duration::from_millis(500), ..Idle::after(TIMEOUT) };
    let server = IdleServer::start(idle).await;
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let mut warm = stack(&layer);
    send(&mut warm, &layer, "GET", server.uri("/?id=warm")).await.unwrap();
    wait_for("the idle close, seen", TIMEOUT + SLACK, || origin(&layer).idle_closes == 1).await;
    assert!(origin(&layer).retire_after.unwrap() < Duration::from_millis(500));
    let svc = stack(&layer);
    let callers: Vec<_> = (0..8)
        .map(|c| {
            let (mut svc, layer, base) = (svc.clone(), layer.clone(), server.uri("/"));
            tokio::spawn(async move {
                for i in 0..6 {
                    let method = if (c + i) % 2 == 0 { "GET" } else { "POST" };
                    let uri: http::Uri = format!("{base}?id={c}-{i}").parse().unwrap();
                    let req = http::Request::builder().method(method).uri(uri).body(Empty::new()).unwrap();
                    let res = svc
                        .ready()
                        .await
                        .unwrap()
                        .call(req)
                        .await
                        .unwrap_or_else(|e| panic!("{c}-{i}: {e:?}"));
                    if i % 2 == 0 {
                        http_body_util::BodyExt::collect(res.into_body()).await.unwrap();
                    }
                    // Sometimes idle for nearly the server's timeout.
                    if i % 3 == 2 {
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                }
                drop(layer);
            })
        })
        .collect();
    for caller in callers {
        caller.await.unwrap();
    }
    assert!(server.twice().is_empty(), "none processed twice: {:?}", server.twice());
    println!("{:?}; {:?}", layer.stats().reuse(), origin(&layer));
    assert_eq!(layer.stats().reuse().sent_again, 0, "none failed and was sent again");
}

/// The race lost: a server closes the pooled connection as the next
/// request arrives, without answering. A GET goes again on a new
/// connection (counted `sent_again`); a POST, which the server may have
/// read, fails and is never sent again. Dials after the first wait until
/// the test lets them go, so that the request goes out on the pooled
/// connection (hyper-util dials beside its pool checkout), whatever the
/// machine's speed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_that_lost_the_race_goes_again_and_a_post_never() {
    use support::{RawServer, Step, content_length};
    let server =
        RawServer::start(|head| if head.nth == 0 { content_length(1, 1024) } else { vec![Step::Close] })
            .await;
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let gate = Gated::default();
    let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(layer.observe(gate.clone()));
    let svc = ServiceBuilder::new().layer(RetryRefusedLayer::new()).layer(layer.clone()).service(client);
    let mut svc = BoxCloneService::new(svc);
    send(&mut svc, &layer, "GET", server.uri("/first")).await.unwrap();
    let again = tokio::spawn({
        let (mut svc, layer, uri) = (svc.clone(), layer.clone(), server.uri("/again"));
        async move { send(&mut svc, &layer, "GET", uri).await }
    });
    wait_for("the GET to be sent again", SLACK, || layer.stats().reuse().sent_again == 1).await;
    gate.open();
    again.await.unwrap().expect("the GET went again, on a new connection");

    // A new client: one connection, answered once, then the POST on it.
    let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(layer.observe(gate.clone()));
    let svc = ServiceBuilder::new().layer(RetryRefusedLayer::new()).layer(layer.clone()).service(client);
    let mut svc = BoxCloneService::new(svc);
    send(&mut svc, &layer, "GET", server.uri("/next")).await.unwrap();
    gate.close();
    let post = tokio::spawn({
        let (mut svc, layer, uri) = (svc.clone(), layer.clone(), server.uri("/post"));
        async move { send(&mut svc, &layer, "POST", uri).await }
    });
    let err = tokio::time::timeout(SLACK, post).await.expect("the POST fails at once").unwrap();
    let err = err.expect_err("the POST is not sent again");
    assert!(err.contains("IncompleteMessage") || err.contains("Reset"), "{err}");
    assert_eq!(layer.stats().reuse().sent_again, 1, "the POST was not sent again");
    gate.open();
}

/// A connector whose dials after the first wait while it is closed.
#[derive(Clone, Default)]
struct Gated {
    dials: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    closed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Gated {
    fn open(&self) {
        self.closed.store(false, std::sync::atomic::Ordering::SeqCst);
    }

    fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Service<http::Uri> for Gated {
    type Response = <HttpConnector as Service<http::Uri>>::Response;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        use std::sync::atomic::Ordering;
        let first = self.dials.fetch_add(1, Ordering::SeqCst) == 0;
        if first {
            self.close();
        }
        let closed = self.closed.clone();
        let mut http = HttpConnector::new();
        Box::pin(async move {
            while !first && closed.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Ok(http.call(uri).await?)
        })
    }
}

/// A client built with hyper-util's `retry_canceled_requests(false)`: the
/// request a retired connection gives back unwritten fails as `client error
/// (Canceled)`, and `RetryRefusedLayer` sends it again whatever its method
/// (nothing of it was written), counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_hyper_utils_own_resend_the_retry_sends_a_retired_connections_request_again() {
    const TIMEOUT: Duration = Duration::from_millis(400);
    let server = IdleServer::start(Idle::after(TIMEOUT)).await;
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let mut warm = stack(&layer);
    send(&mut warm, &layer, "GET", server.uri("/?id=warm")).await.unwrap();
    wait_for("the idle close, seen", TIMEOUT + SLACK, || origin(&layer).idle_closes == 1).await;

    let client = Client::builder(TokioExecutor::new())
        .retry_canceled_requests(false)
        .build::<_, Empty<Bytes>>(layer.observe(HttpConnector::new()));
    let mut bare = BoxCloneService::new(ServiceBuilder::new().layer(layer.clone()).service(client.clone()));
    let done = send(&mut bare, &layer, "GET", server.uri("/?id=a1")).await.unwrap();
    idle_past_retire_after(done, &layer).await;
    let err = send(&mut bare, &layer, "POST", server.uri("/?id=a2")).await.expect_err("given back unwritten");
    assert!(err.contains("Canceled"), "{err}");
    assert_eq!(server.served("a2"), 0, "never written");

    let mut retried = BoxCloneService::new(
        ServiceBuilder::new().layer(RetryRefusedLayer::new()).layer(layer.clone()).service(client),
    );
    let done = send(&mut retried, &layer, "GET", server.uri("/?id=b1")).await.unwrap();
    idle_past_retire_after(done, &layer).await;
    let before = layer.stats().reuse();
    send(&mut retried, &layer, "POST", server.uri("/?id=b2"))
        .await
        .expect("sent again on another connection");
    let now = layer.stats().reuse().since(&before);
    assert_eq!(now.sent_again, 1, "{now:?}");
    assert!(now.retired >= 1, "{now:?}");
    assert_eq!(server.served("b2"), 1, "processed once");
}
