//! What a response's drain needs from its request, read in `call`.

use std::any::TypeId;
use std::sync::Arc;
use std::time::Instant;

use http::Request;

use crate::budget::DrainBudget;
use crate::origin::Origin;
use crate::policy::RequestSays;
use crate::shared::Shared;
use crate::stats::Trace;

/// What `call` learns from the request, for its response's body.
pub(crate) struct RequestInfo {
    pub(crate) shared: Arc<Shared>,
    pub(crate) says: RequestSays,
    /// A per-request [`DrainBudget`] from the extensions.
    pub(crate) budget: Option<DrainBudget>,
    /// The span and origin for the drop's event, when DEBUG is enabled.
    pub(crate) trace: Option<Box<Trace>>,
    /// The request's origin, whose estimates its drain's budget follows.
    pub(crate) origin: Option<Arc<Origin>>,
    /// When the request was called: the time to its response head is a
    /// sample of the origin's round trip.
    pub(crate) sent_at: Option<Instant>,
}

impl RequestInfo {
    pub(crate) fn read<B>(shared: &Arc<Shared>, req: &Request<B>) -> Self {
        let origin = shared.origins.get(req.uri());
        let trace = tracing::enabled!(target: "drain_on_drop", tracing::Level::DEBUG)
            .then(|| Trace::capture(origin.as_ref().map(|o| o.key().to_string()).unwrap_or_default()));
        let extensions = req.extensions();
        RequestInfo {
            shared: Arc::clone(shared),
            says: RequestSays::read(req.headers()),
            budget: if extensions.is_empty() { None } else { extensions.get::<DrainBudget>().copied() },
            trace,
            origin,
            sent_at: Some(Instant::now()),
        }
    }

    /// For a response with a body of type `B` that came without its request
    /// ([`wrap_response`](crate::DrainOnDropLayer::wrap_response)): framed
    /// as its headers say only if it is hyper's own body.
    pub(crate) fn none<B: 'static>(shared: &Arc<Shared>) -> Self {
        let shared = Arc::clone(shared);
        let trace = tracing::enabled!(target: "drain_on_drop", tracing::Level::DEBUG)
            .then(|| Trace::capture(String::new()));
        let says = if TypeId::of::<B>() == TypeId::of::<hyper::body::Incoming>() {
            RequestSays::default()
        } else {
            RequestSays::unknown()
        };
        RequestInfo { shared, says, budget: None, trace, origin: None, sent_at: None }
    }
}
