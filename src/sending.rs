//! [`Sending`]: a request sent outside the layer, whose response gets the
//! layer's drain (see `DrainOnDropLayer::sending`).

use std::fmt;

use http::{Extensions, HeaderMap, Response, Uri};
use http_body::Body;

use crate::body::DrainBody;
use crate::policy;
use crate::request::RequestInfo;

/// A request about to be sent outside the layer, noted by
/// [`DrainOnDropLayer::sending`](crate::DrainOnDropLayer::sending): give it its response with
/// [`wrap_response`](Self::wrap_response), and the drain of that response
/// gets what the layer's own get: the origin's round trip (timed from
/// `sending` to the response head), the request's `Connection: close` and
/// [`DrainBudget`](crate::DrainBudget), adaptive estimates, counting and
/// events.
///
/// Dropped without a response (the request failed), it records nothing.
#[must_use = "a sending request does nothing until its response is wrapped"]
pub struct Sending {
    request: RequestInfo,
}

impl Sending {
    pub(crate) fn new(request: RequestInfo) -> Self {
        Sending { request }
    }

    /// Puts the drain on the response to this request.
    ///
    /// hyper's own body (`hyper::body::Incoming`) is framed as its headers
    /// say, and a close-delimited one is skipped; any other body's headers
    /// are not trusted to describe the wire framing (reqwest removes
    /// `Content-Length` from bodies it decompresses), so a body without
    /// `Content-Length` or chunking is drained within the budgets rather
    /// than skipped. A response that already carries a drain is passed
    /// through.
    pub fn wrap_response<B>(self, res: Response<B>) -> Response<DrainBody<B>>
    where
        B: Body + Send + 'static,
    {
        let mut request = self.request;
        request.says = request.says.for_body(policy::runs_in_the_drop::<B>());
        DrainBody::wrap(res, request)
    }

    /// The response came from `uri`, not from the URI the request was
    /// noted with: the client followed redirects (reqwest does, inside
    /// `send` and `execute`; its `Response::url()` says where the response
    /// came from). The drain then follows the origin of `uri`, its round
    /// trip and budget (and [`origins`](crate::DrainOnDropLayer::origins)
    /// lists it), not the first request's; the request's `Connection:
    /// close` and [`DrainBudget`](crate::DrainBudget) still apply.
    ///
    /// The response's round trip sample is still timed from the first
    /// request, so it includes the hops before: an upper bound of the
    /// origin's round trip, which is the shortest of its last samples. A
    /// `uri` that names no host changes nothing.
    ///
    /// ```
    /// use drain_on_drop::DrainOnDropLayer;
    ///
    /// let layer = DrainOnDropLayer::new();
    /// let asked: http::Uri = "http://near.example/old".parse().unwrap();
    /// let sending = layer.sending_head(&asked, &http::HeaderMap::new(), &http::Extensions::new());
    /// // ... the client follows a redirect and answers from elsewhere ...
    /// let answered: http::Uri = "https://far.example/new".parse().unwrap();
    /// let sending = if answered == asked { sending } else { sending.redirected_to(&answered) };
    /// # drop(sending);
    /// ```
    pub fn redirected_to(self, uri: &Uri) -> Sending {
        if uri.host().is_none() {
            return self;
        }
        let from = self.request;
        let mut to =
            RequestInfo::of_head(&from.shared, uri, &HeaderMap::new(), &Extensions::new(), &mut None);
        to.says = from.says;
        to.budget = from.budget;
        to.sent_at = from.sent_at;
        // The event stays in the request's span, with the new origin.
        to.trace = match (from.trace, to.trace.take()) {
            (Some(mut trace), Some(now)) => {
                trace.origin = now.origin;
                Some(trace)
            }
            (trace, _) => trace,
        };
        Sending { request: to }
    }
}

impl fmt::Debug for Sending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the origin: it may carry what the user keeps out of logs.
        f.debug_struct("Sending").finish_non_exhaustive()
    }
}
