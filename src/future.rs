use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::Response;
use http_body::Body;
use pin_project_lite::pin_project;

use crate::body::DrainBody;
use crate::observe::ConnectionTag;
use crate::policy::{Policy, RequestInfo};

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
        request: RequestInfo,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(inner: F, policy: Arc<Policy>, request: RequestInfo) -> Self {
        ResponseFuture {
            inner,
            policy: Some(policy),
            request,
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
        let mut response = ready!(this.inner.poll(cx))?;
        let policy = this
            .policy
            .take()
            .expect("ResponseFuture polled after completion");
        if let Some(conn) = ConnectionTag::take(response.extensions_mut()) {
            policy.stats.response(conn.reused);
        }
        let head = policy.inspect(*this.request, response.version(), response.headers());
        let budget = this.request.budget;
        Poll::Ready(Ok(
            response.map(|body| DrainBody::new(body, policy, head, budget))
        ))
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("request", &self.request)
            .finish_non_exhaustive()
    }
}
