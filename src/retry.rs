//! [`RetryRefused`]: sends a request again, on another connection, when it
//! failed before its response and sending it again is safe:
//!
//! - **whatever its method**, when the server never processed it: on
//!   HTTP/2 a stream above the last stream id of the server's GOAWAY
//!   (nginx's after `keepalive_requests`, Node's when a client resets too
//!   fast, any server shutting down) or reset with REFUSED_STREAM; on
//!   either protocol a request hyper-util failed before writing a byte of
//!   it (its pool handed it a connection that closed at that instant, as a
//!   server recycling connections causes; a connect it cancelled for
//!   another's HTTP/2 connection; a request hyper gave back unsent);
//! - **only if its method is idempotent** (GET, HEAD, OPTIONS, TRACE, PUT,
//!   DELETE: RFC 9110, 9.2.2, "the intended effect on the server of multiple
//!   identical requests is the same as for a single request"), when the
//!   server may have processed it: on HTTP/1, a request written on a pooled
//!   connection as its server closed it for being idle, which fails before
//!   any byte of its response (`IncompleteMessage`, `ConnectionReset`: the
//!   keep-alive race, which Go's `Transport` mends the same way; see
//!   [`DrainOnDropLayer::server_idle_timeout`](crate::DrainOnDropLayer::server_idle_timeout)
//!   for how the layer keeps connections clear of it); on HTTP/2 a stream
//!   reset with another code (Node's ENHANCE_YOUR_CALM when its session
//!   memory is spent), a connection that broke, hyper's `is_canceled` (hyper
//!   fails so a request that waited for a stream slot even when h2 sent it
//!   after a graceful GOAWAY), an h2 reason hyper rebuilt without saying
//!   who sent it. A POST or PATCH that may have been processed is never sent
//!   again.
//!
//! A failed connect is not retried (a dial's error, told to every connect
//! that waited for it, included). Which failures are which is `retries.rs`'s
//! (HTTP/2's part is the HTTP/2 room's), with the facts from h2, hyper and
//! hyper-util it rests on; this module is the tower plumbing. A stream
//! refused with ENHANCE_YOUR_CALM also moves its connection on (it takes no
//! new request), as the `Http2Connector` (feature `http2`) does when it
//! reads such a refusal. Each try after the first goes through the
//! [`DrainOnDropLayer`](crate::DrainOnDropLayer) below, which counts it
//! ([`ReuseSnapshot::sent_again`](crate::ReuseSnapshot::sent_again)).
//!
//! Go's client retries these inside `RoundTrip`; hyper-util's `Client` and
//! tonic retry none of those it wrote (hyperium/hyper#2500), reqwest the
//! unprocessed HTTP/2 ones since 0.12.23.
//!
//! # Where it goes
//!
//! One line, directly above [`DrainOnDropLayer`](crate::DrainOnDropLayer)
//! (or the client itself), below a timeout (tower's `timeout` feature),
//! which then bounds every try, and below any retry of your own, which then
//! sees only what no retry here could mend. The README's stack, on every
//! protocol (on HTTP/2 with an `Http2Connector` around the connector):
//!
//! ```
//! use drain_on_drop::{DrainOnDropLayer, RetryRefusedLayer};
//! use http_body_util::Empty;
//! use hyper::body::Bytes;
//! use hyper_util::client::legacy::{Client, connect::HttpConnector};
//! use hyper_util::rt::TokioExecutor;
//! use tower::ServiceBuilder;
//!
//! let layer = DrainOnDropLayer::new();
//! // The observer tells the layer each connection's idle time.
//! let connector = layer.observe(HttpConnector::new());
//! let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
//! let svc = ServiceBuilder::new()
//!     .layer(RetryRefusedLayer::new())     // what failed unprocessed (or idempotent) goes again
//!     .layer(layer)                        // innermost: sees every response
//!     .service(client);
//! # drop(svc);
//! ```
//!
//! The request body must be `Clone`, and its clone must replay it: `Empty`,
//! `Full`, `String`, `Bytes` (a streaming body cannot be sent twice; tonic's
//! is one). With a body that is not, the method calls `svc.ready()`,
//! `svc.oneshot(req)` and `svc.call(req)` all fail with "the method `…`
//! exists for struct `RetryRefused<…>`, but its trait bounds were not
//! satisfied" (E0599), and never name `Clone`; the body type of the
//! requests is what to look at:
//!
//! ```compile_fail,E0599
//! # use drain_on_drop::RetryRefusedLayer;
//! # use tower::{Service, ServiceBuilder, ServiceExt};
//! /// A request body that is not `Clone`: it cannot be sent twice.
//! struct Once(http_body_util::Full<hyper::body::Bytes>);
//! # impl http_body::Body for Once {
//! #     type Data = hyper::body::Bytes;
//! #     type Error = std::convert::Infallible;
//! #     fn poll_frame(
//! #         self: std::pin::Pin<&mut Self>,
//! #         cx: &mut std::task::Context<'_>,
//! #     ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
//! #         std::pin::Pin::new(&mut self.get_mut().0).poll_frame(cx)
//! #     }
//! # }
//! # async fn run() {
//! let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
//!     .build_http::<Once>();
//! let mut svc = ServiceBuilder::new().layer(RetryRefusedLayer::new()).service(client);
//! let req = http::Request::new(Once(http_body_util::Full::default()));
//! let _ = svc.ready().await.unwrap().call(req).await; // E0599: `Once` is not `Clone`
//! # }
//! ```
//!
//! ```compile_fail,E0599
//! # use drain_on_drop::RetryRefusedLayer;
//! # use tower::{ServiceBuilder, ServiceExt};
//! # struct Once(http_body_util::Full<hyper::body::Bytes>);
//! # impl http_body::Body for Once {
//! #     type Data = hyper::body::Bytes;
//! #     type Error = std::convert::Infallible;
//! #     fn poll_frame(
//! #         self: std::pin::Pin<&mut Self>,
//! #         cx: &mut std::task::Context<'_>,
//! #     ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
//! #         std::pin::Pin::new(&mut self.get_mut().0).poll_frame(cx)
//! #     }
//! # }
//! # async fn run() {
//! # let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
//! #     .build_http::<Once>();
//! let svc = ServiceBuilder::new().layer(RetryRefusedLayer::new()).service(client);
//! let req = http::Request::new(Once(http_body_util::Full::default()));
//! let _ = svc.oneshot(req).await; // E0599 as well
//! # }
//! ```
//!
//! ```compile_fail,E0599
//! # use drain_on_drop::RetryRefusedLayer;
//! # use tower::{Service, ServiceBuilder};
//! # struct Once(http_body_util::Full<hyper::body::Bytes>);
//! # impl http_body::Body for Once {
//! #     type Data = hyper::body::Bytes;
//! #     type Error = std::convert::Infallible;
//! #     fn poll_frame(
//! #         self: std::pin::Pin<&mut Self>,
//! #         cx: &mut std::task::Context<'_>,
//! #     ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
//! #         std::pin::Pin::new(&mut self.get_mut().0).poll_frame(cx)
//! #     }
//! # }
//! # async fn run() {
//! # let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
//! #     .build_http::<Once>();
//! let mut svc = ServiceBuilder::new().layer(RetryRefusedLayer::new()).service(client);
//! let req = http::Request::new(Once(http_body_util::Full::default()));
//! let _ = svc.call(req).await; // E0599 as well
//! # }
//! ```
//!
//! Only the trait's own path, `Service::call(&mut svc, req)`, says "the
//! trait bound `Once: Clone` is not satisfied" (E0277):
//!
//! ```compile_fail,E0277
//! # use drain_on_drop::RetryRefusedLayer;
//! # use tower::{Service, ServiceBuilder};
//! # struct Once(http_body_util::Full<hyper::body::Bytes>);
//! # impl http_body::Body for Once {
//! #     type Data = hyper::body::Bytes;
//! #     type Error = std::convert::Infallible;
//! #     fn poll_frame(
//! #         self: std::pin::Pin<&mut Self>,
//! #         cx: &mut std::task::Context<'_>,
//! #     ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
//! #         std::pin::Pin::new(&mut self.get_mut().0).poll_frame(cx)
//! #     }
//! # }
//! # async fn run() {
//! # let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
//! #     .build_http::<Once>();
//! let mut svc = ServiceBuilder::new().layer(RetryRefusedLayer::new()).service(client);
//! let req = http::Request::new(Once(http_body_util::Full::default()));
//! let _ = Service::call(&mut svc, req).await; // E0277: the trait bound `Once: Clone` is not satisfied
//! # }
//! ```
//!
//! The service's error must be a `std::error::Error`
//! (hyper-util's, hyper's, tonic's are): put a tower `Buffer`, whose errors
//! are boxed, above it. A request goes again through the same service, so on
//! a client that keeps one connection (hyper's own `SendRequest`) it fails
//! again: the retry is for pools, which dial another (hyper-util's `Client`,
//! tonic's reconnecting `Channel`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use http::Request;
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::retries;
use crate::stats::SentAgain;
use crate::timer::Deadline;

/// Wraps a client service in [`RetryRefused`]: a request that failed before
/// its response goes again when the server never processed it, or when its
/// method is idempotent (see the [module](self)). The request body must be
/// `Clone` (`Empty`, `Full`, `String`, `Bytes`); with one that is not, rustc
/// reports E0599 at `ready()`, `oneshot` or `svc.call`, without naming
/// `Clone`, and E0277 naming it only at `Service::call(&mut svc, req)` (see
/// the module).
#[derive(Clone, Copy, Debug)]
pub struct RetryRefusedLayer {
    max_retries: usize,
}

impl RetryRefusedLayer {
    /// A layer that sends a failed request again up to 6 times (see the
    /// [module](self) for which): the first at once, then after 25 ms,
    /// doubling.
    pub fn new() -> Self {
        RetryRefusedLayer { max_retries: retries::MAX_RETRIES }
    }

    /// How many times one request may be sent again. The first retry goes
    /// at once (the failed connection is gone, or takes no new request),
    /// each later one after a wait that starts at 25 ms and doubles. `0`
    /// retries nothing (a refusal still moves its connection on). Default
    /// is 6 (Go's).
    ///
    /// ```
    /// # use drain_on_drop::RetryRefusedLayer;
    /// let layer = RetryRefusedLayer::new().max_retries(2);
    /// ```
    pub fn max_retries(self, max_retries: usize) -> Self {
        RetryRefusedLayer { max_retries }
    }
}

impl Default for RetryRefusedLayer {
    /// Same as [`RetryRefusedLayer::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for RetryRefusedLayer {
    type Service = RetryRefused<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RetryRefused { inner, max_retries: self.max_retries }
    }
}

/// Middleware that sends a request again when it failed before its
/// response and sending it again is safe. Built by [`RetryRefusedLayer`];
/// see the [module](self) for what is retried and where it goes.
///
/// Responses and errors are the inner service's, unchanged: a request that
/// fails every time fails with the last failure.
#[derive(Clone, Debug)]
pub struct RetryRefused<S> {
    inner: S,
    max_retries: usize,
}

impl<S> RetryRefused<S> {
    /// Wraps `inner` with the default settings (see [`RetryRefusedLayer::new`]).
    pub fn new(inner: S) -> Self {
        RetryRefusedLayer::new().layer(inner)
    }

    /// Returns a new [`RetryRefusedLayer`] with the default settings.
    pub fn layer() -> RetryRefusedLayer {
        RetryRefusedLayer::new()
    }

    /// Gets a reference to the inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Gets a mutable reference to the inner service.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes `self`, returning the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B> Service<Request<B>> for RetryRefused<S>
where
    S: Service<Request<B>> + Clone,
    S::Error: std::error::Error + 'static,
    B: Clone,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S, B>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // A copy to send again: the inner service takes the request.
        let copy = (self.max_retries > 0).then(|| replay(&req));
        // The service made ready sends it, and keeps it for the retries; a
        // clone takes its place here.
        let clone = self.inner.clone();
        let mut service = std::mem::replace(&mut self.inner, clone);
        let future = service.call(req);
        ResponseFuture {
            state: State::Sent { future },
            service,
            copy,
            sent: Instant::now(),
            retries: 0,
            max_retries: self.max_retries,
        }
    }
}

/// A copy of `req`: head (extensions included) and body.
fn replay<B: Clone>(req: &Request<B>) -> Request<B> {
    let mut copy = Request::new(req.body().clone());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    *copy.extensions_mut() = req.extensions().clone();
    copy
}

pin_project! {
    /// Response future of [`RetryRefused`]: the inner service's response,
    /// or its error once no retry is left or the failure may have been
    /// processed.
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S::Future>,
        service: S,
        // What is sent again; `None` once the last try took it.
        copy: Option<Request<B>>,
        // When the try on its way began.
        sent: Instant,
        retries: usize,
        max_retries: usize,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        // A try is on its way.
        Sent { #[pin] future: F },
        // Failed more than once: waiting before the next try.
        Waiting { deadline: Deadline },
        // The next try waits for the service to be ready.
        Ready,
    }
}

impl<S, B> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>>,
    S::Error: std::error::Error + 'static,
    B: Clone,
{
    type Output = Result<S::Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Sent { future } => {
                    let error = match ready!(future.poll(cx)) {
                        Ok(response) => return Poll::Ready(Ok(response)),
                        Err(error) => error,
                    };
                    let failure = retries::after_failure(&error);
                    #[cfg(feature = "http2")]
                    if let Some(connected) = failure.punished {
                        crate::connector::punished(connected);
                    }
                    let again = this.copy.as_ref().is_some_and(|copy| failure.allows(copy, *this.sent));
                    if !again {
                        return Poll::Ready(Err(error));
                    }
                    *this.retries += 1;
                    tracing::debug!(
                        target: "drain_on_drop",
                        retry = *this.retries,
                        %error,
                        "the request failed before its response: sending it again"
                    );
                    let delay = retries::retry_delay(*this.retries);
                    this.state.set(if delay.is_zero() {
                        State::Ready
                    } else {
                        State::Waiting { deadline: Deadline::at(Instant::now() + delay) }
                    });
                }
                StateProj::Waiting { deadline } => {
                    ready!(deadline.poll_elapsed(cx));
                    this.state.set(State::Ready);
                }
                StateProj::Ready => {
                    ready!(this.service.poll_ready(cx))?;
                    // The last try takes the copy; earlier ones send a copy of it.
                    let mut request = match this.copy.as_ref() {
                        Some(copy) if *this.retries < *this.max_retries => replay(copy),
                        _ => this.copy.take().expect("a retry has its copy"),
                    };
                    // Counted by a `DrainOnDrop` below (`sent_again`).
                    request.extensions_mut().insert(SentAgain);
                    *this.sent = Instant::now();
                    this.state.set(State::Sent { future: this.service.call(request) });
                }
            }
        }
    }
}

impl<S, B> fmt::Debug for ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("retries", &self.retries)
            .field("max_retries", &self.max_retries)
            .finish_non_exhaustive()
    }
}
