//! The response future of [`DrainOnDrop`](crate::DrainOnDrop).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;
use http_body::Body;
use pin_project_lite::pin_project;

use crate::body::DrainBody;
use crate::request::RequestInfo;

pin_project! {
    /// Response future of [`DrainOnDrop`](crate::DrainOnDrop): wraps the
    /// response body in a [`DrainBody`] when the response head arrives. It
    /// waits for nothing but the inner future: no request ever waits for a
    /// drain.
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
    B: Body + Send + 'static,
{
    type Output = Result<Response<DrainBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = match this.inner.poll(cx) {
            Poll::Ready(response) => response?,
            Poll::Pending => {
                #[cfg(feature = "http2")]
                if let Some(request) = this.request.as_ref() {
                    crate::response::sent_on(request);
                }
                return Poll::Pending;
            }
        };
        let request = this.request.take().expect("ResponseFuture polled after completion");
        Poll::Ready(Ok(DrainBody::wrap(response, request)))
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
