//! What a response's drain needs from its request, read in `call`: no lock,
//! no allocation (but the DEBUG event's origin name, when that event is
//! enabled).

use std::sync::Arc;
use std::time::Instant;

use http::{Extensions, HeaderMap, Request, Uri};
use hyper_util::client::legacy::connect::CaptureConnection;
#[cfg(feature = "http2")]
use hyper_util::client::legacy::connect::capture_connection;

use crate::budget::DrainBudget;
use crate::event::{self, Trace};
use crate::headers::RequestSays;
use crate::origin::Origin;
use crate::shared::Shared;
use crate::stats::SentAgain;

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
    /// The connection hyper-util's `Client` sends it on, asked for while a
    /// connection of its origin (an `Http2Connector`'s) lacks hyper-util's
    /// view of itself, through which it moves on (`connector::Link`): once
    /// per connection.
    #[cfg(feature = "http2")]
    pub(crate) captured: Option<CaptureConnection>,
}

/// The origin a service's last request went to: the next request to the
/// same origin, spelled the same way, finds it here rather than in the
/// layer's table (no lock, no parsing: the common case, one service per
/// client or per caller).
pub(crate) type LastOrigin = Option<Arc<Origin>>;

impl RequestInfo {
    pub(crate) fn read<B>(shared: &Arc<Shared>, req: &Request<B>, last: &mut LastOrigin) -> Self {
        RequestInfo::of_head(shared, req.uri(), req.headers(), req.extensions(), last)
    }

    /// The same for a request the layer's service sends through the inner
    /// one (hyper-util's `Client`, which can say which connection it goes
    /// on: asked while one of its origin's `Http2Connector` connections
    /// needs it, see `captured`).
    #[inline]
    pub(crate) fn read_for_client<B>(
        shared: &Arc<Shared>,
        req: &mut Request<B>,
        last: &mut LastOrigin,
    ) -> Self {
        let origin = origin_of(shared, req.uri(), req.headers(), last);
        #[cfg(feature = "http2")]
        let captured = origin.as_ref().and_then(|origin| origin.captures().then(|| capture_connection(req)));
        #[cfg(not(feature = "http2"))]
        let captured = None;
        RequestInfo::with_origin(shared, req.headers(), req.extensions(), origin, captured)
    }

    /// The same from a request's head, about to be sent now.
    pub(crate) fn of_head(
        shared: &Arc<Shared>,
        uri: &Uri,
        headers: &HeaderMap,
        extensions: &Extensions,
        last: &mut LastOrigin,
    ) -> Self {
        let origin = origin_of(shared, uri, headers, last);
        RequestInfo::with_origin(shared, headers, extensions, origin, None)
    }

    /// The rest of what `call` learns, once the request's origin is known:
    /// built once, in place, and inlined into `call` (`bash
    /// benches/callgrind.sh`, when it was written: a response read to its
    /// end cost the layer 25 fewer than with `captured` set on `of_head`'s
    /// result).
    #[inline]
    fn with_origin(
        shared: &Arc<Shared>,
        headers: &HeaderMap,
        extensions: &Extensions,
        origin: Option<Arc<Origin>>,
        #[cfg_attr(not(feature = "http2"), expect(unused_variables))] captured: Option<CaptureConnection>,
    ) -> Self {
        let trace = event::debug_enabled()
            .then(|| Trace::capture(origin.as_ref().map(|o| o.name()).unwrap_or_default()));
        RequestInfo {
            shared: Arc::clone(shared),
            says: RequestSays::read(headers),
            budget: if extensions.is_empty() { None } else { read_extensions(shared, extensions) },
            trace,
            origin,
            sent_at: Some(Instant::now()),
            #[cfg(feature = "http2")]
            captured,
        }
    }

    /// For a response that came without its request
    /// ([`wrap_response`](crate::DrainOnDropLayer::wrap_response)), whose
    /// body is hyper's own when `hyper_body` (framed as its headers say).
    pub(crate) fn none(shared: &Arc<Shared>, hyper_body: bool) -> Self {
        RequestInfo {
            shared: Arc::clone(shared),
            says: RequestSays::no_request(hyper_body),
            budget: None,
            trace: event::debug_enabled().then(|| Trace::capture(String::new())),
            origin: None,
            sent_at: None,
            #[cfg(feature = "http2")]
            captured: None,
        }
    }
}

/// What a request's extensions say: its own [`DrainBudget`], and whether
/// `RetryRefused` sends it again (counted: `sent_again`).
#[inline(never)]
fn read_extensions(shared: &Shared, extensions: &Extensions) -> Option<DrainBudget> {
    if extensions.get::<SentAgain>().is_some() {
        shared.stats.sent_again();
    }
    extensions.get::<DrainBudget>().copied()
}

/// The origin of a request for `uri`: the service's last one when it is
/// spelled the same, else [`find`]'s.
#[inline]
fn origin_of(shared: &Shared, uri: &Uri, headers: &HeaderMap, last: &mut LastOrigin) -> Option<Arc<Origin>> {
    match (last.as_ref(), uri.authority()) {
        (Some(origin), Some(authority)) if origin.spelled(uri.scheme_str(), authority.as_str()) => {
            Some(origin.clone())
        }
        _ => find(shared, uri, headers, last),
    }
}

/// The origin of a request for `uri` with `headers` (or the layer's
/// default origin), from the layer's table; kept in `last` for the next
/// request, and, for an absolute URI, spelled as it was.
fn find(shared: &Shared, uri: &Uri, headers: &HeaderMap, last: &mut LastOrigin) -> Option<Arc<Origin>> {
    let target = shared.origins.target(uri, headers).or_else(|| {
        let origin = shared.config.default_origin.as_ref()?;
        shared.origins.target(origin, &HeaderMap::new())
    });
    let Some(target) = target else {
        shared.warn_unknown_origin_once();
        return None;
    };
    let origin = shared.origins.find(&target)?;
    if let Some(authority) = uri.authority() {
        origin.spell(uri.scheme_str(), authority.as_str());
    }
    *last = Some(origin.clone());
    Some(origin)
}
