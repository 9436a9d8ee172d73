//! `RetryRefused`: a request the server refused before processing it is
//! sent again whatever its method, one it may have processed only if its
//! method is idempotent (never a POST). The server speaks the frames itself
//! (`support::h2::RawH2`), so each refusal is exact, and counts every
//! request and connection that reached it. Each case has its control:
//! hyper-util's client alone fails the same request. Four tests catch a
//! request where hyper parks it, waiting for a stream slot on a server that
//! allows one, when a GOAWAY comes. The last four provoke each failure
//! hyper-util makes before writing a byte of a request (a checkout handed a
//! closed connection, a connect that lost the ALPN lock after its checkout
//! failed, a checkout left waiting when another caller gave up its dial, a
//! request hyper gave back unsent), pin the exact error hyper-util returns
//! (what `RetryRefused` reads: CI runs them on the newest hyper-util too),
//! and send a POST through the stack there: answered, processed once.

mod support;

use std::time::Duration;

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, RetryRefusedLayer};
use http::{Request, Response, StatusCode};
use http_body_util::{Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use support::h2::*;
use support::*;
use tower::retry::Policy;
use tower::{Service, ServiceBuilder, ServiceExt};

fn h2_client<B>() -> Client<HttpConnector, B>
where
    B: http_body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    Client::builder(TokioExecutor::new()).http2_only(true).build_http()
}

/// A GET through `svc`: its status, or the error's `Debug`.
async fn status<S, B>(svc: &mut S, uri: http::Uri) -> Result<StatusCode, String>
where
    S: Service<Request<Empty<Bytes>>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
{
    let res = svc.ready().await.map_err(|e| format!("{e:?}"))?.call(get(uri)).await;
    res.map(|r| r.status()).map_err(|e| format!("{e:?}"))
}

/// The README's HTTP/2 stack: the retry above the drain, over hyper-util's
/// client.
fn stack<B>() -> impl Service<
    Request<B>,
    Response = Response<drain_on_drop::DrainBody<hyper::body::Incoming>>,
    Error = hyper_util::client::legacy::Error,
    Future: Send,
> + Clone
+ Send
where
    B: http_body::Body + Clone + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    ServiceBuilder::new().layer(RetryRefusedLayer::new()).layer(DrainOnDropLayer::new()).service(h2_client())
}

#[tokio::test]
async fn a_stream_refused_with_refused_stream_is_sent_again_and_answered() {
    let server =
        RawH2::start(|a| if a.nth_on_conn == 0 { Act::Reset(REFUSED_STREAM) } else { Act::Answer }).await;
    let control = status(&mut h2_client(), server.uri("/")).await;
    assert!(
        control.as_ref().is_err_and(|e| e.contains("REFUSED_STREAM")),
        "the control: hyper-util alone fails the refused request: {control:?}"
    );
    let server =
        RawH2::start(|a| if a.nth_on_conn == 0 { Act::Reset(REFUSED_STREAM) } else { Act::Answer }).await;
    assert_eq!(status(&mut stack(), server.uri("/")).await, Ok(StatusCode::OK), "sent again, and answered");
    assert_eq!(
        (server.requests(), server.connections()),
        (2, 1),
        "two tries reached the server, one connection"
    );
}

/// One request to bring the connection up, then two at once, the second
/// sent once the first has reached the server; their results.
async fn first_and_second<S, B>(
    svc: S,
    server: &RawH2,
) -> (Result<StatusCode, String>, Result<StatusCode, String>)
where
    S: Service<Request<Empty<Bytes>>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
{
    let (mut up, mut first, mut second) = (svc.clone(), svc.clone(), svc);
    assert_eq!(status(&mut up, server.uri("/up")).await, Ok(StatusCode::OK), "the connection is up");
    tokio::join!(status(&mut first, server.uri("/first")), async {
        wait_for("the first request at the server", SLACK, || server.requests() == 2).await;
        status(&mut second, server.uri("/second")).await
    })
}

/// The server takes two requests at once, then sends GOAWAY whose last
/// stream id is the first one's: the second was never processed, and goes
/// again on a new connection; the first is answered.
async fn goaway_above_last_stream(code: u32) {
    let script = move |a: Arrived| match (a.conn, a.nth_on_conn) {
        (0, 0) => Act::Answer, // the connection's first request: it is up
        (0, 1) => Act::Hold,
        (0, 2) => Act::GoAway(code),
        _ => Act::Answer,
    };
    for retry in [false, true] {
        let server = RawH2::start(script).await;
        let (first, second) = if retry {
            first_and_second(stack(), &server).await
        } else {
            first_and_second(h2_client::<Empty<Bytes>>(), &server).await
        };
        assert_eq!(first, Ok(StatusCode::OK), "the request at or below the last stream id is answered");
        if retry {
            assert_eq!(second, Ok(StatusCode::OK), "GOAWAY {code}: the request above it goes again");
            assert_eq!(
                (server.requests(), server.connections()),
                (4, 2),
                "GOAWAY {code}: the second request reached the server twice, the second time on a new connection"
            );
        } else {
            assert!(
                second.as_ref().is_err_and(|e| e.contains("GoAway")),
                "the control: hyper-util alone fails the request above the last stream id: {second:?}"
            );
            assert_eq!(server.requests(), 3, "no retry in the control");
        }
    }
}

#[tokio::test]
async fn a_request_above_a_graceful_goaways_last_stream_goes_again_on_a_new_connection() {
    goaway_above_last_stream(NO_ERROR).await;
}

#[tokio::test]
async fn a_request_above_an_error_goaways_last_stream_goes_again_on_a_new_connection() {
    // As Node sends when a client resets more than it allows.
    goaway_above_last_stream(INTERNAL_ERROR).await;
}

/// Failures after which the server may have processed the request: a
/// stream reset with any code but REFUSED_STREAM, one at or below a
/// GOAWAY's last stream id whose connection then closes, one whose
/// connection is cut.
const MAY_HAVE_PROCESSED: [(&str, Act); 5] = [
    ("RST_STREAM CANCEL", Act::Reset(CANCEL)),
    ("RST_STREAM INTERNAL_ERROR", Act::Reset(INTERNAL_ERROR)),
    ("RST_STREAM ENHANCE_YOUR_CALM (Node's refusals)", Act::Reset(ENHANCE_YOUR_CALM)),
    ("GOAWAY at its stream, then the connection closed", Act::GoAwayThenCut),
    ("the connection cut", Act::Cut),
];

/// A POST the server may have processed is never sent again.
#[tokio::test]
async fn a_post_the_server_may_have_processed_is_never_sent_again() {
    for (what, act) in MAY_HAVE_PROCESSED {
        let server = RawH2::start(move |_| act).await;
        let req = Request::post(server.uri("/")).body(Full::new(Bytes::from_static(b"once"))).unwrap();
        let result = stack::<Full<Bytes>>().oneshot(req).await;
        assert!(result.is_err(), "{what}: the request fails: {result:?}");
        assert_eq!(server.requests(), 1, "{what}: never sent again ({result:?})");
    }
}

/// An idempotent request (GET) that failed so goes again: sent twice, it
/// has the effect of once (RFC 9110, 9.2.2), as the docs say.
#[tokio::test]
async fn an_idempotent_request_the_server_may_have_processed_goes_again() {
    for (what, act) in MAY_HAVE_PROCESSED {
        let first = move |a: Arrived| a.conn == 0 && a.nth_on_conn == 0;
        let server = RawH2::start(move |a| if first(a) { act } else { Act::Answer }).await;
        assert_eq!(status(&mut stack(), server.uri("/")).await, Ok(StatusCode::OK), "{what}");
        assert_eq!(server.requests(), 2, "{what}: sent again once");
    }
}

#[tokio::test]
async fn a_request_refused_every_time_is_tried_max_retries_times_more_then_fails_with_the_refusal() {
    let server = RawH2::start(|_| Act::Reset(REFUSED_STREAM)).await;
    let mut svc = ServiceBuilder::new().layer(RetryRefusedLayer::new()).service(h2_client());
    let result = status(&mut svc, server.uri("/")).await;
    assert!(result.as_ref().is_err_and(|e| e.contains("REFUSED_STREAM")), "the last refusal: {result:?}");
    assert_eq!(server.requests(), 7, "the first try and 6 retries");
    let server = RawH2::start(|_| Act::Reset(REFUSED_STREAM)).await;
    let mut svc = ServiceBuilder::new().layer(RetryRefusedLayer::new().max_retries(2)).service(h2_client());
    assert!(status(&mut svc, server.uri("/")).await.is_err());
    assert_eq!(server.requests(), 3, "max_retries(2)");
}

/// A POST is sent again too (the server never processed it), with the same
/// body: the request's copy replays it.
#[tokio::test]
async fn a_refused_post_goes_again_with_its_body() {
    let server =
        RawH2::start(|a| if a.nth_on_conn == 0 { Act::Reset(REFUSED_STREAM) } else { Act::Answer }).await;
    let body = Full::new(Bytes::from(body_bytes(7, 20_000)));
    let req = Request::post(server.uri("/upload")).header("x-trace", "kept").body(body).unwrap();
    let mut svc = stack::<Full<Bytes>>();
    let res = svc.ready().await.unwrap().call(req).await.expect("answered on the second try");
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(read_all(res.into_body()).await.unwrap(), ANSWER, "the answer's body, through the drain");
    let bodies = server.counts.bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 2);
    assert!(bodies.iter().all(|b| *b == body_bytes(7, 20_000)), "both tries carried the whole body");
}

/// A 503 policy of the caller's, for the composition test: retries a 503
/// once.
#[derive(Clone)]
struct Retry503(usize);

impl<B: Clone, R, E> Policy<Request<B>, Response<R>, E> for Retry503 {
    type Future = std::future::Ready<()>;

    fn retry(&mut self, _: &mut Request<B>, res: &mut Result<Response<R>, E>) -> Option<Self::Future> {
        let unavailable = matches!(res, Ok(res) if res.status() == StatusCode::SERVICE_UNAVAILABLE);
        (unavailable && self.0 > 0).then(|| {
            self.0 -= 1;
            std::future::ready(())
        })
    }

    fn clone_request(&mut self, req: &Request<B>) -> Option<Request<B>> {
        let mut copy = Request::new(req.body().clone());
        *copy.uri_mut() = req.uri().clone();
        Some(copy)
    }
}

/// Under tower's `Timeout` and `Retry`, above the drain: a refused request
/// goes again inside the timeout, and what reaches tower's retry is the
/// answer; a timeout shorter than the server's silence still ends the
/// request, retries and all.
#[tokio::test]
async fn it_composes_with_towers_timeout_and_retry_and_the_drain() {
    let server = RawH2::start(|a| match a.nth_on_conn {
        0 => Act::Reset(REFUSED_STREAM),
        _ => Act::Answer,
    })
    .await;
    let drain = DrainOnDropLayer::new();
    let mut svc = ServiceBuilder::new()
        .timeout(SECONDS)
        .retry(Retry503(1))
        .layer(RetryRefusedLayer::new())
        .layer(drain.clone())
        .service(h2_client::<Empty<Bytes>>());
    assert_eq!(status(&mut svc, server.uri("/")).await, Ok(StatusCode::OK));
    assert_eq!(server.requests(), 2);
    // A server that holds every request: the timeout ends it.
    let silent = RawH2::start(|_| Act::Hold).await;
    let mut svc = ServiceBuilder::new()
        .timeout(Duration::from_millis(300))
        .layer(RetryRefusedLayer::new())
        .layer(drain)
        .service(h2_client::<Empty<Bytes>>());
    let result = status(&mut svc, silent.uri("/")).await;
    assert!(result.as_ref().is_err_and(|e| e.contains("Elapsed")), "the timeout's error: {result:?}");
}

/// What a failed request's error says, read from its cause chain as the
/// retry reads it.
#[derive(Clone, Debug)]
struct Failed {
    /// The error's `Debug`.
    debug: String,
    /// A hyper error in the chain `is_canceled`.
    canceled: bool,
    /// The h2 error in the chain, if any: its reason, whether the peer sent
    /// it (`is_remote`), whether it is a GOAWAY.
    h2: Option<(Option<::h2::Reason>, bool, bool)>,
}

impl Failed {
    fn of(error: &(dyn std::error::Error + 'static)) -> Failed {
        let (mut canceled, mut h2) = (false, None);
        let mut next = Some(error);
        while let Some(e) = next {
            if let Some(e) = e.downcast_ref::<hyper::Error>() {
                canceled |= e.is_canceled();
            }
            if let Some(e) = e.downcast_ref::<::h2::Error>() {
                h2 = h2.or(Some((e.reason(), e.is_remote(), e.is_go_away())));
            }
            next = e.source();
        }
        Failed { debug: format!("{error:?}"), canceled, h2 }
    }

    /// An h2 error with `reason` that hyper rebuilt from the bare reason
    /// (`h2::Error::from(Reason)`): it says neither who sent it nor whether
    /// it was a GOAWAY.
    fn is_rebuilt(&self, reason: ::h2::Reason) -> bool {
        self.h2 == Some((Some(reason), false, false))
    }
}

/// `req` through `svc`: its status, or what its error says.
async fn send<S, B>(svc: &mut S, req: Request<Empty<Bytes>>) -> Result<StatusCode, Failed>
where
    S: Service<Request<Empty<Bytes>>, Response = Response<B>>,
    S::Error: std::error::Error + 'static,
{
    let res = svc.ready().await.map_err(|e| Failed::of(&e))?.call(req).await;
    res.map(|r| r.status()).map_err(|e| Failed::of(&e))
}

/// Every failure the retry saw, in order: what each try got from the
/// services below it.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<Failed>>>;

/// [`stack`], with every error that reaches the retry written down in
/// `seen` on its way up (unchanged).
fn observed_stack(
    seen: Seen,
) -> impl Service<
    Request<Empty<Bytes>>,
    Response = Response<drain_on_drop::DrainBody<hyper::body::Incoming>>,
    Error = hyper_util::client::legacy::Error,
> + Clone {
    ServiceBuilder::new()
        .layer(RetryRefusedLayer::new())
        .map_err(move |e: hyper_util::client::legacy::Error| {
            seen.lock().unwrap().push(Failed::of(&e));
            e
        })
        .layer(DrainOnDropLayer::new())
        .service(h2_client())
}

/// How long B gets, try after try, to be parked inside hyper (dispatched,
/// its h2 stream pending open) before the server's GOAWAY. Nothing
/// tells a test that hyper has parked it: that happens in hyper's dispatch
/// task, which runs when the runtime gets to it, and on a loaded machine
/// (CI runs these tests with busy loops on every core) it may not run for a
/// while. A try whose B was not parked yet when the GOAWAY arrived tests
/// nothing here (hyper never hands B to h2 on the closing connection, and
/// hyper-util sends it on a new one by itself), so each test tells such a
/// try apart by what it left, and does it again with the next, longer wait:
/// it fails only if B is never parked, the longest wait included.
const PARK_WAITS: [Duration; 4] =
    [Duration::from_millis(50), Duration::from_millis(200), Duration::from_secs(1), SLACK];

/// Runs `attempt` with each of [`PARK_WAITS`] until it says B was parked
/// (returns `Some`).
async fn until_parked<T>(what: &str, mut attempt: impl AsyncFnMut(Duration) -> Option<T>) -> T {
    for wait in PARK_WAITS {
        if let Some(done) = attempt(wait).await {
            return done;
        }
        eprintln!("{what}: B was not parked in hyper {wait:?} after it was sent: again, waiting longer");
    }
    panic!("{what}: B was never parked in hyper before the GOAWAY, even given {SLACK:?}")
}

/// The script of the one-stream server: a connection's first request
/// (`/up`) answered, its second (A) held until the test's GOAWAY answers
/// it, any other answered when it arrives.
fn a_held(a: Arrived) -> Act {
    if a.nth_on_conn == 1 { Act::Hold } else { Act::Answer }
}

/// What one try of [`parked_b`] left.
#[derive(Debug)]
struct Parked {
    /// What A's caller got.
    a: Result<StatusCode, Failed>,
    /// What B's caller got.
    b: Result<StatusCode, Failed>,
    /// B's arrivals at the server: the third request on connection 0, any
    /// request on a later connection.
    b_at_server: Vec<Arrived>,
}

impl Parked {
    /// Whether B reached the server on connection 0 after the GOAWAY: h2
    /// sent it on the slot A freed, so it had been waiting there.
    fn sent_after_go_away(&self) -> bool {
        self.b_at_server.iter().any(|b| b.conn == 0 && b.after_go_away)
    }
}

/// On a server allowing one stream at a time (SETTINGS_MAX_CONCURRENT_STREAMS
/// = 1; `server`, scripted by [`a_held`]): `GET /up` brings the connection
/// up, `GET /a` (A) takes the slot and is held, then `method /b` (B, empty
/// body, so its HEADERS end it) is sent: hyper takes it and parks it,
/// its stream pending open until the slot is free. `wait` later, the server
/// sends GOAWAY `code` with `last` on the connection, answers A, then does
/// what `then` says. Returns once both callers have their results and
/// connection 0 is closed (so that all B's frames on it were read).
async fn parked_b<S, B>(
    svc: S,
    server: &RawH2,
    method: http::Method,
    wait: Duration,
    (code, last, then): (u32, Last, Then),
) -> Parked
where
    S: Service<Request<Empty<Bytes>>, Response = Response<B>> + Clone,
    S::Error: std::error::Error + 'static,
{
    let (mut up, mut a, mut b) = (svc.clone(), svc.clone(), svc);
    assert_eq!(
        send(&mut up, get(server.uri("/up"))).await.ok(),
        Some(StatusCode::OK),
        "the connection is up"
    );
    let (a, b) = tokio::join!(send(&mut a, get(server.uri("/a"))), async {
        wait_for("A at the server", SLACK, || server.requests() == 2).await;
        let req = Request::builder().method(method).uri(server.uri("/b")).body(Empty::new()).unwrap();
        let (b, sent) = tokio::join!(send(&mut b, req), async {
            tokio::time::sleep(wait).await;
            server.go_away(0, code, last, then).await
        });
        assert!(sent, "the GOAWAY was written on connection 0, before it closed");
        b
    });
    wait_for("connection 0 closed", SLACK, || server.ended(0)).await;
    let b_at_server = server.arrivals().into_iter().filter(|r| r.conn > 0 || r.nth_on_conn == 2).collect();
    Parked { a, b, b_at_server }
}

/// The first phase of a graceful shutdown (RFC 9113, 6.8): GOAWAY NO_ERROR,
/// last stream id 2^31-1, then A answered, and the connection keeps serving.
const GRACEFUL_PHASE_ONE: (u32, Last, Then) = (NO_ERROR, Last::Max, Then::KeepServing);

/// `go_away` (whose last stream id covers B) while B waits in hyper for
/// the slot A holds, through hyper-util's client alone (`retry` false,
/// `seen` left empty) or the stack (`seen`: what the retry saw): the first
/// try that parked B, which shows in h2 sending it on the slot A freed.
async fn processed_though_failed(
    retry: bool,
    method: http::Method,
    go_away: (u32, Last, Then),
    seen: &Seen,
) -> Parked {
    let what = format!("{method} after GOAWAY {go_away:?} (stack: {retry})");
    until_parked(&what, async |wait| {
        seen.lock().unwrap().clear();
        let server = RawH2::start_with(Some(1), a_held).await;
        let parked = if retry {
            parked_b(observed_stack(seen.clone()), &server, method.clone(), wait, go_away).await
        } else {
            parked_b(h2_client(), &server, method.clone(), wait, go_away).await
        };
        eprintln!("{what}, {wait:?}: {parked:?}; the retry saw {:?}", seen.lock().unwrap());
        parked.sent_after_go_away().then_some(parked)
    })
    .await
}

/// A processed request must not be sent twice. On a server allowing one
/// stream at a time, A holds the slot and a POST (B) waits for it inside
/// hyper. The server starts a graceful shutdown (GOAWAY NO_ERROR, last
/// stream id 2^31-1: every stream may still come), then answers A; h2 sends
/// B on the freed slot, and the server processes it and answers it. hyper
/// 1.13 fails B all the same, as `is_canceled` ("connection closed"): its
/// dispatch task fails the request it parked once h2 reports the GOAWAY
/// (hyper's src/proto/h2/client.rs, `poll_dispatch`). The control,
/// hyper-util's client alone, shows that: B processed, its caller told it
/// failed. With the stack, B's POST is not sent again (a canceled request
/// may have been processed, and this one was): the server saw it once.
#[tokio::test]
async fn a_post_sent_after_a_graceful_goaways_first_phase_is_never_sent_twice_though_hyper_fails_it() {
    let seen = Seen::default();
    for retry in [false, true] {
        let parked = processed_though_failed(retry, http::Method::POST, GRACEFUL_PHASE_ONE, &seen).await;
        let with = if retry { "the stack" } else { "the control (hyper-util alone)" };
        assert_eq!(parked.a.as_ref().ok(), Some(&StatusCode::OK), "{with}: A is answered: {parked:?}");
        assert_eq!(
            parked.b_at_server.len(),
            1,
            "{with}: the server processed B once, and B's POST never went again: {parked:?}"
        );
        // What hyper 1.13 tells B's caller: failed, though the server
        // processed it and answered.
        assert!(
            parked.b.as_ref().is_err_and(|e| e.canceled && e.debug.contains("connection closed")),
            "{with}: B's caller gets hyper's is_canceled (\"connection closed\"): {:?}",
            parked.b
        );
        if retry {
            let seen = seen.lock().unwrap();
            assert!(
                seen.len() == 1 && seen[0].canceled,
                "the retry saw B fail once, canceled, and sent nothing again: {seen:?}"
            );
        }
    }
}

/// The same spot with a GET as B: hyper fails it as `is_canceled` though
/// the server processed it, and an idempotent request may go again (RFC
/// 9110, 9.2.2): with the stack, B's caller gets the answer, the server
/// having seen B at most twice (on the closing connection, then on a new
/// one).
#[tokio::test]
async fn a_get_sent_after_a_graceful_goaways_first_phase_may_go_again_and_is_answered() {
    let seen = Seen::default();
    let parked = processed_though_failed(true, http::Method::GET, GRACEFUL_PHASE_ONE, &seen).await;
    assert_eq!(parked.a.as_ref().ok(), Some(&StatusCode::OK), "A is answered: {parked:?}");
    assert_eq!(parked.b.as_ref().ok(), Some(&StatusCode::OK), "B's caller gets the answer: {parked:?}");
    assert!(parked.b_at_server.len() <= 2, "B reached the server at most twice: {parked:?}");
    let seen = seen.lock().unwrap();
    assert!(
        seen.first().is_some_and(|f| f.canceled),
        "the mechanism: B's first try failed as hyper's is_canceled though the server processed it: {seen:?}"
    );
}

/// GOAWAY INTERNAL_ERROR whose last stream id is A's, then A answered and
/// the connection closed 200 ms later: as Node does after too many resets.
const ERROR_GOAWAY: (u32, Last, Then) = (INTERNAL_ERROR, Last::Seen, Then::Close);

/// An error GOAWAY while B waits in hyper for the slot A holds, through
/// hyper-util's client alone (`retry` false) or the stack: the first try
/// that parked B. A B that was parked fails on its first try (hyper fails
/// it with the GOAWAY's reason); one that was not is handed back to
/// hyper-util unsent, which sends it on a new connection itself, and its
/// first try does not fail at all.
async fn refused_while_parked(retry: bool, method: http::Method, seen: &Seen) -> (Parked, Failed) {
    let what = format!("{method} refused by an error GOAWAY (stack: {retry})");
    until_parked(&what, async |wait| {
        seen.lock().unwrap().clear();
        let server = RawH2::start_with(Some(1), a_held).await;
        let parked = if retry {
            parked_b(observed_stack(seen.clone()), &server, method.clone(), wait, ERROR_GOAWAY).await
        } else {
            parked_b(h2_client(), &server, method.clone(), wait, ERROR_GOAWAY).await
        };
        eprintln!("{what}, {wait:?}: {parked:?}; the retry saw {:?}", seen.lock().unwrap());
        let first_failure =
            if retry { seen.lock().unwrap().first().cloned() } else { parked.b.clone().err() };
        first_failure.map(|failure| (parked, failure))
    })
    .await
}

/// A refused request goes again. On a server allowing one stream at a
/// time, A holds the slot and a GET (B) waits for it inside hyper; the
/// server sends GOAWAY INTERNAL_ERROR whose last stream id is A's, answers
/// A, then closes the connection (as Node does after too many resets). B
/// was never sent (its stream id is above the last stream id), but hyper
/// fails it with an h2 error it rebuilt from the GOAWAY's bare reason, which
/// says neither that the peer sent it nor that it was a GOAWAY. The
/// control, hyper-util's client alone, fails B so. With the stack, B (a GET:
/// idempotent) is sent again on a new connection and answered, and the
/// server saw it once, there.
#[tokio::test]
async fn a_get_refused_by_an_error_goaway_while_it_waited_for_a_stream_goes_again() {
    let seen = Seen::default();
    for retry in [false, true] {
        let (parked, first) = refused_while_parked(retry, http::Method::GET, &seen).await;
        let with = if retry { "the stack" } else { "the control (hyper-util alone)" };
        assert_eq!(parked.a.as_ref().ok(), Some(&StatusCode::OK), "{with}: A is answered: {parked:?}");
        assert!(
            first.is_rebuilt(::h2::Reason::INTERNAL_ERROR),
            "{with}: hyper fails B with an h2 INTERNAL_ERROR rebuilt from the bare reason: {first:?}"
        );
        if retry {
            assert_eq!(parked.b.as_ref().ok(), Some(&StatusCode::OK), "sent again, and answered: {parked:?}");
            assert!(
                parked.b_at_server.len() == 1 && parked.b_at_server[0].conn == 1,
                "the server saw B once, on the new connection: {parked:?}"
            );
        } else {
            assert!(parked.b.is_err(), "the control: B fails: {parked:?}");
            assert!(parked.b_at_server.is_empty(), "the control: the server never saw B: {parked:?}");
        }
    }
}

/// The same spot with a POST as B. The server never processed it (its
/// stream id is above the GOAWAY's last stream id), but hyper's error says
/// only INTERNAL_ERROR, rebuilt from the bare reason: neither that the peer
/// sent it nor that it was a GOAWAY, so not whether B was sent. So a POST
/// failed so is NOT sent again: its caller gets the error, and the server
/// never saw B. The control shows why: an INTERNAL_ERROR GOAWAY whose last
/// stream id covers B (2^31-1) lets h2 send B on the slot A frees, the
/// server processes it, and hyper fails it with the very same error; sent
/// again, that POST would have been processed twice.
#[tokio::test]
async fn a_post_refused_by_an_error_goaway_while_it_waited_for_a_stream_is_not_sent_again() {
    let seen = Seen::default();
    let (parked, first) = refused_while_parked(true, http::Method::POST, &seen).await;
    assert_eq!(parked.a.as_ref().ok(), Some(&StatusCode::OK), "A is answered: {parked:?}");
    assert!(
        first.is_rebuilt(::h2::Reason::INTERNAL_ERROR),
        "hyper fails B with an h2 INTERNAL_ERROR rebuilt from the bare reason: {first:?}"
    );
    assert!(
        parked.b.as_ref().is_err_and(|e| e.is_rebuilt(::h2::Reason::INTERNAL_ERROR)),
        "B's caller gets hyper's error: {:?}",
        parked.b
    );
    assert!(parked.b_at_server.is_empty(), "the server never saw B: {parked:?}");
    assert_eq!(seen.lock().unwrap().len(), 1, "one try, not sent again");

    // The control: the same error for a B the server processed.
    let covered = (INTERNAL_ERROR, Last::Max, Then::KeepServing);
    let parked = processed_though_failed(true, http::Method::POST, covered, &seen).await;
    assert!(
        parked.b.as_ref().is_err_and(|e| e.is_rebuilt(::h2::Reason::INTERNAL_ERROR)),
        "the control: B, processed, fails with the same error as B refused: {:?}",
        parked.b
    );
    assert_eq!(
        parked.b_at_server.len(),
        1,
        "the control: the server processed B once, never again: {parked:?}"
    );
}

// hyper-util's own failures before a byte of the request was written.
// `RetryRefused` sends them again whatever the method, reading them from
// hyper-util's `Display` (`never_written`, src/http2/retries.rs): hyper-util
// names neither its error's kind nor its pool's errors in its API. Each test
// below provokes one on real sockets, in an order the test fixes through
// `support::alpn` (no sleep decides it), first with hyper-util's client
// alone, asserting the error exactly as the classifier reads it (CI runs
// these on the newest hyper-util too: one that words them otherwise fails
// here), then through the README's stack (`RetryRefused` above
// `DrainOnDrop`, over a `Client` with the `Http2Connector`), where B, a
// POST, goes again, is answered, and reaches the server exactly once.
//
// Over ALPN (no `http2_only`), hyper-util takes its HTTP/2 lock for an
// origin only once a dial's connection says h2; the dial of a request
// that finds the lock taken is cancelled ("ALPN upgraded to HTTP/2"), and
// the request is left to its pool checkout, which the lock's connection
// serves once it is pooled. The connector's connections say h2 over plain
// TCP to the scripted h2c server (`RawH2`), and the origin is `http://`:
// the `Http2Connector` gates no dial to an `http://` origin before one of
// its connections spoke HTTP/2, so every request dials its own, as with
// hyper-util alone. (Over `https://`, before its first connection spoke,
// the gate makes B wait for A's dial, and none of these arises in this
// order.)

use support::alpn::{AlpnConnector, AlpnDial, HoldingExecutor, Signal};

/// The body of B, the POST each of the tests below follows: the server
/// counts the requests that carried it.
const B_BODY: &[u8] = b"B: a POST to be processed once";

type ClientError = hyper_util::client::legacy::Error;

/// What a caller got: the status, or hyper-util's error.
type Got = Result<StatusCode, ClientError>;

fn get_empty(uri: http::Uri) -> Request<Full<Bytes>> {
    Request::get(uri).body(Full::new(Bytes::new())).unwrap()
}

fn post_b(uri: http::Uri) -> Request<Full<Bytes>> {
    Request::post(uri).body(Full::new(Bytes::from_static(B_BODY))).unwrap()
}

/// Times B reached `server` whole (the requests that carried its body).
fn b_processed(server: &RawH2) -> usize {
    server.counts.bodies.lock().unwrap().iter().filter(|b| b.as_slice() == B_BODY).count()
}

/// A task hyper-util's `Client` hands its executor.
type Task = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// hyper-util's client alone (no `http2_only`) over `connector`, its tasks
/// run by `exec`.
fn alpn_client<E>(connector: AlpnConnector, exec: E) -> Client<AlpnConnector, Full<Bytes>>
where
    E: hyper::rt::Executor<Task> + Send + Sync + Clone + 'static,
{
    Client::builder(exec).build(connector)
}

/// What an error of hyper-util's says, and what its source says.
type Said = (String, Option<String>);

fn said(e: &ClientError) -> Said {
    (e.to_string(), std::error::Error::source(e).map(|s| s.to_string()))
}

/// What every failure that reached the retry said, in order.
type SeenSaid = std::sync::Arc<std::sync::Mutex<Vec<Said>>>;

/// The README's HTTP/2 stack over `connector`: the retry above the drain,
/// over hyper-util's client with the `Http2Connector`, its tasks run by
/// `exec`; every failure that reaches the retry written down in `seen` on
/// its way up (unchanged).
fn alpn_stack<E>(
    connector: AlpnConnector,
    exec: E,
    seen: SeenSaid,
) -> impl Service<
    Request<Full<Bytes>>,
    Response = Response<drain_on_drop::DrainBody<hyper::body::Incoming>>,
    Error = ClientError,
    Future: Send,
> + Clone
+ Send
+ 'static
where
    E: hyper::rt::Executor<Task> + Send + Sync + Clone + 'static,
{
    let client = Client::builder(exec).build(drain_on_drop::Http2Connector::new(connector));
    ServiceBuilder::new()
        .layer(RetryRefusedLayer::new())
        .map_err(move |e: ClientError| {
            seen.lock().unwrap().push(said(&e));
            e
        })
        .layer(DrainOnDropLayer::new())
        .service(client)
}

/// Sends `req` through `svc` on a task of its own (a caller of its own):
/// its status, or hyper-util's error.
fn spawn_send<S, B>(mut svc: S, req: Request<Full<Bytes>>) -> tokio::task::JoinHandle<Got>
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = ClientError> + Send + 'static,
    S::Future: Send,
    B: 'static,
{
    tokio::spawn(async move {
        let res = svc.ready().await?.call(req).await?;
        Ok(res.status())
    })
}

/// What `task`'s caller got, waited for at most twice [`SLACK`].
async fn joined<T>(what: &str, task: tokio::task::JoinHandle<T>) -> T {
    let deadline = 2 * SLACK;
    match tokio::time::timeout(deadline, task).await {
        Ok(Ok(got)) => got,
        Ok(Err(e)) => panic!("{what}: its task ended without a result: {e}"),
        Err(_) => panic!("{what}: no result after {deadline:?}"),
    }
}

/// Asserts that `got` is the failure of one of hyper-util's pool errors as
/// `never_written` reads it: `client error (Connect)`, carrying no
/// connection's info, whose direct source (the pool's error) says `said`
/// and has no source of its own.
#[track_caller]
fn assert_pool_error(what: &str, got: &Got, said: &str) {
    let e = match got {
        Err(e) => e,
        Ok(status) => panic!("{what}: hyper-util's pool error {said:?} expected, the caller got {status}"),
    };
    assert_eq!(e.to_string(), "client error (Connect)", "{what}: a Connect error: {e:?}");
    assert!(e.is_connect() && e.connect_info().is_none(), "{what}: no connection's info: {e:?}");
    let pool =
        std::error::Error::source(e).unwrap_or_else(|| panic!("{what}: the pool's error as source: {e:?}"));
    assert_eq!(pool.to_string(), said, "{what}: the pool's error, as `never_written` reads it: {e:?}");
    assert!(pool.source().is_none(), "{what}: the pool's error has no source of its own: {e:?}");
}

/// Asserts that B, sent again through the stack (`with`), was answered,
/// and that the server processed its POST once.
#[track_caller]
fn assert_answered_once(with: &str, b: &Got, server: &RawH2) {
    assert_eq!(b.as_ref().ok(), Some(&StatusCode::OK), "{with}: B goes again and is answered: {b:?}");
    assert_eq!(b_processed(server), 1, "{with}: the server processed B once");
}

/// What hyper-util's pool error saying `pool` says, as [`said`] reads it.
fn said_pool(pool: &str) -> Said {
    ("client error (Connect)".to_string(), Some(pool.to_string()))
}

/// Asserts that `got` is hyper-util's `Canceled` as `never_written` reads
/// it (`client error (Canceled)`); returns the error.
#[track_caller]
fn assert_canceled<'a>(what: &str, got: &'a Got) -> &'a ClientError {
    let e = match got {
        Err(e) => e,
        Ok(status) => panic!("{what}: hyper-util's Canceled expected, the caller got {status}"),
    };
    assert_eq!(e.to_string(), "client error (Canceled)", "{what}: as `never_written` reads it: {e:?}");
    e
}

/// The dials of [`closed_checkout`]: A's (dial 0) poisoned, its first
/// write (under hyper-util's HTTP/2 lock) held until hyper-util dropped
/// B's connection; B's (dial 1) returned once A's connection holds the
/// lock.
fn closed_checkout_dials() -> Vec<AlpnDial> {
    let b = AlpnDial::default();
    let a = AlpnDial { poisoned: true, writes_after: Some(b.dropped.clone()), ..AlpnDial::default() };
    let b = AlpnDial { returns_after: Some(a.first_write.clone()), ..b };
    vec![a, b]
}

/// A (`GET /a`) dials and takes hyper-util's HTTP/2 lock; B (`POST /b`)
/// waits in the pool (its checkout) and dials; B's dial returns while A
/// holds the lock, and hyper-util cancels it ("ALPN upgraded to HTTP/2"),
/// leaving B to its checkout. A's connection is pooled, and handed to
/// every checkout waiting (A's and B's); it is poisoned, so B's checkout
/// fails: "checked out connection was closed". The callers' results, A's
/// and B's.
async fn closed_checkout<S, B>(svc: S, dials: &AlpnConnector, server: &RawH2) -> (Got, Got)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = ClientError> + Clone + Send + 'static,
    S::Future: Send,
    B: 'static,
{
    let a = spawn_send(svc.clone(), get_empty(server.uri("/a")));
    wait_for("A's dial", SLACK, || dials.dial(0).called.is_set()).await;
    let b = spawn_send(svc, post_b(server.uri("/b")));
    wait_for("A's connection under hyper-util's HTTP/2 lock", SLACK, || dials.dial(0).first_write.is_set())
        .await;
    wait_for("B's dial cancelled by hyper-util (A holds its HTTP/2 lock)", SLACK, || {
        dials.dial(1).dropped.is_set()
    })
    .await;
    (joined("A", a).await, joined("B", b).await)
}

/// A request whose pool checkout was handed a connection that closed at
/// that instant (hyper-util's `CheckedOutClosedValue`: "checked out
/// connection was closed") goes again whatever its method. hyper-util
/// alone fails it as `client error (Connect)` whose source is the pool's
/// error (it sends such a request again itself only with `http2_only`),
/// and the server never saw it. With the stack, B (a POST) goes again on
/// a new connection, is answered, and the server processed it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_whose_checkout_was_handed_a_closed_connection_goes_again_and_is_processed_once() {
    let seen = SeenSaid::default();
    for retry in [false, true] {
        let server = RawH2::start(|_| Act::Answer).await;
        let dials = AlpnConnector::new(server.addr, closed_checkout_dials());
        let (a, b) = if retry {
            closed_checkout(alpn_stack(dials.clone(), TokioExecutor::new(), seen.clone()), &dials, &server)
                .await
        } else {
            closed_checkout(alpn_client(dials.clone(), TokioExecutor::new()), &dials, &server).await
        };
        let with = if retry { "the stack" } else { "the control (hyper-util alone)" };
        assert_eq!(a.as_ref().ok(), Some(&StatusCode::OK), "{with}: A is answered on its connection: {a:?}");
        if retry {
            assert_answered_once(with, &b, &server);
            assert!(dials.calls() >= 3, "{with}: B's second try dialed a connection of its own");
            assert_eq!(
                *seen.lock().unwrap(),
                [said_pool("checked out connection was closed")],
                "{with}: the retry saw B's first try fail so, and nothing else"
            );
        } else {
            assert_pool_error(
                "the control: hyper-util alone fails B",
                &b,
                "checked out connection was closed",
            );
            assert_eq!(b_processed(&server), 0, "{with}: B was never written");
        }
    }
}

/// The dials of [`lost_lock`]: A's (dial 0) poisoned, its first write held
/// until B dialed (B waits in the pool by then); B's (dial 1) returned once
/// C's connection holds hyper-util's HTTP/2 lock; C's (dial 2) first write
/// held until hyper-util dropped B's connection.
fn lost_lock_dials() -> Vec<AlpnDial> {
    let (b, c) = (AlpnDial::default(), AlpnDial::default());
    let a = AlpnDial { poisoned: true, writes_after: Some(b.called.clone()), ..AlpnDial::default() };
    let b = AlpnDial { returns_after: Some(c.first_write.clone()), ..b };
    let c = AlpnDial { writes_after: Some(b.dropped.clone()), ..c };
    vec![a, b, c]
}

/// A (`GET /a`) dials and takes hyper-util's HTTP/2 lock; B (`POST /b`)
/// waits in the pool and dials; A's connection, poisoned, is pooled and
/// handed to B's checkout, which fails ("checked out connection was
/// closed") while B's dial is still on its way, so B waits for its dial
/// alone. C (`GET /c`) then dials (the pool drops A's closed connection)
/// and takes the lock, and B's dial returns while C holds it: hyper-util
/// cancels it, and B has nothing left to wait for: `client error
/// (Canceled)`. The callers' results, A's, B's and C's.
async fn lost_lock<S, B>(svc: S, dials: &AlpnConnector, server: &RawH2) -> (Got, Got, Got)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = ClientError> + Clone + Send + 'static,
    S::Future: Send,
    B: 'static,
{
    let a = spawn_send(svc.clone(), get_empty(server.uri("/a")));
    wait_for("A's dial", SLACK, || dials.dial(0).called.is_set()).await;
    let b = spawn_send(svc.clone(), post_b(server.uri("/b")));
    // A's request at the server: its connection was pooled before it went,
    // and handed to B's checkout, which found it closed.
    wait_for("A at the server", SLACK, || server.requests() >= 1).await;
    let c = spawn_send(svc, get_empty(server.uri("/c")));
    wait_for("C's connection under hyper-util's HTTP/2 lock", SLACK, || dials.dial(2).first_write.is_set())
        .await;
    wait_for("B's dial cancelled by hyper-util (C holds its HTTP/2 lock)", SLACK, || {
        dials.dial(1).dropped.is_set()
    })
    .await;
    (joined("A", a).await, joined("B", b).await, joined("C", c).await)
}

/// A request whose connect hyper-util cancelled because another connection
/// to its origin took its HTTP/2 lock ("ALPN upgraded to HTTP/2"), after
/// its pool checkout had already failed, goes again whatever its method.
/// hyper-util alone fails it as `client error (Canceled)` (its source
/// saying "ALPN upgraded to HTTP/2"), and the server never saw it. With the
/// stack, B (a POST) goes again, is answered (on C's connection, or one of
/// its own), and the server processed it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_whose_connect_lost_the_alpn_lock_after_its_checkout_failed_goes_again_and_is_processed_once()
{
    let seen = SeenSaid::default();
    for retry in [false, true] {
        let server = RawH2::start(|_| Act::Answer).await;
        let dials = AlpnConnector::new(server.addr, lost_lock_dials());
        let (a, b, c) = if retry {
            lost_lock(alpn_stack(dials.clone(), TokioExecutor::new(), seen.clone()), &dials, &server).await
        } else {
            lost_lock(alpn_client(dials.clone(), TokioExecutor::new()), &dials, &server).await
        };
        let with = if retry { "the stack" } else { "the control (hyper-util alone)" };
        assert_eq!(a.as_ref().ok(), Some(&StatusCode::OK), "{with}: A is answered on its connection: {a:?}");
        assert_eq!(c.as_ref().ok(), Some(&StatusCode::OK), "{with}: C is answered on its connection: {c:?}");
        if retry {
            assert_answered_once(with, &b, &server);
            let alpn = ("client error (Canceled)".to_string(), Some("ALPN upgraded to HTTP/2".to_string()));
            assert_eq!(
                *seen.lock().unwrap(),
                [alpn],
                "{with}: the retry saw B's first try fail so, and nothing else"
            );
        } else {
            let e = assert_canceled("the control: hyper-util alone fails B", &b);
            assert!(
                !e.is_connect() && e.connect_info().is_none(),
                "the control: B's connect was cancelled before it had a connection: {e:?}"
            );
            // The mechanism (the classifier reads only the Display above).
            let source = std::error::Error::source(e).map(|s| s.to_string());
            assert_eq!(
                source.as_deref(),
                Some("ALPN upgraded to HTTP/2"),
                "the control: hyper-util cancelled B's connect for C's HTTP/2 lock: {e:?}"
            );
            assert_eq!(b_processed(&server), 0, "{with}: B was never written");
        }
    }
}

/// The dials of [`given_up`]: A's (dial 0) first write (under hyper-util's
/// HTTP/2 lock) held for good; B's (dial 1) returned once A's connection
/// holds the lock.
fn given_up_dials() -> Vec<AlpnDial> {
    let a = AlpnDial { writes_after: Some(Signal::default()), ..AlpnDial::default() };
    let b = AlpnDial { returns_after: Some(a.first_write.clone()), ..AlpnDial::default() };
    vec![a, b]
}

/// A (`GET /a`) dials and takes hyper-util's HTTP/2 lock, its handshake
/// held; B (`POST /b`) waits in the pool and dials; B's dial returns while
/// A holds the lock, and hyper-util cancels it, leaving B to its checkout.
/// Then A's caller gives up (its task aborted, as a timeout would): its
/// request's future is dropped, and with it the lock, before any connection
/// was pooled; hyper-util drops every checkout waiting for the origin, and
/// B's fails: "request was canceled". B's caller's result.
async fn given_up<S, B>(svc: S, dials: &AlpnConnector, server: &RawH2) -> Got
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = ClientError> + Clone + Send + 'static,
    S::Future: Send,
    B: 'static,
{
    let a = spawn_send(svc.clone(), get_empty(server.uri("/a")));
    wait_for("A's dial", SLACK, || dials.dial(0).called.is_set()).await;
    let b = spawn_send(svc, post_b(server.uri("/b")));
    wait_for("A's connection under hyper-util's HTTP/2 lock", SLACK, || dials.dial(0).first_write.is_set())
        .await;
    wait_for("B's dial cancelled by hyper-util (A holds its HTTP/2 lock)", SLACK, || {
        dials.dial(1).dropped.is_set()
    })
    .await;
    a.abort();
    let a = tokio::time::timeout(SLACK, a).await.expect("A's task ends once aborted");
    assert!(a.is_err_and(|e| e.is_cancelled()), "A's caller gave up before A was answered");
    wait_for("A's connection dropped with its request", SLACK, || dials.dial(0).dropped.is_set()).await;
    joined("B", b).await
}

/// A request left waiting in hyper-util's pool for a connection whose dial
/// went away unpooled (its caller gave up holding hyper-util's HTTP/2
/// lock: hyper-util's `CheckoutNoLongerWanted`, "request was canceled")
/// goes again whatever its method. hyper-util alone fails it as `client
/// error (Connect)` whose source is the pool's error, and the server never
/// saw it. With the stack, B (a POST) goes again on a connection of its
/// own, is answered, and the server processed it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_left_waiting_when_another_caller_gave_up_its_dial_goes_again_and_is_processed_once() {
    let seen = SeenSaid::default();
    for retry in [false, true] {
        let server = RawH2::start(|_| Act::Answer).await;
        let dials = AlpnConnector::new(server.addr, given_up_dials());
        let b = if retry {
            given_up(alpn_stack(dials.clone(), TokioExecutor::new(), seen.clone()), &dials, &server).await
        } else {
            given_up(alpn_client(dials.clone(), TokioExecutor::new()), &dials, &server).await
        };
        let with = if retry { "the stack" } else { "the control (hyper-util alone)" };
        if retry {
            assert_answered_once(with, &b, &server);
            assert_eq!(server.requests(), 1, "{with}: and nothing else (A never went)");
            assert_eq!(
                *seen.lock().unwrap(),
                [said_pool("request was canceled")],
                "{with}: the retry saw B's first try fail so, and nothing else"
            );
        } else {
            assert_pool_error("the control: hyper-util alone fails B", &b, "request was canceled");
            assert_eq!(server.requests(), 0, "{with}: neither A nor B was written");
        }
    }
}

/// B (`POST /b`) dials a fresh connection while `exec` holds every task it
/// is given: the connection's (hyper's driver, hyper-util's dispatch task)
/// never run. hyper-util hands B the connection (its capture set: past the
/// connection's readiness check), and the test drops the held tasks: hyper
/// gives B back unsent ("connection closed", or "connection was not ready"
/// if the dispatch task was gone before B was queued), and hyper-util, the
/// connection fresh, fails it. B's caller's result.
async fn given_back<S, B>(svc: S, exec: &HoldingExecutor, server: &RawH2) -> Got
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = ClientError> + Send + 'static,
    S::Future: Send,
    B: 'static,
{
    let mut req = post_b(server.uri("/b"));
    let captured = hyper_util::client::legacy::connect::capture_connection(&mut req);
    exec.hold();
    let b = spawn_send(svc, req);
    wait_for("B handed its connection (captured)", SLACK, || captured.connection_metadata().is_some()).await;
    let held = exec.drop_held();
    assert!(held > 0, "the connection's tasks were held, never run");
    joined("B", b).await
}

/// A request hyper gave back unsent on a fresh connection (its dispatch
/// task gone before it took the request: hyper's `TrySendError` with the
/// message) goes again whatever its method. hyper-util alone fails it as
/// `client error (Canceled)` (it sends such a request again itself only on
/// a reused connection), hyper's `is_canceled` its source, and the server
/// never saw it. With the stack, B (a POST) goes again on a new connection,
/// is answered, and the server processed it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_hyper_gave_back_unsent_on_a_fresh_connection_goes_again_and_is_processed_once() {
    let seen = SeenSaid::default();
    for retry in [false, true] {
        let server = RawH2::start(|_| Act::Answer).await;
        let dials = AlpnConnector::new(server.addr, Vec::new());
        let exec = HoldingExecutor::default();
        let b = if retry {
            given_back(alpn_stack(dials.clone(), exec.clone(), seen.clone()), &exec, &server).await
        } else {
            given_back(alpn_client(dials.clone(), exec.clone()), &exec, &server).await
        };
        let with = if retry { "the stack" } else { "the control (hyper-util alone)" };
        if retry {
            assert_answered_once(with, &b, &server);
            assert_eq!(dials.calls(), 2, "{with}: B's second try went on a new connection");
            let seen = seen.lock().unwrap();
            assert!(
                seen.len() == 1 && seen[0].0 == "client error (Canceled)",
                "{with}: the retry saw B's first try fail so, and nothing else: {seen:?}"
            );
        } else {
            let e = assert_canceled("the control: hyper-util alone fails B", &b);
            assert!(e.connect_info().is_some(), "the control: B failed on its connection: {e:?}");
            let hyper = std::error::Error::source(e).and_then(|s| s.downcast_ref::<hyper::Error>());
            assert!(
                hyper.is_some_and(hyper::Error::is_canceled),
                "the control: hyper gave B back, canceled: {e:?}"
            );
            assert_eq!(b_processed(&server), 0, "{with}: B was never written");
        }
    }
}
