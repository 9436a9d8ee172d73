//! `RetryRefused`: a request the server refused before processing it is
//! sent again, and never one it may have processed. The server speaks the
//! frames itself (`support::h2::RawH2`), so each refusal is exact, and
//! counts every request and connection that reached it. Each case has its
//! control: hyper-util's client alone fails the same request.

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
