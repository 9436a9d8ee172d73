//! The layer as a `reqwest_middleware::Middleware` (cargo feature
//! `reqwest-middleware`): `ClientBuilder::new(client).with(layer.clone())`,
//! and every response of the client comes back with the drain on its body,
//! call sites unchanged.

use std::future::Future;
use std::pin::Pin;

use http::{Extensions, Uri};
use reqwest::ResponseBuilderExt;
use reqwest_middleware::{Middleware, Next, Result};

use crate::layer::DrainOnDropLayer;

/// Drains the bodies of a `reqwest_middleware` client's responses dropped
/// before their end, as the layer does for hyper-util's client: each
/// response's drain follows the round trip of the origin it came from
/// (timed from the middleware to the response head), honours the request's
/// `Connection: close` and a [`DrainBudget`](crate::DrainBudget) given with
/// `RequestBuilder::with_extension`, and is counted in the layer's stats.
///
/// Put it last (innermost), after retry and tracing middleware, so that it
/// sees every response, including the ones a retry middleware discards:
/// further out, it never sees those, and their connections close.
///
/// A response reqwest got by following redirects is drained under the
/// origin it came from (`Response::url()`), not the first request's (see
/// [`Sending::redirected_to`](crate::Sending::redirected_to)). What it
/// cannot see:
///
/// - the redirects and retries that happen inside reqwest itself: its own
///   redirect policy drops 3xx bodies before any middleware runs (turn it
///   off with `redirect::Policy::none()` to drain them);
/// - connection reuse: reqwest's connector is private, so
///   [`DrainStats::reuse`](crate::DrainStats::reuse) stays at zero and
///   responses carry no [`ConnectionReuse`](crate::ConnectionReuse), and
///   adaptive budgets, which need the connector, fall back to the default;
/// - with reqwest's `gzip`, `brotli`, `deflate` or `zstd` decompression
///   on, the wire: the body is the decompressed one, so `max_bytes` and
///   `bytes_drained` count decompressed bytes, `Content-Length` is gone,
///   and a body that inflates past the byte budget is given up
///   (`over_bytes`) although its few compressed bytes may have been read
///   to the end.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use drain_on_drop::DrainOnDropLayer;
///
/// let layer = DrainOnDropLayer::new();
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(layer.clone()).build();
/// let res = client.get("https://example.com/").send().await?;
/// println!("{}", res.status()); // dropped unread: drained, the connection kept
/// # Ok(())
/// # }
/// ```
impl Middleware for DrainOnDropLayer {
    fn handle<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        req: reqwest::Request,
        extensions: &'life1 mut Extensions,
        next: Next<'life2>,
    ) -> Pin<Box<dyn Future<Output = Result<reqwest::Response>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            // A `Url` is always a valid `Uri`; were it not, the origin is
            // unknown (fixed budgets, one WARN), and the drain still runs.
            let uri = Uri::try_from(req.url().as_str()).unwrap_or_default();
            let sending = self.sending_head(&uri, req.headers(), extensions);
            let asked = req.url().clone();
            let res = next.run(req, extensions).await?;
            let url = res.url().clone();
            // reqwest followed redirects: drain under the origin that answered.
            let sending = if url == asked {
                sending
            } else {
                sending.redirected_to(&Uri::try_from(url.as_str()).unwrap_or_default())
            };
            let mut res = sending.wrap_response(http::Response::from(res)).map(reqwest::Body::wrap);
            // `Response::url()` comes from an extension `From` drops.
            let (with_url, ()) = http::Response::builder().url(url).body(()).unwrap_or_default().into_parts();
            res.extensions_mut().extend(with_url.extensions);
            Ok(reqwest::Response::from(res))
        })
    }
}
