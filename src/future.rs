use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::Response;
use http_body::Body;
use pin_project_lite::pin_project;

use crate::body::DrainBody;
use crate::policy::{self, Policy};

pin_project! {
    /// Response future of [`DrainOnDrop`]: wraps the response body in a
    /// [`DrainBody`] when the response head arrives.
    ///
    /// [`DrainOnDrop`]: crate::DrainOnDrop
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        // `Option` so the policy moves into the body instead of being cloned.
        policy: Option<Arc<Policy>>,
        request_close: bool,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(inner: F, policy: Arc<Policy>, request_close: bool) -> Self {
        ResponseFuture {
            inner,
            policy: Some(policy),
            request_close,
        }
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
        let response = ready!(this.inner.poll(cx))?;
        let policy = this
            .policy
            .take()
            .expect("ResponseFuture polled after completion");
        let head = policy::inspect(*this.request_close, response.version(), response.headers());
        Poll::Ready(Ok(response.map(|body| DrainBody::new(body, policy, head))))
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("request_close", &self.request_close)
            .finish_non_exhaustive()
    }
}
