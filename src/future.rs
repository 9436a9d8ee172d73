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
        ResponseFuture { inner, policy: Some(policy), request }
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
        let policy = this.policy.take().expect("ResponseFuture polled after completion");
        let reuse = ConnectionTag::take(response.extensions_mut());
        if let Some(conn) = reuse {
            policy.stats.response(conn.reused);
        }
        let request = std::mem::take(this.request);
        let origin = policy.observe_head(&request, reuse, response.extensions());
        let head = policy.inspect(&request, response.version(), response.headers());
        let budget = request.budget;
        Poll::Ready(Ok(response.map(|body| DrainBody::new(body, policy, head, budget, origin))))
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").field("request", &self.request).finish_non_exhaustive()
    }
}
