//! The response future of [`DrainOnDrop`](crate::DrainOnDrop).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::Response;
use http_body::Body;
use pin_project_lite::pin_project;

use crate::body::DrainBody;
use crate::request::RequestInfo;

pin_project! {
    /// Response future of [`DrainOnDrop`](crate::DrainOnDrop): wraps the
    /// response body in a [`DrainBody`] when the response head arrives.
    ///
    /// HTTP/2: while drains of the request's origin hold as many streams as
    /// the layer allows them (see the crate's [HTTP/2](crate#http2)
    /// section), it waits for one of them to end before it first polls the
    /// inner future (hyper-util's client sends the request then).
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        // `Option` so that it moves into the body when the head arrives.
        request: Option<RequestInfo>,
        // The inner future was polled: the request's origin had room for it.
        sent: bool,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(inner: F, request: RequestInfo) -> Self {
        ResponseFuture { inner, request: Some(request), sent: false }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body + Send + 'static,
{
    type Output = Result<Response<DrainBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if !*this.sent {
            if let Some(request) = this.request.as_mut() {
                ready!(request.poll_send(cx));
            }
            *this.sent = true;
        }
        let response = ready!(this.inner.poll(cx))?;
        let request = this.request.take().expect("ResponseFuture polled after completion");
        Poll::Ready(Ok(DrainBody::wrap(response, request)))
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
