//! The response future of [`DrainOnDrop`](crate::DrainOnDrop).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::{Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;

use crate::adaptive::{Origin, OriginKey};
use crate::body::DrainBody;
use crate::budget::DrainBudget;
use crate::layer::{Shared, SharedRef};
use crate::policy::RequestSays;
use crate::stats::Trace;

pin_project! {
    /// Response future of [`DrainOnDrop`](crate::DrainOnDrop): wraps the
    /// response body in a [`DrainBody`] when the response head arrives.
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        // `Option` so that it moves into the body when the head arrives.
        request: Option<RequestInfo>,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(inner: F, request: RequestInfo) -> Self {
        ResponseFuture { inner, request: Some(request) }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body + Send + Unpin + 'static,
{
    type Output = Result<Response<DrainBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(Nesting::enter(|| this.inner.poll(cx)))?;
        let request = this.request.take().expect("ResponseFuture polled after completion");
        Poll::Ready(Ok(DrainBody::wrap(response, request)))
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

thread_local! {
    /// How many `DrainOnDrop` calls (or polls of their response futures)
    /// are on this thread's stack.
    static NESTING: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Tells a `DrainOnDrop` whether another one is calling it: the inner
/// service of a `DrainOnDrop` is called, and its response future polled,
/// inside the outer one's `call` and `poll` (also through retry, timeout,
/// redirect and map layers between them). Only then does the inner one mark
/// its responses as owned, so that a single layer pays nothing for stacking.
/// A layer that calls its inner service later on another task (tower's
/// `Buffer`) hides the nesting: two `DrainOnDrop` layers around a `Buffer`
/// drain twice.
pub(crate) struct Nesting;

impl Nesting {
    /// Runs `f` as the inside of a `DrainOnDrop` call or poll.
    pub(crate) fn enter<T>(f: impl FnOnce() -> T) -> T {
        struct Exit;
        impl Drop for Exit {
            fn drop(&mut self) {
                NESTING.with(|n| n.set(n.get() - 1));
            }
        }
        NESTING.with(|n| n.set(n.get() + 1));
        let _exit = Exit;
        f()
    }

    /// Whether another `DrainOnDrop` is calling (or polling) this one.
    pub(crate) fn inside_another() -> bool {
        NESTING.with(|n| n.get() > 0)
    }
}

/// What `call` learns from the request, for its response's body.
pub(crate) struct RequestInfo {
    pub(crate) shared: SharedRef,
    pub(crate) says: RequestSays,
    /// A per-request [`DrainBudget`] from the extensions.
    pub(crate) budget: Option<DrainBudget>,
    /// The span and origin for the drop's event, when DEBUG is enabled.
    pub(crate) trace: Option<Box<Trace>>,
    /// In adaptive mode: the request's origin.
    pub(crate) origin: Option<Arc<Origin>>,
    /// Another `DrainOnDrop` is calling this one: mark the response as owned.
    pub(crate) nested: bool,
}

impl RequestInfo {
    pub(crate) fn read<B>(shared: &Arc<Shared>, req: &Request<B>) -> Self {
        let traced = tracing::enabled!(target: "drain_on_drop", tracing::Level::DEBUG);
        // Parsed once, for the origin table and the event alike.
        let key = (shared.config.adaptive || traced).then(|| OriginKey::from_uri(req.uri())).flatten();
        let trace = traced.then(|| Trace::capture(key.as_ref().map(|k| k.to_string()).unwrap_or_default()));
        let origin = key.filter(|_| shared.config.adaptive).map(|key| shared.origins.get(&key));
        let extensions = req.extensions();
        shared.note_home();
        RequestInfo {
            shared: SharedRef::new(shared),
            says: RequestSays::read(req.headers()),
            budget: if extensions.is_empty() { None } else { extensions.get::<DrainBudget>().copied() },
            trace,
            origin,
            nested: Nesting::inside_another(),
        }
    }

    /// For a response that came without its request
    /// ([`wrap_response`](crate::DrainOnDropLayer::wrap_response)).
    pub(crate) fn none(shared: &Arc<Shared>) -> Self {
        shared.note_home();
        let shared = SharedRef::new(shared);
        let trace = tracing::enabled!(target: "drain_on_drop", tracing::Level::DEBUG)
            .then(|| Trace::capture(String::new()));
        RequestInfo { shared, says: RequestSays::unknown(), budget: None, trace, origin: None, nested: false }
    }
}
