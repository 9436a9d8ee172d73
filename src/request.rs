//! What a response's drain needs from its request, read in `call`.

use std::sync::Arc;

use http::Request;

use crate::adaptive::{Origin, OriginKey};
use crate::budget::DrainBudget;
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
    /// In adaptive mode: the request's origin.
    pub(crate) origin: Option<Arc<Origin>>,
}

impl RequestInfo {
    pub(crate) fn read<B>(shared: &Arc<Shared>, req: &Request<B>) -> Self {
        let traced = tracing::enabled!(target: "drain_on_drop", tracing::Level::DEBUG);
        // Parsed once, for the origin table and the event alike.
        let key = (shared.config.adaptive || traced).then(|| OriginKey::from_uri(req.uri())).flatten();
        let trace = traced.then(|| Trace::capture(key.as_ref().map(|k| k.to_string()).unwrap_or_default()));
        let origin = key.filter(|_| shared.config.adaptive).map(|key| shared.origins.get(&key));
        let extensions = req.extensions();
        RequestInfo {
            shared: Arc::clone(shared),
            says: RequestSays::read(req.headers()),
            budget: if extensions.is_empty() { None } else { extensions.get::<DrainBudget>().copied() },
            trace,
            origin,
        }
    }

    /// For a response that came without its request
    /// ([`wrap_response`](crate::DrainOnDropLayer::wrap_response)).
    pub(crate) fn none(shared: &Arc<Shared>) -> Self {
        let shared = Arc::clone(shared);
        let trace = tracing::enabled!(target: "drain_on_drop", tracing::Level::DEBUG)
            .then(|| Trace::capture(String::new()));
        RequestInfo { shared, says: RequestSays::unknown(), budget: None, trace, origin: None }
    }
}
