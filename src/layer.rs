use std::cell::RefCell;
use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::Response;
use http_body::Body;
use tokio::runtime::Handle;
use tower_layer::Layer;

use crate::adaptive::{self, OriginSnapshot, Origins};
use crate::body::DrainBody;
use crate::budget::DrainBudget;
use crate::future::RequestInfo;
use crate::observe::ObserveConnector;
use crate::service::DrainOnDrop;
use crate::stats::DrainStats;

/// The layer's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Config {
    pub(crate) max_bytes: u64,
    pub(crate) max_time: Duration,
    pub(crate) max_concurrent_drains: usize,
    /// Media types (lowercase, no parameters) of open-ended streams.
    pub(crate) stream_types: Arc<[String]>,
    /// Budgets follow per-origin estimates (see `adaptive.rs`).
    pub(crate) adaptive: bool,
    /// `max_bytes` / `max_time` were set by the user: in adaptive mode they
    /// are the ceilings, otherwise the adaptive defaults are.
    pub(crate) explicit_bytes: bool,
    pub(crate) explicit_time: bool,
}

impl Config {
    /// The fixed budgets.
    pub(crate) fn budget(&self) -> DrainBudget {
        DrainBudget::new(self.max_bytes, self.max_time)
    }

    /// The most an adaptive drain may spend.
    pub(crate) fn ceiling(&self) -> DrainBudget {
        DrainBudget::new(
            if self.explicit_bytes { self.max_bytes } else { adaptive::DEFAULT_CEILING_BYTES },
            if self.explicit_time { self.max_time } else { adaptive::DEFAULT_CEILING_TIME },
        )
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_bytes: 256 * 1024,
            max_time: Duration::from_millis(50),
            max_concurrent_drains: 1024,
            stream_types: Arc::from(vec!["text/event-stream".to_string()]),
            adaptive: false,
            explicit_bytes: false,
            explicit_time: false,
        }
    }
}

/// What every service built from one layer, and every body they return,
/// shares: the settings, the counters, the adaptive origin table, and the
/// runtime for bodies dropped outside any.
#[derive(Clone, Default)]
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) stats: DrainStats,
    pub(crate) origins: Arc<Origins>,
    /// The runtime the layer first served a request on: where a body dropped
    /// outside any runtime drains (see `policy::runtime`).
    pub(crate) home: OnceLock<Handle>,
}

impl Shared {
    /// Notes the current runtime as home, if there is none yet: one load
    /// per request after the first.
    pub(crate) fn note_home(&self) {
        if self.home.get().is_none()
            && let Ok(handle) = Handle::try_current()
        {
            let _ = self.home.set(handle);
        }
    }
}

/// A reference to a layer's [`Shared`] state, held by each response future
/// and body, that costs no atomic operation in the common case.
///
/// A plain `Arc` clone per request and its release when the body is done
/// are two atomic read-modify-writes on every response, read to the end or
/// not. Instead, a reference is given back to its thread's spares when it
/// is dropped, and the next request on that thread takes it from there: a
/// caller that sends a request after reading the last response to its end
/// hands the same reference on and on. The `Arc` is cloned only when the
/// thread has no spare of this layer (the first request, or a thread that
/// only sends), and released only when the spares are full (a thread that
/// only drops). Each thread keeps at most [`SPARES`] of them, released when
/// the thread exits: a layer's state may outlive its last handle by that
/// much, which nothing can observe but its memory.
pub(crate) struct SharedRef(Option<Arc<Shared>>);

/// References kept per thread (see [`SharedRef`]).
const SPARES: usize = 8;

thread_local! {
    static SPARE: RefCell<Vec<Arc<Shared>>> = const { RefCell::new(Vec::new()) };
}

impl SharedRef {
    /// A reference to `shared`: a spare of this thread's if it has one.
    pub(crate) fn new(shared: &Arc<Shared>) -> Self {
        let spare = SPARE
            .try_with(|spare| {
                let mut spare = spare.try_borrow_mut().ok()?;
                let at = spare.iter().rposition(|s| Arc::ptr_eq(s, shared))?;
                Some(spare.swap_remove(at))
            })
            .ok()
            .flatten();
        SharedRef(Some(spare.unwrap_or_else(|| Arc::clone(shared))))
    }
}

impl Deref for SharedRef {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        self.0.as_deref().expect("present until dropped")
    }
}

impl Drop for SharedRef {
    fn drop(&mut self) {
        let Some(shared) = self.0.take() else { return };
        // Released outside the borrow: it may be the last reference.
        let _released = SPARE.try_with(move |spare| match spare.try_borrow_mut() {
            Ok(mut spare) if spare.len() < SPARES => {
                spare.push(shared);
                None
            }
            _ => Some(shared),
        });
    }
}

impl fmt::Debug for Shared {
    /// The settings and counters; origins by number only (their names are
    /// hosts the user may not want in logs).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DrainOnDrop")
            .field("config", &self.config)
            .field("stats", &self.stats)
            .field("origins", &self.origins.len())
            .finish()
    }
}

/// Wraps a client service in [`DrainOnDrop`]: response bodies dropped before
/// their end are drained in the background so the connection can be pooled.
///
/// The layer holds configuration and a [`DrainStats`] handle. Clones of the
/// layer, and every service built from it, share those counters.
///
/// ```
/// use std::time::Duration;
/// use drain_on_drop::DrainOnDropLayer;
///
/// let layer = DrainOnDropLayer::new()
///     .max_bytes(1024 * 1024)
///     .max_time(Duration::from_millis(200));
/// let stats = layer.stats();
/// assert_eq!(stats.snapshot().drained, 0);
/// ```
#[derive(Clone, Debug)]
pub struct DrainOnDropLayer {
    shared: Arc<Shared>,
}

impl DrainOnDropLayer {
    /// A layer with the default budgets: 256 KiB and 50 ms (Go 1.27's
    /// choice), and at most 1024 drains running at once.
    pub fn new() -> Self {
        DrainOnDropLayer { shared: Arc::new(Shared::default()) }
    }

    fn config(mut self, f: impl FnOnce(&mut Config)) -> Self {
        f(&mut Arc::make_mut(&mut self.shared).config);
        self
    }

    /// Byte budget: the data bytes one drain may read.
    ///
    /// A body whose remaining length is known (`Content-Length`) and larger
    /// is not drained at all (`declared_over_budget`: zero bytes read). A
    /// body of unknown length (chunked) is read until a frame takes the drain
    /// past the budget; it then reads one more frame to see whether the body
    /// ends there. If only the end marker or trailers were left, the body is
    /// drained (`end_of_body`) and the connection reused: the drain finishes
    /// what it paid for. Otherwise it is abandoned (`over_bytes`). So a drain
    /// reads at most `max_bytes` plus two of hyper's frames (a frame is one
    /// chunk, or what one read of hyper's buffer holds of it; with 16 KiB
    /// chunks, at most `max_bytes + 32 KiB`), all within `max_time`.
    ///
    /// An abandoned body is dropped, and hyper closes the connection unless
    /// the rest of the body is already in its buffer: then hyper's own read
    /// at the drop finishes it and the connection is pooled although the
    /// drop counts as `abandoned` (the layer cannot see hyper's buffer).
    ///
    /// `0` disables draining. Default is 256 KiB (262,144 bytes).
    ///
    /// ```
    /// # use drain_on_drop::DrainOnDropLayer;
    /// // Drain error pages and small JSON replies, never downloads.
    /// let layer = DrainOnDropLayer::new().max_bytes(64 * 1024);
    /// ```
    pub fn max_bytes(self, max_bytes: u64) -> Self {
        self.config(|c| {
            c.max_bytes = max_bytes;
            c.explicit_bytes = true;
        })
    }

    /// Time budget: a drain is abandoned this long after the body was
    /// dropped, whatever the server does (stalls, trickles, never ends).
    ///
    /// Zero disables draining. Default is 50 ms.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use drain_on_drop::DrainOnDropLayer;
    /// // A far origin where a new TLS connection costs 300 ms.
    /// let layer = DrainOnDropLayer::new().max_time(Duration::from_millis(250));
    /// ```
    pub fn max_time(self, max_time: Duration) -> Self {
        self.config(|c| {
            c.max_time = max_time;
            c.explicit_time = true;
        })
    }

    /// The most drains running at once in the background, across every
    /// service built from this layer. A body dropped while that many drains
    /// run is not drained (counted as skipped, `saturated`), so a flood of
    /// early drops cannot grow background work without bound. A drain that
    /// ends in the drop itself (the rest of the body was already buffered)
    /// runs no task and takes no place.
    ///
    /// A drain lasts at most `max_time`, so the number running is about the
    /// rate of early drops times their drain time: 10,000 drops a second of
    /// bodies that stall for the whole 50 ms default is 500. Each running
    /// drain holds one connection (which hyper would otherwise close) and a
    /// small task. `0` disables draining. Default is 1024.
    ///
    /// ```
    /// # use drain_on_drop::DrainOnDropLayer;
    /// let layer = DrainOnDropLayer::new().max_concurrent_drains(64);
    /// ```
    pub fn max_concurrent_drains(self, max: usize) -> Self {
        self.config(|c| c.max_concurrent_drains = max)
    }

    /// Response media types that are open-ended streams: an early drop of
    /// such a body is not drained (it would only burn the time budget on a
    /// stream that does not end) and its connection is closed at once,
    /// counted as skipped (`stream`). Matched case-insensitively against
    /// the `Content-Type` without its parameters. Replaces the list; pass an
    /// empty list to drain streams like any other body.
    ///
    /// Default is `["text/event-stream"]`.
    ///
    /// ```
    /// # use drain_on_drop::DrainOnDropLayer;
    /// // Also treat NDJSON as a stream.
    /// let layer = DrainOnDropLayer::new()
    ///     .stream_content_types(["text/event-stream", "application/x-ndjson"]);
    /// // Drain everything, streams included.
    /// let layer = DrainOnDropLayer::new().stream_content_types(Vec::<String>::new());
    /// ```
    pub fn stream_content_types<I>(self, types: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let types: Vec<String> = types.into_iter().map(|t| t.into().trim().to_ascii_lowercase()).collect();
        self.config(|c| c.stream_types = Arc::from(types))
    }

    /// Switches to adaptive budgets: per origin, drain only when reading the
    /// rest is expected to cost less than a new connection.
    ///
    /// For each origin (`scheme://host:port`) the layer keeps what a new
    /// connection costs (the connector's own time, measured by the
    /// [`observe`](Self::observe) wrapper: **adaptive mode needs it**; put
    /// it around the TLS connector so the handshake is counted) and how fast
    /// the link delivers drained bodies (the highest of the last drains'
    /// rates). A drain then gets a time budget of that setup cost and a byte
    /// budget of what the link moves in that time; a body whose remaining
    /// length is known and larger is not drained at all
    /// (`declared_over_budget`), and an origin where any drain costs more
    /// than a reconnect skips them (`reconnect_cheaper`).
    ///
    /// Until the link was measured, an origin gets the larger of the fixed
    /// budgets and what 100 Mbit/s moves in its setup cost, so adaptive mode
    /// is never below the fixed default on a short run. Without an observer,
    /// or before the origin's first new connection, the fixed budgets apply.
    ///
    /// [`max_bytes`](Self::max_bytes) and [`max_time`](Self::max_time), when
    /// set, are hard ceilings (and the fixed budgets); otherwise the
    /// ceilings are 4 MiB and 1 s. At most 256 origins are tracked per layer,
    /// least recently used forgotten first; [`origins`](Self::origins) shows
    /// the estimates, and each drop's DEBUG event the figures it was decided
    /// with. Default is off.
    ///
    /// ```
    /// use drain_on_drop::DrainOnDropLayer;
    /// use http_body_util::Empty;
    /// use hyper::body::Bytes;
    /// use hyper_util::client::legacy::{Client, connect::HttpConnector};
    /// use hyper_util::rt::TokioExecutor;
    /// use tower::ServiceBuilder;
    ///
    /// // Adaptive, never more than 2 MiB or 500 ms per drain.
    /// let layer = DrainOnDropLayer::new()
    ///     .adaptive()
    ///     .max_bytes(2 * 1024 * 1024)
    ///     .max_time(std::time::Duration::from_millis(500));
    /// let connector = layer.observe(HttpConnector::new()); // measures the setup cost
    /// let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
    /// let svc = ServiceBuilder::new().layer(layer).service(client);
    /// ```
    pub fn adaptive(self) -> Self {
        self.config(|c| c.adaptive = true)
    }

    /// Wraps a hyper-util connector in an [`ObserveConnector`] counting into
    /// this layer's [`DrainStats::reuse`]: `connections_opened`, and, for
    /// responses through services built from this layer, `requests` and
    /// `reused`, plus a
    /// [`ConnectionReuse`](crate::ConnectionReuse) in each response's
    /// extensions.
    pub fn observe<C>(&self, connector: C) -> ObserveConnector<C> {
        ObserveConnector::new(connector, self.stats())
    }

    /// The counters shared by this layer, its clones and every service built
    /// from them.
    pub fn stats(&self) -> DrainStats {
        self.shared.stats.clone()
    }

    /// Per-origin estimates of the adaptive mode ([`adaptive`](Self::adaptive)),
    /// sorted by origin, with the budget an early drop from each would get
    /// now under this layer's ceilings; empty when adaptive mode is off.
    pub fn origins(&self) -> Vec<OriginSnapshot> {
        self.shared.origins.snapshot(self.shared.config.ceiling(), self.shared.config.budget())
    }

    /// Puts the drain on a response that did not come through a service
    /// built from this layer, such as one from `reqwest` (see the README's
    /// "Using reqwest"). The body is drained on an early drop with this
    /// layer's budgets, rules and counters, minus what only the request
    /// could say: a request's `Connection: close` or [`DrainBudget`], and
    /// adaptive estimates (the fixed budgets apply). Its headers are not
    /// trusted to describe the wire framing (reqwest removes
    /// `Content-Length` from bodies it decompresses), so a body without
    /// `Content-Length` or chunking is drained within the budgets rather
    /// than skipped as close-delimited. A drain that has to wait runs on
    /// the runtime current at the drop, as for the layer's own responses
    /// (see the [crate documentation](crate#runtime)).
    ///
    /// A response that already carries a drain (it came through a
    /// `DrainOnDrop`) is passed through: it is drained once.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use drain_on_drop::DrainOnDropLayer;
    ///
    /// let layer = DrainOnDropLayer::new();
    /// let res = http::Response::new(http_body_util::Full::new(bytes::Bytes::from("hello")));
    /// let res = layer.wrap_response(res);
    /// drop(res); // dropped unread: drained (here at once, the body is in memory)
    /// # }
    /// ```
    pub fn wrap_response<B>(&self, res: Response<B>) -> Response<DrainBody<B>>
    where
        B: Body + Send + Unpin + 'static,
    {
        DrainBody::wrap(res, RequestInfo::none(&self.shared))
    }
}

impl Default for DrainOnDropLayer {
    /// Same as [`DrainOnDropLayer::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for DrainOnDropLayer {
    type Service = DrainOnDrop<S>;

    fn layer(&self, inner: S) -> Self::Service {
        DrainOnDrop::from_shared(inner, self.shared.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_hands_its_references_on_and_keeps_few() {
        let shared = Arc::new(Shared::default());
        let other = Arc::new(Shared::default());
        drop(SharedRef::new(&shared));
        assert_eq!(Arc::strong_count(&shared), 2, "one spare kept");
        let taken = SharedRef::new(&shared);
        assert_eq!(Arc::strong_count(&shared), 2, "the spare handed on, not a new clone");
        let unrelated = SharedRef::new(&other);
        assert!(std::ptr::eq(&*unrelated, &*other), "a spare of another layer is not taken");
        drop((taken, unrelated));
        let many: Vec<_> = (0..3 * SPARES).map(|_| SharedRef::new(&shared)).collect();
        drop(many);
        let spares = Arc::strong_count(&shared) - 1 + Arc::strong_count(&other) - 1;
        assert_eq!(spares, SPARES, "at most {SPARES} spares per thread, the rest released");
        let before = Arc::strong_count(&shared);
        std::thread::spawn({
            let shared = shared.clone();
            move || drop(SharedRef::new(&shared))
        })
        .join()
        .unwrap();
        assert_eq!(Arc::strong_count(&shared), before, "a thread's spares go when it exits");
    }

    #[test]
    fn responses_read_to_the_end_take_no_new_reference() {
        use http_body_util::BodyExt;
        use tower_service::Service;

        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let layer = DrainOnDropLayer::new();
        let mut svc = layer.layer(tower::service_fn(|_: http::Request<()>| async {
            let body = http_body_util::Full::new(bytes::Bytes::from_static(b"0123456789"));
            Ok::<_, std::convert::Infallible>(
                Response::builder().header("content-length", 10).body(body).unwrap(),
            )
        }));
        let mut counts = Vec::new();
        rt.block_on(async {
            for _ in 0..5 {
                let res = svc.call(http::Request::new(())).await.unwrap();
                // A plain clone would count one more while the body lives.
                counts.push(Arc::strong_count(&layer.shared));
                res.into_body().collect().await.unwrap();
                counts.push(Arc::strong_count(&layer.shared));
            }
        });
        assert!(counts[1..].windows(2).all(|w| w[0] == w[1]), "one reference handed on: {counts:?}");
        assert_eq!(layer.stats().snapshot().total(crate::Outcome::Drained), 0, "nothing counted");
    }
}
