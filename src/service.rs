use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use crate::body::DrainBody;
use crate::future::ResponseFuture;
use crate::request::{LastOrigin, RequestInfo};
use crate::shared::Shared;
use crate::stats::DrainStats;

/// Middleware that drains response bodies dropped before their end, so the
/// HTTP/1 connection goes back to the pool. Built by
/// [`DrainOnDropLayer`](crate::DrainOnDropLayer).
///
/// Responses come back with a [`DrainBody`] around the inner body; errors are
/// the inner service's, unchanged. A response drains once however it is
/// wrapped: stacked, the innermost `DrainOnDrop` owns its drain and outer
/// ones (and [`wrap_response`](crate::DrainOnDropLayer::wrap_response))
/// pass it through.
#[derive(Clone)]
pub struct DrainOnDrop<S> {
    inner: S,
    shared: Arc<Shared>,
    /// The origin of its last request (see `request::LastOrigin`).
    last: LastOrigin,
}

impl<S: fmt::Debug> fmt::Debug for DrainOnDrop<S> {
    /// The inner service and the layer's state; not the last origin (a
    /// host the user may keep out of logs).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DrainOnDrop").field("inner", &self.inner).field("shared", &self.shared).finish()
    }
}

impl<S> DrainOnDrop<S> {
    pub(crate) fn from_shared(inner: S, shared: Arc<Shared>) -> Self {
        DrainOnDrop { inner, shared, last: None }
    }

    /// The counters this service reports into (shared with its layer).
    pub fn stats(&self) -> DrainStats {
        self.shared.stats.clone()
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

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for DrainOnDrop<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: Body + Send + 'static,
{
    type Response = Response<DrainBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        let request = RequestInfo::read_for_client(&self.shared, &mut req, &mut self.last);
        ResponseFuture::new(self.inner.call(req), request)
    }
}
